//! The values under every keyed state ([`ValueState`](super::ValueState), and through it
//! [`MapState`](super::MapState) and [`KeyedListState`](super::KeyedListState)): `Values`, one
//! value per key, stored by key group so that a restore at another parallelism moves each key
//! with its key group.
//!
//! Values live on the heap until `Values::attach` puts them in front of a
//! [`KeyedStore`](super::KeyedStore) (the job's state backend, see `backend.rs`); from then on
//! they are a bounded write-back cache of decoded values over the store (`StoreTier` below).
//! Both tiers snapshot to the same keyed entries, so a checkpoint taken with one backend
//! restores with the other.

use super::backend::{KeyedStore, StoreError, StoreWrite, key_prefix, prefix_end, state_id};
use super::value_cache::{CacheShare, ValueCaches};
use super::{KeyGroupEntry, OperatorState, StateError};
use crate::key_groups::key_group;
use rustc_hash::FxHashMap;
use serde::{Serialize, de::DeserializeOwned};
use sluice_core::codec::{self, CodecError};
use std::collections::hash_map::Entry;
use std::hash::Hash;
use std::sync::Arc;

/// Bytes a cached entry is assumed to take before the first write-back measures it.
const FIRST_ENTRY_ESTIMATE: usize = 256;
/// Bytes of bookkeeping per cached entry on top of its encoded key and value.
const ENTRY_OVERHEAD: usize = 48;
/// Fewest entries a cache holds, whatever the budget.
const MIN_CACHED: usize = 16;
/// Entries whose encoded size sets the capacity when the cache first fills.
const SAMPLE: usize = 64;
/// Encoded bytes of one write to the store during a write-back.
const WRITE_BATCH_BYTES: usize = 1 << 20;

/// Entries a cache of `bytes` holds at `per_entry` bytes each.
fn capacity(bytes: usize, per_entry: usize) -> usize {
    (bytes / per_entry.max(1)).max(MIN_CACHED)
}

/// The values of a [`ValueState`] without a time-to-live, or its stamped values with one: the
/// heap map or the store tier, and everything a state does with them.
#[derive(Debug)]
pub(crate) struct Values<K, V> {
    name: String,
    tier: Tier<K, V>,
    /// The key group of a key: by its hash (`key_group`), unless the state set another way
    /// (`grouped_by`), for keys whose hash covers more than what picks their group.
    group_of: GroupOf<K>,
}

/// How a state's key picks its key group, given the maximum parallelism.
pub(crate) type GroupOf<K> = fn(&K, usize) -> usize;

#[derive(Debug)]
enum Tier<K, V> {
    Heap(FxHashMap<K, V>),
    Store(Box<StoreTier<K, V>>),
}

impl<K: Clone, V: Clone> Clone for Values<K, V> {
    /// A copy of a heap state; a state attached to a store copies as an empty heap state.
    fn clone(&self) -> Self {
        let tier = match &self.tier {
            Tier::Heap(m) => Tier::Heap(m.clone()),
            Tier::Store(_) => Tier::Heap(FxHashMap::default()),
        };
        Values {
            name: self.name.clone(),
            tier,
            group_of: self.group_of,
        }
    }
}

/// A cached value: `None` is a key known to have no value (absent or removed).
#[derive(Debug)]
struct Slot<V> {
    value: Option<V>,
    dirty: bool,
    /// Read or written since the last eviction (CLOCK's reference bit).
    used: bool,
    /// Loaded by [`StoreTier::prefetch`] and not used yet: its first use is the one that
    /// loaded it, which does not count as a reuse.
    prefetched: bool,
}

/// A state in front of a store: the cache of decoded values and what it needs to reach the
/// store.
#[derive(Debug)]
struct StoreTier<K, V> {
    store: Arc<dyn KeyedStore>,
    id: u32,
    max_parallelism: usize,
    group_of: GroupOf<K>,
    operator: String,
    cache: FxHashMap<K, Slot<V>>,
    /// Most entries the cache holds before a write-back.
    cap: usize,
    /// The bytes `cap` is derived from: this state's share of the backend's value caches.
    share: CacheShare,
    /// Bytes an entry takes, as last measured (an estimate until the cache first fills).
    per_entry: usize,
    /// The first store failure not yet taken by the operator.
    error: Option<StoreError>,
    /// Whether the capacity was measured yet (at the first fill).
    measured: bool,
    /// Whether the store may hold keys of this state. Until the first write-back of a state
    /// that started empty it holds none, so a missing key needs no read.
    stored: bool,
}

