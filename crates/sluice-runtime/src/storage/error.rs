//! Errors of checkpoint storage. Every error about a file names that file.

use sluice_core::codec::CodecError;
use std::io;
use std::path::PathBuf;

/// A checkpoint could not be written, found, or trusted.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The checkpoint directory cannot be created or written to.
    #[error("checkpoint directory {path} is not writable: {source}")]
    NotWritable {
        /// The directory.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },
    /// The path given for checkpoints cannot name a directory (for example, it is empty).
    #[error("checkpoint path {path:?} is not usable: {reason}")]
    InvalidPath {
        /// The path, as given.
        path: PathBuf,
        /// Why it is refused.
        reason: &'static str,
    },
    /// The path to restore from does not exist.
    #[error("checkpoint path {path} does not exist")]
    NotFound {
        /// The path, as given.
        path: PathBuf,
    },
    /// A file of a checkpoint does not exist.
    #[error("checkpoint file {path} is missing")]
    Missing {
        /// The missing file.
        path: PathBuf,
    },
    /// A file of a checkpoint exists but its content cannot be trusted.
    #[error("checkpoint file {path} is corrupt: {reason}")]
    Corrupt {
        /// The corrupt file.
        path: PathBuf,
        /// What is wrong with it.
        reason: Corruption,
    },
    /// The checkpoint was written by a job with a different job graph.
    #[error(
        "checkpoint {path} belongs to a different job graph (its fingerprint is {found:?}, this job's is {expected:?})"
    )]
    FingerprintMismatch {
        /// The checkpoint's metadata file.
        path: PathBuf,
        /// The fingerprint of the job being restored.
        expected: String,
        /// The fingerprint stored in the checkpoint.
        found: String,
    },
    /// The checkpoint already has its metadata: it is complete and is never written again.
    #[error("checkpoint {path} is already complete; it cannot be written again")]
    AlreadyComplete {
        /// The checkpoint directory.
        path: PathBuf,
    },
    /// The metadata handed to [`complete`](super::CheckpointStorage::complete) contradicts itself.
    #[error("invalid checkpoint metadata: {0}")]
    InvalidMetadata(String),
    /// Reading or writing a file failed.
    #[error("cannot {action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },
    /// The metadata could not be encoded.
    #[error("cannot encode checkpoint metadata: {0}")]
    Encode(#[from] CodecError),
    /// The background task that did the blocking I/O panicked or was cancelled.
    #[error("checkpoint storage I/O task failed: {0}")]
    Background(String),
}

impl StorageError {
    /// The file or directory the error is about, if it is about one.
    ///
    /// ```
    /// use sluice_runtime::storage::StorageError;
    /// use std::path::Path;
    ///
    /// let e = StorageError::Missing { path: "chk-3/_metadata".into() };
    /// assert_eq!(e.path(), Some(Path::new("chk-3/_metadata")));
    /// ```
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            StorageError::NotWritable { path, .. }
            | StorageError::InvalidPath { path, .. }
            | StorageError::NotFound { path }
            | StorageError::Missing { path }
            | StorageError::Corrupt { path, .. }
            | StorageError::FingerprintMismatch { path, .. }
            | StorageError::AlreadyComplete { path }
            | StorageError::Io { path, .. } => Some(path),
            StorageError::InvalidMetadata(_)
            | StorageError::Encode(_)
            | StorageError::Background(_) => None,
        }
    }

    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        StorageError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

/// What is wrong with a corrupt checkpoint file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Corruption {
    /// The file is shorter than its header.
    #[error("the file has {len} bytes, fewer than its {header}-byte header")]
    TooShort {
        /// The file's length.
        len: u64,
        /// The header's length.
        header: u64,
    },
    /// The file does not start with the expected magic bytes.
    #[error("bad magic bytes {found:02x?} (expected {expected:02x?})")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
        /// The bytes expected for this kind of file.
        expected: [u8; 4],
    },
    /// The file was written in a format version this build cannot read.
    #[error("unsupported format version {0}")]
    UnsupportedVersion(u32),
    /// The file is shorter than its header says.
    #[error(
        "truncated: the header announces {expected} payload bytes but only {actual} are present"
    )]
    Truncated {
        /// The payload length in the header.
        expected: u64,
        /// The payload bytes present.
        actual: u64,
    },
    /// The file is longer than its header says.
    #[error("{actual} payload bytes present but the header announces {expected}")]
    Oversized {
        /// The payload length in the header.
        expected: u64,
        /// The payload bytes present.
        actual: u64,
    },
    /// The payload's checksum is not the one stored in the header.
    #[error(
        "checksum mismatch: the header says crc32 {stored:#010x}, the payload has {computed:#010x}"
    )]
    ChecksumMismatch {
        /// The checksum in the header.
        stored: u32,
        /// The checksum of the payload read.
        computed: u32,
    },
    /// The file is intact but is not the one the metadata describes.
    #[error("the metadata expects {expected} but the file has {found}")]
    MetadataMismatch {
        /// What the metadata says (length and checksum).
        expected: String,
        /// What the file has.
        found: String,
    },
    /// The metadata's payload cannot be decoded.
    #[error("undecodable metadata: {0}")]
    Undecodable(String),
    /// The metadata decodes but contradicts itself or its directory.
    #[error("inconsistent metadata: {0}")]
    Inconsistent(String),
}
