//! Checkpoint storage on object stores for sluice: S3 and S3-compatible stores (MinIO, moto,
//! Ceph), Google Cloud Storage and Azure Blob Storage (cargo features `gcp`, `azure`), local
//! files and memory, through the [`object_store`] crate. A job writes its checkpoints where a
//! job master started on another machine finds them, and resumes from the newest with
//! [`resume_from_latest_checkpoint`](sluice_runtime::StreamEnvironment::resume_from_latest_checkpoint).
//!
//! Where to find things:
//! - [`ObjectStoreBlobs`]: the runtime's [`BlobStore`] over any [`ObjectStore`], below a
//!   prefix: this crate's whole adapter (put, get, list, delete);
//! - [`ObjectStoreCheckpointStorage`]: the runtime's checkpoint layout
//!   ([`BlobCheckpointStorage`]) over those blobs, made from a store
//!   ([`new`](ObjectStoreCheckpointStorage::new)) or from a URL and options
//!   ([`from_url`](ObjectStoreCheckpointStorage::from_url));
//! - [`Error`]: a URL or configuration that cannot name a store.
//!
//! The layout, framing, verification, fallback and retention are the runtime's, written once
//! over the blob interface, so a checkpoint copied between a directory and a bucket stays
//! readable: `<prefix>/chk-7/node-0.subtask-1.state`, `<prefix>/chk-7/_metadata`. An object
//! store has no rename and no directories: each blob is one `PUT`, which the store makes visible
//! whole or not at all, and the metadata object is put last, after every state file it lists
//! was checked to exist. The crate is separate from the runtime so that a job in local mode does
//! not compile the cloud clients.
//!
//! ```
//! use sluice_object_store::ObjectStoreCheckpointStorage;
//! use sluice_runtime::prelude::*;
//! use std::num::NonZeroUsize;
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! // An S3 bucket would be `s3://bucket/checkpoints/job` with credentials and, for a
//! // compatible server, `aws_endpoint` and `aws_allow_http` among the options.
//! let storage = ObjectStoreCheckpointStorage::from_url(
//!     "memory:///checkpoints/job",
//!     Vec::<(String, String)>::new(),
//!     NonZeroUsize::new(3).unwrap(),
//! )
//! .unwrap();
//! let storage = Arc::new(storage);
//!
//! let run = |storage: Arc<ObjectStoreCheckpointStorage>| {
//!     let env = StreamEnvironment::new();
//!     env.enable_checkpointing(Duration::from_secs(60));
//!     env.set_checkpoint_storage_backend(storage);
//!     env.resume_from_latest_checkpoint();
//!     let out = env.from_iter(0u64..100).collect();
//!     let result = env.execute_blocking("object-store").unwrap();
//!     (result, out.len())
//! };
//! // The first run finds nothing to resume, runs, and ends with a checkpoint in the store.
//! let (first, n) = run(storage.clone());
//! assert_eq!((first.restored_from, n), (None, 100));
//! // The second resumes from it: its source was at the end already.
//! let (second, n) = run(storage);
//! assert_eq!((second.restored_from, n), (first.last_checkpoint, 0));
//! ```

use futures::TryStreamExt;
use futures::future::BoxFuture;
use object_store::path::{Path as ObjectPath, PathPart};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, WriteMultipart};
use sluice_core::{CheckpointId, NodeId, SubtaskIndex};
use sluice_runtime::storage::{
    BlobCheckpointStorage, BlobStore, CheckpointMetadata, CheckpointStorage,
    CoordinatorStateHandle, RestoreOutcome, RestoredCheckpoint, StateFileHandle, StorageError,
};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A URL or configuration that does not name a usable object store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The text is not a URL.
    #[error("checkpoint storage URL {url:?} is not a URL: {source}")]
    Url {
        /// The text given.
        url: String,
        /// Why it does not parse.
        source: url::ParseError,
    },
    /// The URL's scheme or an option is not supported, or an option's value is invalid.
    #[error("checkpoint storage {url}: {source}")]
    Store {
        /// The URL given.
        url: String,
        /// What `object_store` refused.
        source: object_store::Error,
    },
}

