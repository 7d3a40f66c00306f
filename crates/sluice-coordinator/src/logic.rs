//! [`BaseCoordinator`]: an [`OperatorCoordinator`] built from a [`CoordinatorLogic`], so that a
//! coordinator writes only what is its own (the seed's `BaseCoordinator`).
//!
//! The base handles the lifecycle every coordinator repeats: it starts and closes the
//! coordinator thread, registers and forgets subtask gateways as attempts become ready or fail,
//! and runs each callback of the logic on the coordinator thread through
//! [`CoordinatorContextBase::run_in_event_loop_async`], so that a failure or panic in the logic
//! fails the job with the callback's name. Checkpointing completes the result with the bytes the
//! logic returns (or declines it with the logic's error) on the coordinator thread, strictly
//! ordered with the events the logic sends.
//!
//! ```
//! use sluice_coordinator::{BaseCoordinator, CoordinatorContextBase, CoordinatorLogic};
//! use sluice_core::{CheckpointId, OperatorEvent, UserError};
//!
//! /// Echoes every event back to the subtask that sent it.
//! #[derive(Default)]
//! struct Echo;
//!
//! impl CoordinatorLogic for Echo {
//!     fn handle_event(&mut self, base: &CoordinatorContextBase, subtask: usize, _attempt: u32, event: OperatorEvent) -> Result<(), UserError> {
//!         drop(base.send_event_to_operator(subtask, event));
//!         Ok(())
//!     }
//! }
//!
//! // A provider for `transform_with_coordinator`:
//! let provider = BaseCoordinator::<Echo>::provider(Echo::default);
//! # let _ = provider;
//! ```

use crate::base::{CoordinatorContextBase, call_catching};
use crate::checkpoint::CheckpointResult;
use crate::context::CoordinatorContext;
use crate::coordinator::{
    CoordinatorFuture, CoordinatorProvider, DirectEventHandler, OperatorCoordinator, done,
};
use crate::error::CoordinatorError;
use crate::gateway::SubtaskGateway;
use sluice_core::{AttemptNumber, CheckpointId, OperatorEvent, SubtaskIndex, UserError};
use std::sync::{Arc, Mutex};

/// What a coordinator does, without the lifecycle plumbing. Every method runs on the coordinator
/// thread, one at a time; only [`handle_event`](CoordinatorLogic::handle_event) is required.
pub trait CoordinatorLogic: Send + 'static {
    /// The coordinator starts (after a restore, if any).
    fn start(&mut self, base: &CoordinatorContextBase) -> Result<(), UserError> {
        let _ = base;
        Ok(())
    }

    /// An event from attempt `attempt` of subtask `subtask`.
    fn handle_event(
        &mut self,
        base: &CoordinatorContextBase,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        event: OperatorEvent,
    ) -> Result<(), UserError>;

    /// The coordinator's state for checkpoint `checkpoint`. Events sent before this returns
    /// belong to the checkpoint; events sent afterwards to the next one.
    fn checkpoint(
        &mut self,
        base: &CoordinatorContextBase,
        checkpoint: CheckpointId,
    ) -> Result<Vec<u8>, UserError> {
        let _ = (base, checkpoint);
        Ok(Vec::new())
    }

    /// Checkpoint `checkpoint` completed.
    fn checkpoint_complete(
        &mut self,
        base: &CoordinatorContextBase,
        checkpoint: CheckpointId,
    ) -> Result<(), UserError> {
        let _ = (base, checkpoint);
        Ok(())
    }

    /// Checkpoint `checkpoint` was aborted.
    fn checkpoint_aborted(
        &mut self,
        base: &CoordinatorContextBase,
        checkpoint: CheckpointId,
    ) -> Result<(), UserError> {
        let _ = (base, checkpoint);
        Ok(())
    }

    /// Restores the state of checkpoint `checkpoint` (`None`: start empty). Called on a fresh
    /// instance, before `start`.
    fn restore(&mut self, checkpoint: CheckpointId, state: Option<&[u8]>) -> Result<(), UserError> {
        let _ = (checkpoint, state);
        Ok(())
    }

    /// Subtask `subtask` was reset to checkpoint `checkpoint` (partial failover).
    fn subtask_reset(
        &mut self,
        base: &CoordinatorContextBase,
        subtask: SubtaskIndex,
        checkpoint: CheckpointId,
    ) -> Result<(), UserError> {
        let _ = (base, subtask, checkpoint);
        Ok(())
    }

    /// Attempt `attempt` of subtask `subtask` failed or was cancelled. Its gateway is already
    /// gone, and events it sent that are still queued are dropped; the logic forgets what it
    /// kept about that attempt (a source forgets its registered reader). Runs only once the
    /// coordinator has started.
    fn attempt_failed(
        &mut self,
        base: &CoordinatorContextBase,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
    ) -> Result<(), UserError> {
        let _ = (base, subtask, attempt);
        Ok(())
    }

    /// The coordinator closes: release what the logic holds (a source closes its enumerator).
    /// Runs on the coordinator thread after everything queued before, only if the coordinator
    /// started; an error is logged, never fails the job (closing never does).
    fn close(&mut self, base: &CoordinatorContextBase) -> Result<(), UserError> {
        let _ = base;
        Ok(())
    }
}

