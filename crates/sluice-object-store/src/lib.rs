//! Checkpoint storage on object stores for sluice: S3 and S3-compatible stores (MinIO, moto,
//! Ceph), Google Cloud Storage and Azure Blob Storage (cargo features `gcp`, `azure`), local
//! files and memory, through the [`object_store`] crate. A job writes its checkpoints where a
//! job master started on another machine finds them, and resumes from the newest with
//! [`resume_from_latest_checkpoint`](sluice_runtime::StreamEnvironment::resume_from_latest_checkpoint).
//!
//! Where to find things:
//! - [`ObjectStoreCheckpointStorage`]: the [`CheckpointStorage`] over any [`ObjectStore`], made
//!   from one ([`new`](ObjectStoreCheckpointStorage::new)) or from a URL and options
//!   ([`from_url`](ObjectStoreCheckpointStorage::from_url));
//! - [`Error`]: a URL or configuration that cannot name a store.
//!
//! The layout is the local storage's, under the URL's path (`<prefix>/chk-7/node-0.subtask-1.state`,
//! `<prefix>/chk-7/_metadata`), and every file has the same framing
//! ([`sluice_runtime::storage::format`]), so a checkpoint copied between a directory and a
//! bucket stays readable. An object store has no rename and no directories: each file is one
//! `PUT`, which the store makes visible whole or not at all, and the metadata object is put
//! last, after every state file it lists was checked to exist; a checkpoint without it is
//! incomplete and removed by [`initialize`](CheckpointStorage::initialize). Retention deletes
//! whole checkpoints beyond the newest `retained`, metadata first, so a deletion cut short
//! leaves an incomplete checkpoint rather than a complete one with files missing. The crate is separate from the runtime so
//! that a job in local mode does not compile the cloud clients.
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

use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sluice_core::{CheckpointId, NodeId, SubtaskIndex, codec};
use sluice_runtime::storage::format::{self, FileKind, METADATA_FILE};
use sluice_runtime::storage::{
    CheckpointMetadata, CheckpointStorage, CoordinatorStateHandle, RestoreOutcome,
    RestoredCheckpoint, SkippedCheckpoint, StateFileHandle, StorageError, assemble,
    decode_metadata,
};
use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;

/// How many objects of one checkpoint are read or deleted at a time.
const CONCURRENT_REQUESTS: usize = 8;

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

/// Checkpoints in an object store. See the [crate documentation](crate) for the layout and an
/// example.
///
/// Every method is asynchronous I/O on the store's client (no blocking pool, no blocked worker).
#[derive(Clone, Debug)]
pub struct ObjectStoreCheckpointStorage {
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    /// The store's URL with the prefix, for people and error messages.
    location: String,
    retained: NonZeroUsize,
}

/// What a listing found of one checkpoint.
#[derive(Debug, Default)]
struct Listed {
    objects: Vec<ObjectPath>,
    complete: bool,
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
        ObjectStoreCheckpointStorage {
            store,
            prefix: prefix.into(),
            location: location.into(),
            retained,
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
        self.retained
    }

    /// The object of `file` in checkpoint `id`.
    fn object(&self, id: CheckpointId, file: &str) -> ObjectPath {
        self.checkpoint_prefix(id).join(file)
    }

    fn checkpoint_prefix(&self, id: CheckpointId) -> ObjectPath {
        self.prefix
            .clone()
            .join(format::checkpoint_dir_name(id).as_str())
    }

    /// A path naming `object` for errors: the store's URL and the object's key.
    fn display(&self, object: &ObjectPath) -> PathBuf {
        let relative = object
            .as_ref()
            .strip_prefix(self.prefix.as_ref())
            .unwrap_or(object.as_ref())
            .trim_start_matches('/');
        PathBuf::from(format!("{}/{relative}", self.location))
    }

    fn io_error(
        &self,
        action: &'static str,
        object: &ObjectPath,
        e: object_store::Error,
    ) -> StorageError {
        match e {
            object_store::Error::NotFound { .. } => StorageError::Missing {
                path: self.display(object),
            },
            e => StorageError::Io {
                action,
                path: self.display(object),
                source: std::io::Error::other(e),
            },
        }
    }

