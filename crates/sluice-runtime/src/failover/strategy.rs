//! The restart strategies and their pure decision over a job's failure history.

use super::RestartStrategyError;
use std::fmt;
use std::time::Duration;

/// What to do after a failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RestartDecision {
    /// Restore every task from the latest completed checkpoint once `after` has passed.
    Restart {
        /// The delay before the restart.
        after: Duration,
    },
    /// Do not restart: the job fails with this failure.
    GiveUp {
        /// How many restarts were made before this failure.
        attempts: u32,
    },
}

/// The settings of the exponential-backoff strategy, checked by
/// [`RestartStrategy::exponential_backoff`].
///
/// The first restart waits `initial`; each further failure multiplies the wait by `multiplier`,
/// up to `max`. When a failure comes after a quiet period of at least `reset_after` (counted from
/// the restart, that is from the previous failure plus its backoff), the wait starts again at
/// `initial`, as Flink's `reset-backoff-threshold` does. An optional jitter moves each wait by up
/// to `jitter × wait` either way (never above `max`), drawn deterministically from `jitter_seed`
/// and the failure count so that decisions stay reproducible.
///
/// ```
/// use sluice_runtime::failover::ExponentialBackoff;
/// use std::time::Duration;
///
/// let cfg = ExponentialBackoff::new(Duration::from_millis(100), Duration::from_secs(10), 2.0)
///     .with_reset_after(Duration::from_secs(60))
///     .with_max_attempts(20);
/// assert_eq!(cfg.multiplier, 2.0);
/// assert_eq!(cfg.jitter, 0.0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ExponentialBackoff {
    /// The wait before the first restart (and after a reset). Must be greater than zero.
    pub initial: Duration,
    /// The longest wait. Must be at least `initial`.
    pub max: Duration,
    /// The growth factor of the wait between consecutive failures; at least 1.
    pub multiplier: f64,
    /// The quiet period after a restart that resets the wait to `initial`. Flink's default is
    /// one hour.
    pub reset_after: Duration,
    /// The relative jitter, `0.0..=1.0`; 0 (the default) means none.
    pub jitter: f64,
    /// The seed the jitter is drawn from; give each job its own to spread their restarts.
    pub jitter_seed: u64,
    /// Give up after this many consecutive restarts without a reset (Flink's
    /// `attempts-before-reset-backoff`); `None` (the default) restarts forever.
    pub max_attempts: Option<u32>,
}

impl ExponentialBackoff {
    /// Waits from `initial` growing by `multiplier` up to `max`; resets after one quiet hour, no
    /// jitter, no limit on attempts.
    pub fn new(initial: Duration, max: Duration, multiplier: f64) -> Self {
        ExponentialBackoff {
            initial,
            max,
            multiplier,
            reset_after: Duration::from_secs(3600),
            jitter: 0.0,
            jitter_seed: 0,
            max_attempts: None,
        }
    }

    /// Sets the quiet period that resets the wait.
    pub fn with_reset_after(mut self, reset_after: Duration) -> Self {
        self.reset_after = reset_after;
        self
    }

    /// Sets the relative jitter and its seed.
    pub fn with_jitter(mut self, jitter: f64, seed: u64) -> Self {
        self.jitter = jitter;
        self.jitter_seed = seed;
        self
    }

