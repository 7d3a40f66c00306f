//! How an operator subtask's events reach its coordinator.
//!
//! Each operator with a coordinator has one [`CoordinatorLink`] per subtask. While the
//! coordinator offers a [`DirectEventHandler`](sluice_coordinator::DirectEventHandler) (the job
//! master installs it in the operator's [`DirectSlot`] once an attempt is deployed and the
//! coordinator settled, and removes it before a failover), an event is queued straight onto the
//! coordinator's thread: the job master's loop is not on the way. Otherwise it
//! goes to the job master through a bounded channel of [`ToCoordinator`] messages, and the master
//! calls the coordinator. Either way the coordinator handles one subtask's events in send order,
//! ordered with the master's calls by its single queue.

use sluice_coordinator::{CoordinatorError, SubmitError};
use sluice_core::{AttemptNumber, NodeId, OperatorEvent, SubtaskIndex};
use tokio::sync::mpsc;

/// How many events from operators to coordinators may wait for the job master.
pub(crate) const TO_COORDINATOR_CAPACITY: usize = 1024;

/// An event from an operator subtask to its coordinator, on the job master's path.
#[derive(Debug)]
pub(crate) struct ToCoordinator {
    pub(crate) node: NodeId,
    pub(crate) subtask: SubtaskIndex,
    pub(crate) attempt: AttemptNumber,
    pub(crate) event: OperatorEvent,
}

/// The direct path to one coordinator, shared by its holder and every subtask of its operator
/// (it lives in `sluice-coordinator`, where its loom model is).
pub(crate) use sluice_coordinator::DirectSlot;

/// Why an event did not reach its coordinator.
#[derive(Debug)]
pub(crate) enum LinkError {
    /// The queue on the way is full.
    Full(String),
    /// The job master or the coordinator is gone.
    Gone(String),
}

/// Where one subtask sends events to its coordinator.
#[derive(Clone, Debug)]
pub(crate) struct CoordinatorLink {
    pub(crate) master: mpsc::Sender<ToCoordinator>,
    pub(crate) direct: DirectSlot,
}

impl CoordinatorLink {
    /// Sends `event` from `subtask` (`attempt`) of `node`; never blocks.
    pub(crate) fn send(
        &self,
        node: NodeId,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        event: OperatorEvent,
    ) -> Result<(), LinkError> {
        let event = match self.direct.offer(subtask, attempt, event) {
            Ok(queued) => {
                return queued.map_err(|e| match e {
                    CoordinatorError::Submit(SubmitError::WouldBlock) => {
                        LinkError::Full("the coordinator's queue is full".into())
                    }
                    other => LinkError::Gone(format!("the coordinator refused the event: {other}")),
                });
            }
            Err(event) => event,
        };
        let message = ToCoordinator {
            node,
            subtask,
            attempt,
            event,
        };
        self.master.try_send(message).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => LinkError::Full(format!(
                "the queue of events to the coordinator is full ({TO_COORDINATOR_CAPACITY} events)"
            )),
            mpsc::error::TrySendError::Closed(_) => {
                LinkError::Gone("the job master is gone".into())
            }
        })
    }
}
