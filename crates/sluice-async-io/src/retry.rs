//! Retry strategies ([`AsyncRetryStrategy`]) and the pure decision taken when an attempt ends.
//!
//! Semantics follow Flink's FLIP-232: the first call is attempt 1, and a strategy with
//! `max_attempts = n` retries after attempts 1 to n, so a record is invoked at most `n + 1` times.
//! A retry happens only when a predicate matches (on the result, or on the error). The operator's
//! timeout covers all attempts of a record together, and a pending delayed retry is cancelled by
//! the timeout. At end of input, delayed retries fire at once, and later retries happen without
//! delay, so the final drain never waits on a backoff.
//!
//! Two deliberate differences from Flink: the exponential delay depends only on the record's
//! attempt number (Flink's strategy object is shared and stateful, so concurrent records push
//! each other's delays up), and attempts that end after the end of input may still be retried
//! (Flink treats them as final, so a short bounded input effectively loses its retries).

use crate::batch::AsyncBatchError;
use crate::config::AsyncConfigError;
use sluice_core::UserError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

type ResultPredicate<R> = Arc<dyn Fn(&R) -> bool + Send + Sync>;
type ErrorPredicate = Arc<dyn Fn(&UserError) -> bool + Send + Sync>;

/// When and how often a record's call is retried. `R` is the function's
/// [`Results`](crate::AsyncFunction::Results) type, which result predicates inspect.
///
/// The first call is attempt 1; `max_attempts = n` allows `n` retries (`n + 1` calls). An attempt
/// is retried only when a predicate matches its result or its error. The operator's timeout
/// covers all attempts of a record; a timeout during a backoff cancels the retry. At end of
/// input, pending delayed retries fire at once and later retries skip their delay, so the final
/// drain never waits on a backoff.
///
/// Two deliberate differences from Flink: the exponential delay depends only on the record's
/// attempt number (Flink's strategy object is shared and stateful, so concurrent records push
/// each other's delays up), and attempts that end after the end of input may still be retried
/// (Flink treats them as final, so a short bounded input effectively loses its retries).
///
/// ```
/// use sluice_async_io::AsyncRetryStrategy;
/// use std::time::Duration;
///
/// // Up to 3 retries, 10 ms apart, when the lookup found nothing or failed.
/// let retry: AsyncRetryStrategy<Option<String>> =
///     AsyncRetryStrategy::fixed_delay(3, Duration::from_millis(10))
///         .if_empty_result()
///         .if_error(|_e| true)
///         .build()
///         .unwrap();
/// assert_eq!(retry.delay_after(1), Some(Duration::from_millis(10)));
/// assert_eq!(retry.delay_after(3), Some(Duration::from_millis(10)));
/// assert_eq!(retry.delay_after(4), None); // the 4th retry is not allowed
///
/// let backoff: AsyncRetryStrategy<Vec<u8>> = AsyncRetryStrategy::exponential_backoff(
///     5,
///     Duration::from_millis(10),
///     2.0,
///     Duration::from_millis(50),
/// )
/// .if_error(|_e| true)
/// .build()
/// .unwrap();
/// let delays: Vec<_> = (1..=6).map(|a| backoff.delay_after(a)).collect();
/// let ms = |m| Some(Duration::from_millis(m));
/// assert_eq!(delays, vec![ms(10), ms(20), ms(40), ms(50), ms(50), None]);
/// ```
pub struct AsyncRetryStrategy<R> {
    inner: Option<Arc<Retry<R>>>,
}

struct Retry<R> {
    max_attempts: u32,
    backoff: Backoff,
    on_result: Option<ResultPredicate<R>>,
    on_error: Option<ErrorPredicate>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Backoff {
    Fixed(Duration),
    Exponential {
        initial: Duration,
        multiplier: f64,
        max: Duration,
    },
}

impl<R> Clone for AsyncRetryStrategy<R> {
    fn clone(&self) -> Self {
        AsyncRetryStrategy {
            inner: self.inner.clone(),
        }
    }
}

impl<R> Default for AsyncRetryStrategy<R> {
    fn default() -> Self {
        Self::none()
    }
}

impl<R> fmt::Debug for AsyncRetryStrategy<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            None => f.write_str("AsyncRetryStrategy::none"),
            Some(r) => f
                .debug_struct("AsyncRetryStrategy")
                .field("max_attempts", &r.max_attempts)
                .field("backoff", &r.backoff)
                .field("on_result", &r.on_result.is_some())
                .field("on_error", &r.on_error.is_some())
                .finish(),
        }
    }
}

impl<R> AsyncRetryStrategy<R> {
    /// Never retries (Flink's `NO_RETRY_STRATEGY`).
    pub fn none() -> Self {
        AsyncRetryStrategy { inner: None }
    }

    /// Retries up to `max_attempts` times, `delay` after each failed attempt.
    pub fn fixed_delay(max_attempts: u32, delay: Duration) -> RetryStrategyBuilder<R> {
        RetryStrategyBuilder::new(max_attempts, Backoff::Fixed(delay))
    }

