//! Checkpoint storage on the local file system: `<base>/chk-N/`, one file per operator subtask,
//! and `<base>/chk-N/_metadata` written last by atomic rename.

use super::format::{self, FileKind, METADATA_FILE};
use super::fs::{self as sfs, Listed};
use super::verify::{assemble, decode_metadata};
use super::{
    CheckpointMetadata, CheckpointStorage, CoordinatorStateHandle, RestoreOutcome,
    RestoredCheckpoint, SkippedCheckpoint, StateFileHandle, StorageError,
};
use futures::future::BoxFuture;
use sluice_core::{CheckpointId, NodeId, SubtaskIndex, codec};
use std::fs::{self, File};
use std::io::Write;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

/// Checks that `path` can hold checkpoints: creates it (with its parents) if needed and writes
/// and removes a probe file in it. The error names `path`.
///
/// This does blocking I/O: call it while configuring a job, or from `spawn_blocking`, not on a
/// runtime worker.
///
/// ```
/// use sluice_runtime::storage::validate_directory;
///
/// let tmp = tempfile::tempdir().unwrap();
/// validate_directory(&tmp.path().join("checkpoints")).unwrap();
///
/// // A directory cannot live under a regular file.
/// let file = tmp.path().join("a-file");
/// std::fs::write(&file, b"x").unwrap();
/// let err = validate_directory(&file.join("checkpoints")).unwrap_err();
/// assert!(err.to_string().contains("a-file/checkpoints"));
///
/// // An empty path is not the working directory: it is refused, quoted in the error.
/// let err = validate_directory(std::path::Path::new("")).unwrap_err();
/// assert!(err.to_string().contains("\"\" is not usable"), "{err}");
/// ```
pub fn validate_directory(path: &Path) -> Result<(), StorageError> {
    reject_empty(path)?;
    let not_writable = |source| StorageError::NotWritable {
        path: path.to_path_buf(),
        source,
    };
    fs::create_dir_all(path).map_err(not_writable)?;
    let probe = sfs::temp_path(&path.join(".sluice-write-probe"));
    File::create(&probe)
        .and_then(|mut f| f.write_all(b"sluice"))
        .map_err(not_writable)?;
    fs::remove_file(&probe).map_err(not_writable)
}

/// An empty path would put checkpoints in the working directory without anyone asking for it.
fn reject_empty(path: &Path) -> Result<(), StorageError> {
    if path.as_os_str().is_empty() {
        return Err(StorageError::InvalidPath {
            path: path.to_path_buf(),
            reason: "the path is empty (write \".\" for the working directory)",
        });
    }
    Ok(())
}

/// What a path to restore from names; see [`restore_path_kind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestorePathKind {
    /// One checkpoint directory, `chk-N` (restore exactly that checkpoint).
    Checkpoint,
    /// A checkpoint storage directory (restore its newest valid checkpoint).
    Storage,
}