    /// Gives up after `attempts` consecutive restarts without a reset.
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = Some(attempts);
        self
    }

    fn validate(&self) -> Result<(), RestartStrategyError> {
        if self.initial.is_zero() {
            return Err(RestartStrategyError::ZeroInitialBackoff);
        }
        if self.max < self.initial {
            return Err(RestartStrategyError::MaxBelowInitial {
                initial: self.initial,
                max: self.max,
            });
        }
        if !self.multiplier.is_finite() || self.multiplier < 1.0 {
            return Err(RestartStrategyError::BadMultiplier(self.multiplier));
        }
        if self.reset_after.is_zero() {
            return Err(RestartStrategyError::ZeroResetThreshold);
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(RestartStrategyError::BadJitter(self.jitter));
        }
        if self.max_attempts == Some(0) {
            return Err(RestartStrategyError::ZeroAttempts {
                strategy: "exponential-backoff",
            });
        }
        Ok(())
    }

    /// The wait before the restart, with jitter, for the `failure`-th failure (counting from 1).
    fn jittered(&self, backoff: Duration, failure: u32) -> Duration {
        if self.jitter == 0.0 {
            return backoff;
        }
        // A uniform value in [-1, 1] from the seed and the failure count.
        let bits = splitmix64(self.jitter_seed ^ u64::from(failure));
        let unit = (bits >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
        let nanos = backoff.as_nanos() as f64 * (1.0 + self.jitter * unit);
        from_nanos_capped(nanos, self.max)
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    None,
    FixedDelay { attempts: u32, delay: Duration },
    Exponential(ExponentialBackoff),
}

/// Whether and when a failed job is restarted. Built through its constructors, which check the
/// values, so every `RestartStrategy` is valid.
///
/// For example, exponential backoff from 100 ms to at most 400 ms, doubling, waits (unit test
/// `worked_example_exponential_backoff`):
///
/// ```text
/// failure at   0 ms -> restart after 100 ms
/// failure at 150 ms -> restart after 200 ms
/// failure at 400 ms -> restart after 400 ms
/// failure at 900 ms -> restart after 400 ms (the cap)
/// ```
///
/// ```
/// use sluice_runtime::failover::{ExponentialBackoff, RestartStrategy};
/// use std::time::Duration;
///
/// let ms = Duration::from_millis;
/// let strategy = RestartStrategy::exponential_backoff(ExponentialBackoff::new(ms(100), ms(400), 2.0))
///     .unwrap();
/// assert!(!strategy.is_none());
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RestartStrategy {
    kind: Kind,
}

impl Default for RestartStrategy {
    /// [`RestartStrategy::none`].
    fn default() -> Self {
        RestartStrategy::none()
    }
}

impl fmt::Display for RestartStrategy {
    /// A short description for logs, such as `fixed-delay(3 attempts, 1s)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::None => write!(f, "none"),
            Kind::FixedDelay { attempts, delay } => {
                write!(f, "fixed-delay({attempts} attempts, {delay:?})")
            }
            Kind::Exponential(c) => {
                write!(
                    f,
                    "exponential-backoff(initial {:?}, max {:?}, multiplier {}, reset after {:?}, jitter {}",
                    c.initial, c.max, c.multiplier, c.reset_after, c.jitter
                )?;
                match c.max_attempts {
                    Some(n) => write!(f, ", at most {n} attempts before a reset)"),
                    None => write!(f, ", unlimited attempts)"),
                }
            }
        }
    }
}

impl RestartStrategy {
    /// Never restart: the first failure fails the job.
    ///
    /// ```
    /// use sluice_runtime::failover::RestartStrategy;
    ///
    /// assert!(RestartStrategy::none().is_none());
    /// ```
    pub fn none() -> Self {
        RestartStrategy { kind: Kind::None }
    }

    /// Restart up to `attempts` times, each after `delay` (which may be zero). The failure after
    /// the last allowed restart fails the job. Unlike Flink, `attempts` must be at least 1 (0 is
    /// [`RestartStrategy::none`]).
    ///
    /// ```
    /// use sluice_runtime::failover::RestartStrategy;
    /// use std::time::Duration;
    ///
    /// assert!(RestartStrategy::fixed_delay(3, Duration::from_secs(1)).is_ok());
    /// assert!(RestartStrategy::fixed_delay(0, Duration::from_secs(1)).is_err());
    /// ```
    pub fn fixed_delay(attempts: u32, delay: Duration) -> Result<Self, RestartStrategyError> {
        if attempts == 0 {
            return Err(RestartStrategyError::ZeroAttempts {
                strategy: "fixed-delay",
            });
        }
        Ok(RestartStrategy {
            kind: Kind::FixedDelay { attempts, delay },
        })
    }

    /// Restart with a growing wait; see [`ExponentialBackoff`] for the rules.
    ///
    /// ```
    /// use sluice_runtime::failover::{ExponentialBackoff, RestartStrategy};
    /// use std::time::Duration;
    ///
    /// let s = Duration::from_secs;
    /// assert!(RestartStrategy::exponential_backoff(ExponentialBackoff::new(s(1), s(60), 1.5)).is_ok());
    /// assert!(RestartStrategy::exponential_backoff(ExponentialBackoff::new(s(1), s(60), 0.5)).is_err());
    /// ```
    pub fn exponential_backoff(config: ExponentialBackoff) -> Result<Self, RestartStrategyError> {
        config.validate()?;
        Ok(RestartStrategy {
            kind: Kind::Exponential(config),
        })
    }

    /// Whether this strategy never restarts.
    pub fn is_none(&self) -> bool {
        matches!(self.kind, Kind::None)
    }

