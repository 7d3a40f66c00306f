//! What crosses between the processes of a cluster, in the runtime's terms: the deployment of
//! a batch of tasks, the master's messages to one task, what tasks send back, and the channel
//! elements of an exchange. Everything here is serde; the transport (gRPC for the control
//! plane, `sluice-net` for the data plane) encodes it with [`sluice_core::codec`] and never
//! looks inside.

use crate::error::{TaskError, TaskFailure};
use crate::state::{Deferred, OperatorState};
use crate::storage::StateFileHandle;
use crate::task::control::{DeclineReason, TaskControl, TaskReport};
use serde::{Deserialize, Serialize};
use sluice_core::{AttemptNumber, CheckpointId, NodeId, OperatorEvent};
use std::collections::BTreeMap;

pub use crate::exchange::remote::ChannelKey;
pub use crate::metrics::RemoteMetrics;

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
    /// The restored state of their operator subtasks, already redistributed: whole, or as a
    /// stub whose entries [`deferred`](Self::deferred) names.
    pub states: Vec<(NodeId, usize, OperatorState)>,
    /// Where the entries of the stubs among `states` are: state files in checkpoint storage,
    /// which the task manager reads before it builds the tasks (restore by handle).
    pub deferred: Vec<(NodeId, usize, Deferred)>,
    /// The checkpoint the state comes from.
    pub restored_from: Option<CheckpointId>,
    /// The directory of the local checkpoint storage holding that checkpoint's files when it
    /// is not the job's own (a job started from a restore path, which every task manager must
    /// reach at the same path); the job's checkpoint storage otherwise.
    pub restored_at: Option<std::path::PathBuf>,
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
        /// One entry per operator subtask of its chain, which the job master keeps as its
        /// restore point for failover: without its entries when the task manager wrote its
        /// file (only its keyed stores' handles and whether it finished), whole otherwise.
        states: Vec<(NodeId, usize, OperatorState)>,
        /// The state files the task manager wrote to the checkpoint storage itself (empty when
        /// it could not: the states then travel whole and the job master writes them).
        written: Vec<StateFileHandle>,
        /// The bytes of keyed store table files the task manager uploaded for it.
        uploaded_bytes: u64,
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

impl UpKind {
    pub(crate) fn from_report(report: TaskReport) -> Self {
        match report {
            TaskReport::Ack {
                checkpoint, states, ..
            } => UpKind::Ack {
                checkpoint,
                states,
                written: Vec::new(),
                uploaded_bytes: 0,
            },
            TaskReport::Decline { checkpoint, .. } => UpKind::Declined { checkpoint },
            TaskReport::FinishedInput { .. } => UpKind::FinishedInput,
        }
    }

    /// The runtime's report, for the task numbered `task`, or `None` for what is not one. The
    /// states of an acknowledgement whose files the task manager wrote become stubs naming
    /// those files.
    pub(crate) fn into_report(self, task: usize) -> Option<TaskReport> {
        match self {
            UpKind::Ack {
                checkpoint,
                mut states,
                written,
                ..
            } => {
                for (node, subtask, state) in states.iter_mut() {
                    if let Some(h) = written
                        .iter()
                        .find(|h| h.node == *node && h.subtask == *subtask)
                    {
                        state.defer(Deferred::file(checkpoint, h.clone()));
                    }
                }
                Some(TaskReport::Ack {
                    task,
                    checkpoint,
                    states,
                })
            }
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
            TaskError::Stopped => RemoteTaskError::PeerGone("the task was stopped".into()),
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
