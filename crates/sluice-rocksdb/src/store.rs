//! [`RocksDbStore`]: one RocksDB instance in its own directory, the [`KeyedStore`] of one
//! operator subtask. Writes skip the write-ahead log (checkpoints make state durable, as in
//! Flink); dropping the store closes the instance and removes its directory.

use crate::write_buffers::WriteBufferShare;
use rocksdb::checkpoint::Checkpoint;
use rocksdb::perf::{PerfContext, PerfMetric, PerfStatsLevel};
use rocksdb::{DB, ReadOptions, WriteBatch, WriteOptions};
use sluice_core::CheckpointId;
use sluice_runtime::state::{
    Expiry, KeyedStore, SharedFile, StoreError, StoreFiles, StoreHandle, StoreScope, StoreStats,
    StoreWrite, UploadAhead,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The store of one operator subtask.
pub(crate) struct RocksDbStore {
    /// `None` only while dropping.
    db: Option<Arc<DB>>,
    dir: PathBuf,
    /// `"operator (subtask i)"`, for errors.
    operator: String,
    write: WriteOptions,
    /// Blocks its reads found in the block cache and read from its files.
    blocks: Arc<BlockCounts>,
    /// Point reads served.
    reads: AtomicU64,
    /// Helper threads that read parts of a large `get_many` beside the caller.
    readers: Option<Arc<rayon::ThreadPool>>,
    /// The key groups of its subtask.
    key_groups: Range<usize>,
    /// With incremental checkpoints: where its checkpoints go and what it uploaded.
    incremental: Option<Incremental>,
    /// Its share of the backend's write buffers.
    buffers: WriteBufferShare,
    /// Which of its states expire, for its compactions' filter (`expiry.rs`).
    expiry: Arc<Expiry>,
}

/// What an incremental store knows of its checkpoints.
#[derive(Debug)]
pub(crate) struct Incremental {
    /// Where its checkpoints (hard links) go; checkpoint storage's persistence removes them
    /// when their checkpoint is retired.
    pub(crate) staging: PathBuf,
    /// Names this store's new table files in the shared area apart from every other store's.
    pub(crate) uid: String,
    /// Table files checkpoint storage holds, by name: their keys.
    pub(crate) confirmed: Mutex<BTreeMap<String, String>>,
    /// Table files a failover's restore linked from a checkpoint in memory, by name: their keys
    /// in checkpoint storage, which most likely holds them still. A checkpoint refers to them
    /// and writes only those storage lacks; once one completes they are confirmed.
    pub(crate) restored: Mutex<BTreeMap<String, String>>,
    /// The table files each checkpoint in flight named, by checkpoint.
    pub(crate) pending: Mutex<BTreeMap<CheckpointId, Vec<(String, String)>>>,
    /// Table files uploaded ahead of the checkpoint that will take them. Locks are taken in
    /// the order `ahead`, `pending`, `confirmed`, `restored`.
    pub(crate) ahead: Mutex<Ahead>,
}

/// What a store uploaded ahead of its checkpoints.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    /// In checkpoint storage, taken by no completed checkpoint yet: name to key.
    done: BTreeMap<String, String>,
    /// Being uploaded.
    started: BTreeSet<String>,
    /// Checkpoint snapshots being taken. While any is, no file is given as an orphan: one a
    /// snapshot links may be compacted away before the snapshot records it as pending.
    snapshots: usize,
}

/// A checkpoint's snapshot being taken (counted in [`Ahead::snapshots`] while it lives). The
/// snapshot holds no lock while RocksDB flushes and links its files, so uploads ahead go on
/// meanwhile: a merge that ends during the flush starts its upload ahead, and the checkpoint
/// that lists its output joins that upload instead of writing the file itself.
struct Snapshotting<'a>(&'a Mutex<Ahead>);

impl<'a> Snapshotting<'a> {
    fn begin(ahead: &'a Mutex<Ahead>) -> Self {
        sluice_core::sync::lock(ahead).snapshots += 1;
        Snapshotting(ahead)
    }
}

impl Drop for Snapshotting<'_> {
    fn drop(&mut self) {
        let mut ahead = sluice_core::sync::lock(self.0);
        ahead.snapshots = ahead.snapshots.saturating_sub(1);
    }
}

impl Incremental {
    /// Where the links of uploads ahead go.
    fn ahead_dir(&self) -> PathBuf {
        self.staging.join(format!("{}-ahead", self.uid))
    }

    /// The key under which this store writes its table file `name` into the shared area.
    fn key_of(&self, name: &str) -> String {
        format!("{}-{name}", self.uid)
    }
}

impl RocksDbStore {
    pub(crate) fn new(
        db: DB,
        dir: PathBuf,
        scope: &StoreScope,
        incremental: Option<Incremental>,
        readers: Option<Arc<rayon::ThreadPool>>,
        buffers: WriteBufferShare,
        expiry: Arc<Expiry>,
    ) -> Self {
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        RocksDbStore {
            db: Some(Arc::new(db)),
            dir,
            operator: scope.describe(),
            write,
            blocks: Arc::default(),
            reads: AtomicU64::new(0),
            readers,
            key_groups: scope.key_groups(),
            incremental,
            buffers,
            expiry,
        }
    }

    /// Compacts all of the store into one sorted run now (its memtable first), for tests.
    #[cfg(test)]
    pub(crate) fn compact_all(&self) -> Result<(), StoreError> {
        self.db()?.compact_range::<&[u8], &[u8]>(None, None);
        Ok(())
    }

    fn db(&self) -> Result<&DB, StoreError> {
        self.db
            .as_deref()
            .ok_or_else(|| self.io("reach", "the store is closed".into()))
    }

