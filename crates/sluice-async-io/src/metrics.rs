//! Metrics of the async wait operator, per subtask: requests in flight, request latency,
//! timeouts, retries and failures.
//!
//! The builder hands out an [`AsyncMetrics`] handle before the job starts; every subtask
//! registers its counters in it when it opens, so the handle can be read while the job runs and
//! after it ended. The operator counts in plain local variables and publishes them to the shared
//! atomics once per batch of work, never per record.
//!
//! The same counters are a [`MetricSource`] of the subtask's
//! [`OperatorMetrics`](sluice_runtime::OperatorMetrics), registered under `"async"` when it
//! opens: a job's live view and its exporters (the Prometheus endpoint, the web dashboard) see
//! `async_in_flight` (gauge), `async_completed`, `async_timeouts`, `async_retries`,
//! `async_failures`, `async_batches` (counters) and `async_latency_seconds` (a histogram over
//! [`LATENCY_BOUNDS_SECONDS`]), read only when they are read.
//!
//! The handle sees the subtasks that run in its own process. In cluster mode they run on the
//! task managers, whose metric sources the job master mirrors into the job's metrics:
//! [`AsyncMetricsSnapshot::from_job`] reads the operator's figures from there, in any mode.

use sluice_core::sync::lock;
use sluice_runtime::JobMetrics;
use sluice_runtime::metrics::{HistogramSnapshot, MetricSource, MetricsReport};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Values below this many microseconds get one bucket each.
const LINEAR: u64 = 16;
/// Sub-buckets per power of two above that (12.5 % relative resolution).
const SUB: u64 = 8;
/// Powers of two covered above the linear part: up to 2^40 µs (about 12 days).
const OCTAVES: u64 = 37;
/// Number of histogram buckets.
pub(crate) const BUCKETS: usize = (LINEAR + OCTAVES * SUB) as usize;

/// The bucket of a latency of `us` microseconds.
#[inline]
pub(crate) fn bucket_of(us: u64) -> usize {
    if us < LINEAR {
        return us as usize;
    }
    let octave = 63 - u64::from(us.leading_zeros()); // >= 4
    let sub = (us >> (octave - 3)) & (SUB - 1);
    let idx = LINEAR + (octave - 4) * SUB + sub;
    (idx as usize).min(BUCKETS - 1)
}

/// The smallest and one past the largest latency (µs) of bucket `i`.
fn bucket_bounds(i: usize) -> (u64, u64) {
    let i = i as u64;
    if i < LINEAR {
        return (i, i + 1);
    }
    let octave = 4 + (i - LINEAR) / SUB;
    let sub = (i - LINEAR) % SUB;
    let width = 1u64 << (octave - 3);
    let low = (SUB + sub) * width;
    (low, low + width)
}

/// The live counters of one subtask.
#[derive(Debug)]
pub(crate) struct SubtaskCounters {
    subtask: usize,
    in_flight: AtomicU64,
    completed: AtomicU64,
    timeouts: AtomicU64,
    retries: AtomicU64,
    failures: AtomicU64,
    batches: AtomicU64,
    latency_sum_us: AtomicU64,
    latency_max_us: AtomicU64,
    buckets: Box<[AtomicU64]>,
}