    /// Retries up to `max_attempts` times; the first retry waits `initial`, each following one
    /// `multiplier` times longer, never more than `max_delay`.
    pub fn exponential_backoff(
        max_attempts: u32,
        initial: Duration,
        multiplier: f64,
        max_delay: Duration,
    ) -> RetryStrategyBuilder<R> {
        RetryStrategyBuilder::new(
            max_attempts,
            Backoff::Exponential {
                initial,
                multiplier,
                max: max_delay,
            },
        )
    }

    /// Whether this strategy never retries.
    pub fn is_none(&self) -> bool {
        self.inner.is_none()
    }

    /// The delay before the retry that follows attempt `attempt` (1-based), or `None` when no
    /// further retry is allowed. Predicates are not consulted.
    pub fn delay_after(&self, attempt: u32) -> Option<Duration> {
        let r = self.inner.as_ref()?;
        if attempt == 0 || attempt > r.max_attempts {
            return None;
        }
        Some(match r.backoff {
            Backoff::Fixed(d) => d,
            Backoff::Exponential {
                initial,
                multiplier,
                max,
            } => {
                let factor = multiplier.powi(i32::try_from(attempt - 1).unwrap_or(i32::MAX));
                let secs = initial.as_secs_f64() * factor;
                if secs.is_finite() && secs < max.as_secs_f64() {
                    Duration::from_secs_f64(secs).max(initial)
                } else {
                    max
                }
            }
        })
    }
}

/// Builds an [`AsyncRetryStrategy`]: add predicates, then [`build`](RetryStrategyBuilder::build).
pub struct RetryStrategyBuilder<R> {
    max_attempts: u32,
    backoff: Backoff,
    on_result: Option<ResultPredicate<R>>,
    on_error: Option<ErrorPredicate>,
}

impl<R> RetryStrategyBuilder<R> {
    fn new(max_attempts: u32, backoff: Backoff) -> Self {
        RetryStrategyBuilder {
            max_attempts,
            backoff,
            on_result: None,
            on_error: None,
        }
    }

    /// Retries when `predicate` holds for a successful attempt's results.
    pub fn if_result(mut self, predicate: impl Fn(&R) -> bool + Send + Sync + 'static) -> Self {
        self.on_result = Some(Arc::new(predicate));
        self
    }

    /// Retries when an attempt produced no record (Flink's `EMPTY_RESULT_PREDICATE`).
    pub fn if_empty_result(self) -> Self
    where
        for<'a> &'a R: IntoIterator,
    {
        self.if_result(|r: &R| r.into_iter().next().is_none())
    }

    /// Retries when `predicate` holds for an attempt's error. Errors it rejects fail the job at
    /// once.
    pub fn if_error(
        mut self,
        predicate: impl Fn(&UserError) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.on_error = Some(Arc::new(predicate));
        self
    }

    /// Checks the settings: at least one attempt, positive delays, a multiplier of at least 1, a
    /// maximum delay no shorter than the initial one, and at least one predicate.
    pub fn build(self) -> Result<AsyncRetryStrategy<R>, AsyncConfigError> {
        if self.max_attempts == 0 {
            return Err(AsyncConfigError::MaxAttempts);
        }
        match self.backoff {
            Backoff::Fixed(d) if d.is_zero() => {
                return Err(AsyncConfigError::ZeroDelay {
                    what: "fixed delay",
                    value: d,
                });
            }
            Backoff::Exponential { initial, .. } if initial.is_zero() => {
                return Err(AsyncConfigError::ZeroDelay {
                    what: "initial backoff delay",
                    value: initial,
                });
            }
            Backoff::Exponential { multiplier, .. }
                if !(multiplier.is_finite() && multiplier >= 1.0) =>
            {
                return Err(AsyncConfigError::Multiplier(multiplier));
            }
            Backoff::Exponential { initial, max, .. } if max < initial => {
                return Err(AsyncConfigError::MaxDelayBelowInitial { initial, max });
            }
            _ => {}
        }
        if self.on_result.is_none() && self.on_error.is_none() {
            return Err(AsyncConfigError::NoPredicate);
        }
        Ok(AsyncRetryStrategy {
            inner: Some(Arc::new(Retry {
                max_attempts: self.max_attempts,
                backoff: self.backoff,
                on_result: self.on_result,
                on_error: self.on_error,
            })),
        })
    }
}

/// What to do with an attempt that ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryDecision {
    /// The outcome is final: emit the results, or fail with the error.
    Complete,
    /// Call again after this delay.
    RetryAfter(Duration),
}

/// Decides whether attempt `attempt` (1-based) of a record is retried: only if a predicate
/// matches the outcome and the strategy allows another attempt.
#[inline(always)]
pub(crate) fn decide<R>(
    strategy: &AsyncRetryStrategy<R>,
    attempt: u32,
    outcome: &Result<R, UserError>,
) -> RetryDecision {
    let Some(r) = &strategy.inner else {
        return RetryDecision::Complete;
    };
    let matches = match outcome {
        Ok(results) => r.on_result.as_ref().is_some_and(|p| p(results)),
        Err(e) => retried_with_batch(e) || r.on_error.as_ref().is_some_and(|p| p(e)),
    };
    match (matches, strategy.delay_after(attempt)) {
        (true, Some(delay)) => RetryDecision::RetryAfter(delay),
        _ => RetryDecision::Complete,
    }
}

