//! [`LookupError`]: why a lookup failed, always naming the server it was sent to.

use std::time::Duration;

/// The error of a boxed cause (a client library's error).
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A failed lookup. Every variant names the server (its address, never its password).
///
/// Connection failures ([`Connection`](LookupError::Connection)) are retried by
/// [`Lookup`](crate::Lookup) with backoff; when the server stays down, the lookup fails with
/// [`Unavailable`](LookupError::Unavailable), which fails the job.
///
/// ```
/// use sluice_lookup::LookupError;
/// use std::time::Duration;
///
/// let e = LookupError::Unavailable {
///     server: "redis at 127.0.0.1:6379".into(),
///     attempts: 5,
///     waited: Duration::from_millis(1500),
///     last: "Connection refused (os error 111)".into(),
/// };
/// assert_eq!(
///     e.to_string(),
///     "redis at 127.0.0.1:6379 is unavailable: 5 attempts over 1.5s failed, the last with: Connection refused (os error 111)"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The server could not be reached, or the connection broke or timed out: worth retrying.
    #[error("cannot reach {server}: {source}")]
    Connection {
        /// The server.
        server: String,
        /// The client's error.
        source: Cause,
    },
    /// Connection failures went on after every retry.
    #[error(
        "{server} is unavailable: {attempts} attempts over {waited:?} failed, the last with: {last}"
    )]
    Unavailable {
        /// The server.
        server: String,
        /// How many attempts were made.
        attempts: u32,
        /// How long the retries waited in total.
        waited: Duration,
        /// The last attempt's error.
        last: String,
    },
    /// The server answered with an error (a wrong query, a wrong type): not retried.
    #[error("{server} rejected the lookup: {source}")]
    Rejected {
        /// The server.
        server: String,
        /// The server's error.
        source: Cause,
    },
    /// The server's answer does not fit the lookup (wrong number of values, a key of the wrong
    /// type): not retried.
    #[error("unexpected answer from {server}: {reason}")]
    Answer {
        /// The server.
        server: String,
        /// What was wrong.
        reason: String,
    },
    /// The lookup's configuration is invalid (a malformed URL, ...).
    #[error("invalid lookup configuration for {server}: {reason}")]
    Config {
        /// The server (as far as it could be read).
        server: String,
        /// What is wrong.
        reason: String,
    },
}

impl LookupError {
    /// Whether retrying may help (the connection failed).
    pub fn is_transient(&self) -> bool {
        matches!(self, LookupError::Connection { .. })
    }
}
