//! [`TimerQueue`]: the timers of one time domain, deduplicated and ordered by timestamp.

use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry as MapEntry;
use std::collections::{BTreeMap, VecDeque};
use std::hash::Hash;

/// The timers of one time domain of one operator subtask.
///
/// A timer is a key, a namespace (the window, for window operators; `()` for process
/// functions) and a timestamp. Registering an existing timer again changes nothing (Flink
/// deduplicates per key, namespace and timestamp); deleting one that does not exist changes
/// nothing. [`pop_due`](TimerQueue::pop_due) hands out timers in timestamp order, and timers of
/// the same timestamp in the order they were registered.
///
/// Inside: one bucket per distinct timestamp (many timers share one: every key's window ends
/// at the same time), in a `BTreeMap`, each bucket in registration order; and a hash index of
/// the live timers, for deduplication and deletion. A deleted timer stays in its bucket,
/// skipped when reached (the index no longer names it), until dead entries outnumber live ones
/// and the buckets are rebuilt. So registering and deleting cost one hash operation, popping
/// one more.
///
/// ```text
/// use sluice_runtime::timer::TimerQueue;
///
/// let mut q: TimerQueue<&str, ()> = TimerQueue::default();
/// q.register("b", (), 20);
/// q.register("a", (), 10);
/// q.register("b", (), 20); // deduplicated
/// q.delete(&"a", &(), 10);
/// q.register("c", (), 5);
/// assert_eq!(q.pop_due(15), Some(("c", (), 5)));
/// assert_eq!(q.pop_due(15), None);
/// assert_eq!(q.pop_due(20), Some(("b", (), 20)));
/// assert!(q.is_empty());
/// ```
#[derive(Clone, Debug)]
pub(crate) struct TimerQueue<K, N> {
    buckets: BTreeMap<i64, VecDeque<(K, N, u64)>>,
    index: FxHashMap<(K, N, i64), u64>,
    /// Live timers that are not in the index (none are registered so today).
    unindexed: usize,
    /// Deleted timers still in their buckets.
    dead: usize,
    next_seq: u64,
}

/// The registration number of a timer that is not in the index.
const UNINDEXED: u64 = u64::MAX;

impl<K, N> Default for TimerQueue<K, N> {
    fn default() -> Self {
        TimerQueue {
            buckets: BTreeMap::new(),
            index: FxHashMap::default(),
            unindexed: 0,
            dead: 0,
            next_seq: 0,
        }
    }
}

impl<K: Hash + Eq + Clone, N: Hash + Eq + Clone> TimerQueue<K, N> {
    #[inline]
    fn bucket(&mut self, timestamp: i64) -> &mut VecDeque<(K, N, u64)> {
        self.buckets.entry(timestamp).or_default()
    }

    /// Registers a timer; returns false when it already existed.
    #[inline]
    pub(crate) fn register(&mut self, key: K, namespace: N, timestamp: i64) -> bool {
        let seq = self.next_seq;
        match self.index.entry((key, namespace, timestamp)) {
            MapEntry::Occupied(_) => false,
            MapEntry::Vacant(v) => {
                let (key, namespace, _) = v.key().clone();
                v.insert(seq);
                self.next_seq += 1;
                self.bucket(timestamp).push_back((key, namespace, seq));
                true
            }
        }
    }

    /// Deletes a timer; returns whether it existed.
    pub(crate) fn delete(&mut self, key: &K, namespace: &N, timestamp: i64) -> bool {
        let existed = self
            .index
            .remove(&(key.clone(), namespace.clone(), timestamp))
            .is_some();
        if existed {
            self.dead += 1;
            if self.dead > 64 && self.dead > self.len() {
                self.compact();
            }
        }
        existed
    }

    /// Whether this timer is registered (with [`register`](Self::register)).
    #[cfg(test)]
    pub(crate) fn contains(&self, key: &K, namespace: &N, timestamp: i64) -> bool {
        self.index
            .contains_key(&(key.clone(), namespace.clone(), timestamp))
    }

    fn is_live(&self, key: &K, namespace: &N, timestamp: i64, seq: u64) -> bool {
        seq == UNINDEXED
            || self.index.get(&(key.clone(), namespace.clone(), timestamp)) == Some(&seq)
    }

