//! What both sides of the async scenarios compute: the functions called per record (one that
//! completes at once, one that waits and measures the latency it really produced) and the
//! digests that prove both sides emitted the same records (in the same order, when ordered).

use sluice::prelude::UserError;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// What one call returns: the record itself.
pub type CallResult = Result<Option<u64>, UserError>;

/// The function of `async-overhead`: its future is ready on its first poll.
#[inline]
pub async fn immediate(x: u64) -> CallResult {
    Ok(Some(x))
}

/// An order-sensitive digest step (FNV-1a over whole records): swapping two records changes it.
#[inline]
pub fn ordered_step(acc: u64, x: u64) -> u64 {
    (acc ^ x).wrapping_mul(0x0100_0000_01b3)
}

/// The start value of [`ordered_step`] digests.
pub const ORDERED_SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// An order-independent digest step: a wrapping sum.
#[inline]
pub fn unordered_step(acc: u64, x: u64) -> u64 {
    acc.wrapping_add(x)
}

/// The digest of `records` in order with `ordered` set, else their wrapping sum (what the
/// tests expect both sides to compute).
#[cfg(test)]
pub fn digest(records: impl IntoIterator<Item = u64>, ordered: bool) -> u64 {
    if ordered {
        records.into_iter().fold(ORDERED_SEED, ordered_step)
    } else {
        records.into_iter().fold(0, unordered_step)
    }
}

/// The function of `async-latency`: every call sleeps `delay` on the tokio timer and adds the
/// latency it really took, from the call to the future's completion, to shared totals. (The
/// clock is tokio's, which reads the system's monotonic clock unless a test paused it.)
#[derive(Clone)]
pub struct LatencySource {
    delay: Duration,
    totals: Arc<LatencyTotals>,
}

#[derive(Default)]
struct LatencyTotals {
    nanos: AtomicU64,
    calls: AtomicU64,
}

impl LatencySource {
    /// A source whose calls wait `delay`, with fresh totals.
    pub fn new(delay: Duration) -> Self {
        LatencySource {
            delay,
            totals: Arc::default(),
        }
    }

    /// Calls for record `x`: completes with `x` after the delay.
    pub fn call(&self, x: u64) -> impl Future<Output = CallResult> + Send + use<> {
        let (delay, totals) = (self.delay, self.totals.clone());
        let start = Instant::now();
        async move {
            tokio::time::sleep(delay).await;
            let took = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
            totals.nanos.fetch_add(took, Ordering::Relaxed);
            totals.calls.fetch_add(1, Ordering::Relaxed);
            Ok(Some(x))
        }
    }

    /// The number of completed calls and their mean latency.
    pub fn measured(&self) -> (u64, Duration) {
        let calls = self.totals.calls.load(Ordering::Relaxed);
        let nanos = self.totals.nanos.load(Ordering::Relaxed);
        (calls, Duration::from_nanos(nanos / calls.max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ordered_digest_sees_order_and_the_unordered_one_does_not() {
        assert_ne!(digest([1, 2, 3], true), digest([2, 1, 3], true));
        assert_eq!(digest([1, 2, 3], false), digest([3, 1, 2], false));
        assert_eq!(digest([1, 2, 3], false), 6);
    }

    #[tokio::test(start_paused = true)]
    async fn the_latency_source_measures_the_delay_it_produced() {
        let source = LatencySource::new(Duration::from_millis(10));
        let (a, b) = tokio::join!(source.call(1), source.call(2));
        assert_eq!((a.unwrap(), b.unwrap()), (Some(1), Some(2)));
        let (calls, mean) = source.measured();
        assert_eq!(calls, 2);
        // tokio never wakes a sleep early, and rounds it up to its 1 ms tick at most.
        assert!(mean >= Duration::from_millis(10), "{mean:?}");
        assert!(mean <= Duration::from_millis(11), "{mean:?}");
    }
}