impl<K, V> StoreTier<K, V>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    fn keep(&mut self, e: StoreError) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    /// The cache slot of `key`, loaded from the store when missing (writing back first if the
    /// cache is full). Only a use after the one that loaded it marks an entry used, so that
    /// keys read once are the first to go. A hit costs one lookup (and one atomic load, for the
    /// state's share).
    fn slot(&mut self, name: &str, key: K) -> &mut Slot<V> {
        self.follow_share();
        if self.cache.len() >= self.cap
            && !self.cache.contains_key(&key)
            && let Err(e) = self.evict(name)
        {
            self.keep(e);
        }
        let StoreTier {
            cache,
            store,
            id,
            max_parallelism,
            group_of,
            operator,
            error,
            stored,
            ..
        } = self;
        match cache.entry(key) {
            Entry::Occupied(o) => {
                let slot = o.into_mut();
                slot.touch();
                slot
            }
            Entry::Vacant(v) => {
                let value = if *stored {
                    match read(
                        &**store,
                        (*id, *group_of, *max_parallelism),
                        operator,
                        name,
                        v.key(),
                    ) {
                        Ok(value) => value,
                        Err(e) => {
                            if error.is_none() {
                                *error = Some(e);
                            }
                            None
                        }
                    }
                } else {
                    None
                };
                v.insert(Slot {
                    value,
                    dirty: false,
                    used: false,
                    prefetched: false,
                })
            }
        }
    }

    /// [`slot`](Self::slot) for a borrowed key: clones it only on a miss.
    fn slot_ref(&mut self, name: &str, key: &K) -> &mut Slot<V> {
        if self.cache.contains_key(key) {
            // A second lookup rather than a clone per hit.
            let slot = self.cache.get_mut(key).expect("the key was just found");
            slot.touch();
            return slot;
        }
        self.slot(name, key.clone())
    }

    /// Loads the keys of `keys` that are not cached with one read of many keys
    /// ([`KeyedStore::get_many`]), as many as the cache has room for after making room once.
    /// The operator calls it with the keys of a batch before processing the batch, so that its
    /// records find their keys cached. A failure is kept as a read's would be.
    fn prefetch<'a>(&mut self, name: &str, keys: impl IntoIterator<Item = &'a K>)
    where
        K: 'a,
    {
        if !self.stored {
            // The store holds no key of this state: every missing key is absent, no read needed.
            return;
        }
        let mut missing: Vec<&K> = Vec::new();
        let mut seen = rustc_hash::FxHashSet::default();
        for key in keys {
            if !self.cache.contains_key(key) && seen.insert(key) {
                missing.push(key);
            }
        }
        if missing.is_empty() {
            return;
        }
        self.follow_share();
        if self.cache.len() + missing.len() > self.cap
            && let Err(e) = self.evict(name)
        {
            self.keep(e);
            return;
        }
        // An eviction may have dropped keys found cached above: those are read one by one later.
        missing.truncate(self.cap.saturating_sub(self.cache.len()));
        let mut encoded = Vec::with_capacity(missing.len());
        for (i, key) in missing.iter().enumerate() {
            match store_key(self.group_of, self.max_parallelism, self.id, *key) {
                Ok(k) => encoded.push((k, i)),
                Err(e) => {
                    let e = decode_error(&self.operator, name, e);
                    self.keep(e);
                    return;
                }
            }
        }
        encoded.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let (store_keys, order): (Vec<Vec<u8>>, Vec<usize>) = encoded.into_iter().unzip();
        let mut values: Vec<Option<V>> = Vec::new();
        values.resize_with(missing.len(), || None);
        let mut failure = None;
        let read = self.store.get_many(&store_keys, &mut |i, bytes| {
            if let Some(bytes) = bytes {
                match codec::decode(bytes) {
                    Ok(v) => values[order[i]] = Some(v),
                    Err(e) => {
                        failure.get_or_insert(e);
                    }
                }
            }
        });
        if let Err(e) = read {
            self.keep(e);
            return;
        }
        if let Some(e) = failure {
            let e = decode_error(&self.operator, name, e);
            self.keep(e);
            return;
        }
        for (key, value) in missing.into_iter().zip(values) {
            self.cache.insert(
                key.clone(),
                Slot {
                    value,
                    dirty: false,
                    used: false,
                    prefetched: true,
                },
            );
        }
    }

    /// Makes room (CLOCK): writes every dirty entry back and re-sizes the capacity from the
    /// sizes it measured; if the cache is still full, drops the entries not used since the
    /// last eviction and clears the others' bits, and if that leaves it more than half full,
    /// drops arbitrary entries down to half.
    fn evict(&mut self, name: &str) -> Result<(), StoreError> {
        if !self.measured {
            // The first fill: measure a sample before writing anything back, so that a state
            // whose entries are smaller than the first estimate stays whole in memory.
            self.measured = true;
            self.size_from_sample(name)?;
            if self.cache.len() < self.cap {
                return Ok(());
            }
        }
        self.write_back(name, false)?;
        if self.cache.len() < self.cap {
            // The first estimate of an entry's size was too high: there is room after all.
            return Ok(());
        }
        self.drop_clean();
        Ok(())
    }

    /// Drops the entries not used since the last time (CLOCK), then more, down to half the
    /// capacity; every entry must be clean (just written back).
    fn drop_clean(&mut self) {
        self.cache
            .retain(|_, slot| std::mem::replace(&mut slot.used, false));
        let half = self.cap / 2;
        if self.cache.len() > half {
            let mut excess = self.cache.len() - half;
            self.cache.retain(|_, _| {
                if excess == 0 {
                    return true;
                }
                excess -= 1;
                false
            });
        }
    }

    /// Sizes the capacity from `n` entries measured at `bytes` encoded bytes in all.
    fn size_cap(&mut self, bytes: usize, n: usize) {
        if let Some(per_entry) = bytes.checked_div(n) {
            self.per_entry = per_entry + ENTRY_OVERHEAD;
            self.cap = capacity(self.share.bytes(), self.per_entry);
        }
    }

    /// Re-sizes the capacity when the state's share of the value caches changed (another
    /// state attached or went). A cache over its new capacity shrinks at its next load.
    fn follow_share(&mut self) {
        if self.share.changed() {
            self.cap = capacity(self.share.bytes(), self.per_entry);
        }
    }

    /// Sizes the capacity from the encoded sizes of up to `SAMPLE` cached entries.
    fn size_from_sample(&mut self, name: &str) -> Result<(), StoreError> {
        let (mut n, mut bytes) = (0usize, 0usize);
        for (k, slot) in self.cache.iter().take(SAMPLE) {
            let key = store_key(self.group_of, self.max_parallelism, self.id, k)
                .map_err(|e| decode_error(&self.operator, name, e))?;
            let value = match &slot.value {
                Some(v) => codec::encode(v)
                    .map_err(|e| decode_error(&self.operator, name, e))?
                    .len(),
                None => 0,
            };
            n += 1;
            bytes += key.len() + value;
        }
        self.size_cap(bytes, n);
        Ok(())
    }

    /// Writes every dirty entry to the store, in key order and in batches of about
    /// `WRITE_BATCH_BYTES`; with `evict`, empties the cache. Either way, sizes the capacity from
    /// what it measured, and a cache over it (values that grew while cached) drops clean
    /// entries down to it.
    ///
    /// Bounded batches keep a write-back within the memory budget: the encoded entries of a
    /// whole cache at once took as much memory again as the cache, and RocksDB put each batch
    /// whole into one memtable, past its write buffer size.
    fn write_back(&mut self, name: &str, evict: bool) -> Result<(), StoreError> {
        let (operator, max_parallelism, id, group_of) =
            (&self.operator, self.max_parallelism, self.id, self.group_of);
        let fail = |e| decode_error(operator, name, e);
        // The dirty keys encoded, in key order: a store's sorted memtable then inserts each key
        // next to the one before.
        let mut dirty: Vec<(Vec<u8>, &Slot<V>)> = Vec::new();
        for (k, slot) in self.cache.iter().filter(|(_, s)| s.dirty) {
            dirty.push((
                store_key(group_of, max_parallelism, id, k).map_err(fail)?,
                slot,
            ));
        }
        dirty.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let n = dirty.len();
        let (mut bytes, mut batch_bytes) = (0usize, 0usize);
        let mut batch: Vec<StoreWrite> = Vec::new();
        for (key, slot) in dirty {
            let value = match &slot.value {
                Some(v) => Some(codec::encode(v).map_err(fail)?),
                None => None,
            };
            let size = key.len() + value.as_ref().map_or(0, Vec::len);
            bytes += size;
            batch_bytes += size;
            batch.push((key, value));
            if batch_bytes >= WRITE_BATCH_BYTES {
                self.store.write(std::mem::take(&mut batch))?;
                batch_bytes = 0;
            }
        }
        if !batch.is_empty() {
            self.store.write(batch)?;
        }
        if n > 0 {
            self.stored = true;
            for slot in self.cache.values_mut() {
                slot.dirty = false;
            }
        }
        self.size_cap(bytes, n);
        if evict {
            self.cache.clear();
        } else if self.cache.len() > self.cap {
            // The values grew past the budget since they were loaded (a state whose keys all
            // stay cached never loads another, so would never shrink otherwise).
            self.drop_clean();
        }
        Ok(())
    }

    /// Calls `f` with the raw key (after the prefix) and value of every stored entry of key
    /// group `group`, in key order.
    fn scan_group(
        &self,
        group: usize,
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let start = key_prefix(group, self.id);
        let end = prefix_end(&start);
        self.store
            .scan(&start, &end, &mut |k, v| f(&k[start.len()..], v))
    }
}

