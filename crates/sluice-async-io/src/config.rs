//! Configuration limits and the error that names an invalid configuration value.
//!
//! Every setting of the async wait operator is checked when the operator is built
//! ([`AsyncWait::build`](crate::AsyncWait::build), [`AsyncDataStream`](crate::AsyncDataStream)), so
//! a wrong value is reported before the job starts, with the value in the message.

use std::time::Duration;

/// The number of requests in flight per subtask when none is given (Flink's default).
pub const DEFAULT_CAPACITY: usize = 100;

/// How long a batch waits for more records by default ([`AsyncWait::max_batch_delay`]).
///
/// [`AsyncWait::max_batch_delay`]: crate::AsyncWait::max_batch_delay
pub const DEFAULT_BATCH_DELAY: Duration = Duration::from_millis(10);

/// The largest capacity accepted: beyond this a subtask would hold an unreasonable number of
/// inputs and futures in memory.
pub const MAX_CAPACITY: usize = 1 << 20;

/// The shortest non-zero timeout accepted: tokio's timer has 1 ms granularity, so a shorter
/// timeout could not be honoured.
pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// An invalid async I/O configuration, naming the offending value.
///
/// ```
/// use sluice_async_io::{AsyncConfigError, AsyncWait, async_fn};
///
/// let err = AsyncWait::<u64, _>::new(async_fn(|x: u64| async move { Ok(Some(x)) }))
///     .capacity(0)
///     .build()
///     .err()
///     .unwrap();
/// assert!(matches!(err, AsyncConfigError::Capacity(0)));
/// assert_eq!(err.to_string(), "async capacity must be between 1 and 1048576, got 0");
/// ```
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AsyncConfigError {
    /// The capacity (requests in flight per subtask) is 0 or above [`MAX_CAPACITY`].
    #[error("async capacity must be between 1 and {MAX_CAPACITY}, got {0}")]
    Capacity(usize),
    /// A non-zero timeout below [`MIN_TIMEOUT`].
    #[error(
        "async timeout {0:?} is below the timer's 1 ms resolution; use at least 1 ms, or 0 for no timeout"
    )]
    TimeoutBelowResolution(Duration),
    /// Retries were configured without a timeout; the timeout bounds all attempts of a record.
    #[error(
        "a retry strategy needs a timeout, but the timeout is 0 (none); set a timeout that covers all attempts"
    )]
    RetryWithoutTimeout,
    /// The first retry delay is not shorter than the timeout, so no retry could ever run: the
    /// timeout covers all attempts of a record.
    #[error(
        "retry delay {delay:?} is not shorter than the timeout {timeout:?}, so no retry could run before the timeout"
    )]
    RetryDelayNotBelowTimeout {
        /// The delay before the first retry.
        delay: Duration,
        /// The timeout.
        timeout: Duration,
    },
    /// A batch size of 0 or above [`MAX_CAPACITY`].
    #[error("async max batch size must be between 1 and {MAX_CAPACITY}, got {0}")]
    BatchSize(usize),
    /// A non-zero batch delay below [`MIN_TIMEOUT`].
    #[error(
        "async max batch delay {0:?} is below the timer's 1 ms resolution; use at least 1 ms, or 0 to send at once"
    )]
    BatchDelayBelowResolution(Duration),
    /// A retry strategy allows no retry at all.
    #[error("retry max_attempts must be at least 1, got 0")]
    MaxAttempts,
    /// A retry delay that is zero.
    #[error("retry {what} must be greater than 0, got {value:?}")]
    ZeroDelay {
        /// Which delay.
        what: &'static str,
        /// Its value.
        value: Duration,
    },
    /// An exponential backoff multiplier below 1 or not finite.
    #[error("exponential backoff multiplier must be a finite number >= 1.0, got {0}")]
    Multiplier(f64),
    /// An exponential backoff whose maximum delay is below its initial delay.
    #[error("exponential backoff max delay {max:?} is below its initial delay {initial:?}")]
    MaxDelayBelowInitial {
        /// The initial delay.
        initial: Duration,
        /// The maximum delay.
        max: Duration,
    },
    /// A retry strategy without any predicate would never retry.
    #[error(
        "retry strategy has neither a result nor an error predicate, so it would never retry; add if_result(..), if_empty_result() or if_error(..)"
    )]
    NoPredicate,
}

/// Checks the operator-level settings.
///
/// `first_retry_delay` is the delay before the first retry, `None` without retries.
pub(crate) fn validate(
    capacity: usize,
    timeout: Duration,
    first_retry_delay: Option<Duration>,
) -> Result<(), AsyncConfigError> {
    if capacity == 0 || capacity > MAX_CAPACITY {
        return Err(AsyncConfigError::Capacity(capacity));
    }
    if !timeout.is_zero() && timeout < MIN_TIMEOUT {
        return Err(AsyncConfigError::TimeoutBelowResolution(timeout));
    }
    if let Some(delay) = first_retry_delay {
        if timeout.is_zero() {
            return Err(AsyncConfigError::RetryWithoutTimeout);
        }
        if delay >= timeout {
            return Err(AsyncConfigError::RetryDelayNotBelowTimeout { delay, timeout });
        }
    }
    Ok(())
}

/// Checks how records are grouped into batches.
pub(crate) fn validate_batching(
    max_size: usize,
    max_delay: Duration,
) -> Result<(), AsyncConfigError> {
    if max_size == 0 || max_size > MAX_CAPACITY {
        return Err(AsyncConfigError::BatchSize(max_size));
    }
    if !max_delay.is_zero() && max_delay < MIN_TIMEOUT {
        return Err(AsyncConfigError::BatchDelayBelowResolution(max_delay));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_invalid_value_is_named() {
        let ms = Duration::from_millis;
        assert_eq!(
            validate(0, Duration::ZERO, None),
            Err(AsyncConfigError::Capacity(0))
        );
        assert_eq!(
            validate(MAX_CAPACITY + 1, Duration::ZERO, None),
            Err(AsyncConfigError::Capacity(MAX_CAPACITY + 1))
        );
        let tiny = Duration::from_micros(500);
        let err = validate(10, tiny, None).unwrap_err();
        assert!(err.to_string().contains("500µs"), "{err}");
        assert_eq!(
            validate(10, Duration::ZERO, Some(ms(1))),
            Err(AsyncConfigError::RetryWithoutTimeout)
        );
        let err = validate(10, ms(100), Some(ms(100))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "retry delay 100ms is not shorter than the timeout 100ms, so no retry could run before the timeout"
        );
        assert!(validate(1, Duration::ZERO, None).is_ok());
        assert_eq!(
            validate_batching(0, ms(5)),
            Err(AsyncConfigError::BatchSize(0))
        );
        let err = validate_batching(10, tiny).unwrap_err();
        assert!(err.to_string().contains("500µs"), "{err}");
        assert!(validate_batching(1, Duration::ZERO).is_ok());
        assert!(validate(MAX_CAPACITY, ms(2), Some(ms(1))).is_ok());
    }
}
