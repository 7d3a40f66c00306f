//! [`RocksDbStateBackend`]: where the stores live and how much memory they share; opens one
//! [`RocksDbStore`](crate::store::RocksDbStore) per keyed operator subtask.

use crate::budget::{self, Split};
use crate::expiry::ExpiredValuesFactory;
use crate::store::RocksDbStore;
use crate::write_buffers::WriteBuffers;
use rocksdb::{
    BlockBasedIndexType, BlockBasedOptions, Cache, DB, DBCompactionStyle, DBCompressionType,
    Options, UniversalCompactOptions,
};
use sluice_runtime::state::{
    Expiry, KeyedStateBackend, KeyedStore, StoreError, StoreFiles, StoreScope, ValueCaches,
};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};

/// The memory budget when none is set: 256 MiB.
pub const DEFAULT_MEMORY_BUDGET: usize = 256 << 20;

/// Sorted runs that start a universal compaction.
const UNIVERSAL_TRIGGER: i32 = 8;
/// Fewest sorted runs a universal compaction merges.
const UNIVERSAL_MIN_MERGE_WIDTH: i32 = 4;
/// Files in level 0 (with universal compaction: sorted runs) at which RocksDB slows writes, and
/// at which a checkpoint's flush waits. RocksDB's 20 is reached while a long merge runs (the
/// whole state after a load: 9 s at 400 MB, flushes adding a run every half second): writes
/// then crawl, and `Checkpoint::create_checkpoint`, whose flush may not stall writes
/// (`FlushOptions::allow_write_stall` is false there and not settable from Rust), waits for the
/// merge to end. The checkpoint then lists the merge's output a fraction of a millisecond
/// after it appears, before any upload ahead has started, and uploads the whole state itself
/// (BENCHMARKS.md, "The checkpoint that waited for a merge"). Sixty-four keeps both out of the
/// way of any merge the sizes here make.
const L0_SLOWDOWN_TRIGGER: i32 = 64;
/// Files in level 0 at which RocksDB stops writes until a merge ends.
const L0_STOP_TRIGGER: i32 = 80;

/// How RocksDB merges its table files, which sets how much each incremental checkpoint
/// uploads: a compaction's output files are new files, so a checkpoint after a compaction
/// uploads them all.
///
/// Measured here with `sluice-bench large-state-probe` (1 % of 2.8M keys updated per interval,
/// sixteen intervals; BENCHMARKS.md `## large-state`): leveled wrote a mean 38 % of the state
/// per checkpoint and up to 97 % (random keys overlap every file of the last level, so each
/// merge into it rewrites it whole); universal as configured here a mean 7 %, most checkpoints
/// about 2 %, and up to 38 % when a merge of the larger runs came due, with the same throughput
/// and a lower peak memory. It keeps more on disk (up to about twice the live data).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Compaction {
    /// Universal (size-tiered) compaction: merges sorted runs of similar size, at least four
    /// at a time once there are eight, so each entry is rewritten few times. The default.
    #[default]
    Universal,
    /// Leveled compaction with dynamic level sizes (Flink's default): less space on disk,
    /// more rewriting.
    Leveled,
}

