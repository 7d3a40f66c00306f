//! The layout of checkpoints over any [`BlobStore`], written once: `chk-N/` with one framed
//! file per operator subtask and per coordinator, `chk-N/_metadata` put last; verification on
//! read back (framing, then the metadata's lengths and checksums); newest-valid fallback; and
//! retention. [`BlobCheckpointStorage`] is the [`CheckpointStorage`] every backend gets from it.

use super::blob::{BlobStore, join_key};
use super::format::{self, FileKind, METADATA_FILE};
use super::verify::{assemble, check_listed, decode_metadata};
use super::{
    CheckpointMetadata, CheckpointStorage, CoordinatorStateHandle, RestoreOutcome,
    RestoredCheckpoint, SkippedCheckpoint, StateFileHandle, StorageError,
};
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use sluice_core::{CheckpointId, NodeId, SubtaskIndex, codec};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::num::NonZeroUsize;

/// How many blobs of one checkpoint are read or deleted at a time.
const CONCURRENT_REQUESTS: usize = 8;

/// The folder of shared files (the table files of keyed stores).
const SHARED_DIR: &str = "shared";

/// Checkpoints laid out in a [`BlobStore`]; see the [module documentation](super) for the
/// layout. [`LocalCheckpointStorage`](super::LocalCheckpointStorage) is this over the local
/// disk, and `sluice-object-store` wraps it over an object store.
///
/// ```
/// use sluice_core::{CheckpointId, NodeId};
/// use sluice_runtime::storage::{
///     BlobCheckpointStorage, BlobStore, CheckpointMetadata, CheckpointStorage,
///     MemoryBlobStore, OperatorInfo,
/// };
/// use std::num::NonZeroUsize;
///
/// futures::executor::block_on(async {
///     let storage = BlobCheckpointStorage::over(MemoryBlobStore::new(), NonZeroUsize::MIN);
///     let id = CheckpointId(1);
///     let file = storage.write_state(id, NodeId(0), 0, b"offset=42".to_vec()).await.unwrap();
///     let metadata = CheckpointMetadata {
///         job_fingerprint: "job-v1".into(),
///         checkpoint_id: id,
///         timestamp_ms: 0,
///         operators: vec![OperatorInfo { node: NodeId(0), parallelism: 1, max_parallelism: 128 }],
///         state_files: vec![file],
///         coordinator_states: vec![],
///         shared_files: vec![],
///     };
///     storage.complete(metadata).await.unwrap();
///     let mut keys = storage.blobs().list("").await.unwrap();
///     keys.sort();
///     assert_eq!(keys, ["chk-1/_metadata", "chk-1/node-0.subtask-0.state"]);
/// });
/// ```
#[derive(Clone, Debug)]
pub struct BlobCheckpointStorage<B> {
    blobs: B,
    retained: NonZeroUsize,
}

/// The blobs of one checkpoint found by a listing.
#[derive(Debug, Default)]
struct Listed {
    keys: Vec<String>,
    /// Whether its metadata is among them.
    complete: bool,
}

impl<B: BlobStore> BlobCheckpointStorage<B> {
    /// Checkpoints in `blobs`, keeping the newest `retained` completed ones. Does no I/O.
    pub fn over(blobs: B, retained: NonZeroUsize) -> Self {
        BlobCheckpointStorage { blobs, retained }
    }

    /// The blob store.
    pub fn blobs(&self) -> &B {
        &self.blobs
    }

    /// How many completed checkpoints are kept.
    pub fn retained(&self) -> NonZeroUsize {
        self.retained
    }

    /// Reads and verifies the checkpoint in the folder `dir` of the store (`""`: the store's
    /// root is one checkpoint directory), whatever the folder is called. Never falls back and
    /// removes nothing: a missing or damaged file, the metadata included, is the error, naming
    /// that file.
    pub async fn load_at(
        &self,
        dir: &str,
        job_fingerprint: &str,
    ) -> Result<RestoredCheckpoint, StorageError> {
        self.load_checkpoint(dir, None, job_fingerprint).await
    }

    /// Like [`latest_valid`](CheckpointStorage::latest_valid), but removes nothing: what a
    /// restore from a storage that is not the job's own does, so that an incomplete checkpoint
    /// is still there, and named as such, when it is restored by itself afterwards.
    pub async fn find_latest_valid(
        &self,
        job_fingerprint: &str,
    ) -> Result<RestoreOutcome, StorageError> {
        self.latest(job_fingerprint, false).await
    }

