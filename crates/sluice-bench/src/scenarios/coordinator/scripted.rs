//! A minimal coordinator for the benchmark jobs: every event from a subtask is handed to a
//! handler that runs on the coordinator thread (as every coordinator's work does), with the
//! context base to reply through. Everything else in the lifecycle is the plain bookkeeping any
//! coordinator does.

use sluice::coordinator::{
    CheckpointResult, CoordinatorContext, CoordinatorContextBase, CoordinatorError,
    CoordinatorFuture, CoordinatorProvider, OperatorCoordinator, SubtaskGateway, done,
};
use sluice::core::{CheckpointId, OperatorEvent};
use sluice::prelude::UserError;
use std::sync::Arc;

/// What the coordinator does with an event from subtask `s`, on its thread.
pub type Handler = Arc<
    dyn Fn(&CoordinatorContextBase, usize, OperatorEvent) -> Result<(), UserError> + Send + Sync,
>;

/// The coordinator: a context base and a handler.
struct Scripted {
    base: CoordinatorContextBase,
    on_event: Handler,
}

/// The provider of a coordinator running `on_event` for every event from its subtasks.
pub fn provider(on_event: Handler) -> impl CoordinatorProvider + 'static {
    move |ctx: CoordinatorContext| -> Result<Box<dyn OperatorCoordinator>, CoordinatorError> {
        Ok(Box::new(Scripted {
            base: CoordinatorContextBase::new(ctx)?,
            on_event: on_event.clone(),
        }))
    }
}

impl OperatorCoordinator for Scripted {
    fn start(&mut self) -> CoordinatorFuture<'_> {
        self.base.mark_started();
        done(Ok(()))
    }

    fn close(&mut self) -> CoordinatorFuture<'_> {
        self.base.close();
        done(Ok(()))
    }

    fn handle_event_from_operator(
        &mut self,
        subtask: usize,
        _attempt: u32,
        event: OperatorEvent,
    ) -> CoordinatorFuture<'_> {
        let (base, on_event) = (self.base.clone(), self.on_event.clone());
        Box::pin(async move {
            let b = base.clone();
            base.run_in_event_loop_async(move || on_event(&b, subtask, event), "benchmark event")
                .await
        })
    }

    fn checkpoint_coordinator(
        &mut self,
        _id: CheckpointId,
        result: CheckpointResult,
    ) -> CoordinatorFuture<'_> {
        result.complete(Vec::new());
        done(Ok(()))
    }

    fn notify_checkpoint_complete(&mut self, _id: CheckpointId) -> CoordinatorFuture<'_> {
        done(Ok(()))
    }

    fn reset_to_checkpoint(
        &mut self,
        _id: CheckpointId,
        _state: Option<Vec<u8>>,
    ) -> CoordinatorFuture<'_> {
        done(Ok(()))
    }

    fn subtask_reset(&mut self, _subtask: usize, _id: CheckpointId) -> CoordinatorFuture<'_> {
        done(Ok(()))
    }

    fn execution_attempt_failed(
        &mut self,
        subtask: usize,
        attempt: u32,
        _reason: Option<String>,
    ) -> CoordinatorFuture<'_> {
        self.base.attempt_not_ready(subtask, attempt);
        done(Ok(()))
    }

    fn execution_attempt_ready(
        &mut self,
        _subtask: usize,
        _attempt: u32,
        gateway: SubtaskGateway,
    ) -> CoordinatorFuture<'_> {
        done(
            self.base
                .subtask_ready(gateway)
                .map_err(CoordinatorError::from),
        )
    }
}
