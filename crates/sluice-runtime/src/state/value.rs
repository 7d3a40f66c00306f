//! [`ValueState`]: one value per key, with or without a time-to-live. Without one it is the
//! values of `keyed.rs` (the heap map or the store tier) as they are; with one (`Expiring`
//! below) each value is stored with the processing time of its last access, and every access
//! first asks the rules of `ttl.rs` whether the value is still there.

use super::backend::{KeyedStore, StoreError, key_prefix, prefix_end, state_id};
use super::keyed::Values;
use super::ttl::{Expiry, Stamped, StateTtlConfig, expired, strip_stamp, visible};
use super::value_cache::ValueCaches;
use super::{OperatorState, StateError};
use crate::timer::ProcessingClock;
use serde::{Serialize, de::DeserializeOwned};
use std::hash::Hash;
use std::sync::Arc;

/// Fewest accesses between two sweeps of an expiring state on the heap.
const SWEEP_MIN: usize = 1024;

/// One value per key, for operators after `key_by`.
///
/// The operator owns it as a field, updates it per record, writes it in `snapshot_state` and reads
/// it back in `initialize_state`. Only the keys of this subtask's key groups come back.
///
/// On the heap (the default) every method is a hash-map operation. After
/// [`attach`](Self::attach) to a store, the methods that read (`get`, `get_mut`,
/// `get_or_default`, `update`, `remove`) load a missing key from the store, and the values
/// changed go back to it in batches; a store failure there is kept and returned by
/// [`take_error`](Self::take_error), which the operator checks after each call of user code.
///
/// ```
/// use sluice_runtime::state::ValueState;
/// use sluice_runtime::OperatorState;
///
/// let mut counts: ValueState<String, u64> = ValueState::new("counts");
/// *counts.get_or_default("alice".into()) += 2;
/// let mut snapshot = OperatorState::default();
/// counts.snapshot_into(128, &mut snapshot).unwrap();
///
/// let mut restored: ValueState<String, u64> = ValueState::new("counts");
/// restored.restore_from(&snapshot).unwrap();
/// assert_eq!(restored.get(&"alice".to_string()), Some(&2));
/// ```
///
/// A state made [`with_ttl`](Self::with_ttl) forgets a key's value once it was not written
/// for the time-to-live (see [`StateTtlConfig`]).
#[derive(Debug)]
pub struct ValueState<K, V> {
    inner: Inner<K, V>,
}

#[derive(Debug)]
enum Inner<K, V> {
    Plain(Values<K, V>),
    Expiring(Box<Expiring<K, V>>),
}

impl<K: Clone, V: Clone> Clone for ValueState<K, V> {
    /// A copy of a heap state; a state attached to a store copies as an empty heap state.
    fn clone(&self) -> Self {
        let inner = match &self.inner {
            Inner::Plain(v) => Inner::Plain(v.clone()),
            Inner::Expiring(e) => Inner::Expiring(Box::new(Expiring {
                name: e.name.clone(),
                values: e.values.clone(),
                config: e.config.clone(),
                clock: e.clock,
                accesses: 0,
                sweep_after: SWEEP_MIN,
                expiry: None,
                pinned: None,
            })),
        };
        ValueState { inner }
    }
}

/// Forwards a call to the values, stamped or not.
macro_rules! either {
    ($self:expr, $v:ident => $call:expr) => {
        match &mut $self.inner {
            Inner::Plain($v) => $call,
            Inner::Expiring(e) => {
                let $v = &mut e.values;
                $call
            }
        }
    };
}

