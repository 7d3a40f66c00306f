//! Per operator subtask metrics: records in and out, busy and backpressured time, events to
//! and from the operator's coordinator, and what the operator publishes itself (gauges, and
//! through a [`MetricSource`] counters and histograms).
//!
//! Counters are atomics updated once per batch (never per record) by the task that owns the
//! operator, and read at any time by the [`JobHandle`](crate::JobHandle), its
//! [`JobObserver`](crate::job::JobObserver), or at the end of the job in the
//! [`JobResult`](crate::JobResult). A metric source is read only when metrics are read (a
//! snapshot, a scrape), so an operator that keeps its own counters (the async wait operator's
//! in-flight gauge and latency histogram) publishes them at no cost on the record path.
//!
//! Everything here is bounded: at most [`MAX_METRIC_SOURCES`] sources per operator subtask, at
//! most [`MAX_REPORTED_METRICS`] values of each kind per subtask, at most
//! [`MAX_HISTOGRAM_BOUNDS`] bounds per histogram.

mod remote;
pub use remote::RemoteMetrics;

use serde::{Deserialize, Serialize};
use sluice_core::sync::lock;
use sluice_core::{NodeId, SubtaskIndex};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Most metric sources one operator subtask holds; [`OperatorMetrics::register_source`] refuses
/// more (a source registered again under its name replaces itself and does not count twice).
pub const MAX_METRIC_SOURCES: usize = 16;

/// Most values of each kind (gauges, counters, histograms) one subtask reports; values under
/// further names are dropped.
pub const MAX_REPORTED_METRICS: usize = 64;

/// Most bounds one histogram keeps; observations above the last kept bound fall in the overflow
/// bucket.
pub const MAX_HISTOGRAM_BOUNDS: usize = 64;

/// A histogram with fixed bucket bounds, as a metric source reports it (Prometheus' model: the
/// bounds are inclusive upper bounds, and one overflow bucket holds what lies above the last).
///
/// ```
/// use sluice_runtime::metrics::HistogramSnapshot;
/// let mut h = HistogramSnapshot::new(vec![0.01, 0.1, 1.0]);
/// h.observe(0.005);
/// h.observe(0.05);
/// h.observe(5.0);
/// assert_eq!(h.count(), 3);
/// let cumulative: Vec<u64> = h.cumulative().map(|(_, n)| n).collect();
/// assert_eq!(cumulative, vec![1, 2, 2, 3]); // le 0.01, le 0.1, le 1, +Inf
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistogramSnapshot {
    /// Inclusive upper bounds, increasing.
    pub bounds: Vec<f64>,
    /// Observations per bucket: `counts[i]` lie in `(bounds[i - 1], bounds[i]]`, and the last
    /// entry (`counts[bounds.len()]`) above every bound. One longer than `bounds`.
    pub counts: Vec<u64>,
    /// The sum of every observation.
    pub sum: f64,
}

impl HistogramSnapshot {
    /// An empty histogram over `bounds` (sorted, deduplicated, at most
    /// [`MAX_HISTOGRAM_BOUNDS`] kept; NaN dropped).
    pub fn new(mut bounds: Vec<f64>) -> Self {
        bounds.retain(|b| !b.is_nan());
        bounds.sort_by(f64::total_cmp);
        bounds.dedup();
        bounds.truncate(MAX_HISTOGRAM_BOUNDS);
        let counts = vec![0; bounds.len() + 1];
        HistogramSnapshot {
            bounds,
            counts,
            sum: 0.0,
        }
    }

    /// Adds one observation.
    pub fn observe(&mut self, value: f64) {
        self.add(value, 1);
        self.sum += value;
    }

    /// Adds `n` observations in the bucket of `value`, without changing the sum (a source that
    /// keeps its own finer buckets and its own sum re-buckets this way).
    pub fn add(&mut self, value: f64, n: u64) {
        let i = self.bounds.partition_point(|b| *b < value);
        if let Some(c) = self.counts.get_mut(i) {
            *c += n;
        }
    }