/// Tells whether `path` is one checkpoint (it has a `_metadata` file, or it is named `chk-N`)
/// or a checkpoint storage directory. A path that does not exist, or is empty, is an error
/// naming it, so that a restore from a mistyped path does not look like an empty storage.
///
/// ```
/// use sluice_runtime::storage::{RestorePathKind, StorageError, restore_path_kind};
///
/// let tmp = tempfile::tempdir().unwrap();
/// assert_eq!(restore_path_kind(tmp.path()).unwrap(), RestorePathKind::Storage);
/// std::fs::create_dir(tmp.path().join("chk-3")).unwrap();
/// assert_eq!(
///     restore_path_kind(&tmp.path().join("chk-3")).unwrap(),
///     RestorePathKind::Checkpoint
/// );
/// let missing = tmp.path().join("no-such-dir");
/// let err = restore_path_kind(&missing).unwrap_err();
/// assert!(matches!(err, StorageError::NotFound { .. }));
/// assert!(err.to_string().contains("does not exist"), "{err}");
/// ```
pub fn restore_path_kind(path: &Path) -> Result<RestorePathKind, StorageError> {
    reject_empty(path)?;
    match path.try_exists() {
        Ok(true) => {}
        Ok(false) => {
            return Err(StorageError::NotFound {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(StorageError::io("inspect", path, e)),
    }
    let named_like_a_checkpoint = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(format::parse_checkpoint_dir_name)
        .is_some();
    if named_like_a_checkpoint || path.join(METADATA_FILE).exists() {
        Ok(RestorePathKind::Checkpoint)
    } else {
        Ok(RestorePathKind::Storage)
    }
}

/// Checkpoint storage in a local directory. See the [module documentation](super) for the
/// layout and an example.
///
/// Every method does its file I/O on tokio's blocking pool, so it must be awaited inside a tokio
/// runtime and never blocks a worker.
#[derive(Clone, Debug)]
pub struct LocalCheckpointStorage {
    base: PathBuf,
    retained: NonZeroUsize,
}

impl LocalCheckpointStorage {
    /// Storage under `base` that keeps the last `retained` completed checkpoints. Does no I/O;
    /// see [`validate_directory`] and [`CheckpointStorage::initialize`].
    pub fn new(base: impl Into<PathBuf>, retained: NonZeroUsize) -> Self {
        LocalCheckpointStorage {
            base: base.into(),
            retained,
        }
    }

    /// The base directory.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// How many completed checkpoints are kept.
    pub fn retained(&self) -> NonZeroUsize {
        self.retained
    }

    /// The directory of checkpoint `id`.
    pub fn checkpoint_dir(&self, id: CheckpointId) -> PathBuf {
        self.base.join(format::checkpoint_dir_name(id))
    }

    /// Reads and verifies the checkpoint in directory `dir` (a `chk-N` directory, wherever it
    /// is). Unlike [`CheckpointStorage::latest_valid`] it never falls back: any missing or
    /// damaged file is the error, naming that file.
    pub async fn load_dir(
        dir: impl Into<PathBuf>,
        job_fingerprint: &str,
    ) -> Result<RestoredCheckpoint, StorageError> {
        let dir = dir.into();
        let fingerprint = job_fingerprint.to_owned();
        blocking(move || load_sync(&dir, None, &fingerprint)).await
    }
}

impl CheckpointStorage for LocalCheckpointStorage {
    fn location(&self) -> String {
        self.base.display().to_string()
    }

    fn initialize(&self) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        let base = self.base.clone();
        Box::pin(blocking(move || initialize_sync(&base)))
    }

    fn write_state(
        &self,
        id: CheckpointId,
        node: NodeId,
        subtask: SubtaskIndex,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<StateFileHandle, StorageError>> {
        let dir = self.checkpoint_dir(id);
        Box::pin(blocking(move || {
            let file_name = format::state_file_name(node, subtask);
            let header = write_state_sync(&dir, &file_name, &payload)?;
            Ok(StateFileHandle {
                node,
                subtask,
                file_name,
                length: header.len,
                crc32: header.crc32,
            })
        }))
    }

    fn write_coordinator_state(
        &self,
        id: CheckpointId,
        node: NodeId,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<CoordinatorStateHandle, StorageError>> {
        let dir = self.checkpoint_dir(id);
        Box::pin(blocking(move || {
            let file_name = format::coordinator_file_name(node);
            let header = write_state_sync(&dir, &file_name, &payload)?;
            Ok(CoordinatorStateHandle {
                node,
                file_name,
                length: header.len,
                crc32: header.crc32,
            })
        }))
    }

    fn complete(
        &self,
        metadata: CheckpointMetadata,
    ) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        let this = self.clone();
        Box::pin(blocking(move || this.complete_sync(&metadata)))
    }

    fn discard(&self, id: CheckpointId) -> BoxFuture<'_, Result<(), StorageError>> {
        let dir = self.checkpoint_dir(id);
        Box::pin(blocking(move || sfs::remove_checkpoint(&dir)))
    }

    fn completed(&self) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        let base = self.base.clone();
        Box::pin(blocking(move || {
            Ok(sfs::list_checkpoints(&base)?
                .into_iter()
                .filter(|l| l.complete)
                .map(|l| l.id)
                .collect())
        }))
    }

    fn latest_valid<'a>(
        &'a self,
        job_fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<RestoreOutcome, StorageError>> {
        let base = self.base.clone();
        let fingerprint = job_fingerprint.to_owned();
        Box::pin(blocking(move || latest_valid_sync(&base, &fingerprint)))
    }

    fn load<'a>(
        &'a self,
        id: CheckpointId,
        job_fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<RestoredCheckpoint, StorageError>> {
        let dir = self.checkpoint_dir(id);
        let fingerprint = job_fingerprint.to_owned();
        Box::pin(blocking(move || load_sync(&dir, Some(id), &fingerprint)))
    }
}

/// Runs blocking storage work on tokio's blocking pool.
async fn blocking<T, F>(work: F) -> Result<T, StorageError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, StorageError> + Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StorageError::Background(e.to_string()))?
}

fn initialize_sync(base: &Path) -> Result<Vec<CheckpointId>, StorageError> {
    fs::create_dir_all(base).map_err(|source| StorageError::NotWritable {
        path: base.to_path_buf(),
        source,
    })?;
    let mut removed = Vec::new();
    for l in sfs::list_checkpoints(base)? {
        if !l.complete {
            sfs::remove_checkpoint(&l.dir)?;
            removed.push(l.id);
        }
    }
    Ok(removed)
}

