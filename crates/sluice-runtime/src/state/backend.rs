//! Where keyed state lives: on the heap (the default) or in a [`KeyedStore`], an ordered store of
//! byte keys and values that a [`KeyedStateBackend`] opens once per operator subtask
//! (`sluice-rocksdb`'s RocksDB backend is one; [`MemoryStateBackend`] is a small one for tests).
//!
//! A job chooses with [`StreamEnvironment::set_state_backend`](crate::StreamEnvironment::set_state_backend).
//! With a store, [`ValueState`](super::ValueState) keeps a bounded write-back cache of decoded
//! values in front of it: reads that miss load from the store, writes mark the cached value
//! dirty, and dirty values go to the store in one batch when the cache is full and before a
//! snapshot. So a job whose working set fits in the cache runs close to heap speed, and state
//! beyond it costs a store read per miss.
//!
//! Every key in a store starts with its key group (two bytes, big-endian) and then the state's
//! id (four bytes, a hash of its name): all state of one key group is one contiguous range, so a
//! restore at another parallelism can take or drop whole key-group ranges.
//!
//! ```text
//! [key group: u16 BE][state id: u32 BE][the key, encoded with sluice_core::codec]
//! ```

use super::{StoreHandle, ValueCaches};
use serde::{Deserialize, Serialize};
use sluice_core::{AttemptNumber, CheckpointId, NodeId, SubtaskIndex};
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A failure of a keyed state store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store could not be opened.
    #[error("cannot open the {backend} state store of {operator} at {path}: {message}")]
    Open {
        /// The backend's name.
        backend: String,
        /// The operator subtask, for people.
        operator: String,
        /// Where the store lives.
        path: PathBuf,
        /// What the store said.
        message: String,
    },
    /// A read, write or scan failed.
    #[error("the {backend} state store of {operator} failed to {action}: {message}")]
    Io {
        /// The backend's name.
        backend: String,
        /// The operator subtask, for people.
        operator: String,
        /// What was being done (`read`, `write`, `scan`).
        action: &'static str,
        /// What the store said.
        message: String,
    },
    /// A stored value could not be decoded.
    #[error("state {state} of {operator}: a stored value does not decode: {message}")]
    Decode {
        /// The state's name.
        state: String,
        /// The operator subtask, for people.
        operator: String,
        /// What the codec said.
        message: String,
    },
    /// Two states of one operator have names whose ids collide.
    #[error("states {first:?} and {second:?} of {operator} hash to the same store id; rename one")]
    IdCollision {
        /// One state's name.
        first: String,
        /// The other state's name.
        second: String,
        /// The operator subtask, for people.
        operator: String,
    },
}

/// Which operator subtask a store is for; a backend derives its directory and names from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreScope {
    /// The operator's id in the job graph.
    pub node: NodeId,
    /// The operator's name.
    pub operator_name: String,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// The attempt of the job (each restart opens fresh stores).
    pub attempt: AttemptNumber,
    /// The number of key groups.
    pub max_parallelism: usize,
    /// The operator's parallelism.
    pub parallelism: usize,
}

impl StoreScope {
    /// The key groups this subtask owns.
    pub fn key_groups(&self) -> Range<usize> {
        crate::key_groups::key_group_range(self.subtask, self.max_parallelism, self.parallelism)
    }

    /// `"<operator> (subtask <i>)"`, for errors.
    pub fn describe(&self) -> String {
        format!("{} (subtask {})", self.operator_name, self.subtask)
    }
}

