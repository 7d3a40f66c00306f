//! The blob interface every checkpoint storage is written over: put, get, list and delete of
//! whole byte strings by key, and whole local files put and got without holding them in
//! memory where the backend can. A backend (the local disk in `local.rs`, memory in `memory.rs`,
//! object stores in `sluice-object-store`) implements only this; the layout, framing,
//! verification and retention of checkpoints live once in `layout.rs`.
//!
//! Keys are relative, `/`-separated paths of plain segments (`chk-7/_metadata`): no empty
//! segment, no `.` or `..`, no segment starting with `.` (the local disk keeps its temporary
//! files under such names). A backend maps them below its own root.

use super::StorageError;
use futures::future::BoxFuture;
use std::fmt;
use std::path::{Path, PathBuf};

/// A store of blobs by key, the only thing a checkpoint storage backend implements.
///
/// Keys are relative, `/`-separated paths of plain segments (`chk-7/_metadata`): no empty
/// segment, no `.` or `..`, no segment starting with `.`. A backend maps them below its own
/// root.
///
/// The contract, which [`BlobCheckpointStorage`](super::BlobCheckpointStorage) relies on:
/// - [`put`](Self::put) replaces the blob at `key` whole: a reader sees the old blob or the new
///   one, never a part of either, and once `put` returns the blob is durable;
/// - [`get`](Self::get) of a key that holds no blob is [`StorageError::Missing`] naming
///   [`path_of`](Self::path_of) the key;
/// - [`list`](Self::list) of a prefix returns every key below it, segment by segment (`chk-1`
///   lists `chk-1/a` but not `chk-10/a`), in any order; a prefix that holds nothing lists
///   nothing;
/// - [`delete`](Self::delete) of a key that holds no blob is not an error.
///
/// Every method returns a future that must not block the tokio worker polling it (a backend
/// with blocking I/O does it on tokio's blocking pool). The trait is object safe.
pub trait BlobStore: Send + Sync + fmt::Debug {
    /// Where the blobs live, for people (a directory, a bucket's URL).
    fn location(&self) -> String;

    /// A path naming `key` (or the folder `key`; `""` is the root) for people and errors.
    fn path_of(&self, key: &str) -> PathBuf;

    /// Stores `bytes` at `key`, replacing what was there, atomically and durably.
    fn put<'a>(&'a self, key: &'a str, bytes: Vec<u8>) -> BoxFuture<'a, Result<(), StorageError>>;

    /// The blob at `key`; [`StorageError::Missing`] if there is none.
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<u8>, StorageError>>;

    /// Every key below the folder `prefix` (`""`: every key), in any order.
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>, StorageError>>;

    /// Removes the blob at `key`, if there is one.
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>>;

    /// Stores the content of the local file `path` at `key`, as [`put`](Self::put) does with
    /// bytes (the same contract). The default reads the file whole on the blocking pool; a
    /// backend overrides it to stream the file, or to link it, so that a large file (a keyed
    /// store's table file) never sits in memory. The caller does not change the file in place
    /// afterwards (the local disk may hard-link it).
    fn put_file<'a>(
        &'a self,
        key: &'a str,
        path: &'a Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move {
            let owned = path.to_path_buf();
            let bytes = tokio::task::spawn_blocking(move || std::fs::read(&owned))
                .await
                .map_err(|e| StorageError::Background(e.to_string()))?
                .map_err(|e| StorageError::io("read", path, e))?;
            self.put(key, bytes).await
        })
    }

    /// Writes the blob at `key` to the local file `path` (replaced if it exists);
    /// [`StorageError::Missing`] if there is none. The default holds the blob in memory on the
    /// way; a backend overrides it to stream.
    fn get_to_file<'a>(
        &'a self,
        key: &'a str,
        path: &'a Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        Box::pin(async move {
            let bytes = self.get(key).await?;
            let owned = path.to_path_buf();
            tokio::task::spawn_blocking(move || std::fs::write(&owned, bytes))
                .await
                .map_err(|e| StorageError::Background(e.to_string()))?
                .map_err(|e| StorageError::io("write", path, e))
        })
    }
}

/// The key of `name` inside the folder `dir` (`""`: the root).
pub(crate) fn join_key(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_owned()
    } else {
        format!("{dir}/{name}")
    }
}

/// Whether `key` is below the folder `prefix`, segment by segment.
pub(crate) fn is_below(key: &str, prefix: &str) -> bool {
    prefix.is_empty()
        || key
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_join_and_prefixes_match_by_segment() {
        assert_eq!(join_key("", "_metadata"), "_metadata");
        assert_eq!(join_key("chk-1", "_metadata"), "chk-1/_metadata");
        assert!(is_below("chk-1/a", "chk-1"));
        assert!(is_below("chk-1/a", ""));
        assert!(!is_below("chk-10/a", "chk-1"));
        assert!(!is_below("chk-1", "chk-1"));
    }
}
