//! [`MapState`] (a map per key) and [`KeyedListState`] (a list per key), each one
//! [`ValueState`] underneath whose value is a key's whole map or list (a map in front of a
//! store keeps each entry as a value of its own instead: `map_stored.rs`); and
//! [`AttachKeyedState`], which puts any of the three in front of the job's keyed store.
//!
//! With a time-to-live each entry of a map and each item of a list keeps the time of its last
//! write (or read), as in Flink, and the key's value as a whole is a [`ValueState`] with the
//! same time-to-live: its own time is that of the last write to any entry, so a store drops a
//! map or list whose every entry expired, and a read finds it absent. Entries that expired in a
//! map or list that is still alive are removed when the key is next read or written.

use super::backend::{KeyedStore, StoreError};
use super::map_stored::{StoredMap, Whole};
use super::ttl::{Stamped, StateTtlConfig, expired, visible};
use super::value::ValueState;
use super::value_cache::ValueCaches;
use super::{OperatorState, StateError};
use crate::timer::ProcessingClock;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use std::collections::BTreeMap;
use std::collections::btree_map;
use std::hash::Hash;
use std::sync::Arc;

/// Keyed state that can live in front of a [`KeyedStore`]: [`ValueState`], [`MapState`] and
/// [`KeyedListState`]. [`OperatorContext::attach_keyed_state`](crate::OperatorContext::attach_keyed_state)
/// takes any of them.
pub trait AttachKeyedState {
    /// Puts the state in front of `store`; see [`ValueState::attach`].
    fn attach_to(
        &mut self,
        store: Arc<dyn KeyedStore>,
        max_parallelism: usize,
        caches: ValueCaches,
        operator: &str,
    ) -> Result<(), StateError>;

    /// The state's name and time-to-live, when it has one: checked before the state attaches
    /// (on the heap too), so that a time-to-live under a millisecond fails the operator's
    /// `open` with [`StateError::InvalidTimeToLive`].
    fn time_to_live(&self) -> Option<(&str, &StateTtlConfig)> {
        None
    }
}

impl<K, V> AttachKeyedState for ValueState<K, V>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    fn attach_to(
        &mut self,
        store: Arc<dyn KeyedStore>,
        max_parallelism: usize,
        caches: ValueCaches,
        operator: &str,
    ) -> Result<(), StateError> {
        self.attach(store, max_parallelism, caches, operator)
    }

    fn time_to_live(&self) -> Option<(&str, &StateTtlConfig)> {
        Some((self.name(), self.ttl()?))
    }
}

/// A map per key (Flink's `MapState`): for each key, user keys to user values.
///
/// ```
/// use sluice_runtime::state::MapState;
/// let mut visits: MapState<u64, String, u32> = MapState::new("visits");
/// visits.put(1, "/home".into(), 3);
/// assert_eq!(visits.get(&1, &"/home".to_string()), Some(&3));
/// assert_eq!(visits.entries(&1).count(), 1);
/// ```
///
/// Made [`with_ttl`](Self::with_ttl), each entry expires on its own.
///
/// On the heap a key's map is a `BTreeMap`. In front of a store (after
/// [`attach`](Self::attach)) each entry is a stored value of its own, as in Flink's RocksDB
/// backend: [`get`](Self::get), [`put`](Self::put) and [`remove`](Self::remove) cost one
/// entry whatever the size of the key's map, and [`entries`](Self::entries) reads the key's
/// entries in one scan. Both write the same checkpoints (a map per key). As in Flink, small
/// maps always read and written together are cheaper as one value, a
/// `ValueState<K, BTreeMap<UK, UV>>`, which a store keeps whole.
///
/// A user key is `Ord` (the order of [`entries`](Self::entries)), `Hash` and `Clone` (the
/// key of its stored entry is built from it).
#[derive(Debug)]
pub struct MapState<K, UK, UV> {
    inner: MapInner<K, UK, UV>,
}

#[derive(Debug)]
enum MapInner<K, UK, UV> {
    Plain(ValueState<K, BTreeMap<UK, UV>>),
    Expiring(Timed<ValueState<K, BTreeMap<UK, Stamped<UV>>>>),
    /// In front of a store: an entry per stored value (`map_stored.rs`).
    Stored(Box<StoredMap<K, UK, UV>>),
}

impl<K, UK, UV> Clone for MapState<K, UK, UV>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    UK: Ord + Clone + Hash + Serialize + DeserializeOwned,
    UV: Clone + Serialize + DeserializeOwned,
{
    /// A copy of a heap state; a state in front of a store copies as an empty heap state.
    fn clone(&self) -> Self {
        let inner = match &self.inner {
            MapInner::Plain(v) => MapInner::Plain(v.clone()),
            MapInner::Expiring(t) => MapInner::Expiring(t.clone()),
            MapInner::Stored(s) => match s.ttl() {
                Some(c) => MapInner::Expiring(Timed::new(s.name(), c.clone())),
                None => MapInner::Plain(ValueState::new(s.name())),
            },
        };
        MapState { inner }
    }
}

/// A map's or a list's state with a time-to-live, and the clock its entries are stamped by.
#[derive(Clone, Debug)]
struct Timed<S> {
    values: S,
    config: StateTtlConfig,
    clock: ProcessingClock,
}

/// The entries of one key of a [`MapState`], in user-key order.
pub struct MapEntries<'a, UK, UV>(EntriesInner<'a, UK, UV>);

