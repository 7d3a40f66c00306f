//! The job master: runs the tasks, drives checkpoints, restarts after failures.
//!
//! One async loop per job. It spawns the tasks of an attempt, then reacts to what happens:
//! reports from tasks (checkpoint acknowledgements, declines, finished input), the checkpoint
//! planner's deadlines, on-demand triggers, persisted checkpoints, task exits and failures, and
//! cancel. It carries out the [`CheckpointPlanner`]'s decisions; the restart strategy decides what
//! a failure leads to. On failure every task of the attempt is aborted and awaited before anything
//! else happens (global failover), so no task of an old attempt keeps running.

use crate::checkpoint::{CheckpointPlanner, Decision};
use crate::error::{JobError, TaskError};
use crate::failover::{FailureHistory, RestartDecision, RestartStrategy};
use crate::graph::StreamGraph;
use crate::job::JobConfig;
use crate::job::checkpointing::{CheckpointRun, CompletedCheckpoint, fingerprint, load_restore};
use crate::job::coordination::{Coordinators, ToCoordinator};
use crate::job::deploy::{DeployedTask, Deployment, MetricsRegistry, RestoreState, deploy};
use crate::job::plan::Plan;
use crate::task::control::{TaskControl, TaskReport, TaskSnapshot};
use sluice_coordinator::CoordinatorFailure;
use sluice_core::{AttemptNumber, NodeId};
use sluice_core::{CheckpointBarrier, CheckpointId};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Everything the master needs to run a job.
pub(crate) struct JobSpec {
    pub(crate) graph: StreamGraph,
    pub(crate) plan: Plan,
    pub(crate) config: JobConfig,
    pub(crate) checkpointing: Option<CheckpointRun>,
    pub(crate) restart: RestartStrategy,
    pub(crate) restore: Option<RestoreState>,
    /// Where to restore from before the first attempt (a checkpoint or storage directory).
    pub(crate) restore_path: Option<std::path::PathBuf>,
}

/// What a successful run reports besides metrics.
#[derive(Clone, Debug, Default)]
pub(crate) struct RunSummary {
    pub(crate) restarts: u32,
    pub(crate) completed_checkpoints: u64,
    pub(crate) last_checkpoint: Option<u64>,
    pub(crate) restored_from: Option<u64>,
}

/// The metrics of the attempt running now, swapped at each restart.
#[derive(Default)]
pub(crate) struct SharedMetrics(Mutex<Arc<MetricsRegistry>>);

impl SharedMetrics {
    pub(crate) fn current(&self) -> Arc<MetricsRegistry> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
    fn set(&self, m: Arc<MetricsRegistry>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = m;
    }
}

enum AttemptEnd {
    Finished,
    Cancelled,
    Failed(JobError),
}

