//! [`CoordinatorFaultInjector`]: operator coordinators that fail on plan, to test that a job
//! with coordinators fails over and recovers; [`IgnoreEvents`]: coordinator logic that accepts
//! every event.

use super::{Budget, INJECTED, SplitMix64, per_million, quiet_injected_panics};
use sluice_coordinator::{
    CheckpointResult, CoordinatorContext, CoordinatorContextBase, CoordinatorError,
    CoordinatorFuture, CoordinatorLogic, CoordinatorProvider, OperatorCoordinator, SubtaskGateway,
};
use sluice_core::{AttemptNumber, CheckpointId, OperatorEvent, SubtaskIndex, UserError};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Coordinator logic that accepts every operator event and does nothing else (the defaults of
/// [`CoordinatorLogic`] for everything but events): for a `BaseCoordinator` a test needs only so
/// that an operator has a coordinator, e.g. one to send events to, to stall or to fail on plan.
///
/// ```
/// use sluice_coordinator::BaseCoordinator;
/// use sluice_runtime::testing::IgnoreEvents;
///
/// let provider = BaseCoordinator::provider(|| IgnoreEvents);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct IgnoreEvents;

impl CoordinatorLogic for IgnoreEvents {
    fn handle_event(
        &mut self,
        _base: &CoordinatorContextBase,
        _subtask: SubtaskIndex,
        _attempt: AttemptNumber,
        _event: OperatorEvent,
    ) -> Result<(), UserError> {
        Ok(())
    }
}

/// When an injected coordinator failure fires.
#[derive(Clone, Copy, Debug)]
enum Trigger {
    /// At the `n`-th operator event one coordinator instance handles (1-based).
    AtEvent(u64),
    /// At the `n`-th `checkpoint_coordinator` call of one coordinator instance (1-based).
    AtCheckpoint(u64),
    /// At every event and every checkpoint call with this probability (per million).
    Random { per_million: u32, seed: u64 },
}

/// How an injected coordinator failure shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoordinatorFault {
    /// The call returns an error (for a checkpoint: the checkpoint is declined when the
    /// coordinator is built on `BaseCoordinator`, the call fails otherwise).
    ReturnError,
    /// The coordinator fails the job through its context's job-failure hook, and the call
    /// succeeds.
    FailJob,
    /// The coordinator panics on its coordinator thread (only for logic wrapped with
    /// [`CoordinatorFaultInjector::wrap_logic`], which runs there).
    Panic,
}

/// Makes operator coordinators fail according to a plan: at the N-th operator event or the N-th
/// checkpoint of a coordinator instance, or with a seeded probability, by returning an error,
/// failing the job through the context's hook, or panicking on the coordinator thread. As with
/// [`FailureInjector`](super::FailureInjector), clones share a budget of failures over the whole
/// job (across restarts; default 1), so a test can inject exactly N failures and still expect the
/// job to finish; counts start again in every new coordinator instance (a global failover
/// recreates the coordinator).
///
/// Wrap a whole [`CoordinatorProvider`] with [`wrap`](Self::wrap) (error or job failure), or the
/// [`CoordinatorLogic`] of a `BaseCoordinator` with [`wrap_logic`](Self::wrap_logic) (all three
/// faults, on the coordinator thread).
///
/// ```
/// use sluice_coordinator::BaseCoordinator;
/// use sluice_runtime::testing::{CoordinatorFault, CoordinatorFaultInjector, IgnoreEvents};
///
/// // The 3rd event of each coordinator instance fails the job, twice over the whole job.
/// let faults = CoordinatorFaultInjector::at_event(3).fault(CoordinatorFault::FailJob).times(2);
/// let provider = faults.wrap(BaseCoordinator::provider(|| IgnoreEvents));
/// // Or, on the coordinator thread: panic in the logic at the 3rd event.
/// let panicking = faults.clone().fault(CoordinatorFault::Panic);
/// let provider = BaseCoordinator::provider(move || panicking.wrap_logic(IgnoreEvents));
/// assert_eq!(faults.injected(), 0);
/// ```
#[derive(Clone, Debug)]
pub struct CoordinatorFaultInjector {
    trigger: Trigger,
    fault: CoordinatorFault,
    budget: Budget,
    instances: Arc<AtomicU64>,
}

