//! [`DirectSlot`]: the subtasks' direct path to their coordinator's thread, which the job master
//! opens while an attempt runs and closes before a failover.

use crate::coordinator::DirectEventHandler;
use crate::error::CoordinatorError;
use crate::sync::{RwLock, read, write};
use sluice_core::{AttemptNumber, OperatorEvent, SubtaskIndex};
use std::fmt;
use std::sync::Arc;

/// The direct path to one coordinator, shared by its holder and every subtask of its operator.
///
/// While a [`DirectEventHandler`] is installed, [`offer`](Self::offer) hands an event to it (the
/// handler only queues, so it runs under the read lock and the hot path takes no reference
/// count); otherwise the event is given back, for the job master's path. Once
/// [`set`](Self::set) returns, no offer reaches the handler it replaced: a failover can remove the
/// direct path and know no event of the failed attempt still slips onto the coordinator's
/// queue that way.
///
/// ```
/// use sluice_coordinator::{DirectEventHandler, DirectSlot};
/// use sluice_core::OperatorEvent;
/// use std::sync::Arc;
///
/// let slot = DirectSlot::default();
/// assert!(slot.offer(0, 0, OperatorEvent::new(vec![1])).is_err()); // no handler: given back
/// let handler: DirectEventHandler = Arc::new(|_subtask, _attempt, _event| Ok(()));
/// slot.set(Some(handler));
/// assert!(slot.offer(0, 0, OperatorEvent::new(vec![2])).is_ok());
/// ```
#[derive(Clone, Default)]
pub struct DirectSlot(Arc<RwLock<Option<DirectEventHandler>>>);

impl DirectSlot {
    /// Installs (or, with `None`, removes) the direct handler.
    pub fn set(&self, handler: Option<DirectEventHandler>) {
        *write(&self.0) = handler;
    }

    /// Hands `event` to the direct handler if one is installed (returning what it returned), or
    /// gives the event back.
    pub fn offer(
        &self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        event: OperatorEvent,
    ) -> Result<Result<(), CoordinatorError>, OperatorEvent> {
        match read(&self.0).as_ref() {
            Some(handler) => Ok(handler(subtask, attempt, event)),
            None => Err(event),
        }
    }
}

impl fmt::Debug for DirectSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DirectSlot")
    }
}