/// A store's files at a checkpoint, as [`KeyedStore::checkpoint_files`] made them: enough to
/// open the store again as it was, or (with other stores' files) a store for other key groups.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreFiles {
    /// The directory holding the files.
    pub dir: PathBuf,
    /// Each file's name in `dir` and its length in bytes.
    pub files: Vec<(String, u64)>,
    /// The key groups the store held.
    pub key_groups: Range<usize>,
    /// Of the files, those that checkpoint storage holds already: name and key in its shared
    /// area. A store opened from these files refers to them instead of uploading them again.
    pub shared: Vec<(String, String)>,
    /// Of the files, those that a checkpoint in memory refers to in checkpoint storage (a
    /// failover's restore): name and key. Storage most likely holds them still; a store opened
    /// from these files marks them [`SharedFile::restored`](crate::state::SharedFile::restored)
    /// in its checkpoints, which then write only those that storage lacks.
    #[serde(default)]
    pub restored_shared: Vec<(String, String)>,
}

impl StoreFiles {
    /// How many of `key_groups` these files hold.
    pub fn overlap(&self, key_groups: &Range<usize>) -> usize {
        let start = self.key_groups.start.max(key_groups.start);
        let end = self.key_groups.end.min(key_groups.end);
        end.saturating_sub(start)
    }
}

/// A table file to upload ahead of the checkpoint that will refer to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UploadAhead {
    /// Its name in the store's directory.
    pub name: String,
    /// Its key in checkpoint storage's shared area.
    pub key: String,
    /// A local path to upload it from (a link the store removes in
    /// [`KeyedStore::uploaded_ahead`]).
    pub path: PathBuf,
}

/// One change of a write batch: a put (`Some`) or a delete (`None`).
pub type StoreWrite = (Vec<u8>, Option<Vec<u8>>);

/// What a store reports about itself, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Bytes of memory the store uses (block cache share, memtables).
    pub memory_bytes: u64,
    /// Bytes the store's files take on disk.
    pub disk_bytes: u64,
    /// Blocks the store's reads found in its block cache since it opened.
    pub cache_hits: u64,
    /// Blocks the store's reads did not find in its block cache (and read from its files)
    /// since it opened.
    pub cache_misses: u64,
    /// Compactions (merges of its files, not memtable flushes) run since the store opened.
    pub compactions: u64,
}

