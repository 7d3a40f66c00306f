//! [`RecreateOnResetCoordinator`]: a coordinator wrapper that, on global failover, closes the
//! old instance in the background, creates a fresh one through the provider, restores it, and
//! replays the calls made meanwhile in order (Flink's `RecreateOnResetOperatorCoordinator`).

use crate::checkpoint::CheckpointResult;
use crate::context::CoordinatorContext;
use crate::coordinator::{
    CoordinatorFuture, CoordinatorProvider, DirectEventHandler, OperatorCoordinator,
};
use crate::error::{CoordinatorError, SubmitError};
use crate::gateway::SubtaskGateway;
use crate::util::lock;
use sluice_core::{AttemptNumber, CheckpointId, OperatorEvent, SubtaskIndex};
use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// How long closing a replaced instance may take before the job fails (Flink: 60 s).
pub const DEFAULT_CLOSE_TIMEOUT: Duration = Duration::from_secs(60);

/// How many calls may wait while an instance is being replaced; callers beyond wait.
pub const DEFAULT_PENDING_CALLS: usize = 1024;

/// A coordinator call, kept to be replayed on the new instance.
enum Call {
    Start,
    HandleEvent(SubtaskIndex, AttemptNumber, OperatorEvent),
    Checkpoint(CheckpointId, CheckpointResult),
    Complete(CheckpointId),
    Aborted(CheckpointId),
    SubtaskReset(SubtaskIndex, CheckpointId),
    AttemptFailed(SubtaskIndex, AttemptNumber, Option<String>),
    AttemptReady(SubtaskIndex, AttemptNumber, SubtaskGateway),
}

impl Call {
    fn name(&self) -> &'static str {
        match self {
            Call::Start => "start",
            Call::HandleEvent(..) => "handle_event_from_operator",
            Call::Checkpoint(..) => "checkpoint_coordinator",
            Call::Complete(_) => "notify_checkpoint_complete",
            Call::Aborted(_) => "notify_checkpoint_aborted",
            Call::SubtaskReset(..) => "subtask_reset",
            Call::AttemptFailed(..) => "execution_attempt_failed",
            Call::AttemptReady(..) => "execution_attempt_ready",
        }
    }

    async fn apply(self, c: &mut dyn OperatorCoordinator) -> Result<(), CoordinatorError> {
        match self {
            Call::Start => c.start().await,
            Call::HandleEvent(s, a, e) => c.handle_event_from_operator(s, a, e).await,
            Call::Checkpoint(id, r) => c.checkpoint_coordinator(id, r).await,
            Call::Complete(id) => c.notify_checkpoint_complete(id).await,
            Call::Aborted(id) => c.notify_checkpoint_aborted(id).await,
            Call::SubtaskReset(s, id) => c.subtask_reset(s, id).await,
            Call::AttemptFailed(s, a, r) => c.execution_attempt_failed(s, a, r).await,
            Call::AttemptReady(s, a, g) => c.execution_attempt_ready(s, a, g).await,
        }
    }
}

/// One coordinator instance and the quiesceable context it was created with.
struct Instance {
    coordinator: Box<dyn OperatorCoordinator>,
    context: CoordinatorContext,
}

#[derive(Default)]
struct SwitchState {
    pending: VecDeque<Call>,
    /// The caught-up instance (or, when cancelled, the one to close), once finished.
    outcome: Option<Instance>,
    finished: bool,
    cancelled: bool,
}

/// The replacement of one instance by the next, running in the background.
#[derive(Default)]
struct Switch {
    state: Mutex<SwitchState>,
    changed: Notify,
}

impl Switch {
    fn cancel(&self) {
        let mut st = lock(&self.state);
        st.cancelled = true;
        st.pending.clear(); // dropped checkpoint results decline themselves
        drop(st);
        self.changed.notify_waiters();
    }

    fn finish(&self, instance: Option<Instance>) {
        let mut st = lock(&self.state);
        st.outcome = instance;
        st.finished = true;
        drop(st);
        self.changed.notify_waiters();
    }

    /// Waits until the switch finished and takes its instance.
    async fn take_when_finished(&self) -> Option<Instance> {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = lock(&self.state);
                if st.finished {
                    return st.outcome.take();
                }
            }
            notified.await;
        }
    }
}