enum EntriesInner<'a, UK, UV> {
    None,
    Plain(btree_map::Iter<'a, UK, UV>),
    Stamped(btree_map::Iter<'a, UK, Stamped<UV>>),
}

impl<'a, UK, UV> Iterator for MapEntries<'a, UK, UV> {
    type Item = (&'a UK, &'a UV);

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.0 {
            EntriesInner::None => None,
            EntriesInner::Plain(i) => i.next(),
            EntriesInner::Stamped(i) => i.next().map(|(k, s)| (k, &s.value)),
        }
    }
}

impl<K, UK, UV> MapState<K, UK, UV>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    UK: Ord + Clone + Hash + Serialize + DeserializeOwned,
    UV: Serialize + DeserializeOwned,
{
    /// An empty state named `name`.
    pub fn new(name: &str) -> Self {
        MapState {
            inner: MapInner::Plain(ValueState::new(name)),
        }
    }

    /// An empty state named `name` whose entries expire as `config` says, each on its own (see
    /// [`ValueState::with_ttl`]): [`put`](Self::put) writes an entry; [`get`](Self::get) and
    /// [`entries`](Self::entries) read.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use sluice_runtime::state::{MapState, StateTtlConfig};
    /// use std::time::Duration;
    ///
    /// let ttl = StateTtlConfig::new(Duration::from_secs(60));
    /// let mut pages: MapState<u32, String, u32> = MapState::with_ttl("pages", ttl);
    /// pages.put(7, "/home".into(), 1);
    /// tokio::time::advance(Duration::from_secs(30)).await;
    /// pages.put(7, "/cart".into(), 1);
    /// tokio::time::advance(Duration::from_secs(30)).await;
    /// let left: Vec<&String> = pages.entries(&7).map(|(page, _)| page).collect();
    /// assert_eq!(left, ["/cart"]);
    /// # }
    /// ```
    pub fn with_ttl(name: &str, config: StateTtlConfig) -> Self {
        MapState {
            inner: MapInner::Expiring(Timed::new(name, config)),
        }
    }

    /// The state's name.
    pub fn name(&self) -> &str {
        match &self.inner {
            MapInner::Plain(v) => v.name(),
            MapInner::Expiring(t) => t.values.name(),
            MapInner::Stored(s) => s.name(),
        }
    }

    /// The state's time-to-live, if it has one.
    pub fn ttl(&self) -> Option<&StateTtlConfig> {
        match &self.inner {
            MapInner::Plain(_) => None,
            MapInner::Expiring(t) => Some(&t.config),
            MapInner::Stored(s) => s.ttl(),
        }
    }

    /// Puts this state in front of a store (see [`ValueState::attach`]): from now on each
    /// entry is a stored value of its own, and the maps it held so far (restored) move in
    /// entry by entry. Attaching twice keeps the first store.
    pub fn attach(
        &mut self,
        store: Arc<dyn KeyedStore>,
        max_parallelism: usize,
        caches: impl Into<ValueCaches>,
        operator: &str,
    ) -> Result<(), StateError> {
        // The heap maps (restored) go to `whole`, which moves them into the entries.
        let placeholder = MapInner::Plain(ValueState::new(""));
        let mut whole = match std::mem::replace(&mut self.inner, placeholder) {
            MapInner::Plain(v) => Whole::Plain(v),
            MapInner::Expiring(t) => Whole::Stamped(t.values),
            stored @ MapInner::Stored(_) => {
                self.inner = stored;
                return Ok(());
            }
        };
        let stored =
            StoredMap::attach(&mut whole, store, max_parallelism, caches.into(), operator)?;
        self.inner = MapInner::Stored(Box::new(stored));
        Ok(())
    }

    /// The first store failure since the last call; see [`ValueState::take_error`].
    pub fn take_error(&mut self) -> Option<StoreError> {
        match &mut self.inner {
            MapInner::Plain(v) => v.take_error(),
            MapInner::Expiring(t) => t.values.take_error(),
            MapInner::Stored(s) => s.take_error(),
        }
    }

    /// In front of a store, reads the given entries that are not cached yet in one batch (one
    /// `MultiGet` in RocksDB), so that the accesses after it find them in memory: call it
    /// with a batch's entries before processing the batch. On the heap it does nothing.
    ///
    /// ```
    /// use sluice_runtime::state::MapState;
    ///
    /// let mut counts: MapState<u32, String, u64> = MapState::new("counts");
    /// let batch = [(1, "/a".to_string()), (2, "/b".to_string()), (1, "/a".to_string())];
    /// counts.prefetch(batch.iter().map(|(k, u)| (k, u)));
    /// for (k, u) in batch {
    ///     let n = counts.get(&k, &u).copied().unwrap_or(0);
    ///     counts.put(k, u, n + 1);
    /// }
    /// assert_eq!(counts.get(&1, &"/a".to_string()), Some(&2));
    /// ```
    pub fn prefetch<'a>(&mut self, entries: impl IntoIterator<Item = (&'a K, &'a UK)>)
    where
        K: 'a,
        UK: 'a,
    {
        if let MapInner::Stored(s) = &mut self.inner {
            s.prefetch(entries);
        }
    }

    /// The value of `user_key` under `key`.
    pub fn get(&mut self, key: &K, user_key: &UK) -> Option<&UV> {
        let t = match &mut self.inner {
            MapInner::Plain(v) => return v.get(key).and_then(|m| m.get(user_key)),
            MapInner::Stored(s) => return s.get(key, user_key),
            MapInner::Expiring(t) => t,
        };
        let (now, ttl_ms) = (t.clock.now_ms(), t.config.ttl_ms());
        let at = t.values.peek(key)?.get(user_key)?.at;
        if expired(at, ttl_ms, now) {
            if !t.config.returns_expired() {
                t.remove_entries(key, |k, _| k == user_key);
                return None;
            }
        } else if t.config.renews_on_read() {
            // A read renews the entry, and the map with it.
            if let Some(s) = t.values.get_mut(key).and_then(|m| m.get_mut(user_key)) {
                s.at = now;
            }
        }
        t.values.peek(key)?.get(user_key).map(|s| &s.value)
    }

    /// Sets the value of `user_key` under `key`.
    pub fn put(&mut self, key: K, user_key: UK, value: UV) -> Option<UV> {
        match &mut self.inner {
            MapInner::Plain(v) => v.get_or_default(key).insert(user_key, value),
            MapInner::Stored(s) => s.put(key, user_key, value),
            MapInner::Expiring(t) => {
                let now = t.clock.now_ms();
                let old = t
                    .values
                    .get_or_default(key)
                    .insert(user_key, Stamped { at: now, value })?;
                visible(&t.config, old.at, now).then_some(old.value)
            }
        }
    }

    /// Removes `user_key` under `key`; a key whose map becomes empty has no state.
    pub fn remove(&mut self, key: &K, user_key: &UK) -> Option<UV> {
        match &mut self.inner {
            MapInner::Plain(v) => {
                let map = v.get_mut(key)?;
                let removed = map.remove(user_key);
                if map.is_empty() {
                    v.remove(key);
                }
                removed
            }
            MapInner::Stored(s) => s.remove(key, user_key),
            MapInner::Expiring(t) => {
                let now = t.clock.now_ms();
                let (_, s) = t.remove_entries(key, |k, _| k == user_key)?;
                visible(&t.config, s.at, now).then_some(s.value)
            }
        }
    }

    /// The entries of `key`, in user-key order (none when it has none). With a time-to-live,
    /// the expired ones are removed first (or, with `ReturnExpiredIfNotCleanedUp`, shown).
    pub fn entries(&mut self, key: &K) -> MapEntries<'_, UK, UV> {
        let t = match &mut self.inner {
            MapInner::Plain(v) => {
                return MapEntries(match v.get(key) {
                    Some(m) => EntriesInner::Plain(m.iter()),
                    None => EntriesInner::None,
                });
            }
            MapInner::Stored(s) => return MapEntries(EntriesInner::Plain(s.entries(key).iter())),
            MapInner::Expiring(t) => t,
        };
        let (now, ttl_ms) = (t.clock.now_ms(), t.config.ttl_ms());
        if !t.config.returns_expired() {
            t.remove_entries(key, |_, s| expired(s.at, ttl_ms, now));
        }
        if t.config.renews_on_read()
            && let Some(m) = t.values.get_mut(key)
        {
            for s in m.values_mut().filter(|s| !expired(s.at, ttl_ms, now)) {
                s.at = now;
            }
        }
        MapEntries(match t.values.peek(key) {
            Some(m) => EntriesInner::Stamped(m.iter()),
            None => EntriesInner::None,
        })
    }

    /// Writes one keyed entry per non-empty key group.
    pub fn snapshot_into(
        &mut self,
        max_parallelism: usize,
        state: &mut OperatorState,
    ) -> Result<(), StateError> {
        match &mut self.inner {
            MapInner::Plain(v) => v.snapshot_into(max_parallelism, state),
            MapInner::Expiring(t) => {
                t.sweep_heap(|m, ttl_ms, now| m.retain(|_, s| !expired(s.at, ttl_ms, now)));
                t.values.snapshot_into(max_parallelism, state)
            }
            MapInner::Stored(s) => s.snapshot_into(max_parallelism, state),
        }
    }

    /// Adds every key of this state's entries in `state`.
    pub fn restore_from(&mut self, state: &OperatorState) -> Result<(), StateError> {
        match &mut self.inner {
            MapInner::Plain(v) => v.restore_from(state),
            MapInner::Expiring(t) => t.values.restore_from(state),
            MapInner::Stored(s) => s.restore_from(state),
        }
    }
}