    /// The number of observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The cumulative counts, Prometheus' `le` buckets: each bound with the observations at or
    /// below it, and last `f64::INFINITY` with every observation.
    pub fn cumulative(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        let bounds = self
            .bounds
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY));
        bounds.zip(&self.counts).scan(0u64, |seen, (b, c)| {
            *seen += c;
            Some((b, *seen))
        })
    }

    /// Adds `other`'s observations to these. With the same bounds bucket by bucket; otherwise
    /// each of `other`'s buckets goes to the bucket of its upper bound.
    pub fn merge(&mut self, other: &HistogramSnapshot) {
        if self.bounds == other.bounds && self.counts.len() == other.counts.len() {
            for (a, b) in self.counts.iter_mut().zip(&other.counts) {
                *a += b;
            }
        } else if self.count() == 0 && self.bounds.is_empty() {
            *self = other.clone();
            return;
        } else {
            for (bound, n) in other
                .bounds
                .iter()
                .copied()
                .chain(std::iter::once(f64::INFINITY))
                .zip(other.counts.iter().copied())
            {
                if n > 0 {
                    self.add(bound, n);
                }
            }
        }
        self.sum += other.sum;
    }
}

/// What one operator subtask reports besides its built-in counters: gauges (values that go up
/// and down), counters (totals that only grow) and histograms, by name. Names are the
/// operator's own (say `async_in_flight`); exporters add their prefix.
///
/// Bounded: at most [`MAX_REPORTED_METRICS`] names of each kind; further names are dropped.
///
/// ```
/// use sluice_runtime::metrics::{HistogramSnapshot, MetricsReport};
/// let mut r = MetricsReport::default();
/// r.gauge("queue_length", 3);
/// r.counter("retries", 2);
/// r.counter("retries", 1); // counters of one name add up
/// r.histogram("latency_seconds", &HistogramSnapshot::new(vec![0.1, 1.0]));
/// assert_eq!(r.counters["retries"], 3);
/// assert_eq!(r.gauges["queue_length"], 3);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MetricsReport {
    /// Gauges, by name.
    pub gauges: BTreeMap<String, i64>,
    /// Counters, by name.
    pub counters: BTreeMap<String, u64>,
    /// Histograms, by name.
    pub histograms: BTreeMap<String, HistogramSnapshot>,
}

fn room<V>(map: &BTreeMap<String, V>, name: &str) -> bool {
    map.len() < MAX_REPORTED_METRICS || map.contains_key(name)
}

impl MetricsReport {
    /// Sets gauge `name` (a later value of the same name replaces it).
    pub fn gauge(&mut self, name: &str, value: i64) {
        if room(&self.gauges, name) {
            self.gauges.insert(name.to_string(), value);
        }
    }

    /// Adds `value` to counter `name`.
    pub fn counter(&mut self, name: &str, value: u64) {
        if room(&self.counters, name) {
            let c = self.counters.entry(name.to_string()).or_default();
            *c = c.saturating_add(value);
        }
    }

    /// Merges `histogram` into histogram `name`.
    pub fn histogram(&mut self, name: &str, histogram: &HistogramSnapshot) {
        if room(&self.histograms, name) {
            match self.histograms.get_mut(name) {
                Some(h) => h.merge(histogram),
                None => {
                    let mut h = histogram.clone();
                    if h.bounds.len() > MAX_HISTOGRAM_BOUNDS {
                        h = HistogramSnapshot::new(h.bounds.clone());
                        h.merge(histogram);
                    }
                    self.histograms.insert(name.to_string(), h);
                }
            }
        }
    }

    /// Adds `other`'s counters and histograms to these; `other`'s gauges replace these.
    pub fn accumulate(&mut self, other: &MetricsReport) {
        for (k, v) in &other.gauges {
            self.gauge(k, *v);
        }
        for (k, v) in &other.counters {
            self.counter(k, *v);
        }
        for (k, h) in &other.histograms {
            self.histogram(k, h);
        }
    }
}

/// Metrics an operator keeps itself and publishes through its [`OperatorMetrics`]: read only
/// when metrics are read (a snapshot, a Prometheus scrape, the web dashboard), never on the
/// record path. Register one in `open` with [`OperatorMetrics::register_source`].
///
/// ```
/// use sluice_runtime::OperatorMetrics;
/// use sluice_runtime::metrics::{MetricSource, MetricsReport};
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
///
/// #[derive(Default)]
/// struct Queue { waiting: AtomicU64 }
/// impl MetricSource for Queue {
///     fn report(&self, out: &mut MetricsReport) {
///         out.gauge("queue_waiting", self.waiting.load(Ordering::Relaxed) as i64);
///     }
/// }
///
/// let m = OperatorMetrics::default();
/// let q = Arc::new(Queue::default());
/// q.waiting.store(7, Ordering::Relaxed);
/// assert!(m.register_source("queue", q));
/// assert_eq!(m.report().gauges["queue_waiting"], 7);
/// ```
pub trait MetricSource: Send + Sync + 'static {
    /// Adds this source's current values to `out`. Called off the record path; must be quick
    /// and must not block (read atomics, or take a short lock).
    fn report(&self, out: &mut MetricsReport);
}

