//! Checkpoint storage: where the state of a checkpoint is written, verified and read back.
//!
//! A checkpoint N is one state file per (operator, subtask), whose payload is opaque bytes, plus
//! a metadata file written **last**. The metadata ([`CheckpointMetadata`]) records the job
//! fingerprint, the checkpoint id, its timestamp, every operator's parallelism and max
//! parallelism, and each state file's name, length and CRC32. A checkpoint without metadata is
//! incomplete and is garbage.
//!
//! Two levels, so that the layout is written once:
//! - [`CheckpointStorage`] is the interface the job master and task managers use. Its methods
//!   are asynchronous and return boxed futures (the trait is object safe:
//!   `Arc<dyn CheckpointStorage>`); implementations must not block the calling tokio worker.
//! - [`BlobStore`] (`blob.rs`) is what a backend implements: put, get, list and delete of whole
//!   blobs by key. [`BlobCheckpointStorage`] (`layout.rs`) is the [`CheckpointStorage`] over any
//!   of them: the layout, the framing (`format.rs`), the checks on read back (`verify.rs`), the
//!   newest-valid fallback and retention. The backends: [`LocalBlobStore`] (`local.rs`, a
//!   directory; [`LocalCheckpointStorage`] is the layout over it), [`MemoryBlobStore`]
//!   (`memory.rs`), and object stores in `sluice-object-store`. `shared_uploads.rs` keeps one
//!   upload per shared file at a time, which a second writer joins.
//!
//! The layout, in any of them:
//!
//! ```text
//! <base>/chk-7/node-0.subtask-0.state   20-byte header (magic, version, length, CRC32) + payload
//! <base>/chk-7/node-0.subtask-1.state
//! <base>/chk-7/node-2.coordinator.state  the state of operator 2's coordinator
//! <base>/chk-7/_metadata                same header + the postcard-encoded metadata, put last
//! <base>/shared/<key>                   a keyed store's table file (incremental checkpoints),
//!                                       kept while a retained checkpoint's metadata lists it
//! ```
//!
//! Only the last K completed checkpoints are retained; a checkpoint is deleted metadata first,
//! so that a deletion cut short leaves an incomplete checkpoint, never a complete one with files
//! missing. On restore, [`latest_valid`](CheckpointStorage::latest_valid) verifies checkpoints
//! from newest to oldest and returns the newest intact one, reporting every skipped checkpoint
//! with an error that names the bad file; [`load`](CheckpointStorage::load) and
//! [`LocalCheckpointStorage::load_dir`] restore one given checkpoint and fail instead of
//! falling back.
//!
//! ```
//! use sluice_core::{CheckpointId, NodeId};
//! use sluice_runtime::storage::{
//!     CheckpointMetadata, CheckpointStorage, LocalCheckpointStorage, OperatorInfo,
//! };
//! use std::num::NonZeroUsize;
//!
//! let tmp = tempfile::tempdir().unwrap();
//! let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! rt.block_on(async {
//!     let storage =
//!         LocalCheckpointStorage::new(tmp.path().join("chk"), NonZeroUsize::new(2).unwrap());
//!     storage.initialize().await.unwrap();
//!
//!     let id = CheckpointId(1);
//!     let file = storage.write_state(id, NodeId(0), 0, b"offset=42".to_vec()).await.unwrap();
//!     let metadata = CheckpointMetadata {
//!         job_fingerprint: "my-job-v1".into(),
//!         checkpoint_id: id,
//!         timestamp_ms: 1_700_000_000_000,
//!         operators: vec![OperatorInfo { node: NodeId(0), parallelism: 1, max_parallelism: 128 }],
//!         state_files: vec![file],
//!         coordinator_states: vec![],
//!         shared_files: vec![],
//!     };
//!     storage.complete(metadata).await.unwrap();
//!
//!     let outcome = storage.latest_valid("my-job-v1").await.unwrap();
//!     let restored = outcome.restored.unwrap();
//!     assert_eq!(restored.id(), id);
//!     assert_eq!(restored.state(NodeId(0), 0), Some(&b"offset=42"[..]));
//!     assert!(outcome.skipped.is_empty());
//! });
//! ```

mod blob;
#[cfg(any(test, feature = "testing"))]
pub mod contract;
mod error;
pub(crate) mod format;
mod fs;
mod layout;
mod local;
mod memory;
mod metadata;
pub(crate) mod shared_uploads;
#[cfg(test)]
mod tests;
mod verify;

pub use blob::BlobStore;
pub use error::{Corruption, StorageError};
pub use format::state_file_name;
pub use layout::BlobCheckpointStorage;
pub use local::{LocalBlobStore, LocalCheckpointStorage};
pub(crate) use local::{RestorePathKind, restore_path_kind, validate_directory};
pub use memory::MemoryBlobStore;
pub use metadata::{
    CheckpointMetadata, CoordinatorStateHandle, OperatorInfo, RestoreOutcome, RestoredCheckpoint,
    SkippedCheckpoint, StateFileHandle,
};

