//! The job master: runs attempts of a job, carrying out what the pure [`AttemptMachine`] decides.
//!
//! One async loop per job. For each attempt it deploys the tasks, then only waits on its
//! channels (task exits, task reports, coordinator failures and events, coordinator snapshots,
//! checkpoint writes, requests from the job handle, the machine's next deadline, cancel), turns
//! what arrives into a [`Fact`], and carries out the [`Action`]s the machine answers with. Every
//! decision (when to trigger, when a checkpoint completes, what a failure means, when the job is
//! finished) is the machine's; this file is the I/O at its edge. Between attempts the restart
//! strategy decides whether to restart; every task of a failed attempt is stopped and awaited
//! first (global failover), so no task of an old attempt keeps running.

use crate::checkpoint::persistence::{CheckpointRun, load_restore};
use crate::checkpoint::{CheckpointPlanner, CompletedCheckpoint};
use crate::error::{JobError, TaskError};
use crate::failover::{FailureHistory, RestartDecision, RestartStrategy};
use crate::graph::StreamGraph;
use crate::job::JobConfig;
use crate::job::attempt::{
    Action, AttemptEnd, AttemptMachine, CheckpointCounts, Fact, JobCheckpoints, Layout, RequestId,
    RequestKind,
};
use crate::job::coordination::{Coordinators, reported_failure};
use crate::job::deploy::{Deployment, MetricsRegistry, deploy};
use crate::job::plan::Plan;
use crate::metrics::JobMetrics;
use crate::operator::to_coordinator::ToCoordinator;
use crate::task::control::{TaskControl, TaskReport};
use futures::future::BoxFuture;
use sluice_coordinator::CoordinatorFailure;
use sluice_core::sync::lock;
use sluice_core::{AttemptNumber, CheckpointId, NodeId};
use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
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
    /// Where to restore from before the first attempt (a checkpoint or storage directory).
    pub(crate) restore_path: Option<std::path::PathBuf>,
}

/// What a successful run reports besides metrics.
#[derive(Clone, Debug, Default)]
pub(crate) struct RunSummary {
    pub(crate) restarts: u32,
    pub(crate) checkpoints: CheckpointCounts,
    pub(crate) last_checkpoint: Option<CheckpointId>,
    pub(crate) restored_from: Option<CheckpointId>,
    pub(crate) stopped_with_savepoint: Option<CheckpointId>,
}

/// A request from the job handle.
pub(crate) struct HandleRequest {
    pub(crate) kind: RequestKind,
    /// Told the checkpoint's id once it is triggered.
    pub(crate) triggered: oneshot::Sender<CheckpointId>,
    /// Told how the checkpoint ended.
    pub(crate) done: oneshot::Sender<Result<CheckpointId, String>>,
}

/// How many requests the job handle may have waiting for the master.
pub(crate) const REQUEST_CAPACITY: usize = 16;

/// The metrics of the job: the attempts that ended, and the one running now.
#[derive(Default)]
pub(crate) struct SharedMetrics {
    current: Mutex<Arc<MetricsRegistry>>,
    earlier: Mutex<JobMetrics>,
}

impl SharedMetrics {
    /// The whole job so far: counters summed over every attempt.
    pub(crate) fn job(&self) -> JobMetrics {
        let mut all = lock(&self.earlier).clone();
        all.accumulate(&self.attempt());
        all
    }

    /// The attempt running now (or the last one).
    pub(crate) fn attempt(&self) -> JobMetrics {
        lock(&self.current).snapshot()
    }

    fn next_attempt(&self, m: Arc<MetricsRegistry>) {
        let ended = std::mem::replace(&mut *lock(&self.current), m);
        lock(&self.earlier).accumulate(&ended.snapshot());
    }
}

/// The channels the master reads besides those of an attempt.
pub(crate) struct MasterInputs {
    pub(crate) cancel: CancellationToken,
    pub(crate) requests: mpsc::Receiver<HandleRequest>,
    pub(crate) metrics: Arc<SharedMetrics>,
}

