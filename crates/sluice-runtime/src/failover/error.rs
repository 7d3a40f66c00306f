//! Errors of restart strategies: an invalid configuration, and a strategy that gave up.

use std::time::Duration;

/// A restart strategy was configured with a value that makes no sense.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RestartStrategyError {
    /// A strategy that allows zero restarts; [`RestartStrategy::none`](super::RestartStrategy::none)
    /// says that directly.
    #[error(
        "{strategy} restart strategy with 0 attempts would never restart; use the `none` strategy instead"
    )]
    ZeroAttempts {
        /// The strategy's name.
        strategy: &'static str,
    },
    /// The initial backoff of the exponential strategy is zero.
    #[error(
        "the initial backoff of the exponential-backoff restart strategy must be greater than zero"
    )]
    ZeroInitialBackoff,
    /// The maximum backoff is below the initial backoff.
    #[error(
        "the maximum backoff ({max:?}) of the exponential-backoff restart strategy is below its initial backoff ({initial:?})"
    )]
    MaxBelowInitial {
        /// The initial backoff.
        initial: Duration,
        /// The maximum backoff.
        max: Duration,
    },
    /// The multiplier is below 1 or not a finite number.
    #[error(
        "the backoff multiplier of the exponential-backoff restart strategy must be a finite number of at least 1, got {0}"
    )]
    BadMultiplier(f64),
    /// The quiet period after which the backoff resets is zero.
    #[error(
        "the reset threshold of the exponential-backoff restart strategy must be greater than zero"
    )]
    ZeroResetThreshold,
    /// The jitter factor is outside `0.0..=1.0`.
    #[error(
        "the jitter factor of the exponential-backoff restart strategy must be between 0 and 1, got {0}"
    )]
    BadJitter(f64),
}

/// The restart strategy gave up: the job fails with the last failure.
///
/// ```
/// use sluice_runtime::failover::RestartsExhausted;
///
/// let err = RestartsExhausted { attempts: 3, last_cause: "boom".into() };
/// assert_eq!(
///     err.to_string(),
///     "restart strategy exhausted after 3 attempts; last failure: boom"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("restart strategy exhausted after {attempts} attempts; last failure: {last_cause}")]
pub struct RestartsExhausted {
    /// How many restarts were made before giving up.
    pub attempts: u32,
    /// The failure that made the strategy give up, as text.
    pub last_cause: String,
}