enum Slot {
    Ready(Instance),
    Switching(Arc<Switch>),
    Closed,
}

/// What a reset replaces.
enum Previous {
    Instance(Instance),
    Switch(Arc<Switch>),
    Nothing,
}

/// Wraps a coordinator so that a global failover recreates it from its provider.
///
/// On `reset_to_checkpoint` the wrapper returns at once and, in the background:
/// 1. quiesces the old instance's context (a stale instance can no longer fail the job) and
///    closes it, waiting at most the close timeout (a timeout or an error fails the job);
/// 2. creates a new instance through the provider with a fresh quiesceable context, calls its
///    `reset_to_checkpoint`, then `start` if the wrapper had been started;
/// 3. replays, in order, every call made on the wrapper meanwhile, then hands the new instance
///    back to the wrapper. While calls are queued the wrapper's methods return once queued (a
///    bounded queue: past its capacity they wait). Errors of replayed calls fail the job.
///
/// A second reset while the first is still running supersedes it: the calls queued for the
/// superseded instance are dropped (queued checkpoint results decline) and the instance it
/// created, if any, is closed in turn. Needs a tokio runtime.
///
/// ```
/// use sluice_coordinator::*;
/// use sluice_core::{CheckpointId, NodeId};
/// use std::sync::Arc;
///
/// struct Noop;
/// impl OperatorCoordinator for Noop {
///     fn start(&mut self) -> CoordinatorFuture<'_> { done(Ok(())) }
///     fn close(&mut self) -> CoordinatorFuture<'_> { done(Ok(())) }
///     fn handle_event_from_operator(&mut self, _: usize, _: u32, _: sluice_core::OperatorEvent) -> CoordinatorFuture<'_> { done(Ok(())) }
///     fn checkpoint_coordinator(&mut self, _: CheckpointId, r: CheckpointResult) -> CoordinatorFuture<'_> { r.complete(vec![]); done(Ok(())) }
///     fn notify_checkpoint_complete(&mut self, _: CheckpointId) -> CoordinatorFuture<'_> { done(Ok(())) }
///     fn reset_to_checkpoint(&mut self, _: CheckpointId, _: Option<Vec<u8>>) -> CoordinatorFuture<'_> { done(Ok(())) }
///     fn subtask_reset(&mut self, _: usize, _: CheckpointId) -> CoordinatorFuture<'_> { done(Ok(())) }
///     fn execution_attempt_failed(&mut self, _: usize, _: u32, _: Option<String>) -> CoordinatorFuture<'_> { done(Ok(())) }
///     fn execution_attempt_ready(&mut self, _: usize, _: u32, _: SubtaskGateway) -> CoordinatorFuture<'_> { done(Ok(())) }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// let provider: Arc<dyn CoordinatorProvider> = Arc::new(
///     |_ctx: CoordinatorContext| -> Result<Box<dyn OperatorCoordinator>, CoordinatorError> { Ok(Box::new(Noop)) },
/// );
/// let ctx = CoordinatorContext::new("op", NodeId(0), 1, JobFailureHook::new(|_| {}));
/// let mut c = RecreateOnResetCoordinator::new(provider, ctx).unwrap();
/// c.start().await.unwrap();
/// c.reset_to_checkpoint(NO_CHECKPOINT, None).await.unwrap();
/// let (result, state) = CheckpointResult::new(CheckpointId(1));
/// c.checkpoint_coordinator(CheckpointId(1), result).await.unwrap(); // queued, then replayed
/// assert_eq!(state.await, Ok(vec![]));
/// c.close().await.unwrap();
/// # });
/// ```
pub struct RecreateOnResetCoordinator {
    provider: Arc<dyn CoordinatorProvider>,
    context: CoordinatorContext,
    close_timeout: Duration,
    pending_capacity: usize,
    started: bool,
    slot: Slot,
}

impl RecreateOnResetCoordinator {
    /// Creates the first instance through `provider`, with a quiesceable child of `context`.
    pub fn new(
        provider: Arc<dyn CoordinatorProvider>,
        context: CoordinatorContext,
    ) -> Result<Self, CoordinatorError> {
        let child = context.quiesceable();
        let coordinator = provider.create(child.clone())?;
        Ok(RecreateOnResetCoordinator {
            provider,
            context,
            close_timeout: DEFAULT_CLOSE_TIMEOUT,
            pending_capacity: DEFAULT_PENDING_CALLS,
            started: false,
            slot: Slot::Ready(Instance {
                coordinator,
                context: child,
            }),
        })
    }