use futures::future::BoxFuture;
use sluice_core::{CheckpointId, NodeId, SubtaskIndex};

/// Where checkpoints are written and read back. See the [module documentation](self).
///
/// Every method returns a future that does not block the tokio worker polling it. The protocol
/// of one checkpoint N: [`write_state`](Self::write_state) for each operator subtask (possibly
/// concurrently), then [`complete`](Self::complete) with the collected handles, which writes the
/// metadata last and then retires old checkpoints; or [`discard`](Self::discard) if N is
/// aborted. Before the first checkpoint of a run, [`initialize`](Self::initialize) removes the
/// garbage of incomplete checkpoints. The caller must not run `initialize` or
/// [`latest_valid`](Self::latest_valid) while a checkpoint is being written: both remove
/// incomplete checkpoints. Checkpoint ids of a new run must continue after the ones already
/// stored (see [`completed`](Self::completed)): retention keeps the highest ids.
pub trait CheckpointStorage: Send + Sync + std::fmt::Debug {
    /// Where the checkpoints live, for people (printed when a job starts).
    fn location(&self) -> String;

    /// Prepares the storage for a run: removes incomplete checkpoints. Returns the ids removed.
    fn initialize(&self) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>>;

    /// Stores the state of one operator subtask for checkpoint `id` and returns the handle to
    /// list in the metadata. Refused once `id` is complete.
    fn write_state(
        &self,
        id: CheckpointId,
        node: NodeId,
        subtask: SubtaskIndex,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<StateFileHandle, StorageError>>;

    /// Stores the state of the coordinator of operator `node` for checkpoint `id` and returns the
    /// handle to list in the metadata's coordinator section. Refused once `id` is complete.
    fn write_coordinator_state(
        &self,
        id: CheckpointId,
        node: NodeId,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<CoordinatorStateHandle, StorageError>>;

    /// Completes a checkpoint: checks the metadata, makes the state files durable, writes the
    /// metadata last and atomically, then removes the completed checkpoints beyond the retained
    /// number. Returns the ids removed by retention.
    fn complete(
        &self,
        metadata: CheckpointMetadata,
    ) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>>;

    /// Removes checkpoint `id` (aborted, or no longer wanted). Removing one that does not exist
    /// is not an error.
    fn discard(&self, id: CheckpointId) -> BoxFuture<'_, Result<(), StorageError>>;

    /// The ids of the checkpoints that have metadata, oldest first (not verified).
    fn completed(&self) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>>;

    /// Finds the newest checkpoint that passes every check, newest to oldest. Incomplete
    /// checkpoints are removed; each skipped checkpoint is reported with the error naming its bad
    /// file. A checkpoint of another job graph is an error, not a reason to fall back.
    fn latest_valid<'a>(
        &'a self,
        job_fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<RestoreOutcome, StorageError>>;

    /// Reads and verifies checkpoint `id`; any problem is the error (no fallback).
    fn load<'a>(
        &'a self,
        id: CheckpointId,
        job_fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<RestoredCheckpoint, StorageError>>;

    /// Reads back one state file of checkpoint `id` that a task manager or the job master wrote
    /// (`handle` as [`write_state`](Self::write_state) returned it) and checks its length and
    /// checksum against the handle: what a task manager does to restore by handle.
    fn read_state<'a>(
        &'a self,
        id: CheckpointId,
        handle: &'a StateFileHandle,
    ) -> BoxFuture<'a, Result<Vec<u8>, StorageError>>;

    /// Stores the local file at `path` as shared file `key` (below `shared/`), the table file of
    /// a keyed store that later checkpoints refer to without writing it again. A shared file
    /// stays until no retained checkpoint's metadata lists it.
    fn write_shared<'a>(
        &'a self,
        key: &'a str,
        path: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<(), StorageError>>;

    /// Removes shared file `key`, which no checkpoint lists (a keyed store uploaded it ahead of
    /// a checkpoint that never took it). Removing one that does not exist is not an error.
    fn delete_shared<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>>;

    /// Brings shared file `key` to the local file `path` (a new file), for a restore.
    fn fetch_shared<'a>(
        &'a self,
        key: &'a str,
        path: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<(), StorageError>>;

    /// Which of the shared files `keys` the storage holds now: a store restored after a
    /// failover from a checkpoint in memory refers to that checkpoint's files where they are
    /// still there, rather than writing them again. A storage that cannot tell holds none (the
    /// default), and the files are written again.
    fn shared_present<'a>(
        &'a self,
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<std::collections::BTreeSet<String>, StorageError>> {
        let _ = keys;
        Box::pin(async { Ok(std::collections::BTreeSet::new()) })
    }
}
