//! Blobs in memory: the [`BlobStore`] the layout's own tests run against, and a checkpoint
//! storage for tests that need no disk.

use super::StorageError;
use super::blob::{BlobStore, is_below};
use futures::future::BoxFuture;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Blobs in a map in memory, shared by its clones. Nothing survives the process.
///
/// ```
/// use sluice_runtime::storage::{BlobCheckpointStorage, CheckpointStorage, MemoryBlobStore};
/// use std::num::NonZeroUsize;
///
/// let storage = BlobCheckpointStorage::over(MemoryBlobStore::new(), NonZeroUsize::MIN);
/// assert_eq!(storage.location(), "memory://");
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryBlobStore {
    blobs: Arc<Mutex<BTreeMap<String, Vec<u8>>>>,
}

impl MemoryBlobStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
}

impl BlobStore for MemoryBlobStore {
    fn location(&self) -> String {
        "memory://".into()
    }

    fn path_of(&self, key: &str) -> PathBuf {
        PathBuf::from(format!("memory://{key}"))
    }

    fn put<'a>(&'a self, key: &'a str, bytes: Vec<u8>) -> BoxFuture<'a, Result<(), StorageError>> {
        sluice_core::sync::lock(&self.blobs).insert(key.to_owned(), bytes);
        Box::pin(async { Ok(()) })
    }

    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<u8>, StorageError>> {
        let found = sluice_core::sync::lock(&self.blobs).get(key).cloned();
        let result = found.ok_or_else(|| StorageError::Missing {
            path: self.path_of(key),
        });
        Box::pin(async { result })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>, StorageError>> {
        let keys = sluice_core::sync::lock(&self.blobs)
            .keys()
            .filter(|k| is_below(k, prefix))
            .cloned()
            .collect();
        Box::pin(async { Ok(keys) })
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
        sluice_core::sync::lock(&self.blobs).remove(key);
        Box::pin(async { Ok(()) })
    }
}