/// An ordered store of byte keys and values for the keyed state of one operator subtask.
///
/// Methods take `&self` (a store is shared by the states of its operator) and are called from
/// the operator's task only. They may do blocking I/O: a task whose operators are keyed and
/// keep their state in a store runs on a thread of its own, off the runtime's workers, on a
/// multi-threaded runtime.
pub trait KeyedStore: Send + Sync + fmt::Debug {
    /// The value at `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// Reads the values at `keys` (in key order, each once) and calls `f` with each key's
    /// index and value, in any order. A store that can read many keys in one call does so (RocksDB's
    /// `MultiGet` shares the index, filter and block lookups of neighbouring keys); by default
    /// this is one [`get`](Self::get) per key.
    fn get_many(
        &self,
        keys: &[Vec<u8>],
        f: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<(), StoreError> {
        for (i, key) in keys.iter().enumerate() {
            f(i, self.get(key)?.as_deref());
        }
        Ok(())
    }

    /// Applies every change of `batch`, in order, atomically.
    fn write(&self, batch: Vec<StoreWrite>) -> Result<(), StoreError>;

    /// Calls `f` with each key and value in `start..end`, in key order, until it returns false.
    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError>;

    /// How big the store is, for metrics.
    fn stats(&self) -> StoreStats {
        StoreStats::default()
    }

    /// Writes a consistent, immutable copy of the store's files into the new directory `dir`
    /// (hard links where it can) and lists them; `None` when the store has no files (it lives
    /// in memory), in which case a snapshot reads its entries instead.
    fn checkpoint_files(&self, dir: &Path) -> Result<Option<StoreFiles>, StoreError> {
        let _ = dir;
        Ok(None)
    }

    /// Whether snapshots of this store are its files ([`snapshot_files`](Self::snapshot_files))
    /// rather than its entries.
    fn incremental(&self) -> bool {
        false
    }

    /// For an incremental store: its files at checkpoint `checkpoint`, as a handle whose table
    /// files name their keys in checkpoint storage's shared area, marked uploaded when an
    /// earlier completed checkpoint uploaded them already. `None` otherwise.
    fn snapshot_files(&self, checkpoint: CheckpointId) -> Result<Option<StoreHandle>, StoreError> {
        let _ = checkpoint;
        Ok(None)
    }

    /// Checkpoint `checkpoint` completed: the files its snapshot named are in checkpoint
    /// storage from now on.
    fn checkpoint_complete(&self, checkpoint: CheckpointId) {
        let _ = checkpoint;
    }

    /// For an incremental store: the table files it holds that checkpoint storage does not,
    /// that no upload ahead has started for and that no checkpoint in flight names, each linked
    /// into a directory of the store's so that it outlives a compaction: what to upload before
    /// a checkpoint needs it (see `state/ahead.rs`). Empty otherwise.
    fn files_to_upload_ahead(&self) -> Result<Vec<UploadAhead>, StoreError> {
        Ok(Vec::new())
    }

    /// The uploads ahead of `done` (table file names) are in checkpoint storage; those of
    /// `failed` are not (they are offered again). Either way their links go.
    fn uploaded_ahead(&self, done: &[String], failed: &[String]) {
        let _ = (done, failed);
    }

    /// The keys in checkpoint storage's shared area of files this store uploaded ahead that no
    /// checkpoint will list (RocksDB compacted them away before a checkpoint took them): to
    /// delete. The store forgets them.
    fn take_orphans(&self) -> Result<Vec<String>, StoreError> {
        Ok(Vec::new())
    }

    /// Where the states with a time-to-live in front of this store register, when the store
    /// drops their expired entries on its own (RocksDB, in its compactions: see
    /// [`ExpiryRules::expired`](super::ExpiryRules::expired)); `None` (the default) when only
    /// the states' reads and snapshots remove them.
    fn expiry(&self) -> Option<Arc<super::Expiry>> {
        None
    }
}

/// Opens a [`KeyedStore`] per operator subtask; chosen per job.
pub trait KeyedStateBackend: Send + Sync + fmt::Debug {
    /// A short name for logs and metrics (`"rocksdb"`).
    fn name(&self) -> &str;

    /// A fresh, empty store for `scope`.
    fn open(&self, scope: &StoreScope) -> Result<Arc<dyn KeyedStore>, StoreError>;

    /// The bytes of decoded values that the keyed states in front of this backend's stores
    /// may cache, shared among them (see [`ValueCaches`]).
    fn value_caches(&self) -> ValueCaches;

    /// A store for `scope` holding what `from` (files of stores at a checkpoint, possibly of
    /// other key groups) hold of the scope's key groups, and nothing else. The default opens an
    /// empty store when `from` holds none of them and refuses otherwise.
    fn open_restored(
        &self,
        scope: &StoreScope,
        from: &[StoreFiles],
    ) -> Result<Arc<dyn KeyedStore>, StoreError> {
        let groups = scope.key_groups();
        match from.iter().find(|f| f.overlap(&groups) > 0) {
            None => self.open(scope),
            Some(f) => Err(StoreError::Open {
                backend: self.name().to_string(),
                operator: scope.describe(),
                path: f.dir.clone(),
                message: "this backend cannot open a store from files".into(),
            }),
        }
    }
}

/// The state backend of a job: the heap (the default) or a [`KeyedStateBackend`].
///
/// ```
/// use sluice_runtime::state::{MemoryStateBackend, StateBackend};
/// assert_eq!(StateBackend::default().name(), "heap");
/// let store = StateBackend::from(MemoryStateBackend::new(1 << 20));
/// assert_eq!(store.name(), "memory-store");
/// ```
#[derive(Clone, Default)]
pub struct StateBackend(Option<Arc<dyn KeyedStateBackend>>);

impl StateBackend {
    /// All keyed state on the heap, every checkpoint a full copy.
    pub fn heap() -> Self {
        StateBackend(None)
    }