    /// Drops the deleted entries.
    fn compact(&mut self) {
        let buckets = std::mem::take(&mut self.buckets);
        for (t, bucket) in buckets {
            let live: VecDeque<_> = bucket
                .into_iter()
                .filter(|(k, n, seq)| self.is_live(k, n, t, *seq))
                .collect();
            if !live.is_empty() {
                self.buckets.insert(t, live);
            }
        }
        self.dead = 0;
    }

    /// The earliest timestamp of any timer.
    pub(crate) fn peek_time(&mut self) -> Option<i64> {
        loop {
            let (&t, bucket) = self.buckets.first_key_value()?;
            match bucket.front() {
                Some((k, n, seq)) if self.is_live(k, n, t, *seq) => return Some(t),
                Some(_) => {
                    self.dead = self.dead.saturating_sub(1);
                    if let Some(mut first) = self.buckets.first_entry() {
                        first.get_mut().pop_front();
                    }
                }
                None => {
                    self.buckets.pop_first();
                }
            }
        }
    }

    /// Removes and returns the earliest timer if its timestamp is at or before `time`.
    #[inline]
    pub(crate) fn pop_due(&mut self, time: i64) -> Option<(K, N, i64)> {
        loop {
            let mut first = self.buckets.first_entry()?;
            let t = *first.key();
            if t > time {
                return None;
            }
            let Some((k, n, seq)) = first.get_mut().pop_front() else {
                first.remove();
                continue;
            };
            if first.get().is_empty() {
                first.remove();
            }
            if seq == UNINDEXED {
                self.unindexed -= 1;
                return Some((k, n, t));
            }
            let id = (k, n, t);
            match self.index.remove(&id) {
                Some(s) if s == seq => return Some(id),
                Some(s) => {
                    // Deleted, then registered again: that later entry is the live one.
                    self.index.insert(id, s);
                    self.dead = self.dead.saturating_sub(1);
                }
                None => self.dead = self.dead.saturating_sub(1),
            }
        }
    }

    /// Every timer, in firing order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &N, i64)> {
        self.buckets.iter().flat_map(move |(&t, bucket)| {
            bucket
                .iter()
                .filter(move |(k, n, seq)| self.is_live(k, n, t, *seq))
                .map(move |(k, n, _)| (k, n, t))
        })
    }
}

impl<K, N> TimerQueue<K, N> {
    /// Number of timers.
    pub(crate) fn len(&self) -> usize {
        self.index.len() + self.unindexed
    }

    /// Whether there is no timer.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Against a model: a set of (timestamp, key) pairs, popped in timestamp order.
        #[test]
        fn behaves_like_a_deduplicated_ordered_set(
            ops in prop::collection::vec((0u8..3, 0u8..4, 0i64..20), 0..200),
            until in prop::collection::vec(0i64..25, 1..5),
        ) {
            let mut q: TimerQueue<u8, ()> = TimerQueue::default();
            let mut model: BTreeSet<(i64, u8)> = BTreeSet::new();
            for (op, key, t) in ops {
                if op < 2 {
                    prop_assert_eq!(q.register(key, (), t), model.insert((t, key)));
                } else {
                    prop_assert_eq!(q.delete(&key, &(), t), model.remove(&(t, key)));
                }
            }
            prop_assert_eq!(q.len(), model.len());
            for u in until {
                let mut got = Vec::new();
                while let Some((k, (), t)) = q.pop_due(u) {
                    got.push((t, k));
                }
                let want: Vec<(i64, u8)> = model.iter().copied().filter(|(t, _)| *t <= u).collect();
                for w in &want {
                    model.remove(w);
                }
                // Timestamps in order; the same pairs.
                prop_assert!(got.windows(2).all(|w| w[0].0 <= w[1].0));
                let mut sorted = got.clone();
                sorted.sort();
                prop_assert_eq!(sorted, want);
            }
        }
    }

    #[test]
    fn equal_timestamps_fire_in_registration_order() {
        let mut q: TimerQueue<u8, ()> = TimerQueue::default();
        for k in [3, 1, 2] {
            q.register(k, (), 7);
        }
        let order: Vec<u8> = std::iter::from_fn(|| q.pop_due(7).map(|(k, _, _)| k)).collect();
        assert_eq!(order, vec![3, 1, 2]);
    }
}