/// An [`OperatorCoordinator`] that runs a [`CoordinatorLogic`] on a [`CoordinatorContextBase`].
pub struct BaseCoordinator<L> {
    base: CoordinatorContextBase,
    logic: Arc<Mutex<L>>,
}

impl<L: CoordinatorLogic> BaseCoordinator<L> {
    /// A coordinator for `context` running `logic`.
    pub fn new(context: CoordinatorContext, logic: L) -> Result<Self, CoordinatorError> {
        Ok(BaseCoordinator {
            base: CoordinatorContextBase::new(context)?,
            logic: Arc::new(Mutex::new(logic)),
        })
    }

    /// A provider creating one coordinator per job (and per reset) with a fresh `make()` logic.
    pub fn provider(
        make: impl Fn() -> L + Send + Sync + 'static,
    ) -> impl CoordinatorProvider + 'static {
        move |context: CoordinatorContext| -> Result<Box<dyn OperatorCoordinator>, CoordinatorError> {
            Ok(Box::new(BaseCoordinator::new(context, make())?))
        }
    }

    /// The context base (to send events, call into the thread, use the worker pool).
    pub fn base(&self) -> &CoordinatorContextBase {
        &self.base
    }

    /// Runs `f` with the logic on the coordinator thread; a failure fails the job naming `what`.
    fn in_loop(
        &self,
        what: &'static str,
        f: impl FnOnce(&mut L, &CoordinatorContextBase) -> Result<(), UserError> + Send + 'static,
    ) -> CoordinatorFuture<'static> {
        let (base, logic) = (self.base.clone(), self.logic.clone());
        Box::pin(async move {
            let b = base.clone();
            base.run_in_event_loop_async(
                move || {
                    let mut logic = logic
                        .lock()
                        .map_err(|_| "the coordinator logic panicked before")?;
                    f(&mut logic, &b)
                },
                what,
            )
            .await
        })
    }
}

impl<L: CoordinatorLogic> OperatorCoordinator for BaseCoordinator<L> {
    fn direct_event_handler(&self) -> Option<DirectEventHandler> {
        // Base and logic behind one shared pointer: an event, queued from a subtask's thread and
        // run on the coordinator's, moves one reference count between the two threads.
        let shared = Arc::new((self.base.clone(), self.logic.clone()));
        Some(Arc::new(move |subtask, attempt, event| {
            let s = shared.clone();
            shared.0.execute_self_guarded(Box::new(move || {
                let (base, logic) = &*s;
                let handled = call_catching(|| {
                    // Checked on the coordinator thread, in order with the gateway changes.
                    if !base.accepts_event_from(subtask, attempt) {
                        return Ok(());
                    }
                    let mut logic = logic
                        .lock()
                        .map_err(|_| "the coordinator logic panicked before")?;
                    logic.handle_event(base, subtask, attempt, event)
                });
                if let Err(failure) = handled {
                    base.action_failed(Some("handle an operator event"), failure);
                }
            }))
        }))
    }