impl CoordinatorFaultInjector {
    fn new(trigger: Trigger) -> Self {
        CoordinatorFaultInjector {
            trigger,
            fault: CoordinatorFault::ReturnError,
            budget: Budget::new(),
            instances: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Fails while handling the `n`-th operator event (1-based) of a coordinator instance.
    pub fn at_event(n: u64) -> Self {
        Self::new(Trigger::AtEvent(n))
    }

    /// Fails in the `n`-th `checkpoint_coordinator` call (1-based) of a coordinator instance.
    pub fn at_checkpoint(n: u64) -> Self {
        Self::new(Trigger::AtCheckpoint(n))
    }

    /// Fails each event and each checkpoint call with `probability`, drawn from `seed` (and the
    /// number of the coordinator instance, so that runs are reproducible).
    pub fn seeded(probability: f64, seed: u64) -> Self {
        Self::new(Trigger::Random {
            per_million: per_million(probability),
            seed,
        })
    }

    /// How the failure shows (default [`CoordinatorFault::ReturnError`]).
    pub fn fault(mut self, fault: CoordinatorFault) -> Self {
        self.fault = fault;
        self
    }

    /// At most `failures` failures over the whole job (default 1). Shared by all clones.
    pub fn times(self, failures: u32) -> Self {
        self.budget.set(failures);
        self
    }

    /// How many failures were injected so far, by all clones.
    pub fn injected(&self) -> u32 {
        self.budget.injected()
    }

    /// A provider whose coordinators are `provider`'s, failing on plan. Supports
    /// [`CoordinatorFault::ReturnError`] and [`CoordinatorFault::FailJob`]; with
    /// [`CoordinatorFault::Panic`] creating a coordinator fails (the panic needs the coordinator
    /// thread: use [`wrap_logic`](Self::wrap_logic)).
    pub fn wrap<P: CoordinatorProvider + 'static>(
        &self,
        provider: P,
    ) -> impl CoordinatorProvider + 'static + use<P> {
        let injector = self.clone();
        move |context: CoordinatorContext| -> Result<Box<dyn OperatorCoordinator>, CoordinatorError> {
            if injector.fault == CoordinatorFault::Panic {
                return Err(CoordinatorError::user(
                    "CoordinatorFaultInjector::wrap cannot panic on the coordinator thread; use wrap_logic",
                ));
            }
            let inner = provider.create(context.clone())?;
            Ok(Box::new(FaultyCoordinator {
                inner,
                context,
                plan: injector.instance(),
            }))
        }
    }

    /// `logic`, failing on plan on the coordinator thread; for
    /// `BaseCoordinator::provider(move || injector.wrap_logic(MyLogic::new()))`.
    pub fn wrap_logic<L: CoordinatorLogic>(&self, logic: L) -> FaultyLogic<L> {
        FaultyLogic {
            inner: logic,
            plan: self.instance(),
        }
    }

    /// The plan of one new coordinator instance.
    fn instance(&self) -> Plan {
        let n = self.instances.fetch_add(1, Ordering::SeqCst);
        let rng = match self.trigger {
            Trigger::Random { seed, .. } => seed ^ n.wrapping_mul(0x1000_0000_01b3),
            _ => 0,
        };
        Plan {
            injector: self.clone(),
            events: 0,
            checkpoints: 0,
            rng: SplitMix64(rng),
        }
    }
}

/// What one coordinator instance counted so far.
#[derive(Debug)]
struct Plan {
    injector: CoordinatorFaultInjector,
    events: u64,
    checkpoints: u64,
    rng: SplitMix64,
}

/// Which call is being made.
#[derive(Clone, Copy)]
enum Call {
    Event,
    Checkpoint,
}

impl Plan {
    /// Whether this call fails: the trigger fires and the shared budget allows it.
    fn fires(&mut self, call: Call) -> bool {
        let armed = match (self.injector.trigger, call) {
            (Trigger::AtEvent(n), Call::Event) => {
                self.events += 1;
                self.events == n
            }
            (Trigger::AtCheckpoint(n), Call::Checkpoint) => {
                self.checkpoints += 1;
                self.checkpoints == n
            }
            (Trigger::Random { per_million, .. }, _) => {
                self.rng.next_u64() % 1_000_000 < u64::from(per_million)
            }
            _ => false,
        };
        armed && self.injector.budget.take()
    }

    /// Counts the failure and describes it.
    fn message(&self, operator: &str, what: &str) -> String {
        let n = self.injector.budget.count();
        format!("{INJECTED} #{n} in the coordinator of '{operator}' while {what}")
    }
}

/// A coordinator that delegates to another and fails on plan; made by
/// [`CoordinatorFaultInjector::wrap`].
struct FaultyCoordinator {
    inner: Box<dyn OperatorCoordinator>,
    context: CoordinatorContext,
    plan: Plan,
}

impl FaultyCoordinator {
    /// `Some(error)` to return instead of the call, after failing the job if that is the fault.
    fn inject(&mut self, call: Call, what: &str) -> Option<CoordinatorError> {
        if !self.plan.fires(call) {
            return None;
        }
        let message = self.plan.message(self.context.operator_name(), what);
        match self.plan.injector.fault {
            CoordinatorFault::FailJob => {
                self.context.fail_job(message.into());
                None
            }
            CoordinatorFault::ReturnError | CoordinatorFault::Panic => {
                Some(CoordinatorError::user(message))
            }
        }
    }
}