impl<K, V> ValueState<K, V>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    /// An empty state named `name` (unique within its operator), on the heap.
    pub fn new(name: &str) -> Self {
        ValueState {
            inner: Inner::Plain(Values::new(name)),
        }
    }

    /// An empty state named `name` whose values expire as `config` says (Flink's
    /// `StateTtlConfig` on a state descriptor), in processing time.
    ///
    /// Taking a value mutably ([`get_mut`](Self::get_mut),
    /// [`get_or_default`](Self::get_or_default)) counts as a write, as does
    /// [`update`](Self::update); [`get`](Self::get) is a read. A visit
    /// ([`for_each_mut`](Self::for_each_mut), [`retain`](Self::retain)) renews nothing and
    /// removes the expired values it passes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use sluice_runtime::state::{StateTtlConfig, ValueState};
    /// use std::time::Duration;
    ///
    /// let ttl = StateTtlConfig::new(Duration::from_secs(60));
    /// let mut last_seen: ValueState<u32, i64> = ValueState::with_ttl("last-seen", ttl);
    /// last_seen.update(7, 1_000);
    /// tokio::time::advance(Duration::from_secs(59)).await;
    /// assert_eq!(last_seen.get(&7), Some(&1_000));
    /// tokio::time::advance(Duration::from_secs(1)).await;
    /// assert_eq!(last_seen.get(&7), None, "a minute after its last write");
    /// # }
    /// ```
    pub fn with_ttl(name: &str, config: StateTtlConfig) -> Self {
        ValueState {
            inner: Inner::Expiring(Box::new(Expiring {
                name: name.to_string(),
                values: Values::new(&stamped_name(name)),
                config,
                clock: ProcessingClock::new(),
                accesses: 0,
                sweep_after: SWEEP_MIN,
                expiry: None,
                pinned: None,
            })),
        }
    }

    /// Picks each key's key group with `group_of` instead of the key's hash (see
    /// `Values::grouped_by`); set before the state holds anything.
    pub(crate) fn grouped_by(mut self, group_of: super::keyed::GroupOf<K>) -> Self {
        self.inner = match self.inner {
            Inner::Plain(v) => Inner::Plain(v.grouped_by(group_of)),
            Inner::Expiring(mut e) => {
                e.values = e.values.grouped_by(group_of);
                Inner::Expiring(e)
            }
        };
        self
    }

    /// With a time-to-live: makes the accesses until `pin_time(None)` use processing time
    /// `now` (ms) instead of reading the clock each. A keyed operator pins the time for a
    /// batch of records: the clock read is ordered, so the processor cannot overlap one
    /// record's memory reads with the next record's, and reading it per access took two thirds
    /// of a heap state's updates (BENCHMARKS.md, "State time-to-live").
    pub(crate) fn pin_time(&mut self, now: Option<i64>) {
        if let Inner::Expiring(e) = &mut self.inner {
            e.pinned = now;
        }
    }

    /// The state's time-to-live, if it has one.
    pub fn ttl(&self) -> Option<&StateTtlConfig> {
        match &self.inner {
            Inner::Plain(_) => None,
            Inner::Expiring(e) => Some(&e.config),
        }
    }

    /// The state's name.
    pub fn name(&self) -> &str {
        match &self.inner {
            Inner::Plain(v) => v.name(),
            Inner::Expiring(e) => &e.name,
        }
    }

    /// Puts this state in front of `store`, which the state's operator (named `operator`, for
    /// errors) opened from the job's state backend: what the state holds so far (restored keys)
    /// goes to the store, and from now on at most about its share of `caches` (a byte count is
    /// a fixed share) of decoded values stay in memory. Attaching twice is an error of the
    /// caller and keeps the first store. A state with a time-to-live also tells the store
    /// (when it can drop entries on its own, as RocksDB's compactions do) which of its entries
    /// expire.
    pub fn attach(
        &mut self,
        store: Arc<dyn KeyedStore>,
        max_parallelism: usize,
        caches: impl Into<ValueCaches>,
        operator: &str,
    ) -> Result<(), StateError> {
        // What a restore from the store's files brought: refused if the other choice stored it.
        let (name, ttl) = (self.name().to_string(), self.ttl().is_some());
        if !self.is_attached() && holds(&*store, max_parallelism, &twin_name(&name, ttl))? {
            return Err(StateError::TimeToLiveChanged {
                state: name,
                checkpointed_with_ttl: !ttl,
            });
        }
        match &mut self.inner {
            Inner::Plain(v) => v.attach(store, max_parallelism, caches, operator),
            Inner::Expiring(e) => e.attach(store, max_parallelism, caches, operator),
        }
    }

    /// Whether the state is in front of a store.
    pub fn is_attached(&self) -> bool {
        match &self.inner {
            Inner::Plain(v) => v.is_attached(),
            Inner::Expiring(e) => e.values.is_attached(),
        }
    }

    /// Whether the state is in front of a store whose snapshots are its files (so a snapshot
    /// writes no entries of it).
    pub(crate) fn incremental(&self) -> bool {
        match &self.inner {
            Inner::Plain(v) => v.incremental(),
            Inner::Expiring(e) => e.values.incremental(),
        }
    }

    /// Writes the changed values back to the store (nothing on the heap).
    pub(crate) fn flush(&mut self) -> Result<(), StoreError> {
        either!(self, v => v.flush())
    }

    /// With a store: writes back, then calls `f` with each stored key (its encoding after the
    /// key-group and state prefix) and value (its encoding; with a time-to-live, without the
    /// time, and expired values left out) of key group `group`, from the encoded key `from` on,
    /// in key order, until `f` returns false. On the heap it calls nothing.
    pub(crate) fn scan_stored(
        &mut self,
        group: usize,
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        match &mut self.inner {
            Inner::Plain(v) => v.scan_stored(group, from, f),
            Inner::Expiring(e) => {
                let (now, ttl_ms) = (e.now(), e.config.ttl_ms());
                let shown = e.config.returns_expired();
                e.values
                    .scan_stored(group, from, &mut |k, v| match strip_stamp(v) {
                        Some((at, _)) if !shown && expired(at, ttl_ms, now) => true,
                        Some((_, value)) => f(k, value),
                        None => f(k, v),
                    })
            }
        }
    }

    /// [`scan_stored`](Self::scan_stored) with the values as stored: with a time-to-live,
    /// stamped with their time of last access, and the expired ones too.
    pub(crate) fn scan_stored_stamped(
        &mut self,
        group: usize,
        from: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        either!(self, v => v.scan_stored(group, from, f))
    }

    /// Sets `key`'s value as last accessed at `at` (a value moved from elsewhere keeps its
    /// time); without a time-to-live, `at` is ignored.
    pub(crate) fn update_stamped(&mut self, key: K, at: i64, value: V) {
        match &mut self.inner {
            Inner::Plain(v) => {
                v.update(key, value);
            }
            Inner::Expiring(e) => {
                e.values.update(key, Stamped { at, value });
            }
        }
    }

    /// Keeps a store failure for [`take_error`](Self::take_error) (the first one kept wins).
    pub(crate) fn keep_error(&mut self, e: StoreError) {
        either!(self, v => v.keep_error(e))
    }

    /// Sets (`Some`) or removes (`None`) the values of keys whose values the caller knows
    /// already (it just scanned them): with a store, in one batch and without reading them
    /// first. With a time-to-live, the values set count as written now.
    pub(crate) fn write_through(&mut self, writes: Vec<(K, Option<V>)>) -> Result<(), StateError> {
        match &mut self.inner {
            Inner::Plain(v) => v.write_through(writes),
            Inner::Expiring(e) => {
                let at = e.now();
                let writes = writes
                    .into_iter()
                    .map(|(k, v)| (k, v.map(|value| Stamped { at, value })))
                    .collect();
                e.values.write_through(writes)
            }
        }
    }

    /// The first store failure since the last call, if any. With a store, the reading methods
    /// cannot return one: they act as if the key had no value and keep the failure here, and
    /// the operator fails with it after the user code that saw it returns.
    pub fn take_error(&mut self) -> Option<StoreError> {
        either!(self, v => v.take_error())
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
    pub fn prefetch<'a>(&mut self, keys: impl IntoIterator<Item = &'a K>)
    where
        K: 'a,
    {
        either!(self, v => v.prefetch(keys))
    }

    /// The value of `key`.
    pub fn get(&mut self, key: &K) -> Option<&V> {
        match &mut self.inner {
            Inner::Plain(v) => v.get(key),
            Inner::Expiring(e) => e.get(key),
        }
    }

    /// The value of `key`, read without renewing its time-to-live whatever the update type
    /// (for maps and lists, whose entries have their own).
    pub(crate) fn peek(&mut self, key: &K) -> Option<&V> {
        match &mut self.inner {
            Inner::Plain(v) => v.get(key),
            Inner::Expiring(e) => e.read(key, false),
        }
    }

    /// The value of `key`, mutably, without renewing its time-to-live (for maps and lists that
    /// remove expired entries).
    pub(crate) fn get_mut_unrenewed(&mut self, key: &K) -> Option<&mut V> {
        match &mut self.inner {
            Inner::Plain(v) => v.get_mut(key),
            Inner::Expiring(e) => e.get_mut_unrenewed(key),
        }
    }

    /// The value of `key`, mutably.
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        match &mut self.inner {
            Inner::Plain(v) => v.get_mut(key),
            Inner::Expiring(e) => e.get_mut(key),
        }
    }

    /// The value of `key`, inserting the default first if absent.
    pub fn get_or_default(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        match &mut self.inner {
            Inner::Plain(v) => v.get_or_default(key),
            Inner::Expiring(e) => e.get_or_default(key),
        }
    }

    /// Sets the value of `key`, returning the one it replaces.
    pub fn update(&mut self, key: K, value: V) -> Option<V> {
        match &mut self.inner {
            Inner::Plain(v) => v.update(key, value),
            Inner::Expiring(e) => e.update(key, value),
        }
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        match &mut self.inner {
            Inner::Plain(v) => v.remove(key),
            Inner::Expiring(e) => e.remove(key),
        }
    }

    /// Calls `f` with every key and its value, which it may change; the first error stops the
    /// visit. With a store this streams over the stored keys, key group by key group, writing
    /// back what changed.
    pub fn for_each_mut<E: From<StoreError>>(
        &mut self,
        f: impl FnMut(&K, &mut V) -> Result<(), E>,
    ) -> Result<(), E> {
        match &mut self.inner {
            Inner::Plain(v) => v.for_each_mut(f),
            Inner::Expiring(e) => e.for_each_mut(f),
        }
    }

    /// Keeps only the keys for which `keep` returns true.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &mut V) -> bool) -> Result<(), StoreError> {
        self.retain_visiting(|k, v| Ok::<bool, StoreError>(keep(k, v)))
    }

    /// Calls `f` with every key and its value, keeping the keys for which it returns true; the
    /// first error stops the visit.
    pub(crate) fn retain_visiting<E: From<StoreError>>(
        &mut self,
        f: impl FnMut(&K, &mut V) -> Result<bool, E>,
    ) -> Result<(), E> {
        match &mut self.inner {
            Inner::Plain(v) => v.retain_or_visit(f),
            Inner::Expiring(e) => e.retain_or_visit(f),
        }
    }

    /// Every key and value, copied. With a store this reads all of it into memory: for small
    /// states and tests.
    pub fn entries(&mut self) -> Result<Vec<(K, V)>, StoreError>
    where
        V: Clone,
    {
        let mut all = Vec::new();
        self.for_each_mut(|k, v| {
            all.push((k.clone(), v.clone()));
            Ok::<(), StoreError>(())
        })?;
        Ok(all)
    }

    /// Number of keys (with a store, or a time-to-live, a visit of all of them).
    pub fn len(&mut self) -> usize {
        match &mut self.inner {
            Inner::Plain(v) => v.len(),
            Inner::Expiring(e) => {
                let mut n = 0;
                if let Err(err) = e.for_each_mut(|_, _| {
                    n += 1;
                    Ok::<(), StoreError>(())
                }) {
                    e.values.keep_error(err);
                }
                n
            }
        }
    }

    /// Whether there is no key.
    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    /// Writes one keyed entry per non-empty key group.
    pub fn snapshot_into(
        &mut self,
        max_parallelism: usize,
        state: &mut OperatorState,
    ) -> Result<(), StateError> {
        match &mut self.inner {
            Inner::Plain(v) => v.snapshot_into(max_parallelism, state),
            Inner::Expiring(e) => e.snapshot_into(max_parallelism, state),
        }
    }

    /// Adds every key of this state's entries in `state` (other states' entries are skipped).
    /// With a time-to-live, each value keeps the time of its last access.
    pub fn restore_from(&mut self, state: &OperatorState) -> Result<(), StateError> {
        let ttl = self.ttl().is_some();
        let twin = twin_name(self.name(), ttl);
        if state.keyed_entries().iter().any(|e| e.state == twin) {
            return Err(StateError::TimeToLiveChanged {
                state: self.name().to_string(),
                checkpointed_with_ttl: !ttl,
            });
        }
        either!(self, v => v.restore_from(state))
    }
}