/// The registered sources of one operator subtask, and what replaced sources counted.
#[derive(Default)]
struct Sources {
    live: Vec<(String, Arc<dyn MetricSource>)>,
    /// Counters and histograms of sources replaced by a later registration under their name
    /// (a restarted subtask): kept so that totals never go down. Their gauges are dropped.
    retired: MetricsReport,
}

impl std::fmt::Debug for Sources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.live.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Sources")
            .field("live", &names)
            .field("retired", &self.retired)
            .finish()
    }
}

/// Live counters of one operator subtask.
///
/// Busy and backpressured time are measured per task (a chain of operators) and reported for
/// every operator of the chain, as Flink does, with one exception that points at the operator
/// holding the chain back: while the task's input waits because an operator of the chain
/// refuses more (an async operator with every request slot taken), that wait is busy time for
/// that operator and the ones after it (Flink counts a task blocked on a full async queue as
/// busy) and backpressured time for the operators before it.
///
/// ```
/// use sluice_runtime::OperatorMetrics;
/// let m = OperatorMetrics::default();
/// m.add_records_in(10);
/// assert_eq!(m.records_in(), 10);
/// ```
#[derive(Debug, Default)]
pub struct OperatorMetrics {
    records_in: AtomicU64,
    records_out: AtomicU64,
    busy_ns: AtomicU64,
    backpressured_ns: AtomicU64,
    events_to_coordinator: AtomicU64,
    events_from_coordinator: AtomicU64,
    gauges: Mutex<BTreeMap<String, i64>>,
    sources: Mutex<Sources>,
    /// Counters and histograms a task manager last reported (cluster mode: on the job master's
    /// copy of a subtask that runs elsewhere).
    mirrored: Mutex<MetricsReport>,
}