impl OperatorCoordinator for FaultyCoordinator {
    fn start(&mut self) -> CoordinatorFuture<'_> {
        self.inner.start()
    }

    fn close(&mut self) -> CoordinatorFuture<'_> {
        self.inner.close()
    }

    fn handle_event_from_operator(
        &mut self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        event: OperatorEvent,
    ) -> CoordinatorFuture<'_> {
        if let Some(e) = self.inject(Call::Event, "handling an operator event") {
            return sluice_coordinator::done(Err(e));
        }
        self.inner
            .handle_event_from_operator(subtask, attempt, event)
    }

    fn checkpoint_coordinator(
        &mut self,
        checkpoint_id: CheckpointId,
        result: CheckpointResult,
    ) -> CoordinatorFuture<'_> {
        if let Some(e) = self.inject(Call::Checkpoint, "checkpointing") {
            return sluice_coordinator::done(Err(e));
        }
        self.inner.checkpoint_coordinator(checkpoint_id, result)
    }

    fn notify_checkpoint_complete(&mut self, checkpoint_id: CheckpointId) -> CoordinatorFuture<'_> {
        self.inner.notify_checkpoint_complete(checkpoint_id)
    }

    fn notify_checkpoint_aborted(&mut self, checkpoint_id: CheckpointId) -> CoordinatorFuture<'_> {
        self.inner.notify_checkpoint_aborted(checkpoint_id)
    }

    fn reset_to_checkpoint(
        &mut self,
        checkpoint_id: CheckpointId,
        state: Option<Vec<u8>>,
    ) -> CoordinatorFuture<'_> {
        self.inner.reset_to_checkpoint(checkpoint_id, state)
    }

    fn subtask_reset(
        &mut self,
        subtask: SubtaskIndex,
        checkpoint_id: CheckpointId,
    ) -> CoordinatorFuture<'_> {
        self.inner.subtask_reset(subtask, checkpoint_id)
    }

    fn execution_attempt_failed(
        &mut self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        reason: Option<String>,
    ) -> CoordinatorFuture<'_> {
        self.inner
            .execution_attempt_failed(subtask, attempt, reason)
    }

    fn execution_attempt_ready(
        &mut self,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        gateway: SubtaskGateway,
    ) -> CoordinatorFuture<'_> {
        self.inner
            .execution_attempt_ready(subtask, attempt, gateway)
    }
}

/// Coordinator logic that delegates to another and fails on plan, on the coordinator thread;
/// made by [`CoordinatorFaultInjector::wrap_logic`].
#[derive(Debug)]
pub struct FaultyLogic<L> {
    inner: L,
    plan: Plan,
}

impl<L> FaultyLogic<L> {
    /// The wrapped logic.
    pub fn inner(&self) -> &L {
        &self.inner
    }

    /// `Err` to return instead of the call, after failing the job or panicking if that is the
    /// fault.
    fn inject(
        &mut self,
        base: &CoordinatorContextBase,
        call: Call,
        what: &str,
    ) -> Result<(), UserError> {
        if !self.plan.fires(call) {
            return Ok(());
        }
        let message = self.plan.message(base.operator_name(), what);
        match self.plan.injector.fault {
            CoordinatorFault::ReturnError => Err(message.into()),
            CoordinatorFault::FailJob => {
                base.fail_job(message);
                Ok(())
            }
            CoordinatorFault::Panic => {
                quiet_injected_panics();
                panic!("{message}")
            }
        }
    }
}

impl<L: CoordinatorLogic> CoordinatorLogic for FaultyLogic<L> {
    fn start(&mut self, base: &CoordinatorContextBase) -> Result<(), UserError> {
        self.inner.start(base)
    }

    fn handle_event(
        &mut self,
        base: &CoordinatorContextBase,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        event: OperatorEvent,
    ) -> Result<(), UserError> {
        self.inject(base, Call::Event, "handling an operator event")?;
        self.inner.handle_event(base, subtask, attempt, event)
    }

    fn checkpoint(
        &mut self,
        base: &CoordinatorContextBase,
        checkpoint: CheckpointId,
    ) -> Result<Vec<u8>, UserError> {
        self.inject(base, Call::Checkpoint, "checkpointing")?;
        self.inner.checkpoint(base, checkpoint)
    }

    fn checkpoint_complete(
        &mut self,
        base: &CoordinatorContextBase,
        checkpoint: CheckpointId,
    ) -> Result<(), UserError> {
        self.inner.checkpoint_complete(base, checkpoint)
    }

    fn checkpoint_aborted(
        &mut self,
        base: &CoordinatorContextBase,
        checkpoint: CheckpointId,
    ) -> Result<(), UserError> {
        self.inner.checkpoint_aborted(base, checkpoint)
    }

    fn restore(&mut self, checkpoint: CheckpointId, state: Option<&[u8]>) -> Result<(), UserError> {
        self.inner.restore(checkpoint, state)
    }

    fn subtask_reset(
        &mut self,
        base: &CoordinatorContextBase,
        subtask: SubtaskIndex,
        checkpoint: CheckpointId,
    ) -> Result<(), UserError> {
        self.inner.subtask_reset(base, subtask, checkpoint)
    }
}