#[cfg(test)]
impl<K, UK, UV> MapState<K, UK, UV>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    UK: Ord + Clone + Hash + Serialize + DeserializeOwned,
    UV: Serialize + DeserializeOwned,
{
    /// How many keys have a map.
    fn key_count(&mut self) -> usize {
        match &mut self.inner {
            MapInner::Plain(v) => v.len(),
            MapInner::Expiring(t) => t.values.len(),
            MapInner::Stored(s) => s.key_count(),
        }
    }
}

impl<K, UK, UV> Timed<ValueState<K, BTreeMap<UK, Stamped<UV>>>>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    UK: Ord + Clone + Hash + Serialize + DeserializeOwned,
    UV: Serialize + DeserializeOwned,
{
    /// Removes the entries of `key` that `gone` names, without renewing the map (a key left
    /// without entries has no state); returns the last entry removed.
    fn remove_entries(
        &mut self,
        key: &K,
        mut gone: impl FnMut(&UK, &Stamped<UV>) -> bool,
    ) -> Option<(UK, Stamped<UV>)> {
        let map = self.values.peek(key)?;
        if !map.iter().any(|(k, s)| gone(k, s)) {
            return None;
        }
        let map = self.values.get_mut_unrenewed(key)?;
        let mut last = None;
        let mut kept = BTreeMap::new();
        while let Some((k, s)) = map.pop_first() {
            if gone(&k, &s) {
                last = Some((k, s));
            } else {
                kept.insert(k, s);
            }
        }
        *map = kept;
        if map.is_empty() {
            self.values.remove(key);
        }
        last
    }
}

