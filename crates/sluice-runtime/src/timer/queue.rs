//! [`TimerQueue`]: the timers of one time domain, deduplicated and ordered by timestamp.

use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::hash::Hash;

/// The timers of one time domain of one operator subtask.
///
/// A timer is a key, a namespace (the window, for window operators; `()` for process
/// functions) and a timestamp. Registering an existing timer again changes nothing (Flink
/// deduplicates per key, namespace and timestamp); deleting one that does not exist changes
/// nothing. [`pop_due`](TimerQueue::pop_due) hands out timers in timestamp order, and timers of
/// the same timestamp in the order they were registered.
///
/// ```
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
pub struct TimerQueue<K, N> {
    by_time: BTreeMap<(i64, u64), (K, N)>,
    index: FxHashMap<(K, N, i64), u64>,
    next_seq: u64,
}

impl<K, N> Default for TimerQueue<K, N> {
    fn default() -> Self {
        TimerQueue {
            by_time: BTreeMap::new(),
            index: FxHashMap::default(),
            next_seq: 0,
        }
    }
}

impl<K: Hash + Eq + Clone, N: Hash + Eq + Clone> TimerQueue<K, N> {
    /// Registers a timer; returns false when it already existed.
    pub fn register(&mut self, key: K, namespace: N, timestamp: i64) -> bool {
        let seq = self.next_seq;
        match self.index.entry((key, namespace, timestamp)) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                let (k, n, _) = v.key().clone();
                v.insert(seq);
                self.by_time.insert((timestamp, seq), (k, n));
                self.next_seq += 1;
                true
            }
        }
    }

    /// Deletes a timer; returns whether it existed.
    pub fn delete(&mut self, key: &K, namespace: &N, timestamp: i64) -> bool {
        match self
            .index
            .remove(&(key.clone(), namespace.clone(), timestamp))
        {
            Some(seq) => {
                self.by_time.remove(&(timestamp, seq));
                true
            }
            None => false,
        }
    }

    /// Whether this timer is registered.
    pub fn contains(&self, key: &K, namespace: &N, timestamp: i64) -> bool {
        self.index
            .contains_key(&(key.clone(), namespace.clone(), timestamp))
    }

    /// The earliest timestamp of any timer.
    pub fn peek_time(&self) -> Option<i64> {
        self.by_time.first_key_value().map(|((t, _), _)| *t)
    }

    /// Removes and returns the earliest timer if its timestamp is at or before `time`.
    pub fn pop_due(&mut self, time: i64) -> Option<(K, N, i64)> {
        let entry = self.by_time.first_entry()?;
        let (t, _) = *entry.key();
        if t > time {
            return None;
        }
        let (k, n) = entry.remove();
        self.index.remove(&(k.clone(), n.clone(), t));
        Some((k, n, t))
    }
}

impl<K, N> TimerQueue<K, N> {
    /// Number of timers.
    pub fn len(&self) -> usize {
        self.by_time.len()
    }

    /// Whether there is no timer.
    pub fn is_empty(&self) -> bool {
        self.by_time.is_empty()
    }

    /// Every timer, in firing order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &N, i64)> {
        self.by_time.iter().map(|((t, _), (k, n))| (k, n, *t))
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