impl SubtaskCounters {
    fn new(subtask: usize) -> Self {
        SubtaskCounters {
            subtask,
            in_flight: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            timeouts: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            latency_sum_us: AtomicU64::new(0),
            latency_max_us: AtomicU64::new(0),
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn read(&self) -> AsyncMetricsSnapshot {
        AsyncMetricsSnapshot {
            subtasks: 1,
            in_flight: self.in_flight.load(Ordering::Relaxed),
            completed: self.completed.load(Ordering::Relaxed),
            timeouts: self.timeouts.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            latency: LatencyHistogram {
                buckets: self
                    .buckets
                    .iter()
                    .map(|b| b.load(Ordering::Relaxed))
                    .collect(),
                sum_us: self.latency_sum_us.load(Ordering::Relaxed),
                max_us: self.latency_max_us.load(Ordering::Relaxed),
            },
        }
    }
}

/// The bounds (seconds) of the `async_latency_seconds` histogram the operator publishes into its
/// operator metrics: from 100 µs to a minute. Each fine bucket of the operator's own histogram
/// (within 12.5 %) is counted at the first bound at or above its upper end.
pub const LATENCY_BOUNDS_SECONDS: [f64; 18] = [
    0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

impl MetricSource for SubtaskCounters {
    fn report(&self, out: &mut MetricsReport) {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        out.gauge(
            "async_in_flight",
            i64::try_from(load(&self.in_flight)).unwrap_or(i64::MAX),
        );
        out.counter("async_completed", load(&self.completed));
        out.counter("async_timeouts", load(&self.timeouts));
        out.counter("async_retries", load(&self.retries));
        out.counter("async_failures", load(&self.failures));
        out.counter("async_batches", load(&self.batches));
        let mut h = HistogramSnapshot::new(LATENCY_BOUNDS_SECONDS.to_vec());
        for (i, b) in self.buckets.iter().enumerate() {
            let n = load(b);
            if n > 0 {
                let (_, high) = bucket_bounds(i);
                h.add((high - 1) as f64 / 1e6, n);
            }
        }
        h.sum = load(&self.latency_sum_us) as f64 / 1e6;
        out.histogram("async_latency_seconds", &h);
    }
}

/// Counts gathered by the operator between two publications.
#[derive(Debug)]
pub(crate) struct LocalCounters {
    /// Completions with zero latency, not yet in `buckets`.
    instant: u64,
    completed: u64,
    timeouts: u64,
    retries: u64,
    failures: u64,
    batches: u64,
    sum_us: u64,
    max_us: u64,
    buckets: Box<[u64]>,
    touched: Vec<u16>,
}

impl Default for LocalCounters {
    fn default() -> Self {
        LocalCounters {
            instant: 0,
            completed: 0,
            timeouts: 0,
            retries: 0,
            failures: 0,
            batches: 0,
            sum_us: 0,
            max_us: 0,
            buckets: vec![0; BUCKETS].into_boxed_slice(),
            touched: Vec::new(),
        }
    }
}

impl LocalCounters {
    /// One request completed in no measurable time (within the clock reading it started at).
    #[inline(always)]
    pub(crate) fn completed_at_once(&mut self) {
        self.instant += 1;
    }

    /// One request completed after `latency`.
    #[inline]
    pub(crate) fn completed(&mut self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        let b = bucket_of(us);
        if self.buckets[b] == 0 {
            self.touched.push(b as u16);
        }
        self.buckets[b] += 1;
        self.completed += 1;
        self.sum_us = self.sum_us.saturating_add(us);
        self.max_us = self.max_us.max(us);
    }

    #[inline]
    pub(crate) fn timed_out(&mut self) {
        self.timeouts += 1;
    }

    #[inline]
    pub(crate) fn retried(&mut self) {
        self.retries += 1;
    }

    #[inline]
    pub(crate) fn failed(&mut self) {
        self.failures += 1;
    }

    #[inline]
    pub(crate) fn batches_sent(&mut self, n: u64) {
        self.batches += n;
    }

    /// Adds everything counted so far to `to`, sets its in-flight gauge, and starts over.
    pub(crate) fn publish(&mut self, to: &SubtaskCounters, in_flight: usize) {
        to.in_flight.store(in_flight as u64, Ordering::Relaxed);
        if self.instant > 0 {
            if self.buckets[0] == 0 {
                self.touched.push(0);
            }
            self.buckets[0] += self.instant;
            self.completed += self.instant;
            self.instant = 0;
        }
        if self.completed == 0
            && self.timeouts == 0
            && self.retries == 0
            && self.failures == 0
            && self.batches == 0
        {
            return;
        }
        let add = |a: &AtomicU64, v: &mut u64| {
            if *v != 0 {
                a.fetch_add(*v, Ordering::Relaxed);
                *v = 0;
            }
        };
        add(&to.completed, &mut self.completed);
        add(&to.timeouts, &mut self.timeouts);
        add(&to.retries, &mut self.retries);
        add(&to.failures, &mut self.failures);
        add(&to.batches, &mut self.batches);
        add(&to.latency_sum_us, &mut self.sum_us);
        to.latency_max_us.fetch_max(self.max_us, Ordering::Relaxed);
        for b in self.touched.drain(..) {
            let b = b as usize;
            to.buckets[b].fetch_add(self.buckets[b], Ordering::Relaxed);
            self.buckets[b] = 0;
        }
    }
}

/// A handle on the metrics of every subtask of one async wait operator.
///
/// Get it from [`AsyncWait::metrics`](crate::AsyncWait::metrics) before the job starts; read it
/// during the run or after. Figures cover the whole job: when a subtask restarts after a
/// failure, what its earlier attempts counted is kept and added in (their requests in flight
/// no longer count). [`attempt_total`](Self::attempt_total) reads the running attempt only.
///
/// ```
/// use sluice_async_io::{AsyncWait, async_fn};
/// use sluice_runtime::prelude::*;
/// use std::time::Duration;
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(2);
/// let wait = AsyncWait::new(async_fn(|x: u64| async move { Ok(Some(x)) }))
///     .timeout(Duration::from_secs(10))
///     .capacity(8);
/// let metrics = wait.metrics();
/// let out = wait.unordered().apply(&env.from_iter(0u64..1000)).unwrap().collect();
/// env.execute_blocking("metrics").unwrap();
/// assert_eq!(out.len(), 1000);
/// let total = metrics.total();
/// assert_eq!(total.subtasks, 2);
/// assert_eq!(total.completed, 1000);
/// assert_eq!(total.in_flight, 0);
/// assert_eq!(total.timeouts + total.retries + total.failures, 0);
/// assert_eq!(total.latency.count(), 1000);
/// ```
#[derive(Clone, Debug, Default)]
pub struct AsyncMetrics {
    inner: Arc<Mutex<Registered>>,
}

#[derive(Debug, Default)]
struct Registered {
    /// The counters of each subtask's running (or last) attempt.
    current: Vec<Arc<SubtaskCounters>>,
    /// What earlier attempts of each subtask counted.
    earlier: Vec<(usize, AsyncMetricsSnapshot)>,
}

impl AsyncMetrics {
    /// Registers the counters of a new attempt of `subtask`; what its previous attempt counted
    /// is kept.
    pub(crate) fn register(&self, subtask: usize) -> Arc<SubtaskCounters> {
        let counters = Arc::new(SubtaskCounters::new(subtask));
        let mut r = lock(&self.inner);
        if let Some(i) = r.current.iter().position(|c| c.subtask == subtask) {
            let mut ended = r.current.remove(i).read();
            ended.in_flight = 0; // that attempt is gone
            match r.earlier.iter_mut().find(|(s, _)| *s == subtask) {
                Some((_, sum)) => {
                    sum.merge(&ended);
                    sum.subtasks = 1;
                }
                None => r.earlier.push((subtask, ended)),
            }
        }
        r.current.push(counters.clone());
        r.current.sort_by_key(|c| c.subtask);
        counters
    }

    /// One snapshot per subtask that has opened, by subtask index, over every attempt.
    pub fn subtasks(&self) -> Vec<(usize, AsyncMetricsSnapshot)> {
        let r = lock(&self.inner);
        r.current
            .iter()
            .map(|c| {
                let mut s = c.read();
                if let Some((_, earlier)) = r.earlier.iter().find(|(i, _)| *i == c.subtask) {
                    s.merge(earlier);
                    s.subtasks = 1;
                }
                (c.subtask, s)
            })
            .collect()
    }

    /// The sum over all subtasks and attempts (latency histograms merged).
    pub fn total(&self) -> AsyncMetricsSnapshot {
        sum(self.subtasks())
    }

    /// The sum over all subtasks of the running (or last) attempt only.
    pub fn attempt_total(&self) -> AsyncMetricsSnapshot {
        let r = lock(&self.inner);
        sum(r.current.iter().map(|c| (c.subtask, c.read())).collect())
    }
}

fn sum(snapshots: Vec<(usize, AsyncMetricsSnapshot)>) -> AsyncMetricsSnapshot {
    let mut total = AsyncMetricsSnapshot::default();
    for (_, s) in snapshots {
        total.merge(&s);
    }
    total
}

/// The metrics of one subtask, or of several summed, at one point in time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AsyncMetricsSnapshot {
    /// How many subtasks are summed here.
    pub subtasks: usize,
    /// Requests in flight (including completed ones waiting to be emitted in order).
    pub in_flight: u64,
    /// Requests completed with a result (including timeout fallbacks).
    pub completed: u64,
    /// Requests whose timeout expired.
    pub timeouts: u64,
    /// Retries started.
    pub retries: u64,
    /// Requests that failed the job (error, panic, or a failing timeout handler).
    pub failures: u64,
    /// Batch calls sent (batched operators only; zero otherwise).
    pub batches: u64,
    /// Latency from a request's first call to its final result, over completed requests.
    pub latency: LatencyHistogram,
}

impl AsyncMetricsSnapshot {
    /// The figures of the async wait operator(s) named `operator`, summed over their subtasks,
    /// as `metrics` holds them ([`JobHandle::metrics`](sluice_runtime::JobHandle::metrics) while
    /// the job runs, [`JobResult::metrics`](sluice_runtime::JobResult) after): the published
    /// counters, in-flight gauge and `async_latency_seconds` histogram. Unlike an
    /// [`AsyncMetrics`] handle, which sees only the subtasks of its own process, this covers
    /// subtasks running on task managers in cluster mode. The latency histogram is rebuilt from
    /// the published buckets, spreading each bucket's count evenly over its range, so its
    /// quantiles are estimates within a bucket (as Prometheus' `histogram_quantile` gives).
    ///
    /// ```
    /// use sluice_async_io::{AsyncMetricsSnapshot, AsyncWait, async_fn};
    /// use sluice_runtime::prelude::*;
    /// use std::time::Duration;
    ///
    /// let env = StreamEnvironment::new();
    /// env.set_parallelism(2);
    /// let out = AsyncWait::new(async_fn(|x: u64| async move { Ok(Some(x)) }))
    ///     .timeout(Duration::from_secs(10))
    ///     .name("lookup")
    ///     .unordered()
    ///     .apply(&env.from_iter(0u64..100))
    ///     .unwrap()
    ///     .collect();
    /// let result = env.execute_blocking("from job").unwrap();
    /// let lookup = AsyncMetricsSnapshot::from_job(&result.metrics, "lookup");
    /// assert_eq!((lookup.subtasks, lookup.completed, lookup.in_flight), (2, 100, 0));
    /// assert_eq!(lookup.latency.count(), 100);
    /// ```
    pub fn from_job(metrics: &JobMetrics, operator: &str) -> Self {
        let mut total = AsyncMetricsSnapshot::default();
        for s in metrics.subtasks_of(operator) {
            let counter = |name: &str| s.counters.get(name).copied().unwrap_or(0);
            let one = AsyncMetricsSnapshot {
                subtasks: 1,
                in_flight: s
                    .gauges
                    .get("async_in_flight")
                    .map_or(0, |g| u64::try_from(*g).unwrap_or(0)),
                completed: counter("async_completed"),
                timeouts: counter("async_timeouts"),
                retries: counter("async_retries"),
                failures: counter("async_failures"),
                batches: counter("async_batches"),
                latency: s
                    .histograms
                    .get("async_latency_seconds")
                    .map(LatencyHistogram::from_published)
                    .unwrap_or_default(),
            };
            total.merge(&one);
        }
        total
    }

    fn merge(&mut self, other: &AsyncMetricsSnapshot) {
        self.subtasks += other.subtasks;
        self.in_flight += other.in_flight;
        self.completed += other.completed;
        self.timeouts += other.timeouts;
        self.retries += other.retries;
        self.failures += other.failures;
        self.batches += other.batches;
        self.latency.merge(&other.latency);
    }
}

/// A fixed-bucket latency histogram: exact below 16 µs, within 12.5 % above.
///
/// ```
/// use sluice_async_io::LatencyHistogram;
/// use std::time::Duration;
///
/// let mut h = LatencyHistogram::default();
/// for ms in 1..=100u64 {
///     h.record(Duration::from_millis(ms));
/// }
/// assert_eq!(h.count(), 100);
/// let p50 = h.quantile(0.5).as_secs_f64() * 1000.0;
/// assert!((45.0..=56.0).contains(&p50), "{p50}");
/// assert_eq!(h.max(), Duration::from_millis(100));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatencyHistogram {
    buckets: Vec<u64>,
    sum_us: u64,
    max_us: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            buckets: vec![0; BUCKETS],
            sum_us: 0,
            max_us: 0,
        }
    }
}

