//! The job master's side of operator coordinators (Flink's `OperatorCoordinatorHolder`).
//!
//! One [`Holder`] per operator that declared a coordinator. It creates the coordinator (wrapped
//! so that a global failover recreates it), starts it, gives it one gateway per subtask attempt,
//! routes events both ways, and aligns coordinator events with checkpoints through
//! `sluice_coordinator`'s [`EventDelivery`] (the delivery protocol around the pure valve; this
//! module only wires it to the tasks' mailboxes and the checkpoint steps):
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
use sluice_coordinator::{
    ChannelMailbox, CheckpointResult, CoordinatorContext, CoordinatorFailure, CoordinatorProvider,
    EventDelivery, EventTransport, JobFailureHook, LiveAttempts, OperatorCoordinator,
    RecreateOnResetCoordinator, SubtaskAttempt, SubtaskGateway,
};
use sluice_core::{AttemptNumber, CheckpointId, NodeId, SubtaskIndex};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::mpsc;

/// A subtask attempt's task mailbox, as the delivery protocol sees it.
type TaskMailbox = ChannelMailbox<TaskControl>;

/// The mailbox of the task running (operator `node`, some subtask): events go in as
/// [`TaskControl::OperatorEvent`] for the chain's operator `node`.
fn task_mailbox(node: NodeId, tx: &mpsc::Sender<TaskControl>) -> TaskMailbox {
    ChannelMailbox::new(tx.clone(), move |event| TaskControl::OperatorEvent {
        target: node,
        event,
    })
}

/// One operator's coordinator and its valve.
struct Holder {
    node: NodeId,
    name: String,
    parallelism: usize,
    coordinator: RecreateOnResetCoordinator,
    delivery: Arc<EventDelivery<TaskMailbox>>,
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
                delivery: Arc::new(EventDelivery::new()),
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
        h.delivery
            .trigger(id)
            .map_err(|e| format!("coordinator of '{name}': {e}"))?;
        let delivery = h.delivery.clone();
        let (result, future) = CheckpointResult::new(id);
        // The valve closes the instant the snapshot completes, on the thread completing it,
        // so no event sent afterwards can slip into this checkpoint.
        let result = result.with_completion_hook(move |c, outcome| {
            delivery.coordinator_checkpoint_done(c, outcome.is_ok());
        });
        h.coordinator
            .checkpoint_coordinator(id, result)
            .await
            .map_err(|e| format!("coordinator of '{name}' failed to checkpoint: {e}"))?;
        let (node, delivery) = (h.node, h.delivery.clone());
        Ok(Box::pin(async move {
            let state = future.await.map_err(|d| {
                format!(
                    "coordinator of '{name}' declined checkpoint {id}: {}",
                    d.reason
                )
            })?;
            delivery
                .ready(id)
                .await
                .map_err(|e| format!("coordinator of '{name}': {e}"))?;
            Ok((node, state))
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
            h.delivery
                .barrier_taken(SubtaskAttempt::new(subtask, attempt), id);
        }
    }

    /// Checkpoint `id` completed.
    pub(crate) async fn checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), JobError> {
        for h in &mut self.holders {
            h.delivery.checkpoint_complete(id);
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
            h.delivery.checkpoint_aborted(id);
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
            let target = h.delivery.take_lost()?;
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
            h.delivery.reset();
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
        h.delivery.attempt_failed(SubtaskAttempt::new(s, attempt));
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
        h.delivery
            .attempt_ready(target, mailbox.map(|tx| task_mailbox(h.node, tx)));
        h.live.attempt_ready(s, attempt);
        h.attempts[s] = Some(attempt);
        let transport: Arc<dyn EventTransport> = h.delivery.clone();
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