    fn flush(&mut self) -> CoordinatorFuture<'_> {
        let base = self.base.clone();
        Box::pin(async move { base.flush().await })
    }

    fn start(&mut self) -> CoordinatorFuture<'_> {
        self.base.mark_started();
        self.in_loop("start", |l, b| l.start(b))
    }

    fn close(&mut self) -> CoordinatorFuture<'_> {
        let (base, logic) = (self.base.clone(), self.logic.clone());
        Box::pin(async move {
            // What is queued on the coordinator thread runs first, then the logic's own close.
            let drained = if base.is_started() {
                let b = base.clone();
                base.call_in_coordinator_thread_async(
                    move || {
                        let closed = match logic.lock() {
                            Ok(mut l) => l.close(&b),
                            Err(_) => Err("the coordinator logic panicked before".into()),
                        };
                        if let Err(e) = closed {
                            tracing::warn!(operator = b.operator_name(), error = %e, "closing the coordinator logic failed");
                        }
                        Ok(())
                    },
                    "drain before close",
                )
                .await
                .map_err(CoordinatorError::from)
            } else {
                Ok(())
            };
            base.close();
            drained
        })
    }

    fn handle_event_from_operator(
        &mut self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        event: OperatorEvent,
    ) -> CoordinatorFuture<'_> {
        self.in_loop("handle an operator event", move |l, b| {
            l.handle_event(b, subtask, attempt, event)
        })
    }

    fn checkpoint_coordinator(
        &mut self,
        checkpoint_id: CheckpointId,
        result: CheckpointResult,
    ) -> CoordinatorFuture<'_> {
        self.in_loop("checkpoint the coordinator", move |l, b| {
            match l.checkpoint(b, checkpoint_id) {
                Ok(state) => result.complete(state),
                Err(e) => result.decline(e.to_string()),
            }
            Ok(())
        })
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: CheckpointId) -> CoordinatorFuture<'_> {
        self.in_loop("notify checkpoint complete", move |l, b| {
            l.checkpoint_complete(b, checkpoint_id)
        })
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint_id: CheckpointId) -> CoordinatorFuture<'_> {
        self.in_loop("notify checkpoint aborted", move |l, b| {
            l.checkpoint_aborted(b, checkpoint_id)
        })
    }

    fn reset_to_checkpoint(
        &mut self,
        checkpoint_id: CheckpointId,
        state: Option<Vec<u8>>,
    ) -> CoordinatorFuture<'_> {
        let restored = match self.logic.lock() {
            Ok(mut l) => l.restore(checkpoint_id, state.as_deref()),
            Err(_) => Err("the coordinator logic panicked before".into()),
        };
        done(restored.map_err(CoordinatorError::User))
    }

    fn subtask_reset(
        &mut self,
        subtask: SubtaskIndex,
        checkpoint_id: CheckpointId,
    ) -> CoordinatorFuture<'_> {
        self.base.subtask_not_ready(subtask);
        self.in_loop("reset a subtask", move |l, b| {
            l.subtask_reset(b, subtask, checkpoint_id)
        })
    }

    fn execution_attempt_failed(
        &mut self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        _reason: Option<String>,
    ) -> CoordinatorFuture<'_> {
        self.base.attempt_not_ready(subtask, attempt);
        if !self.base.is_started() {
            return done(Ok(()));
        }
        self.in_loop("take an attempt failure", move |l, b| {
            l.attempt_failed(b, subtask, attempt)
        })
    }

    fn execution_attempt_ready(
        &mut self,
        _subtask: SubtaskIndex,
        _attempt: AttemptNumber,
        gateway: SubtaskGateway,
    ) -> CoordinatorFuture<'_> {
        done(
            self.base
                .subtask_ready(gateway)
                .map_err(CoordinatorError::from),
        )
    }
}
