//! A [`MapState`](super::MapState) in front of a store: each entry of a key's map is a stored
//! value of its own, as in Flink's RocksDB backend, so that reading or writing an entry costs
//! one entry whatever the size of its map, no map has to fit in memory, and a store's
//! compactions expire entries one by one.
//!
//! An entry's key encodes the map's key, then the user key, and takes its key group from the
//! map's key alone, so the entry lives in its key's key group (a restore at another parallelism deals it with the
//! key) and a key's entries are one contiguous range, scanned in one pass:
//!
//! ```text
//! [key group][state id][key][user key]  ->  [user value]      (with a time-to-live: [time][user value])
//! ```
//!
//! (sluice's codec is self-delimiting, so no key's encoding starts with another's.) The entries
//! are kept under the map's name with `#entries` appended, and with `#ttl` after that when the
//! state has a time-to-live.
//!
//! Full snapshots write each key's entries as one map, as the heap does ([`Whole`]), so a
//! checkpoint restores with either backend. What a restore brings (on the heap until the state
//! attaches), and what a store's files hold in the layout of before (one stored map per key),
//! move in entry by entry when the state attaches.

use super::backend::{KeyedStore, StoreError};
use super::ttl::{Stamped, StateTtlConfig, expired};
use super::value::ValueState;
use super::value_cache::ValueCaches;
use super::{OperatorState, StateError};
use crate::key_groups::key_group;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use sluice_core::codec;
use std::collections::BTreeMap;
use std::hash::Hash;
use std::sync::Arc;

/// The key of one entry: the map's key, then the user key. Its key group is its key's
/// ([`group_of_entry`]); its hash covers both, so that a cache spreads the entries of one key.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) struct EntryKey<K, UK> {
    key: K,
    user_key: UK,
}

/// The key group of an entry: its key's.
fn group_of_entry<K: Hash, UK>(entry: &EntryKey<K, UK>, max_parallelism: usize) -> usize {
    key_group(&entry.key, max_parallelism)
}

/// A key's entries as a scan finds them: user key, time of last access (0 without a
/// time-to-live), user value.
type Found<UK, UV> = Vec<(UK, i64, UV)>;

/// The name a map state's entries are kept under in a store.
fn entries_name(name: &str) -> String {
    format!("{name}#entries")
}

/// A map state whose entries are the values of a [`ValueState`] in front of a store.
#[derive(Debug)]
pub(crate) struct StoredMap<K, UK, UV> {
    /// The map state's name.
    name: String,
    config: Option<StateTtlConfig>,
    entries: ValueState<EntryKey<K, UK>, UV>,
    max_parallelism: usize,
    /// The operator subtask, for errors.
    operator: String,
    /// What the last [`entries`](Self::entries) found, lent out.
    found: BTreeMap<UK, UV>,
}

