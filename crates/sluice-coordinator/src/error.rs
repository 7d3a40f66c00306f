//! The error types of the coordinator crate: failed sends, failed calls into the coordinator
//! thread, refused submissions, and the failure a coordinator reports to fail the job.

use crate::gateway::SubtaskAttempt;
use sluice_core::{AttemptNumber, NodeId, SubtaskIndex, UserError};

/// Why an operator event could not be sent to, or was not received by, a subtask.
///
/// ```
/// use sluice_coordinator::SendError;
/// let e = SendError::NotReady { subtask: 3 };
/// assert_eq!(e.to_string(), "subtask 3 is not ready yet to receive events");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The subtask index is not below the operator's parallelism.
    #[error("subtask {subtask} does not exist: the operator has parallelism {parallelism}")]
    NoSuchSubtask {
        /// The requested subtask.
        subtask: SubtaskIndex,
        /// The operator's parallelism.
        parallelism: usize,
    },
    /// No attempt of the subtask has a ready gateway.
    #[error("subtask {subtask} is not ready yet to receive events")]
    NotReady {
        /// The subtask with no ready gateway.
        subtask: SubtaskIndex,
    },
    /// The subtask has several ready attempts; the caller must choose one.
    #[error("subtask {subtask} has {attempts} concurrent attempts; send to one attempt explicitly")]
    ConcurrentAttempts {
        /// The subtask.
        subtask: SubtaskIndex,
        /// How many attempts are ready.
        attempts: usize,
    },
    /// The target attempt is not running (it failed, finished, or was replaced).
    #[error("{target} is not running")]
    TaskNotRunning {
        /// The attempt the event was addressed to.
        target: SubtaskAttempt,
    },
    /// The target's mailbox is full and the sender runs on a tokio worker, which must not block.
    #[error("the event mailbox of {target} is full")]
    MailboxFull {
        /// The attempt the event was addressed to.
        target: SubtaskAttempt,
    },
    /// The event was handed to the transport but never acknowledged.
    #[error("an event to {target} was lost before it was acknowledged")]
    Lost {
        /// The attempt the event was addressed to.
        target: SubtaskAttempt,
    },
    /// The event could not be encoded.
    #[error("cannot encode operator event: {0}")]
    Encode(String),
    /// The coordinator thread could not take the send.
    #[error(transparent)]
    Submit(#[from] SubmitError),
}

/// Why a task could not be queued for the coordinator thread or its worker pool.
///
/// ```
/// use sluice_coordinator::SubmitError;
/// assert_eq!(SubmitError::Closed.to_string(), "the coordinator is closed");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The coordinator (or its context) was closed.
    #[error("the coordinator is closed")]
    Closed,
    /// The queue is full and the caller runs on a tokio worker, which must not block.
    #[error(
        "the coordinator queue is full and the caller runs on a tokio worker, which must not \
         block; use the async form of this call"
    )]
    WouldBlock,
    /// The coordinator thread queued more tasks to itself than its queue holds.
    #[error("the coordinator thread queued more than {0} tasks to itself")]
    SelfQueueFull(usize),
    /// The worker pool's queue is full; the coordinator thread never waits for it.
    #[error("the coordinator worker queue is full ({0} tasks)")]
    WorkerQueueFull(usize),
    /// A thread could not be spawned.
    #[error("cannot spawn a coordinator thread: {0}")]
    Spawn(String),
}

/// Why a call into the coordinator thread failed. The display starts with the caller's message.
///
/// ```
/// use sluice_coordinator::{CallError, CallFailure};
/// let e = CallError::new("cannot assign splits", CallFailure::Panicked("boom".into()));
/// assert_eq!(e.to_string(), "cannot assign splits: the call panicked: boom");
/// assert_eq!(e.message(), "cannot assign splits");
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{message}: {failure}")]
pub struct CallError {
    message: String,
    #[source]
    failure: CallFailure,
}

impl CallError {
    /// A failed call with the caller's `message`.
    pub fn new(message: impl Into<String>, failure: CallFailure) -> Self {
        CallError {
            message: message.into(),
            failure,
        }
    }

    /// The message the caller gave.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// What went wrong.
    pub fn failure(&self) -> &CallFailure {
        &self.failure
    }
}

/// What went wrong in a call into the coordinator thread.
#[derive(Debug, thiserror::Error)]
pub enum CallFailure {
    /// The callable returned an error.
    #[error("{0}")]
    Failed(UserError),
    /// The callable panicked.
    #[error("the call panicked: {0}")]
    Panicked(String),
    /// The call could not be queued.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// The coordinator thread shut down before running the call.
    #[error("the coordinator thread shut down before running the call")]
    Dropped,
    /// A blocking call was made from a tokio worker, which must not block.
    #[error(
        "a blocking call into the coordinator thread was made on a tokio worker; use the async form"
    )]
    WouldBlockRuntime,
}

