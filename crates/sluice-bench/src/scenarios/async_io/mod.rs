//! Scenarios `async-overhead` and `async-latency` (issue 5): the async wait operator of
//! `sluice-async-io` against bare `futures` stream buffering, run interleaved in the same process.
//!
//! - [`overhead`]: a function that completes at once, so that only the operator's own cost per
//!   record shows, against `StreamExt::buffered` / `buffer_unordered` over the same records;
//! - [`latency`]: every request waits 10 ms, so that throughput is bounded by Little's law;
//!   sluice's throughput is reported as a fraction of that limit (computed from the latency the
//!   requests really had), beside `buffer_unordered` driving the same latency source;
//! - [`jobs`] and [`baselines`]: the two sides, over the same functions and digests of
//!   [`workload`].

pub(crate) mod baselines;
pub(crate) mod jobs;
pub mod latency;
pub mod overhead;
pub(crate) mod workload;

pub use latency::{Args as LatencyArgs, run as run_latency};
pub use overhead::{Args as OverheadArgs, run as run_overhead};

/// The in-flight capacity of both sides (issue 5: "capacity 100").
pub(crate) const CAPACITY: usize = 100;

#[cfg(test)]
mod tests {
    use super::workload::{LatencySource, digest};
    use super::*;
    use crate::measure::runtime;
    use std::time::Duration;

    /// The benchmark is only honest if sluice and the baselines emit the same records.
    #[test]
    fn sluice_jobs_and_baselines_agree() {
        let rt = runtime().unwrap();
        let n = 10_007;
        for ordered in [true, false] {
            let expected = digest(0..n, ordered);
            assert_eq!(
                rt.block_on(jobs::immediate_job(n, ordered)).unwrap(),
                expected
            );
            assert_eq!(
                baselines::immediate_buffered(&rt, n, ordered).unwrap(),
                expected
            );
        }
        let sum = digest(0..n, false);
        for p in [1, 3] {
            let source = LatencySource::new(Duration::from_millis(1));
            assert_eq!(
                rt.block_on(jobs::latency_job(n, p, source.clone()))
                    .unwrap(),
                sum
            );
            assert_eq!(source.measured().0, n);
            let source = LatencySource::new(Duration::from_millis(1));
            assert_eq!(
                baselines::latency_buffer_unordered(&rt, n, p, &source).unwrap(),
                sum
            );
            assert_eq!(source.measured().0, n);
        }
    }
}