/// Blobs as objects below a prefix of an [`ObjectStore`]: key `chk-7/_metadata` is the object
/// `<prefix>/chk-7/_metadata`. Every method is asynchronous I/O on the store's client (no
/// blocking pool, no blocked worker).
#[derive(Clone, Debug)]
pub struct ObjectStoreBlobs {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    /// The store's URL with the prefix, for people and error messages.
    location: String,
}

impl ObjectStoreBlobs {
    /// Blobs below `prefix` in `store`; `location` names the place for people (for example
    /// the bucket's URL). Does no I/O.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: impl Into<ObjectPath>,
        location: impl Into<String>,
    ) -> Self {
        ObjectStoreBlobs {
            store,
            prefix: prefix.into(),
            location: location.into(),
        }
    }

    /// The object of `key` (or of the folder `key`; `""` is the prefix).
    fn object(&self, key: &str) -> ObjectPath {
        let parts = key.split('/').filter(|p| !p.is_empty()).map(PathPart::from);
        self.prefix.parts().chain(parts).collect()
    }

    fn io_error(&self, action: &'static str, key: &str, e: object_store::Error) -> StorageError {
        match e {
            object_store::Error::NotFound { .. } => StorageError::Missing {
                path: self.path_of(key),
            },
            e => StorageError::Io {
                action,
                path: self.path_of(key),
                source: std::io::Error::other(e),
            },
        }
    }
}

impl BlobStore for ObjectStoreBlobs {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn path_of(&self, key: &str) -> PathBuf {
        if key.is_empty() {
            PathBuf::from(&self.location)
        } else {
            PathBuf::from(format!("{}/{key}", self.location))
        }
    }

    fn put<'a>(&'a self, key: &'a str, bytes: Vec<u8>) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move {
            self.store
                .put(&self.object(key), PutPayload::from(bytes))
                .await
                .map_err(|e| self.io_error("put", key, e))?;
            Ok(())
        })
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<u8>, StorageError>> {
        Box::pin(async move {
            let bytes = self
                .store
                .get(&self.object(key))
                .await
                .map_err(|e| self.io_error("get", key, e))?
                .bytes()
                .await
                .map_err(|e| self.io_error("read", key, e))?;
            Ok(bytes.to_vec())
        })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>, StorageError>> {
        Box::pin(async move {
            let folder = self.object(prefix);
            let objects: Vec<ObjectPath> = self
                .store
                .list(Some(&folder))
                .map_ok(|meta| meta.location)
                .try_collect()
                .await
                .map_err(|e| self.io_error("list", prefix, e))?;
            // Keys relative to the prefix; an object named like the folder itself is no key.
            let below = |key: &String| {
                prefix.is_empty()
                    || key
                        .strip_prefix(prefix)
                        .is_some_and(|rest| rest.starts_with('/'))
            };
            Ok(objects
                .iter()
                .filter_map(|o| {
                    let parts: Vec<String> = o
                        .prefix_match(&self.prefix)?
                        .map(|p| p.as_ref().to_owned())
                        .collect();
                    Some(parts.join("/"))
                })
                .filter(below)
                .collect())
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move {
            match self.store.delete(&self.object(key)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(self.io_error("delete", key, e)),
            }
        })
    }

    /// A file of up to [`PART_BYTES`] in one `PUT`; a larger one as a multipart upload of
    /// parts of that size, two in flight, read from disk as they go: at most three parts in
    /// memory whatever the file's size. A failed upload is aborted.
    fn put_file<'a>(
        &'a self,
        key: &'a str,
        path: &'a Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move {
            let local = |action: &'static str, e: std::io::Error| StorageError::Io {
                action,
                path: path.to_path_buf(),
                source: e,
            };
            let mut file = tokio::fs::File::open(path)
                .await
                .map_err(|e| local("open", e))?;
            let mut part = read_part(&mut file).await.map_err(|e| local("read", e))?;
            if part.len() < PART_BYTES {
                return self.put(key, part).await;
            }
            let upload = self
                .store
                .put_multipart(&self.object(key))
                .await
                .map_err(|e| self.io_error("start the upload of", key, e))?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
            while !part.is_empty() {
                writer.put(part.into());
                if let Err(e) = writer.wait_for_capacity(2).await {
                    let _ = writer.abort().await;
                    return Err(self.io_error("upload a part of", key, e));
                }
                part = match read_part(&mut file).await {
                    Ok(p) => p,
                    Err(e) => {
                        let _ = writer.abort().await;
                        return Err(local("read", e));
                    }
                };
            }
            writer
                .finish()
                .await
                .map_err(|e| self.io_error("finish the upload of", key, e))?;
            Ok(())
        })
    }

    /// Streams the object to the file, chunk by chunk as the store sends them.
    fn get_to_file<'a>(
        &'a self,
        key: &'a str,
        path: &'a Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move {
            use tokio::io::AsyncWriteExt;
            let local = |action: &'static str, e: std::io::Error| StorageError::Io {
                action,
                path: path.to_path_buf(),
                source: e,
            };
            let mut chunks = self
                .store
                .get(&self.object(key))
                .await
                .map_err(|e| self.io_error("get", key, e))?
                .into_stream();
            let mut file = tokio::fs::File::create(path)
                .await
                .map_err(|e| local("create", e))?;
            while let Some(chunk) = chunks
                .try_next()
                .await
                .map_err(|e| self.io_error("read", key, e))?
            {
                file.write_all(&chunk)
                    .await
                    .map_err(|e| local("write", e))?;
            }
            file.flush().await.map_err(|e| local("write", e))
        })
    }
}