/// A list per key (Flink's keyed `ListState`): for each key, items in the order they were
/// added. (sluice's [`ListState`](super::ListState) is operator state, one list per subtask.)
///
/// A key's list is one value: on the heap a `Vec`; in front of a store, one stored entry
/// whose decoded list the state's cache keeps, so appending to a cached key costs a push and a
/// key not cached costs one store read first. A key whose list becomes empty has no state.
///
/// ```
/// use sluice_runtime::state::KeyedListState;
/// use sluice_runtime::OperatorState;
///
/// let mut clicks: KeyedListState<u64, String> = KeyedListState::new("clicks");
/// clicks.add(7, "/home".into());
/// clicks.add_all(7, ["/cart".to_string(), "/pay".to_string()]);
/// assert_eq!(clicks.get(&7), ["/home", "/cart", "/pay"]);
/// assert!(clicks.get(&8).is_empty());
///
/// let mut snapshot = OperatorState::default();
/// clicks.snapshot_into(128, &mut snapshot).unwrap();
/// let mut restored: KeyedListState<u64, String> = KeyedListState::new("clicks");
/// restored.restore_from(&snapshot).unwrap();
/// assert_eq!(restored.get(&7).len(), 3);
/// restored.clear(&7);
/// assert!(restored.get(&7).is_empty());
/// ```
///
/// Made [`with_ttl`](Self::with_ttl), each item expires on its own.
#[derive(Clone, Debug)]
pub struct KeyedListState<K, T> {
    inner: ListInner<K, T>,
}

#[derive(Clone, Debug)]
enum ListInner<K, T> {
    Plain(ValueState<K, Vec<T>>),
    Expiring(Timed<ValueState<K, StampedList<T>>>),
}

/// A list whose items keep the time of their last write: `at[i]` is that of `items[i]`. Kept
/// apart, so that a read is a slice of the items.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct StampedList<T> {
    items: Vec<T>,
    at: Vec<i64>,
}

impl<T> Default for StampedList<T> {
    fn default() -> Self {
        StampedList {
            items: Vec::new(),
            at: Vec::new(),
        }
    }
}

impl<T> StampedList<T> {
    /// Keeps the items `keep` accepts (by their time), in order.
    fn retain_by_time(&mut self, mut keep: impl FnMut(i64) -> bool) {
        let mut i = 0;
        let at = &self.at;
        self.items.retain(|_| {
            let k = keep(at[i]);
            i += 1;
            k
        });
        self.at.retain(|&t| keep(t));
    }
}

impl<K, T> KeyedListState<K, T>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    T: Serialize + DeserializeOwned,
{
    /// An empty state named `name` (unique within its operator), on the heap.
    pub fn new(name: &str) -> Self {
        KeyedListState {
            inner: ListInner::Plain(ValueState::new(name)),
        }
    }

    /// An empty state named `name` whose items expire as `config` says, each on its own (see
    /// [`ValueState::with_ttl`]): [`add`](Self::add), [`add_all`](Self::add_all) and
    /// [`update`](Self::update) write items; [`get`](Self::get) reads.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use sluice_runtime::state::{KeyedListState, StateTtlConfig};
    /// use std::time::Duration;
    ///
    /// let ttl = StateTtlConfig::new(Duration::from_secs(60));
    /// let mut clicks: KeyedListState<u32, String> = KeyedListState::with_ttl("clicks", ttl);
    /// clicks.add(7, "/home".into());
    /// tokio::time::advance(Duration::from_secs(30)).await;
    /// clicks.add(7, "/cart".into());
    /// tokio::time::advance(Duration::from_secs(30)).await;
    /// assert_eq!(clicks.get(&7), ["/cart"]);
    /// # }
    /// ```
    pub fn with_ttl(name: &str, config: StateTtlConfig) -> Self {
        KeyedListState {
            inner: ListInner::Expiring(Timed::new(name, config)),
        }
    }

    /// The state's name.
    pub fn name(&self) -> &str {
        match &self.inner {
            ListInner::Plain(v) => v.name(),
            ListInner::Expiring(t) => t.values.name(),
        }
    }

    /// The state's time-to-live, if it has one.
    pub fn ttl(&self) -> Option<&StateTtlConfig> {
        match &self.inner {
            ListInner::Plain(_) => None,
            ListInner::Expiring(t) => Some(&t.config),
        }
    }

    /// The first store failure since the last call; see [`ValueState::take_error`].
    pub fn take_error(&mut self) -> Option<StoreError> {
        match &mut self.inner {
            ListInner::Plain(v) => v.take_error(),
            ListInner::Expiring(t) => t.values.take_error(),
        }
    }