    /// Sets how long closing a replaced instance may take.
    pub fn with_close_timeout(mut self, timeout: Duration) -> Self {
        self.close_timeout = timeout;
        self
    }

    /// Sets how many calls may wait during a replacement (at least one).
    pub fn with_pending_capacity(mut self, capacity: usize) -> Self {
        self.pending_capacity = capacity.max(1);
        self
    }

    /// Waits until a replacement in progress has finished and replayed every queued call.
    /// Returns at once when none is in progress.
    pub async fn settled(&mut self) {
        if let Slot::Switching(sw) = &self.slot {
            let sw = sw.clone();
            if let Some(instance) = sw.take_when_finished().await {
                self.slot = Slot::Ready(instance);
            }
        }
    }

    async fn dispatch(&mut self, call: Call) -> Result<(), CoordinatorError> {
        loop {
            let sw = match &mut self.slot {
                Slot::Ready(instance) => return call.apply(&mut *instance.coordinator).await,
                Slot::Closed => return Err(SubmitError::Closed.into()),
                Slot::Switching(sw) => sw.clone(),
            };
            let notified = sw.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = lock(&sw.state);
                if st.finished {
                    match st.outcome.take() {
                        Some(instance) => {
                            drop(st);
                            self.slot = Slot::Ready(instance);
                            continue;
                        }
                        None => {
                            return Err(CoordinatorError::user(format!(
                                "the coordinator of '{}' could not be recreated; '{}' has no \
                                 instance to run on",
                                self.context.operator_name(),
                                call.name()
                            )));
                        }
                    }
                }
                if st.pending.len() < self.pending_capacity {
                    st.pending.push_back(call);
                    return Ok(());
                }
            }
            // Room was made or the switch finished: try again with the same call.
            notified.await;
        }
    }
}

/// The background part of a reset: close the previous instance, create, restore and start the
/// next one, replay the queued calls.
#[allow(clippy::too_many_arguments)]
async fn run_switch(
    previous: Previous,
    switch: Arc<Switch>,
    provider: Arc<dyn CoordinatorProvider>,
    context: CoordinatorContext,
    close_timeout: Duration,
    checkpoint_id: CheckpointId,
    state: Option<Vec<u8>>,
    started: bool,
) {
    let old = match previous {
        Previous::Instance(i) => Some(i),
        Previous::Switch(sw) => sw.take_when_finished().await,
        Previous::Nothing => None,
    };
    if let Some(mut old) = old {
        old.context.quiesce();
        match tokio::time::timeout(close_timeout, old.coordinator.close()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                context.fail_job(format!("closing the replaced coordinator failed: {e}").into());
            }
            Err(_) => {
                context.fail_job(
                    format!("closing the replaced coordinator timed out after {close_timeout:?}")
                        .into(),
                );
            }
        }
    }
    if lock(&switch.state).cancelled {
        switch.finish(None);
        return;
    }
    let child = context.quiesceable();
    let mut coordinator = match provider.create(child.clone()) {
        Ok(c) => c,
        Err(e) => {
            context.fail_job(format!("cannot recreate the coordinator: {e}").into());
            switch.finish(None);
            return;
        }
    };
    if let Err(e) = coordinator.reset_to_checkpoint(checkpoint_id, state).await {
        child.fail_job(format!("failed to reset to checkpoint {checkpoint_id}: {e}").into());
    }
    if started && let Err(e) = coordinator.start().await {
        child.fail_job(format!("failed to start the recreated coordinator: {e}").into());
    }
    let mut instance = Instance {
        coordinator,
        context: child,
    };
    loop {
        let call = {
            let mut st = lock(&switch.state);
            match st.pending.pop_front() {
                Some(call) if !st.cancelled => call,
                _ => {
                    st.outcome = Some(instance);
                    st.finished = true;
                    drop(st);
                    switch.changed.notify_waiters();
                    return;
                }
            }
        };
        switch.changed.notify_waiters(); // room in the queue
        let name = call.name();
        if let Err(e) = call.apply(&mut *instance.coordinator).await {
            instance
                .context
                .fail_job(format!("replayed call '{name}' failed: {e}").into());
        }
    }
}