/// The size of each part of a multipart upload (S3 takes parts of 5 MiB to 5 GiB, at most
/// 10,000 of them: files up to 160 GiB).
pub const PART_BYTES: usize = 16 << 20;

/// Up to [`PART_BYTES`] more bytes of `file` (fewer only at its end; none past it).
async fn read_part(file: &mut tokio::fs::File) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut part = Vec::with_capacity(PART_BYTES);
    while part.len() < PART_BYTES {
        let n = (&mut *file)
            .take((PART_BYTES - part.len()) as u64)
            .read_to_end(&mut part)
            .await?;
        if n == 0 {
            break;
        }
    }
    Ok(part)
}

/// Checkpoints in an object store: the runtime's layout over [`ObjectStoreBlobs`]. See the
/// [crate documentation](crate) for the layout and an example.
#[derive(Clone, Debug)]
pub struct ObjectStoreCheckpointStorage {
    inner: BlobCheckpointStorage<ObjectStoreBlobs>,
}

impl ObjectStoreCheckpointStorage {
    /// Checkpoints under `prefix` in `store`, keeping the newest `retained`; `location` names
    /// the place for people (for example the bucket's URL). Does no I/O.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: impl Into<ObjectPath>,
        location: impl Into<String>,
        retained: NonZeroUsize,
    ) -> Self {
        let blobs = ObjectStoreBlobs::new(store, prefix, location);
        ObjectStoreCheckpointStorage {
            inner: BlobCheckpointStorage::over(blobs, retained),
        }
    }

    /// The S3 options set in the standard AWS variables of this process (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ENDPOINT`, `AWS_ALLOW_HTTP`), as
    /// [`from_url`](Self::from_url) takes them: what every process of a cluster passes, so
    /// that they all reach the same bucket.
    ///
    /// ```
    /// let options = sluice_object_store::ObjectStoreCheckpointStorage::aws_options_from_env();
    /// assert!(options.iter().all(|(k, _)| k.starts_with("aws_")));
    /// ```
    pub fn aws_options_from_env() -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", "aws_access_key_id"),
            ("AWS_SECRET_ACCESS_KEY", "aws_secret_access_key"),
            ("AWS_REGION", "aws_region"),
            ("AWS_ENDPOINT", "aws_endpoint"),
            ("AWS_ALLOW_HTTP", "aws_allow_http"),
        ]
        .into_iter()
        .filter_map(|(var, key)| std::env::var(var).ok().map(|v| (key.to_string(), v)))
        .collect()
    }

    /// Checkpoints at `url` (`s3://bucket/prefix`, `gs://…`, `az://…`, `file:///dir`,
    /// `memory:///prefix`), configured by `options` in `object_store`'s names (for S3:
    /// `aws_access_key_id`, `aws_secret_access_key`, `aws_region`, `aws_endpoint`,
    /// `aws_allow_http`, …; unset ones are read from the usual environment variables by the
    /// store's client where it does so). Does no I/O.
    pub fn from_url<I, K, V>(url: &str, options: I, retained: NonZeroUsize) -> Result<Self, Error>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: Into<String>,
    {
        let parsed = url::Url::parse(url).map_err(|source| Error::Url {
            url: url.to_owned(),
            source,
        })?;
        let (store, prefix) =
            object_store::parse_url_opts(&parsed, options).map_err(|source| Error::Store {
                url: url.to_owned(),
                source,
            })?;
        Ok(Self::new(
            Arc::from(store),
            prefix,
            url.trim_end_matches('/'),
            retained,
        ))
    }

    /// How many completed checkpoints are kept.
    pub fn retained(&self) -> NonZeroUsize {
        self.inner.retained()
    }

    /// The objects the checkpoints are stored in.
    pub fn blobs(&self) -> &ObjectStoreBlobs {
        self.inner.blobs()
    }

    /// Reads and verifies the checkpoint in the folder `dir` below the prefix (`chk-7`, or any
    /// name a checkpoint was copied to); never falls back. A missing or damaged object, the
    /// `_metadata` included, is the error, naming that object.
    pub async fn load_at(
        &self,
        dir: &str,
        job_fingerprint: &str,
    ) -> Result<RestoredCheckpoint, StorageError> {
        self.inner.load_at(dir, job_fingerprint).await
    }
}