/// Runs the job to its end: success, stop, cancel, or a failure the restart strategy gives up on.
pub(crate) async fn run_job(
    spec: JobSpec,
    mut inputs: MasterInputs,
) -> Result<RunSummary, JobError> {
    let start = Instant::now();
    let mut summary = RunSummary::default();
    let mut restore = None;
    if let Some(path) = &spec.restore_path {
        let restored = load_restore(path, &spec.graph.fingerprint()).await?;
        tracing::info!(checkpoint = %restored.id, path = %path.display(), "restoring");
        summary.restored_from = Some(restored.id);
        restore = Some(restored);
    }
    let mut checkpoints = match &spec.checkpointing {
        Some(c) => Some(start_checkpointing(c, &spec.plan, restore.clone()).await?),
        None => None,
    };
    let regions = spec.plan.regions(&spec.graph);
    tracing::info!(
        tasks = spec.plan.task_count(),
        regions = regions.len(),
        largest_region = (0..regions.len())
            .map(|r| regions.tasks(r).len())
            .max()
            .unwrap_or(0),
        "job planned; a failure restarts every task (global failover)"
    );
    let (failure_tx, mut coordinator_failures) = mpsc::channel(16);
    let mut coordinators = Coordinators::create(&spec.graph, &spec.plan, failure_tx)?;
    let restored = restore.as_ref().map(|r| (r.id, r.coordinators.clone()));
    coordinators
        .start(restored.as_ref().map(|(id, m)| (*id, &**m)))
        .await?;
    let mut history = FailureHistory::new();
    let mut attempt: AttemptNumber = 0;
    let mut requests = Requests::default();
    let result = loop {
        let ctx = AttemptContext {
            spec: &spec,
            attempt,
            start,
            restore: restore_point(checkpoints.as_ref(), restore.as_ref()),
        };
        let (end, back) = ctx
            .run(
                checkpoints.take(),
                &mut coordinators,
                &mut coordinator_failures,
                &mut inputs,
                &mut requests,
            )
            .await;
        checkpoints = back;
        if let Some(c) = &checkpoints {
            summary.checkpoints = c.counts;
            summary.last_checkpoint = c.latest.as_ref().map(|l| l.id);
        }
        let err = match end {
            AttemptEnd::Finished => break Ok(()),
            AttemptEnd::Stopped(id) => {
                summary.stopped_with_savepoint = Some(id);
                break Ok(());
            }
            AttemptEnd::Cancelled => break Err(JobError::Cancelled),
            AttemptEnd::TaskFailed(e) => e.into_job_error(),
            AttemptEnd::Failed(e) => e,
        };
        match spec.restart.on_failure(&mut history, start.elapsed()) {
            RestartDecision::GiveUp { attempts } => {
                break Err(if attempts == 0 && spec.restart.is_none() {
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
                let point = restore_point(checkpoints.as_ref(), restore.as_ref());
                let restored = point.map(|r| (r.id, r.coordinators));
                if let Err(e) = coordinators
                    .global_failover(
                        &err.to_string(),
                        restored.as_ref().map(|(id, m)| (*id, &**m)),
                    )
                    .await
                {
                    break Err(e);
                }
                tokio::select! {
                    _ = inputs.cancel.cancelled() => break Err(JobError::Cancelled),
                    _ = tokio::time::sleep(after) => {}
                }
            }
        }
    };
    coordinators.close().await;
    result.map(|()| summary)
}

/// Where an attempt restores from: the latest completed checkpoint, or else the one the job was
/// started from.
fn restore_point(
    checkpoints: Option<&JobCheckpoints>,
    restore: Option<&CompletedCheckpoint>,
) -> Option<CompletedCheckpoint> {
    checkpoints
        .and_then(|c| c.latest.clone())
        .or_else(|| restore.cloned())
}

/// Prepares checkpoint storage and the planner; ids continue after every stored checkpoint.
async fn start_checkpointing(
    c: &CheckpointRun,
    plan: &Plan,
    restore: Option<CompletedCheckpoint>,
) -> Result<JobCheckpoints, JobError> {
    let storage_error = |e: crate::storage::StorageError| {
        JobError::InvalidJob(format!(
            "checkpoint storage {} is not usable: {e}",
            c.storage.location()
        ))
    };
    c.storage.initialize().await.map_err(storage_error)?;
    let stored_max = c
        .storage
        .completed()
        .await
        .map_err(storage_error)?
        .last()
        .copied()
        .unwrap_or_default();
    tracing::info!(location = %c.storage.location(), "checkpoints are stored here");
    let last = restore
        .as_ref()
        .map_or(stored_max, |r| r.id.max(stored_max));
    let planner = CheckpointPlanner::new(c.settings.clone(), plan.task_count(), last);
    Ok(JobCheckpoints::new(planner, restore))
}

/// A request's answers still owed: its checkpoint's id once triggered, then its outcome.
struct OpenRequest {
    triggered: Option<oneshot::Sender<CheckpointId>>,
    done: oneshot::Sender<Result<CheckpointId, String>>,
}

/// Requests from the job handle, by id, until they are answered.
#[derive(Default)]
struct Requests {
    next: u64,
    open: BTreeMap<RequestId, OpenRequest>,
    /// Requests not triggered when an attempt ended, for the next attempt.
    carried: Vec<(RequestId, RequestKind)>,
}

impl Requests {
    fn add(&mut self, r: HandleRequest) -> Fact {
        let id = RequestId(self.next);
        self.next += 1;
        let open = OpenRequest {
            triggered: Some(r.triggered),
            done: r.done,
        };
        self.open.insert(id, open);
        Fact::Requested(id, r.kind)
    }

    fn triggered(&mut self, id: RequestId, checkpoint: CheckpointId) {
        if let Some(tx) = self.open.get_mut(&id).and_then(|r| r.triggered.take()) {
            let _ = tx.send(checkpoint);
        }
    }

    fn done(&mut self, id: RequestId, result: Result<CheckpointId, String>) {
        if let Some(r) = self.open.remove(&id) {
            let _ = r.done.send(result);
        }
    }
}

/// One attempt: what it runs and where it restores from.
struct AttemptContext<'a> {
    spec: &'a JobSpec,
    attempt: AttemptNumber,
    start: Instant,
    restore: Option<CompletedCheckpoint>,
}

/// Every coordinator's state at one checkpoint.
type CoordinatorStates = BTreeMap<NodeId, Vec<u8>>;

/// The I/O of one running attempt.
struct AttemptIo<'a> {
    attempt: AttemptNumber,
    start: Instant,
    checkpointing: Option<&'a CheckpointRun>,
    controls: Vec<mpsc::Sender<TaskControl>>,
    source_tasks: Vec<usize>,
    coordinators: &'a mut Coordinators,
    coordinator_failures: &'a mut mpsc::Receiver<CoordinatorFailure>,
    to_coordinators: mpsc::Receiver<ToCoordinator>,
    snapshots: JoinSet<(CheckpointId, Result<CoordinatorStates, String>)>,
    persisting: JoinSet<(CheckpointId, Result<(), String>)>,
    requests: &'a mut Requests,
}