    /// Records a failure that happened at `at` in `history` and decides what to do.
    ///
    /// `at` is any monotonic time the caller chooses (for example the time since the job
    /// started); only differences between the times of one history matter. The strategy reads
    /// no clock itself.
    pub(crate) fn on_failure(&self, history: &mut FailureHistory, at: Duration) -> RestartDecision {
        let previous = history.last_failure_at.replace(at);
        history.failures = history.failures.saturating_add(1);
        let decision = match &self.kind {
            Kind::None => RestartDecision::GiveUp { attempts: 0 },
            Kind::FixedDelay { attempts, delay } => {
                if history.restarts < *attempts {
                    RestartDecision::Restart { after: *delay }
                } else {
                    RestartDecision::GiveUp {
                        attempts: history.restarts,
                    }
                }
            }
            Kind::Exponential(cfg) => {
                let quiet = previous.is_none_or(|prev| {
                    at.saturating_sub(prev) >= cfg.reset_after.saturating_add(history.backoff)
                });
                if quiet {
                    history.backoff = cfg.initial;
                    history.since_reset = 0;
                } else {
                    let grown = history.backoff.as_nanos() as f64 * cfg.multiplier;
                    history.backoff = from_nanos_capped(grown, cfg.max).max(cfg.initial);
                }
                if cfg
                    .max_attempts
                    .is_some_and(|max| history.since_reset >= max)
                {
                    RestartDecision::GiveUp {
                        attempts: history.restarts,
                    }
                } else {
                    history.since_reset += 1;
                    RestartDecision::Restart {
                        after: cfg.jittered(history.backoff, history.failures),
                    }
                }
            }
        };
        if let RestartDecision::Restart { .. } = decision {
            history.restarts = history.restarts.saturating_add(1);
        }
        decision
    }
}

/// What a restart strategy remembers of a job's failures: how many there were, how many led to a
/// restart, when the last one happened, and the current backoff. Kept by the job master for the
/// whole life of the job (across restarts) and updated only by [`RestartStrategy::on_failure`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FailureHistory {
    failures: u32,
    restarts: u32,
    since_reset: u32,
    last_failure_at: Option<Duration>,
    backoff: Duration,
}

impl FailureHistory {
    /// A job that has not failed yet.
    pub(crate) fn new() -> Self {
        FailureHistory::default()
    }
}

