//! Counters that cross processes: what a task manager reports of an operator subtask
//! ([`RemoteMetrics`]), and how the job master's copy of that subtask takes it
//! ([`OperatorMetrics::mirror`]), so that a job on a cluster shows the same live view as a
//! local one.

use super::{MetricsReport, OperatorMetrics, SubtaskMetrics};
use serde::{Deserialize, Serialize};
use sluice_core::NodeId;
use sluice_core::sync::lock;
use std::sync::atomic::Ordering;

/// One operator subtask's counters, as a task manager reports them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemoteMetrics {
    /// The operator.
    pub node: NodeId,
    /// The subtask.
    pub subtask: usize,
    /// Records in.
    pub records_in: u64,
    /// Records out.
    pub records_out: u64,
    /// Busy time, in nanoseconds.
    pub busy_ns: u64,
    /// Backpressured time, in nanoseconds.
    pub backpressured_ns: u64,
    /// Events sent to the coordinator.
    pub events_to_coordinator: u64,
    /// Events received from the coordinator.
    pub events_from_coordinator: u64,
    /// What the operator publishes itself: its gauges and what its metric sources report.
    pub report: MetricsReport,
}

impl RemoteMetrics {
    pub(crate) fn of(m: &SubtaskMetrics) -> Self {
        RemoteMetrics {
            node: m.operator_id,
            subtask: m.subtask,
            records_in: m.records_in,
            records_out: m.records_out,
            busy_ns: u64::try_from(m.busy.as_nanos()).unwrap_or(u64::MAX),
            backpressured_ns: u64::try_from(m.backpressured.as_nanos()).unwrap_or(u64::MAX),
            events_to_coordinator: m.events_to_coordinator,
            events_from_coordinator: m.events_from_coordinator,
            report: MetricsReport {
                gauges: m.gauges.clone(),
                counters: m.counters.clone(),
                histograms: m.histograms.clone(),
            },
        }
    }
}

impl OperatorMetrics {
    /// Takes the values a task manager reported for this subtask (cluster mode: the job
    /// master's copy of a subtask that runs elsewhere).
    pub(crate) fn mirror(&self, m: &RemoteMetrics) {
        self.records_in.store(m.records_in, Ordering::Relaxed);
        self.records_out.store(m.records_out, Ordering::Relaxed);
        self.busy_ns.store(m.busy_ns, Ordering::Relaxed);
        self.backpressured_ns
            .store(m.backpressured_ns, Ordering::Relaxed);
        self.events_to_coordinator
            .store(m.events_to_coordinator, Ordering::Relaxed);
        self.events_from_coordinator
            .store(m.events_from_coordinator, Ordering::Relaxed);
        let mut report = m.report.clone();
        *lock(&self.gauges) = std::mem::take(&mut report.gauges);
        *lock(&self.mirrored) = report;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A subtask's counters reported by a task manager read the same on the job master's copy.
    #[test]
    fn a_mirror_reads_what_the_task_manager_counted() {
        let there = OperatorMetrics::default();
        there.add_records_in(7);
        there.add_records_out(3);
        there.add_busy(Duration::from_millis(5));
        there.add_event_to_coordinator();
        there.set_gauge("lag", 42);
        let sent = RemoteMetrics::of(&SubtaskMetrics::read(NodeId(1), "op", 0, &there));
        let here = OperatorMetrics::default();
        here.mirror(&sent);
        assert_eq!(
            SubtaskMetrics::read(NodeId(1), "op", 0, &here),
            SubtaskMetrics::read(NodeId(1), "op", 0, &there)
        );
    }
}
