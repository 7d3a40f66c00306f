//! [`StoredTimers`]: the timers of one time domain kept in the job's keyed store instead of on
//! the heap (Flink's RocksDB timer service), so that a job with a timer per key does not hold
//! them all in memory.
//!
//! A timer is one store entry, with no value:
//!
//! ```text
//! [key group: u16 BE][state id: u32 BE][timestamp: i64 with its sign bit flipped, BE][(key, namespace), encoded]
//! ```
//!
//! so within a key group timers are in timestamp order, and registering one twice writes the
//! same entry twice (Flink deduplicates the same way). In memory there is only, per key group of
//! the subtask, a lower bound of its earliest timestamp (exact once a scan confirmed it), and a
//! bounded buffer of registrations and deletions not yet written. The next timer is the earliest
//! head over the key groups; popping it scans its key group from that timestamp, so the
//! tombstones of timers already fired are skipped by the seek rather than read.
//!
//! Timers of one timestamp fire in key-group order, then in the order of their encoded keys
//! (the heap queue fires them in registration order; Flink's RocksDB timers also fire in key
//! order).

use crate::state::{KeyedStore, StoreError, StoreWrite, key_prefix, prefix_end};
use rustc_hash::FxHashMap;
use serde::{Serialize, de::DeserializeOwned};
use sluice_core::codec;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::Arc;

/// Registrations and deletions buffered before they are written in one batch.
const BUFFERED: usize = 4096;

/// Bytes of the key-group and state prefix, then of the timestamp.
const PREFIX: usize = 6;
const STAMP: usize = 8;

/// The earliest timestamp a key group may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Head {
    /// No timer.
    Empty,
    /// No timer earlier than this; `exact` when one at it was seen.
    AtLeast { timestamp: i64, exact: bool },
}

/// One time domain's timers of one operator subtask, in a [`KeyedStore`].
pub(crate) struct StoredTimers<K, N> {
    store: Arc<dyn KeyedStore>,
    /// The state id of this domain's timers.
    id: u32,
    max_parallelism: usize,
    /// The key groups of this subtask.
    groups: Range<usize>,
    /// Per key group of `groups`, from its start.
    heads: Vec<Head>,
    /// Store key of a timer → registered (`true`) or deleted, not yet written.
    buffer: FxHashMap<Vec<u8>, bool>,
    operator: String,
    _timer: PhantomData<fn() -> (K, N)>,
}

impl<K, N> std::fmt::Debug for StoredTimers<K, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredTimers")
            .field("id", &self.id)
            .field("groups", &self.groups)
            .field("buffered", &self.buffer.len())
            .finish()
    }
}

/// The timestamp as bytes that sort like the numbers.
fn stamp(timestamp: i64) -> [u8; STAMP] {
    ((timestamp as u64) ^ (1 << 63)).to_be_bytes()
}

fn unstamp(bytes: &[u8]) -> Option<i64> {
    let b: [u8; STAMP] = bytes.get(..STAMP)?.try_into().ok()?;
    Some((u64::from_be_bytes(b) ^ (1 << 63)) as i64)
}