    fn io(&self, action: &'static str, message: String) -> StoreError {
        StoreError::Io {
            backend: "rocksdb".into(),
            operator: self.operator.clone(),
            action,
            message,
        }
    }

    fn int_property(&self, name: &str) -> u64 {
        self.db
            .as_ref()
            .and_then(|db| db.property_int_value(name).ok().flatten())
            .unwrap_or(0)
    }

    /// A text property of RocksDB's; empty when the store is closed or RocksDB has none.
    fn str_property(&self, name: &str) -> String {
        self.db
            .as_ref()
            .and_then(|db| db.property_value(name).ok().flatten())
            .unwrap_or_default()
    }
}

impl RocksDbStore {
    /// Records that checkpoint storage holds the table files `shared` (name, key) already, and
    /// most likely the files `restored` (a failover's restore from a checkpoint in memory).
    pub(crate) fn seed_shared(&self, shared: &[(String, String)], restored: &[(String, String)]) {
        if let Some(inc) = &self.incremental {
            sluice_core::sync::lock(&inc.confirmed).extend(shared.iter().cloned());
            sluice_core::sync::lock(&inc.restored).extend(restored.iter().cloned());
        }
    }

    /// [`KeyedStore::snapshot_files`], running `between` after RocksDB linked the files and
    /// before they are classified (tests interleave uploads ahead and compactions there).
    fn snapshot_files_then(
        &self,
        checkpoint: CheckpointId,
        between: impl FnOnce(),
    ) -> Result<Option<StoreHandle>, StoreError> {
        let Some(inc) = &self.incremental else {
            return Ok(None);
        };
        // Lives until the checkpoint's files are recorded as pending, so that no file it
        // takes can be found an orphan in between (see `take_orphans`).
        let _snapshotting = Snapshotting::begin(&inc.ahead);
        let dir = inc.staging.join(format!("{}-chk{}", inc.uid, checkpoint.0));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| self.io("checkpoint", format!("clearing {}: {e}", dir.display())))?;
        }
        let Some(files) = self.checkpoint_files(&dir)? else {
            return Ok(None);
        };
        between();
        // Taken after the flush: a file uploaded ahead meanwhile is known as such.
        let ahead = sluice_core::sync::lock(&inc.ahead);
        let confirmed = sluice_core::sync::lock(&inc.confirmed);
        let restored = sluice_core::sync::lock(&inc.restored);
        let (mut shared, mut private, mut named) = (Vec::new(), Vec::new(), Vec::new());
        for (name, length) in files.files {
            if name.ends_with(".sst") {
                let known = confirmed.get(&name).or_else(|| ahead.done.get(&name));
                // Restored files are never uploaded ahead (the store is seeded before its
                // uploads ahead start), so a file is at most one of known, restored or ahead.
                let likely = restored.get(&name).filter(|_| known.is_none());
                let key = known
                    .or(likely)
                    .cloned()
                    .unwrap_or_else(|| inc.key_of(&name));
                named.push((name.clone(), key.clone()));
                shared.push(SharedFile {
                    ahead: known.is_none() && ahead.started.contains(&name),
                    restored: likely.is_some(),
                    name,
                    key,
                    length,
                    uploaded: known.is_some(),
                });
            } else {
                let path = dir.join(&name);
                let bytes = std::fs::read(&path).map_err(|e| {
                    self.io("checkpoint", format!("reading {}: {e}", path.display()))
                })?;
                private.push((name, bytes));
            }
        }
        drop((confirmed, restored));
        sluice_core::sync::lock(&inc.pending).insert(checkpoint, named);
        drop(ahead);
        Ok(Some(StoreHandle {
            backend: "rocksdb".into(),
            key_groups: self.key_groups.clone(),
            shared,
            private,
            local: Some(dir),
            fetched: None,
        }))
    }

    /// Deletes every entry outside key groups `groups` (after opening another subtask's files).
    pub(crate) fn keep_only(&self, groups: &Range<usize>) -> Result<(), StoreError> {
        let db = self.db()?;
        let (start, end) = group_bounds(groups);
        let mut batch = WriteBatch::default();
        batch.delete_range(&[][..], start.as_slice());
        batch.delete_range(end.as_slice(), &[0xFF, 0xFF, 0xFF][..]);
        db.write_opt(batch, &self.write)
            .map_err(|e| self.io("clip", e.to_string()))?;
        // Reclaim the space of what was dropped now rather than at some later compaction.
        db.compact_range(None::<&[u8]>, Some(start.as_slice()));
        db.compact_range(Some(end.as_slice()), None::<&[u8]>);
        Ok(())
    }
}

/// Hard-links `from` to `to`, or copies it where links do not work (another file system).
fn link_or_copy(from: &Path, to: &Path) -> std::io::Result<()> {
    match std::fs::hard_link(from, to) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(e),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(to)?;
            std::fs::hard_link(from, to)
        }
        Err(_) => std::fs::copy(from, to).map(|_| ()),
    }
}

/// The first key of key group `groups.start` and the first key after key group `groups.end - 1`.
pub(crate) fn group_bounds(groups: &Range<usize>) -> (Vec<u8>, Vec<u8>) {
    (
        (groups.start as u16).to_be_bytes().to_vec(),
        (groups.end as u16).to_be_bytes().to_vec(),
    )
}

impl RocksDbStore {
    /// Reads `keys` (sorted) with one `MultiGet`, calling `f` with each value in key order;
    /// the blocks read go into the block cache if `fill`.
    fn multi_get(
        &self,
        keys: &[Vec<u8>],
        fill: bool,
        f: &mut dyn FnMut(Option<&[u8]>),
    ) -> Result<(), StoreError> {
        multi_get(self.db()?, keys, fill, &self.blocks, f).map_err(|e| self.io("read", e))
    }

