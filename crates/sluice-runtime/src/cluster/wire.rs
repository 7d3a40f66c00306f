//! What crosses between the processes of a cluster, in the runtime's terms: the deployment of
//! a batch of tasks, the master's messages to one task, what tasks send back, and the channel
//! elements of an exchange. Everything here is serde; the transport (gRPC for the control
//! plane, `sluice-net` for the data plane) encodes it with [`sluice_core::codec`] and never
//! looks inside.

use crate::error::{TaskError, TaskFailure};
use crate::state::OperatorState;
use crate::storage::StateFileHandle;
use crate::task::control::{DeclineReason, TaskControl, TaskReport};
use serde::{Deserialize, Serialize};
use sluice_core::{
    AttemptNumber, Batch, CheckpointBarrier, CheckpointId, NodeId, OperatorEvent, StreamElement,
    Watermark, WatermarkStatus,
};
use std::collections::BTreeMap;

/// Names one channel of an exchange across the cluster: unique per job-master epoch, attempt,
/// edge and (producer, consumer) subtask pair, so that a channel of a stopped attempt never
/// meets one of its successor on the same connection.
///
/// ```
/// use sluice_runtime::cluster::wire::ChannelKey;
///
/// let a = ChannelKey { epoch: 1, attempt: 0, edge: 2, producer: 0, consumer: 1 };
/// let b = ChannelKey { attempt: 1, ..a };
/// assert_ne!(a.id(), b.id());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChannelKey {
    /// The job master's epoch.
    pub epoch: u64,
    /// The attempt of the tasks at both ends.
    pub attempt: AttemptNumber,
    /// The edge of the job graph.
    pub edge: u32,
    /// The producing subtask.
    pub producer: u32,
    /// The consuming subtask.
    pub consumer: u32,
}

impl ChannelKey {
    /// The 64-bit channel id the data plane multiplexes by: a hash of every field (FxHash
    /// finalised by SplitMix64), so that any two keys of one connection's life differ with
    /// overwhelming probability.
    pub fn id(&self) -> u64 {
        let mut h: u64 = 0x243f_6a88_85a3_08d3;
        for v in [
            self.epoch,
            u64::from(self.attempt),
            u64::from(self.edge),
            u64::from(self.producer),
            u64::from(self.consumer),
        ] {
            h = (h.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
        h ^= h >> 30;
        h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h ^= h >> 27;
        h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^ (h >> 31)
    }
}

/// The tasks one job-master decision deploys together (a whole attempt, or one pipelined
/// region after a failure), and where each of them runs. The master sends the same batch,
/// with `tasks` narrowed and `states` filtered, to every task manager that runs part of it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Deployment {
    /// The job graph's fingerprint: a task manager running another build of the job refuses
    /// the deployment.
    pub fingerprint: String,
    /// The job master's epoch.
    pub epoch: u64,
    /// The attempt the tasks run as.
    pub attempt: AttemptNumber,
    /// Every task of the batch and the task manager it runs on.
    pub placement: BTreeMap<usize, String>,
    /// The data-plane address of every task manager named in `placement`.
    pub peers: BTreeMap<String, String>,
    /// The tasks the receiving task manager runs.
    pub tasks: Vec<usize>,
    /// The restored state of their operator subtasks, already redistributed.
    pub states: Vec<(NodeId, usize, OperatorState)>,
    /// The checkpoint the state comes from.
    pub restored_from: Option<CheckpointId>,
    /// Whether checkpointing is enabled, and how many may be pending at once.
    pub max_concurrent_checkpoints: Option<usize>,
}

/// A message from the job master to one task: its mailbox message, as it is.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Control {
    /// The job master's epoch.
    pub epoch: u64,
    /// The task's attempt.
    pub attempt: AttemptNumber,
    /// The task.
    pub task: usize,
    /// What to do: a checkpoint trigger, a completion or abort notice, a coordinator's event
    /// for an operator of the task's chain, or the order to finish.
    pub(crate) kind: TaskControl,
}

/// A message from a task manager to the job master, in the order its tasks produced them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Up {
    /// The job master's epoch the task runs under.
    pub epoch: u64,
    /// The task's attempt.
    pub attempt: AttemptNumber,
    /// The task.
    pub task: usize,
    /// What happened.
    pub kind: UpKind,
}

/// What a task sends to the master.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum UpKind {
    /// It took checkpoint `checkpoint`; its operators' states.
    Ack {
        /// The checkpoint.
        checkpoint: CheckpointId,
        /// One entry per operator subtask of its chain (the job master keeps them as its
        /// restore point for failover).
        states: Vec<(NodeId, usize, OperatorState)>,
        /// The state files the task manager wrote to the checkpoint storage itself (empty when
        /// it could not: the job master then writes them).
        written: Vec<StateFileHandle>,
    },
    /// A newer checkpoint overtook `checkpoint` during alignment.
    Declined {
        /// The checkpoint.
        checkpoint: CheckpointId,
    },
    /// Its input ended and its operators drained.
    FinishedInput,
    /// An event from operator `node`'s subtask to its coordinator.
    ToCoordinator {
        /// The operator.
        node: NodeId,
        /// The subtask.
        subtask: usize,
        /// The event.
        event: OperatorEvent,
    },
    /// The task ended: `Ok` when it finished, the failure otherwise.
    Ended(Result<(), RemoteTaskError>),
    /// The counters of the operator subtasks of a deployment (every second, and before each
    /// task end), for the job master's live view.
    Metrics(Vec<RemoteMetrics>),
}

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
    pub report: crate::metrics::MetricsReport,
}