/// Keyed state in RocksDB on local disk (Flink's `EmbeddedRocksDBStateBackend`), for state larger
/// than memory: each keyed operator subtask gets its own RocksDB instance in a fresh directory
/// below `dir`, all instances of this backend share one block cache, and the memory they use
/// stays within the [budget](Self::memory_budget) (see `budget.rs` for the split).
///
/// ```
/// use sluice_rocksdb::RocksDbStateBackend;
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::process::{Context, KeyedProcessFunction};
///
/// #[derive(Clone)]
/// struct Count;
/// impl KeyedProcessFunction<u64, u64> for Count {
///     type Out = (u64, u64);
///     type State = u64;
///     fn process_element(&mut self, k: u64, ctx: &mut Context<'_, u64, u64, (u64, u64)>) -> Result<(), UserError> {
///         *ctx.state() += 1;
///         let n = *ctx.state();
///         ctx.collect((k, n));
///         Ok(())
///     }
/// }
///
/// let dir = tempfile::tempdir().unwrap();
/// let env = StreamEnvironment::new();
/// env.set_parallelism(2);
/// env.set_state_backend(RocksDbStateBackend::new(dir.path()).memory_budget(64 << 20));
/// let out = env.from_iter((0..1_000u64).map(|i| i % 10)).key_by(|k| *k).process_keyed(Count).collect();
/// env.execute_blocking("count on disk").unwrap();
/// let last = out.take().into_iter().filter(|(_, n)| *n == 100).count();
/// assert_eq!(last, 10, "every key counted to 100");
/// ```
pub struct RocksDbStateBackend {
    dir: PathBuf,
    budget: usize,
    split: Split,
    /// Bytes each state caches when set apart from the budget (`value_cache_bytes`).
    value_cache_override: Option<usize>,
    /// The caches of decoded values all states of this backend share.
    value_caches: ValueCaches,
    /// The write buffers all stores of this backend share.
    write_buffers: Arc<WriteBuffers>,
    /// The block cache all stores share, made when the first opens.
    cache: Mutex<Option<Cache>>,
    /// Names the stores of this process apart from those of another (a killed one's).
    instance: String,
    opened: AtomicU64,
    swept: Once,
    incremental: bool,
    compaction: Compaction,
    /// Threads that read a batch's keys, the task's own included.
    read_threads: usize,
    /// The helpers all stores share (`read_threads - 1` threads), made when the first opens.
    readers: Mutex<Option<Arc<rayon::ThreadPool>>>,
}

/// Threads that read a batch's keys by default: the task's own and one helper.
pub const DEFAULT_READ_THREADS: usize = 2;