impl<K, N> StoredTimers<K, N>
where
    K: std::hash::Hash + Serialize + DeserializeOwned,
    N: Serialize + DeserializeOwned,
{
    /// The timers of state `id` for key groups `groups` in `store`, which may already hold some
    /// (restored files): every key group's head is unknown until first needed.
    pub(crate) fn open(
        store: Arc<dyn KeyedStore>,
        id: u32,
        max_parallelism: usize,
        groups: Range<usize>,
        operator: &str,
    ) -> Self {
        let heads = vec![
            Head::AtLeast {
                timestamp: i64::MIN,
                exact: false
            };
            groups.len()
        ];
        StoredTimers {
            store,
            id,
            max_parallelism,
            groups,
            heads,
            buffer: FxHashMap::default(),
            operator: operator.to_string(),
            _timer: PhantomData,
        }
    }

    fn io(&self, action: &'static str, message: impl ToString) -> StoreError {
        StoreError::Io {
            backend: "timers".to_string(),
            operator: self.operator.clone(),
            action,
            message: message.to_string(),
        }
    }

    /// The store key of a timer and the index of its key group in `heads`.
    fn key(&self, key: &K, namespace: &N, timestamp: i64) -> Result<(Vec<u8>, usize), StoreError> {
        let group = crate::key_groups::key_group(key, self.max_parallelism);
        let Some(index) = group
            .checked_sub(self.groups.start)
            .filter(|i| *i < self.heads.len())
        else {
            return Err(self.io(
                "register a timer",
                format!(
                    "the timer's key is in key group {group}, which this subtask (key groups {:?}) does not own",
                    self.groups
                ),
            ));
        };
        let mut k = key_prefix(group, self.id).to_vec();
        k.extend_from_slice(&stamp(timestamp));
        codec::encode_into(&(key, namespace), &mut k).map_err(|e| self.io("encode a timer", e))?;
        Ok((k, index))
    }

    /// Registers a timer (an existing one stays as it is).
    pub(crate) fn register(
        &mut self,
        key: &K,
        namespace: &N,
        timestamp: i64,
    ) -> Result<(), StoreError> {
        let (k, index) = self.key(key, namespace, timestamp)?;
        self.heads[index] = match self.heads[index] {
            Head::AtLeast {
                timestamp: t,
                exact,
            } if t <= timestamp => Head::AtLeast {
                timestamp: t,
                exact,
            },
            _ => Head::AtLeast {
                timestamp,
                exact: true,
            },
        };
        self.buffer.insert(k, true);
        self.flush_if_full()
    }

    /// Deletes a timer (a missing one is no change).
    pub(crate) fn delete(
        &mut self,
        key: &K,
        namespace: &N,
        timestamp: i64,
    ) -> Result<(), StoreError> {
        let (k, index) = self.key(key, namespace, timestamp)?;
        if let Head::AtLeast {
            timestamp: t,
            exact,
        } = &mut self.heads[index]
            && *t == timestamp
        {
            *exact = false;
        }
        self.buffer.insert(k, false);
        self.flush_if_full()
    }

    fn flush_if_full(&mut self) -> Result<(), StoreError> {
        if self.buffer.len() >= BUFFERED {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the buffered registrations and deletions.
    pub(crate) fn flush(&mut self) -> Result<(), StoreError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let batch: Vec<StoreWrite> = self
            .buffer
            .drain()
            .map(|(k, live)| (k, live.then(Vec::new)))
            .collect();
        self.store.write(batch)
    }

    /// The first timer stored in the key group at `index` from its head on: its timestamp and
    /// its store key.
    fn first(&self, index: usize, from: i64) -> Result<Option<(i64, Vec<u8>)>, StoreError> {
        let prefix = key_prefix(self.groups.start + index, self.id);
        let mut start = prefix.to_vec();
        start.extend_from_slice(&stamp(from));
        let mut found = None;
        self.store.scan(&start, &prefix_end(&prefix), &mut |k, _| {
            found = Some(k.to_vec());
            false
        })?;
        match found {
            None => Ok(None),
            Some(k) => match unstamp(&k[PREFIX..]) {
                Some(t) => Ok(Some((t, k))),
                None => Err(self.io("read a timer", "a stored timer key is too short")),
            },
        }
    }

    /// Makes the head of the key group at `index` exact.
    fn settle(&mut self, index: usize) -> Result<(), StoreError> {
        if let Head::AtLeast {
            timestamp,
            exact: false,
        } = self.heads[index]
        {
            self.heads[index] = match self.first(index, timestamp)? {
                None => Head::Empty,
                Some((t, _)) => Head::AtLeast {
                    timestamp: t,
                    exact: true,
                },
            };
        }
        Ok(())
    }

    /// The key group (index) with the earliest timer and that timer's timestamp.
    fn earliest(&mut self) -> Result<Option<(usize, i64)>, StoreError> {
        self.flush()?;
        loop {
            let best = self
                .heads
                .iter()
                .enumerate()
                .filter_map(|(i, h)| match h {
                    Head::Empty => None,
                    Head::AtLeast { timestamp, exact } => Some((*timestamp, !exact, i)),
                })
                .min();
            let Some((timestamp, inexact, index)) = best else {
                return Ok(None);
            };
            if !inexact {
                return Ok(Some((index, timestamp)));
            }
            self.settle(index)?;
        }
    }

    /// The earliest timestamp of any timer.
    pub(crate) fn peek_time(&mut self) -> Result<Option<i64>, StoreError> {
        Ok(self.earliest()?.map(|(_, t)| t))
    }

    /// Removes and returns the earliest timer if its timestamp is at or before `time`.
    pub(crate) fn pop_due(&mut self, time: i64) -> Result<Option<(K, N, i64)>, StoreError> {
        let Some((index, timestamp)) = self.earliest()? else {
            return Ok(None);
        };
        if timestamp > time {
            return Ok(None);
        }
        let Some((t, k)) = self.first(index, timestamp)? else {
            self.heads[index] = Head::Empty;
            return Ok(None);
        };
        let (key, namespace): (K, N) =
            codec::decode(&k[PREFIX + STAMP..]).map_err(|e| self.io("decode a timer", e))?;
        self.store.write(vec![(k, None)])?;
        // Others may share its timestamp.
        self.heads[index] = Head::AtLeast {
            timestamp: t,
            exact: false,
        };
        Ok(Some((key, namespace, t)))
    }

    /// Every timer, key group by key group, each in timestamp order.
    pub(crate) fn for_each(&mut self, f: &mut dyn FnMut(K, N, i64)) -> Result<(), StoreError> {
        self.flush()?;
        for group in self.groups.clone() {
            let prefix = key_prefix(group, self.id);
            let mut bad = None;
            self.store
                .scan(&prefix, &prefix_end(&prefix), &mut |k, _| {
                    let t = unstamp(&k[PREFIX..]);
                    let timer = k.get(PREFIX + STAMP..).map(codec::decode::<(K, N)>);
                    match (t, timer) {
                        (Some(t), Some(Ok((key, namespace)))) => {
                            f(key, namespace, t);
                            true
                        }
                        _ => {
                            bad = Some(());
                            false
                        }
                    }
                })?;
            if bad.is_some() {
                return Err(self.io("read a timer", "a stored timer does not decode"));
            }
        }
        Ok(())
    }

    /// Whether no timer is stored (a scan of the heads).
    #[cfg(test)]
    pub(crate) fn is_empty(&mut self) -> Result<bool, StoreError> {
        Ok(self.earliest()?.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_groups::{key_group, key_group_range};
    use crate::state::{KeyedStateBackend, MemoryStateBackend, StoreScope};
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn store() -> Arc<dyn KeyedStore> {
        let scope = StoreScope {
            node: sluice_core::NodeId(0),
            operator_name: "t".into(),
            subtask: 0,
            attempt: 0,
            max_parallelism: 16,
            parallelism: 1,
        };
        MemoryStateBackend::new(1 << 20).open(&scope).unwrap()
    }

    proptest! {
        /// Against a model: a set of (timestamp, key), popped in timestamp order, whatever the
        /// order of registrations, deletions and pops.
        #[test]
        fn behaves_like_an_ordered_set(
            ops in prop::collection::vec((0u8..4, 0u32..40, -5i64..30), 0..300),
        ) {
            let mut q: StoredTimers<u32, ()> = StoredTimers::open(store(), 7, 16, key_group_range(0, 16, 1), "t");
            let mut model: BTreeSet<(i64, u32)> = BTreeSet::new();
            for (op, key, t) in ops {
                match op {
                    0 | 1 => {
                        q.register(&key, &(), t).unwrap();
                        model.insert((t, key));
                    }
                    2 => {
                        q.delete(&key, &(), t).unwrap();
                        model.remove(&(t, key));
                    }
                    _ => {
                        let got = q.pop_due(t).unwrap();
                        let want = model.iter().next().copied().filter(|(mt, _)| *mt <= t);
                        match (got, want) {
                            (None, None) => {}
                            (Some((k, (), gt)), Some((wt, _))) => {
                                prop_assert_eq!(gt, wt);
                                prop_assert!(model.remove(&(gt, k)));
                            }
                            (g, w) => prop_assert!(false, "popped {:?}, model {:?}", g, w),
                        }
                    }
                }
                prop_assert_eq!(q.peek_time().unwrap(), model.iter().next().map(|(t, _)| *t));
            }
        }
    }

    #[test]
    fn only_this_subtasks_key_groups_are_read_and_a_foreign_key_is_refused() {
        let s = store();
        let mine = key_group_range(0, 16, 2);
        let mut q: StoredTimers<u32, ()> =
            StoredTimers::open(s.clone(), 7, 16, mine.clone(), "op (subtask 0)");
        let (ours, theirs): (Vec<u32>, Vec<u32>) =
            (0..50).partition(|k| mine.contains(&key_group(k, 16)));
        for k in &ours {
            q.register(k, &(), 1).unwrap();
        }
        let err = q.register(&theirs[0], &(), 1).unwrap_err().to_string();
        assert!(
            err.contains("op (subtask 0)") && err.contains("does not own"),
            "{err}"
        );
        q.flush().unwrap();
        // Timers of the other subtask's key groups in the same store are not this one's.
        let mut other: StoredTimers<u32, ()> =
            StoredTimers::open(s, 7, 16, key_group_range(1, 16, 2), "o");
        other.register(&theirs[0], &(), 0).unwrap();
        other.flush().unwrap();
        let mut n = 0;
        while let Some((k, (), _)) = q.pop_due(10).unwrap() {
            assert!(ours.contains(&k));
            n += 1;
        }
        assert_eq!(n, ours.len());
    }
}