    /// Every checkpoint in the store with its blobs, by id (one listing). Keys that are not
    /// `chk-N/<file>` are not ours and are left alone.
    async fn list_checkpoints(&self) -> Result<BTreeMap<CheckpointId, Listed>, StorageError> {
        let mut listed: BTreeMap<CheckpointId, Listed> = BTreeMap::new();
        for key in self.blobs.list("").await? {
            let Some((id, file)) = checkpoint_file(&key) else {
                continue;
            };
            let entry = listed.entry(id).or_default();
            entry.complete |= file == METADATA_FILE;
            entry.keys.push(key);
        }
        Ok(listed)
    }

    /// The keys of checkpoint `id`.
    async fn keys_of(&self, id: CheckpointId) -> Result<Vec<String>, StorageError> {
        self.blobs.list(&format::checkpoint_dir_name(id)).await
    }

    /// Refuses to write into checkpoint `id` once its metadata exists; returns its keys.
    async fn refuse_if_complete(&self, id: CheckpointId) -> Result<Vec<String>, StorageError> {
        let dir = format::checkpoint_dir_name(id);
        let keys = self.blobs.list(&dir).await?;
        if keys.contains(&join_key(&dir, METADATA_FILE)) {
            return Err(StorageError::AlreadyComplete {
                path: self.blobs.path_of(&dir),
            });
        }
        Ok(keys)
    }

    /// Deletes the blobs of one checkpoint: its metadata first, then the rest a few at a time,
    /// so that a deletion that stops half-way leaves an incomplete checkpoint (garbage that
    /// `initialize` removes), never a complete one with files missing.
    async fn delete_all(&self, keys: Vec<String>) -> Result<(), StorageError> {
        let (metadata, rest) = metadata_first(keys);
        for key in &metadata {
            self.blobs.delete(key).await?;
        }
        // Owned keys: a closure over borrowed ones keeps the boxed futures of the callers from
        // proving `Send` (rust-lang/rust#64552).
        futures::stream::iter(rest)
            .map(|key| async move { self.blobs.delete(&key).await })
            .buffer_unordered(CONCURRENT_REQUESTS)
            .try_collect()
            .await
    }

    /// Puts `payload` framed as `kind` into checkpoint `id`, unless it is complete.
    async fn write(
        &self,
        id: CheckpointId,
        file_name: &str,
        kind: FileKind,
        payload: &[u8],
    ) -> Result<format::Header, StorageError> {
        self.refuse_if_complete(id).await?;
        let key = join_key(&format::checkpoint_dir_name(id), file_name);
        self.blobs.put(&key, format::frame(kind, payload)).await?;
        Ok(format::header_of(payload))
    }

    /// Reads the blob at `key` and checks its framing.
    async fn read(
        &self,
        key: &str,
        kind: FileKind,
    ) -> Result<(format::Header, Vec<u8>), StorageError> {
        let bytes = self.blobs.get(key).await?;
        let (header, payload) =
            format::unframe(kind, &bytes).map_err(|reason| StorageError::Corrupt {
                path: self.blobs.path_of(key),
                reason,
            })?;
        Ok((header, payload.to_vec()))
    }

    async fn complete_checkpoint(
        &self,
        metadata: CheckpointMetadata,
    ) -> Result<Vec<CheckpointId>, StorageError> {
        metadata.check().map_err(StorageError::InvalidMetadata)?;
        let id = metadata.checkpoint_id;
        let dir = format::checkpoint_dir_name(id);
        let present = self.refuse_if_complete(id).await?;
        // Every file the metadata lists must be there before the metadata can be.
        let listed = metadata.state_files.iter().map(|f| &f.file_name);
        for name in listed.chain(metadata.coordinator_states.iter().map(|c| &c.file_name)) {
            let key = join_key(&dir, name);
            if !present.contains(&key) {
                return Err(StorageError::Missing {
                    path: self.blobs.path_of(&key),
                });
            }
        }
        self.check_shared_present(&metadata.shared_files).await?;
        let bytes = codec::encode(&metadata)?;
        let key = join_key(&dir, METADATA_FILE);
        self.blobs
            .put(&key, format::frame(FileKind::Metadata, &bytes))
            .await?;
        Ok(self.apply_retention(id).await)
    }

