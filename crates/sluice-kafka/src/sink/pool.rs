//! The transactional ids of an exactly-once sink, as pure rules.
//!
//! A subtask owns a **group** of `pool_size` ids, `{prefix}-{parallelism}-{subtask}-{slot}`: one
//! transaction per checkpoint takes a free slot, stays pending until its checkpoint completes,
//! and the slot is free again once committed. So the broker sees a bounded set of ids (never a
//! new id per checkpoint), and a slot is given a fresh producer epoch after every commit that
//! reached the broker, so that a stale commit of an older transaction on the same id is refused
//! by the broker rather than committing a newer one.
//!
//! After a restore, every id a transaction of the restored checkpoint could have used must be
//! finished, and by exactly one subtask, so that no subtask aborts an id whose pre-committed
//! transaction another subtask is still committing. Rules:
//! - a subtask commits the pending transactions of the states it received, then fences (and so
//!   aborts whatever is open on) every id of the groups named in those states;
//! - its own group is named after the current parallelism. At the checkpoint's parallelism the
//!   states come back one to one, so its own group is the one it received; at another
//!   parallelism its own group is new: a checkpoint's states only ever name groups of their own
//!   parallelism (foreign groups are fenced in `recover`, before the first checkpoint).
//!
//! ```text
//! checkpoint at parallelism 3: groups p3-0, p3-1, p3-2
//! restore at 2: subtask 0 gets the states of 0 and 1: commits their pending, fences p3-0, p3-1,
//!               then uses p2-0; subtask 1 gets the state of 2: fences p3-2, uses p2-1
//! ```

use std::collections::BTreeSet;

/// A group of ids: the parallelism and subtask it was made for, and its size.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub(crate) struct Group {
    pub(crate) parallelism: u32,
    pub(crate) subtask: u32,
    pub(crate) size: u32,
}

impl Group {
    /// The transactional id of `slot` of this group.
    pub(crate) fn id(&self, prefix: &str, slot: u32) -> String {
        format!("{prefix}-{}-{}-{slot}", self.parallelism, self.subtask)
    }

    /// Every id of the group.
    pub(crate) fn ids(&self, prefix: &str) -> Vec<String> {
        (0..self.size).map(|s| self.id(prefix, s)).collect()
    }
}

/// The groups a restoring subtask fences besides its own: those its received states name,
/// other than its own (which it fences by taking it into use).
pub(crate) fn foreign_groups(own: Group, received: impl IntoIterator<Item = Group>) -> Vec<Group> {
    let mut seen = BTreeSet::new();
    received
        .into_iter()
        .filter(|g| (g.parallelism, g.subtask) != (own.parallelism, own.subtask))
        .filter(|g| seen.insert((g.parallelism, g.subtask)))
        .collect()
}

/// The slot a new transaction takes: the lowest free one.
pub(crate) fn free_slot(busy: &[bool]) -> Option<u32> {
    busy.iter()
        .position(|b| !b)
        .and_then(|i| u32::try_from(i).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(parallelism: u32, subtask: u32) -> Group {
        Group {
            parallelism,
            subtask,
            size: 2,
        }
    }

    #[test]
    fn ids_name_prefix_parallelism_subtask_and_slot() {
        assert_eq!(g(3, 1).ids("counts"), ["counts-3-1-0", "counts-3-1-1"]);
    }

    #[test]
    fn the_worked_example_of_the_module_docs() {
        // Restore at 2 of a checkpoint at 3: subtask 0 received the states of 0 and 1.
        assert_eq!(
            foreign_groups(g(2, 0), [g(3, 0), g(3, 1)]),
            [g(3, 0), g(3, 1)]
        );
        assert_eq!(foreign_groups(g(2, 1), [g(3, 2)]), [g(3, 2)]);
        // At the same parallelism the received group is the own one.
        assert_eq!(foreign_groups(g(3, 1), [g(3, 1), g(3, 1)]), []);
    }

    proptest::proptest! {
        /// Whatever the parallelisms, after a restore every group of the checkpoint is finished by
        /// exactly one subtask, and no subtask's own group is one another subtask fences.
        #[test]
        fn every_group_is_finished_by_exactly_one_subtask(old in 1u32..8, new in 1u32..8) {
            // States come back in contiguous shares (the runtime's list redistribution).
            let states: Vec<Group> = (0..old).map(|s| g(old, s)).collect();
            let mut shares: Vec<Vec<Group>> = vec![Vec::new(); new as usize];
            if old == new {
                for (i, s) in states.iter().enumerate() { shares[i].push(*s); }
            } else {
                let mut it = states.iter();
                for (i, share) in shares.iter_mut().enumerate() {
                    let n = old / new + u32::from((i as u32) < old % new);
                    share.extend(it.by_ref().take(n as usize).copied());
                }
            }
            let mut finished = std::collections::BTreeMap::new();
            for (i, share) in shares.iter().enumerate() {
                let own = g(new, i as u32);
                for f in foreign_groups(own, share.iter().copied()) {
                    *finished.entry((f.parallelism, f.subtask)).or_insert(0) += 1;
                }
                *finished.entry((own.parallelism, own.subtask)).or_insert(0) += 1;
            }
            for s in &states {
                proptest::prop_assert_eq!(finished.get(&(s.parallelism, s.subtask)), Some(&1));
            }
            proptest::prop_assert!(finished.values().all(|n| *n == 1));
        }
    }
}