impl LatencyHistogram {
    /// Adds one observation.
    pub fn record(&mut self, latency: Duration) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(us)] += 1;
        self.sum_us = self.sum_us.saturating_add(us);
        self.max_us = self.max_us.max(us);
    }

    /// The number of observations.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// The mean latency (zero when empty).
    pub fn mean(&self) -> Duration {
        match self.count() {
            0 => Duration::ZERO,
            n => Duration::from_micros(self.sum_us / n),
        }
    }

    /// The largest latency observed.
    pub fn max(&self) -> Duration {
        Duration::from_micros(self.max_us)
    }

    /// The latency at quantile `q` (0.0 to 1.0): the middle of the bucket holding it, capped at
    /// the maximum observed. Zero when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        let n = self.count();
        if n == 0 {
            return Duration::ZERO;
        }
        let rank = ((q.clamp(0.0, 1.0) * n as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let (low, high) = bucket_bounds(i);
                let mid = low + (high - low - 1) / 2;
                return Duration::from_micros(mid.min(self.max_us));
            }
        }
        self.max()
    }

    /// A histogram rebuilt from a published one (seconds, inclusive upper bounds): each bucket's
    /// count spread evenly over the fine buckets its range covers, the overflow bucket's at its
    /// lower end. The count and the sum are the published ones; the maximum is the upper end of
    /// the highest bucket that holds anything.
    fn from_published(h: &HistogramSnapshot) -> Self {
        let micros = |seconds: f64| (seconds.max(0.0) * 1e6).round() as u64;
        let mut out = LatencyHistogram::default();
        // Values in bucket `i` lie in (low, high] microseconds.
        let mut low = 0u64;
        for (i, &n) in h.counts.iter().enumerate() {
            let high = h.bounds.get(i).map_or(low, |b| micros(*b).max(low));
            if n > 0 {
                if high == low {
                    out.buckets[bucket_of(low)] += n;
                } else {
                    spread(&mut out.buckets, low, high, n);
                }
                out.max_us = out.max_us.max(high);
            }
            low = high;
        }
        out.sum_us = micros(h.sum);
        out
    }

    fn merge(&mut self, other: &LatencyHistogram) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.sum_us = self.sum_us.saturating_add(other.sum_us);
        self.max_us = self.max_us.max(other.max_us);
    }
}