impl OperatorMetrics {
    /// Counts `n` records that entered the operator.
    #[inline]
    pub fn add_records_in(&self, n: usize) {
        self.records_in.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts `n` records the operator emitted.
    #[inline]
    pub fn add_records_out(&self, n: usize) {
        self.records_out.fetch_add(n as u64, Ordering::Relaxed);
    }

    pub(crate) fn add_busy(&self, d: Duration) {
        self.busy_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    pub(crate) fn add_backpressured(&self, d: Duration) {
        self.backpressured_ns
            .fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Sets the operator-defined gauge `name` (set rarely, e.g. per checkpoint or per event;
    /// not meant for the per-record path).
    ///
    /// ```
    /// use sluice_runtime::OperatorMetrics;
    /// let m = OperatorMetrics::default();
    /// m.set_gauge("global_progress", 42);
    /// assert_eq!(m.gauge("global_progress"), Some(42));
    /// ```
    pub fn set_gauge(&self, name: &str, value: i64) {
        let mut gauges = lock(&self.gauges);
        // Gauges are set again and again under the same names: allocate a name only once.
        match gauges.get_mut(name) {
            Some(v) => *v = value,
            None => {
                gauges.insert(name.to_string(), value);
            }
        }
    }

    /// The value of gauge `name`, if set.
    pub fn gauge(&self, name: &str) -> Option<i64> {
        lock(&self.gauges).get(name).copied()
    }

    /// Registers `source` under `name`, to be read whenever this subtask's metrics are read.
    /// A source already registered under `name` is replaced (its counters and histograms stay
    /// counted, so totals never go down when a restarted operator registers again). Returns
    /// false, and registers nothing, when [`MAX_METRIC_SOURCES`] other sources are registered.
    pub fn register_source(&self, name: &str, source: Arc<dyn MetricSource>) -> bool {
        let mut sources = lock(&self.sources);
        if let Some(i) = sources.live.iter().position(|(n, _)| n == name) {
            let (_, old) = std::mem::replace(&mut sources.live[i], (name.to_string(), source));
            let mut last = MetricsReport::default();
            old.report(&mut last);
            last.gauges.clear();
            sources.retired.accumulate(&last);
            return true;
        }
        if sources.live.len() >= MAX_METRIC_SOURCES {
            return false;
        }
        sources.live.push((name.to_string(), source));
        true
    }

    /// What the operator publishes now: its gauges ([`set_gauge`](Self::set_gauge)) and what
    /// its sources report.
    pub fn report(&self) -> MetricsReport {
        let mut out = MetricsReport::default();
        for (k, v) in lock(&self.gauges).iter() {
            out.gauge(k, *v);
        }
        // The sources are read outside the lock: a source may take its own lock.
        let (live, retired) = {
            let s = lock(&self.sources);
            let live: Vec<Arc<dyn MetricSource>> = s.live.iter().map(|(_, m)| m.clone()).collect();
            (live, s.retired.clone())
        };
        out.accumulate(&retired);
        out.accumulate(&lock(&self.mirrored));
        for m in live {
            m.report(&mut out);
        }
        out
    }

    /// Counts one event this subtask sent to its coordinator.
    pub(crate) fn add_event_to_coordinator(&self) {
        self.events_to_coordinator.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one event this subtask received from its coordinator.
    pub(crate) fn add_event_from_coordinator(&self) {
        self.events_from_coordinator.fetch_add(1, Ordering::Relaxed);
    }

    /// Events this subtask sent to its coordinator so far.
    pub fn events_to_coordinator(&self) -> u64 {
        self.events_to_coordinator.load(Ordering::Relaxed)
    }

    /// Events this subtask received from its coordinator so far.
    pub fn events_from_coordinator(&self) -> u64 {
        self.events_from_coordinator.load(Ordering::Relaxed)
    }

    /// Records that entered the operator so far.
    pub fn records_in(&self) -> u64 {
        self.records_in.load(Ordering::Relaxed)
    }

    /// Records the operator emitted so far.
    pub fn records_out(&self) -> u64 {
        self.records_out.load(Ordering::Relaxed)
    }

    /// Time the subtask's task spent working, including the time its input waited on this
    /// operator, or one before it in the chain, refusing more input.
    pub fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy_ns.load(Ordering::Relaxed))
    }

    /// Time the subtask's task waited for room in a full output channel, and the time its
    /// input waited on an operator after this one in the chain refusing more input.
    pub fn backpressured(&self) -> Duration {
        Duration::from_nanos(self.backpressured_ns.load(Ordering::Relaxed))
    }
}

/// A point-in-time copy of one operator subtask's metrics.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SubtaskMetrics {
    /// The operator.
    pub operator_id: NodeId,
    /// The operator's name.
    pub operator_name: String,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// Records in.
    pub records_in: u64,
    /// Records out.
    pub records_out: u64,
    /// Busy time (see [`OperatorMetrics::busy`]).
    pub busy: Duration,
    /// Backpressured time (see [`OperatorMetrics::backpressured`]).
    pub backpressured: Duration,
    /// Events sent to the operator's coordinator.
    pub events_to_coordinator: u64,
    /// Events received from the operator's coordinator.
    pub events_from_coordinator: u64,
    /// Operator-defined gauges (set with [`OperatorMetrics::set_gauge`] or reported by a
    /// [`MetricSource`]).
    pub gauges: BTreeMap<String, i64>,
    /// Operator-defined counters (reported by a [`MetricSource`]).
    pub counters: BTreeMap<String, u64>,
    /// Operator-defined histograms (reported by a [`MetricSource`]).
    pub histograms: BTreeMap<String, HistogramSnapshot>,
}

impl Default for SubtaskMetrics {
    /// Operator `#0`, unnamed, subtask 0, everything zero.
    fn default() -> Self {
        SubtaskMetrics {
            operator_id: NodeId(0),
            operator_name: String::new(),
            subtask: 0,
            records_in: 0,
            records_out: 0,
            busy: Duration::ZERO,
            backpressured: Duration::ZERO,
            events_to_coordinator: 0,
            events_from_coordinator: 0,
            gauges: BTreeMap::new(),
            counters: BTreeMap::new(),
            histograms: BTreeMap::new(),
        }
    }
}

impl SubtaskMetrics {
    pub(crate) fn read(
        operator_id: NodeId,
        operator_name: &str,
        subtask: SubtaskIndex,
        m: &OperatorMetrics,
    ) -> Self {
        let report = m.report();
        SubtaskMetrics {
            operator_id,
            operator_name: operator_name.to_string(),
            subtask,
            records_in: m.records_in(),
            records_out: m.records_out(),
            busy: m.busy(),
            backpressured: m.backpressured(),
            events_to_coordinator: m.events_to_coordinator(),
            events_from_coordinator: m.events_from_coordinator(),
            gauges: report.gauges,
            counters: report.counters,
            histograms: report.histograms,
        }
    }
}

/// Metrics of a whole job: one entry per operator subtask, in graph order.
///
/// ```
/// use sluice_runtime::prelude::*;
/// let env = StreamEnvironment::new();
/// let _out = env.from_iter(0u64..10).map(|x| x + 1).name("inc").collect();
/// let result = env.execute_blocking("metrics").unwrap();
/// assert_eq!(result.metrics.operator("inc").records_in, 10);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct JobMetrics {
    /// Every operator subtask.
    pub subtasks: Vec<SubtaskMetrics>,
}

/// The sum of one operator's metrics over its subtasks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OperatorTotals {
    /// Records in, over all subtasks.
    pub records_in: u64,
    /// Records out, over all subtasks.
    pub records_out: u64,
    /// How many subtasks were summed.
    pub subtasks: usize,
}