impl AttemptContext<'_> {
    /// Runs the attempt to its end; returns how it ended and what checkpointing keeps.
    async fn run(
        self,
        checkpoints: Option<JobCheckpoints>,
        coordinators: &mut Coordinators,
        coordinator_failures: &mut mpsc::Receiver<CoordinatorFailure>,
        inputs: &mut MasterInputs,
        requests: &mut Requests,
    ) -> (AttemptEnd, Option<JobCheckpoints>) {
        let spec = self.spec;
        let deployment = deploy(
            &spec.graph,
            &spec.plan,
            &spec.config,
            self.attempt,
            self.restore.as_ref(),
            spec.checkpointing
                .as_ref()
                .map(|c| c.settings.max_concurrent),
            &coordinators.direct_slots(),
        );
        let Deployment {
            tasks,
            metrics,
            controls,
            mut reports,
            source_tasks,
            node_mailboxes,
            to_coordinators,
        } = match deployment {
            Ok(d) => d,
            Err(e) => return (AttemptEnd::Failed(e), checkpoints),
        };
        inputs.metrics.next_attempt(Arc::new(metrics));
        if let Err(e) = coordinators
            .attempt_deployed(self.attempt, &node_mailboxes)
            .await
        {
            return (AttemptEnd::Failed(e), checkpoints);
        }
        let layout = Layout {
            tasks: tasks.len(),
            has_coordinators: !coordinators.is_empty(),
        };
        let (mut machine, first) = AttemptMachine::start(layout, checkpoints, ms_since(self.start));
        machine.add_waiting_requests(std::mem::take(&mut requests.carried));
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
        let mut io = AttemptIo {
            attempt: self.attempt,
            start: self.start,
            checkpointing: spec.checkpointing.as_ref(),
            controls,
            source_tasks,
            coordinators,
            coordinator_failures,
            to_coordinators,
            snapshots: JoinSet::new(),
            persisting: JoinSet::new(),
            requests,
        };
        let mut actions: VecDeque<Action> = first.into();
        let end = 'attempt: loop {
            while let Some(action) = actions.pop_front() {
                if let Action::End(end) = action {
                    break 'attempt end;
                }
                for fact in io.carry_out(action).await {
                    actions.extend(machine.on(fact, ms_since(self.start)));
                }
            }
            if let Some(e) = io.coordinators.lost_event() {
                actions.extend(machine.on(Fact::EventLost(e), ms_since(self.start)));
                continue;
            }
            let fact = io
                .next_fact(&mut set, &mut reports, inputs, machine.next_deadline_ms())
                .await;
            actions.extend(machine.on(fact, ms_since(self.start)));
        };
        io.requests.carried = machine.take_waiting_requests();
        let end = match end {
            AttemptEnd::TaskFailed(e) => AttemptEnd::Failed(fail_all(set, e).await),
            other => {
                set.abort_all();
                while set.join_next().await.is_some() {}
                other
            }
        };
        io.snapshots.abort_all();
        io.persisting.abort_all();
        (end, machine.into_checkpoints())
    }
}