impl RocksDbStateBackend {
    /// Stores below `dir` (created when the first store opens), with the default budget.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        let budget = DEFAULT_MEMORY_BUDGET;
        let split = budget::split(budget);
        RocksDbStateBackend {
            dir: dir.into(),
            budget,
            split,
            value_cache_override: None,
            value_caches: value_caches(&split, None),
            write_buffers: WriteBuffers::new(split),
            cache: Mutex::new(None),
            instance: format!("p{}", std::process::id()),
            opened: AtomicU64::new(0),
            swept: Once::new(),
            incremental: false,
            compaction: Compaction::default(),
            read_threads: DEFAULT_READ_THREADS,
            readers: Mutex::new(None),
        }
    }

    /// Sets the memory budget, in bytes, that all stores of this backend in this process share,
    /// however many keyed operators, subtasks and states use it: the block cache, the write
    /// buffers and the caches of decoded values come out of it (the guide,
    /// `docs/state-backends.md`, gives the split).
    pub fn memory_budget(mut self, bytes: usize) -> Self {
        self.budget = bytes;
        self.split = budget::split(bytes);
        self.write_buffers = WriteBuffers::new(self.split);
        self.value_caches = value_caches(&self.split, self.value_cache_override);
        self
    }

    /// Sets the bytes of decoded values each state caches in front of its store apart from the
    /// budget: every state gets them, however many there are (by default the states share half
    /// the budget, at most a quarter each; at least 16 values are kept whatever the bytes).
    /// Small values make every access a store read, which tests use.
    pub fn value_cache_bytes(mut self, bytes: usize) -> Self {
        self.value_cache_override = Some(bytes);
        self.value_caches = value_caches(&self.split, self.value_cache_override);
        self
    }

    /// Turns incremental checkpoints on or off (off by default, as in Flink). Off, every
    /// checkpoint writes all keyed entries, in the heap backend's format (so the heap backend
    /// can restore it). On, a checkpoint is the store's files: its table files go once to the
    /// checkpoint storage's shared area and later checkpoints refer to them; only files written
    /// since the last completed checkpoint are uploaded.
    pub fn incremental(mut self, on: bool) -> Self {
        self.incremental = on;
        self
    }

    /// Sets the compaction style of the stores opened from now on (see [`Compaction`];
    /// universal by default).
    pub fn compaction(mut self, style: Compaction) -> Self {
        self.compaction = style;
        self
    }

    /// Sets how many threads read the keys a keyed operator asks for at once (a batch's
    /// missing keys, with RocksDB's `MultiGet`): the task's own thread and `threads - 1`
    /// helper threads that all stores of this backend in the process share. The default, 2,
    /// lets a task's reads use a second core (close to what Flink 2's asynchronous state
    /// access does for its disaggregated backend); 1 reads on the task's thread only, as
    /// Flink's RocksDB backend does. The keys are read in chunks of 64 by whichever thread is
    /// free, so a helper busy with another task's read costs nothing but its help; fewer than
    /// 128 keys are always read on the task's thread.
    pub fn read_threads(mut self, threads: usize) -> Self {
        self.read_threads = threads.max(1);
        self
    }

    /// The memory budget in bytes.
    pub fn budget(&self) -> usize {
        self.budget
    }

    /// Where the stores live.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes the shared block cache holds now.
    pub fn block_cache_usage(&self) -> usize {
        sluice_core::sync::lock(&self.cache)
            .as_ref()
            .map_or(0, Cache::get_usage)
    }

    fn options(
        &self,
        cache: &Cache,
        compression: DBCompressionType,
        write_buffer: usize,
        expiry: &Arc<Expiry>,
    ) -> Options {
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(cache);
        // Index and filter blocks are charged to the cache (so the budget holds), partitioned so
        // that one big filter never has to fit whole, with the top level pinned.
        table.set_cache_index_and_filter_blocks(true);
        table.set_pin_l0_filter_and_index_blocks_in_cache(true);
        table.set_partition_filters(true);
        table.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
        table.set_pin_top_level_index_and_filter(true);
        table.set_bloom_filter(10.0, false);
        let mut o = Options::default();
        o.create_if_missing(true);
        o.set_block_based_table_factory(&table);
        o.set_write_buffer_size(write_buffer);
        o.set_max_write_buffer_number(self.split.write_buffers);
        o.set_compression_type(compression);
        match self.compaction {
            Compaction::Universal => {
                // Merges wait for eight sorted runs and take at least four, so that most
                // intervals upload only their flush (RocksDB's four and two merge the newest
                // runs into a growing one at almost every flush).
                o.set_compaction_style(DBCompactionStyle::Universal);
                let mut universal = UniversalCompactOptions::default();
                universal.set_min_merge_width(UNIVERSAL_MIN_MERGE_WIDTH);
                o.set_universal_compaction_options(&universal);
                o.set_level_zero_file_num_compaction_trigger(UNIVERSAL_TRIGGER);
            }
            Compaction::Leveled => o.set_level_compaction_dynamic_level_bytes(true),
        }
        o.set_level_zero_slowdown_writes_trigger(L0_SLOWDOWN_TRIGGER);
        o.set_level_zero_stop_writes_trigger(L0_STOP_TRIGGER);
        // A bloom filter over each memtable's keys (a tenth of the write buffer, inside it): a
        // read of a key the memtable lacks, every new key while loading, skips its skip list.
        o.set_memtable_prefix_bloom_ratio(0.1);
        o.set_memtable_whole_key_filtering(true);
        o.set_max_background_jobs(2);
        // Compactions drop the expired values of states with a time-to-live.
        o.set_compaction_filter_factory(ExpiredValuesFactory {
            expiry: expiry.clone(),
        });
        // No `enable_statistics`: at the one level the C API sets, RocksDB's statistics time
        // every file read and every `MultiGet`, which cost a sixth of the updates per second at
        // 22 M keys. The stores count what their metrics need themselves (`store.rs`).
        o
    }

    /// A new, empty directory for a store of `scope`.
    pub(crate) fn fresh_dir(&self, scope: &StoreScope) -> Result<PathBuf, StoreError> {
        self.swept.call_once(|| self.sweep_dead_processes());
        let n = self.opened.fetch_add(1, Ordering::Relaxed);
        let dir = self.dir.join(&self.instance).join(format!(
            "op{}-s{}-a{}-{n}",
            scope.node.0, scope.subtask, scope.attempt
        ));
        let fail = |e: std::io::Error| StoreError::Open {
            backend: "rocksdb".into(),
            operator: scope.describe(),
            path: dir.clone(),
            message: e.to_string(),
        };
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(fail)?;
        }
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(fail)?;
        }
        Ok(dir)
    }

    /// Opens (creating if needed) the RocksDB instance in `dir`.
    pub(crate) fn open_dir(
        &self,
        scope: &StoreScope,
        dir: PathBuf,
    ) -> Result<RocksDbStore, StoreError> {
        let fail = |message: String| StoreError::Open {
            backend: "rocksdb".into(),
            operator: scope.describe(),
            path: dir.clone(),
            message,
        };
        let cache = {
            let mut shared = sluice_core::sync::lock(&self.cache);
            match shared.as_ref() {
                Some(c) => c.clone(),
                None => {
                    let c = Cache::new_lru_cache(self.split.block_cache)
                        .map_err(|e| fail(e.to_string()))?;
                    *shared = Some(c.clone());
                    c
                }
            }
        };
        // LZ4 where the library has it (Debian's does); RocksDB compiled from the crate's
        // sources without compression libraries refuses it, and then the store goes
        // uncompressed.
        // Counted in before opening, so that the store opens with its share.
        let buffers = self.write_buffers.join();
        let expiry = Arc::new(Expiry::new());
        let options = self.options(&cache, DBCompressionType::Lz4, buffers.bytes(), &expiry);
        let db = match open_db(&options, &dir) {
            Ok(db) => db,
            Err(e) if e.to_string().contains("ompression") => {
                let plain = self.options(&cache, DBCompressionType::None, buffers.bytes(), &expiry);
                open_db(&plain, &dir).map_err(|e| fail(e.to_string()))?
            }
            Err(e) => return Err(fail(e.to_string())),
        };
        let incremental = self.incremental.then(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let name = dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            crate::store::Incremental {
                staging: self.dir.join(&self.instance).join("staging"),
                uid: format!("{}-{name}-{nanos:x}", self.instance),
                confirmed: Default::default(),
                restored: Default::default(),
                pending: Default::default(),
                ahead: Default::default(),
            }
        });
        Ok(RocksDbStore::new(
            db,
            dir.clone(),
            scope,
            incremental,
            self.readers().map_err(fail)?,
            buffers,
            expiry,
        ))
    }

    /// The helper threads for reads, made on first use; none with one read thread.
    fn readers(&self) -> Result<Option<Arc<rayon::ThreadPool>>, String> {
        if self.read_threads <= 1 {
            return Ok(None);
        }
        let mut shared = sluice_core::sync::lock(&self.readers);
        if let Some(pool) = shared.as_ref() {
            return Ok(Some(pool.clone()));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(self.read_threads - 1)
            .thread_name(|i| format!("rocksdb-read-{i}"))
            .build()
            .map(Arc::new)
            .map_err(|e| format!("starting {} read threads: {e}", self.read_threads - 1))?;
        *shared = Some(pool.clone());
        Ok(Some(pool))
    }

    /// Removes the store directories of processes that are gone (killed before they could
    /// remove their own).
    fn sweep_dead_processes(&self) {
        for dir in sluice_runtime::state::dirs_of_processes_gone(&self.dir, "") {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a store directory of a process that is gone");
            }
        }
    }
}