impl<K, UK, UV> StoredMap<K, UK, UV>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    UK: Ord + Clone + Hash + Serialize + DeserializeOwned,
    UV: Serialize + DeserializeOwned,
{
    /// The entries of the map state `name`, in front of `store`, and what the state held so
    /// far (`whole`, in the layout of a map per key: restored on the heap, or in the store's
    /// files from before) moved into them. `whole` is left empty.
    pub(crate) fn attach(
        whole: &mut Whole<K, UK, UV>,
        store: Arc<dyn KeyedStore>,
        max_parallelism: usize,
        caches: ValueCaches,
        operator: &str,
    ) -> Result<Self, StateError> {
        let (name, config) = (whole.name().to_string(), whole.config().cloned());
        let entries = match &config {
            Some(c) => ValueState::with_ttl(&entries_name(&name), c.clone()),
            None => ValueState::new(&entries_name(&name)),
        }
        .grouped_by(group_of_entry);
        let mut map = StoredMap {
            name,
            config,
            entries,
            max_parallelism,
            operator: operator.to_string(),
            found: BTreeMap::new(),
        };
        map.entries
            .attach(store.clone(), max_parallelism, caches.clone(), operator)?;
        // What was restored, then what the store's files hold in the other layout.
        whole.move_into(&mut map)?;
        whole.attach(store, max_parallelism, caches, operator)?;
        whole.move_into(&mut map)?;
        match map.take_error() {
            Some(e) => Err(e.into()),
            None => Ok(map),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn ttl(&self) -> Option<&StateTtlConfig> {
        self.config.as_ref()
    }

    fn entry(key: &K, user_key: &UK) -> EntryKey<K, UK> {
        EntryKey {
            key: key.clone(),
            user_key: user_key.clone(),
        }
    }

    /// Reads the entries not cached yet in one batch (see [`ValueState::prefetch`]).
    pub(crate) fn prefetch<'a>(&mut self, entries: impl IntoIterator<Item = (&'a K, &'a UK)>)
    where
        K: 'a,
        UK: 'a,
    {
        let keys: Vec<EntryKey<K, UK>> = entries
            .into_iter()
            .map(|(k, u)| Self::entry(k, u))
            .collect();
        self.entries.prefetch(&keys);
    }

    pub(crate) fn get(&mut self, key: &K, user_key: &UK) -> Option<&UV> {
        self.entries.get(&Self::entry(key, user_key))
    }

    pub(crate) fn put(&mut self, key: K, user_key: UK, value: UV) -> Option<UV> {
        self.entries.update(EntryKey { key, user_key }, value)
    }

    /// Sets an entry last accessed at `at` (moved from a whole map, which kept its time).
    fn put_stamped(&mut self, key: K, user_key: UK, at: i64, value: UV) {
        self.entries
            .update_stamped(EntryKey { key, user_key }, at, value);
    }

    pub(crate) fn remove(&mut self, key: &K, user_key: &UK) -> Option<UV> {
        self.entries.remove(&Self::entry(key, user_key))
    }

    fn decode_error(&self, e: &codec::CodecError) -> StoreError {
        StoreError::Decode {
            state: self.name.clone(),
            operator: self.operator.clone(),
            message: e.to_string(),
        }
    }

    /// The entries of `key`, read from the store in one scan, in user-key order. With
    /// `OnReadAndWrite` the read renews them. A failure is kept for `take_error`, and the
    /// entries read until then are returned.
    pub(crate) fn entries(&mut self, key: &K) -> &BTreeMap<UK, UV> {
        self.found.clear();
        let from = match codec::encode(key) {
            Ok(from) => from,
            Err(e) => {
                let e = self.decode_error(&e);
                self.entries.keep_error(e);
                return &self.found;
            }
        };
        let renew = self
            .config
            .as_ref()
            .is_some_and(StateTtlConfig::renews_on_read);
        let mut renewed = Vec::new();
        let mut bad = None;
        let found = &mut self.found;
        let scanned =
            self.entries
                .scan_stored(key_group(key, self.max_parallelism), &from, &mut |k, v| {
                    let Some(user_key) = k.strip_prefix(from.as_slice()) else {
                        return false;
                    };
                    let decoded = codec::decode::<UK>(user_key).and_then(|uk| {
                        let uv = codec::decode::<UV>(v)?;
                        if renew {
                            let again = codec::decode::<UV>(v)?;
                            renewed.push((Self::entry(key, &uk), Some(again)));
                        }
                        Ok((uk, uv))
                    });
                    match decoded {
                        Ok((uk, uv)) => {
                            found.insert(uk, uv);
                            true
                        }
                        Err(e) => {
                            bad = Some(e);
                            false
                        }
                    }
                });
        if let Err(e) = scanned {
            self.entries.keep_error(e);
        }
        if let Some(e) = bad {
            let e = self.decode_error(&e);
            self.entries.keep_error(e);
        }
        if !renewed.is_empty()
            && let Err(e) = self.entries.write_through(renewed)
        {
            let e = match e {
                StateError::Store(e) => e,
                other => StoreError::Decode {
                    state: self.name.clone(),
                    operator: self.operator.clone(),
                    message: other.to_string(),
                },
            };
            self.entries.keep_error(e);
        }
        &self.found
    }

    pub(crate) fn take_error(&mut self) -> Option<StoreError> {
        self.entries.take_error()
    }

    /// Calls `f` with each key of key group `group` and its entries (with their times of last
    /// access, 0 without a time-to-live), key by key, in the store's order.
    fn scan_group(
        &mut self,
        group: usize,
        f: &mut dyn FnMut(K, Found<UK, UV>),
    ) -> Result<(), StateError> {
        let stamped = self.config.is_some();
        let mut current: Option<(K, Found<UK, UV>)> = None;
        let mut bad = None;
        self.entries.scan_stored_stamped(group, &[], &mut |k, v| {
            let decoded = codec::decode_first::<K>(k).and_then(|(key, rest)| {
                let user_key = codec::decode::<UK>(rest)?;
                let (at, value) = if stamped {
                    let s = codec::decode::<Stamped<UV>>(v)?;
                    (s.at, s.value)
                } else {
                    (0, codec::decode::<UV>(v)?)
                };
                Ok((key, user_key, at, value))
            });
            match decoded {
                Ok((key, user_key, at, value)) => {
                    match &mut current {
                        Some((k, entries)) if *k == key => entries.push((user_key, at, value)),
                        _ => {
                            if let Some((k, entries)) = current.take() {
                                f(k, entries);
                            }
                            current = Some((key, vec![(user_key, at, value)]));
                        }
                    }
                    true
                }
                Err(e) => {
                    bad = Some(e);
                    false
                }
            }
        })?;
        if let Some(e) = bad {
            return Err(self.decode_error(&e).into());
        }
        if let Some((k, entries)) = current {
            f(k, entries);
        }
        Ok(())
    }

    /// Writes one keyed entry per non-empty key group, each key's entries as one map (the
    /// heap's layout), one key group at a time; nothing when the store's files are the
    /// snapshot. With `cleanup_full_snapshot`, expired entries are left out.
    pub(crate) fn snapshot_into(
        &mut self,
        max_parallelism: usize,
        state: &mut OperatorState,
    ) -> Result<(), StateError> {
        if self.entries.incremental() {
            self.entries.flush()?;
            return Ok(());
        }
        let now = crate::timer::ProcessingClock::new().now_ms();
        let leave_out = self
            .config
            .as_ref()
            .filter(|c| c.full_snapshot())
            .map(StateTtlConfig::ttl_ms);
        for group in 0..max_parallelism {
            let mut whole = Whole::new(&self.name, self.config.as_ref());
            self.scan_group(group, &mut |key, mut entries| {
                if let Some(ttl_ms) = leave_out {
                    entries.retain(|(_, at, _)| !expired(*at, ttl_ms, now));
                }
                if !entries.is_empty() {
                    whole.put(key, entries);
                }
            })?;
            whole.snapshot_into(max_parallelism, state)?;
        }
        Ok(())
    }

    /// Adds the entries of this state's keys in `state` (a checkpoint's maps).
    pub(crate) fn restore_from(&mut self, state: &OperatorState) -> Result<(), StateError> {
        let mut whole = Whole::new(&self.name, self.config.as_ref());
        whole.restore_from(state)?;
        whole.move_into(self)
    }

    /// How many keys have entries (a scan of everything).
    #[cfg(test)]
    pub(crate) fn key_count(&mut self) -> usize {
        let mut n = 0;
        for group in 0..self.max_parallelism {
            if let Err(e) = self.scan_group(group, &mut |_, _| n += 1) {
                panic!("{e}");
            }
        }
        n
    }
}

/// A map state in the layout of one map per key, the heap's: what a [`StoredMap`] is restored
/// from and snapshots as.
#[derive(Debug)]
pub(crate) enum Whole<K, UK, UV> {
    /// Without a time-to-live.
    Plain(ValueState<K, BTreeMap<UK, UV>>),
    /// With one: each entry stamped, and the map with its newest entry's time.
    Stamped(ValueState<K, BTreeMap<UK, Stamped<UV>>>),
}

impl<K, UK, UV> Whole<K, UK, UV>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    UK: Ord + Clone + Hash + Serialize + DeserializeOwned,
    UV: Serialize + DeserializeOwned,
{
    /// An empty map state named `name`, on the heap.
    pub(crate) fn new(name: &str, config: Option<&StateTtlConfig>) -> Self {
        match config {
            Some(c) => Whole::Stamped(ValueState::with_ttl(name, c.clone())),
            None => Whole::Plain(ValueState::new(name)),
        }
    }

    fn name(&self) -> &str {
        match self {
            Whole::Plain(v) => v.name(),
            Whole::Stamped(v) => v.name(),
        }
    }

    fn config(&self) -> Option<&StateTtlConfig> {
        match self {
            Whole::Plain(_) => None,
            Whole::Stamped(v) => v.ttl(),
        }
    }

    /// Sets `key`'s map to `entries`, each with its time of last access.
    fn put(&mut self, key: K, entries: Found<UK, UV>) {
        match self {
            Whole::Plain(v) => {
                v.update(key, entries.into_iter().map(|(u, _, v)| (u, v)).collect());
            }
            Whole::Stamped(v) => {
                let at = entries.iter().map(|(_, at, _)| *at).max().unwrap_or(0);
                let map = entries
                    .into_iter()
                    .map(|(u, at, value)| (u, Stamped { at, value }))
                    .collect();
                v.update_stamped(key, at, map);
            }
        }
    }

    fn attach(
        &mut self,
        store: Arc<dyn KeyedStore>,
        max_parallelism: usize,
        caches: ValueCaches,
        operator: &str,
    ) -> Result<(), StateError> {
        match self {
            Whole::Plain(v) => v.attach(store, max_parallelism, caches, operator),
            Whole::Stamped(v) => v.attach(store, max_parallelism, caches, operator),
        }
    }

    fn snapshot_into(
        &mut self,
        max_parallelism: usize,
        state: &mut OperatorState,
    ) -> Result<(), StateError> {
        match self {
            Whole::Plain(v) => v.snapshot_into(max_parallelism, state),
            Whole::Stamped(v) => v.snapshot_into(max_parallelism, state),
        }
    }

    fn restore_from(&mut self, state: &OperatorState) -> Result<(), StateError> {
        match self {
            Whole::Plain(v) => v.restore_from(state),
            Whole::Stamped(v) => v.restore_from(state),
        }
    }

    /// Moves every map into `target`, entry by entry, each keeping its time (an expired map
    /// is dropped), and leaves no key behind.
    fn move_into(&mut self, target: &mut StoredMap<K, UK, UV>) -> Result<(), StateError> {
        match self {
            Whole::Plain(v) => v.retain_visiting(|k, map| {
                for (u, value) in std::mem::take(map) {
                    target.put_stamped(k.clone(), u, 0, value);
                }
                Ok::<bool, StoreError>(false)
            })?,
            Whole::Stamped(v) => v.retain_visiting(|k, map| {
                for (u, s) in std::mem::take(map) {
                    target.put_stamped(k.clone(), u, s.at, s.value);
                }
                Ok::<bool, StoreError>(false)
            })?,
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{MapState, key_prefix, memory_store, prefix_end, state_id};

    /// How many entries `store` holds under state `name`, over 16 key groups.
    fn stored(store: &dyn KeyedStore, name: &str) -> usize {
        let mut n = 0;
        for group in 0..16 {
            let start = key_prefix(group, state_id(name));
            store
                .scan(&start, &prefix_end(&start), &mut |_, _| {
                    n += 1;
                    true
                })
                .unwrap();
        }
        n
    }

    fn attached(store: &Arc<dyn KeyedStore>) -> MapState<u32, String, u32> {
        let mut map = MapState::new("m");
        map.attach(store.clone(), 16, 0, "test").unwrap();
        map
    }

    #[test]
    fn each_entry_is_a_stored_value_of_its_own() {
        let store = memory_store();
        let mut map = attached(&store);
        for (k, page) in [(1, "/a"), (1, "/b"), (1, "/c"), (2, "/a"), (2, "/z")] {
            map.put(k, page.into(), k);
        }
        assert_eq!(map.remove(&1, &"/b".to_string()), Some(1));
        map.snapshot_into(16, &mut OperatorState::default())
            .unwrap();
        assert_eq!(stored(&*store, "m#entries"), 4);
        assert_eq!(stored(&*store, "m"), 0, "no map is stored whole");
        let pages: Vec<String> = map.entries(&1).map(|(p, _)| p.clone()).collect();
        assert_eq!(pages, ["/a", "/c"], "in user-key order");
        assert_eq!(map.get(&2, &"/z".to_string()), Some(&2));
        assert_eq!(map.entries(&3).count(), 0);
        assert!(map.take_error().is_none());
    }

    /// A store whose files hold maps stored whole (the layout before entries were stored one by
    /// one): attaching moves them in, entry by entry.
    #[test]
    fn maps_a_store_holds_whole_move_in_entry_by_entry() {
        let store = memory_store();
        let mut whole: ValueState<u32, BTreeMap<String, u32>> = ValueState::new("m");
        whole.attach(store.clone(), 16, 0, "test").unwrap();
        for k in 0..50u32 {
            let map = (0..3).map(|i| (format!("/{i}"), k + i)).collect();
            whole.update(k, map);
        }
        whole
            .snapshot_into(16, &mut OperatorState::default())
            .unwrap();
        assert_eq!(stored(&*store, "m"), 50);

        let mut map = attached(&store);
        assert_eq!(stored(&*store, "m"), 0, "moved");
        for k in 0..50u32 {
            let got: Vec<(String, u32)> = map.entries(&k).map(|(p, v)| (p.clone(), *v)).collect();
            let want: Vec<(String, u32)> = (0..3).map(|i| (format!("/{i}"), k + i)).collect();
            assert_eq!(got, want);
        }
    }

    /// A full snapshot writes the maps whole, as the heap does: it restores on the heap, and a
    /// heap snapshot restores in front of a store.
    #[test]
    fn full_snapshots_are_the_heaps_both_ways() {
        let store = memory_store();
        let mut map = attached(&store);
        for k in 0..40u32 {
            map.put(k, format!("/{k}"), k);
            map.put(k, "/home".into(), 0);
        }
        let mut snapshot = OperatorState::default();
        map.snapshot_into(16, &mut snapshot).unwrap();

        let mut heap: MapState<u32, String, u32> = MapState::new("m");
        heap.restore_from(&snapshot).unwrap();
        assert_eq!(heap.entries(&7).count(), 2);
        assert_eq!(heap.get(&7, &"/7".to_string()), Some(&7));
        let mut again = OperatorState::default();
        heap.snapshot_into(16, &mut again).unwrap();
        // The same entries, whose keys may come in another order.
        let decoded = |s: &OperatorState| {
            let mut all: Vec<(String, u32, u32, BTreeMap<String, u32>)> = Vec::new();
            for e in s.keyed_entries() {
                let maps: Vec<(u32, BTreeMap<String, u32>)> = codec::decode(&e.data).unwrap();
                all.extend(
                    maps.into_iter()
                        .map(|(k, m)| (e.state.clone(), e.key_group, k, m)),
                );
            }
            all.sort();
            all
        };
        assert_eq!(decoded(&snapshot), decoded(&again));
        assert_eq!(decoded(&snapshot).len(), 40);

        let mut back: MapState<u32, String, u32> = MapState::new("m");
        back.restore_from(&again).unwrap();
        let other = memory_store();
        back.attach(other.clone(), 16, 0, "test").unwrap();
        back.snapshot_into(16, &mut OperatorState::default())
            .unwrap();
        assert_eq!(stored(&*other, "m#entries"), 80);
        assert_eq!(back.get(&39, &"/home".to_string()), Some(&0));
    }
}