/// Adds `n` observations spread evenly over the values `low + 1 ..= high` (µs, `low < high`) to
/// the fine `buckets`, each bucket getting its share of the range (rounded so the shares add up
/// to `n`).
fn spread(buckets: &mut [u64], low: u64, high: u64, n: u64) {
    let width = u128::from(high - low);
    let (mut covered, mut given) = (0u128, 0u64);
    let (first, last) = (bucket_of(low + 1), bucket_of(high));
    for (b, bucket) in buckets.iter_mut().enumerate().take(last + 1).skip(first) {
        let (lo, hi) = bucket_bounds(b);
        // The values of bucket `b` ([lo, hi)) inside (low, high]; the last bucket takes the rest.
        let span = if b == BUCKETS - 1 {
            u128::from(high) - u128::from(lo.max(low + 1)) + 1
        } else {
            u128::from((hi - 1).min(high)) - u128::from(lo.max(low + 1)) + 1
        };
        covered += span;
        let upto = (u128::from(n) * covered.min(width) / width) as u64;
        *bucket += upto - given;
        given = upto;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_monotonic() {
        let mut prev_high = 0;
        for i in 0..BUCKETS {
            let (low, high) = bucket_bounds(i);
            assert_eq!(low, prev_high, "gap before bucket {i}");
            assert!(high > low);
            assert_eq!(bucket_of(low), i);
            assert_eq!(bucket_of(high - 1), i);
            prev_high = high;
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn local_counts_reach_the_shared_counters_once() {
        let m = AsyncMetrics::default();
        let shared = m.register(0);
        let mut local = LocalCounters::default();
        local.completed(Duration::from_micros(3));
        local.completed(Duration::from_millis(10));
        local.timed_out();
        local.retried();
        local.failed();
        local.publish(&shared, 7);
        local.publish(&shared, 5);
        let s = m.total();
        assert_eq!(
            (s.in_flight, s.completed, s.timeouts, s.retries, s.failures),
            (5, 2, 1, 1, 1)
        );
        assert_eq!(s.latency.count(), 2);
        assert_eq!(s.latency.max(), Duration::from_millis(10));
        assert_eq!(s.latency.quantile(0.0), Duration::from_micros(3));
        // A restarted subtask starts new counters; the job's figures keep the old ones.
        m.register(0);
        assert_eq!(m.attempt_total().completed, 0);
        assert_eq!(m.total().completed, 2);
        assert_eq!(m.subtasks().len(), 1);
    }
}

#[cfg(test)]
mod published_tests {
    use super::*;

    /// What the operator publishes, read back: every observation kept, each quantile within the
    /// published bucket that holds it.
    #[test]
    fn a_published_histogram_is_rebuilt_with_its_count_sum_and_buckets() {
        let m = AsyncMetrics::default();
        let shared = m.register(0);
        let mut local = LocalCounters::default();
        let latencies_us = [
            40u64, 300, 700, 3_000, 3_500, 4_000, 8_000, 20_000, 90_000_000,
        ];
        for us in latencies_us {
            local.completed(Duration::from_micros(us));
        }
        local.publish(&shared, 0);
        let mut report = MetricsReport::default();
        shared.report(&mut report);
        let published = &report.histograms["async_latency_seconds"];
        let rebuilt = LatencyHistogram::from_published(published);
        assert_eq!(rebuilt.count(), latencies_us.len() as u64);
        assert_eq!(rebuilt.sum_us, latencies_us.iter().sum::<u64>());
        // The median (3.5 ms) lies in the published bucket (2.5 ms, 5 ms].
        let p50 = rebuilt.quantile(0.5).as_micros() as u64;
        assert!((2_500..=5_000).contains(&p50), "{p50}");
        // 90 s is above every bound: counted at the last bound (60 s), the maximum known.
        assert_eq!(rebuilt.quantile(1.0), Duration::from_secs(60));
        let p10 = rebuilt.quantile(0.1).as_micros() as u64;
        assert!(p10 <= 100, "{p10}");
    }

    #[test]
    fn spreading_keeps_every_observation() {
        for (low, high, n) in [
            (0u64, 100u64, 7u64),
            (100, 250, 1),
            (2_500, 5_000, 1_000),
            (1, 2, 3),
        ] {
            let mut buckets = vec![0; BUCKETS];
            spread(&mut buckets, low, high, n);
            assert_eq!(buckets.iter().sum::<u64>(), n, "({low}, {high}]");
            for (b, c) in buckets.iter().enumerate() {
                if *c > 0 {
                    let (lo, hi) = bucket_bounds(b);
                    assert!(hi > low && lo <= high, "bucket {b} outside ({low}, {high}]");
                }
            }
        }
    }
}

#[cfg(test)]
mod source_tests {
    use super::*;
    use sluice_runtime::OperatorMetrics;

    #[test]
    fn the_counters_publish_into_the_operator_metrics() {
        let m = AsyncMetrics::default();
        let shared = m.register(0);
        let mut local = LocalCounters::default();
        local.completed(Duration::from_micros(50)); // <= 100 µs
        local.completed(Duration::from_millis(3)); // <= 5 ms
        local.completed(Duration::from_secs(120)); // above every bound
        local.timed_out();
        local.publish(&shared, 4);
        let op = OperatorMetrics::default();
        assert!(op.register_source("async", shared));
        let r = op.report();
        assert_eq!(r.gauges["async_in_flight"], 4);
        assert_eq!(r.counters["async_completed"], 3);
        assert_eq!(r.counters["async_timeouts"], 1);
        let h = &r.histograms["async_latency_seconds"];
        assert_eq!(h.count(), 3);
        let le = |bound: f64| h.cumulative().find(|(b, _)| *b == bound).unwrap().1;
        assert_eq!(le(0.000_1), 1);
        assert_eq!(le(0.002_5), 1);
        assert_eq!(le(0.005), 2);
        assert_eq!(le(60.0), 2);
        assert_eq!(le(f64::INFINITY), 3);
        assert!((h.sum - 120.003_05).abs() < 1e-6, "{}", h.sum);
        // A restarted subtask registers new counters: what the old ones counted stays.
        assert!(op.register_source("async", m.register(0)));
        let r = op.report();
        assert_eq!(r.counters["async_completed"], 3);
        assert_eq!(r.gauges["async_in_flight"], 0);
        assert_eq!(r.histograms["async_latency_seconds"].count(), 3);
    }
}

#[cfg(test)]
mod restart_tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_restarted_subtask_adds_to_what_its_earlier_attempts_counted() {
        let m = AsyncMetrics::default();
        let first = m.register(0);
        first.completed.store(10, Ordering::Relaxed);
        first.in_flight.store(3, Ordering::Relaxed);
        let second = m.register(0);
        second.completed.store(4, Ordering::Relaxed);
        second.in_flight.store(1, Ordering::Relaxed);
        let total = m.total();
        assert_eq!(total.completed, 14, "both attempts");
        assert_eq!(
            total.in_flight, 1,
            "only the running attempt has requests in flight"
        );
        assert_eq!(total.subtasks, 1);
        assert_eq!(m.attempt_total().completed, 4);
        m.register(0).completed.store(1, Ordering::Relaxed);
        assert_eq!(m.total().completed, 15);
    }
}