    /// The backend's name: `"heap"` or the store's.
    pub fn name(&self) -> &str {
        self.0.as_deref().map_or("heap", |b| b.name())
    }

    /// The store backend, if the state is not on the heap.
    pub fn store(&self) -> Option<&Arc<dyn KeyedStateBackend>> {
        self.0.as_ref()
    }
}

impl<B: KeyedStateBackend + 'static> From<B> for StateBackend {
    fn from(backend: B) -> Self {
        StateBackend(Some(Arc::new(backend)))
    }
}

impl From<Arc<dyn KeyedStateBackend>> for StateBackend {
    fn from(backend: Arc<dyn KeyedStateBackend>) -> Self {
        StateBackend(Some(backend))
    }
}

impl fmt::Debug for StateBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str("StateBackend(heap)"),
            Some(b) => write!(f, "StateBackend({b:?})"),
        }
    }
}

impl PartialEq for StateBackend {
    /// The same backend instance (or both the heap).
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for StateBackend {}

/// The id of a state in a store: a hash of its name (FNV-1a, 32 bits), stable across runs.
pub(crate) fn state_id(name: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The first six bytes of every key of state `id` in key group `group`.
pub(crate) fn key_prefix(group: usize, id: u32) -> [u8; 6] {
    let g = (group as u16).to_be_bytes();
    let i = id.to_be_bytes();
    [g[0], g[1], i[0], i[1], i[2], i[3]]
}

/// The end (exclusive) of the keys of state `id` in key group `group`.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    // All bytes 0xFF: no key is greater; `[0xFF; 7]` is past every prefixed key.
    vec![u8::MAX; prefix.len() + 1]
}

/// A [`KeyedStateBackend`] whose stores are ordered maps in memory: for tests of the store path
/// (the cache, its write-back, snapshots through the store) without a disk.
///
/// ```
/// use sluice_runtime::state::{KeyedStateBackend, MemoryStateBackend, StoreScope};
/// let backend = MemoryStateBackend::new(4096);
/// let scope = StoreScope {
///     node: sluice_core::NodeId(0),
///     operator_name: "count".into(),
///     subtask: 0,
///     attempt: 0,
///     max_parallelism: 128,
///     parallelism: 1,
/// };
/// let store = backend.open(&scope).unwrap();
/// store.write(vec![(b"k".to_vec(), Some(b"v".to_vec()))]).unwrap();
/// assert_eq!(store.get(b"k").unwrap(), Some(b"v".to_vec()));
/// ```
#[derive(Debug)]
pub struct MemoryStateBackend {
    caches: ValueCaches,
}

impl MemoryStateBackend {
    /// Stores in memory, with `cache_bytes` of decoded values cached per state.
    pub fn new(cache_bytes: usize) -> Self {
        MemoryStateBackend {
            caches: ValueCaches::per_state(cache_bytes),
        }
    }
}

impl KeyedStateBackend for MemoryStateBackend {
    fn name(&self) -> &str {
        "memory-store"
    }

    fn open(&self, _scope: &StoreScope) -> Result<Arc<dyn KeyedStore>, StoreError> {
        Ok(Arc::new(MemoryStore::default()))
    }

    fn value_caches(&self) -> ValueCaches {
        self.caches.clone()
    }
}

/// The store of [`MemoryStateBackend`].
#[derive(Debug, Default)]
struct MemoryStore {
    map: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl KeyedStore for MemoryStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(sluice_core::sync::lock(&self.map).get(key).cloned())
    }

    fn write(&self, batch: Vec<StoreWrite>) -> Result<(), StoreError> {
        let mut map = sluice_core::sync::lock(&self.map);
        for (k, v) in batch {
            match v {
                Some(v) => map.insert(k, v),
                None => map.remove(&k),
            };
        }
        Ok(())
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let map = sluice_core::sync::lock(&self.map);
        for (k, v) in map.range(start.to_vec()..end.to_vec()) {
            if !f(k, v) {
                break;
            }
        }
        Ok(())
    }