/// Runs the job to its end: success, cancel, or a failure the restart strategy gives up on.
pub(crate) async fn run_job(
    mut spec: JobSpec,
    cancel: CancellationToken,
    mut triggers: mpsc::Receiver<()>,
    metrics: Arc<SharedMetrics>,
) -> Result<RunSummary, JobError> {
    let start = Instant::now();
    let mut summary = RunSummary::default();
    let task_count: usize = spec
        .plan
        .chains
        .iter()
        .map(|c| c.first().map_or(0, |h| spec.plan.parallelism[h.0]))
        .sum();
    let fingerprint = fingerprint(&spec.graph);
    if let Some(path) = &spec.restore_path {
        let restored = load_restore(path, &fingerprint).await?;
        tracing::info!(checkpoint = restored.checkpoint_id, path = %path.display(), "restoring");
        summary.restored_from = Some(restored.checkpoint_id);
        spec.restore = Some(restored);
    }
    let mut stored_max = 0;
    if let Some(c) = &spec.checkpointing {
        let storage_error = |e: crate::storage::StorageError| {
            JobError::InvalidJob(format!(
                "checkpoint storage {} is not usable: {e}",
                c.storage.location()
            ))
        };
        c.storage.initialize().await.map_err(storage_error)?;
        stored_max = c
            .storage
            .completed()
            .await
            .map_err(storage_error)?
            .last()
            .map_or(0, |id| id.0);
        tracing::info!(location = %c.storage.location(), "checkpoints are stored here");
    }
    let mut planner = spec.checkpointing.as_ref().map(|c| {
        let last = spec
            .restore
            .as_ref()
            .map_or(0, |r| r.checkpoint_id)
            .max(stored_max);
        CheckpointPlanner::new(c.settings.clone(), task_count, last)
    });
    let (failure_tx, mut coordinator_failures) = mpsc::channel(16);
    let mut coordinators = Coordinators::create(&spec.graph, &spec.plan, failure_tx)?;
    let restored = spec
        .restore
        .as_ref()
        .map(|r| (r.checkpoint_id, r.coordinators.clone()));
    coordinators
        .start(restored.as_ref().map(|(id, m)| (*id, &**m)))
        .await?;
    let result = run_attempts(
        &mut spec,
        &mut coordinators,
        &mut coordinator_failures,
        planner.as_mut(),
        &mut summary,
        &cancel,
        &mut triggers,
        &metrics,
        start,
    )
    .await;
    coordinators.close().await;
    result.map(|()| summary)
}

/// Runs attempts until the job finishes, is cancelled, or its restart strategy gives up.
#[allow(clippy::too_many_arguments)] // the master's loop state, threaded through once
async fn run_attempts(
    spec: &mut JobSpec,
    coordinators: &mut Coordinators,
    coordinator_failures: &mut mpsc::Receiver<CoordinatorFailure>,
    mut planner: Option<&mut CheckpointPlanner>,
    summary: &mut RunSummary,
    cancel: &CancellationToken,
    triggers: &mut mpsc::Receiver<()>,
    metrics: &SharedMetrics,
    start: Instant,
) -> Result<(), JobError> {
    let mut history = FailureHistory::new();
    let mut attempt = 0u32;
    loop {
        let max_concurrent = spec
            .checkpointing
            .as_ref()
            .map_or(1, |c| c.settings.max_concurrent);
        let deployment = deploy(
            &spec.graph,
            &spec.plan,
            &spec.config,
            attempt,
            spec.restore.as_ref(),
            spec.checkpointing.is_some(),
            max_concurrent,
        )?;
        if let Some(p) = planner.as_mut() {
            p.on_restart(ms_since(start));
        }
        let Deployment {
            tasks,
            metrics: registry,
            controls,
            reports,
            source_tasks,
            node_mailboxes,
            to_coordinators,
        } = deployment;
        metrics.set(Arc::new(registry));
        let end = match coordinators
            .attempt_deployed(attempt, &node_mailboxes)
            .await
        {
            Err(e) => AttemptEnd::Failed(e),
            Ok(()) => {
                Attempt {
                    controls,
                    reports,
                    source_tasks,
                    planner: planner.as_deref_mut(),
                    checkpointing: spec.checkpointing.as_ref(),
                    start,
                    pending: BTreeMap::new(),
                    coordinator_states: BTreeMap::new(),
                    latest: &mut spec.restore,
                    summary: &mut *summary,
                    coordinators: &mut *coordinators,
                    to_coordinators,
                    coordinator_failures: &mut *coordinator_failures,
                    attempt,
                }
                .run(tasks, cancel, triggers)
                .await
            }
        };
        match end {
            AttemptEnd::Finished => return Ok(()),
            AttemptEnd::Cancelled => return Err(JobError::Cancelled),
            AttemptEnd::Failed(err) => {
                let at = start.elapsed();
                match spec.restart.on_failure(&mut history, at) {
                    RestartDecision::GiveUp { attempts } => {
                        return Err(if attempts == 0 && spec.restart.is_none() {
                            err
                        } else {
                            JobError::RestartsExhausted {
                                attempts,
                                last: Box::new(err),
                            }
                        });
                    }
                    RestartDecision::Restart { after } => {
                        tracing::warn!(error = %err, attempt, ?after, "job failed; restarting");
                        summary.restarts += 1;
                        attempt += 1;
                        let restored = spec
                            .restore
                            .as_ref()
                            .map(|r| (r.checkpoint_id, r.coordinators.clone()));
                        coordinators
                            .global_failover(
                                &err.to_string(),
                                restored.as_ref().map(|(id, m)| (*id, &**m)),
                            )
                            .await?;
                        tokio::select! {
                            _ = cancel.cancelled() => return Err(JobError::Cancelled),
                            _ = tokio::time::sleep(after) => {}
                        }
                    }
                }
            }
        }
    }
}