    /// Whether a batched read now fills the block cache (`budget::fill_block_cache`).
    fn fills_cache(&self) -> bool {
        self.buffers
            .fill_block_cache(self.int_property("rocksdb.total-sst-files-size"))
    }
}

/// Reads `keys` (sorted) from `db` with one `MultiGet`, calling `f` with each value in key
/// order; the blocks read go into the block cache if `fill`.
fn multi_get(
    db: &DB,
    keys: &[Vec<u8>],
    fill: bool,
    blocks: &BlockCounts,
    f: &mut dyn FnMut(Option<&[u8]>),
) -> Result<(), String> {
    let cf = db
        .cf_handle(rocksdb::DEFAULT_COLUMN_FAMILY_NAME)
        .ok_or_else(|| "the default column family is missing".to_string())?;
    let mut read = rocksdb::ReadOptions::default();
    read.fill_cache(fill);
    // The keys come sorted: RocksDB then skips sorting them again.
    let values = blocks.count(|| db.batched_multi_get_cf_opt(cf, keys, true, &read));
    for value in values {
        f(value.map_err(|e| e.to_string())?.as_deref());
    }
    Ok(())
}

/// The values of one chunk of keys as a helper read them (copied out of RocksDB).
type ChunkRead = Result<Vec<Option<Vec<u8>>>, String>;

/// Keys read in chunks of this many by whichever thread is free.
const CHUNK: usize = 64;

/// A large read shared by the task's thread and the helper threads: each takes the next chunk
/// of keys while any is left, so a helper busy elsewhere only means the task's thread reads
/// more itself, and the task waits only for chunks a helper has started.
struct SharedRead {
    /// Whose chunks; a helper that takes a chunk finds it alive, as the reader waits for it.
    db: std::sync::Weak<DB>,
    keys: Vec<Vec<u8>>,
    /// Whether the blocks read go into the block cache.
    fill: bool,
    /// The store's count of the blocks read.
    blocks: Arc<BlockCounts>,
    /// The next chunk to take.
    next: std::sync::atomic::AtomicUsize,
    /// What helpers read, by chunk.
    done: Mutex<Vec<Option<ChunkRead>>>,
    ready: std::sync::Condvar,
}

impl SharedRead {
    fn chunks(&self) -> usize {
        self.keys.len().div_ceil(CHUNK)
    }

    /// Takes the next chunk: its first key's index and its keys.
    fn take(&self) -> Option<(usize, usize, &[Vec<u8>])> {
        let c = self.next.fetch_add(1, Ordering::Relaxed);
        let start = c.checked_mul(CHUNK).filter(|s| *s < self.keys.len())?;
        let end = (start + CHUNK).min(self.keys.len());
        Some((c, start, &self.keys[start..end]))
    }

    /// A helper's part: reads chunks while any is left.
    fn help(&self) {
        while let Some((c, _, keys)) = self.take() {
            let read = match self.db.upgrade() {
                Some(db) => {
                    let mut values = Vec::with_capacity(keys.len());
                    multi_get(&db, keys, self.fill, &self.blocks, &mut |v| {
                        values.push(v.map(<[u8]>::to_vec))
                    })
                    .map(|()| values)
                }
                None => Err("the store is closed".to_string()),
            };
            if let Some(slot) = sluice_core::sync::lock(&self.done).get_mut(c) {
                *slot = Some(read);
            }
            self.ready.notify_all();
        }
    }

    /// Waits for chunk `c`, which a helper took.
    fn wait(&self, c: usize) -> ChunkRead {
        let mut done = sluice_core::sync::lock(&self.done);
        loop {
            match done.get_mut(c).map(Option::take) {
                Some(Some(read)) => return read,
                Some(None) => {
                    done = self
                        .ready
                        .wait(done)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                None => return Err(format!("chunk {c} of a shared read is missing")),
            }
        }
    }
}

impl fmt::Debug for RocksDbStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RocksDbStore")
            .field("dir", &self.dir)
            .field("operator", &self.operator)
            .finish()
    }
}