impl<V> Slot<V> {
    /// Marks a use of a cached entry: a reuse, unless it is the first use of a prefetched one.
    fn touch(&mut self) {
        if std::mem::take(&mut self.prefetched) {
            return;
        }
        self.used = true;
    }
}

/// The store key of `key` in state `id`.
fn store_key<K: Serialize>(
    group_of: GroupOf<K>,
    max_parallelism: usize,
    id: u32,
    key: &K,
) -> Result<Vec<u8>, CodecError> {
    let mut k = key_prefix(group_of(key, max_parallelism), id).to_vec();
    codec::encode_into(key, &mut k)?;
    Ok(k)
}

/// Reads and decodes the value of `key` in state `id` of `store`.
fn read<K: Serialize, V: DeserializeOwned>(
    store: &dyn KeyedStore,
    (id, group_of, max_parallelism): (u32, GroupOf<K>, usize),
    operator: &str,
    name: &str,
    key: &K,
) -> Result<Option<V>, StoreError> {
    let k = store_key(group_of, max_parallelism, id, key)
        .map_err(|e| decode_error(operator, name, e))?;
    match store.get(&k)? {
        None => Ok(None),
        Some(bytes) => codec::decode(&bytes)
            .map(Some)
            .map_err(|e| decode_error(operator, name, e)),
    }
}

fn decode_error(operator: &str, state: &str, e: CodecError) -> StoreError {
    StoreError::Decode {
        state: state.to_string(),
        operator: operator.to_string(),
        message: e.to_string(),
    }
}

