//! [`ProcessingClock`]: processing time in epoch milliseconds, read from tokio's clock.

use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// Processing time: the wall clock in milliseconds since the Unix epoch when the clock was made,
/// advanced by tokio's monotonic clock since then (`Instant::now` outside a runtime). Reading tokio's clock (not the system's) lets
/// a test pause and advance time (`#[tokio::test(start_paused = true)]`); mapping to epoch
/// milliseconds keeps timer timestamps meaningful across a restore in another process.
///
/// ```text
/// use sluice_runtime::timer::ProcessingClock;
///
/// let clock = ProcessingClock::starting_at(1_000);
/// assert!(clock.now_ms() >= 1_000);
/// ```
#[derive(Clone, Copy, Debug)]
pub(crate) struct ProcessingClock {
    base: Instant,
    base_ms: i64,
}

impl Default for ProcessingClock {
    fn default() -> Self {
        Self::new()
    }
}

impl ProcessingClock {
    /// The process's processing clock: the wall clock read once, at the first call in the
    /// process, advanced by tokio's clock since. Every operator of the process shares it, so
    /// processing time never goes back between a failure and the restore after it.
    pub(crate) fn new() -> Self {
        static BASE: OnceLock<ProcessingClock> = OnceLock::new();
        *BASE.get_or_init(|| {
            let ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                .unwrap_or(0);
            Self::starting_at(ms)
        })
    }

    /// A clock that reads `ms` now.
    pub(crate) fn starting_at(ms: i64) -> Self {
        ProcessingClock {
            base: Instant::now(),
            base_ms: ms,
        }
    }

    /// Processing time now, in milliseconds (rounded down). A clock behind the base (a test's
    /// paused tokio clock, started before another thread read the process's base from the real
    /// one) reads before `base_ms` rather than stopping there, so that differences stay exact.
    pub(crate) fn now_ms(&self) -> i64 {
        let now = Instant::now();
        match now.checked_duration_since(self.base) {
            Some(ahead) => self
                .base_ms
                .saturating_add(i64::try_from(ahead.as_millis()).unwrap_or(i64::MAX)),
            None => {
                let behind = self.base.duration_since(now).as_nanos().div_ceil(1_000_000);
                self.base_ms
                    .saturating_sub(i64::try_from(behind).unwrap_or(i64::MAX))
            }
        }
    }

    /// The instant at which processing time reaches `ms`: exact on either side of the base, as
    /// [`now_ms`](Self::now_ms) is (a time before the base maps before it); one too far back
    /// to be an instant is due now.
    pub(crate) fn instant_at(&self, ms: i64) -> Instant {
        let millis = |d: i64| Duration::from_millis(u64::try_from(d).unwrap_or(u64::MAX));
        if ms >= self.base_ms {
            self.base
                .checked_add(millis(ms.saturating_sub(self.base_ms)))
                .unwrap_or(self.base + Duration::from_secs(86_400 * 365))
        } else {
            self.base
                .checked_sub(millis(self.base_ms.saturating_sub(ms)))
                .unwrap_or_else(Instant::now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_clock_behind_its_base_keeps_exact_differences() {
        // The base read by another thread a little after this test's paused clock started.
        let clock = ProcessingClock {
            base: Instant::now() + Duration::from_micros(300),
            base_ms: 1_000,
        };
        let first = clock.now_ms();
        assert_eq!(first, 999, "before the base, rounded down");
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(clock.now_ms() - first, 60_000);
    }

    #[tokio::test(start_paused = true)]
    async fn a_time_before_the_base_maps_to_an_instant_before_it() {
        let clock = ProcessingClock {
            base: Instant::now() + Duration::from_millis(50),
            base_ms: 1_000,
        };
        let due = clock.instant_at(clock.now_ms() + 10);
        assert!(due < clock.base, "10 ms from now is before the base");
        tokio::time::sleep_until(due).await;
        assert_eq!(clock.now_ms(), 960, "reached exactly");
        assert!(
            clock.instant_at(i64::MIN) <= Instant::now(),
            "long past: due now"
        );
    }
}