impl OperatorCoordinator for RecreateOnResetCoordinator {
    fn start(&mut self) -> CoordinatorFuture<'_> {
        self.started = true;
        Box::pin(self.dispatch(Call::Start))
    }

    fn close(&mut self) -> CoordinatorFuture<'_> {
        Box::pin(async move {
            let instance = match std::mem::replace(&mut self.slot, Slot::Closed) {
                Slot::Ready(i) => Some(i),
                Slot::Switching(sw) => {
                    sw.cancel();
                    sw.take_when_finished().await
                }
                Slot::Closed => None,
            };
            match instance {
                Some(mut i) => i.coordinator.close().await,
                None => Ok(()),
            }
        })
    }

    fn handle_event_from_operator(
        &mut self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        event: OperatorEvent,
    ) -> CoordinatorFuture<'_> {
        Box::pin(self.dispatch(Call::HandleEvent(subtask, attempt, event)))
    }

    fn direct_event_handler(&self) -> Option<DirectEventHandler> {
        // Only a settled instance: during a replacement, events queue with the other calls.
        match &self.slot {
            Slot::Ready(instance) => instance.coordinator.direct_event_handler(),
            Slot::Closed | Slot::Switching(_) => None,
        }
    }

    fn flush(&mut self) -> CoordinatorFuture<'_> {
        Box::pin(async move {
            // A replacement in progress replays its queued calls first.
            self.settled().await;
            match &mut self.slot {
                Slot::Ready(instance) => instance.coordinator.flush().await,
                Slot::Closed | Slot::Switching(_) => Ok(()),
            }
        })
    }

    fn checkpoint_coordinator(
        &mut self,
        checkpoint_id: CheckpointId,
        result: CheckpointResult,
    ) -> CoordinatorFuture<'_> {
        Box::pin(self.dispatch(Call::Checkpoint(checkpoint_id, result)))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: CheckpointId) -> CoordinatorFuture<'_> {
        Box::pin(self.dispatch(Call::Complete(checkpoint_id)))
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint_id: CheckpointId) -> CoordinatorFuture<'_> {
        Box::pin(self.dispatch(Call::Aborted(checkpoint_id)))
    }

    fn reset_to_checkpoint(
        &mut self,
        checkpoint_id: CheckpointId,
        state: Option<Vec<u8>>,
    ) -> CoordinatorFuture<'_> {
        Box::pin(async move {
            let previous = match std::mem::replace(&mut self.slot, Slot::Closed) {
                Slot::Ready(i) => Previous::Instance(i),
                Slot::Switching(sw) => {
                    sw.cancel();
                    Previous::Switch(sw)
                }
                Slot::Closed => Previous::Nothing,
            };
            let switch = Arc::new(Switch::default());
            tokio::spawn(run_switch(
                previous,
                switch.clone(),
                self.provider.clone(),
                self.context.clone(),
                self.close_timeout,
                checkpoint_id,
                state,
                self.started,
            ));
            self.slot = Slot::Switching(switch);
            Ok(())
        })
    }

    fn subtask_reset(
        &mut self,
        subtask: SubtaskIndex,
        checkpoint_id: CheckpointId,
    ) -> CoordinatorFuture<'_> {
        Box::pin(self.dispatch(Call::SubtaskReset(subtask, checkpoint_id)))
    }

    fn execution_attempt_failed(
        &mut self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        reason: Option<String>,
    ) -> CoordinatorFuture<'_> {
        Box::pin(self.dispatch(Call::AttemptFailed(subtask, attempt, reason)))
    }

    fn execution_attempt_ready(
        &mut self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        gateway: SubtaskGateway,
    ) -> CoordinatorFuture<'_> {
        Box::pin(self.dispatch(Call::AttemptReady(subtask, attempt, gateway)))
    }
}

impl fmt::Debug for RecreateOnResetCoordinator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let slot = match &self.slot {
            Slot::Ready(_) => "ready",
            Slot::Switching(_) => "recreating",
            Slot::Closed => "closed",
        };
        f.debug_struct("RecreateOnResetCoordinator")
            .field("operator", &self.context.operator_name())
            .field("started", &self.started)
            .field("state", &slot)
            .finish()
    }
}