impl fmt::Debug for RocksDbStateBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksDbStateBackend")
            .field("dir", &self.dir)
            .field("budget", &self.budget)
            .finish()
    }
}

impl KeyedStateBackend for RocksDbStateBackend {
    fn name(&self) -> &str {
        "rocksdb"
    }

    fn open(&self, scope: &StoreScope) -> Result<Arc<dyn KeyedStore>, StoreError> {
        let dir = self.fresh_dir(scope)?;
        Ok(Arc::new(self.open_dir(scope, dir)?))
    }

    fn open_restored(
        &self,
        scope: &StoreScope,
        from: &[StoreFiles],
    ) -> Result<Arc<dyn KeyedStore>, StoreError> {
        let groups = scope.key_groups();
        let mut relevant: Vec<&StoreFiles> =
            from.iter().filter(|f| f.overlap(&groups) > 0).collect();
        // The store that holds most of the new key groups is taken whole (its files linked,
        // not rewritten); the others' entries in the new range are copied into it.
        relevant.sort_by_key(|f| std::cmp::Reverse(f.overlap(&groups)));
        let Some((base, others)) = relevant.split_first() else {
            return self.open(scope);
        };
        let dir = self.fresh_dir(scope)?;
        let fail = |message: String| StoreError::Open {
            backend: "rocksdb".into(),
            operator: scope.describe(),
            path: dir.clone(),
            message,
        };
        link_files(base, &dir).map_err(fail)?;
        let store = self.open_dir(scope, dir.clone())?;
        // The base's table files keep their names, so later checkpoints refer to the shared
        // files they came from instead of uploading them again (after a failover, those that
        // checkpoint storage still holds).
        store.seed_shared(&base.shared, &base.restored_shared);
        if base.key_groups != groups {
            store.keep_only(&groups).map_err(|e| fail(e.to_string()))?;
        }
        for other in others {
            let temp = dir.with_extension(format!("from-{}", other.key_groups.start));
            link_files(other, &temp).map_err(fail)?;
            let copied = copy_range(&temp, &store, &groups);
            let _ = std::fs::remove_dir_all(&temp);
            copied.map_err(fail)?;
        }
        Ok(Arc::new(store))
    }

