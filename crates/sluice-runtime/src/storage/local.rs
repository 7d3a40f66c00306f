//! Checkpoint storage on the local file system: [`LocalBlobStore`], the [`BlobStore`] over a
//! directory (every put an atomic, fsynced rename), and [`LocalCheckpointStorage`], the
//! checkpoint layout over it (`<base>/chk-N/`, one file per operator subtask,
//! `<base>/chk-N/_metadata` put last). Also the checks of a path given by a user: a directory to
//! hold checkpoints, a path to restore from.

use super::blob::BlobStore;
use super::format::{self, METADATA_FILE};
use super::fs as sfs;
use super::{BlobCheckpointStorage, RestoredCheckpoint, StorageError};
use futures::future::BoxFuture;
use sluice_core::CheckpointId;
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
/// ```text
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
pub(crate) fn validate_directory(path: &Path) -> Result<(), StorageError> {
    reject_unusable(path)?;
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

/// An empty path would put checkpoints in the working directory without anyone asking for it,
/// and a URL (`s3://bucket/dir`) in a local directory named `s3:`.
fn reject_unusable(path: &Path) -> Result<(), StorageError> {
    if path.as_os_str().is_empty() {
        return Err(StorageError::InvalidPath {
            path: path.to_path_buf(),
            reason: "the path is empty (write \".\" for the working directory)",
        });
    }
    if path.to_string_lossy().contains("://") {
        return Err(StorageError::InvalidPath {
            path: path.to_path_buf(),
            reason: "it is a URL, not a local directory (for an object store, pass \
                     sluice_object_store::ObjectStoreCheckpointStorage::from_url to \
                     set_checkpoint_storage_backend)",
        });
    }
    Ok(())
}

/// What a path to restore from names; see [`restore_path_kind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RestorePathKind {
    /// One checkpoint directory, `chk-N` (restore exactly that checkpoint).
    Checkpoint,
    /// A checkpoint storage directory (restore its newest valid checkpoint).
    Storage,
}

/// Tells whether `path` is one checkpoint (it has a `_metadata` file, or it is named `chk-N`)
/// or a checkpoint storage directory. A path that does not exist, or is empty, is an error
/// naming it, so that a restore from a mistyped path does not look like an empty storage.
///
/// ```text
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
pub(crate) fn restore_path_kind(path: &Path) -> Result<RestorePathKind, StorageError> {
    reject_unusable(path)?;
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

/// Blobs as files below a directory: key `chk-7/_metadata` is the file
/// `<root>/chk-7/_metadata`. Every put writes a temporary file, fsyncs it, renames it into
/// place and fsyncs the directory, so a reader sees a whole file or none and a returned put is
/// durable. Every method does its file I/O on tokio's blocking pool, so it must be awaited
/// inside a tokio runtime and never blocks a worker.
#[derive(Clone, Debug)]
pub struct LocalBlobStore {
    root: PathBuf,
}

impl LocalBlobStore {
    /// Blobs below `root` (created by the first put). Does no I/O.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        LocalBlobStore { root: root.into() }
    }

    /// The directory the blobs live in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn file(&self, key: &str) -> PathBuf {
        if key.is_empty() {
            self.root.clone()
        } else {
            self.root.join(key)
        }
    }
}

impl BlobStore for LocalBlobStore {
    fn location(&self) -> String {
        self.root.display().to_string()
    }

    fn path_of(&self, key: &str) -> PathBuf {
        self.file(key)
    }

    fn put<'a>(&'a self, key: &'a str, bytes: Vec<u8>) -> BoxFuture<'a, Result<(), StorageError>> {
        let path = self.file(key);
        Box::pin(blocking(move || sfs::write_atomically(&path, &bytes)))
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<u8>, StorageError>> {
        let path = self.file(key);
        Box::pin(blocking(move || sfs::read(&path)))
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>, StorageError>> {
        let (dir, prefix) = (self.file(prefix), prefix.to_owned());
        Box::pin(blocking(move || {
            let mut keys = Vec::new();
            sfs::list_files(&dir, &prefix, &mut keys)?;
            Ok(keys)
        }))
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
        let (root, path) = (self.root.clone(), self.file(key));
        Box::pin(blocking(move || sfs::remove_file(&root, &path)))
    }

    /// A hard link to `path` where it shares the file system (a table file is never changed in
    /// place, so storage and store may share it), else a copy; never read into memory.
    fn put_file<'a>(
        &'a self,
        key: &'a str,
        path: &'a Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        let (source, target) = (path.to_path_buf(), self.file(key));
        Box::pin(blocking(move || sfs::copy_atomically(&source, &target)))
    }

    /// A hard link or a copy, as [`put_file`](Self::put_file).
    fn get_to_file<'a>(
        &'a self,
        key: &'a str,
        path: &'a Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        let (source, target) = (self.file(key), path.to_path_buf());
        Box::pin(blocking(move || sfs::copy_atomically(&source, &target)))
    }
}

/// Checkpoint storage in a local directory: the checkpoint layout over a [`LocalBlobStore`].
/// See the [module documentation](super) for the layout and an example.
pub type LocalCheckpointStorage = BlobCheckpointStorage<LocalBlobStore>;

impl BlobCheckpointStorage<LocalBlobStore> {
    /// Storage under `base` that keeps the last `retained` completed checkpoints. Does no I/O;
    /// see `validate_directory` and
    /// [`CheckpointStorage::initialize`](super::CheckpointStorage::initialize).
    pub fn new(base: impl Into<PathBuf>, retained: NonZeroUsize) -> Self {
        BlobCheckpointStorage::over(LocalBlobStore::new(base), retained)
    }

    /// The base directory.
    pub fn base(&self) -> &Path {
        self.blobs().root()
    }

    /// The directory of checkpoint `id`.
    pub fn checkpoint_dir(&self, id: CheckpointId) -> PathBuf {
        self.base().join(format::checkpoint_dir_name(id))
    }

    /// Reads and verifies the checkpoint in directory `dir` (a `chk-N` directory, wherever it
    /// is and whatever it is called). Unlike
    /// [`CheckpointStorage::latest_valid`](super::CheckpointStorage::latest_valid) it never
    /// falls back: any missing or damaged file, the `_metadata` included, is the error, naming
    /// that file.
    pub async fn load_dir(
        dir: impl Into<PathBuf>,
        job_fingerprint: &str,
    ) -> Result<RestoredCheckpoint, StorageError> {
        BlobCheckpointStorage::over(LocalBlobStore::new(dir), NonZeroUsize::MIN)
            .load_at("", job_fingerprint)
            .await
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
