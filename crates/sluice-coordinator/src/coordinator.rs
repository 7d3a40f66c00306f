//! The [`OperatorCoordinator`] trait (the lifecycle the job master drives) and the
//! [`CoordinatorProvider`] through which an operator declares its coordinator.

use crate::checkpoint::CheckpointResult;
use crate::context::CoordinatorContext;
use crate::error::CoordinatorError;
use crate::gateway::SubtaskGateway;
use sluice_core::{AttemptNumber, CheckpointId, OperatorEvent, SubtaskIndex};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Queues an event from a subtask straight onto a coordinator's thread, without passing through
/// the job master: see [`OperatorCoordinator::direct_event_handler`]. It must not block; it fails
/// when the coordinator's queue is full.
pub type DirectEventHandler = Arc<
    dyn Fn(SubtaskIndex, AttemptNumber, OperatorEvent) -> Result<(), CoordinatorError>
        + Send
        + Sync,
>;

/// What every coordinator method returns: a future the job master awaits.
///
/// The methods are asynchronous so that a coordinator whose thread is busy makes the job
/// master *wait* (without blocking a tokio worker) rather than grow an unbounded queue.
/// Implementations should only queue work to their coordinator thread and return.
pub type CoordinatorFuture<'a> =
    Pin<Box<dyn Future<Output = Result<(), CoordinatorError>> + Send + 'a>>;

/// A finished [`CoordinatorFuture`], for methods with nothing to wait for.
///
/// ```
/// let f = sluice_coordinator::done(Ok(()));
/// assert!(futures::executor::block_on(f).is_ok());
/// ```
pub fn done(result: Result<(), CoordinatorError>) -> CoordinatorFuture<'static> {
    Box::pin(std::future::ready(result))
}