    /// Every checkpoint under the prefix with its objects, by id (one recursive listing).
    async fn list_checkpoints(&self) -> Result<BTreeMap<CheckpointId, Listed>, StorageError> {
        let mut listed: BTreeMap<CheckpointId, Listed> = BTreeMap::new();
        let mut objects = self.store.list(Some(&self.prefix));
        while let Some(meta) = objects
            .try_next()
            .await
            .map_err(|e| self.io_error("list", &self.prefix, e))?
        {
            // `<prefix>/chk-N/<file>`: anything else under the prefix is not ours.
            let Some((id, is_metadata)) = checkpoint_file(&meta.location, &self.prefix) else {
                continue;
            };
            let entry = listed.entry(id).or_default();
            entry.complete |= is_metadata;
            entry.objects.push(meta.location);
        }
        Ok(listed)
    }

    /// Deletes `objects` (a checkpoint's): its metadata first, then the rest a few at a time,
    /// so that a deletion that stops half-way leaves an incomplete checkpoint (garbage that
    /// `initialize` removes), never a complete one with files missing.
    async fn delete_all(&self, objects: Vec<ObjectPath>) -> Result<(), StorageError> {
        let (metadata, rest) = metadata_first(objects);
        for o in metadata {
            self.delete_one(o).await?;
        }
        futures::stream::iter(rest)
            .map(|o| self.delete_one(o))
            .buffer_unordered(CONCURRENT_REQUESTS)
            .try_collect()
            .await
    }