/// Writes one state file of an incomplete checkpoint; returns its header.
fn write_state_sync(
    dir: &Path,
    file_name: &str,
    payload: &[u8],
) -> Result<format::Header, StorageError> {
    if dir.join(METADATA_FILE).exists() {
        return Err(StorageError::AlreadyComplete {
            path: dir.to_path_buf(),
        });
    }
    fs::create_dir_all(dir).map_err(|e| StorageError::io("create directory", dir, e))?;
    sfs::write_framed(&dir.join(file_name), FileKind::State, payload)
}

impl LocalCheckpointStorage {
    fn complete_sync(
        &self,
        metadata: &CheckpointMetadata,
    ) -> Result<Vec<CheckpointId>, StorageError> {
        metadata.check().map_err(StorageError::InvalidMetadata)?;
        let id = metadata.checkpoint_id;
        let dir = self.checkpoint_dir(id);
        let meta_path = dir.join(METADATA_FILE);
        if meta_path.exists() {
            return Err(StorageError::AlreadyComplete { path: dir });
        }
        fs::create_dir_all(&dir).map_err(|e| StorageError::io("create directory", &dir, e))?;
        let files = metadata.state_files.iter().map(|f| &f.file_name);
        for name in files.chain(metadata.coordinator_states.iter().map(|c| &c.file_name)) {
            let path = dir.join(name);
            if !path.is_file() {
                return Err(StorageError::Missing { path });
            }
        }
        // The state files' renames become durable before the metadata can.
        sfs::sync_dir(&dir)?;
        let bytes = codec::encode(metadata)?;
        sfs::write_framed(&meta_path, FileKind::Metadata, &bytes)?;
        sfs::sync_dir(&dir)?;
        sfs::sync_dir(&self.base)?;
        Ok(self.apply_retention(id))
    }

    /// Removes the completed checkpoints beyond the newest `retained` (never `current`).
    /// Failures are logged, not returned: the new checkpoint is complete either way.
    fn apply_retention(&self, current: CheckpointId) -> Vec<CheckpointId> {
        let completed: Vec<Listed> = match sfs::list_checkpoints(&self.base) {
            Ok(listed) => listed.into_iter().filter(|l| l.complete).collect(),
            Err(e) => {
                tracing::warn!("checkpoint retention skipped: {e}");
                return Vec::new();
            }
        };
        let excess = completed.len().saturating_sub(self.retained.get());
        let mut removed = Vec::new();
        for l in completed.iter().take(excess).filter(|l| l.id != current) {
            match sfs::remove_checkpoint(&l.dir) {
                Ok(()) => removed.push(l.id),
                Err(e) => tracing::warn!("cannot remove retired checkpoint {}: {e}", l.id),
            }
        }
        removed
    }
}

fn latest_valid_sync(base: &Path, fingerprint: &str) -> Result<RestoreOutcome, StorageError> {
    let mut outcome = RestoreOutcome::default();
    for l in sfs::list_checkpoints(base)?.into_iter().rev() {
        if !l.complete {
            // Garbage of an unfinished checkpoint; a failed removal does not prevent a restore.
            if let Err(e) = sfs::remove_checkpoint(&l.dir) {
                tracing::warn!("cannot remove incomplete checkpoint {}: {e}", l.id);
            }
            outcome.skipped.push(SkippedCheckpoint {
                id: l.id,
                error: StorageError::Missing {
                    path: l.dir.join(METADATA_FILE),
                },
            });
        } else if outcome.restored.is_none() {
            match load_sync(&l.dir, Some(l.id), fingerprint) {
                Ok(restored) => outcome.restored = Some(restored),
                Err(e @ StorageError::FingerprintMismatch { .. }) => return Err(e),
                Err(error) => {
                    tracing::warn!("skipping checkpoint {}: {error}", l.id);
                    outcome.skipped.push(SkippedCheckpoint { id: l.id, error });
                }
            }
        }
    }
    Ok(outcome)
}

fn load_sync(
    dir: &Path,
    expected_id: Option<CheckpointId>,
    fingerprint: &str,
) -> Result<RestoredCheckpoint, StorageError> {
    let meta_path = dir.join(METADATA_FILE);
    let (_, bytes) = sfs::read_framed(&meta_path, FileKind::Metadata)?;
    let metadata = decode_metadata(&meta_path, &bytes, expected_id, fingerprint)?;
    assemble(dir.to_path_buf(), metadata, |file_name| {
        sfs::read_framed(&dir.join(file_name), FileKind::State)
    })
}
