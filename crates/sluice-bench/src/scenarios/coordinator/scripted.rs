//! A minimal coordinator for the benchmark jobs: every event from a subtask is handed to a
//! handler that runs on the coordinator thread (as every coordinator's work does), with the
//! context base to reply through. It is just `CoordinatorLogic` on `BaseCoordinator`, which does
//! the rest of the lifecycle (gateways, attempts, an empty checkpoint state) as for any
//! coordinator, so the benchmark measures the same path user coordinators take.

use sluice::coordinator::{
    BaseCoordinator, CoordinatorContextBase, CoordinatorLogic, CoordinatorProvider,
};
use sluice::core::OperatorEvent;
use sluice::prelude::UserError;
use std::sync::Arc;

/// What the coordinator does with an event from subtask `s`, on its thread.
pub type Handler = Arc<
    dyn Fn(&CoordinatorContextBase, usize, OperatorEvent) -> Result<(), UserError> + Send + Sync,
>;

/// The coordinator's logic: the handler.
struct Scripted {
    on_event: Handler,
}

/// The provider of a coordinator running `on_event` for every event from its subtasks.
pub fn provider(on_event: Handler) -> impl CoordinatorProvider + 'static {
    BaseCoordinator::provider(move || Scripted {
        on_event: on_event.clone(),
    })
}

impl CoordinatorLogic for Scripted {
    fn handle_event(
        &mut self,
        base: &CoordinatorContextBase,
        subtask: usize,
        _attempt: u32,
        event: OperatorEvent,
    ) -> Result<(), UserError> {
        (self.on_event)(base, subtask, event)
    }
}