/// A coordinator of one operator, running on the job master (Flink's `OperatorCoordinator`).
///
/// The job master calls the methods one at a time and awaits each. The order it guarantees
/// for one subtask is: `execution_attempt_ready` (interaction starts) → `execution_attempt_failed`
/// (interaction stops) → `subtask_reset` (regional failover) or `reset_to_checkpoint` (global
/// failover), only after every attempt of the subtask failed → `execution_attempt_ready` for
/// the new attempt.
///
/// Failures: an error from `start`, `handle_event_from_operator`, `checkpoint_coordinator`,
/// `reset_to_checkpoint` or `execution_attempt_ready` fails the whole job; an error from
/// `close` is only logged.
///
/// Most coordinators hold a [`CoordinatorContextBase`](crate::CoordinatorContextBase) and do
/// their work on its thread, including gateway registration, so that a gateway change never
/// overtakes the handling of an event queued before it:
///
/// ```
/// use sluice_coordinator::*;
/// use sluice_core::{AttemptNumber, CheckpointId, NodeId, OperatorEvent, SubtaskIndex};
/// use std::sync::{Arc, Mutex};
///
/// /// Counts the events its subtasks send; the count is its checkpointed state.
/// struct Counter {
///     base: CoordinatorContextBase,
///     count: Arc<Mutex<u64>>, // only touched on the coordinator thread
/// }
///
/// impl OperatorCoordinator for Counter {
///     fn start(&mut self) -> CoordinatorFuture<'_> {
///         self.base.mark_started();
///         done(Ok(()))
///     }
///     fn close(&mut self) -> CoordinatorFuture<'_> {
///         self.base.close();
///         Box::pin(async move { self.base.terminated().await; Ok(()) })
///     }
///     fn handle_event_from_operator(
///         &mut self, _s: SubtaskIndex, _a: AttemptNumber, _e: OperatorEvent,
///     ) -> CoordinatorFuture<'_> {
///         let count = self.count.clone();
///         Box::pin(self.base.run_in_event_loop_async(
///             move || { *count.lock().unwrap() += 1; Ok(()) },
///             "count an event",
///         ))
///     }
///     fn checkpoint_coordinator(
///         &mut self, _id: CheckpointId, result: CheckpointResult,
///     ) -> CoordinatorFuture<'_> {
///         let count = self.count.clone();
///         Box::pin(self.base.run_in_event_loop_async(
///             move || { result.complete(encode_event(&*count.lock().unwrap())?.into_payload()); Ok(()) },
///             "checkpoint the count",
///         ))
///     }
///     fn notify_checkpoint_complete(&mut self, _id: CheckpointId) -> CoordinatorFuture<'_> {
///         done(Ok(()))
///     }
///     fn reset_to_checkpoint(
///         &mut self, _id: CheckpointId, state: Option<Vec<u8>>,
///     ) -> CoordinatorFuture<'_> {
///         let restored = match state {
///             Some(bytes) => sluice_core::codec::decode(&bytes).map_err(CoordinatorError::user),
///             None => Ok(0),
///         };
///         done(restored.map(|n| *self.count.lock().unwrap() = n))
///     }
///     fn subtask_reset(&mut self, _s: SubtaskIndex, _c: CheckpointId) -> CoordinatorFuture<'_> {
///         done(Ok(()))
///     }
///     // Gateway changes go through the event loop, ordered with the events before them.
///     fn execution_attempt_failed(
///         &mut self, s: SubtaskIndex, a: AttemptNumber, _reason: Option<String>,
///     ) -> CoordinatorFuture<'_> {
///         let base = self.base.clone();
///         Box::pin(self.base.run_in_event_loop_async(
///             move || { base.attempt_not_ready(s, a); Ok(()) },
///             "forget a failed attempt",
///         ))
///     }
///     fn execution_attempt_ready(
///         &mut self, _s: SubtaskIndex, _a: AttemptNumber, gateway: SubtaskGateway,
///     ) -> CoordinatorFuture<'_> {
///         let base = self.base.clone();
///         Box::pin(self.base.run_in_event_loop_async(
///             move || Ok(base.subtask_ready(gateway)?),
///             "register a ready attempt",
///         ))
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let provider = |ctx: CoordinatorContext| -> Result<Box<dyn OperatorCoordinator>, CoordinatorError> {
///     Ok(Box::new(Counter { base: CoordinatorContextBase::new(ctx)?, count: Default::default() }))
/// };
/// let ctx = CoordinatorContext::new("counter", NodeId(2), 1, JobFailureHook::new(|_| {}));
/// let mut c = provider.create(ctx).unwrap();
/// c.start().await.unwrap();
/// c.handle_event_from_operator(0, 0, OperatorEvent::new(vec![])).await.unwrap();
/// let (result, state) = CheckpointResult::new(CheckpointId(1));
/// c.checkpoint_coordinator(CheckpointId(1), result).await.unwrap();
/// let bytes = state.await.unwrap();
/// assert_eq!(sluice_core::codec::decode::<u64>(&bytes).unwrap(), 1);
/// c.close().await.unwrap();
/// # });
/// ```
pub trait OperatorCoordinator: Send {
    /// Starts the coordinator. Called once, before any other method.
    fn start(&mut self) -> CoordinatorFuture<'_>;

    /// Releases the coordinator's resources (its thread, workers, connections).
    fn close(&mut self) -> CoordinatorFuture<'_>;

    /// An event from `attempt` of `subtask`. The job master only forwards events from live
    /// attempts (see [`LiveAttempts`](crate::LiveAttempts)).
    fn handle_event_from_operator(
        &mut self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        event: OperatorEvent,
    ) -> CoordinatorFuture<'_>;

    /// Takes the coordinator's part of checkpoint `checkpoint_id`: complete `result` with the
    /// coordinator's state, or decline it. The checkpoint takes place when `result` is
    /// completed; events sent before belong to it, events sent after to the next one, so sends
    /// and completion must be ordered on one thread.
    fn checkpoint_coordinator(
        &mut self,
        checkpoint_id: CheckpointId,
        result: CheckpointResult,
    ) -> CoordinatorFuture<'_>;

    /// Checkpoint `checkpoint_id` completed everywhere: side effects may be committed.
    fn notify_checkpoint_complete(&mut self, checkpoint_id: CheckpointId) -> CoordinatorFuture<'_>;

    /// Checkpoint `checkpoint_id` was aborted. Does nothing by default.
    fn notify_checkpoint_aborted(&mut self, checkpoint_id: CheckpointId) -> CoordinatorFuture<'_> {
        let _ = checkpoint_id;
        done(Ok(()))
    }

    /// Global failover: restore the state of checkpoint `checkpoint_id` from `state` (`None`
    /// when no checkpoint completed yet, with [`NO_CHECKPOINT`](crate::NO_CHECKPOINT), or
    /// when it held no coordinator state: then reset to empty). Events sent after this returns
    /// come after the restored checkpoint. Restoring implies the checkpoint completed.
    fn reset_to_checkpoint(
        &mut self,
        checkpoint_id: CheckpointId,
        state: Option<Vec<u8>>,
    ) -> CoordinatorFuture<'_>;

    /// Regional failover: `subtask` is restored to checkpoint `checkpoint_id`. Called once per
    /// subtask, after `execution_attempt_failed` for all its attempts.
    fn subtask_reset(
        &mut self,
        subtask: SubtaskIndex,
        checkpoint_id: CheckpointId,
    ) -> CoordinatorFuture<'_>;

    /// `attempt` of `subtask` failed or was cancelled; stop interacting with it.
    fn execution_attempt_failed(
        &mut self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        reason: Option<String>,
    ) -> CoordinatorFuture<'_>;

    /// `attempt` of `subtask` is running; `gateway` sends to that attempt only.
    fn execution_attempt_ready(
        &mut self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        gateway: SubtaskGateway,
    ) -> CoordinatorFuture<'_>;

    /// Resolves once every call made before this one has been handled (not only queued). The
    /// job master flushes every coordinator before it declares a job finished, so that a
    /// failure while handling an event a subtask sent just before the end still fails the job.
    /// The default resolves at once, which is right for coordinators that handle calls inline;
    /// a coordinator that queues work to its own thread must override it (
    /// [`BaseCoordinator`](crate::BaseCoordinator) does, with
    /// [`CoordinatorContextBase::flush`](crate::CoordinatorContextBase::flush)).
    fn flush(&mut self) -> CoordinatorFuture<'_> {
        done(Ok(()))
    }

    /// A handler that subtasks may call to queue their events straight onto the coordinator's
    /// thread, instead of sending them to the job master, which would call
    /// [`handle_event_from_operator`](Self::handle_event_from_operator). It must keep the same
    /// guarantees: events of one subtask handled in send order, ordered with the master's calls
    /// by the coordinator's queue, and events of attempts that are no longer ready dropped (the
    /// handler checks that on the coordinator thread). `None` (the default) keeps every event on
    /// the master's path. [`BaseCoordinator`](crate::BaseCoordinator) provides one.
    fn direct_event_handler(&self) -> Option<DirectEventHandler> {
        None
    }
}

