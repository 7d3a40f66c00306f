//! The job master's side of operator coordinators (Flink's `OperatorCoordinatorHolder`).
//!
//! One [`Holder`] per operator that declared a coordinator. It creates the coordinator (wrapped
//! so that a global failover recreates it), starts it, gives it one gateway per subtask attempt,
//! routes events both ways, and aligns coordinator events with checkpoints through the pure
//! [`EventValve`]:
//!
//! - coordinator → subtask: the coordinator sends through a gateway whose transport is the valve;
//!   an open valve hands the event to the subtask task's mailbox at once (the acknowledgement is
//!   the mailbox taking it), a closed one holds it;
//! - subtask → coordinator: an operator calls `OperatorContext::send_event_to_coordinator`; the
//!   master drops events of attempts that are no longer live and passes the rest on;
//! - at checkpoint N the master first checkpoints every coordinator; the instant a coordinator
//!   completes its snapshot, its valve closes (events sent afterwards belong to N + 1 and are held
//!   per subtask); barriers are injected only once every event sent before the snapshot was
//!   taken by its mailbox; when a subtask acknowledges N (it took the barrier), its held events
//!   are released in order; completion, abort and reset release everything.

use crate::error::{CoordinatorFailureInfo, JobError};
use crate::graph::StreamGraph;
use crate::job::plan::Plan;
use crate::operator::to_coordinator::{DirectSlot, ToCoordinator};
use crate::task::control::TaskControl;
use futures::future::BoxFuture;
use sluice_coordinator::valve::{EventId, EventValve, Readiness, Release, SendOutcome};
use sluice_coordinator::{
    AckFuture, AckSender, CheckpointResult, CoordinatorContext, CoordinatorFailure,
    CoordinatorProvider, EventTransport, JobFailureHook, LiveAttempts, OperatorCoordinator,
    RecreateOnResetCoordinator, SendError, SubtaskAttempt, SubtaskGateway,
};
use sluice_core::sync::lock;
use sluice_core::{AttemptNumber, CheckpointId, NodeId, OperatorEvent, SubtaskIndex};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

/// The state of one holder that the valve transport shares with it, under one lock.
#[derive(Default)]
struct HolderState {
    valve: EventValve<OperatorEvent>,
    /// Acknowledgements owed for events the valve holds.
    waiting: HashMap<EventId, AckSender>,
    /// The mailbox of each running subtask attempt.
    mailboxes: BTreeMap<SubtaskAttempt, mpsc::Sender<TaskControl>>,
    /// Attempts whose events were lost while they ran: they must be failed over.
    lost: Vec<SubtaskAttempt>,
    /// Why the valve refused to close for a checkpoint, if it did.
    close_error: Option<String>,
}

/// What the valve transport shares with the holder.
struct Shared {
    node: NodeId,
    state: Mutex<HolderState>,
    /// Held across a valve decision and the mailbox hand-off, so that events released by the
    /// master and events sent by the coordinator thread reach a mailbox in valve order. It is
    /// not the state's lock: a hand-off may wait for room in a mailbox, and nothing but other
    /// deliveries must wait with it.
    order: Mutex<()>,
    ready: tokio::sync::Notify,
}

/// Why an event did not reach a mailbox.
enum EnqueueError {
    /// The mailbox is full and waiting is not allowed where the caller runs.
    Full,
    /// The task is gone.
    Gone,
}

impl Shared {
    /// Hands an event the valve let through to its attempt's mailbox.
    fn deliver(
        &self,
        target: SubtaskAttempt,
        id: EventId,
        event: OperatorEvent,
    ) -> Result<(), SendError> {
        self.deliver_locked(lock(&self.state), target, id, event)
    }