impl JobMetrics {
    /// The totals of the operator(s) named `name` (zero when there is none).
    pub fn operator(&self, name: &str) -> OperatorTotals {
        let mut t = OperatorTotals::default();
        for s in self.subtasks.iter().filter(|s| s.operator_name == name) {
            t.records_in += s.records_in;
            t.records_out += s.records_out;
            t.subtasks += 1;
        }
        t
    }

    /// Adds the counters of `later` (a later attempt of the same job) to these: records and
    /// times, events, operator counters and histograms are summed per operator subtask; gauges
    /// are `later`'s.
    ///
    /// ```
    /// use sluice_runtime::{JobMetrics, SubtaskMetrics};
    /// use sluice_core::NodeId;
    /// let one = |n| SubtaskMetrics {
    ///     operator_id: NodeId(0), operator_name: "map".into(), subtask: 0,
    ///     records_in: n, records_out: n, ..Default::default()
    /// };
    /// let mut job = JobMetrics { subtasks: vec![one(10)] };
    /// job.accumulate(&JobMetrics { subtasks: vec![one(5)] });
    /// assert_eq!(job.operator("map").records_in, 15);
    /// ```
    pub fn accumulate(&mut self, later: &JobMetrics) {
        for l in &later.subtasks {
            let same =
                |s: &&mut SubtaskMetrics| s.operator_id == l.operator_id && s.subtask == l.subtask;
            match self.subtasks.iter_mut().find(same) {
                Some(s) => {
                    s.records_in += l.records_in;
                    s.records_out += l.records_out;
                    s.busy += l.busy;
                    s.backpressured += l.backpressured;
                    s.events_to_coordinator += l.events_to_coordinator;
                    s.events_from_coordinator += l.events_from_coordinator;
                    s.gauges = l.gauges.clone();
                    for (k, v) in &l.counters {
                        let c = s.counters.entry(k.clone()).or_default();
                        *c = c.saturating_add(*v);
                    }
                    for (k, h) in &l.histograms {
                        s.histograms.entry(k.clone()).or_default().merge(h);
                    }
                }
                None => self.subtasks.push(l.clone()),
            }
        }
    }