    /// Deletes the completed checkpoints beyond the newest `retained` (never `current`).
    /// Failures are logged, not returned: the new checkpoint is complete either way.
    async fn apply_retention(&self, current: CheckpointId) -> Vec<CheckpointId> {
        let listed = match self.list_checkpoints().await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!("checkpoint retention skipped: {e}");
                return Vec::new();
            }
        };
        let completed: Vec<(CheckpointId, Listed)> =
            listed.into_iter().filter(|(_, l)| l.complete).collect();
        let excess = completed.len().saturating_sub(self.retained.get());
        let mut removed = Vec::new();
        let mut released: BTreeSet<String> = BTreeSet::new();
        let mut kept: Vec<CheckpointId> = Vec::new();
        for (i, (id, l)) in completed.into_iter().enumerate() {
            if i >= excess || id == current {
                kept.push(id);
                continue;
            }
            // What it shares is read before it goes: its metadata is deleted first.
            let shared = self.shared_files_of(id).await;
            match self.delete_all(l.keys).await {
                Ok(()) => {
                    removed.push(id);
                    released.extend(shared.unwrap_or_default());
                }
                Err(e) => tracing::warn!("cannot remove retired checkpoint {id}: {e}"),
            }
        }
        if !released.is_empty() {
            self.delete_unreferenced(released, &kept).await;
        }
        removed
    }

    /// Fails with [`StorageError::Missing`], naming the first, when one of the shared files
    /// `names` is not in the store.
    async fn check_shared_present(&self, names: &[String]) -> Result<(), StorageError> {
        if names.is_empty() {
            return Ok(());
        }
        let present: BTreeSet<String> = self.blobs.list(SHARED_DIR).await?.into_iter().collect();
        for name in names {
            let key = join_key(SHARED_DIR, name);
            if !present.contains(&key) {
                return Err(StorageError::Missing {
                    path: self.blobs.path_of(&key),
                });
            }
        }
        Ok(())
    }

    /// The shared files checkpoint `id`'s metadata lists (`None` when it cannot be read).
    async fn shared_files_of(&self, id: CheckpointId) -> Option<Vec<String>> {
        let key = join_key(&format::checkpoint_dir_name(id), METADATA_FILE);
        let (_, bytes) = self.read(&key, FileKind::Metadata).await.ok()?;
        let metadata: CheckpointMetadata = match codec::decode(&bytes) {
            Ok(m) => m,
            Err(_) => codec::decode::<super::metadata::CheckpointMetadataV1>(&bytes)
                .ok()?
                .into(),
        };
        Some(metadata.shared_files)
    }

    /// Deletes those of `candidates` that none of the checkpoints `kept` lists. A kept
    /// checkpoint whose metadata cannot be read keeps every candidate (nothing it might need
    /// goes).
    async fn delete_unreferenced(&self, candidates: BTreeSet<String>, kept: &[CheckpointId]) {
        let mut referenced = BTreeSet::new();
        for &id in kept {
            match self.shared_files_of(id).await {
                Some(files) => referenced.extend(files),
                None => {
                    tracing::warn!(
                        "shared files kept: the metadata of checkpoint {id} is unreadable"
                    );
                    return;
                }
            }
        }
        let doomed: Vec<String> = candidates
            .into_iter()
            .filter(|k| !referenced.contains(k))
            .map(|k| join_key(SHARED_DIR, &k))
            .collect();
        let deleted: Result<(), StorageError> = futures::stream::iter(doomed)
            .map(|key| async move { self.blobs.delete(&key).await })
            .buffer_unordered(CONCURRENT_REQUESTS)
            .try_collect()
            .await;
        if let Err(e) = deleted {
            tracing::warn!("cannot remove a shared file no checkpoint needs: {e}");
        }
    }

    /// Reads and verifies the checkpoint in folder `dir`, of checkpoint `expected` when the
    /// caller knows which one it asked for.
    async fn load_checkpoint(
        &self,
        dir: &str,
        expected: Option<CheckpointId>,
        fingerprint: &str,
    ) -> Result<RestoredCheckpoint, StorageError> {
        let meta_key = join_key(dir, METADATA_FILE);
        let (_, bytes) = self.read(&meta_key, FileKind::Metadata).await?;
        let meta_path = self.blobs.path_of(&meta_key);
        let metadata = decode_metadata(&meta_path, &bytes, expected, fingerprint)?;
        // A shared file that is gone makes the checkpoint unusable, named like a missing state
        // file (and the restore falls back to an older checkpoint).
        self.check_shared_present(&metadata.shared_files).await?;
        // The state files, fetched side by side, then checked against the metadata in order.
        // (Loops rather than closures over the metadata: a closure over a borrowed handle here
        // keeps the boxed future from proving `Send`, rust-lang/rust#64552.)
        let mut names: Vec<String> = Vec::new();
        for f in &metadata.state_files {
            names.push(f.file_name.clone());
        }
        for c in &metadata.coordinator_states {
            names.push(c.file_name.clone());
        }
        let mut files: HashMap<String, (format::Header, Vec<u8>)> = futures::stream::iter(names)
            .map(|name| async move {
                let file = self.read(&join_key(dir, &name), FileKind::State).await?;
                Ok::<_, StorageError>((name, file))
            })
            .buffer_unordered(CONCURRENT_REQUESTS)
            .try_collect()
            .await?;
        assemble(self.blobs.path_of(dir), metadata, |name| {
            files.remove(name).ok_or_else(|| StorageError::Missing {
                path: self.blobs.path_of(&join_key(dir, name)),
            })
        })
    }

    /// The newest checkpoint that passes every check, newest to oldest; with
    /// `remove_incomplete`, checkpoints without metadata are deleted on the way.
    async fn latest(
        &self,
        fingerprint: &str,
        remove_incomplete: bool,
    ) -> Result<RestoreOutcome, StorageError> {
        let mut outcome = RestoreOutcome::default();
        for (id, l) in self.list_checkpoints().await?.into_iter().rev() {
            let dir = format::checkpoint_dir_name(id);
            if !l.complete {
                // Garbage of an unfinished checkpoint; a failed removal does not prevent a
                // restore.
                if remove_incomplete && let Err(e) = self.delete_all(l.keys).await {
                    tracing::warn!("cannot remove incomplete checkpoint {id}: {e}");
                }
                outcome.skipped.push(SkippedCheckpoint {
                    id,
                    error: StorageError::Missing {
                        path: self.blobs.path_of(&join_key(&dir, METADATA_FILE)),
                    },
                });
            } else if outcome.restored.is_none() {
                match self.load_checkpoint(&dir, Some(id), fingerprint).await {
                    Ok(restored) => outcome.restored = Some(restored),
                    Err(e @ StorageError::FingerprintMismatch { .. }) => return Err(e),
                    Err(error) => {
                        tracing::warn!("skipping checkpoint {id}: {error}");
                        outcome.skipped.push(SkippedCheckpoint { id, error });
                    }
                }
            }
        }
        Ok(outcome)
    }
}