/// The name under which a state with a time-to-live keeps its entries (in checkpoints and in
/// the store's keys): apart from the same state without one, whose values are not stamped.
fn stamped_name(name: &str) -> String {
    format!("{name}#ttl")
}

/// The name the same state would have with the other choice of time-to-live.
fn twin_name(name: &str, ttl: bool) -> String {
    if ttl {
        name.to_string()
    } else {
        stamped_name(name)
    }
}

/// Whether `store` holds any entry of the state named `name`.
fn holds(store: &dyn KeyedStore, max_parallelism: usize, name: &str) -> Result<bool, StoreError> {
    let id = state_id(name);
    let mut found = false;
    for group in 0..max_parallelism {
        let start = key_prefix(group, id);
        store.scan(&start, &prefix_end(&start), &mut |_, _| {
            found = true;
            false
        })?;
        if found {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A state with a time-to-live: its values stamped with their last access.
#[derive(Debug)]
struct Expiring<K, V> {
    /// The state's name (its values are kept under `stamped_name` of it).
    name: String,
    values: Values<K, Stamped<V>>,
    config: StateTtlConfig,
    clock: ProcessingClock,
    /// Accesses since the last sweep (on the heap).
    accesses: usize,
    /// Accesses between two sweeps: the keys left after the last (at least `SWEEP_MIN`), so
    /// a sweep costs about one key's visit per access.
    sweep_after: usize,
    /// Where the store it is attached to learns the time, when the store drops expired
    /// entries on its own.
    expiry: Option<Arc<Expiry>>,
    /// The processing time an operator pinned for the accesses of a batch.
    pinned: Option<i64>,
}

impl<K, V> Expiring<K, V>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    V: Serialize + DeserializeOwned,
{
    /// Processing time now, which the store learns too.
    fn now(&self) -> i64 {
        let now = self.pinned.unwrap_or_else(|| self.clock.now_ms());
        if let Some(expiry) = &self.expiry {
            expiry.observe(now);
        }
        now
    }

    /// Processing time now, for an access of one key: on the heap, every so many accesses
    /// (as many as there were keys after the last sweep, at least `SWEEP_MIN`) first sweeps
    /// the expired values out, so that keys never read again do not stay.
    fn access(&mut self) -> i64 {
        let now = self.now();
        if self.config.background() && !self.values.is_attached() {
            self.accesses += 1;
            if self.accesses >= self.sweep_after {
                self.sweep(now);
            }
        }
        now
    }

    /// Drops the expired values of a heap state.
    fn sweep(&mut self, now: i64) {
        let ttl_ms = self.config.ttl_ms();
        self.values.retain_heap(|_, s| !expired(s.at, ttl_ms, now));
        self.accesses = 0;
        self.sweep_after = self.values.heap_len().unwrap_or(0).max(SWEEP_MIN);
    }

    fn attach(
        &mut self,
        store: Arc<dyn KeyedStore>,
        max_parallelism: usize,
        caches: impl Into<ValueCaches>,
        operator: &str,
    ) -> Result<(), StateError> {
        if self.values.is_attached() {
            return Ok(());
        }
        self.values
            .attach(store.clone(), max_parallelism, caches, operator)?;
        if self.config.background()
            && let Some(expiry) = store.expiry()
        {
            expiry.expire_after(state_id(self.values.name()), self.config.ttl_ms());
            self.expiry = Some(expiry);
            self.now();
        }
        Ok(())
    }

    /// The time of last access of `key`'s value, if it has one (a read of the store, when
    /// missing from the cache).
    fn stamp(&mut self, key: &K) -> Option<i64> {
        self.values.get(key).map(|s| s.at)
    }

    fn get(&mut self, key: &K) -> Option<&V> {
        let renew = self.config.renews_on_read();
        self.read(key, renew)
    }

    /// The value of `key` if visible (an expired one removed unless returned), its time renewed
    /// with `renew`.
    fn read(&mut self, key: &K, renew: bool) -> Option<&V> {
        let now = self.access();
        let at = self.stamp(key)?;
        if expired(at, self.config.ttl_ms(), now) {
            if !self.config.returns_expired() {
                self.values.remove(key);
                return None;
            }
        } else if renew && let Some(s) = self.values.get_mut(key) {
            s.at = now;
        }
        self.values.get(key).map(|s| &s.value)
    }

    fn get_mut_unrenewed(&mut self, key: &K) -> Option<&mut V> {
        let now = self.access();
        let at = self.stamp(key)?;
        if !visible(&self.config, at, now) {
            self.values.remove(key);
            return None;
        }
        self.values.get_mut(key).map(|s| &mut s.value)
    }

    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let now = self.access();
        let at = self.stamp(key)?;
        if !visible(&self.config, at, now) {
            self.values.remove(key);
            return None;
        }
        let s = self.values.get_mut(key)?;
        s.at = now;
        Some(&mut s.value)
    }

    fn get_or_default(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        let now = self.access();
        // One lookup: a new value comes stamped 0, long expired, and starts from the default
        // as an expired one does.
        let s = self.values.get_or_default(key);
        if !visible(&self.config, s.at, now) {
            s.value = V::default();
        }
        s.at = now;
        &mut s.value
    }

    fn update(&mut self, key: K, value: V) -> Option<V> {
        let now = self.access();
        let old = self.values.update(key, Stamped { at: now, value })?;
        visible(&self.config, old.at, now).then_some(old.value)
    }

    fn remove(&mut self, key: &K) -> Option<V> {
        let now = self.access();
        let old = self.values.remove(key)?;
        visible(&self.config, old.at, now).then_some(old.value)
    }

    fn for_each_mut<E: From<StoreError>>(
        &mut self,
        mut f: impl FnMut(&K, &mut V) -> Result<(), E>,
    ) -> Result<(), E> {
        self.retain_or_visit(|k, v| f(k, v).map(|()| true))
    }

    /// Visits the values not expired, keeping those `f` keeps; drops the expired ones.
    fn retain_or_visit<E: From<StoreError>>(
        &mut self,
        mut f: impl FnMut(&K, &mut V) -> Result<bool, E>,
    ) -> Result<(), E> {
        let (now, ttl_ms) = (self.now(), self.config.ttl_ms());
        self.values.retain_or_visit(|k, s| {
            if expired(s.at, ttl_ms, now) {
                return Ok(false);
            }
            f(k, &mut s.value)
        })
    }

    /// On the heap, sweeps first (unless cleanup is only on read and not in full snapshots);
    /// in front of a store with full snapshots and `cleanup_full_snapshot`, leaves the expired
    /// values out.
    fn snapshot_into(
        &mut self,
        max_parallelism: usize,
        state: &mut OperatorState,
    ) -> Result<(), StateError> {
        let (now, ttl_ms) = (self.now(), self.config.ttl_ms());
        if !self.values.is_attached() {
            if self.config.background() || self.config.full_snapshot() {
                self.sweep(now);
            }
            return self.values.snapshot_into(max_parallelism, state);
        }
        if !self.config.full_snapshot() {
            return self.values.snapshot_into(max_parallelism, state);
        }
        let keep = |v: &[u8]| !strip_stamp(v).is_some_and(|(at, _)| expired(at, ttl_ms, now));
        self.values
            .snapshot_keeping(max_parallelism, state, Some(&keep))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory_store;
    use crate::state::{StateVisibility, TtlUpdate};
    use std::time::Duration;
    use tokio::time::advance;

    const MINUTE: Duration = Duration::from_secs(60);

    /// The same state on the heap and in front of a store whose cache keeps 16 values.
    fn both(config: &StateTtlConfig) -> [ValueState<u32, u32>; 2] {
        let heap = ValueState::with_ttl("s", config.clone());
        let mut stored = ValueState::with_ttl("s", config.clone());
        stored.attach(memory_store(), 16, 0, "test").unwrap();
        [heap, stored]
    }

    #[tokio::test(start_paused = true)]
    async fn a_value_expires_a_ttl_after_its_last_write_not_its_last_read() {
        for mut st in both(&StateTtlConfig::new(MINUTE)) {
            st.update(1, 10);
            advance(Duration::from_secs(40)).await;
            assert_eq!(st.get(&1), Some(&10), "a read does not renew it");
            advance(Duration::from_secs(20)).await;
            assert_eq!(st.get(&1), None);
            assert_eq!(st.remove(&1), None, "the read removed it");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn writes_renew_the_time_to_live_and_mutable_access_counts_as_a_write() {
        for mut st in both(&StateTtlConfig::new(MINUTE)) {
            st.update(1, 10);
            *st.get_or_default(2) += 5;
            advance(Duration::from_secs(40)).await;
            st.update(1, 11);
            *st.get_mut(&2).unwrap() += 1;
            advance(Duration::from_secs(40)).await;
            assert_eq!(st.get(&1), Some(&11));
            assert_eq!(st.get(&2), Some(&6));
            advance(Duration::from_secs(20)).await;
            assert_eq!(st.get(&1), None);
            assert_eq!(
                *st.get_or_default(2),
                0,
                "an expired value is not the default's start"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn on_read_and_write_renews_on_every_read() {
        let config = StateTtlConfig::new(MINUTE).update_type(TtlUpdate::OnReadAndWrite);
        for mut st in both(&config) {
            st.update(1, 10);
            for _ in 0..5 {
                advance(Duration::from_secs(50)).await;
                assert_eq!(st.get(&1), Some(&10));
            }
            advance(MINUTE).await;
            assert_eq!(st.get(&1), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn return_expired_if_not_cleaned_up_returns_it_until_a_cleanup() {
        let config = StateTtlConfig::new(MINUTE)
            .state_visibility(StateVisibility::ReturnExpiredIfNotCleanedUp);
        for mut st in both(&config) {
            st.update(1, 10);
            advance(MINUTE * 2).await;
            assert_eq!(st.get(&1), Some(&10));
            assert_eq!(
                st.update(1, 12),
                Some(10),
                "the replaced value is returned too"
            );
            advance(MINUTE * 2).await;
            assert!(st.entries().unwrap().is_empty(), "a visit cleans it up");
            assert_eq!(st.get(&1), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn visits_and_counts_skip_expired_values_and_remove_them() {
        for mut st in both(&StateTtlConfig::new(MINUTE)) {
            for k in 0..10 {
                st.update(k, k);
            }
            advance(Duration::from_secs(30)).await;
            for k in 0..5 {
                st.update(k, k + 100);
            }
            advance(Duration::from_secs(30)).await;
            assert_eq!(st.len(), 5);
            let mut seen = st.entries().unwrap();
            seen.sort_unstable();
            assert_eq!(seen, (0..5).map(|k| (k, k + 100)).collect::<Vec<_>>());
            st.retain(|k, _| k % 2 == 0).unwrap();
            assert_eq!(st.len(), 3);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_restore_keeps_the_time_of_last_access() {
        for mut st in both(&StateTtlConfig::new(MINUTE)) {
            st.update(1, 10);
            advance(Duration::from_secs(30)).await;
            st.update(2, 20);
            let mut snapshot = OperatorState::default();
            st.snapshot_into(16, &mut snapshot).unwrap();
            let mut restored = both(&StateTtlConfig::new(MINUTE));
            for back in &mut restored {
                back.restore_from(&snapshot).unwrap();
            }
            advance(Duration::from_secs(30)).await;
            for mut back in restored {
                assert_eq!(back.get(&1), None, "not renewed by the restore");
                assert_eq!(back.get(&2), Some(&20));
            }
        }
    }

    /// The keys of `state` in `snapshot`.
    fn keys_in(snapshot: &OperatorState) -> Vec<u32> {
        let mut back: ValueState<u32, u32> = ValueState::with_ttl(
            "s",
            StateTtlConfig::new(Duration::from_secs(u64::MAX / 2_000)),
        );
        back.restore_from(snapshot).unwrap();
        let mut keys: Vec<u32> = back
            .entries()
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        keys.sort_unstable();
        keys
    }

    #[tokio::test(start_paused = true)]
    async fn snapshots_leave_expired_values_out_where_the_config_says() {
        let configs = [
            (StateTtlConfig::new(MINUTE), [vec![2], vec![1, 2]]),
            (
                StateTtlConfig::new(MINUTE).cleanup_full_snapshot(),
                [vec![2], vec![2]],
            ),
            (
                StateTtlConfig::new(MINUTE).disable_cleanup_in_background(),
                [vec![1, 2], vec![1, 2]],
            ),
        ];
        for (config, expected) in configs {
            for (mut st, expected) in both(&config).into_iter().zip(expected) {
                st.update(1, 10);
                advance(MINUTE).await;
                st.update(2, 20);
                let mut snapshot = OperatorState::default();
                st.snapshot_into(16, &mut snapshot).unwrap();
                assert_eq!(keys_in(&snapshot), expected, "{config:?}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn keys_never_read_again_are_swept_from_the_heap() {
        let mut st: ValueState<u32, u32> = ValueState::with_ttl("s", StateTtlConfig::new(MINUTE));
        for k in 0..2_000 {
            st.update(k, k);
        }
        advance(MINUTE).await;
        // New keys only: the old ones are never read, and go with the sweeps.
        for k in 2_000..6_000 {
            st.update(k, k);
        }
        let Inner::Expiring(e) = &st.inner else {
            unreachable!("made with a time-to-live")
        };
        assert!(e.values.heap_len().unwrap() < 4_000 + 1_024);

        let mut kept: ValueState<u32, u32> = ValueState::with_ttl(
            "s",
            StateTtlConfig::new(MINUTE).disable_cleanup_in_background(),
        );
        for k in 0..2_000 {
            kept.update(k, k);
        }
        advance(MINUTE).await;
        for k in 2_000..6_000 {
            kept.update(k, k);
        }
        let Inner::Expiring(e) = &kept.inner else {
            unreachable!("made with a time-to-live")
        };
        assert_eq!(e.values.heap_len(), Some(6_000), "cleanup on read only");
    }

    #[test]
    fn a_restore_refuses_the_other_choice_of_time_to_live_naming_the_state() {
        let changed = |r: Result<(), StateError>, with_ttl: bool| match r {
            Err(StateError::TimeToLiveChanged {
                state,
                checkpointed_with_ttl,
            }) => state == "s" && checkpointed_with_ttl == with_ttl,
            _ => false,
        };
        // From checkpoint entries.
        for ttl in [false, true] {
            let config = StateTtlConfig::new(MINUTE);
            let make = |ttl: bool| -> ValueState<u32, u32> {
                if ttl {
                    ValueState::with_ttl("s", config.clone())
                } else {
                    ValueState::new("s")
                }
            };
            let mut st = make(ttl);
            st.update(1, 10);
            let mut snapshot = OperatorState::default();
            st.snapshot_into(16, &mut snapshot).unwrap();
            assert!(changed(make(!ttl).restore_from(&snapshot), ttl));
            make(ttl).restore_from(&snapshot).unwrap();

            // From a store's files (an incremental restore): refused at attach.
            let store = memory_store();
            let mut st = make(ttl);
            st.attach(store.clone(), 16, 0, "test").unwrap();
            st.update(1, 10);
            st.snapshot_into(16, &mut OperatorState::default()).unwrap();
            assert!(changed(
                make(!ttl).attach(store.clone(), 16, 0, "test"),
                ttl
            ));
            make(ttl).attach(store, 16, 0, "test").unwrap();
        }
        let message = StateError::TimeToLiveChanged {
            state: "counts".into(),
            checkpointed_with_ttl: true,
        }
        .to_string();
        assert!(
            message.starts_with(
                "state \"counts\" was checkpointed with a time-to-live and is declared without one"
            ),
            "{message}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_state_without_a_time_to_live_keeps_everything() {
        let mut st: ValueState<u32, u32> = ValueState::new("s");
        assert!(st.ttl().is_none());
        st.update(1, 10);
        advance(Duration::from_secs(86_400 * 365)).await;
        assert_eq!(st.get(&1), Some(&10));
    }
}