/// A failure of a coordinator method or of the coordinator base.
///
/// The job master fails the job when `start`, `handle_event_from_operator`,
/// `checkpoint_coordinator`, `reset_to_checkpoint` or `execution_attempt_ready` return one;
/// errors from `close` are only logged.
///
/// ```
/// use sluice_coordinator::CoordinatorError;
/// let e = CoordinatorError::NotStarted { operator: "source".into() };
/// assert_eq!(e.to_string(), "the coordinator of 'source' has not started yet");
/// ```
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// A coordinator callback ran before `start`.
    #[error("the coordinator of '{operator}' has not started yet")]
    NotStarted {
        /// The operator's name.
        operator: String,
    },
    /// A task could not be queued.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// A call into the coordinator thread failed.
    #[error(transparent)]
    Call(#[from] CallError),
    /// An event could not be sent.
    #[error(transparent)]
    Send(#[from] SendError),
    /// A gateway could not be registered.
    #[error(transparent)]
    Gateway(#[from] GatewayError),
    /// The coordinator thread could not be created.
    #[error(transparent)]
    Thread(#[from] ThreadFactoryError),
    /// The coordinator's own logic failed.
    #[error("{0}")]
    User(UserError),
}

impl CoordinatorError {
    /// Wraps a user error.
    pub fn user(e: impl Into<UserError>) -> Self {
        CoordinatorError::User(e.into())
    }
}

/// Why a subtask gateway could not be registered.
///
/// ```
/// use sluice_coordinator::GatewayError;
/// let e = GatewayError::AlreadyRegistered { subtask: 1, attempt: 0 };
/// assert_eq!(e.to_string(), "already have a gateway for subtask 1, attempt 0");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    /// That attempt already has a gateway.
    #[error("already have a gateway for subtask {subtask}, attempt {attempt}")]
    AlreadyRegistered {
        /// The subtask.
        subtask: SubtaskIndex,
        /// The attempt.
        attempt: AttemptNumber,
    },
    /// The subtask index is not below the operator's parallelism.
    #[error("subtask {subtask} does not exist: the operator has parallelism {parallelism}")]
    NoSuchSubtask {
        /// The subtask.
        subtask: SubtaskIndex,
        /// The operator's parallelism.
        parallelism: usize,
    },
}

/// Why the coordinator executor thread factory could not make a thread.
///
/// ```
/// use sluice_coordinator::ThreadFactoryError;
/// let e = ThreadFactoryError::AlreadyCreated { name: "coordinator-src".into() };
/// assert!(e.to_string().contains("cannot create a second thread"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ThreadFactoryError {
    /// The factory already made its one thread.
    #[error(
        "the coordinator executor thread factory '{name}' already made its thread; it cannot \
         create a second thread"
    )]
    AlreadyCreated {
        /// The thread's name.
        name: String,
    },
    /// The operating system refused to spawn the thread.
    #[error("cannot spawn thread '{name}': {reason}")]
    Spawn {
        /// The thread's name.
        name: String,
        /// The OS error.
        reason: String,
    },
}

/// The failure a coordinator reports through its context: it fails the whole job.
///
/// ```
/// use sluice_coordinator::CoordinatorFailure;
/// use sluice_core::NodeId;
/// let f = CoordinatorFailure::new("enumerator", NodeId(4), "no splits".into());
/// assert_eq!(
///     f.to_string(),
///     "global failure triggered by the operator coordinator of 'enumerator' (operator #4): no splits"
/// );
/// ```
#[derive(Debug, thiserror::Error)]
#[error(
    "global failure triggered by the operator coordinator of '{operator}' (operator {operator_id}): \
     {cause}"
)]
pub struct CoordinatorFailure {
    operator: String,
    operator_id: NodeId,
    #[source]
    cause: UserError,
}

impl CoordinatorFailure {
    /// A failure of the coordinator of `operator`.
    pub fn new(operator: impl Into<String>, operator_id: NodeId, cause: UserError) -> Self {
        CoordinatorFailure {
            operator: operator.into(),
            operator_id,
            cause,
        }
    }

    /// The operator's name.
    pub fn operator(&self) -> &str {
        &self.operator
    }

    /// The operator's id.
    pub fn operator_id(&self) -> NodeId {
        self.operator_id
    }

    /// What went wrong.
    pub fn cause(&self) -> &UserError {
        &self.cause
    }
}
