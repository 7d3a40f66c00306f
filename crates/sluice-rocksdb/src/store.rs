//! [`RocksDbStore`]: one RocksDB instance in its own directory, the [`KeyedStore`] of one
//! operator subtask. Writes skip the write-ahead log (checkpoints make state durable, as in
//! Flink); dropping the store closes the instance and removes its directory.

use rocksdb::checkpoint::Checkpoint;
use rocksdb::{DB, Options, ReadOptions, WriteBatch, WriteOptions};
use sluice_core::CheckpointId;
use sluice_runtime::state::{
    KeyedStore, SharedFile, StoreError, StoreFiles, StoreHandle, StoreStats, StoreWrite,
};
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The store of one operator subtask.
pub(crate) struct RocksDbStore {
    /// `None` only while dropping.
    db: Option<DB>,
    dir: PathBuf,
    /// `"operator (subtask i)"`, for errors.
    operator: String,
    write: WriteOptions,
    /// The options it was opened with: their statistics count cache hits and compactions.
    options: Options,
    /// Point reads served.
    reads: AtomicU64,
    /// The key groups of its subtask.
    key_groups: Range<usize>,
    /// With incremental checkpoints: where its checkpoints go and what it uploaded.
    incremental: Option<Incremental>,
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
    /// The table files each checkpoint in flight named, by checkpoint.
    pub(crate) pending: Mutex<BTreeMap<CheckpointId, Vec<(String, String)>>>,
}

impl RocksDbStore {
    pub(crate) fn new(
        db: DB,
        options: Options,
        dir: PathBuf,
        operator: String,
        key_groups: Range<usize>,
        incremental: Option<Incremental>,
    ) -> Self {
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        RocksDbStore {
            db: Some(db),
            dir,
            operator,
            write,
            options,
            reads: AtomicU64::new(0),
            key_groups,
            incremental,
        }
    }

    fn db(&self) -> Result<&DB, StoreError> {
        self.db
            .as_ref()
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
}

impl RocksDbStore {
    /// Records that checkpoint storage holds the table files `shared` (name, key) already.
    pub(crate) fn seed_shared(&self, shared: &[(String, String)]) {
        if let Some(inc) = &self.incremental {
            sluice_core::sync::lock(&inc.confirmed).extend(shared.iter().cloned());
        }
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

/// The first key of key group `groups.start` and the first key after key group `groups.end - 1`.
pub(crate) fn group_bounds(groups: &Range<usize>) -> (Vec<u8>, Vec<u8>) {
    (
        (groups.start as u16).to_be_bytes().to_vec(),
        (groups.end as u16).to_be_bytes().to_vec(),
    )
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
        self.db()?
            .get_pinned(key)
            .map(|v| v.map(|v| v.to_vec()))
            .map_err(|e| self.io("read", e.to_string()))
    }

    fn write(&self, batch: Vec<StoreWrite>) -> Result<(), StoreError> {
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
        }))
    }

    fn incremental(&self) -> bool {
        self.incremental.is_some()
    }

    fn snapshot_files(&self, checkpoint: CheckpointId) -> Result<Option<StoreHandle>, StoreError> {
        let Some(inc) = &self.incremental else {
            return Ok(None);
        };
        let dir = inc.staging.join(format!("{}-chk{}", inc.uid, checkpoint.0));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| self.io("checkpoint", format!("clearing {}: {e}", dir.display())))?;
        }
        let Some(files) = self.checkpoint_files(&dir)? else {
            return Ok(None);
        };
        let confirmed = sluice_core::sync::lock(&inc.confirmed);
        let (mut shared, mut private, mut named) = (Vec::new(), Vec::new(), Vec::new());
        for (name, length) in files.files {
            if name.ends_with(".sst") {
                let known = confirmed.get(&name);
                let key = known
                    .cloned()
                    .unwrap_or_else(|| format!("{}-{name}", inc.uid));
                named.push((name.clone(), key.clone()));
                shared.push(SharedFile {
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
        drop(confirmed);
        sluice_core::sync::lock(&inc.pending).insert(checkpoint, named);
        Ok(Some(StoreHandle {
            backend: "rocksdb".into(),
            key_groups: self.key_groups.clone(),
            shared,
            private,
            local: Some(dir),
            fetched: false,
        }))
    }

    fn checkpoint_complete(&self, checkpoint: CheckpointId) {
        let Some(inc) = &self.incremental else {
            return;
        };
        let mut pending = sluice_core::sync::lock(&inc.pending);
        if let Some(named) = pending.remove(&checkpoint) {
            sluice_core::sync::lock(&inc.confirmed).extend(named);
        }
        pending.retain(|id, _| *id > checkpoint);
    }

    fn stats(&self) -> StoreStats {
        let statistics = self.options.get_statistics().unwrap_or_default();
        StoreStats {
            memory_bytes: self.int_property("rocksdb.cur-size-all-mem-tables")
                + self.int_property("rocksdb.estimate-table-readers-mem"),
            disk_bytes: self.int_property("rocksdb.total-sst-files-size"),
            cache_hits: ticker(&statistics, "rocksdb.block.cache.hit"),
            cache_misses: ticker(&statistics, "rocksdb.block.cache.miss"),
            compactions: ticker(&statistics, "rocksdb.compaction.times.micros"),
        }
    }
}

impl Drop for RocksDbStore {
    fn drop(&mut self) {
        // Close the instance before its files go.
        drop(self.db.take());
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "could not remove a state store");
        }
    }
}

/// The count of ticker or histogram `name` in RocksDB's statistics dump (`name COUNT : 17`,
/// `name P50 : 1.0 ... COUNT : 3 SUM : 9`).
fn ticker(statistics: &str, name: &str) -> u64 {
    statistics
        .lines()
        .find_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix(' ')?;
            let (_, count) = rest.split_once("COUNT : ")?;
            count.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn tickers_are_read_from_the_statistics_dump() {
        let dump = "rocksdb.block.cache.miss COUNT : 12\nrocksdb.block.cache.hit COUNT : 30\n\
                    rocksdb.compaction.times.micros P50 : 1.5 P99 : 2.0 COUNT : 4 SUM : 7\n";
        assert_eq!(super::ticker(dump, "rocksdb.compaction.times.micros"), 4);
        assert_eq!(super::ticker(dump, "rocksdb.block.cache.hit"), 30);
        assert_eq!(super::ticker(dump, "rocksdb.block.cache.miss"), 12);
        assert_eq!(super::ticker(dump, "rocksdb.nothing"), 0);
    }
}