    async fn delete_one(&self, object: ObjectPath) -> Result<(), StorageError> {
        match self.store.delete(&object).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.io_error("delete", &object, e)),
        }
    }

    /// Refuses to write into checkpoint `id` once its metadata exists.
    async fn refuse_if_complete(&self, id: CheckpointId) -> Result<(), StorageError> {
        let metadata = self.object(id, METADATA_FILE);
        match self.store.head(&metadata).await {
            Ok(_) => Err(StorageError::AlreadyComplete {
                path: self.display(&self.checkpoint_prefix(id)),
            }),
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.io_error("inspect", &metadata, e)),
        }
    }

    /// Puts a framed file into checkpoint `id`, unless the checkpoint is complete.
    async fn put_framed(
        &self,
        id: CheckpointId,
        file_name: &str,
        kind: FileKind,
        payload: &[u8],
    ) -> Result<format::Header, StorageError> {
        self.refuse_if_complete(id).await?;
        let object = self.object(id, file_name);
        let framed = format::frame(kind, payload);
        self.store
            .put(&object, PutPayload::from(framed))
            .await
            .map_err(|e| self.io_error("put", &object, e))?;
        Ok(format::header_of(payload))
    }

    /// Reads a framed file and checks its framing.
    async fn get_framed(
        &self,
        object: &ObjectPath,
        kind: FileKind,
    ) -> Result<(format::Header, Vec<u8>), StorageError> {
        let bytes = self
            .store
            .get(object)
            .await
            .map_err(|e| self.io_error("get", object, e))?
            .bytes()
            .await
            .map_err(|e| self.io_error("read", object, e))?;
        let (header, payload) =
            format::unframe(kind, &bytes).map_err(|reason| StorageError::Corrupt {
                path: self.display(object),
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
        self.refuse_if_complete(id).await?;
        // Every file the metadata lists must be there before the metadata can be.
        let present: Vec<ObjectPath> = self
            .store
            .list(Some(&self.checkpoint_prefix(id)))
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .map_err(|e| self.io_error("list", &self.checkpoint_prefix(id), e))?;
        let listed = metadata.state_files.iter().map(|f| &f.file_name);
        for name in listed.chain(metadata.coordinator_states.iter().map(|c| &c.file_name)) {
            let object = self.object(id, name);
            if !present.contains(&object) {
                return Err(StorageError::Missing {
                    path: self.display(&object),
                });
            }
        }
        let bytes = codec::encode(&metadata)?;
        self.put_framed(id, METADATA_FILE, FileKind::Metadata, &bytes)
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
        for (id, l) in completed.into_iter().take(excess) {
            if id == current {
                continue;
            }
            match self.delete_all(l.objects).await {
                Ok(()) => removed.push(id),
                Err(e) => tracing::warn!("cannot remove retired checkpoint {id}: {e}"),
            }
        }
        removed
    }

    async fn load_checkpoint(
        &self,
        id: CheckpointId,
        expected: Option<CheckpointId>,
        fingerprint: &str,
    ) -> Result<RestoredCheckpoint, StorageError> {
        let meta_object = self.object(id, METADATA_FILE);
        let (_, bytes) = self.get_framed(&meta_object, FileKind::Metadata).await?;
        let metadata = decode_metadata(&self.display(&meta_object), &bytes, expected, fingerprint)?;
        // The state files, fetched side by side, then checked against the metadata in order.
        // (Loops rather than closures: a closure over a borrowed handle here keeps the boxed
        // future from proving `Send`, rust-lang/rust#64552.)
        let mut names: Vec<String> = Vec::new();
        for f in &metadata.state_files {
            names.push(f.file_name.clone());
        }
        for c in &metadata.coordinator_states {
            names.push(c.file_name.clone());
        }
        let mut files: HashMap<String, (format::Header, Vec<u8>)> = futures::stream::iter(names)
            .map(|name| async move {
                let file = self
                    .get_framed(&self.object(id, &name), FileKind::State)
                    .await?;
                Ok::<_, StorageError>((name, file))
            })
            .buffer_unordered(CONCURRENT_REQUESTS)
            .try_collect()
            .await?;
        let location = self.display(&self.checkpoint_prefix(id));
        assemble(location, metadata, |name| {
            files.remove(name).ok_or_else(|| StorageError::Missing {
                path: self.display(&self.object(id, name)),
            })
        })
    }

    async fn latest(&self, fingerprint: &str) -> Result<RestoreOutcome, StorageError> {
        let mut outcome = RestoreOutcome::default();
        for (id, l) in self.list_checkpoints().await?.into_iter().rev() {
            if !l.complete {
                // Garbage of an unfinished checkpoint; a failed removal does not prevent a
                // restore.
                if let Err(e) = self.delete_all(l.objects).await {
                    tracing::warn!("cannot remove incomplete checkpoint {id}: {e}");
                }
                outcome.skipped.push(SkippedCheckpoint {
                    id,
                    error: StorageError::Missing {
                        path: self.display(&self.object(id, METADATA_FILE)),
                    },
                });
            } else if outcome.restored.is_none() {
                match self.load_checkpoint(id, Some(id), fingerprint).await {
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

/// The checkpoint of `object` if it is `<prefix>/chk-N/<file>`, and whether the file is the
/// metadata.
fn checkpoint_file(object: &ObjectPath, prefix: &ObjectPath) -> Option<(CheckpointId, bool)> {
    let mut parts = object.prefix_match(prefix)?;
    let (dir, file) = (parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let id = format::parse_checkpoint_dir_name(dir.as_ref())?;
    Some((id, file.as_ref() == METADATA_FILE))
}

/// `objects` split into the metadata objects and the others, the order in which a checkpoint
/// is deleted.
fn metadata_first(objects: Vec<ObjectPath>) -> (Vec<ObjectPath>, Vec<ObjectPath>) {
    objects
        .into_iter()
        .partition(|o| o.filename() == Some(METADATA_FILE))
}

impl CheckpointStorage for ObjectStoreCheckpointStorage {
    fn location(&self) -> String {
        self.location.clone()
    }

    fn initialize(&self) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        Box::pin(async move {
            let mut removed = Vec::new();
            for (id, l) in self.list_checkpoints().await? {
                if !l.complete {
                    self.delete_all(l.objects).await?;
                    removed.push(id);
                }
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
                .put_framed(id, &file_name, FileKind::State, &payload)
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
                .put_framed(id, &file_name, FileKind::State, &payload)
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
            let objects: Vec<ObjectPath> = self
                .store
                .list(Some(&self.checkpoint_prefix(id)))
                .map_ok(|m| m.location)
                .try_collect()
                .await
                .map_err(|e| self.io_error("list", &self.checkpoint_prefix(id), e))?;
            self.delete_all(objects).await
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
        Box::pin(self.latest(job_fingerprint))
    }

    fn load<'a>(
        &'a self,
        id: CheckpointId,
        job_fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<RestoredCheckpoint, StorageError>> {
        Box::pin(self.load_checkpoint(id, Some(id), job_fingerprint))
    }
}

#[cfg(test)]
mod tests;