/// `nanos` as a duration, but never more than `cap` (which also absorbs overflow and NaN).
fn from_nanos_capped(nanos: f64, cap: Duration) -> Duration {
    if nanos < cap.as_nanos() as f64 {
        // In range and below the cap; `as` saturates at u64::MAX nanoseconds (584 years).
        Duration::from_nanos(nanos.max(0.0).round() as u64).min(cap)
    } else {
        cap
    }
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn restart(after: Duration) -> RestartDecision {
        RestartDecision::Restart { after }
    }

    #[test]
    fn worked_example_fixed_delay() {
        let strategy = RestartStrategy::fixed_delay(2, Duration::from_secs(1)).unwrap();
        let mut history = FailureHistory::new();
        let after = restart(Duration::from_secs(1));
        assert_eq!(
            strategy.on_failure(&mut history, Duration::from_secs(10)),
            after
        );
        assert_eq!(
            strategy.on_failure(&mut history, Duration::from_secs(20)),
            after
        );
        assert_eq!(
            strategy.on_failure(&mut history, Duration::from_secs(30)),
            RestartDecision::GiveUp { attempts: 2 }
        );
    }

    #[test]
    fn worked_example_exponential_backoff() {
        let strategy =
            RestartStrategy::exponential_backoff(ExponentialBackoff::new(ms(100), ms(400), 2.0))
                .unwrap();
        let mut history = FailureHistory::new();
        let waits: Vec<_> = [0, 150, 400, 900]
            .into_iter()
            .map(|t| match strategy.on_failure(&mut history, ms(t)) {
                RestartDecision::Restart { after } => after,
                RestartDecision::GiveUp { .. } => unreachable!(),
            })
            .collect();
        assert_eq!(waits, [ms(100), ms(200), ms(400), ms(400)]);
    }

    #[test]
    fn never_restarting_gives_up_at_once() {
        let mut history = FailureHistory::new();
        assert_eq!(
            RestartStrategy::none().on_failure(&mut history, Duration::ZERO),
            RestartDecision::GiveUp { attempts: 0 }
        );
    }

    #[test]
    fn the_history_counts_failures_and_restarts() {
        let strategy = RestartStrategy::fixed_delay(5, Duration::ZERO).unwrap();
        let mut history = FailureHistory::new();
        strategy.on_failure(&mut history, Duration::from_secs(3));
        assert_eq!(history.failures, 1);
        assert_eq!(history.restarts, 1);
        assert_eq!(history.last_failure_at, Some(Duration::from_secs(3)));
    }

    fn exp(cfg: ExponentialBackoff) -> RestartStrategy {
        RestartStrategy::exponential_backoff(cfg).unwrap()
    }

    /// Feeds failures at the given milliseconds and collects the decisions.
    fn run(strategy: &RestartStrategy, times: &[u64]) -> Vec<RestartDecision> {
        let mut history = FailureHistory::new();
        times
            .iter()
            .map(|&t| strategy.on_failure(&mut history, ms(t)))
            .collect()
    }

    #[test]
    fn none_gives_up_at_the_first_failure() {
        let s = RestartStrategy::none();
        assert!(s.is_none());
        assert_eq!(run(&s, &[5]), [RestartDecision::GiveUp { attempts: 0 }]);
        assert_eq!(RestartStrategy::default(), s);
        assert_eq!(s.to_string(), "none");
    }

    #[test]
    fn fixed_delay_restarts_exactly_attempts_times() {
        let s = RestartStrategy::fixed_delay(3, ms(250)).unwrap();
        assert!(!s.is_none());
        assert_eq!(s.to_string(), "fixed-delay(3 attempts, 250ms)");
        assert_eq!(
            run(&s, &[0, 1, 2, 3, 4]),
            [
                restart(ms(250)),
                restart(ms(250)),
                restart(ms(250)),
                RestartDecision::GiveUp { attempts: 3 },
                RestartDecision::GiveUp { attempts: 3 },
            ]
        );
    }

    #[test]
    fn fixed_delay_allows_zero_delay_but_not_zero_attempts() {
        let s = RestartStrategy::fixed_delay(1, Duration::ZERO).unwrap();
        assert_eq!(
            run(&s, &[0, 0]),
            [
                restart(Duration::ZERO),
                RestartDecision::GiveUp { attempts: 1 }
            ]
        );
        let err = RestartStrategy::fixed_delay(0, ms(1)).unwrap_err();
        assert_eq!(
            err,
            RestartStrategyError::ZeroAttempts {
                strategy: "fixed-delay"
            }
        );
        assert!(err.to_string().contains("use the `none` strategy"), "{err}");
    }

    #[test]
    fn exponential_grows_by_the_multiplier_up_to_max() {
        let s = exp(ExponentialBackoff::new(ms(100), ms(1000), 3.0));
        // Failures come soon after each restart: no reset.
        let d = run(&s, &[0, 200, 600, 1600, 3000, 5000]);
        assert_eq!(
            d,
            [
                restart(ms(100)),
                restart(ms(300)),
                restart(ms(900)),
                restart(ms(1000)),
                restart(ms(1000)),
                restart(ms(1000)),
            ]
        );
    }

    #[test]
    fn exponential_with_multiplier_one_is_constant() {
        let s = exp(ExponentialBackoff::new(ms(70), ms(70), 1.0).with_max_attempts(5));
        assert_eq!(
            s.to_string(),
            "exponential-backoff(initial 70ms, max 70ms, multiplier 1, reset after 3600s, \
             jitter 0, at most 5 attempts before a reset)"
        );
        assert_eq!(run(&s, &[0, 1, 2]), [restart(ms(70)); 3]);
    }

    #[test]
    fn exponential_resets_after_a_quiet_period_counted_from_the_restart() {
        let s = exp(ExponentialBackoff::new(ms(100), ms(10_000), 2.0).with_reset_after(ms(1000)));
        // 0 -> wait 100; 500 -> 200; 1000 -> 400.
        // The restart after the failure at 1000 happens at 1400; a failure at 2399 is 999 ms
        // after it (no reset: 800); the next restart is at 3199, so a failure at
        // 3199 + 1000 = 4199 comes after exactly the quiet period (reset).
        let d = run(&s, &[0, 500, 1000, 2399, 4199, 4300]);
        assert_eq!(
            d,
            [
                restart(ms(100)),
                restart(ms(200)),
                restart(ms(400)),
                restart(ms(800)),
                restart(ms(100)),
                restart(ms(200)),
            ]
        );
    }

    #[test]
    fn exponential_max_attempts_count_since_the_last_reset() {
        let s = exp(ExponentialBackoff::new(ms(10), ms(1000), 2.0)
            .with_reset_after(ms(100))
            .with_max_attempts(2));
        let d = run(&s, &[0, 20, 10_000, 10_020, 10_060]);
        assert_eq!(
            d,
            [
                restart(ms(10)),
                restart(ms(20)),
                // Quiet period: the count starts again.
                restart(ms(10)),
                restart(ms(20)),
                RestartDecision::GiveUp { attempts: 4 },
            ]
        );
    }

    #[test]
    fn exponential_jitter_stays_within_the_factor_and_below_max() {
        let cfg = ExponentialBackoff::new(ms(1000), ms(1200), 2.0).with_jitter(0.25, 42);
        let s = exp(cfg);
        let d = run(&s, &[0, 1, 2, 3, 4, 5, 6, 7]);
        let waits: Vec<Duration> = d
            .iter()
            .map(|d| match d {
                RestartDecision::Restart { after } => *after,
                RestartDecision::GiveUp { .. } => panic!("gave up"),
            })
            .collect();
        assert!(waits[0] >= ms(750) && waits[0] <= ms(1200), "{waits:?}");
        for w in &waits[1..] {
            assert!(*w >= ms(900) && *w <= ms(1200), "{waits:?}");
        }
        // Deterministic for a seed, and the jitter does move the waits.
        assert_eq!(run(&s, &[0, 1, 2, 3, 4, 5, 6, 7]), d);
        let plain = run(
            &exp(ExponentialBackoff::new(ms(1000), ms(1200), 2.0)),
            &[0, 1],
        );
        assert_ne!(d[..2], plain[..]);
    }

    #[test]
    fn exponential_does_not_overflow_with_huge_values() {
        let s = exp(ExponentialBackoff::new(ms(1), Duration::MAX, 1e300));
        let d = run(&s, &[0, 0, 0]);
        assert_eq!(d[0], restart(ms(1)));
        assert_eq!(d[2], restart(Duration::MAX));
    }

    #[test]
    fn exponential_rejects_bad_values() {
        let ok = ExponentialBackoff::new(ms(10), ms(100), 2.0);
        let check =
            |cfg: ExponentialBackoff| RestartStrategy::exponential_backoff(cfg).unwrap_err();
        assert_eq!(
            check(ExponentialBackoff {
                initial: ms(0),
                ..ok
            }),
            RestartStrategyError::ZeroInitialBackoff
        );
        assert_eq!(
            check(ExponentialBackoff { max: ms(5), ..ok }),
            RestartStrategyError::MaxBelowInitial {
                initial: ms(10),
                max: ms(5)
            }
        );
        assert_eq!(
            check(ExponentialBackoff {
                multiplier: 0.9,
                ..ok
            }),
            RestartStrategyError::BadMultiplier(0.9)
        );
        assert!(matches!(
            check(ExponentialBackoff {
                multiplier: f64::NAN,
                ..ok
            }),
            RestartStrategyError::BadMultiplier(_)
        ));
        assert_eq!(
            check(ok.with_reset_after(Duration::ZERO)),
            RestartStrategyError::ZeroResetThreshold
        );
        assert_eq!(
            check(ok.with_jitter(1.5, 0)),
            RestartStrategyError::BadJitter(1.5)
        );
        assert_eq!(
            check(ok.with_max_attempts(0)),
            RestartStrategyError::ZeroAttempts {
                strategy: "exponential-backoff"
            }
        );
        let msg = check(ExponentialBackoff {
            multiplier: 0.5,
            ..ok
        })
        .to_string();
        assert!(msg.contains("multiplier") && msg.contains("0.5"), "{msg}");
    }

    #[test]
    fn history_counts_failures_and_restarts() {
        let s = RestartStrategy::fixed_delay(1, ms(1)).unwrap();
        let mut h = FailureHistory::new();
        s.on_failure(&mut h, ms(10));
        s.on_failure(&mut h, ms(20));
        assert_eq!(h.failures, 2);
        assert_eq!(h.restarts, 1);
        assert_eq!(h.last_failure_at, Some(ms(20)));
    }

    #[test]
    fn exhaustion_error_reports_attempts_and_cause() {
        let s = RestartStrategy::fixed_delay(2, ms(1)).unwrap();
        let mut h = FailureHistory::new();
        let mut last = None;
        for (t, cause) in [(1, "first"), (2, "second"), (3, "third: disk full")] {
            if let RestartDecision::GiveUp { attempts } = s.on_failure(&mut h, ms(t)) {
                last = Some(crate::failover::RestartsExhausted {
                    attempts,
                    last_cause: cause.to_string(),
                });
            }
        }
        let err = last.expect("the strategy gives up at the third failure");
        assert_eq!(err.attempts, 2);
        assert_eq!(
            err.to_string(),
            "restart strategy exhausted after 2 attempts; last failure: third: disk full"
        );
    }
}