impl RemoteMetrics {
    pub(crate) fn of(m: &crate::metrics::SubtaskMetrics) -> Self {
        RemoteMetrics {
            node: m.operator_id,
            subtask: m.subtask,
            records_in: m.records_in,
            records_out: m.records_out,
            busy_ns: u64::try_from(m.busy.as_nanos()).unwrap_or(u64::MAX),
            backpressured_ns: u64::try_from(m.backpressured.as_nanos()).unwrap_or(u64::MAX),
            events_to_coordinator: m.events_to_coordinator,
            events_from_coordinator: m.events_from_coordinator,
            report: crate::metrics::MetricsReport {
                gauges: m.gauges.clone(),
                counters: m.counters.clone(),
                histograms: m.histograms.clone(),
            },
        }
    }
}

impl UpKind {
    pub(crate) fn from_report(report: TaskReport) -> Self {
        match report {
            TaskReport::Ack {
                checkpoint, states, ..
            } => UpKind::Ack {
                checkpoint,
                states,
                written: Vec::new(),
            },
            TaskReport::Decline { checkpoint, .. } => UpKind::Declined { checkpoint },
            TaskReport::FinishedInput { .. } => UpKind::FinishedInput,
        }
    }

    /// The runtime's report, for the task numbered `task`, or `None` for what is not one.
    pub(crate) fn into_report(self, task: usize) -> Option<TaskReport> {
        match self {
            UpKind::Ack {
                checkpoint, states, ..
            } => Some(TaskReport::Ack {
                task,
                checkpoint,
                states,
            }),
            UpKind::Declined { checkpoint } => Some(TaskReport::Decline {
                task,
                checkpoint,
                reason: DeclineReason::Subsumed,
            }),
            UpKind::FinishedInput => Some(TaskReport::FinishedInput { task }),
            UpKind::ToCoordinator { .. } | UpKind::Ended(_) | UpKind::Metrics(_) => None,
        }
    }
}

/// How a task on a task manager failed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum RemoteTaskError {
    /// User code failed in an operator subtask.
    Failed {
        /// The operator.
        operator_id: NodeId,
        /// Its name.
        operator_name: String,
        /// The subtask.
        subtask: usize,
        /// The operator's parallelism.
        parallelism: usize,
        /// What the user code returned or panicked with.
        message: String,
    },
    /// A peer task went away.
    PeerGone(String),
    /// A defect, or the task manager's own trouble (its data plane, its deployment).
    Internal(String),
}

impl RemoteTaskError {
    pub(crate) fn from_task_error(e: TaskError) -> Self {
        match e {
            TaskError::Failed(f) => RemoteTaskError::Failed {
                operator_id: f.operator_id,
                operator_name: f.operator_name,
                subtask: f.subtask,
                parallelism: f.parallelism,
                message: f.message,
            },
            TaskError::PeerGone(m) => RemoteTaskError::PeerGone(m),
            TaskError::Internal(m) => RemoteTaskError::Internal(m),
        }
    }

    pub(crate) fn into_task_error(self) -> TaskError {
        match self {
            RemoteTaskError::Failed {
                operator_id,
                operator_name,
                subtask,
                parallelism,
                message,
            } => TaskError::Failed(TaskFailure {
                operator_id,
                operator_name,
                subtask,
                parallelism,
                message,
            }),
            RemoteTaskError::PeerGone(m) => TaskError::PeerGone(m),
            RemoteTaskError::Internal(m) => TaskError::Internal(m),
        }
    }
}

/// One channel element on its way out (borrowing the batch).
#[derive(Serialize)]
pub(crate) enum ElementOut<'a, T> {
    Records(&'a [T], Option<&'a [i64]>),
    Watermark(Watermark),
    Status(WatermarkStatus),
    Barrier(CheckpointBarrier),
    EndOfInput,
}

/// One channel element as it arrives (the same encoding, owned).
#[derive(Deserialize)]
pub(crate) enum ElementIn<T> {
    Records(Vec<T>, Option<Vec<i64>>),
    Watermark(Watermark),
    Status(WatermarkStatus),
    Barrier(CheckpointBarrier),
    EndOfInput,
}

impl<'a, T> ElementOut<'a, T> {
    pub(crate) fn of(e: &'a StreamElement<T>) -> Self {
        match e {
            StreamElement::Records(b) => ElementOut::Records(b.records(), b.timestamps()),
            StreamElement::Watermark(w) => ElementOut::Watermark(*w),
            StreamElement::Status(s) => ElementOut::Status(*s),
            StreamElement::Barrier(b) => ElementOut::Barrier(*b),
            StreamElement::EndOfInput => ElementOut::EndOfInput,
        }
    }
}

impl<T> ElementIn<T> {
    /// The element, or why its batch is malformed.
    pub(crate) fn into_element(self) -> Result<StreamElement<T>, String> {
        Ok(match self {
            ElementIn::Records(records, ts) => {
                if ts.as_ref().is_some_and(|t| t.len() != records.len()) {
                    return Err(format!(
                        "a batch of {} records arrived with a different number of timestamps",
                        records.len()
                    ));
                }
                StreamElement::Records(Batch::from_parts(records, ts))
            }
            ElementIn::Watermark(w) => StreamElement::Watermark(w),
            ElementIn::Status(s) => StreamElement::Status(s),
            ElementIn::Barrier(b) => StreamElement::Barrier(b),
            ElementIn::EndOfInput => StreamElement::EndOfInput,
        })
    }
}