impl KeyedStore for RocksDbStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let db = self.db()?;
        self.blocks
            .count(|| db.get_pinned(key))
            .map(|v| v.map(|v| v.to_vec()))
            .map_err(|e| self.io("read", e.to_string()))
    }

    fn get_many(
        &self,
        keys: &[Vec<u8>],
        f: &mut dyn FnMut(usize, Option<&[u8]>),
    ) -> Result<(), StoreError> {
        self.reads.fetch_add(keys.len() as u64, Ordering::Relaxed);
        let fill = self.fills_cache();
        let pool = match &self.readers {
            // Fewer than two chunks stay on the caller's thread: handing one to a helper would
            // cost about what it saves.
            Some(pool) if keys.len() >= 2 * CHUNK => pool,
            _ => {
                let mut i = 0;
                return self.multi_get(keys, fill, &mut |v| {
                    f(i, v);
                    i += 1;
                });
            }
        };
        // The helpers take chunks only while they are free (see `SharedRead`).
        let Some(db) = self.db.as_ref() else {
            return Err(self.io("reach", "the store is closed".into()));
        };
        let shared = Arc::new(SharedRead {
            db: Arc::downgrade(db),
            keys: keys.to_vec(),
            fill,
            blocks: self.blocks.clone(),
            next: Default::default(),
            done: Mutex::new(vec![None; keys.len().div_ceil(CHUNK)]),
            ready: Default::default(),
        });
        for _ in 0..pool.current_num_threads() {
            let shared = shared.clone();
            pool.spawn(move || shared.help());
        }
        let mut mine = vec![false; shared.chunks()];
        while let Some((c, start, chunk)) = shared.take() {
            mine[c] = true;
            let mut i = start;
            self.multi_get(chunk, fill, &mut |v| {
                f(i, v);
                i += 1;
            })?;
        }
        for (c, _) in mine.iter().enumerate().filter(|(_, m)| !**m) {
            let values = shared.wait(c).map_err(|e| self.io("read", e))?;
            for (j, v) in values.iter().enumerate() {
                f(c * CHUNK + j, v.as_deref());
            }
        }
        Ok(())
    }

    fn write(&self, batch: Vec<StoreWrite>) -> Result<(), StoreError> {
        if let Some(bytes) = self.buffers.changed() {
            // A store opened or closed: this store's memtables take their new share.
            self.db()?
                .set_options(&[("write_buffer_size", &bytes.to_string())])
                .map_err(|e| self.io("re-size its write buffers", e.to_string()))?;
        }
        let mut b = WriteBatch::default();
        for (k, v) in batch {
            match v {
                Some(v) => b.put(k, v),
                None => b.delete(k),
            }
        }
        self.db()?
            .write_opt(b, &self.write)
            .map_err(|e| self.io("write", e.to_string()))
    }

    fn scan(
        &self,
        start: &[u8],
        end: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StoreError> {
        let mut read = ReadOptions::default();
        read.set_iterate_upper_bound(end.to_vec());
        // A scan reads each block once: it should not push the hot blocks out of the cache.
        read.fill_cache(false);
        let mut it = self.db()?.raw_iterator_opt(read);
        it.seek(start);
        while it.valid() {
            let (Some(k), Some(v)) = (it.key(), it.value()) else {
                break;
            };
            if !f(k, v) {
                return Ok(());
            }
            it.next();
        }
        it.status().map_err(|e| self.io("scan", e.to_string()))
    }

    fn checkpoint_files(&self, dir: &Path) -> Result<Option<StoreFiles>, StoreError> {
        let db = self.db()?;
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(|e| {
                self.io("checkpoint", format!("creating {}: {e}", parent.display()))
            })?;
        }
        // Flushes the memtables, then hard-links the table files and copies the small ones.
        Checkpoint::new(db)
            .and_then(|c| c.create_checkpoint(dir))
            .map_err(|e| self.io("checkpoint", format!("into {}: {e}", dir.display())))?;
        let mut files = Vec::new();
        let entries = std::fs::read_dir(dir)
            .map_err(|e| self.io("checkpoint", format!("listing {}: {e}", dir.display())))?;
        for e in entries {
            let e = e.map_err(|e| self.io("checkpoint", e.to_string()))?;
            let len = e
                .metadata()
                .map_err(|e| self.io("checkpoint", e.to_string()))?
                .len();
            files.push((e.file_name().to_string_lossy().into_owned(), len));
        }
        files.sort();
        Ok(Some(StoreFiles {
            dir: dir.to_path_buf(),
            files,
            key_groups: self.key_groups.clone(),
            shared: Vec::new(),
            restored_shared: Vec::new(),
        }))
    }

    fn incremental(&self) -> bool {
        self.incremental.is_some()
    }

    fn snapshot_files(&self, checkpoint: CheckpointId) -> Result<Option<StoreHandle>, StoreError> {
        self.snapshot_files_then(checkpoint, || {})
    }

    fn checkpoint_complete(&self, checkpoint: CheckpointId) {
        let Some(inc) = &self.incremental else {
            return;
        };
        let mut ahead = sluice_core::sync::lock(&inc.ahead);
        let mut pending = sluice_core::sync::lock(&inc.pending);
        if let Some(named) = pending.remove(&checkpoint) {
            let mut restored = sluice_core::sync::lock(&inc.restored);
            for (name, _) in &named {
                // Taken by a completed checkpoint: retention decides when it goes.
                ahead.done.remove(name);
                restored.remove(name);
            }
            drop(restored);
            sluice_core::sync::lock(&inc.confirmed).extend(named);
        }
        pending.retain(|id, _| *id > checkpoint);
    }

    fn files_to_upload_ahead(&self) -> Result<Vec<UploadAhead>, StoreError> {
        let Some(inc) = &self.incremental else {
            return Ok(Vec::new());
        };
        let live = self
            .db()?
            .live_files()
            .map_err(|e| self.io("list files", e.to_string()))?;
        let mut ahead = sluice_core::sync::lock(&inc.ahead);
        // A checkpoint in flight that names a file uploads it (or joins its upload).
        let pending = sluice_core::sync::lock(&inc.pending);
        let taken = named_in_flight(&pending);
        let confirmed = sluice_core::sync::lock(&inc.confirmed);
        // A restored file goes with the next checkpoint, which writes it only if storage lacks
        // it; uploading it ahead would write it again under a new key.
        let restored = sluice_core::sync::lock(&inc.restored);
        let dir = inc.ahead_dir();
        let mut out = Vec::new();
        for f in live {
            let name = f.name.trim_start_matches('/').to_string();
            if !name.ends_with(".sst")
                || confirmed.contains_key(&name)
                || restored.contains_key(&name)
                || taken.contains(&name)
                || ahead.done.contains_key(&name)
                || ahead.started.contains(&name)
            {
                continue;
            }
            if out.is_empty() {
                std::fs::create_dir_all(&dir).map_err(|e| {
                    self.io("upload ahead", format!("creating {}: {e}", dir.display()))
                })?;
            }
            let link = dir.join(&name);
            match link_or_copy(&self.dir.join(&name), &link) {
                Ok(()) => {}
                // Compacted away since it was listed: nothing to upload.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(self.io("upload ahead", format!("linking {}: {e}", link.display())));
                }
            }
            ahead.started.insert(name.clone());
            out.push(UploadAhead {
                key: inc.key_of(&name),
                name,
                path: link,
            });
        }
        Ok(out)
    }

    fn uploaded_ahead(&self, done: &[String], failed: &[String]) {
        let Some(inc) = &self.incremental else {
            return;
        };
        let mut ahead = sluice_core::sync::lock(&inc.ahead);
        let dir = inc.ahead_dir();
        for name in done.iter().chain(failed) {
            ahead.started.remove(name);
            let _ = std::fs::remove_file(dir.join(name));
        }
        for name in done {
            ahead.done.insert(name.clone(), inc.key_of(name));
        }
    }

    fn take_orphans(&self) -> Result<Vec<String>, StoreError> {
        let Some(inc) = &self.incremental else {
            return Ok(Vec::new());
        };
        let mut ahead = sluice_core::sync::lock(&inc.ahead);
        if ahead.done.is_empty() || ahead.snapshots > 0 {
            return Ok(Vec::new());
        }
        // Listed after `ahead` is held: a checkpoint cannot take a file in between.
        let live: BTreeSet<String> = self
            .db()?
            .live_files()
            .map_err(|e| self.io("list files", e.to_string()))?
            .into_iter()
            .map(|f| f.name.trim_start_matches('/').to_string())
            .collect();
        let pending = sluice_core::sync::lock(&inc.pending);
        let taken = named_in_flight(&pending);
        let orphans: Vec<String> = ahead
            .done
            .keys()
            .filter(|n| !live.contains(*n) && !taken.contains(n))
            .cloned()
            .collect();
        drop(pending);
        Ok(orphans
            .into_iter()
            .filter_map(|n| ahead.done.remove(&n))
            .collect())
    }

    fn expiry(&self) -> Option<Arc<Expiry>> {
        Some(self.expiry.clone())
    }

    fn stats(&self) -> StoreStats {
        let cfstats = self.str_property("rocksdb.cfstats-no-file-histogram");
        StoreStats {
            memory_bytes: self.int_property("rocksdb.cur-size-all-mem-tables")
                + self.int_property("rocksdb.estimate-table-readers-mem"),
            disk_bytes: self.int_property("rocksdb.total-sst-files-size"),
            cache_hits: self.blocks.hits.load(Ordering::Relaxed),
            cache_misses: self.blocks.reads.load(Ordering::Relaxed),
            compactions: compactions(&cfstats),
        }
    }
}

