//! The task's mailbox from the job master, and its reports back.
//!
//! Both channels are bounded. Reports never wait: each task sends at most one report per pending
//! checkpoint plus one "finished" report, and the report channel is sized for that, so a task can
//! always make progress and keep reading its mailbox (which is what lets the master's sends
//! complete).

use crate::checkpoint::SubtaskState;
use sluice_core::{AttemptNumber, CheckpointBarrier, CheckpointId, NodeId, OperatorEvent};
use tokio::sync::mpsc;

/// A message from the job master to one task (serde: in cluster mode it crosses to the task
/// manager running the task as it is).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) enum TaskControl {
    /// Start checkpoint `barrier.id` here: a source injects the barrier; a task that finished its
    /// input snapshots directly.
    TriggerCheckpoint(CheckpointBarrier),
    /// A checkpoint completed everywhere.
    NotifyComplete(CheckpointId),
    /// A checkpoint was aborted.
    NotifyAborted(CheckpointId),
    /// An event from an operator coordinator to the operator `target` of this task's chain.
    OperatorEvent {
        target: NodeId,
        event: OperatorEvent,
    },
    /// The final checkpoint completed, or the job stops after a savepoint: the task ends now,
    /// without ending its input.
    Finish,
}

/// The state one task snapshotted: one entry per operator of its chain (and its source).
pub(crate) type TaskSnapshot = Vec<SubtaskState>;

/// Why a task declined a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DeclineReason {
    /// A newer checkpoint's barrier overtook it during alignment.
    Subsumed,
}

/// A report from a task to the job master.
#[derive(Debug)]
pub(crate) enum TaskReport {
    /// The task took checkpoint `checkpoint`.
    Ack {
        task: usize,
        checkpoint: CheckpointId,
        states: TaskSnapshot,
    },
    /// The task could not take checkpoint `checkpoint`.
    Decline {
        task: usize,
        checkpoint: CheckpointId,
        reason: DeclineReason,
    },
    /// The task's input ended and its operators drained.
    FinishedInput { task: usize },
}

impl TaskReport {
    /// The task that reports.
    pub(crate) fn task(&self) -> usize {
        match self {
            TaskReport::Ack { task, .. }
            | TaskReport::Decline { task, .. }
            | TaskReport::FinishedInput { task } => *task,
        }
    }
}

/// A report with the attempt of the task that sent it: after a region restart, reports of the
/// stopped attempt may still be queued, and the master drops them.
#[derive(Debug)]
pub(crate) struct AttemptReport {
    pub(crate) attempt: AttemptNumber,
    pub(crate) report: TaskReport,
}

/// The task's ends of its two channels to the master.
pub(crate) struct TaskMailbox {
    pub(crate) task: usize,
    /// The attempt the task runs as (tags its reports).
    pub(crate) attempt: AttemptNumber,
    pub(crate) control: mpsc::Receiver<TaskControl>,
    pub(crate) reports: mpsc::Sender<AttemptReport>,
    /// Whether the task waits for the final checkpoint before ending.
    pub(crate) checkpointing: bool,
}