impl<K, V> Values<K, V>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    /// An empty state named `name` (unique within its operator), on the heap.
    pub(crate) fn new(name: &str) -> Self {
        Values {
            name: name.to_string(),
            tier: Tier::Heap(FxHashMap::default()),
            group_of: key_group::<K>,
        }
    }

    /// Picks each key's key group with `group_of` instead of the key's hash: for a key that
    /// hashes more than its group depends on (so that the cache spreads it well). Set before
    /// the state holds anything.
    pub(crate) fn grouped_by(mut self, group_of: GroupOf<K>) -> Self {
        self.group_of = group_of;
        self
    }

    /// The state's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Puts this state in front of `store`, which the state's operator (named `operator`, for
    /// errors) opened from the job's state backend: what the state holds so far (restored keys)
    /// goes to the store, and from now on at most about its share of `caches` (a byte count is
    /// a fixed share) of decoded values stay in memory. Attaching twice is an error of the
    /// caller and keeps the first store.
    pub(crate) fn attach(
        &mut self,
        store: Arc<dyn KeyedStore>,
        max_parallelism: usize,
        caches: impl Into<ValueCaches>,
        operator: &str,
    ) -> Result<(), StateError> {
        let group_of = self.group_of;
        let Tier::Heap(values) = &mut self.tier else {
            return Ok(());
        };
        let id = state_id(&self.name);
        // Restored files may hold keys of this state; a fresh store holds none.
        let mut stored = !values.is_empty();
        for group in 0..max_parallelism {
            if stored {
                break;
            }
            let start = key_prefix(group, id);
            store.scan(&start, &prefix_end(&start), &mut |_, _| {
                stored = true;
                false
            })?;
        }
        let mut batch = Vec::new();
        for (k, v) in values.drain() {
            batch.push((
                store_key(group_of, max_parallelism, id, &k)?,
                Some(codec::encode(&v)?),
            ));
            if batch.len() >= 4096 {
                store.write(std::mem::take(&mut batch))?;
            }
        }
        if !batch.is_empty() {
            store.write(batch)?;
        }
        let share = caches.into().join();
        self.tier = Tier::Store(Box::new(StoreTier {
            store,
            id,
            max_parallelism,
            group_of: self.group_of,
            operator: operator.to_string(),
            cache: FxHashMap::default(),
            cap: capacity(share.bytes(), FIRST_ENTRY_ESTIMATE + ENTRY_OVERHEAD),
            share,
            per_entry: FIRST_ENTRY_ESTIMATE + ENTRY_OVERHEAD,
            error: None,
            measured: false,
            stored,
        }));
        Ok(())
    }

    /// Whether the state is in front of a store.
    pub(crate) fn is_attached(&self) -> bool {
        matches!(self.tier, Tier::Store(_))
    }

    /// Number of keys on the heap; `None` in front of a store.
    pub(crate) fn heap_len(&self) -> Option<usize> {
        match &self.tier {
            Tier::Heap(m) => Some(m.len()),
            Tier::Store(_) => None,
        }
    }

    /// On the heap, keeps only the keys for which `keep` returns true; in front of a store it
    /// does nothing.
    pub(crate) fn retain_heap(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        if let Tier::Heap(m) = &mut self.tier {
            m.retain(|k, v| keep(k, v));
        }
    }

    /// Keeps `e` for [`take_error`](Self::take_error) (in front of a store; the heap has no
    /// store failures).
    pub(crate) fn keep_error(&mut self, e: StoreError) {
        if let Tier::Store(s) = &mut self.tier {
            s.keep(e);
        }
    }

    /// Whether the state is in front of a store whose snapshots are its files (so a snapshot
    /// writes no entries of it).
    pub(crate) fn incremental(&self) -> bool {
        match &self.tier {
            Tier::Heap(_) => false,
            Tier::Store(s) => s.store.incremental(),
        }
    }

    /// Writes the changed values back to the store (nothing on the heap).
    pub(crate) fn flush(&mut self) -> Result<(), StoreError> {
        match &mut self.tier {
            Tier::Heap(_) => Ok(()),
            Tier::Store(s) => s.write_back(&self.name, false),
        }
    }

    /// With a store: writes back, then calls `f` with each stored key (its encoding after the
    /// key-group and state prefix) and value of key group `group`, from the encoded key `from`
    /// on, in key order, until `f` returns false. On the heap it calls nothing: for states whose
    /// keys encode what is scanned for first (a window, then the key).
    pub(crate) fn scan_stored(
        &mut self,
        group: usize,
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let Tier::Store(s) = &mut self.tier else {
            return Ok(());
        };
        s.write_back(&self.name, false)?;
        let prefix = key_prefix(group, s.id);
        let mut start = prefix.to_vec();
        start.extend_from_slice(from);
        s.store.scan(&start, &prefix_end(&prefix), &mut |k, v| {
            f(&k[prefix.len()..], v)
        })
    }

    /// Sets (`Some`) or removes (`None`) the values of keys whose values the caller knows
    /// already (it just scanned them): with a store, in one batch and without reading them
    /// first.
    pub(crate) fn write_through(&mut self, writes: Vec<(K, Option<V>)>) -> Result<(), StateError> {
        match &mut self.tier {
            Tier::Heap(m) => {
                for (k, v) in writes {
                    match v {
                        Some(v) => m.insert(k, v),
                        None => m.remove(&k),
                    };
                }
            }
            Tier::Store(s) => {
                let mut batch = Vec::with_capacity(writes.len());
                for (k, v) in writes {
                    batch.push((
                        store_key(s.group_of, s.max_parallelism, s.id, &k)?,
                        v.map(|v| codec::encode(&v)).transpose()?,
                    ));
                    s.cache.remove(&k);
                }
                if !batch.is_empty() {
                    s.store.write(batch)?;
                    s.stored = true;
                }
            }
        }
        Ok(())
    }

    /// The first store failure since the last call, if any. With a store, the reading methods
    /// cannot return one: they act as if the key had no value and keep the failure here, and
    /// the operator fails with it after the user code that saw it returns.
    pub(crate) fn take_error(&mut self) -> Option<StoreError> {
        match &mut self.tier {
            Tier::Heap(_) => None,
            Tier::Store(s) => s.error.take(),
        }
    }

    /// Loads the values of `keys` that are not in memory with one read of many keys from the
    /// store (RocksDB's `MultiGet`), so that the calls that follow find them cached: an
    /// operator calls it with the keys of a batch of records before processing them. On the
    /// heap, and for a state whose store holds none of its keys yet, it does nothing. Keys
    /// beyond what the cache has room for are read one by one when used, as without it.
    ///
    /// ```
    /// use sluice_runtime::state::ValueState;
    ///
    /// let mut counts: ValueState<u32, u64> = ValueState::new("counts");
    /// let batch = [3, 1, 3];
    /// counts.prefetch(&batch);
    /// for key in batch {
    ///     *counts.get_or_default(key) += 1;
    /// }
    /// assert_eq!(counts.get(&3), Some(&2));
    /// ```
    pub(crate) fn prefetch<'a>(&mut self, keys: impl IntoIterator<Item = &'a K>)
    where
        K: 'a,
    {
        if let Tier::Store(s) = &mut self.tier {
            s.prefetch(&self.name, keys);
        }
    }

    /// The value of `key`.
    pub(crate) fn get(&mut self, key: &K) -> Option<&V> {
        match &mut self.tier {
            Tier::Heap(m) => m.get(key),
            Tier::Store(s) => s.slot_ref(&self.name, key).value.as_ref(),
        }
    }

    /// The value of `key`, mutably.
    pub(crate) fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        match &mut self.tier {
            Tier::Heap(m) => m.get_mut(key),
            Tier::Store(s) => {
                let slot = s.slot_ref(&self.name, key);
                if slot.value.is_some() {
                    slot.dirty = true;
                }
                slot.value.as_mut()
            }
        }
    }

    /// The value of `key`, inserting the default first if absent.
    pub(crate) fn get_or_default(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        match &mut self.tier {
            Tier::Heap(m) => m.entry(key).or_default(),
            Tier::Store(s) => {
                let slot = s.slot(&self.name, key);
                slot.dirty = true;
                slot.value.get_or_insert_with(V::default)
            }
        }
    }

    /// Sets the value of `key`, returning the one it replaces.
    pub(crate) fn update(&mut self, key: K, value: V) -> Option<V> {
        match &mut self.tier {
            Tier::Heap(m) => m.insert(key, value),
            Tier::Store(s) => {
                let slot = s.slot(&self.name, key);
                slot.dirty = true;
                slot.value.replace(value)
            }
        }
    }

    /// Removes `key`, returning its value.
    pub(crate) fn remove(&mut self, key: &K) -> Option<V> {
        match &mut self.tier {
            Tier::Heap(m) => m.remove(key),
            Tier::Store(s) => {
                let slot = s.slot_ref(&self.name, key);
                let old = slot.value.take();
                if old.is_some() {
                    slot.dirty = true;
                }
                old
            }
        }
    }

    /// Calls `f` with every key and its value, which it may change; the first error stops the
    /// visit. With a store this streams over the stored keys, key group by key group, writing
    /// back what changed.
    pub(crate) fn for_each_mut<E: From<StoreError>>(
        &mut self,
        mut f: impl FnMut(&K, &mut V) -> Result<(), E>,
    ) -> Result<(), E> {
        self.retain_or_visit(|k, v| f(k, v).map(|()| true))
    }

    pub(crate) fn retain_or_visit<E: From<StoreError>>(
        &mut self,
        mut f: impl FnMut(&K, &mut V) -> Result<bool, E>,
    ) -> Result<(), E> {
        let name = self.name.clone();
        match &mut self.tier {
            Tier::Heap(m) => {
                let mut failed = None;
                m.retain(|k, v| {
                    if failed.is_some() {
                        return true;
                    }
                    match f(k, v) {
                        Ok(keep) => keep,
                        Err(e) => {
                            failed = Some(e);
                            true
                        }
                    }
                });
                failed.map_or(Ok(()), Err)
            }
            Tier::Store(s) => {
                s.write_back(&name, true)?;
                for group in 0..s.max_parallelism {
                    let mut entries: Vec<(K, V)> = Vec::new();
                    let mut bad = None;
                    s.scan_group(group, &mut |k, v| match (
                        codec::decode::<K>(k),
                        codec::decode::<V>(v),
                    ) {
                        (Ok(k), Ok(v)) => {
                            entries.push((k, v));
                            true
                        }
                        (Err(e), _) | (_, Err(e)) => {
                            bad = Some(e);
                            false
                        }
                    })?;
                    if let Some(e) = bad {
                        return Err(decode_error(&s.operator, &name, e).into());
                    }
                    let mut batch = Vec::new();
                    for (k, mut v) in entries {
                        let keep = f(&k, &mut v)?;
                        let key = store_key(s.group_of, s.max_parallelism, s.id, &k)
                            .map_err(|e| decode_error(&s.operator, &name, e))?;
                        let value = if keep {
                            Some(
                                codec::encode(&v)
                                    .map_err(|e| decode_error(&s.operator, &name, e))?,
                            )
                        } else {
                            None
                        };
                        batch.push((key, value));
                    }
                    if !batch.is_empty() {
                        s.store.write(batch)?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Number of keys (with a store, a scan of all of them).
    pub(crate) fn len(&mut self) -> usize {
        match &mut self.tier {
            Tier::Heap(m) => m.len(),
            Tier::Store(_) => {
                let mut n = 0;
                match self.for_each_mut(|_, _| {
                    n += 1;
                    Ok::<(), StoreError>(())
                }) {
                    Ok(()) => n,
                    Err(e) => {
                        if let Tier::Store(s) = &mut self.tier {
                            s.keep(e);
                        }
                        n
                    }
                }
            }
        }
    }

    /// Writes one keyed entry per non-empty key group.
    pub(crate) fn snapshot_into(
        &mut self,
        max_parallelism: usize,
        state: &mut OperatorState,
    ) -> Result<(), StateError> {
        self.snapshot_keeping(max_parallelism, state, None)
    }

    /// [`snapshot_into`](Self::snapshot_into), leaving out a store's entries whose encoded value
    /// `keep` refuses (in a full snapshot; the heap's entries are all written: a caller filters
    /// them first).
    pub(crate) fn snapshot_keeping(
        &mut self,
        max_parallelism: usize,
        state: &mut OperatorState,
        keep: Option<KeepValue<'_>>,
    ) -> Result<(), StateError> {
        match &mut self.tier {
            Tier::Heap(values) => {
                // One pass over the map: each pair is encoded straight into its key group's
                // buffer. An entry is the encoding of the group's `Vec<(K, V)>` (its length as a
                // varint, then the pairs), so the count is put in front at the end.
                let mut groups: Vec<(u64, Vec<u8>)> =
                    (0..max_parallelism).map(|_| (0, Vec::new())).collect();
                for (k, v) in values.iter() {
                    let (n, buf) = &mut groups[(self.group_of)(k, max_parallelism)];
                    codec::encode_into(&(k, v), buf)?;
                    *n += 1;
                }
                for (g, (n, pairs)) in groups.into_iter().enumerate() {
                    push_group(state, &self.name, g, n, pairs)?;
                }
            }
            Tier::Store(s) => {
                s.write_back(&self.name, false)?;
                if s.store.incremental() {
                    // The task takes the store's files once all its states wrote back.
                    return Ok(());
                }
                // A stored key is the encoded key after the prefix and its value the encoded
                // value, so a pair's encoding is the two byte strings one after the other.
                for g in 0..s.max_parallelism {
                    let (mut n, mut pairs) = (0u64, Vec::new());
                    s.scan_group(g, &mut |k, v| {
                        if keep.is_some_and(|keep| !keep(v)) {
                            return true;
                        }
                        pairs.extend_from_slice(k);
                        pairs.extend_from_slice(v);
                        n += 1;
                        true
                    })?;
                    push_group(state, &self.name, g, n, pairs)?;
                }
            }
        }
        Ok(())
    }

    /// Adds every key of this state's entries in `state` (other states' entries are skipped).
    pub(crate) fn restore_from(&mut self, state: &OperatorState) -> Result<(), StateError> {
        let entries = state
            .keyed_entries()
            .iter()
            .filter(|e| e.state == self.name);
        match &mut self.tier {
            Tier::Heap(values) => {
                for e in entries {
                    let pairs: Vec<(K, V)> = codec::decode(&e.data)?;
                    values.extend(pairs);
                }
            }
            Tier::Store(s) => {
                for e in entries {
                    let pairs: Vec<(K, V)> = codec::decode(&e.data)?;
                    let mut batch = Vec::with_capacity(pairs.len());
                    for (k, v) in pairs {
                        s.cache.remove(&k);
                        batch.push((
                            store_key(s.group_of, s.max_parallelism, s.id, &k)?,
                            Some(codec::encode(&v)?),
                        ));
                    }
                    s.store.write(batch)?;
                    s.stored = true;
                }
            }
        }
        Ok(())
    }
}

/// Whether a stored value goes into a snapshot, from its encoding.
pub(crate) type KeepValue<'a> = &'a dyn Fn(&[u8]) -> bool;

/// Appends the keyed entry of `n` encoded pairs of key group `group`, if there are any.
fn push_group(
    state: &mut OperatorState,
    name: &str,
    group: usize,
    n: u64,
    pairs: Vec<u8>,
) -> Result<(), CodecError> {
    if n == 0 {
        return Ok(());
    }
    let mut data = Vec::with_capacity(pairs.len() + 10);
    codec::encode_into(&n, &mut data)?;
    data.extend_from_slice(&pairs);
    state.push_keyed(KeyGroupEntry {
        state: name.to_string(),
        key_group: group as u32,
        data,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::ValueState;
    use crate::state::memory_store;
    use crate::state::redistribute;

    #[test]
    fn keyed_state_follows_its_keys_when_rescaled_from_2_to_3() {
        let maxp = 128;
        let keys: Vec<u64> = (0..1000).collect();
        // two old subtasks each hold the keys they own at parallelism 2
        let mut old = Vec::new();
        for s in 0..2 {
            let mut st: ValueState<u64, u64> = ValueState::new("c");
            for &k in &keys {
                let g = key_group(&k, maxp);
                if crate::key_groups::subtask_for_key_group(g, maxp, 2) == s {
                    st.update(k, k * 10);
                }
            }
            let mut snap = OperatorState::default();
            st.snapshot_into(maxp, &mut snap).unwrap();
            old.push(snap);
        }
        let new = redistribute(old, 3, maxp);
        let mut seen = 0;
        for (s, snap) in new.iter().enumerate() {
            let mut st: ValueState<u64, u64> = ValueState::new("c");
            st.restore_from(snap).unwrap();
            for (k, v) in st.entries().unwrap().iter() {
                assert_eq!(*v, k * 10);
                let g = key_group(k, maxp);
                assert_eq!(crate::key_groups::subtask_for_key_group(g, maxp, 3), s);
                seen += 1;
            }
        }
        assert_eq!(seen, keys.len());
    }

    #[test]
    fn a_key_group_entry_is_the_encoding_of_its_pairs() {
        let mut st: ValueState<u64, String> = ValueState::new("s");
        for k in 0..500u64 {
            st.update(k, format!("v{k}"));
        }
        let mut snap = OperatorState::default();
        st.snapshot_into(8, &mut snap).unwrap();
        for e in snap.keyed_entries() {
            let pairs: Vec<(u64, String)> = codec::decode(&e.data).unwrap();
            let again: Vec<(&u64, &String)> = pairs.iter().map(|(k, v)| (k, v)).collect();
            assert_eq!(codec::encode(&again).unwrap(), e.data);
            assert!(
                pairs
                    .iter()
                    .all(|(k, _)| key_group(k, 8) as u32 == e.key_group)
            );
        }
    }

    #[test]
    fn states_with_other_names_are_skipped() {
        let mut a: ValueState<u8, u8> = ValueState::new("a");
        a.update(1, 1);
        let mut snap = OperatorState::default();
        a.snapshot_into(128, &mut snap).unwrap();
        let mut b: ValueState<u8, u8> = ValueState::new("b");
        b.restore_from(&snap).unwrap();
        assert!(b.is_empty());
    }

    use proptest::prelude::*;

    /// A state in front of a memory store whose cache holds only `MIN_CACHED` entries.
    fn on_store<V: Serialize + DeserializeOwned>(name: &str) -> ValueState<u32, V> {
        let mut st = ValueState::new(name);
        st.attach(memory_store(), 16, 0, "test").unwrap();
        st
    }

    #[derive(Clone, Debug)]
    enum Op {
        Add(u32, u32),
        Set(u32, u32),
        Remove(u32),
        Get(u32),
        Snapshot,
        /// A batch's keys read ahead, duplicates and all (up to twice the cache's 16 entries).
        Prefetch(Vec<u32>),
    }

    fn op() -> impl Strategy<Value = Op> {
        let key = 0u32..300;
        prop_oneof![
            proptest::collection::vec(key.clone(), 0..32).prop_map(Op::Prefetch),
            (key.clone(), 0u32..10).prop_map(|(k, v)| Op::Add(k, v)),
            (key.clone(), 0u32..10).prop_map(|(k, v)| Op::Set(k, v)),
            key.clone().prop_map(Op::Remove),
            key.prop_map(Op::Get),
            Just(Op::Snapshot),
        ]
    }

    proptest! {
        /// Whatever the sequence of reads, writes and snapshots, a state in front of a store
        /// (with a cache far smaller than its keys, so that it writes back and reloads all the
        /// time) answers as the heap state does and snapshots to the very same bytes.
        #[test]
        fn a_store_backed_state_behaves_as_the_heap_one(ops in proptest::collection::vec(op(), 1..600)) {
            let mut heap: ValueState<u32, u32> = ValueState::new("s");
            let mut store: ValueState<u32, u32> = on_store("s");
            for op in ops {
                match op {
                    Op::Add(k, v) => {
                        *heap.get_or_default(k) += v;
                        *store.get_or_default(k) += v;
                    }
                    Op::Set(k, v) => prop_assert_eq!(heap.update(k, v), store.update(k, v)),
                    Op::Remove(k) => prop_assert_eq!(heap.remove(&k), store.remove(&k)),
                    Op::Get(k) => prop_assert_eq!(heap.get(&k).copied(), store.get(&k).copied()),
                    Op::Prefetch(keys) => {
                        heap.prefetch(&keys);
                        store.prefetch(&keys);
                    }
                    Op::Snapshot => {
                        let (mut a, mut b) = (OperatorState::default(), OperatorState::default());
                        heap.snapshot_into(16, &mut a).unwrap();
                        store.snapshot_into(16, &mut b).unwrap();
                        let mut ea = a.keyed_entries().to_vec();
                        ea.sort_by_key(|e| e.key_group);
                        let eb = b.keyed_entries().to_vec();
                        // The heap encodes in hash order, the store in key order: compare the
                        // pairs each entry holds.
                        prop_assert_eq!(ea.len(), eb.len());
                        for (x, y) in ea.iter().zip(&eb) {
                            prop_assert_eq!(x.key_group, y.key_group);
                            let mut px: Vec<(u32, u32)> = codec::decode(&x.data).unwrap();
                            let py: Vec<(u32, u32)> = codec::decode(&y.data).unwrap();
                            px.sort();
                            let mut sorted = py.clone();
                            sorted.sort();
                            prop_assert_eq!(px, sorted);
                        }
                    }
                }
            }
            prop_assert!(store.take_error().is_none());
            let mut a = heap.entries().unwrap();
            let mut b = store.entries().unwrap();
            a.sort();
            b.sort();
            prop_assert_eq!(a, b);
        }
    }

    #[test]
    fn a_heap_snapshot_restores_into_a_store_and_back() {
        let mut heap: ValueState<u32, String> = ValueState::new("s");
        for k in 0..1000 {
            heap.update(k, format!("v{k}"));
        }
        let mut snap = OperatorState::default();
        heap.snapshot_into(16, &mut snap).unwrap();

        let mut store: ValueState<u32, String> = on_store("s");
        store.restore_from(&snap).unwrap();
        assert_eq!(store.len(), 1000);
        assert_eq!(store.get(&999).map(String::as_str), Some("v999"));
        let mut again = OperatorState::default();
        store.snapshot_into(16, &mut again).unwrap();

        let mut back: ValueState<u32, String> = ValueState::new("s");
        back.restore_from(&again).unwrap();
        let mut entries = back.entries().unwrap();
        entries.sort();
        assert_eq!(entries.len(), 1000);
        assert_eq!(entries[7], (7, "v7".to_string()));
    }

    #[test]
    fn attaching_moves_what_was_restored_into_the_store() {
        let mut st: ValueState<u32, u32> = ValueState::new("s");
        st.update(1, 10);
        st.update(2, 20);
        let store = memory_store();
        st.attach(store.clone(), 16, 0, "test").unwrap();
        let mut n = 0;
        store
            .scan(&[], &[0xFF; 8], &mut |_, _| {
                n += 1;
                true
            })
            .unwrap();
        assert_eq!(n, 2, "both keys are in the store, not only in memory");
        assert_eq!(st.get(&2), Some(&20));
    }

    #[test]
    fn retain_and_for_each_mut_reach_keys_that_are_only_in_the_store() {
        let mut st: ValueState<u32, u32> = on_store("s");
        for k in 0..500 {
            st.update(k, k);
        }
        st.retain(|k, _| k % 2 == 0).unwrap();
        st.for_each_mut(|_, v| {
            *v += 1;
            Ok::<(), StoreError>(())
        })
        .unwrap();
        assert_eq!(st.len(), 250);
        assert_eq!(st.get(&4), Some(&5));
        assert_eq!(st.get(&5), None);
    }

    /// A store whose reads fail, and whose scans find one entry (as if it had been restored).
    #[derive(Debug)]
    struct Broken;

    impl KeyedStore for Broken {
        fn get(&self, _key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
            Err(StoreError::Io {
                backend: "broken".into(),
                operator: "count (subtask 0)".into(),
                action: "read",
                message: "disk on fire".into(),
            })
        }
        fn write(&self, _batch: Vec<StoreWrite>) -> Result<(), StoreError> {
            Ok(())
        }
        fn scan(
            &self,
            start: &[u8],
            _end: &[u8],
            f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
        ) -> Result<(), StoreError> {
            f(start, b"");
            Ok(())
        }
    }

    #[test]
    fn a_failed_read_is_kept_for_the_operator_to_fail_with() {
        let mut st: Values<u32, u32> = Values::new("s");
        st.attach(Arc::new(Broken), 16, 1 << 20, "count (subtask 0)")
            .unwrap();
        assert_eq!(st.get(&1), None);
        let e = st.take_error().expect("the read failed");
        assert!(e.to_string().contains("disk on fire"), "{e}");
        assert!(e.to_string().contains("count (subtask 0)"), "{e}");
        assert!(st.take_error().is_none(), "taken once");
    }

    fn instrumented() -> Arc<crate::state::CountingStore> {
        Arc::default()
    }

    #[test]
    fn a_key_used_between_evictions_stays_cached() {
        let store = instrumented();
        let mut st: ValueState<u32, u32> = ValueState::new("s");
        st.attach(store.clone(), 16, 0, "test").unwrap();
        *st.get_or_default(0) += 1;
        // A hot key between every cold one: the cache (16 entries) fills and is evicted again
        // and again, but the hot key is used each time and so never dropped.
        for cold in 1..1_000 {
            *st.get_or_default(cold) += 1;
            *st.get_or_default(0) += 1;
        }
        // The store starts empty: the 16 keys cached before the first write-back (the hot one
        // among them) need no read; every later cold key is read once, and the hot one never.
        let reads = store.gets.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            reads,
            1_000 - 16,
            "one read per cold key after the first write-back"
        );
        assert_eq!(st.get(&0), Some(&1_000));
    }

    #[test]
    fn a_cache_with_room_after_measuring_keeps_what_it_holds() {
        // 64 KiB of cache: the first estimate (304 bytes an entry) allows 215 entries; at that
        // first fill a sample measures about 10, so there is room for all and nothing goes.
        let store = instrumented();
        let mut st: ValueState<u32, u32> = ValueState::new("s");
        st.attach(store.clone(), 16, 64 << 10, "test").unwrap();
        for k in 0..1_000 {
            st.update(k, k);
        }
        // (Keys first seen after the write-back were looked up in the store.)
        store.gets.store(0, std::sync::atomic::Ordering::Relaxed);
        for k in 0..1_000 {
            assert_eq!(st.get(&k), Some(&k));
        }
        assert_eq!(
            store.gets.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "every key stayed cached"
        );
    }

    /// Values that grow after they were loaded (a map or list kept whole) take the cache past
    /// its bytes while every access hits, so no load ever evicts: the next write-back (every
    /// snapshot does one) measures them and drops entries down to the budget.
    #[test]
    fn values_that_grew_past_the_budget_are_dropped_at_the_next_write_back() {
        fn cached(st: &Values<u32, Vec<u8>>) -> usize {
            match &st.tier {
                Tier::Store(t) => t.cache.len(),
                Tier::Heap(_) => panic!("attached"),
            }
        }
        let store = instrumented();
        let mut st: Values<u32, Vec<u8>> = Values::new("s");
        // 64 KiB: about 200 entries at the first estimate of an entry's size.
        st.attach(store.clone(), 16, 64 << 10, "test").unwrap();
        for k in 0..64 {
            st.update(k, Vec::new());
        }
        for _ in 0..64 {
            for k in 0..64 {
                if let Some(v) = st.get_mut(&k) {
                    v.extend_from_slice(&[7; 256]);
                }
            }
        }
        assert_eq!(cached(&st), 64, "every key hit: nothing evicted");
        st.flush().unwrap();
        // 64 values of 16 KiB in 64 KiB: the fewest a cache keeps (16), or half of them.
        assert!(cached(&st) <= 16, "{} cached", cached(&st));
        for k in 0..64 {
            assert_eq!(st.get(&k).map(Vec::len), Some(64 * 256), "read back");
        }
        assert!(cached(&st) <= 16, "{} cached", cached(&st));
    }

    #[test]
    fn states_sharing_value_caches_shrink_as_others_attach_and_grow_back() {
        use std::sync::atomic::Ordering::Relaxed;
        fn cached(st: &Values<u32, u32>) -> usize {
            match &st.tier {
                Tier::Store(t) => t.cache.len(),
                Tier::Heap(_) => panic!("attached"),
            }
        }
        // 64 KiB for all states, as much for one alone: about 1,000 entries of this size.
        let caches = ValueCaches::shared(64 << 10, 64 << 10);
        let store = instrumented();
        let mut a: Values<u32, u32> = Values::new("a");
        a.attach(store.clone(), 16, caches.clone(), "test").unwrap();
        for k in 0..1_000 {
            a.update(k, k);
        }
        assert_eq!(cached(&a), 1_000, "alone, the state keeps every key");

        // A second state attaches: the first's share halves, and it shrinks at its next load.
        let mut b: Values<u32, u32> = Values::new("b");
        b.attach(store.clone(), 16, caches.clone(), "test").unwrap();
        assert_eq!(caches.states(), 2);
        a.update(1_000, 1_000);
        assert!(
            cached(&a) <= 600,
            "{} entries in half the budget",
            cached(&a)
        );
        store.gets.store(0, Relaxed);
        for k in 0..=1_000 {
            assert_eq!(a.get(&k), Some(&k));
        }
        assert!(
            store.gets.load(Relaxed) > 0,
            "the keys it dropped are read back"
        );

        // The second goes: the first may hold everything again.
        drop(b);
        assert_eq!(caches.states(), 1);
        for k in 0..=1_000 {
            a.get(&k);
        }
        store.gets.store(0, Relaxed);
        for k in 0..=1_000 {
            assert_eq!(a.get(&k), Some(&k));
        }
        assert_eq!(store.gets.load(Relaxed), 0, "every key is cached again");
        assert!(a.take_error().is_none());
    }

    #[test]
    fn a_prefetched_batch_is_read_in_one_call_and_then_found_cached() {
        use std::sync::atomic::Ordering::Relaxed;
        let store = instrumented();
        let mut st: Values<u32, u32> = Values::new("s");
        st.attach(store.clone(), 16, 64 << 10, "test").unwrap();
        for k in 0..100 {
            st.update(k, k * 10);
        }
        let Tier::Store(tier) = &mut st.tier else {
            panic!("attached")
        };
        tier.write_back("s", true).unwrap();
        store.gets.store(0, Relaxed);

        // Keys 0..50 twice over and a key the store does not hold.
        let batch: Vec<u32> = (0..50).chain(0..50).chain([500]).collect();
        st.prefetch(&batch);
        assert_eq!(store.many.load(Relaxed), 1, "one read of many keys");
        for k in &batch {
            let want = (*k < 100).then_some(k * 10);
            assert_eq!(st.get(k).copied(), want);
        }
        assert_eq!(
            store.gets.load(Relaxed),
            0,
            "every key of the batch was cached"
        );
        st.prefetch(&batch);
        assert_eq!(store.many.load(Relaxed), 1, "nothing left to read");
        assert!(st.take_error().is_none());
    }

    #[test]
    fn a_prefetched_key_used_once_is_the_first_to_go() {
        // Sixteen entries: a prefetched key used once is not marked as reused, so the next
        // eviction drops it and keeps the key used twice.
        let store = instrumented();
        let mut st: Values<u32, u32> = Values::new("s");
        st.attach(store.clone(), 16, 0, "test").unwrap();
        for k in 0..40 {
            st.update(k, k);
        }
        let Tier::Store(tier) = &mut st.tier else {
            panic!("attached")
        };
        tier.write_back("s", true).unwrap();
        st.prefetch(&[1, 2]);
        assert_eq!(st.get(&1), Some(&1));
        assert_eq!(st.get(&2), Some(&2));
        assert_eq!(st.get(&2), Some(&2));
        for k in 20..40 {
            st.get(&k);
        }
        let Tier::Store(tier) = &st.tier else {
            panic!("attached")
        };
        assert!(!tier.cache.contains_key(&1), "used once: dropped");
        assert!(tier.cache.contains_key(&2), "used again: kept");
    }

    #[test]
    fn a_large_write_back_goes_in_bounded_batches_in_key_order() {
        let store = instrumented();
        let mut st: ValueState<u32, Vec<u8>> = ValueState::new("s");
        st.attach(store.clone(), 16, 64 << 20, "test").unwrap();
        for k in 0..30_000 {
            st.update(k, vec![7; 100]);
        }
        st.flush().unwrap();
        let sizes = store.writes.lock().unwrap().clone();
        let total: usize = sizes.iter().sum();
        assert!(total > 3_000_000, "{total}");
        assert!(sizes.len() >= 3, "{sizes:?}");
        assert!(
            sizes.iter().all(|b| *b < WRITE_BATCH_BYTES + 200),
            "no write much beyond the bound: {sizes:?}"
        );
        for k in [0, 12_345, 29_999] {
            assert_eq!(st.get(&k).map(Vec::len), Some(100));
        }
        let mut keys = Vec::new();
        store
            .scan(&[], &[0xFF; 8], &mut |k, _| {
                keys.push(k.to_vec());
                true
            })
            .unwrap();
        assert_eq!(keys.len(), 30_000);
    }
}