    fn stats(&self) -> StoreStats {
        let map = sluice_core::sync::lock(&self.map);
        let bytes: usize = map.iter().map(|(k, v)| k.len() + v.len()).sum();
        StoreStats {
            memory_bytes: bytes as u64,
            ..StoreStats::default()
        }
    }
}

/// A backend for tests of operators: in-memory stores that count how they are read.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct CountingBackend {
    stores: Mutex<Vec<Arc<CountingStore>>>,
}

#[cfg(test)]
impl CountingBackend {
    /// (single-key reads, reads of many keys) of all its stores so far.
    pub(crate) fn reads(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        sluice_core::sync::lock(&self.stores)
            .iter()
            .fold((0, 0), |(g, m), s| {
                (g + s.gets.load(Relaxed), m + s.many.load(Relaxed))
            })
    }
}

#[cfg(test)]
impl KeyedStateBackend for Arc<CountingBackend> {
    fn name(&self) -> &str {
        "counting"
    }

    fn open(&self, _scope: &StoreScope) -> Result<Arc<dyn KeyedStore>, StoreError> {
        let store = Arc::new(CountingStore::default());
        sluice_core::sync::lock(&self.stores).push(store.clone());
        Ok(store)
    }

    fn value_caches(&self) -> ValueCaches {
        ValueCaches::per_state(1 << 20)
    }
}

/// An in-memory store that counts its reads (single `get`s, `get_many` calls, which must come
/// in key order) and records the encoded bytes of each write.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct CountingStore {
    inner: MemoryStore,
    pub(crate) gets: std::sync::atomic::AtomicU64,
    pub(crate) many: std::sync::atomic::AtomicU64,
    pub(crate) writes: Mutex<Vec<usize>>,
}

#[cfg(test)]
impl KeyedStore for CountingStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.gets.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.get(key)
    }

    fn get_many(
        &self,
        keys: &[Vec<u8>],
        f: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<(), StoreError> {
        self.many.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        assert!(keys.is_sorted(), "keys come in key order");
        for (i, key) in keys.iter().enumerate() {
            f(i, self.inner.get(key)?.as_deref());
        }
        Ok(())
    }

    fn write(&self, batch: Vec<StoreWrite>) -> Result<(), StoreError> {
        let bytes = batch
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len))
            .sum();
        sluice_core::sync::lock(&self.writes).push(bytes);
        self.inner.write(batch)
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        self.inner.scan(start, end, f)
    }
}

/// For tests: a fresh memory store of one subtask at max parallelism 16, whose states cache
/// only the fewest values.
#[cfg(test)]
pub(crate) fn memory_store() -> Arc<dyn KeyedStore> {
    let scope = StoreScope {
        node: sluice_core::NodeId(0),
        operator_name: "test".into(),
        subtask: 0,
        attempt: 0,
        max_parallelism: 16,
        parallelism: 1,
    };
    match MemoryStateBackend::new(0).open(&scope) {
        Ok(store) => store,
        Err(e) => panic!("a memory store opens: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_order_by_key_group_then_state() {
        let a = key_prefix(1, 7);
        let b = key_prefix(1, 8);
        let c = key_prefix(2, 0);
        assert!(a < b && b < c);
        assert!(prefix_end(&a).as_slice() <= b.as_slice());
        assert_eq!(prefix_end(&[1, 0xFF]), vec![2]);
        assert_eq!(prefix_end(&[0xFF, 0xFF]), vec![0xFF, 0xFF, 0xFF]);
    }

    #[test]
    fn state_ids_are_stable() {
        // FNV-1a of "" is its offset basis; the ids must never change between releases.
        assert_eq!(state_id(""), 0x811c_9dc5);
        assert_eq!(state_id("_process/state"), state_id("_process/state"));
        assert_ne!(state_id("_join/left"), state_id("_join/right"));
    }
}
