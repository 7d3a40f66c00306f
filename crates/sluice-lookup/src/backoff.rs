//! [`Reconnect`]: how long a lookup keeps retrying a server it cannot reach, as a pure
//! schedule of delays.
//!
//! With the defaults (8 retries, 50 ms doubling up to 2 s) a lookup retries after
//! 50, 100, 200, 400, 800, 1600, 2000 and 2000 ms, so a server may be away for about 7 s
//! before the job fails; the operator's timeout must leave room for that.

use std::time::Duration;

/// Retries of connection failures: `retries` retries, the first after `initial`, each later
/// delay `multiplier` times the previous, at most `max`.
///
/// ```
/// use sluice_lookup::Reconnect;
/// use std::time::Duration;
///
/// let r = Reconnect::new(4, Duration::from_millis(10), Duration::from_millis(25));
/// let ms = |m| Some(Duration::from_millis(m));
/// let delays: Vec<_> = (1..=5).map(|n| r.delay_before_retry(n)).collect();
/// assert_eq!(delays, vec![ms(10), ms(20), ms(25), ms(25), None]);
/// assert_eq!(r.total(), Duration::from_millis(80));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reconnect {
    retries: u32,
    initial: Duration,
    max: Duration,
    multiplier: f64,
}

impl Default for Reconnect {
    fn default() -> Self {
        Reconnect::new(8, Duration::from_millis(50), Duration::from_secs(2))
    }
}

impl Reconnect {
    /// `retries` retries with delays doubling from `initial` up to `max`.
    pub fn new(retries: u32, initial: Duration, max: Duration) -> Self {
        Reconnect {
            retries,
            initial,
            max: max.max(initial),
            multiplier: 2.0,
        }
    }

    /// No retry: the first connection failure fails the lookup.
    pub fn none() -> Self {
        Reconnect::new(0, Duration::ZERO, Duration::ZERO)
    }

    /// The delay before retry `n` (1-based), or `None` when no retry `n` is allowed.
    pub fn delay_before_retry(&self, n: u32) -> Option<Duration> {
        if n == 0 || n > self.retries {
            return None;
        }
        let factor = self
            .multiplier
            .powi(i32::try_from(n - 1).unwrap_or(i32::MAX));
        let delay = self.initial.as_secs_f64() * factor;
        Some(if delay.is_finite() && delay < self.max.as_secs_f64() {
            Duration::from_secs_f64(delay)
        } else {
            self.max
        })
    }

    /// The sum of all delays: how long a server may stay away before the lookup fails.
    pub fn total(&self) -> Duration {
        (1..=self.retries)
            .filter_map(|n| self.delay_before_retry(n))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_rides_out_about_seven_seconds() {
        let r = Reconnect::default();
        assert_eq!(r.delay_before_retry(1), Some(Duration::from_millis(50)));
        assert_eq!(r.delay_before_retry(8), Some(Duration::from_secs(2)));
        assert_eq!(r.delay_before_retry(9), None);
        assert_eq!(r.total(), Duration::from_millis(7150));
        assert_eq!(Reconnect::none().delay_before_retry(1), None);
    }
}