impl CheckpointStorage for ObjectStoreCheckpointStorage {
    fn location(&self) -> String {
        self.inner.location()
    }

    fn initialize(&self) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        self.inner.initialize()
    }

    fn write_state(
        &self,
        id: CheckpointId,
        node: NodeId,
        subtask: SubtaskIndex,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<StateFileHandle, StorageError>> {
        self.inner.write_state(id, node, subtask, payload)
    }

    fn write_coordinator_state(
        &self,
        id: CheckpointId,
        node: NodeId,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<CoordinatorStateHandle, StorageError>> {
        self.inner.write_coordinator_state(id, node, payload)
    }

    fn complete(
        &self,
        metadata: CheckpointMetadata,
    ) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        self.inner.complete(metadata)
    }

    fn discard(&self, id: CheckpointId) -> BoxFuture<'_, Result<(), StorageError>> {
        self.inner.discard(id)
    }

    fn completed(&self) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        self.inner.completed()
    }

    fn latest_valid<'a>(
        &'a self,
        job_fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<RestoreOutcome, StorageError>> {
        self.inner.latest_valid(job_fingerprint)
    }

    fn read_state<'a>(
        &'a self,
        id: CheckpointId,
        handle: &'a StateFileHandle,
    ) -> BoxFuture<'a, Result<Vec<u8>, StorageError>> {
        self.inner.read_state(id, handle)
    }
    fn load<'a>(
        &'a self,
        id: CheckpointId,
        job_fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<RestoredCheckpoint, StorageError>> {
        self.inner.load(id, job_fingerprint)
    }
    fn write_shared<'a>(
        &'a self,
        key: &'a str,
        path: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        self.inner.write_shared(key, path)
    }
    fn delete_shared<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
        self.inner.delete_shared(key)
    }
    fn fetch_shared<'a>(
        &'a self,
        key: &'a str,
        path: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        self.inner.fetch_shared(key, path)
    }

    fn shared_present<'a>(
        &'a self,
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<std::collections::BTreeSet<String>, StorageError>> {
        self.inner.shared_present(keys)
    }
}

#[cfg(test)]
mod tests;