    /// The subtasks of the operator(s) named `name`.
    pub fn subtasks_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a SubtaskMetrics> {
        self.subtasks
            .iter()
            .filter(move |s| s.operator_name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source whose counter and gauge a test sets.
    #[derive(Default)]
    struct Fixed {
        count: AtomicU64,
        gauge: AtomicU64,
    }

    impl MetricSource for Fixed {
        fn report(&self, out: &mut MetricsReport) {
            out.counter("done", self.count.load(Ordering::Relaxed));
            out.gauge("waiting", self.gauge.load(Ordering::Relaxed) as i64);
            let mut h = HistogramSnapshot::new(vec![1.0, 10.0]);
            for _ in 0..self.count.load(Ordering::Relaxed) {
                h.observe(0.5);
            }
            out.histogram("seconds", &h);
        }
    }

    fn fixed(count: u64, gauge: u64) -> Arc<Fixed> {
        let f = Fixed::default();
        f.count.store(count, Ordering::Relaxed);
        f.gauge.store(gauge, Ordering::Relaxed);
        Arc::new(f)
    }

    #[test]
    fn a_replaced_source_keeps_its_counts_but_not_its_gauges() {
        let m = OperatorMetrics::default();
        assert!(m.register_source("s", fixed(5, 9)));
        assert!(m.register_source("s", fixed(2, 1))); // the subtask restarted
        let r = m.report();
        assert_eq!(r.counters["done"], 7);
        assert_eq!(r.gauges["waiting"], 1);
        assert_eq!(r.histograms["seconds"].count(), 7);
        let s = SubtaskMetrics::read(NodeId(3), "op", 1, &m);
        assert_eq!(s.counters["done"], 7);
        assert_eq!(s.histograms["seconds"].count(), 7);
    }

    #[test]
    fn sources_and_names_are_bounded() {
        let m = OperatorMetrics::default();
        for i in 0..MAX_METRIC_SOURCES {
            assert!(m.register_source(&format!("s{i}"), fixed(1, 0)));
        }
        assert!(!m.register_source("one too many", fixed(1, 0)));
        assert!(
            m.register_source("s0", fixed(1, 0)),
            "a known name replaces"
        );
        let mut r = MetricsReport::default();
        for i in 0..MAX_REPORTED_METRICS + 10 {
            r.counter(&format!("c{i}"), 1);
            r.gauge(&format!("g{i}"), 1);
            r.histogram(&format!("h{i}"), &HistogramSnapshot::new(vec![1.0]));
        }
        assert_eq!(r.counters.len(), MAX_REPORTED_METRICS);
        assert_eq!(r.gauges.len(), MAX_REPORTED_METRICS);
        assert_eq!(r.histograms.len(), MAX_REPORTED_METRICS);
        let wide = HistogramSnapshot::new((0..1000).map(f64::from).collect());
        assert_eq!(wide.bounds.len(), MAX_HISTOGRAM_BOUNDS);
        assert_eq!(wide.counts.len(), MAX_HISTOGRAM_BOUNDS + 1);
    }

    #[test]
    fn histograms_merge_by_bucket_or_by_upper_bound() {
        let mut a = HistogramSnapshot::new(vec![1.0, 10.0]);
        a.observe(0.5);
        let mut same = HistogramSnapshot::new(vec![1.0, 10.0]);
        same.observe(5.0);
        same.observe(50.0);
        a.merge(&same);
        assert_eq!(a.counts, vec![1, 1, 1]);
        assert_eq!(a.sum, 55.5);
        // Other bounds: each bucket lands where its upper bound falls.
        let mut other = HistogramSnapshot::new(vec![0.1, 2.0]);
        other.observe(0.05); // (.., 0.1] -> (.., 1]
        other.observe(1.5); // (0.1, 2] -> (1, 10]
        other.observe(3.0); // (2, ..) -> overflow
        a.merge(&other);
        assert_eq!(a.counts, vec![2, 2, 2]);
        let cumulative: Vec<(f64, u64)> = a.cumulative().collect();
        assert_eq!(cumulative, vec![(1.0, 2), (10.0, 4), (f64::INFINITY, 6)]);
        // An empty histogram without bounds takes the other's.
        let mut empty = HistogramSnapshot::default();
        empty.merge(&other);
        assert_eq!(empty, other);
    }

    #[test]
    fn accumulate_sums_events_counters_and_histograms_and_keeps_later_gauges() {
        let mut report = MetricsReport::default();
        report.counter("done", 2);
        report.gauge("waiting", 5);
        report.histogram("seconds", &{
            let mut h = HistogramSnapshot::new(vec![1.0]);
            h.observe(0.5);
            h
        });
        let one = |waiting: i64| SubtaskMetrics {
            operator_id: NodeId(1),
            operator_name: "op".into(),
            events_to_coordinator: 3,
            events_from_coordinator: 1,
            gauges: [("waiting".to_string(), waiting)].into(),
            counters: report.counters.clone(),
            histograms: report.histograms.clone(),
            ..Default::default()
        };
        let mut job = JobMetrics {
            subtasks: vec![one(5)],
        };
        job.accumulate(&JobMetrics {
            subtasks: vec![one(8)],
        });
        let s = &job.subtasks[0];
        assert_eq!((s.events_to_coordinator, s.events_from_coordinator), (6, 2));
        assert_eq!(s.counters["done"], 4);
        assert_eq!(s.histograms["seconds"].count(), 2);
        assert_eq!(s.gauges["waiting"], 8);
    }
}