impl Drop for RocksDbStore {
    fn drop(&mut self) {
        // Close the instance before its files go.
        drop(self.db.take());
        if let Some(inc) = &self.incremental {
            let _ = std::fs::remove_dir_all(inc.ahead_dir());
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not remove a state store");
        }
    }
}

/// The table files the checkpoints in flight name (`Incremental::pending`).
fn named_in_flight(pending: &BTreeMap<CheckpointId, Vec<(String, String)>>) -> BTreeSet<&String> {
    pending.values().flatten().map(|(n, _)| n).collect()
}

/// Blocks a store's reads found in the block cache (`hits`) and read from its files (`reads`),
/// counted on each reading thread by RocksDB's per-thread perf context at its counting level.
/// The stores do not turn on RocksDB's statistics: at their default level (the only one the C
/// API of RocksDB 7.8 offers) they time every file read and every `MultiGet` into histograms,
/// which cost a sixth of the updates per second at 22 M keys (BENCHMARKS.md, "Statistics off,
/// larger metadata blocks").
#[derive(Debug, Default)]
struct BlockCounts {
    hits: AtomicU64,
    reads: AtomicU64,
}

impl BlockCounts {
    /// Runs `read` (RocksDB reads on this thread), counting the blocks it touched.
    fn count<R>(&self, read: impl FnOnce() -> R) -> R {
        // The level is per thread; setting it is a thread-local store.
        rocksdb::perf::set_perf_stats(PerfStatsLevel::EnableCount);
        let mut perf = PerfContext::default();
        perf.reset();
        let result = read();
        self.hits.fetch_add(
            perf.metric(PerfMetric::BlockCacheHitCount),
            Ordering::Relaxed,
        );
        self.reads
            .fetch_add(perf.metric(PerfMetric::BlockReadCount), Ordering::Relaxed);
        result
    }
}