/// The checkpoint and file name of `key` if it is `chk-N/<file>`.
fn checkpoint_file(key: &str) -> Option<(CheckpointId, &str)> {
    let (dir, file) = key.split_once('/')?;
    if file.is_empty() || file.contains('/') {
        return None;
    }
    Some((format::parse_checkpoint_dir_name(dir)?, file))
}

/// `keys` split into the metadata's and the others, the order in which a checkpoint is
/// deleted.
fn metadata_first(keys: Vec<String>) -> (Vec<String>, Vec<String>) {
    keys.into_iter()
        .partition(|k| k.rsplit('/').next() == Some(METADATA_FILE))
}

impl<B: BlobStore> CheckpointStorage for BlobCheckpointStorage<B> {
    fn location(&self) -> String {
        self.blobs.location()
    }

    fn initialize(&self) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        Box::pin(async move {
            let mut removed = Vec::new();
            let mut complete = Vec::new();
            for (id, l) in self.list_checkpoints().await? {
                if !l.complete {
                    self.delete_all(l.keys).await?;
                    removed.push(id);
                } else {
                    complete.push(id);
                }
            }
            // Shared files of checkpoints that never completed, or whose retention was cut
            // short: no complete checkpoint lists them.
            let shared: BTreeSet<String> = self
                .blobs
                .list(SHARED_DIR)
                .await?
                .into_iter()
                .filter_map(|k| k.strip_prefix("shared/").map(str::to_owned))
                .collect();
            if !shared.is_empty() {
                self.delete_unreferenced(shared, &complete).await;
            }
            Ok(removed)
        })
    }

    fn write_state(
        &self,
        id: CheckpointId,
        node: NodeId,
        subtask: SubtaskIndex,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<StateFileHandle, StorageError>> {
        Box::pin(async move {
            let file_name = format::state_file_name(node, subtask);
            let header = self
                .write(id, &file_name, FileKind::State, &payload)
                .await?;
            Ok(StateFileHandle {
                node,
                subtask,
                file_name,
                length: header.len,
                crc32: header.crc32,
            })
        })
    }

    fn write_coordinator_state(
        &self,
        id: CheckpointId,
        node: NodeId,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<CoordinatorStateHandle, StorageError>> {
        Box::pin(async move {
            let file_name = format::coordinator_file_name(node);
            let header = self
                .write(id, &file_name, FileKind::State, &payload)
                .await?;
            Ok(CoordinatorStateHandle {
                node,
                file_name,
                length: header.len,
                crc32: header.crc32,
            })
        })
    }

    fn complete(
        &self,
        metadata: CheckpointMetadata,
    ) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        Box::pin(self.complete_checkpoint(metadata))
    }

    fn discard(&self, id: CheckpointId) -> BoxFuture<'_, Result<(), StorageError>> {
        Box::pin(async move {
            let keys = self.keys_of(id).await?;
            self.delete_all(keys).await
        })
    }

    fn write_shared<'a>(
        &'a self,
        key: &'a str,
        path: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move { self.blobs.put_file(&join_key(SHARED_DIR, key), path).await })
    }

    fn delete_shared<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move { self.blobs.delete(&join_key(SHARED_DIR, key)).await })
    }

    fn shared_present<'a>(
        &'a self,
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<BTreeSet<String>, StorageError>> {
        Box::pin(async move {
            if keys.is_empty() {
                return Ok(BTreeSet::new());
            }
            let present: BTreeSet<String> =
                self.blobs.list(SHARED_DIR).await?.into_iter().collect();
            Ok(keys
                .iter()
                .filter(|k| present.contains(&join_key(SHARED_DIR, k)))
                .cloned()
                .collect())
        })
    }

    fn fetch_shared<'a>(
        &'a self,
        key: &'a str,
        path: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move {
            self.blobs
                .get_to_file(&join_key(SHARED_DIR, key), path)
                .await
        })
    }

    fn read_state<'a>(
        &'a self,
        id: CheckpointId,
        handle: &'a StateFileHandle,
    ) -> BoxFuture<'a, Result<Vec<u8>, StorageError>> {
        Box::pin(async move {
            let key = join_key(&format::checkpoint_dir_name(id), &handle.file_name);
            let (header, payload) = self.read(&key, FileKind::State).await?;
            check_listed(
                &self.blobs.path_of(&key),
                &header,
                handle.length,
                handle.crc32,
            )?;
            Ok(payload)
        })
    }

    fn completed(&self) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        Box::pin(async move {
            Ok(self
                .list_checkpoints()
                .await?
                .into_iter()
                .filter(|(_, l)| l.complete)
                .map(|(id, _)| id)
                .collect())
        })
    }

    fn latest_valid<'a>(
        &'a self,
        job_fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<RestoreOutcome, StorageError>> {
        Box::pin(self.latest(job_fingerprint, true))
    }

    fn load<'a>(
        &'a self,
        id: CheckpointId,
        job_fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<RestoredCheckpoint, StorageError>> {
        Box::pin(async move {
            let dir = format::checkpoint_dir_name(id);
            self.load_checkpoint(&dir, Some(id), job_fingerprint).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_checkpoint_files_are_ours() {
        assert_eq!(
            checkpoint_file("chk-3/_metadata"),
            Some((CheckpointId(3), METADATA_FILE))
        );
        for other in [
            "notes.txt",
            "chk-3",
            "chk-3/",
            "chk-x/a",
            "chk-3/a/b",
            "a/chk-3/b",
        ] {
            assert_eq!(checkpoint_file(other), None, "{other}");
        }
    }

    #[test]
    fn a_checkpoint_is_deleted_metadata_first() {
        let keys = [
            "chk-1/node-0.subtask-0.state",
            "chk-1/_metadata",
            "chk-1/node-0.coordinator.state",
        ]
        .map(String::from)
        .to_vec();
        let (first, rest) = metadata_first(keys);
        assert_eq!(first, ["chk-1/_metadata"]);
        assert_eq!(rest.len(), 2);
        assert!(rest.iter().all(|k| !k.ends_with(METADATA_FILE)));
    }
}