fn ms_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// One attempt: the tasks of one deployment and the checkpoints taken meanwhile.
struct Attempt<'a> {
    controls: Vec<mpsc::Sender<TaskControl>>,
    reports: mpsc::Receiver<TaskReport>,
    source_tasks: Vec<usize>,
    planner: Option<&'a mut CheckpointPlanner>,
    checkpointing: Option<&'a CheckpointRun>,
    start: Instant,
    /// Acknowledged state of pending checkpoints.
    pending: BTreeMap<u64, TaskSnapshot>,
    /// Coordinator states of pending checkpoints.
    coordinator_states: BTreeMap<u64, BTreeMap<NodeId, Vec<u8>>>,
    latest: &'a mut Option<RestoreState>,
    summary: &'a mut RunSummary,
    coordinators: &'a mut Coordinators,
    to_coordinators: mpsc::Receiver<ToCoordinator>,
    coordinator_failures: &'a mut mpsc::Receiver<CoordinatorFailure>,
    attempt: AttemptNumber,
}

impl Attempt<'_> {
    async fn run(
        mut self,
        tasks: Vec<DeployedTask>,
        cancel: &CancellationToken,
        triggers: &mut mpsc::Receiver<()>,
    ) -> AttemptEnd {
        let mut set = JoinSet::new();
        for t in tasks {
            let description = t.description;
            let fut = t.task.run();
            set.spawn(async move {
                let r = fut.await;
                if let Err(e) = &r {
                    tracing::debug!(task = %description, error = ?e, "task failed");
                }
                r
            });
        }
        let mut persisting: JoinSet<(u64, Result<CompletedCheckpoint, String>)> = JoinSet::new();
        loop {
            let deadline = self
                .planner
                .as_ref()
                .and_then(|p| p.next_deadline_ms())
                .map(|ms| self.start + Duration::from_millis(ms));
            let decisions = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    set.abort_all();
                    while set.join_next().await.is_some() {}
                    return AttemptEnd::Cancelled;
                }
                joined = set.join_next() => {
                    let err = match joined {
                        None => {
                            // Every task ended: hand the coordinators what the tasks sent last.
                            while let Ok(event) = self.to_coordinators.try_recv() {
                                if let Err(e) = self.coordinators.event_from_operator(event).await {
                                    return AttemptEnd::Failed(e);
                                }
                            }
                            return AttemptEnd::Finished;
                        }
                        Some(Ok(Ok(()))) => continue,
                        Some(Ok(Err(e))) => e,
                        Some(Err(j)) if j.is_cancelled() => continue,
                        Some(Err(j)) => TaskError::Internal(format!("a task panicked outside user code: {j}")),
                    };
                    return AttemptEnd::Failed(fail_all(set, err).await);
                }
                Some(report) = self.reports.recv() => self.on_report(report),
                Some(event) = self.to_coordinators.recv() => {
                    match self.coordinators.event_from_operator(event).await {
                        Ok(()) => Vec::new(),
                        Err(e) => return AttemptEnd::Failed(abort_all(set, e).await),
                    }
                }
                Some(failure) = self.coordinator_failures.recv() => {
                    let e = JobError::CoordinatorFailed(failure.to_string());
                    return AttemptEnd::Failed(abort_all(set, e).await);
                }
                Some(done) = persisting.join_next(), if !persisting.is_empty() => {
                    let now = ms_since(self.start);
                    match done {
                        Ok((_, Ok(cp))) => {
                            let id = cp.id;
                            *self.latest = Some(cp.restore_state());
                            self.summary.completed_checkpoints += 1;
                            self.summary.last_checkpoint = Some(id);
                            self.planner.as_mut().map(|p| p.on_persisted(id, now)).unwrap_or_default()
                        }
                        Ok((id, Err(reason))) => self
                            .planner
                            .as_mut()
                            .map(|p| p.on_persist_failed(id, &reason, now))
                            .unwrap_or_default(),
                        Err(j) => {
                            set.abort_all();
                            while set.join_next().await.is_some() {}
                            return AttemptEnd::Failed(JobError::Internal(format!(
                                "writing a checkpoint panicked: {j}"
                            )));
                        }
                    }
                }
                Some(()) = triggers.recv() => {
                    let now = ms_since(self.start);
                    self.planner.as_mut().map(|p| { p.request_trigger(); p.on_time(now) }).unwrap_or_default()
                }
                _ = sleep_until(deadline) => {
                    let now = ms_since(self.start);
                    self.planner.as_mut().map(|p| p.on_time(now)).unwrap_or_default()
                }
            };
            let mut queue: std::collections::VecDeque<Decision> = decisions.into();
            while let Some(d) = queue.pop_front() {
                match self.execute(d, &mut persisting).await {
                    Ok(more) => queue.extend(more),
                    Err(e) => return AttemptEnd::Failed(abort_all(set, e).await),
                }
            }
            let lost = self.coordinators.lost_attempts();
            if let Some((node, target)) = lost.first() {
                let e = JobError::CoordinatorFailed(format!(
                    "an operator event from the coordinator of operator {node} to {target} was \
                     lost while the task ran; failing over to stay consistent"
                ));
                return AttemptEnd::Failed(abort_all(set, e).await);
            }
        }
    }

    fn on_report(&mut self, report: TaskReport) -> Vec<Decision> {
        let now = ms_since(self.start);
        let Some(planner) = self.planner.as_mut() else {
            return Vec::new();
        };
        match report {
            TaskReport::Ack {
                task,
                checkpoint,
                states,
            } => {
                for (node, subtask, _) in &states {
                    self.coordinators
                        .barrier_taken(*node, *subtask, self.attempt, checkpoint);
                }
                if planner.pending_ids().contains(&checkpoint) {
                    self.pending.entry(checkpoint).or_default().extend(states);
                }
                planner.on_ack(task, checkpoint)
            }
            TaskReport::Decline {
                task,
                checkpoint,
                reason,
            } => planner.on_decline(task, checkpoint, &reason, now),
            TaskReport::FinishedInput { task } => planner.on_task_finished(task, now),
        }
    }

    /// Carries out one decision; returns the decisions that follow from it.
    async fn execute(
        &mut self,
        decision: Decision,
        persisting: &mut JoinSet<(u64, Result<CompletedCheckpoint, String>)>,
    ) -> Result<Vec<Decision>, JobError> {
        match decision {
            Decision::Trigger { id, timestamp_ms } => {
                // Coordinators first: their snapshot precedes the barriers.
                if !self.coordinators.is_empty() {
                    let timeout = self
                        .checkpointing
                        .map_or(Duration::from_secs(600), |c| c.settings.timeout);
                    let taken = tokio::time::timeout(timeout, self.coordinators.checkpoint(id))
                        .await
                        .unwrap_or_else(|_| {
                            Err(format!(
                                "the coordinators did not complete checkpoint {id} within {timeout:?}"
                            ))
                        });
                    match taken {
                        Ok(states) => {
                            self.coordinator_states.insert(id, states);
                        }
                        Err(reason) => {
                            let now = ms_since(self.start);
                            return Ok(self
                                .planner
                                .as_mut()
                                .map(|p| p.on_coordinator_declined(id, &reason, now))
                                .unwrap_or_default());
                        }
                    }
                }
                let barrier = CheckpointBarrier {
                    id: CheckpointId(id),
                    timestamp_ms,
                };
                for &t in &self.source_tasks {
                    let _ = self.controls[t]
                        .send(TaskControl::TriggerCheckpoint(barrier))
                        .await;
                }
            }
            Decision::TriggerFinishedTask { id, task } => {
                let barrier = CheckpointBarrier {
                    id: CheckpointId(id),
                    timestamp_ms: ms_since(self.start),
                };
                if let Some(c) = self.controls.get(task) {
                    let _ = c.send(TaskControl::TriggerCheckpoint(barrier)).await;
                }
            }
            Decision::Persist { id } => {
                let states = self.pending.remove(&id).unwrap_or_default();
                let mut operators: BTreeMap<_, Vec<(usize, _)>> = BTreeMap::new();
                for (node, subtask, state) in states {
                    operators.entry(node).or_default().push((subtask, state));
                }
                let operators = operators
                    .into_iter()
                    .map(|(node, mut v)| {
                        v.sort_by_key(|(s, _)| *s);
                        (node, v.into_iter().map(|(_, st)| st).collect())
                    })
                    .collect();
                let cp = CompletedCheckpoint {
                    id,
                    timestamp_ms: ms_since(self.start),
                    operators: Arc::new(operators),
                    coordinators: Arc::new(self.coordinator_states.remove(&id).unwrap_or_default()),
                };
                let persistence = self.checkpointing.map(|c| c.persistence.clone());
                persisting.spawn(async move {
                    let Some(p) = persistence else {
                        return (id, Ok(cp));
                    };
                    let written = p.persist(cp.clone()).await;
                    (id, written.map(|()| cp))
                });
            }
            Decision::NotifyComplete { id } => {
                self.coordinators.checkpoint_complete(id).await?;
                send_all(&self.controls, || TaskControl::NotifyComplete(id)).await;
            }
            Decision::Abort { id, reason } => {
                tracing::info!(checkpoint = id, %reason, "checkpoint aborted");
                self.pending.remove(&id);
                self.coordinator_states.remove(&id);
                self.coordinators.checkpoint_aborted(id).await?;
                send_all(&self.controls, || TaskControl::NotifyAborted(id)).await;
                if let Some(c) = self.checkpointing {
                    let p = c.persistence.clone();
                    tokio::spawn(async move { p.discard(id).await });
                }
            }
            Decision::Finish => send_all(&self.controls, || TaskControl::Finish).await,
        }
        Ok(Vec::new())
    }
}

/// Sends one message to every task. A task that ended cannot receive; its exit is reported
/// through the join set.
async fn send_all(controls: &[mpsc::Sender<TaskControl>], msg: impl Fn() -> TaskControl) {
    for c in controls {
        let _ = c.send(msg()).await;
    }
}

/// Aborts every task because of `cause` (not a task's failure) and waits until all stopped.
async fn abort_all(mut set: JoinSet<Result<(), TaskError>>, cause: JobError) -> JobError {
    set.abort_all();
    while set.join_next().await.is_some() {}
    cause
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Aborts every task after `first` failed and reports the root cause.
///
/// When several tasks fail, a root cause (user code) is reported in preference to the failures
/// it caused (peers that lost a channel).
async fn fail_all(mut set: JoinSet<Result<(), TaskError>>, first: TaskError) -> JobError {
    set.abort_all();
    let mut chosen = first;
    while let Some(joined) = set.join_next().await {
        if let Ok(Err(e)) = joined
            && !chosen.is_root_cause()
            && e.is_root_cause()
        {
            chosen = e;
        }
    }
    chosen.into_job_error()
}