    /// The items of `key`, oldest first (empty when it has none). With a time-to-live, the
    /// expired ones are removed first (or, with `ReturnExpiredIfNotCleanedUp`, shown).
    pub fn get(&mut self, key: &K) -> &[T] {
        let t = match &mut self.inner {
            ListInner::Plain(v) => return v.get(key).map(Vec::as_slice).unwrap_or(&[]),
            ListInner::Expiring(t) => t,
        };
        let (now, ttl_ms) = (t.clock.now_ms(), t.config.ttl_ms());
        let Some(list) = t.values.peek(key) else {
            return &[];
        };
        let stale = list.at.iter().any(|&at| expired(at, ttl_ms, now));
        if stale
            && !t.config.returns_expired()
            && let Some(list) = t.values.get_mut_unrenewed(key)
        {
            list.retain_by_time(|at| !expired(at, ttl_ms, now));
            if list.items.is_empty() {
                t.values.remove(key);
                return &[];
            }
        }
        if t.config.renews_on_read()
            && let Some(list) = t.values.get_mut(key)
        {
            for at in list.at.iter_mut().filter(|at| !expired(**at, ttl_ms, now)) {
                *at = now;
            }
        }
        t.values.peek(key).map_or(&[], |l| l.items.as_slice())
    }

    /// Appends `item` to the list of `key`.
    pub fn add(&mut self, key: K, item: T) {
        self.add_all(key, [item]);
    }

    /// Appends every item of `items` to the list of `key`.
    pub fn add_all(&mut self, key: K, items: impl IntoIterator<Item = T>) {
        let mut items = items.into_iter().peekable();
        if items.peek().is_none() {
            return;
        }
        match &mut self.inner {
            ListInner::Plain(v) => v.get_or_default(key).extend(items),
            ListInner::Expiring(t) => {
                let now = t.clock.now_ms();
                let list = t.values.get_or_default(key);
                for item in items {
                    list.items.push(item);
                    list.at.push(now);
                }
            }
        }
    }

    /// Replaces the list of `key` with `items` (an empty `items` clears it).
    pub fn update(&mut self, key: K, items: Vec<T>) {
        match &mut self.inner {
            ListInner::Plain(v) => {
                if items.is_empty() {
                    v.remove(&key);
                } else {
                    v.update(key, items);
                }
            }
            ListInner::Expiring(t) => {
                if items.is_empty() {
                    t.values.remove(&key);
                } else {
                    let at = vec![t.clock.now_ms(); items.len()];
                    t.values.update(key, StampedList { items, at });
                }
            }
        }
    }

    /// Removes the list of `key`, returning its items (with a time-to-live, those not
    /// expired).
    pub fn clear(&mut self, key: &K) -> Vec<T> {
        match &mut self.inner {
            ListInner::Plain(v) => v.remove(key).unwrap_or_default(),
            ListInner::Expiring(t) => {
                let (now, ttl_ms) = (t.clock.now_ms(), t.config.ttl_ms());
                let Some(mut list) = t.values.remove(key) else {
                    return Vec::new();
                };
                if !t.config.returns_expired() {
                    list.retain_by_time(|at| !expired(at, ttl_ms, now));
                }
                list.items
            }
        }
    }

    /// Calls `f` with every key and its items; the first error stops the visit. With a store
    /// this streams over the stored keys, key group by key group. With a time-to-live the
    /// expired items are left out (and keys left without any removed); nothing is renewed.
    pub fn for_each<E: From<StoreError>>(
        &mut self,
        mut f: impl FnMut(&K, &[T]) -> Result<(), E>,
    ) -> Result<(), E> {
        match &mut self.inner {
            ListInner::Plain(v) => v.for_each_mut(|k, items| f(k, items)),
            ListInner::Expiring(t) => {
                let (now, ttl_ms) = (t.clock.now_ms(), t.config.ttl_ms());
                let returns = t.config.returns_expired();
                t.values.retain_visiting(|k, list| {
                    if !returns {
                        list.retain_by_time(|at| !expired(at, ttl_ms, now));
                    }
                    if list.items.is_empty() {
                        return Ok(false);
                    }
                    f(k, &list.items).map(|()| true)
                })
            }
        }
    }

    /// Writes one keyed entry per non-empty key group.
    pub fn snapshot_into(
        &mut self,
        max_parallelism: usize,
        state: &mut OperatorState,
    ) -> Result<(), StateError> {
        match &mut self.inner {
            ListInner::Plain(v) => v.snapshot_into(max_parallelism, state),
            ListInner::Expiring(t) => {
                t.sweep_heap(|l, ttl_ms, now| l.retain_by_time(|at| !expired(at, ttl_ms, now)));
                t.values.snapshot_into(max_parallelism, state)
            }
        }
    }

    /// Adds every key of this state's entries in `state`.
    pub fn restore_from(&mut self, state: &OperatorState) -> Result<(), StateError> {
        match &mut self.inner {
            ListInner::Plain(v) => v.restore_from(state),
            ListInner::Expiring(t) => t.values.restore_from(state),
        }
    }

    fn attach(
        &mut self,
        store: Arc<dyn KeyedStore>,
        max_parallelism: usize,
        caches: ValueCaches,
        operator: &str,
    ) -> Result<(), StateError> {
        match &mut self.inner {
            ListInner::Plain(v) => v.attach(store, max_parallelism, caches, operator),
            ListInner::Expiring(t) => t.values.attach(store, max_parallelism, caches, operator),
        }
    }
}