    /// [`deliver`](Self::deliver) with the state already locked by the caller.
    fn deliver_locked(
        &self,
        mut st: MutexGuard<'_, HolderState>,
        target: SubtaskAttempt,
        id: EventId,
        event: OperatorEvent,
    ) -> Result<(), SendError> {
        let msg = TaskControl::OperatorEvent {
            target: self.node,
            event,
        };
        // The common case under one lock: the mailbox has room, the event is acknowledged.
        let waiting_for_room = {
            match st.mailboxes.get(&target).map(|tx| tx.try_send(msg)) {
                Some(Ok(())) => {
                    let ready = st.valve.acked(id);
                    drop(st);
                    if !ready.is_empty() {
                        self.ready.notify_waiters();
                    }
                    return Ok(());
                }
                Some(Err(TrySendError::Full(msg))) => {
                    st.mailboxes.get(&target).cloned().map(|tx| (tx, msg))
                }
                Some(Err(TrySendError::Closed(_))) | None => None,
            }
        };
        drop(st);
        // A full mailbox: wait for room (where waiting is allowed) without holding the lock.
        let sent = match waiting_for_room {
            None => Err(SendError::TaskNotRunning { target }),
            Some((tx, msg)) => enqueue(&tx, msg).map_err(|e| match e {
                EnqueueError::Full => SendError::MailboxFull { target },
                EnqueueError::Gone => SendError::TaskNotRunning { target },
            }),
        };
        {
            let mut st = lock(&self.state);
            match &sent {
                Ok(()) => {
                    st.valve.acked(id);
                }
                Err(_) => {
                    if let Some(t) = st.valve.delivery_failed(id).failover {
                        st.lost.push(t);
                    }
                }
            }
        }
        self.ready.notify_waiters();
        sent
    }

    /// Delivers events the valve released, completing their acknowledgements. The caller holds
    /// `order` since the valve decided the release.
    fn release(&self, releases: Vec<Release<OperatorEvent>>) {
        for r in releases {
            let result = self.deliver(r.target, r.id, r.event);
            let ack = lock(&self.state).waiting.remove(&r.id);
            if let Some(ack) = ack {
                match result {
                    Ok(()) => ack.ack(),
                    Err(e) => ack.fail(e),
                }
            }
        }
    }
}

/// Puts `msg` into a task's mailbox. Blocks only a plain thread (the coordinator's), or a worker
/// of a multi-threaded runtime after handing its other tasks away.
fn enqueue(tx: &mpsc::Sender<TaskControl>, msg: TaskControl) -> Result<(), EnqueueError> {
    match tx.try_send(msg) {
        Ok(()) => Ok(()),
        Err(TrySendError::Closed(_)) => Err(EnqueueError::Gone),
        Err(TrySendError::Full(msg)) => match tokio::runtime::Handle::try_current() {
            Err(_) => tx.blocking_send(msg).map_err(|_| EnqueueError::Gone),
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| tx.blocking_send(msg))
                    .map_err(|_| EnqueueError::Gone)
            }
            Ok(_) => Err(EnqueueError::Full),
        },
    }
}

/// The gateways' transport: every send goes through the valve.
struct ValveTransport(Arc<Shared>);

impl EventTransport for ValveTransport {
    fn send(&self, target: SubtaskAttempt, event: OperatorEvent) -> AckFuture {
        let _order = lock(&self.0.order);
        let mut st = lock(&self.0.state);
        match st.valve.send(target, event) {
            SendOutcome::Deliver { id, event } => {
                match self.0.deliver_locked(st, target, id, event) {
                    Ok(()) => AckFuture::acked(),
                    Err(e) => AckFuture::failed(e),
                }
            }
            SendOutcome::Held { id } => {
                let (ack, fut) = AckFuture::channel(target);
                st.waiting.insert(id, ack);
                fut
            }
            SendOutcome::NotRunning { .. } => {
                AckFuture::failed(SendError::TaskNotRunning { target })
            }
        }
    }
}

/// One operator's coordinator and its valve.
struct Holder {
    node: NodeId,
    name: String,
    parallelism: usize,
    coordinator: RecreateOnResetCoordinator,
    shared: Arc<Shared>,
    live: LiveAttempts,
    attempts: Vec<Option<AttemptNumber>>,
    /// The subtasks' direct path to the coordinator's thread, open while an attempt runs.
    direct: DirectSlot,
}