/// Whether the result predicate asks for another attempt of a record whose attempt `attempt`
/// produced `results` (and the strategy allows one).
pub(crate) fn retries_result<R>(
    strategy: &AsyncRetryStrategy<R>,
    attempt: u32,
    results: &R,
) -> bool {
    strategy.inner.as_ref().is_some_and(|r| {
        r.on_result.as_ref().is_some_and(|p| p(results)) && strategy.delay_after(attempt).is_some()
    })
}

/// A record retried because another record of its batch was (whole-batch scope): retried
/// whatever the error predicate says.
fn retried_with_batch(e: &UserError) -> bool {
    matches!(
        e.downcast_ref::<AsyncBatchError>(),
        Some(AsyncBatchError::RetriedWithBatch)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(m: u64) -> Duration {
        Duration::from_millis(m)
    }

    fn empty_or_error(max: u32) -> AsyncRetryStrategy<Vec<u32>> {
        AsyncRetryStrategy::fixed_delay(max, ms(5))
            .if_empty_result()
            .if_error(|e| e.to_string().contains("transient"))
            .build()
            .unwrap()
    }

    #[test]
    fn max_attempts_three_allows_three_retries() {
        let s = empty_or_error(3);
        let empty: Result<Vec<u32>, UserError> = Ok(vec![]);
        for attempt in 1..=3 {
            assert_eq!(
                decide(&s, attempt, &empty),
                RetryDecision::RetryAfter(ms(5))
            );
        }
        assert_eq!(decide(&s, 4, &empty), RetryDecision::Complete);
    }

    #[test]
    fn only_matching_outcomes_are_retried() {
        let s = empty_or_error(3);
        assert_eq!(decide(&s, 1, &Ok(vec![1])), RetryDecision::Complete);
        let transient: Result<Vec<u32>, UserError> = Err("transient glitch".into());
        let fatal: Result<Vec<u32>, UserError> = Err("bad request".into());
        assert_eq!(decide(&s, 1, &transient), RetryDecision::RetryAfter(ms(5)));
        assert_eq!(decide(&s, 1, &fatal), RetryDecision::Complete);
    }

    #[test]
    fn no_retry_without_strategy() {
        let none = AsyncRetryStrategy::<Vec<u32>>::none();
        assert_eq!(decide(&none, 1, &Ok(vec![])), RetryDecision::Complete);
        assert_eq!(none.delay_after(1), None);
    }

    #[test]
    fn exponential_delays_grow_to_the_cap() {
        let s: AsyncRetryStrategy<Vec<u32>> =
            AsyncRetryStrategy::exponential_backoff(10, ms(3), 3.0, ms(100))
                .if_error(|_| true)
                .build()
                .unwrap();
        let d: Vec<_> = (1..=6).filter_map(|a| s.delay_after(a)).collect();
        assert_eq!(d, vec![ms(3), ms(9), ms(27), ms(81), ms(100), ms(100)]);
        // Huge attempt numbers saturate instead of overflowing.
        let big: AsyncRetryStrategy<Vec<u32>> =
            AsyncRetryStrategy::exponential_backoff(u32::MAX, ms(1), 10.0, ms(7))
                .if_error(|_| true)
                .build()
                .unwrap();
        assert_eq!(big.delay_after(u32::MAX), Some(ms(7)));
    }

    #[test]
    fn invalid_strategies_name_the_value() {
        let b = || AsyncRetryStrategy::<Vec<u32>>::fixed_delay(1, ms(1));
        assert_eq!(
            AsyncRetryStrategy::<Vec<u32>>::fixed_delay(0, ms(1))
                .if_error(|_| true)
                .build()
                .unwrap_err(),
            AsyncConfigError::MaxAttempts
        );
        assert_eq!(b().build().unwrap_err(), AsyncConfigError::NoPredicate);
        let zero = AsyncRetryStrategy::<Vec<u32>>::fixed_delay(1, Duration::ZERO)
            .if_error(|_| true)
            .build()
            .unwrap_err();
        assert!(zero.to_string().contains("fixed delay"), "{zero}");
        let mult = AsyncRetryStrategy::<Vec<u32>>::exponential_backoff(1, ms(1), 0.5, ms(2))
            .if_error(|_| true)
            .build()
            .unwrap_err();
        assert_eq!(mult, AsyncConfigError::Multiplier(0.5));
        let nan = AsyncRetryStrategy::<Vec<u32>>::exponential_backoff(1, ms(1), f64::NAN, ms(2))
            .if_error(|_| true)
            .build()
            .unwrap_err();
        assert!(matches!(nan, AsyncConfigError::Multiplier(_)));
        let below = AsyncRetryStrategy::<Vec<u32>>::exponential_backoff(1, ms(5), 2.0, ms(2))
            .if_error(|_| true)
            .build()
            .unwrap_err();
        assert!(below.to_string().contains("below its initial"), "{below}");
    }
}