/// Compactions RocksDB ran, from its compaction statistics by thread pool
/// (`rocksdb.cfstats-no-file-histogram`): the `Comp(cnt)` column, sixth from the end, of the
/// rows of the pools compactions run in (`Low`, `Bottom`); memtable flushes run in `High`.
fn compactions(cfstats: &str) -> u64 {
    cfstats
        .lines()
        .filter_map(|line| {
            let columns: Vec<&str> = line.split_whitespace().collect();
            if !matches!(columns.first(), Some(&("Low" | "Bottom"))) {
                return None;
            }
            columns
                .get(columns.len().checked_sub(6)?)?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RocksDbStateBackend;
    use sluice_core::NodeId;
    use sluice_runtime::state::StoreScope;

    fn incremental_store(dir: &Path) -> RocksDbStore {
        let scope = StoreScope {
            node: NodeId(1),
            operator_name: "ahead".into(),
            subtask: 0,
            attempt: 0,
            max_parallelism: 4,
            parallelism: 1,
        };
        let backend = RocksDbStateBackend::new(dir).incremental(true);
        let fresh = backend.fresh_dir(&scope).unwrap();
        backend.open_dir(&scope, fresh).unwrap()
    }

    /// Writes `n` keys from `from` and flushes them into a new table file.
    fn flushed(store: &RocksDbStore, from: u32, n: u32) {
        let batch = (from..from + n)
            .map(|i| {
                (
                    [&[0u8, 0][..], &i.to_be_bytes()].concat(),
                    Some(vec![7; 64]),
                )
            })
            .collect();
        store.write(batch).unwrap();
        store.db().unwrap().flush().unwrap();
    }

    /// Uploads ahead what the store offers, as the runtime's task does, returning the names.
    fn upload(store: &RocksDbStore) -> Vec<String> {
        let found = store.files_to_upload_ahead().unwrap();
        for u in &found {
            assert!(u.path.exists(), "{u:?} is linked for the upload");
        }
        let names: Vec<String> = found.iter().map(|u| u.name.clone()).collect();
        store.uploaded_ahead(&names, &[]);
        for u in &found {
            assert!(!u.path.exists(), "{u:?}'s link went once uploaded");
        }
        names
    }

    /// Writes about `mib` MiB of fresh keys (from `from`) in batches of 64 KiB.
    fn fill(store: &RocksDbStore, from: u32, mib: u32) {
        let per_batch = 512u32;
        for b in 0..mib * 16 {
            let batch = (0..per_batch)
                .map(|i| {
                    let k = from + b * per_batch + i;
                    (
                        [&[0u8, 0][..], &k.to_be_bytes()].concat(),
                        Some(vec![7; 120]),
                    )
                })
                .collect();
            store.write(batch).unwrap();
        }
    }

    #[test]
    fn stores_share_the_write_buffer_budget_as_they_open_and_close() {
        const MIB: u64 = 1 << 20;
        let dir = tempfile::tempdir().unwrap();
        // 256 MiB: write buffers get 64 MiB in all, at most two of 16 MiB per store.
        let backend = RocksDbStateBackend::new(dir.path()).memory_budget(256 << 20);
        let stores: Vec<RocksDbStore> = (0..8)
            .map(|i| {
                let scope = StoreScope {
                    node: NodeId(1),
                    operator_name: "buffers".into(),
                    subtask: i,
                    attempt: 0,
                    max_parallelism: 8,
                    parallelism: 8,
                };
                let fresh = backend.fresh_dir(&scope).unwrap();
                backend.open_dir(&scope, fresh).unwrap()
            })
            .collect();
        // Eight stores: two write buffers of 4 MiB each. 10 MiB written into each store
        // flushes along the way, so no memtable holds much more than its 4 MiB.
        for (i, store) in stores.iter().enumerate() {
            fill(store, i as u32 * 1_000_000, 10);
            let active = store.int_property("rocksdb.cur-size-active-mem-table");
            assert!(
                active <= 6 * MIB,
                "store {i}: {active} bytes in its memtable"
            );
        }
        let mut stores = stores;
        let first = stores.remove(0);
        drop(stores);
        // Alone again: its write buffers grow back to 16 MiB, so 10 MiB stay in one memtable.
        first.db().unwrap().flush().unwrap();
        fill(&first, 50_000_000, 10);
        let active = first.int_property("rocksdb.cur-size-active-mem-table");
        assert!(active > 8 * MIB, "alone: {active} bytes in its memtable");
    }

    #[test]
    fn files_uploaded_ahead_are_taken_by_checkpoints_and_orphans_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let store = incremental_store(dir.path());
        flushed(&store, 0, 100);
        let first = upload(&store);
        assert_eq!(first.len(), 1);
        assert!(upload(&store).is_empty(), "nothing is offered twice");

        // A checkpoint takes the file uploaded ahead without uploading it again.
        let handle = store.snapshot_files(CheckpointId(1)).unwrap().unwrap();
        let taken = handle.shared.iter().find(|f| f.name == first[0]).unwrap();
        assert!(taken.uploaded, "{taken:?}");
        assert!(taken.key.ends_with(&first[0]));

        // A second file, uploaded ahead, then compacted away with the first before any
        // checkpoint took it: an orphan. The first is kept while checkpoint 1 is in flight.
        flushed(&store, 100, 100);
        let second = upload(&store);
        assert_eq!(second.len(), 1);
        store
            .db()
            .unwrap()
            .compact_range(None::<&[u8]>, None::<&[u8]>);
        let merged = upload(&store);
        assert_eq!(merged.len(), 1, "the compaction's output is offered");
        let orphans = store.take_orphans().unwrap();
        assert_eq!(orphans.len(), 1, "{orphans:?}");
        assert!(orphans[0].ends_with(&second[0]));
        assert!(
            store.take_orphans().unwrap().is_empty(),
            "an orphan is given once"
        );

        // Checkpoint 1 completed: its file is checkpoint storage's from now on (retention
        // removes it), not an orphan of the store's.
        store.checkpoint_complete(CheckpointId(1));
        assert!(store.take_orphans().unwrap().is_empty());
        let handle = store.snapshot_files(CheckpointId(2)).unwrap().unwrap();
        assert!(
            handle.shared.iter().all(|f| f.uploaded),
            "the compacted file was uploaded ahead: {handle:?}"
        );
    }

    #[test]
    fn uploads_ahead_go_on_while_a_snapshot_flushes_and_orphans_wait_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = incremental_store(dir.path());
        flushed(&store, 0, 100);
        let first = upload(&store);
        assert_eq!(first.len(), 1);
        flushed(&store, 100, 100);
        // While checkpoint 1's files are linked, before they are classified: the second file
        // (as a merge's output that ended during the flush) is uploaded ahead, then a
        // compaction removes both files. Neither is an orphan: the snapshot links them.
        let mut offered = Vec::new();
        let handle = store
            .snapshot_files_then(CheckpointId(1), || {
                offered = upload(&store);
                store
                    .db()
                    .unwrap()
                    .compact_range(None::<&[u8]>, None::<&[u8]>);
                assert!(
                    store.take_orphans().unwrap().is_empty(),
                    "no orphan while a snapshot is taken"
                );
            })
            .unwrap()
            .unwrap();
        assert_eq!(
            offered.len(),
            1,
            "the new file is offered during the snapshot"
        );
        assert_eq!(handle.shared.len(), 2, "{handle:?}");
        assert!(
            handle.shared.iter().all(|f| f.uploaded),
            "the checkpoint writes neither file itself: {handle:?}"
        );
        // Checkpoint 1 names both: still no orphan. Once it completed, they are checkpoint
        // storage's, and the compaction's output is offered.
        assert!(store.take_orphans().unwrap().is_empty());
        store.checkpoint_complete(CheckpointId(1));
        assert!(store.take_orphans().unwrap().is_empty());
        assert_eq!(upload(&store).len(), 1);
    }

    #[test]
    fn a_snapshot_marks_the_files_whose_upload_ahead_is_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let store = incremental_store(dir.path());
        flushed(&store, 0, 100);
        let started = store.files_to_upload_ahead().unwrap();
        assert_eq!(started.len(), 1);
        flushed(&store, 100, 100);
        // Checkpoint 1 lists both files while the first one's upload ahead runs: it is to join
        // that upload (or take its result), and to write the second itself.
        let handle = store.snapshot_files(CheckpointId(1)).unwrap().unwrap();
        let flags: Vec<(bool, bool)> = handle
            .shared
            .iter()
            .map(|f| (f.name == started[0].name, f.ahead))
            .collect();
        assert_eq!(flags.len(), 2, "{handle:?}");
        assert!(
            flags.iter().all(|(in_flight, ahead)| in_flight == ahead),
            "{handle:?}"
        );
        assert!(handle.shared.iter().all(|f| !f.uploaded), "{handle:?}");
        assert_eq!(
            handle.shared.iter().find(|f| f.ahead).map(|f| &f.key),
            Some(&started[0].key),
            "the checkpoint writes it under the key of the upload ahead"
        );
    }

    #[test]
    fn a_file_a_checkpoint_in_flight_names_is_not_offered_ahead() {
        let dir = tempfile::tempdir().unwrap();
        let store = incremental_store(dir.path());
        flushed(&store, 0, 100);
        // Checkpoint 1 lists the file before any upload ahead: the checkpoint uploads it.
        let handle = store.snapshot_files(CheckpointId(1)).unwrap().unwrap();
        assert!(handle.shared.iter().all(|f| !f.uploaded), "{handle:?}");
        assert!(upload(&store).is_empty(), "checkpoint 1 uploads it");
        store.checkpoint_complete(CheckpointId(1));
        assert!(upload(&store).is_empty(), "checkpoint storage holds it");
        flushed(&store, 100, 100);
        assert_eq!(upload(&store).len(), 1, "a new file is offered");
    }

    #[test]
    fn stats_count_the_blocks_reads_touch_and_the_compactions_run() {
        let dir = tempfile::tempdir().unwrap();
        let store = incremental_store(dir.path());
        assert_eq!(
            (store.stats().cache_hits, store.stats().cache_misses),
            (0, 0)
        );
        flushed(&store, 0, 2_000);
        flushed(&store, 1_000, 2_000);
        let key = |i: u32| [&[0u8, 0][..], &i.to_be_bytes()].concat();
        let keys: Vec<Vec<u8>> = (0..3_000).step_by(7).map(key).collect();
        let read_all = || {
            let mut found = 0;
            store
                .get_many(&keys, &mut |_, v| found += usize::from(v.is_some()))
                .unwrap();
            assert_eq!(found, keys.len());
        };
        read_all();
        let first = store.stats();
        assert!(first.cache_misses > 0, "the first reads go to the files");
        read_all();
        assert!(
            store.stats().cache_hits > first.cache_hits,
            "the same blocks again come from the block cache"
        );
        assert_eq!(store.stats().compactions, 0, "no merge ran yet");
        let db = store.db().unwrap();
        db.compact_range(None::<&[u8]>, None::<&[u8]>);
        assert!(store.stats().compactions >= 1, "{:?}", store.stats());
    }

    #[test]
    fn compactions_are_read_from_the_statistics_by_thread_pool() {
        let dump = "** Compaction Stats [default] **\n\
            Priority    Files   Size     Score Read(GB)  Rn(GB) Rnp1(GB) Write(GB) Wnew(GB) \
            Moved(GB) W-Amp Rd(MB/s) Wr(MB/s) Comp(sec) CompMergeCPU(sec) Comp(cnt) Avg(sec) \
            KeyIn KeyDrop Rblob(GB) Wblob(GB)\n\
            Low      0/0    0.00 KB   0.0      0.1     0.1      0.0       0.1      0.1       \
            0.0   0.0    21.0     20.2      3.86              3.50         3    1.287   2000K \
            5000       0.0       0.0\n\
            High      0/0    0.00 KB   0.0      0.0     0.0      0.0       0.1      0.1       \
            0.0   0.0     0.0     45.1      1.80              1.62        12    0.150       0 \
            0       0.0       0.0\n\
            Sum      3/0   12.00 MB   0.0      0.1     0.1      0.0       0.2      0.2       \
            0.0   1.0    10.0     30.0      5.66              5.12        15    0.377   2000K \
            5000       0.0       0.0\n";
        assert_eq!(super::compactions(dump), 3);
        assert_eq!(super::compactions(""), 0);
    }

    #[test]
    fn a_read_of_many_keys_answers_as_one_read_per_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = incremental_store(dir.path());
        // Some keys in a table file, some in the memtable, one deleted, some never written.
        flushed(&store, 0, 100);
        let key = |i: u32| [&[0u8, 0][..], &i.to_be_bytes()].concat();
        store
            .write(vec![(key(150), Some(vec![1, 2, 3])), (key(5), None)])
            .unwrap();
        let keys: Vec<Vec<u8>> = [0, 5, 99, 100, 150, 151, 7_000].map(key).to_vec();
        let mut many = vec![None; keys.len()];
        store
            .get_many(&keys, &mut |i, v| many[i] = Some(v.map(<[u8]>::to_vec)))
            .unwrap();
        let one: Vec<_> = keys.iter().map(|k| Some(store.get(k).unwrap())).collect();
        assert_eq!(many, one);
        assert_eq!(many[4], Some(Some(vec![1, 2, 3])));
        assert_eq!(many[1], Some(None), "deleted");
    }

    #[test]
    fn a_large_read_shared_with_helper_threads_answers_every_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = incremental_store(dir.path());
        assert!(store.readers.is_some(), "two read threads by default");
        flushed(&store, 0, 1_000);
        let key = |i: u32| [&[0u8, 0][..], &i.to_be_bytes()].concat();
        // Every other key of 0..1,200: 600 keys, the last 100 absent.
        let keys: Vec<Vec<u8>> = (0..1_200).step_by(2).map(key).collect();
        let mut seen = Vec::new();
        store
            .get_many(&keys, &mut |i, v| seen.push((i, v.map(<[u8]>::to_vec))))
            .unwrap();
        // Chunks come back as threads finish them.
        seen.sort();
        let want: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (i, store.get(k).unwrap()))
            .collect();
        assert_eq!(seen, want);
        assert_eq!(seen.iter().filter(|(_, v)| v.is_none()).count(), 100);
    }

    /// Thirty sorted runs, as a long merge lets flushes pile up: at RocksDB's own trigger (20)
    /// writes slow down, and a checkpoint's flush, which waits while one more run would slow
    /// them, waits for the merge to end; at the store's (64) neither happens.
    #[test]
    fn sorted_runs_piling_up_behind_a_merge_do_not_slow_writes() {
        let dir = tempfile::tempdir().unwrap();
        let store = incremental_store(dir.path());
        let db = store.db().unwrap();
        db.set_options(&[("disable_auto_compactions", "true")])
            .unwrap();
        for i in 0..30 {
            flushed(&store, i * 10, 10);
        }
        assert_eq!(store.int_property("rocksdb.num-files-at-level0"), 30);
        // Merges on again, but none due before 31 runs, so that nothing merges the thirty
        // while the stall conditions, worked out as the options change, are read.
        db.set_options(&[
            ("disable_auto_compactions", "false"),
            ("level0_file_num_compaction_trigger", "31"),
        ])
        .unwrap();
        assert_eq!(
            store.int_property("rocksdb.actual-delayed-write-rate"),
            0,
            "writes slowed at 30 sorted runs"
        );
        assert_eq!(store.int_property("rocksdb.is-write-stopped"), 0);
        let handle = store.snapshot_files(CheckpointId(1)).unwrap().unwrap();
        assert!(!handle.shared.is_empty());
    }

    /// Opens a store on a 4 MiB budget (a 1 MiB block cache) holding `n` keys with 200-byte
    /// values that do not compress, flushed into table files; reads every other of the first
    /// 2,000 keys in one batch and returns by how much the block cache grew.
    fn cache_growth_of_a_batched_read(n: u32) -> usize {
        let dir = tempfile::tempdir().unwrap();
        let backend = RocksDbStateBackend::new(dir.path())
            .memory_budget(4 << 20)
            .read_threads(1);
        let scope = StoreScope {
            node: NodeId(1),
            operator_name: "fill".into(),
            subtask: 0,
            attempt: 0,
            max_parallelism: 4,
            parallelism: 1,
        };
        let store = backend
            .open_dir(&scope, backend.fresh_dir(&scope).unwrap())
            .unwrap();
        let key = |i: u32| [&[0u8, 0][..], &i.to_be_bytes()].concat();
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for chunk in (0..n).collect::<Vec<_>>().chunks(1_000) {
            let batch = chunk
                .iter()
                .map(|&i| {
                    let value = (0..25)
                        .flat_map(|_| {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            x.to_le_bytes()
                        })
                        .collect();
                    (key(i), Some(value))
                })
                .collect();
            store.write(batch).unwrap();
        }
        store.db().unwrap().flush().unwrap();
        let keys: Vec<Vec<u8>> = (0..2_000).step_by(2).map(key).collect();
        let before = backend.block_cache_usage();
        let mut found = 0;
        store
            .get_many(&keys, &mut |_, v| found += usize::from(v.is_some()))
            .unwrap();
        assert_eq!(found, 1_000);
        backend.block_cache_usage().saturating_sub(before)
    }

    /// Batched reads put the blocks they read into the block cache while the store's files are
    /// small beside it, and leave it alone once they are over four times its size.
    #[test]
    fn batched_reads_stop_filling_the_block_cache_once_the_files_outgrow_it() {
        // 2,000 keys: 400 KB of files beside a 1 MiB cache; the read touches about 100 blocks.
        let small = cache_growth_of_a_batched_read(2_000);
        assert!(small >= 200 << 10, "the cache grew by {small} bytes only");
        // 40,000 keys: 8 MB of files; filling, the same read would add about as much.
        let large = cache_growth_of_a_batched_read(40_000);
        assert!(large < 100 << 10, "the cache grew by {large} bytes");
    }
}