/// Every coordinator of a job.
pub(crate) struct Coordinators {
    holders: Vec<Holder>,
}

fn coordinator_error(node: NodeId, name: &str, what: &str, e: impl std::fmt::Display) -> JobError {
    JobError::CoordinatorFailed(CoordinatorFailureInfo {
        operator_id: node,
        operator_name: name.to_string(),
        message: format!("failed to {what}: {e}"),
    })
}

/// The job error for a failure a coordinator reported through its failure hook.
pub(crate) fn reported_failure(f: &CoordinatorFailure) -> JobError {
    JobError::CoordinatorFailed(CoordinatorFailureInfo {
        operator_id: f.operator_id(),
        operator_name: f.operator().to_string(),
        message: f.cause().to_string(),
    })
}

/// What one coordinator's part of a checkpoint resolves to.
type CoordinatorPart = BoxFuture<'static, Result<(NodeId, Vec<u8>), String>>;

impl Coordinators {
    /// Creates the coordinators declared in `graph`; their failures go to `failures`.
    pub(crate) fn create(
        graph: &StreamGraph,
        plan: &Plan,
        failures: mpsc::Sender<CoordinatorFailure>,
    ) -> Result<Self, JobError> {
        let mut holders = Vec::new();
        for n in &graph.nodes {
            let Some(provider) = &n.coordinator else {
                continue;
            };
            let p = plan.parallelism[n.id.0];
            let tx = failures.clone();
            // One failure is enough to fail the job; later ones are dropped when the queue is full.
            let hook = JobFailureHook::new(move |f| {
                let _ = tx.try_send(f);
            });
            let context = CoordinatorContext::new(n.name.clone(), n.id, p, hook);
            let provider: Arc<dyn CoordinatorProvider> = provider.clone();
            let coordinator = RecreateOnResetCoordinator::new(provider, context)
                .map_err(|e| coordinator_error(n.id, &n.name, "be created", e))?;
            holders.push(Holder {
                node: n.id,
                name: n.name.clone(),
                parallelism: p,
                coordinator,
                shared: Arc::new(Shared {
                    node: n.id,
                    state: Mutex::new(HolderState::default()),
                    order: Mutex::new(()),
                    ready: tokio::sync::Notify::new(),
                }),
                live: LiveAttempts::new(p),
                attempts: vec![None; p],
                direct: DirectSlot::default(),
            });
        }
        Ok(Coordinators { holders })
    }

    /// The direct path of each operator with a coordinator, for its subtasks' contexts.
    pub(crate) fn direct_slots(&self) -> BTreeMap<NodeId, DirectSlot> {
        self.holders
            .iter()
            .map(|h| (h.node, h.direct.clone()))
            .collect()
    }

    /// Whether the job has any coordinator.
    pub(crate) fn is_empty(&self) -> bool {
        self.holders.is_empty()
    }

    /// Starts every coordinator, after restoring `states` (global restore before the first
    /// attempt).
    pub(crate) async fn start(
        &mut self,
        restore: Option<(CheckpointId, &BTreeMap<NodeId, Vec<u8>>)>,
    ) -> Result<(), JobError> {
        for h in &mut self.holders {
            if let Some((id, states)) = restore {
                let state = states.get(&h.node).cloned();
                h.coordinator
                    .reset_to_checkpoint(id, state)
                    .await
                    .map_err(|e| coordinator_error(h.node, &h.name, "restore", e))?;
            }
            h.coordinator
                .start()
                .await
                .map_err(|e| coordinator_error(h.node, &h.name, "start", e))?;
        }
        Ok(())
    }

    /// The tasks of `attempt` are deployed: register their mailboxes and tell the coordinators.
    /// `mailboxes` maps (operator, subtask) to the mailbox of the task running it.
    pub(crate) async fn attempt_deployed(
        &mut self,
        attempt: AttemptNumber,
        mailboxes: &BTreeMap<(NodeId, SubtaskIndex), mpsc::Sender<TaskControl>>,
    ) -> Result<(), JobError> {
        for h in &mut self.holders {
            for s in 0..h.parallelism {
                Self::subtask_ready(h, s, attempt, mailboxes.get(&(h.node, s))).await?;
            }
            // Every call so far is queued on the coordinator (a replacement has replayed
            // them): from now on the subtasks may queue their events directly behind them.
            h.coordinator.settled().await;
            h.direct.set(h.coordinator.direct_event_handler());
        }
        Ok(())
    }