    fn value_caches(&self) -> ValueCaches {
        self.value_caches.clone()
    }
}

/// The value caches of a backend with `split`: shared by the split's rule, or a fixed share per
/// state when `value_cache_bytes` set one.
fn value_caches(split: &Split, per_state: Option<usize>) -> ValueCaches {
    match per_state {
        Some(bytes) => ValueCaches::per_state(bytes),
        None => ValueCaches::shared(split.value_caches_total, split.value_cache),
    }
}

/// Links (or, across file systems, copies) every file of `files` into the new directory `dir`.
/// Opens the instance in `dir` with its default column family named, so that
/// [`DB::cf_handle`] finds it for the reads of many keys (`batched_multi_get_cf`) and it keeps
/// `options` (a plain `open_cf` would give the family default options).
fn open_db(options: &Options, dir: &Path) -> Result<DB, rocksdb::Error> {
    let family =
        rocksdb::ColumnFamilyDescriptor::new(rocksdb::DEFAULT_COLUMN_FAMILY_NAME, options.clone());
    DB::open_cf_descriptors(options, dir, [family])
}

fn link_files(files: &StoreFiles, dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for (name, _) in &files.files {
        let (from, to) = (files.dir.join(name), dir.join(name));
        if std::fs::hard_link(&from, &to).is_err() {
            std::fs::copy(&from, &to)
                .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))?;
        }
    }
    Ok(())
}

/// Copies the entries of key groups `groups` from the RocksDB instance in `dir` into `into`.
fn copy_range(dir: &Path, into: &RocksDbStore, groups: &Range<usize>) -> Result<(), String> {
    let db = DB::open_for_read_only(&Options::default(), dir, false)
        .map_err(|e| format!("opening {} to copy from: {e}", dir.display()))?;
    let (start, end) = crate::store::group_bounds(groups);
    let mut read = rocksdb::ReadOptions::default();
    read.set_iterate_upper_bound(end);
    read.fill_cache(false);
    let mut it = db.raw_iterator_opt(read);
    it.seek(start);
    let mut batch = Vec::new();
    while it.valid() {
        if let (Some(k), Some(v)) = (it.key(), it.value()) {
            batch.push((k.to_vec(), Some(v.to_vec())));
        }
        if batch.len() >= 4096 {
            into.write(std::mem::take(&mut batch))
                .map_err(|e| e.to_string())?;
        }
        it.next();
    }
    it.status()
        .map_err(|e| format!("reading {}: {e}", dir.display()))?;
    if !batch.is_empty() {
        into.write(batch).map_err(|e| e.to_string())?;
    }
    Ok(())
}
