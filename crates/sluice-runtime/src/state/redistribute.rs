//! Handing the states of the old subtasks of an operator to its new subtasks at restore.

use super::{Deferred, OperatorState, Part};
use crate::key_groups::{key_group_range, subtask_for_key_group};

/// Splits the states written by `old.len()` subtasks among `new_parallelism` subtasks.
///
/// At the same parallelism every subtask gets its own state back. Otherwise the list entries of
/// all old subtasks, in subtask order, are cut into contiguous shares whose sizes differ by at
/// most one, and each keyed entry goes to the subtask owning its key group. For example, list
/// entries `[1, 2, 3]` and `[4]` of two old subtasks become `[1, 2]`, `[3]` and `[4]` for three
/// (the unit test `worked_example_three_new_subtasks`). A keyed store's files go to every new
/// subtask whose key groups they overlap. Broadcast entries are the same on every
/// old subtask: new subtask `i` gets those of old subtask `i % old.len()` (Flink's round robin
/// over the old copies). Tests of operators reach it through `testing::rescale_states`.
///
/// When some old states are stubs (their entries in checkpoint storage, see `deferred.rs`), the
/// entries cannot be dealt out here: new subtask `i` gets a stub that lists every old state and
/// asks for share `i`, and whoever resolves it calls this function with the states read back.
pub(crate) fn redistribute(
    old: Vec<OperatorState>,
    new_parallelism: usize,
    max_parallelism: usize,
) -> Vec<OperatorState> {
    if old.len() == new_parallelism {
        return old;
    }
    if old.iter().any(|s| s.deferred().is_some()) {
        return deferred_shares(old, new_parallelism, max_parallelism);
    }
    // An operator whose every subtask had finished stays finished at any parallelism.
    let finished = !old.is_empty() && old.iter().all(OperatorState::is_finished);
    let mut entries = Vec::new();
    let mut keyed = Vec::new();
    let mut broadcasts = Vec::with_capacity(old.len());
    let mut stores = Vec::new();
    for s in old {
        let (e, k, b, st) = s.into_parts();
        entries.extend(e);
        keyed.extend(k);
        broadcasts.push(b);
        stores.extend(st);
    }
    let n = entries.len();
    let mut out: Vec<(Vec<Vec<u8>>, Vec<_>)> = (0..new_parallelism)
        .map(|_| (Vec::new(), Vec::new()))
        .collect();
    let mut it = entries.into_iter();
    for (i, slot) in out.iter_mut().enumerate() {
        let share = n / new_parallelism + usize::from(i < n % new_parallelism);
        slot.0.extend(it.by_ref().take(share));
    }
    for k in keyed {
        let target = subtask_for_key_group(k.key_group as usize, max_parallelism, new_parallelism);
        out[target].1.push(k);
    }
    out.into_iter()
        .enumerate()
        .map(|(i, (e, k))| {
            let broadcast = if broadcasts.is_empty() {
                Vec::new()
            } else {
                broadcasts[i % broadcasts.len()].clone()
            };
            // Every old store holding some of the subtask's key groups: the restore takes those
            // and drops the rest (Flink hands out keyed state handles the same way).
            let mine = overlapping(&stores, i, max_parallelism, new_parallelism);
            let mut s = OperatorState::from_parts(e, k, broadcast, mine);
            if finished {
                s.mark_finished();
            }
            s
        })
        .collect()
}

/// The handles of `stores` that hold key groups of new subtask `i` of `new_parallelism`.
fn overlapping(
    stores: &[super::StoreHandle],
    i: usize,
    max_parallelism: usize,
    new_parallelism: usize,
) -> Vec<super::StoreHandle> {
    let groups = key_group_range(i, max_parallelism, new_parallelism);
    stores
        .iter()
        .filter(|h| h.key_groups.start.max(groups.start) < h.key_groups.end.min(groups.end))
        .cloned()
        .collect()
}

/// [`redistribute`] of states some of which are stubs: one stub per new subtask naming every
/// old state and its share, with the store handles and the finished flag it will have once
/// resolved (the job master lists those in the next checkpoint's metadata only after the
/// subtask snapshots again, but a failover before that redeploys this stub as it is).
fn deferred_shares(
    old: Vec<OperatorState>,
    new_parallelism: usize,
    max_parallelism: usize,
) -> Vec<OperatorState> {
    let finished = !old.is_empty() && old.iter().all(OperatorState::is_finished);
    let stores: Vec<super::StoreHandle> = old
        .iter()
        .flat_map(|s| s.store_handles().iter().cloned())
        .collect();
    let parts: Vec<Part> = old.into_iter().map(Part::of).collect();
    (0..new_parallelism)
        .map(|i| {
            let mine = overlapping(&stores, i, max_parallelism, new_parallelism);
            let mut s = OperatorState::from_parts(Vec::new(), Vec::new(), Vec::new(), mine);
            if finished {
                s.mark_finished();
            }
            s.defer(Deferred {
                parts: parts.clone(),
                share: Some((i, new_parallelism)),
            });
            s
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::KeyGroupEntry;
    use proptest::prelude::*;

    #[test]
    fn worked_example_three_new_subtasks() {
        let old = vec![
            OperatorState::from_entries(vec![vec![1], vec![2], vec![3]]),
            OperatorState::from_entries(vec![vec![4]]),
        ];
        let new = redistribute(old, 3, 128);
        let sizes: Vec<usize> = new.iter().map(|s| s.entries().len()).collect();
        assert_eq!(sizes, vec![2, 1, 1]);
        assert_eq!(new[0].entries(), &[vec![1], vec![2]]);
    }

    proptest! {
        /// Nothing is lost or doubled, order is kept, and keyed entries land on their owner.
        #[test]
        fn redistribution_keeps_every_entry_once(
            sizes in proptest::collection::vec(0usize..20, 1..6),
            groups in proptest::collection::vec(0u32..128, 0..40),
            new_p in 1usize..8,
        ) {
            let mut next = 0u32;
            let old: Vec<OperatorState> = sizes.iter().map(|&n| {
                let e = (0..n).map(|_| { next += 1; next.to_le_bytes().to_vec() }).collect();
                OperatorState::from_entries(e)
            }).collect();
            let mut old = old;
            for (i, g) in groups.iter().enumerate() {
                let owner = subtask_for_key_group(*g as usize, 128, old.len());
                old[owner].push_keyed(KeyGroupEntry { state: "s".into(), key_group: *g, data: vec![i as u8] });
            }
            let total_keyed = groups.len();
            let new = redistribute(old, new_p, 128);
            prop_assert_eq!(new.len(), new_p);
            let flat: Vec<u32> = new.iter().flat_map(|s| s.entries().iter())
                .map(|e| u32::from_le_bytes([e[0], e[1], e[2], e[3]])).collect();
            prop_assert_eq!(flat, (1..=next).collect::<Vec<_>>());
            let mut keyed = 0;
            for (s, st) in new.iter().enumerate() {
                for k in st.keyed_entries() {
                    prop_assert_eq!(subtask_for_key_group(k.key_group as usize, 128, new_p), s);
                    keyed += 1;
                }
            }
            prop_assert_eq!(keyed, total_keyed);
        }
    }
}