fn ms_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl AttemptIo<'_> {
    /// Waits for the next thing that happens and turns it into a fact.
    async fn next_fact(
        &mut self,
        set: &mut JoinSet<Result<(), TaskError>>,
        reports: &mut mpsc::Receiver<TaskReport>,
        inputs: &mut MasterInputs,
        deadline_ms: Option<u64>,
    ) -> Fact {
        loop {
            let deadline = deadline_ms.map(|ms| self.start + Duration::from_millis(ms));
            tokio::select! {
                biased;
                _ = inputs.cancel.cancelled() => return Fact::Cancel,
                Some(f) = self.coordinator_failures.recv() => {
                    return Fact::CoordinatorFailed(reported_failure(&f));
                }
                Some(report) = reports.recv() => return Fact::Report(report),
                Some(event) = self.to_coordinators.recv() => {
                    if let Err(e) = self.coordinators.event_from_operator(event).await {
                        return Fact::CoordinatorFailed(e);
                    }
                }
                Some(joined) = set.join_next() => {
                    return match joined {
                        Ok(Ok(())) => Fact::TaskExited,
                        Ok(Err(e)) => Fact::TaskFailed(e),
                        Err(j) if j.is_cancelled() => Fact::TaskExited,
                        Err(j) => Fact::TaskFailed(TaskError::Internal(format!(
                            "a task panicked outside user code: {j}"
                        ))),
                    };
                }
                Some(done) = self.snapshots.join_next() => {
                    return match done {
                        Ok((id, Ok(states))) => Fact::CoordinatorsSnapshotted { id, states },
                        Ok((id, Err(reason))) => Fact::CoordinatorSnapshotFailed { id, reason },
                        Err(j) => Fact::CoordinatorFailed(JobError::Internal(format!(
                            "waiting for a coordinator snapshot panicked: {j}"
                        ))),
                    };
                }
                Some(done) = self.persisting.join_next() => {
                    return match done {
                        Ok((id, Ok(()))) => Fact::Persisted(id),
                        Ok((id, Err(reason))) => Fact::PersistFailed { id, reason },
                        Err(j) => Fact::CoordinatorFailed(JobError::Internal(format!(
                            "writing a checkpoint panicked: {j}"
                        ))),
                    };
                }
                Some(r) = inputs.requests.recv() => return self.requests.add(r),
                _ = sleep_until(deadline) => return Fact::Time,
            }
        }
    }

    /// Carries out one action; returns the facts it produced at once.
    async fn carry_out(&mut self, action: Action) -> Vec<Fact> {
        match action {
            Action::SnapshotCoordinators(id) => {
                let part = self.coordinators.start_checkpoint(id).await;
                self.snapshots.spawn(async move { (id, part.await) });
            }
            Action::TriggerSources(barrier) => {
                for &t in &self.source_tasks {
                    let _ = self.controls[t]
                        .send(TaskControl::TriggerCheckpoint(barrier))
                        .await;
                }
            }
            Action::TriggerTask(task, barrier) => {
                if let Some(c) = self.controls.get(task) {
                    let _ = c.send(TaskControl::TriggerCheckpoint(barrier)).await;
                }
            }
            Action::ReleaseHeldEvents { node, subtask, id } => {
                self.coordinators
                    .barrier_taken(node, subtask, self.attempt, id);
            }
            Action::Persist(cp) => {
                let persistence = self.checkpointing.map(|c| c.persistence.clone());
                let id = cp.id;
                self.persisting.spawn(async move {
                    match persistence {
                        Some(p) => (id, p.persist(cp).await),
                        None => (id, Ok(())),
                    }
                });
            }
            Action::NotifyComplete(id) => {
                tracing::debug!(checkpoint = %id, "checkpoint completed");
                if let Err(e) = self.coordinators.checkpoint_complete(id).await {
                    return vec![Fact::CoordinatorFailed(e)];
                }
                send_all(&self.controls, || TaskControl::NotifyComplete(id)).await;
            }
            Action::NotifyAborted(id, reason) => {
                tracing::info!(checkpoint = %id, %reason, "checkpoint aborted");
                if let Err(e) = self.coordinators.checkpoint_aborted(id).await {
                    return vec![Fact::CoordinatorFailed(e)];
                }
                send_all(&self.controls, || TaskControl::NotifyAborted(id)).await;
                if let Some(c) = self.checkpointing {
                    let p = c.persistence.clone();
                    tokio::spawn(async move { p.discard(id).await });
                }
            }
            Action::RequestTriggered(r, id) => self.requests.triggered(r, id),
            Action::RequestDone(r, result) => self.requests.done(r, result),
            Action::FinishTasks => send_all(&self.controls, || TaskControl::Finish).await,
            Action::FlushCoordinators => return vec![self.flush_coordinators().await],
            Action::End(_) => {}
        }
        Vec::new()
    }

    /// Every task ended: hands the coordinators what the tasks sent last, waits until they
    /// handled it all, and reports any failure they had meanwhile.
    async fn flush_coordinators(&mut self) -> Fact {
        while let Ok(event) = self.to_coordinators.try_recv() {
            if let Err(e) = self.coordinators.event_from_operator(event).await {
                return Fact::CoordinatorFailed(e);
            }
        }
        let flushed: BoxFuture<'_, Result<(), JobError>> = Box::pin(self.coordinators.flush());
        let flushed = tokio::select! {
            biased;
            Some(f) = self.coordinator_failures.recv() => Err(reported_failure(&f)),
            r = flushed => r,
        };
        // A failure while handling an event is reported before the flush that follows it ends.
        match flushed.and_then(|()| match self.coordinator_failures.try_recv() {
            Ok(f) => Err(reported_failure(&f)),
            Err(_) => Ok(()),
        }) {
            Ok(()) => Fact::CoordinatorsFlushed,
            Err(e) => Fact::CoordinatorFailed(e),
        }
    }
}

/// Sends one message to every task. A task that ended cannot receive; its exit is reported
/// through the join set.
async fn send_all(controls: &[mpsc::Sender<TaskControl>], msg: impl Fn() -> TaskControl) {
    for c in controls {
        let _ = c.send(msg()).await;
    }
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