/// Creates the coordinator of one operator (Flink's `OperatorCoordinator.Provider`).
///
/// An operator that needs a coordinator declares a provider; the job master calls
/// [`create`](Self::create) once per such operator with its [`CoordinatorContext`] (and again
/// on each global failover when the coordinator is wrapped in a
/// [`RecreateOnResetCoordinator`](crate::RecreateOnResetCoordinator)). Closures of the right
/// shape are providers.
///
/// ```
/// use sluice_coordinator::{CoordinatorContext, CoordinatorError, CoordinatorProvider, OperatorCoordinator};
/// fn assert_provider(_: &dyn CoordinatorProvider) {}
/// assert_provider(&|_ctx: CoordinatorContext| -> Result<Box<dyn OperatorCoordinator>, CoordinatorError> {
///     Err(CoordinatorError::user("not built in this example"))
/// });
/// ```
pub trait CoordinatorProvider: Send + Sync {
    /// Creates a coordinator for the operator described by `context`.
    fn create(
        &self,
        context: CoordinatorContext,
    ) -> Result<Box<dyn OperatorCoordinator>, CoordinatorError>;
}

impl<F> CoordinatorProvider for F
where
    F: Fn(CoordinatorContext) -> Result<Box<dyn OperatorCoordinator>, CoordinatorError>
        + Send
        + Sync,
{
    fn create(
        &self,
        context: CoordinatorContext,
    ) -> Result<Box<dyn OperatorCoordinator>, CoordinatorError> {
        self(context)
    }
}