#[cfg(test)]
impl<K, T> KeyedListState<K, T>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    T: Serialize + DeserializeOwned,
{
    /// How many keys have a list.
    fn key_count(&mut self) -> usize {
        match &mut self.inner {
            ListInner::Plain(v) => v.len(),
            ListInner::Expiring(t) => t.values.len(),
        }
    }
}

impl<K, C> Timed<ValueState<K, C>>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    C: Serialize + DeserializeOwned,
{
    /// A map's or list's state named `name`, each key's value expiring as `config` says.
    fn new(name: &str, config: StateTtlConfig) -> Self {
        Timed {
            values: ValueState::with_ttl(name, config.clone()),
            config,
            clock: ProcessingClock::new(),
        }
    }

    /// Before a heap snapshot (when the config sweeps there, as [`ValueState`] does): drops
    /// each key's expired entries with `expire`, and the keys left empty. A store's entries are
    /// left as they are (its compactions drop the maps and lists whose every entry expired).
    fn sweep_heap(&mut self, mut expire: impl FnMut(&mut C, i64, i64))
    where
        C: IsEmpty,
    {
        if self.values.is_attached() || !(self.config.background() || self.config.full_snapshot()) {
            return;
        }
        let (now, ttl_ms) = (self.clock.now_ms(), self.config.ttl_ms());
        // On the heap a visit cannot fail.
        let _ = self.values.retain(|_, c| {
            expire(c, ttl_ms, now);
            !c.is_empty()
        });
    }
}

/// Whether a key's map or list has no entries left.
trait IsEmpty {
    fn is_empty(&self) -> bool;
}

impl<UK, UV> IsEmpty for BTreeMap<UK, UV> {
    fn is_empty(&self) -> bool {
        BTreeMap::is_empty(self)
    }
}

impl<T> IsEmpty for StampedList<T> {
    fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

impl<K, UK, UV> AttachKeyedState for MapState<K, UK, UV>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    UK: Ord + Clone + Hash + Serialize + DeserializeOwned,
    UV: Serialize + DeserializeOwned,
{
    fn attach_to(
        &mut self,
        store: Arc<dyn KeyedStore>,
        max_parallelism: usize,
        caches: ValueCaches,
        operator: &str,
    ) -> Result<(), StateError> {
        self.attach(store, max_parallelism, caches, operator)
    }

    fn time_to_live(&self) -> Option<(&str, &StateTtlConfig)> {
        Some((self.name(), self.ttl()?))
    }
}

impl<K, T> AttachKeyedState for KeyedListState<K, T>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    T: Serialize + DeserializeOwned,
{
    fn attach_to(
        &mut self,
        store: Arc<dyn KeyedStore>,
        max_parallelism: usize,
        caches: ValueCaches,
        operator: &str,
    ) -> Result<(), StateError> {
        self.attach(store, max_parallelism, caches, operator)
    }