    /// Passes an operator's event to its coordinator, unless it comes from an attempt that is
    /// no longer live.
    pub(crate) async fn event_from_operator(&mut self, e: ToCoordinator) -> Result<(), JobError> {
        let Some(h) = self.holders.iter_mut().find(|h| h.node == e.node) else {
            return Ok(());
        };
        if !h.live.admit(e.subtask, e.attempt) {
            tracing::debug!(operator = %h.name, subtask = e.subtask, attempt = e.attempt, "dropping an event of a failed attempt");
            return Ok(());
        }
        h.coordinator
            .handle_event_from_operator(e.subtask, e.attempt, e.event)
            .await
            .map_err(|err| coordinator_error(h.node, &h.name, "handle an operator event", err))
    }

    /// Waits until every coordinator handled every call made before (see
    /// [`OperatorCoordinator::flush`]).
    pub(crate) async fn flush(&mut self) -> Result<(), JobError> {
        for h in &mut self.holders {
            h.coordinator
                .flush()
                .await
                .map_err(|e| coordinator_error(h.node, &h.name, "handle its queued calls", e))?;
        }
        Ok(())
    }

    /// Starts checkpoint `id` at every coordinator, before barriers are injected: marks the
    /// valves and asks each coordinator for its snapshot (this only queues the work). Returns a
    /// future, independent of `self`, that resolves to every coordinator's state once each
    /// snapshot was taken and every event sent before it reached its mailbox; or to why the
    /// checkpoint cannot complete (a decline, or an event sent before the snapshot was lost).
    pub(crate) async fn start_checkpoint(
        &mut self,
        id: CheckpointId,
    ) -> BoxFuture<'static, Result<BTreeMap<NodeId, Vec<u8>>, String>> {
        let mut parts: Vec<CoordinatorPart> = Vec::new();
        for h in &mut self.holders {
            let part = Self::start_one(h, id).await;
            parts.push(match part {
                Ok(part) => part,
                Err(e) => Box::pin(std::future::ready(Err(e))),
            });
        }
        Box::pin(async move {
            let states = futures::future::try_join_all(parts).await?;
            Ok(states.into_iter().collect())
        })
    }

    async fn start_one(h: &mut Holder, id: CheckpointId) -> Result<CoordinatorPart, String> {
        let name = h.name.clone();
        lock(&h.shared.state)
            .valve
            .trigger(id)
            .map_err(|e| format!("coordinator of '{name}': {e}"))?;
        let shared = h.shared.clone();
        let (result, future) = CheckpointResult::new(id);
        // The valve closes the instant the snapshot completes, on the thread completing it,
        // so no event sent afterwards can slip into this checkpoint.
        let result = result.with_completion_hook(move |c, outcome| {
            if outcome.is_ok() {
                let _order = lock(&shared.order);
                let mut st = lock(&shared.state);
                if let Err(e) = st.valve.coordinator_checkpoint_taken(c) {
                    st.close_error = Some(e.to_string());
                }
            }
            shared.ready.notify_waiters();
        });
        h.coordinator
            .checkpoint_coordinator(id, result)
            .await
            .map_err(|e| format!("coordinator of '{name}' failed to checkpoint: {e}"))?;
        let (node, shared) = (h.node, h.shared.clone());
        Ok(Box::pin(async move {
            let state = future.await.map_err(|d| {
                format!(
                    "coordinator of '{name}' declined checkpoint {id}: {}",
                    d.reason
                )
            })?;
            loop {
                let notified = shared.ready.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                {
                    let mut st = lock(&shared.state);
                    if let Some(e) = st.close_error.take() {
                        return Err(format!("coordinator of '{name}': {e}"));
                    }
                    match st.valve.readiness(id) {
                        Some(Readiness::Ready) => return Ok((node, state)),
                        Some(Readiness::Failed) => {
                            return Err(format!(
                                "coordinator of '{name}': an event it sent before its snapshot \
                                 of checkpoint {id} was lost"
                            ));
                        }
                        Some(Readiness::AwaitingAcks { .. }) => {}
                        None => {
                            return Err(format!(
                                "coordinator of '{name}': checkpoint {id} is no longer pending"
                            ));
                        }
                    }
                }
                notified.await;
            }
        }))
    }

    /// Task running (operator, subtask) of `attempt` took barrier `id`: release held events.
    pub(crate) fn barrier_taken(
        &self,
        node: NodeId,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        id: CheckpointId,
    ) {
        if let Some(h) = self.holders.iter().find(|h| h.node == node) {
            let _order = lock(&h.shared.order);
            let released = lock(&h.shared.state)
                .valve
                .barrier_taken(SubtaskAttempt::new(subtask, attempt), id);
            if let Ok(released) = released {
                h.shared.release(released);
            }
        }
    }

    /// Checkpoint `id` completed.
    pub(crate) async fn checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), JobError> {
        for h in &mut self.holders {
            {
                let _order = lock(&h.shared.order);
                let released = lock(&h.shared.state)
                    .valve
                    .checkpoint_complete(id)
                    .unwrap_or_default();
                h.shared.release(released);
            }
            h.coordinator
                .notify_checkpoint_complete(id)
                .await
                .map_err(|e| {
                    coordinator_error(h.node, &h.name, "take a checkpoint notification", e)
                })?;
        }
        Ok(())
    }

    /// Checkpoint `id` was aborted.
    pub(crate) async fn checkpoint_aborted(&mut self, id: CheckpointId) -> Result<(), JobError> {
        for h in &mut self.holders {
            {
                let _order = lock(&h.shared.order);
                let released = lock(&h.shared.state)
                    .valve
                    .checkpoint_aborted(id)
                    .unwrap_or_default();
                h.shared.release(released);
            }
            h.coordinator
                .notify_checkpoint_aborted(id)
                .await
                .map_err(|e| coordinator_error(h.node, &h.name, "take an abort notification", e))?;
        }
        Ok(())
    }

    /// The failure to fail over with if an event was lost while its target ran.
    pub(crate) fn lost_event(&self) -> Option<JobError> {
        self.holders.iter().find_map(|h| {
            let target = lock(&h.shared.state).lost.drain(..).next()?;
            Some(coordinator_error(
                h.node,
                &h.name,
                "deliver an operator event",
                format!(
                    "the event to {target} was lost while the task ran; failing over to stay \
                     consistent"
                ),
            ))
        })
    }

    /// Every task failed or was cancelled (global failover): tell the coordinators each attempt
    /// failed, then reset them to checkpoint `restore` (recreating them).
    pub(crate) async fn global_failover(
        &mut self,
        reason: &str,
        restore: Option<(CheckpointId, &BTreeMap<NodeId, Vec<u8>>)>,
    ) -> Result<(), JobError> {
        for h in &mut self.holders {
            h.direct.set(None);
            for s in 0..h.parallelism {
                Self::subtask_failed(h, s, reason).await?;
            }
            {
                let _order = lock(&h.shared.order);
                let released = lock(&h.shared.state).valve.reset();
                h.shared.release(released);
            }
            let (id, state) = match restore {
                Some((id, states)) => (id, states.get(&h.node).cloned()),
                None => (sluice_coordinator::NO_CHECKPOINT, None),
            };
            h.coordinator
                .reset_to_checkpoint(id, state)
                .await
                .map_err(|e| coordinator_error(h.node, &h.name, "reset", e))?;
        }
        Ok(())
    }

    /// Subtask `s`'s running attempt (if any) failed or was stopped: its mailbox and the events
    /// the valve held for it go, and the coordinator sees it not ready.
    async fn subtask_failed(h: &mut Holder, s: SubtaskIndex, reason: &str) -> Result<(), JobError> {
        let Some(attempt) = h.attempts[s].take() else {
            return Ok(());
        };
        let target = SubtaskAttempt::new(s, attempt);
        let failed = {
            let mut st = lock(&h.shared.state);
            st.mailboxes.remove(&target);
            st.valve.attempt_failed(target)
        };
        for (id, _) in failed.dropped {
            let ack = lock(&h.shared.state).waiting.remove(&id);
            if let Some(ack) = ack {
                ack.fail(SendError::TaskNotRunning { target });
            }
        }
        h.live.attempt_failed(s, attempt);
        h.coordinator
            .execution_attempt_failed(s, attempt, Some(reason.to_string()))
            .await
            .map_err(|e| coordinator_error(h.node, &h.name, "take a subtask failure", e))
    }

    /// `attempt` of subtask `s` runs, its task reading `mailbox`: the valve and the live
    /// attempts admit it, and the coordinator gets a gateway to it.
    async fn subtask_ready(
        h: &mut Holder,
        s: SubtaskIndex,
        attempt: AttemptNumber,
        mailbox: Option<&mpsc::Sender<TaskControl>>,
    ) -> Result<(), JobError> {
        let target = SubtaskAttempt::new(s, attempt);
        {
            let mut st = lock(&h.shared.state);
            if let Some(tx) = mailbox {
                st.mailboxes.insert(target, tx.clone());
            }
            st.valve.attempt_ready(target);
        }
        h.live.attempt_ready(s, attempt);
        h.attempts[s] = Some(attempt);
        let transport: Arc<dyn EventTransport> = Arc::new(ValveTransport(h.shared.clone()));
        let gateway = SubtaskGateway::new(s, attempt, transport);
        h.coordinator
            .execution_attempt_ready(s, attempt, gateway)
            .await
            .map_err(|e| coordinator_error(h.node, &h.name, "accept a ready subtask", e))
    }

    /// The subtasks in `subtasks` (one failed region's, as (operator, subtask)) were stopped:
    /// their coordinators see each attempt fail, the rest of the job is untouched.
    pub(crate) async fn subtasks_failed(
        &mut self,
        subtasks: &[(NodeId, SubtaskIndex)],
        reason: &str,
    ) -> Result<(), JobError> {
        for h in &mut self.holders {
            for &(node, s) in subtasks {
                if node == h.node && s < h.parallelism {
                    Self::subtask_failed(h, s, reason).await?;
                }
            }
        }
        Ok(())
    }

    /// The subtasks of a failed region run again as `attempt`, restored from checkpoint
    /// `restored` (`NO_CHECKPOINT` when none completed): each coordinator is told the subtask was
    /// reset to that checkpoint (Flink's `subtaskReset`, where a source coordinator takes back the
    /// splits assigned since), then that the new attempt is ready, with a gateway to it.
    /// `mailboxes` holds the region's (operator, subtask) mailboxes.
    pub(crate) async fn subtasks_restored(
        &mut self,
        attempt: AttemptNumber,
        restored: CheckpointId,
        mailboxes: &BTreeMap<(NodeId, SubtaskIndex), mpsc::Sender<TaskControl>>,
    ) -> Result<(), JobError> {
        for h in &mut self.holders {
            for (&(node, s), tx) in mailboxes {
                if node != h.node || s >= h.parallelism {
                    continue;
                }
                h.coordinator
                    .subtask_reset(s, restored)
                    .await
                    .map_err(|e| coordinator_error(h.node, &h.name, "reset a subtask", e))?;
                h.live.subtask_reset(s);
                Self::subtask_ready(h, s, attempt, Some(tx)).await?;
            }
        }
        Ok(())
    }

    /// Closes every coordinator (errors are logged: closing never fails a job).
    pub(crate) async fn close(&mut self) {
        for h in &mut self.holders {
            h.direct.set(None);
            if let Err(e) = h.coordinator.close().await {
                tracing::warn!(operator = %h.name, error = %e, "closing a coordinator failed");
            }
        }
    }
}
