//! Window contents in the job's keyed store (Flink's window state in RocksDB), for jobs whose
//! state backend has one.
//!
//! Every (window, key) is one entry of a keyed state whose key is an [`InWindow`]: it encodes the
//! window first and the key after it, and hashes only the key, so an entry lives in its key's
//! key group (a restore at another parallelism deals it with the key) and the entries of one
//! window in one key group are one contiguous range:
//!
//! ```text
//! [key group][state id][window: start, end][key]  ->  [fired: bool][accumulator]
//! ```
//!
//! Firing a pane of tumbling or sliding windows scans its range in each key group of the
//! subtask; the flag says the window fired already and is kept for late firings. Only the list
//! of panes (their windows) stays in memory. Session windows keep their contents under the
//! same kind of key, and each key's list of sessions in a second state, so nothing of them is
//! on the heap either; their timers are in the store too (`timer/stored.rs`).

use super::assigner::TimeWindow;
use crate::state::{StateError, StoreError, ValueState, prefix_end};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use sluice_core::codec;
use std::hash::Hash;
use std::ops::Range;

/// A key's window, as a key of keyed state: its encoding is the window's then the key's, its
/// key group the key's ([`in_window_group`]); its hash covers both, so that a key's windows
/// spread in a hash table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) struct InWindow<K> {
    pub(crate) window: TimeWindow,
    pub(crate) key: K,
}

/// The key group of a key's window: the key's. Every state keyed by [`InWindow`] is made
/// `grouped_by` it.
pub(crate) fn in_window_group<K: Hash>(w: &InWindow<K>, max_parallelism: usize) -> usize {
    crate::key_groups::key_group(&w.key, max_parallelism)
}

/// One window's entry of the pane state: whether it fired, and its accumulator.
pub(crate) type Stored<A> = (bool, A);

/// Calls `f` with each key of window `w` in key group `group` of `state` and its stored entry,
/// in key order (nothing on the heap).
pub(crate) fn scan_window<K, V>(
    state: &mut ValueState<InWindow<K>, V>,
    group: usize,
    w: TimeWindow,
    f: &mut dyn FnMut(K, V),
) -> Result<(), StateError>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    let from = codec::encode(&w)?;
    let mut bad = None;
    state.scan_stored(group, &from, &mut |k, v| {
        let Some(rest) = k.strip_prefix(from.as_slice()) else {
            return false;
        };
        match (codec::decode::<K>(rest), codec::decode::<V>(v)) {
            (Ok(key), Ok(value)) => {
                f(key, value);
                true
            }
            (Err(e), _) | (_, Err(e)) => {
                bad = Some(e);
                false
            }
        }
    })?;
    match bad {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// The first entry of a seek: its window, its key, and the window's encoding.
type Found<K> = (TimeWindow, K, Vec<u8>);

/// The windows `state` holds entries of in key groups `groups`, each with one of its keys: a
/// seek per window and key group, not a scan of the entries.
pub(crate) fn stored_windows<K, V>(
    state: &mut ValueState<InWindow<K>, V>,
    groups: Range<usize>,
) -> Result<Vec<(TimeWindow, K)>, StateError>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    let mut found: Vec<(TimeWindow, K)> = Vec::new();
    for group in groups {
        let mut from: Vec<u8> = Vec::new();
        loop {
            let mut first: Option<Result<Found<K>, codec::CodecError>> = None;
            state.scan_stored(group, &from, &mut |k, _| {
                first = Some(codec::decode_first::<TimeWindow>(k).and_then(|(w, rest)| {
                    let key = codec::decode::<K>(rest)?;
                    Ok((w, key, k[..k.len() - rest.len()].to_vec()))
                }));
                false
            })?;
            match first {
                None => break,
                Some(Err(e)) => return Err(e.into()),
                Some(Ok((w, key, encoded))) => {
                    if !found.iter().any(|(x, _)| *x == w) {
                        found.push((w, key));
                    }
                    from = prefix_end(&encoded);
                }
            }
        }
    }
    found.sort_by_key(|(w, _)| *w);
    Ok(found)
}

/// The store failure a state kept, as an error.
pub(crate) fn kept<K, V>(state: &mut ValueState<K, V>) -> Result<(), StoreError>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    state.take_error().map_or(Ok(()), Err)
}