    fn time_to_live(&self) -> Option<(&str, &StateTtlConfig)> {
        Some((self.name(), self.ttl()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::TtlUpdate;
    use crate::state::memory_store;
    use proptest::prelude::*;

    #[test]
    fn a_time_to_live_under_a_millisecond_fails_the_attach_naming_the_state() {
        let ctx = crate::operator::OperatorContext::for_test("op", 0, 1);
        let zero = StateTtlConfig::new(std::time::Duration::ZERO);
        let mut v: ValueState<u32, u32> = ValueState::with_ttl("v", zero.clone());
        let mut m: MapState<u32, u32, u32> = MapState::with_ttl("m", zero.clone());
        let mut l: KeyedListState<u32, u32> = KeyedListState::with_ttl("l", zero);
        let errors = [
            ctx.attach_keyed_state(&mut v),
            ctx.attach_keyed_state(&mut m),
            ctx.attach_keyed_state(&mut l),
        ];
        for (err, name) in errors.into_iter().zip(["v", "m", "l"]) {
            let err = err.expect_err("refused");
            assert!(
                matches!(&err, StateError::InvalidTimeToLive { state, .. } if state == name),
                "{err}"
            );
            assert!(err.to_string().contains("at least 1 ms"), "{err}");
        }
        let ms = StateTtlConfig::new(std::time::Duration::from_millis(1));
        let mut ok: MapState<u32, u32, u32> = MapState::with_ttl("ok", ms);
        ctx.attach_keyed_state(&mut ok).unwrap();
    }
    use std::time::Duration;
    use tokio::time::advance;

    const MINUTE: Duration = Duration::from_secs(60);

    /// `make` on the heap and in front of a store whose cache keeps 16 values.
    fn both<S: AttachKeyedState>(make: impl Fn() -> S) -> [S; 2] {
        let mut stored = make();
        stored
            .attach_to(memory_store(), 16, ValueCaches::per_state(0), "test")
            .unwrap();
        [make(), stored]
    }

    fn entries(m: &mut MapState<u32, u32, u32>, key: u32) -> Vec<(u32, u32)> {
        m.entries(&key).map(|(k, v)| (*k, *v)).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn map_entries_expire_each_on_its_own() {
        for mut m in both(|| MapState::with_ttl("m", StateTtlConfig::new(MINUTE))) {
            m.put(1, 10, 100);
            m.put(1, 11, 110);
            advance(Duration::from_secs(30)).await;
            m.put(1, 11, 111);
            m.put(1, 12, 120);
            advance(Duration::from_secs(30)).await;
            assert_eq!(m.get(&1, &10), None, "written a minute ago");
            assert_eq!(entries(&mut m, 1), [(11, 111), (12, 120)]);
            assert_eq!(m.remove(&1, &11), Some(111));
            advance(Duration::from_secs(30)).await;
            assert_eq!(
                entries(&mut m, 1),
                [],
                "the last entry expired: the key is gone"
            );
            assert_eq!(m.put(1, 12, 121), None, "an expired entry is not returned");
            assert!(m.take_error().is_none());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn map_reads_renew_entries_with_on_read_and_write() {
        let config = StateTtlConfig::new(MINUTE).update_type(TtlUpdate::OnReadAndWrite);
        for mut m in both(|| MapState::with_ttl("m", config.clone())) {
            m.put(1, 10, 100);
            m.put(1, 11, 110);
            for _ in 0..3 {
                advance(Duration::from_secs(50)).await;
                assert_eq!(m.get(&1, &10), Some(&100));
            }
            assert_eq!(entries(&mut m, 1), [(10, 100)], "11 was never read");
            advance(Duration::from_secs(50)).await;
            assert_eq!(entries(&mut m, 1), [(10, 100)]);
            advance(Duration::from_secs(50)).await;
            assert_eq!(
                entries(&mut m, 1),
                [(10, 100)],
                "renewed by the last listing"
            );
            advance(MINUTE).await;
            assert_eq!(entries(&mut m, 1), []);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn list_items_expire_each_on_its_own() {
        for mut l in both(|| KeyedListState::with_ttl("l", StateTtlConfig::new(MINUTE))) {
            l.add_all(1, [1, 2]);
            advance(Duration::from_secs(30)).await;
            l.add(1, 3);
            l.add(2, 9);
            advance(Duration::from_secs(30)).await;
            assert_eq!(l.get(&1), [3]);
            let mut seen = Vec::new();
            l.for_each(|k, items| {
                seen.push((*k, items.to_vec()));
                Ok::<(), StoreError>(())
            })
            .unwrap();
            seen.sort();
            assert_eq!(seen, [(1, vec![3]), (2, vec![9])]);
            l.update(2, vec![7, 8]);
            advance(Duration::from_secs(30)).await;
            assert_eq!(l.get(&1), [] as [u32; 0], "all expired: the key is gone");
            assert_eq!(l.clear(&2), [7, 8]);
            assert!(l.take_error().is_none());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn maps_and_lists_keep_their_times_across_a_restore() {
        let ttl = StateTtlConfig::new(MINUTE);
        let [mut m, _] = both(|| MapState::<u32, u32, u32>::with_ttl("m", ttl.clone()));
        let [_, mut l] = both(|| KeyedListState::<u32, u32>::with_ttl("l", ttl.clone()));
        m.put(1, 10, 100);
        l.add(1, 1);
        advance(Duration::from_secs(30)).await;
        m.put(1, 11, 110);
        l.add(1, 2);
        let mut snapshot = OperatorState::default();
        m.snapshot_into(16, &mut snapshot).unwrap();
        l.snapshot_into(16, &mut snapshot).unwrap();
        let [mut m2, _] = both(|| MapState::<u32, u32, u32>::with_ttl("m", ttl.clone()));
        let [_, mut l2] = both(|| KeyedListState::<u32, u32>::with_ttl("l", ttl.clone()));
        m2.restore_from(&snapshot).unwrap();
        l2.restore_from(&snapshot).unwrap();
        advance(Duration::from_secs(30)).await;
        assert_eq!(entries(&mut m2, 1), [(11, 110)]);
        assert_eq!(l2.get(&1), [2]);
    }

    #[tokio::test(start_paused = true)]
    async fn heap_snapshots_leave_out_expired_entries() {
        let mut m = MapState::with_ttl("m", StateTtlConfig::new(MINUTE));
        let mut l = KeyedListState::with_ttl("l", StateTtlConfig::new(MINUTE));
        m.put(1u32, 10u32, 100u32);
        l.add(1u32, 1u32);
        m.put(2, 20, 200);
        advance(MINUTE).await;
        m.put(1, 11, 110);
        l.add(1, 2);
        let mut snapshot = OperatorState::default();
        m.snapshot_into(16, &mut snapshot).unwrap();
        l.snapshot_into(16, &mut snapshot).unwrap();
        let forever = StateTtlConfig::new(Duration::from_secs(u64::MAX / 2_000));
        let mut m2: MapState<u32, u32, u32> = MapState::with_ttl("m", forever.clone());
        let mut l2: KeyedListState<u32, u32> = KeyedListState::with_ttl("l", forever);
        m2.restore_from(&snapshot).unwrap();
        l2.restore_from(&snapshot).unwrap();
        assert_eq!(entries(&mut m2, 1), [(11, 110)]);
        assert_eq!(entries(&mut m2, 2), [], "key 2 had only expired entries");
        assert_eq!(l2.get(&1), [2]);
    }

    #[derive(Clone, Debug)]
    enum ListOp {
        Add(u32, u8),
        AddAll(u32, Vec<u8>),
        Update(u32, Vec<u8>),
        Clear(u32),
        Put(u32, u8, u8),
        RemoveEntry(u32, u8),
        Restore,
    }

    fn list_op() -> impl Strategy<Value = ListOp> {
        let key = 0u32..200;
        let items = proptest::collection::vec(any::<u8>(), 0..4);
        prop_oneof![
            (key.clone(), any::<u8>()).prop_map(|(k, v)| ListOp::Add(k, v)),
            (key.clone(), items.clone()).prop_map(|(k, v)| ListOp::AddAll(k, v)),
            (key.clone(), items).prop_map(|(k, v)| ListOp::Update(k, v)),
            key.clone().prop_map(ListOp::Clear),
            (key.clone(), 0u8..4, any::<u8>()).prop_map(|(k, u, v)| ListOp::Put(k, u, v)),
            (key, 0u8..4).prop_map(|(k, u)| ListOp::RemoveEntry(k, u)),
            Just(ListOp::Restore),
        ]
    }

    /// A list and a map state (with a time-to-live no value reaches, or none), fresh.
    fn fresh(ttl: bool) -> (KeyedListState<u32, u8>, MapState<u32, u8, u8>) {
        if ttl {
            let forever = StateTtlConfig::new(Duration::from_secs(u64::MAX / 2_000));
            (
                KeyedListState::with_ttl("l", forever.clone()),
                MapState::with_ttl("m", forever),
            )
        } else {
            (KeyedListState::new("l"), MapState::new("m"))
        }
    }

    /// A list and a map state attached the way operators attach them.
    fn lists_and_maps(ttl: bool) -> (KeyedListState<u32, u8>, MapState<u32, u8, u8>) {
        let (mut list, mut map) = fresh(ttl);
        let store = memory_store();
        list.attach_to(store.clone(), 16, ValueCaches::per_state(0), "test")
            .unwrap();
        map.attach_to(store, 16, ValueCaches::per_state(0), "test")
            .unwrap();
        (list, map)
    }

    proptest! {
        /// A keyed list and a map state in front of one store (a cache far smaller than their
        /// keys), snapshotted and restored into a fresh store at any point, hold what a model
        /// of a list and a map per key holds; a key left with nothing has no state. With a
        /// time-to-live that nothing reaches, the same.
        #[test]
        fn list_and_map_states_in_a_store_behave_as_lists_and_maps(
            ops in proptest::collection::vec(list_op(), 1..400),
            ttl in any::<bool>(),
        ) {
            let mut lists: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
            let mut maps: BTreeMap<u32, BTreeMap<u8, u8>> = BTreeMap::new();
            let (mut list, mut map) = lists_and_maps(ttl);
            for op in ops {
                match op {
                    ListOp::Add(k, v) => {
                        list.add(k, v);
                        lists.entry(k).or_default().push(v);
                    }
                    ListOp::AddAll(k, vs) => {
                        list.add_all(k, vs.clone());
                        if !vs.is_empty() {
                            lists.entry(k).or_default().extend(vs);
                        }
                    }
                    ListOp::Update(k, vs) => {
                        list.update(k, vs.clone());
                        if vs.is_empty() { lists.remove(&k); } else { lists.insert(k, vs); }
                    }
                    ListOp::Clear(k) => {
                        prop_assert_eq!(list.clear(&k), lists.remove(&k).unwrap_or_default());
                    }
                    ListOp::Put(k, u, v) => {
                        let model = maps.entry(k).or_default().insert(u, v);
                        prop_assert_eq!(map.put(k, u, v), model);
                    }
                    ListOp::RemoveEntry(k, u) => {
                        let model = maps.get_mut(&k).and_then(|m| m.remove(&u));
                        if maps.get(&k).is_some_and(BTreeMap::is_empty) {
                            maps.remove(&k);
                        }
                        prop_assert_eq!(map.remove(&k, &u), model);
                    }
                    ListOp::Restore => {
                        let mut snap = OperatorState::default();
                        list.snapshot_into(16, &mut snap).unwrap();
                        map.snapshot_into(16, &mut snap).unwrap();
                        let (mut l, mut m) = fresh(ttl);
                        l.restore_from(&snap).unwrap();
                        m.restore_from(&snap).unwrap();
                        let store = memory_store();
                        l.attach_to(store.clone(), 16, ValueCaches::per_state(0), "test").unwrap();
                        m.attach_to(store, 16, ValueCaches::per_state(0), "test").unwrap();
                        (list, map) = (l, m);
                    }
                }
            }
            for k in 0..200u32 {
                prop_assert_eq!(list.get(&k), lists.get(&k).map(Vec::as_slice).unwrap_or(&[]));
                let entries: BTreeMap<u8, u8> = map.entries(&k).map(|(u, v)| (*u, *v)).collect();
                prop_assert_eq!(Some(&entries).filter(|m| !m.is_empty()), maps.get(&k));
            }
            prop_assert!(list.take_error().is_none() && map.take_error().is_none());
            let mut snap = OperatorState::default();
            list.snapshot_into(16, &mut snap).unwrap();
            map.snapshot_into(16, &mut snap).unwrap();
            let (mut l, mut m) = fresh(ttl);
            l.restore_from(&snap).unwrap();
            m.restore_from(&snap).unwrap();
            prop_assert_eq!(l.key_count(), lists.len());
            prop_assert_eq!(m.key_count(), maps.len());
        }
    }
}
