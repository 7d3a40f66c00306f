//! Errors of a job: invalid configuration found before start, and failures while running.

use sluice_core::{CheckpointId, NodeId, SubtaskIndex};
use std::fmt;

/// Why a job did not finish successfully.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JobError {
    /// The job graph or its configuration is invalid; nothing was started.
    #[error("invalid job: {0}")]
    InvalidJob(String),
    /// An operator subtask failed: a user function returned an error or panicked.
    #[error("{0}")]
    TaskFailed(TaskFailure),
    /// An operator coordinator failed: its user code returned an error or panicked, or it could
    /// not be created, started or restored.
    #[error("{0}")]
    CoordinatorFailed(CoordinatorFailureInfo),
    /// More checkpoints failed in a row than the job tolerates
    /// (`CheckpointSettings::tolerable_failed_checkpoints`).
    #[error(
        "checkpoint {checkpoint} failed: {reason} (more than {tolerated} failed checkpoints in a \
         row; see tolerable_failed_checkpoints)"
    )]
    CheckpointFailed {
        /// The checkpoint whose failure was one too many.
        checkpoint: CheckpointId,
        /// Why it failed.
        reason: String,
        /// How many failed checkpoints in a row were tolerated.
        tolerated: u32,
    },
    /// The job was cancelled through its [`JobHandle`](crate::JobHandle).
    #[error("job was cancelled")]
    Cancelled,
    /// The job failed and its restart strategy allowed no more restarts.
    #[error("{last} (the restart strategy gave up after {attempts} restarts)")]
    RestartsExhausted {
        /// How many times the job was restarted before the last failure.
        attempts: u32,
        /// The last failure.
        last: Box<JobError>,
    },
    /// A defect inside the runtime itself.
    #[error("internal error in the sluice runtime: {0}")]
    Internal(String),
}

impl JobError {
    /// The failing subtask, when the job failed in one.
    pub fn task_failure(&self) -> Option<&TaskFailure> {
        match self {
            JobError::TaskFailed(f) => Some(f),
            JobError::RestartsExhausted { last, .. } => last.task_failure(),
            _ => None,
        }
    }

    /// The failing coordinator, when the job failed in one.
    pub fn coordinator_failure(&self) -> Option<&CoordinatorFailureInfo> {
        match self {
            JobError::CoordinatorFailed(f) => Some(f),
            JobError::RestartsExhausted { last, .. } => last.coordinator_failure(),
            _ => None,
        }
    }
}

/// The operator coordinator that failed and why, structured as [`TaskFailure`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorFailureInfo {
    /// The operator whose coordinator failed.
    pub operator_id: NodeId,
    /// Its name.
    pub operator_name: String,
    /// What the coordinator's code returned or panicked with, and where.
    pub message: String,
}

impl fmt::Display for CoordinatorFailureInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the coordinator of operator '{}' ({}) failed: {}",
            self.operator_name, self.operator_id, self.message
        )
    }
}

/// The operator subtask that failed and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFailure {
    /// The failing operator.
    pub operator_id: NodeId,
    /// Its name.
    pub operator_name: String,
    /// The failing subtask.
    pub subtask: SubtaskIndex,
    /// The operator's parallelism.
    pub parallelism: usize,
    /// What the user code returned or panicked with, and where.
    pub message: String,
}

impl fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "operator '{}' ({}), subtask {} of {} failed: {}",
            self.operator_name, self.operator_id, self.subtask, self.parallelism, self.message
        )
    }
}

/// How a task ended badly, before the job master turns it into a [`JobError`].
#[derive(Clone, Debug)]
pub(crate) enum TaskError {
    /// The root cause: user code failed.
    Failed(TaskFailure),
    /// A peer task went away (a consequence of another failure, or of a cancel).
    PeerGone(String),
    /// A runtime defect.
    Internal(String),
    /// The job stopped the task on its own thread ([`crate::task::thread`]), and the thread
    /// has dropped it: the end of a stop, as a cancelled task's on a worker.
    Stopped,
}

impl TaskError {
    /// Root causes are reported in preference to their consequences.
    pub(crate) fn is_root_cause(&self) -> bool {
        !matches!(self, TaskError::PeerGone(_) | TaskError::Stopped)
    }

    pub(crate) fn into_job_error(self) -> JobError {
        match self {
            TaskError::Failed(f) => JobError::TaskFailed(f),
            TaskError::PeerGone(m) => JobError::Internal(format!("a task lost its peer: {m}")),
            TaskError::Internal(m) => JobError::Internal(m),
            TaskError::Stopped => JobError::Internal("a task was stopped".into()),
        }
    }
}
