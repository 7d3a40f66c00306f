//! [`SourceError`]: what the source coordinator's context refuses (assignments to readers that
//! are not registered, calls it cannot make) and what a split source's configuration gets wrong.

use sluice_core::SubtaskIndex;

/// An error of the split source machinery.
///
/// ```
/// use sluice_source::SourceError;
/// let e = SourceError::UnregisteredReader { subtask: 3, splits: "[a]".into() };
/// assert_eq!(
///     e.to_string(),
///     "cannot assign splits [a] to subtask 3 because the subtask has no registered reader"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// An assignment named a subtask without a registered reader.
    #[error(
        "cannot assign splits {splits} to subtask {subtask} because the subtask has no registered reader"
    )]
    UnregisteredReader {
        /// The subtask.
        subtask: SubtaskIndex,
        /// The splits, as their ids.
        splits: String,
    },
    /// A subtask index not below the parallelism.
    #[error("subtask {subtask} does not exist: the source has parallelism {parallelism}")]
    NoSuchSubtask {
        /// The subtask.
        subtask: SubtaskIndex,
        /// The source's parallelism.
        parallelism: usize,
    },
    /// The same attempt of a subtask registered its reader twice.
    #[error("the reader of subtask {subtask}, attempt {attempt} is already registered")]
    DuplicateReader {
        /// The subtask.
        subtask: SubtaskIndex,
        /// The attempt.
        attempt: sluice_core::AttemptNumber,
    },
    /// A [`NumberSequenceSource`](crate::NumberSequenceSource) whose first number is above its
    /// last (Flink refuses it too: `'from' must be <= 'to'`).
    #[error("the sequence from {from} to {to} is descending: `from` must not be greater than `to`")]
    DescendingSequence {
        /// The first number asked for.
        from: u64,
        /// The last number asked for.
        to: u64,
    },
    /// A [`FileSource`](crate::FileSource)'s directory does not exist.
    #[error("directory {} does not exist", path.display())]
    NoSuchDirectory {
        /// The path given to the source.
        path: std::path::PathBuf,
    },
    /// A [`FileSource`](crate::FileSource)'s path exists but is not a directory (a regular file,
    /// say): the source reads the files of a directory.
    #[error("{} is not a directory: a file source reads the files in a directory", path.display())]
    NotADirectory {
        /// The path given to the source.
        path: std::path::PathBuf,
    },
    /// A [`FileSource`](crate::FileSource)'s path could not be inspected.
    #[error("cannot read the metadata of {}: {source}", path.display())]
    DirectoryMetadata {
        /// The path given to the source.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// An event or a state could not be encoded or decoded.
    #[error("cannot encode or decode {what}: {reason}")]
    Codec {
        /// What was being encoded or decoded.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// A call into the coordinator thread failed.
    #[error(transparent)]
    Call(#[from] sluice_coordinator::CallError),
    /// Work could not be queued on the coordinator's thread or workers.
    #[error(transparent)]
    Submit(#[from] sluice_coordinator::SubmitError),
}

impl SourceError {
    pub(crate) fn codec(what: &'static str, e: impl std::fmt::Display) -> Self {
        SourceError::Codec {
            what,
            reason: e.to_string(),
        }
    }
}
