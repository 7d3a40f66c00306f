//! Per operator subtask metrics: records in and out, busy and backpressured time.
//!
//! Counters are atomics updated once per batch (never per record) by the task that owns the
//! operator, and read at any time by the [`JobHandle`](crate::JobHandle) or at the end of the job
//! in the [`JobResult`](crate::JobResult).

use serde::Serialize;
use sluice_core::sync::lock;
use sluice_core::{NodeId, SubtaskIndex};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Live counters of one operator subtask.
///
/// Busy and backpressured time are measured per task (a chain of operators) and reported for
/// every operator of the chain, as Flink does.
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
    gauges: std::sync::Mutex<BTreeMap<String, i64>>,
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

    fn gauges(&self) -> BTreeMap<String, i64> {
        lock(&self.gauges).clone()
    }

    /// Records that entered the operator so far.
    pub fn records_in(&self) -> u64 {
        self.records_in.load(Ordering::Relaxed)
    }

    /// Records the operator emitted so far.
    pub fn records_out(&self) -> u64 {
        self.records_out.load(Ordering::Relaxed)
    }

    /// Time the subtask's task spent working.
    pub fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy_ns.load(Ordering::Relaxed))
    }

    /// Time the subtask's task waited for room in a full output channel.
    pub fn backpressured(&self) -> Duration {
        Duration::from_nanos(self.backpressured_ns.load(Ordering::Relaxed))
    }
}

/// A point-in-time copy of one operator subtask's metrics.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
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
    /// Busy time.
    pub busy: Duration,
    /// Backpressured time.
    pub backpressured: Duration,
    /// Operator-defined gauges.
    pub gauges: BTreeMap<String, i64>,
}

impl SubtaskMetrics {
    pub(crate) fn read(
        operator_id: NodeId,
        operator_name: &str,
        subtask: SubtaskIndex,
        m: &OperatorMetrics,
    ) -> Self {
        SubtaskMetrics {
            operator_id,
            operator_name: operator_name.to_string(),
            subtask,
            records_in: m.records_in(),
            records_out: m.records_out(),
            busy: m.busy(),
            backpressured: m.backpressured(),
            gauges: m.gauges(),
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
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
    /// times are summed per operator subtask; gauges are `later`'s.
    ///
    /// ```
    /// use sluice_runtime::{JobMetrics, SubtaskMetrics};
    /// use sluice_core::NodeId;
    /// let one = |n| SubtaskMetrics {
    ///     operator_id: NodeId(0), operator_name: "map".into(), subtask: 0,
    ///     records_in: n, records_out: n, busy: Default::default(),
    ///     backpressured: Default::default(), gauges: Default::default(),
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
                    s.gauges = l.gauges.clone();
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
