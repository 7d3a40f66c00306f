//! [`AsyncCallError`]: why the async wait operator failed, always naming the input involved.

use sluice_core::UserError;
use std::fmt::Debug;
use std::time::Duration;

/// The longest input description put into an error message; longer ones are cut.
const MAX_INPUT_CHARS: usize = 1000;

/// A failure of the async wait operator. The runtime adds the operator and subtask when it fails
/// the job; this error adds the input (its `Debug` form) and the attempt.
///
/// ```
/// use sluice_async_io::AsyncCallError;
/// let e = AsyncCallError::failed(&"user-7", 2, "connection refused".into());
/// assert_eq!(
///     e.to_string(),
///     "async function failed on input \"user-7\" (attempt 2): connection refused"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
pub enum AsyncCallError {
    /// The future returned an error that is not retried (or no retry is left).
    #[error("async function failed on input {input} (attempt {attempt}): {source}")]
    Failed {
        /// The input's `Debug` form.
        input: String,
        /// The attempt that failed (the first call is 1).
        attempt: u32,
        /// The user's error.
        source: UserError,
    },
    /// `invoke`, the future, or the key function panicked.
    #[error("async function panicked on input {input} (attempt {attempt}): {message}")]
    Panicked {
        /// The input's `Debug` form.
        input: String,
        /// The attempt that panicked.
        attempt: u32,
        /// The panic message.
        message: String,
    },
    /// The timeout expired and the timeout handler returned an error (by default it does).
    #[error("async request on input {input} timed out after {timeout:?}: {source}")]
    TimedOut {
        /// The input's `Debug` form.
        input: String,
        /// The configured timeout.
        timeout: Duration,
        /// The handler's error.
        source: UserError,
    },
    /// The timeout handler panicked.
    #[error("the timeout handler panicked on input {input}: {message}")]
    TimeoutPanicked {
        /// The input's `Debug` form.
        input: String,
        /// The panic message.
        message: String,
    },
    /// A checkpointed entry could not be read back.
    #[error("cannot restore async wait state entry {index}: {reason}")]
    Restore {
        /// The entry's index in the restored state.
        index: usize,
        /// What was wrong with it.
        reason: String,
    },
    /// An in-flight input could not be written into the snapshot.
    #[error("cannot snapshot in-flight input {input}: {reason}")]
    Snapshot {
        /// The input's `Debug` form.
        input: String,
        /// The codec's error.
        reason: String,
    },
}

impl AsyncCallError {
    /// A [`Failed`](AsyncCallError::Failed) error for `input`.
    pub fn failed(input: &impl Debug, attempt: u32, source: UserError) -> Self {
        AsyncCallError::Failed {
            input: describe(input),
            attempt,
            source,
        }
    }
}

/// The `Debug` form of `input`, cut to a readable length.
pub(crate) fn describe(input: &impl Debug) -> String {
    let mut s = format!("{input:?}");
    if s.len() > MAX_INPUT_CHARS {
        let mut cut = MAX_INPUT_CHARS;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_inputs_are_cut() {
        let long = "é".repeat(2000);
        let d = describe(&long);
        assert!(d.len() <= MAX_INPUT_CHARS + 3);
        assert!(d.ends_with("..."));
    }
}
