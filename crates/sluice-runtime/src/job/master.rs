//! The job master: runs attempts of a job, carrying out what the pure [`AttemptMachine`] decides.
//!
//! One async loop per job. For each attempt it deploys the tasks, then only waits on its
//! channels (task exits, task reports, coordinator failures and events, coordinator snapshots,
//! checkpoint writes, requests from the job handle, the machine's next deadline, cancel), turns
//! what arrives into a [`Fact`], and carries out the [`Action`]s the machine answers with. Every
//! decision (when to trigger, when a checkpoint completes, what a failure means, when the job is
//! finished) is the machine's; this file is the I/O at its edge.
//!
//! Failover comes in two sizes. When the machine asks to restart one pipelined region (region
//! failover, the default), the master stops that region's tasks and waits until each has
//! stopped, asks the restart strategy, and after its delay deploys the region alone, restored
//! from the latest completed checkpoint, as a new attempt of those tasks; the coordinators see
//! the old attempts fail, the subtasks reset, and the new attempts ready. The rest of the job
//! keeps running throughout. When an attempt ends in failure (full failover), every task is
//! stopped and awaited before the restart strategy decides, so no task of an old attempt keeps
//! running, and the whole job is deployed again. Attempt numbers never repeat: each deployment,
//! of a region or of the whole job, takes the next one, and reports and exits of stopped
//! attempts are dropped.

use crate::checkpoint::persistence::{CheckpointRun, load_latest, load_restore};
use crate::checkpoint::{CheckpointPlanner, CompletedCheckpoint};
use crate::error::{JobError, TaskError};
use crate::failover::{
    FailoverStrategy, FailureHistory, Regions, RestartDecision, RestartStrategy,
};
use crate::graph::StreamGraph;
use crate::job::attempt::{
    Action, AttemptEnd, AttemptMachine, CheckpointCounts, Fact, JobCheckpoints, Layout, RequestId,
    RequestKind,
};
use crate::job::coordination::{Coordinators, reported_failure};
use crate::job::deploy::{
    DeployInputs, DeployedTask, Deployer, Deployment, MasterChannels, MetricsRegistry, Scope,
    deploy,
};
use crate::job::plan::Plan;
use crate::job::status::TaskState;
use crate::job::{JobConfig, JobRecorder};
use crate::metrics::JobMetrics;
use crate::operator::to_coordinator::{DirectSlot, ToCoordinator};
use crate::task::control::{AttemptReport, TaskControl};
use futures::future::BoxFuture;
use sluice_coordinator::CoordinatorFailure;
use sluice_core::sync::lock;
use sluice_core::{AttemptNumber, CheckpointId, NodeId};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Everything the master needs to run a job.
pub(crate) struct JobSpec {
    pub(crate) graph: StreamGraph,
    pub(crate) plan: Plan,
    pub(crate) config: JobConfig,
    pub(crate) checkpointing: Option<CheckpointRun>,
    pub(crate) restart: RestartStrategy,
    /// What a task failure restarts.
    pub(crate) failover: FailoverStrategy,
    /// Where to restore from before the first attempt (a checkpoint or storage directory).
    pub(crate) restore_path: Option<std::path::PathBuf>,
    /// Whether to restore the newest valid checkpoint of the job's own checkpoint storage, if
    /// it holds one, before the first attempt.
    pub(crate) resume_latest: bool,
    /// What builds the tasks: here, or stand-ins for tasks on task managers in cluster mode.
    pub(crate) deployer: Arc<dyn Deployer>,
}

impl JobSpec {
    /// Deploys the tasks in `scope` through the job's deployer: here, or on task managers in
    /// cluster mode.
    fn deploy(
        &self,
        inputs: &DeployInputs<'_>,
        scope: Scope<'_>,
        attempt: AttemptNumber,
        restore: Option<&CompletedCheckpoint>,
    ) -> Result<Deployment, JobError> {
        deploy(self.deployer.as_ref(), inputs, scope, attempt, restore)
    }
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
    /// The live view, recorded as things happen.
    pub(crate) recorder: JobRecorder,
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
        inputs.recorder.restored_from(restored.id);
        restore = Some(restored);
    }
    if let (true, Some(run)) = (spec.resume_latest, &spec.checkpointing) {
        let location = run.storage.location();
        match load_latest(&*run.storage, &spec.graph.fingerprint()).await? {
            Some(restored) => {
                tracing::info!(checkpoint = %restored.id, %location, "resuming from the latest checkpoint");
                summary.restored_from = Some(restored.id);
                restore = Some(restored);
            }
            None => tracing::info!(%location, "no checkpoint to resume from: starting afresh"),
        }
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
        failover = %spec.failover,
        "job planned"
    );
    let (failure_tx, mut coordinator_failures) = mpsc::channel(16);
    let mut coordinators = Coordinators::create(&spec.graph, &spec.plan, failure_tx)?;
    let restored = restore.as_ref().map(|r| (r.id, r.coordinators.clone()));
    coordinators
        .start(restored.as_ref().map(|(id, m)| (*id, &**m)))
        .await?;
    let mut failover = FailoverState {
        history: FailureHistory::new(),
        next_attempt: 1,
        restarts: 0,
        recorder: inputs.recorder.clone(),
    };
    let mut attempt: AttemptNumber = 0;
    let mut requests = Requests::default();
    let result = loop {
        let ctx = AttemptContext {
            spec: &spec,
            regions: &regions,
            attempt,
            start,
            restore: restore_point(checkpoints.as_ref(), restore.as_ref()),
            initial: restore.as_ref(),
        };
        let (end, back) = ctx
            .run(
                checkpoints.take(),
                &mut coordinators,
                &mut coordinator_failures,
                &mut inputs,
                &mut requests,
                &mut failover,
            )
            .await;
        checkpoints = back;
        summary.restarts = failover.restarts;
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
            AttemptEnd::GaveUp(e) => break Err(e),
        };
        match failover.decide(&spec.restart, err, start.elapsed(), true) {
            Err(e) => break Err(e),
            Ok((err, after)) => {
                tracing::warn!(error = %err, attempt, ?after, "job failed; restarting every task");
                summary.restarts = failover.restarts;
                attempt = failover.take_attempt();
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

/// What failover keeps from attempt to attempt: the failure history the restart strategy reads,
/// the next attempt number, and the restarts so far (of regions and of the whole job).
struct FailoverState {
    history: FailureHistory,
    next_attempt: AttemptNumber,
    restarts: u32,
    /// Where failures and restarts are recorded for the live view.
    recorder: JobRecorder,
}

impl FailoverState {
    /// Records failure `err` and asks `strategy`: the delay before the restart (counted), or the
    /// job's final error. `whole_job`: the restart is of every task (not of one region).
    fn decide(
        &mut self,
        strategy: &RestartStrategy,
        err: JobError,
        elapsed: Duration,
        whole_job: bool,
    ) -> Result<(JobError, Duration), JobError> {
        self.recorder.failure(&err);
        match strategy.on_failure(&mut self.history, elapsed) {
            RestartDecision::GiveUp { attempts } => Err(if attempts == 0 && strategy.is_none() {
                err
            } else {
                JobError::RestartsExhausted {
                    attempts,
                    last: Box::new(err),
                }
            }),
            RestartDecision::Restart { after } => {
                self.restarts += 1;
                self.recorder.restarting(self.restarts, whole_job);
                Ok((err, after))
            }
        }
    }

    /// The attempt number of the next deployment.
    fn take_attempt(&mut self) -> AttemptNumber {
        let a = self.next_attempt;
        self.next_attempt += 1;
        a
    }
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
    regions: &'a Regions,
    attempt: AttemptNumber,
    start: Instant,
    restore: Option<CompletedCheckpoint>,
    /// The checkpoint the job started from, if any (restored when none completed since).
    initial: Option<&'a CompletedCheckpoint>,
}

/// A failed region on its way back: its tasks stopping, then the restart delay.
struct RegionRestart {
    tasks: Vec<usize>,
    /// Why it failed (a root cause among its tasks' failures, when one arrives).
    cause: TaskError,
    /// Tasks of the region not stopped yet.
    stopping: BTreeSet<usize>,
    /// When to deploy it again, once every task stopped and the restart strategy agreed.
    due: Option<Instant>,
}

/// The tasks of the running attempt: their futures, and which attempt each runs.
struct RunningTasks {
    set: JoinSet<Result<(), TaskError>>,
    ids: HashMap<tokio::task::Id, (usize, AttemptNumber)>,
    handles: Vec<Option<AbortHandle>>,
    attempts: Vec<AttemptNumber>,
}

impl RunningTasks {
    fn new(tasks: usize, attempt: AttemptNumber) -> Self {
        RunningTasks {
            set: JoinSet::new(),
            ids: HashMap::new(),
            handles: (0..tasks).map(|_| None).collect(),
            attempts: vec![attempt; tasks],
        }
    }

    fn spawn(&mut self, t: DeployedTask, attempt: AttemptNumber) {
        let (index, description) = (t.index, t.description);
        let fut = t.task.run();
        let handle = self.set.spawn(async move {
            let r = fut.await;
            if let Err(e) = &r {
                tracing::debug!(task = %description, error = ?e, "task failed");
            }
            r
        });
        self.ids.insert(handle.id(), (index, attempt));
        if let Some(slot) = self.handles.get_mut(index) {
            *slot = Some(handle);
        }
        if let Some(slot) = self.attempts.get_mut(index) {
            *slot = attempt;
        }
    }
}

/// What the master waits for besides facts for the machine.
enum Next {
    Fact(Fact),
    /// Every task of the failed region at this index of the restarts stopped.
    RegionStopped(usize),
    /// The failed region at this index is due to be deployed again.
    RegionDue(usize),
}

/// Every coordinator's state at one checkpoint.
type CoordinatorStates = BTreeMap<NodeId, Vec<u8>>;

/// The I/O of one running attempt.
struct AttemptIo<'a> {
    attempt: AttemptNumber,
    start: Instant,
    spec: &'a JobSpec,
    initial: Option<&'a CompletedCheckpoint>,
    checkpointing: Option<&'a CheckpointRun>,
    controls: Vec<mpsc::Sender<TaskControl>>,
    source_tasks: Vec<usize>,
    coordinators: &'a mut Coordinators,
    coordinator_failures: &'a mut mpsc::Receiver<CoordinatorFailure>,
    to_coordinators: mpsc::Receiver<ToCoordinator>,
    snapshots: JoinSet<(CheckpointId, Result<CoordinatorStates, String>)>,
    persisting: JoinSet<(CheckpointId, Result<u64, String>)>,
    requests: &'a mut Requests,
    failover: &'a mut FailoverState,
    running: RunningTasks,
    /// Failed regions on their way back.
    restarting: Vec<RegionRestart>,
    /// Checkpoints aborted in this attempt (one still being written is discarded again once
    /// its write ends).
    aborted: BTreeSet<CheckpointId>,
    /// Tasks of failed regions, from their stop until their new attempt is deployed: their
    /// reports are dropped.
    down: BTreeSet<usize>,
    /// What a region's deployment reuses: the report and coordinator senders, the direct
    /// slots, the attempt's metrics.
    reports_tx: mpsc::Sender<AttemptReport>,
    to_coordinator_tx: mpsc::Sender<ToCoordinator>,
    direct_slots: BTreeMap<NodeId, DirectSlot>,
    metrics: Arc<MetricsRegistry>,
    recorder: JobRecorder,
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
        failover: &mut FailoverState,
    ) -> (AttemptEnd, Option<JobCheckpoints>) {
        let spec = self.spec;
        let max_concurrent = spec
            .checkpointing
            .as_ref()
            .map(|c| c.settings.max_concurrent);
        let MasterChannels {
            reports_tx,
            mut reports,
            to_coordinator_tx,
            to_coordinators,
        } = MasterChannels::new(spec.plan.task_count(), max_concurrent);
        let direct_slots = coordinators.direct_slots();
        let deployment = spec.deploy(
            &DeployInputs {
                graph: &spec.graph,
                plan: &spec.plan,
                config: &spec.config,
                max_concurrent_checkpoints: max_concurrent,
                direct_slots: &direct_slots,
                reports_tx: &reports_tx,
                to_coordinator_tx: &to_coordinator_tx,
            },
            Scope::All,
            self.attempt,
            self.restore.as_ref(),
        );
        let Deployment {
            tasks,
            metrics,
            controls,
            source_tasks,
            node_mailboxes,
            ..
        } = match deployment {
            Ok(d) => d,
            Err(e) => return (AttemptEnd::Failed(e), checkpoints),
        };
        let metrics = Arc::new(metrics);
        inputs.metrics.next_attempt(metrics.clone());
        if let Err(e) = coordinators
            .attempt_deployed(self.attempt, &node_mailboxes)
            .await
        {
            return (AttemptEnd::Failed(e), checkpoints);
        }
        let layout = Layout {
            tasks: tasks.len(),
            has_coordinators: !coordinators.is_empty(),
            regions: self.regions.clone(),
            failover: spec.failover,
        };
        let (mut machine, first) = AttemptMachine::start(layout, checkpoints, ms_since(self.start));
        machine.add_waiting_requests(std::mem::take(&mut requests.carried));
        let mut running = RunningTasks::new(tasks.len(), self.attempt);
        for t in tasks {
            running.spawn(t, self.attempt);
        }
        inputs.recorder.attempt_running();
        let mut io = AttemptIo {
            attempt: self.attempt,
            start: self.start,
            spec,
            initial: self.initial,
            checkpointing: spec.checkpointing.as_ref(),
            controls: controls.into_iter().map(|(_, tx)| tx).collect(),
            source_tasks,
            coordinators,
            coordinator_failures,
            to_coordinators,
            snapshots: JoinSet::new(),
            persisting: JoinSet::new(),
            requests,
            failover,
            running,
            restarting: Vec::new(),
            aborted: BTreeSet::new(),
            down: BTreeSet::new(),
            reports_tx,
            to_coordinator_tx,
            direct_slots,
            metrics,
            recorder: inputs.recorder.clone(),
        };
        let mut actions: VecDeque<Action> = first.into();
        let end = 'attempt: loop {
            while let Some(action) = actions.pop_front() {
                match action {
                    Action::End(end) => break 'attempt end,
                    Action::RestartRegion { tasks, cause } => {
                        if let Some(end) = io.stop_region(tasks, cause).await {
                            break 'attempt end;
                        }
                    }
                    action => {
                        for fact in io.carry_out(action).await {
                            actions.extend(machine.on(fact, ms_since(self.start)));
                        }
                    }
                }
            }
            if let Some(e) = io.coordinators.lost_event() {
                actions.extend(machine.on(Fact::EventLost(e), ms_since(self.start)));
                continue;
            }
            let next = io
                .next_fact(&mut reports, inputs, machine.next_deadline_ms())
                .await;
            let fact = match next {
                Next::Fact(fact) => fact,
                Next::RegionStopped(i) => match io.region_stopped(i) {
                    Some(end) => break 'attempt end,
                    None => continue,
                },
                Next::RegionDue(i) => match io.redeploy_region(i, machine.latest()).await {
                    Ok(fact) => fact,
                    Err(e) => break 'attempt AttemptEnd::Failed(e),
                },
            };
            actions.extend(machine.on(fact, ms_since(self.start)));
        };
        io.requests.carried = machine.take_waiting_requests();
        let set = std::mem::take(&mut io.running.set);
        let end = match end {
            AttemptEnd::TaskFailed(e) => {
                let grace = spec.deployer.root_cause_grace();
                AttemptEnd::Failed(fail_all(set, e, grace).await)
            }
            other => {
                let mut set = set;
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
    /// Waits for the next thing that happens and turns it into a fact (or a step of a region
    /// restart).
    async fn next_fact(
        &mut self,
        reports: &mut mpsc::Receiver<AttemptReport>,
        inputs: &mut MasterInputs,
        deadline_ms: Option<u64>,
    ) -> Next {
        loop {
            let deadline = deadline_ms.map(|ms| self.start + Duration::from_millis(ms));
            let region_due = self
                .restarting
                .iter()
                .enumerate()
                .filter_map(|(i, r)| r.due.map(|d| (d, i)))
                .min();
            tokio::select! {
                biased;
                _ = inputs.cancel.cancelled() => return Next::Fact(Fact::Cancel),
                Some(f) = self.coordinator_failures.recv() => {
                    return Next::Fact(Fact::CoordinatorFailed(reported_failure(&f)));
                }
                Some(r) = reports.recv() => {
                    let task = r.report.task();
                    // Reports of a stopped attempt, or of one being stopped, are dropped.
                    if self.down.contains(&task)
                        || self.running.attempts.get(task) != Some(&r.attempt)
                    {
                        continue;
                    }
                    return Next::Fact(Fact::Report(r.report));
                }
                Some(event) = self.to_coordinators.recv() => {
                    if let Err(e) = self.coordinators.event_from_operator(event).await {
                        return Next::Fact(Fact::CoordinatorFailed(e));
                    }
                }
                Some(joined) = self.running.set.join_next_with_id() => {
                    let (id, result) = match joined {
                        Ok((id, r)) => (id, Ok(r)),
                        Err(j) => (j.id(), Err(j)),
                    };
                    let Some((task, _)) = self.running.ids.remove(&id) else {
                        continue;
                    };
                    if let Some(h) = self.running.handles.get_mut(task) {
                        *h = None;
                    }
                    self.recorder.task_state(task, match &result {
                        Ok(Ok(())) => TaskState::Finished,
                        Err(j) if j.is_cancelled() => TaskState::Canceled,
                        _ => TaskState::Failed,
                    });
                    if let Some(i) = self.restarting.iter().position(|r| r.stopping.contains(&task)) {
                        let region = &mut self.restarting[i];
                        region.stopping.remove(&task);
                        if let Ok(Err(e)) = result
                            && e.is_root_cause()
                            && !region.cause.is_root_cause()
                        {
                            region.cause = e;
                        }
                        if region.stopping.is_empty() {
                            return Next::RegionStopped(i);
                        }
                        continue;
                    }
                    return Next::Fact(match result {
                        Ok(Ok(())) => Fact::TaskExited(task),
                        Ok(Err(e)) => Fact::TaskFailed(task, e),
                        Err(j) if j.is_cancelled() => Fact::TaskExited(task),
                        Err(j) => Fact::TaskFailed(task, TaskError::Internal(format!(
                            "a task panicked outside user code: {j}"
                        ))),
                    });
                }
                Some(done) = self.snapshots.join_next() => {
                    return Next::Fact(match done {
                        Ok((id, Ok(states))) => Fact::CoordinatorsSnapshotted { id, states },
                        Ok((id, Err(reason))) => Fact::CoordinatorSnapshotFailed { id, reason },
                        Err(j) => Fact::CoordinatorFailed(JobError::Internal(format!(
                            "waiting for a coordinator snapshot panicked: {j}"
                        ))),
                    });
                }
                Some(done) = self.persisting.join_next() => {
                    return Next::Fact(match done {
                        // Aborted while it was being written (a failover): its files go now
                        // that they are complete, so that no later restore finds them.
                        Ok((id, Ok(_))) if self.aborted.contains(&id) => {
                            self.discard(id);
                            continue;
                        }
                        Ok((id, Ok(bytes))) => {
                            self.recorder.checkpoint_written(id, bytes);
                            Fact::Persisted(id)
                        }
                        Ok((id, Err(reason))) => Fact::PersistFailed { id, reason },
                        Err(j) => Fact::CoordinatorFailed(JobError::Internal(format!(
                            "writing a checkpoint panicked: {j}"
                        ))),
                    });
                }
                Some(r) = inputs.requests.recv() => return Next::Fact(self.requests.add(r)),
                _ = sleep_until(region_due.map(|(d, _)| d)) => {
                    if let Some((_, i)) = region_due {
                        return Next::RegionDue(i);
                    }
                }
                _ = sleep_until(deadline) => return Next::Fact(Fact::Time),
            }
        }
    }

    /// A region failed (`cause`): stop its tasks still running and tell the coordinators. The
    /// restart strategy is asked once every task stopped ([`Self::region_stopped`]). Returns
    /// how the attempt ends if that must happen at once.
    async fn stop_region(&mut self, tasks: Vec<usize>, cause: TaskError) -> Option<AttemptEnd> {
        let reason = cause.clone().into_job_error().to_string();
        tracing::info!(tasks = ?tasks, error = %reason, "a task failed; stopping its pipelined region");
        let mut stopping = BTreeSet::new();
        for &t in &tasks {
            self.down.insert(t);
            if let Some(Some(h)) = self.running.handles.get(t) {
                h.abort();
                stopping.insert(t);
            }
        }
        let subtasks: Vec<(NodeId, usize)> = tasks
            .iter()
            .flat_map(|&t| self.spec.plan.task_subtasks(t))
            .collect();
        if let Err(e) = self.coordinators.subtasks_failed(&subtasks, &reason).await {
            return Some(AttemptEnd::Failed(e));
        }
        let empty = stopping.is_empty();
        self.restarting.push(RegionRestart {
            tasks,
            cause,
            stopping,
            due: None,
        });
        if empty {
            return self.region_stopped(self.restarting.len() - 1);
        }
        None
    }

    /// Every task of the failed region at `i` stopped: the restart strategy decides. Returns how
    /// the attempt ends if it gives up.
    fn region_stopped(&mut self, i: usize) -> Option<AttemptEnd> {
        let region = self.restarting.get_mut(i)?;
        let err = region.cause.clone().into_job_error();
        match self
            .failover
            .decide(&self.spec.restart, err, self.start.elapsed(), false)
        {
            Err(e) => Some(AttemptEnd::GaveUp(e)),
            Ok((err, after)) => {
                tracing::warn!(error = %err, tasks = ?region.tasks, ?after, "restarting a pipelined region");
                region.due = Some(Instant::now() + after);
                None
            }
        }
    }

    /// Deploys the failed region at `i` again as a new attempt, restored from `latest` (or the
    /// checkpoint the job started from); returns the fact that it runs.
    async fn redeploy_region(
        &mut self,
        i: usize,
        latest: Option<&CompletedCheckpoint>,
    ) -> Result<Fact, JobError> {
        let region = self.restarting.remove(i);
        let attempt = self.failover.take_attempt();
        let restore = latest.or(self.initial);
        let tasks: BTreeSet<usize> = region.tasks.iter().copied().collect();
        let spec = self.spec;
        let d = spec.deploy(
            &DeployInputs {
                graph: &spec.graph,
                plan: &spec.plan,
                config: &spec.config,
                max_concurrent_checkpoints: self.checkpointing.map(|c| c.settings.max_concurrent),
                direct_slots: &self.direct_slots,
                reports_tx: &self.reports_tx,
                to_coordinator_tx: &self.to_coordinator_tx,
            },
            Scope::Region {
                tasks: &tasks,
                metrics: &self.metrics,
            },
            attempt,
            restore,
        )?;
        let restored = restore.map_or(sluice_coordinator::NO_CHECKPOINT, |c| c.id);
        self.coordinators
            .subtasks_restored(attempt, restored, &d.node_mailboxes)
            .await?;
        for (t, tx) in d.controls {
            if let Some(c) = self.controls.get_mut(t) {
                *c = tx;
            }
        }
        for t in d.tasks {
            self.running.spawn(t, attempt);
        }
        for t in &region.tasks {
            self.down.remove(t);
        }
        self.recorder.tasks_state(&region.tasks, TaskState::Running);
        tracing::info!(tasks = ?region.tasks, attempt, checkpoint = %restored, "pipelined region restarted");
        Ok(Fact::RegionRestored(region.tasks))
    }

    /// Carries out one action; returns the facts it produced at once.
    async fn carry_out(&mut self, action: Action) -> Vec<Fact> {
        match action {
            Action::SnapshotCoordinators(id) => {
                self.recorder.checkpoint_triggered(id);
                let part = self.coordinators.start_checkpoint(id).await;
                self.snapshots.spawn(async move { (id, part.await) });
            }
            Action::TriggerSources(barrier) => {
                self.recorder.checkpoint_triggered(barrier.id);
                for &t in &self.source_tasks {
                    let _ = self.controls[t]
                        .send(TaskControl::TriggerCheckpoint(barrier))
                        .await;
                }
            }
            Action::TriggerTask(task, barrier) => {
                self.recorder.checkpoint_triggered(barrier.id);
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
                        None => (id, Ok(0)),
                    }
                });
            }
            Action::NotifyComplete(id) => {
                tracing::debug!(checkpoint = %id, "checkpoint completed");
                self.recorder.checkpoint_completed(id);
                if let Err(e) = self.coordinators.checkpoint_complete(id).await {
                    return vec![Fact::CoordinatorFailed(e)];
                }
                send_all(&self.controls, || TaskControl::NotifyComplete(id)).await;
            }
            Action::NotifyAborted(id, reason) => {
                tracing::info!(checkpoint = %id, %reason, "checkpoint aborted");
                self.recorder.checkpoint_failed(id, &reason.to_string());
                if let Err(e) = self.coordinators.checkpoint_aborted(id).await {
                    return vec![Fact::CoordinatorFailed(e)];
                }
                send_all(&self.controls, || TaskControl::NotifyAborted(id)).await;
                self.aborted.insert(id);
                self.discard(id);
            }
            Action::RequestTriggered(r, id) => self.requests.triggered(r, id),
            Action::RequestDone(r, result) => self.requests.done(r, result),
            Action::FinishTasks => send_all(&self.controls, || TaskControl::Finish).await,
            Action::FlushCoordinators => return vec![self.flush_coordinators().await],
            // Handled by the attempt loop.
            Action::End(_) | Action::RestartRegion { .. } => {}
        }
        Vec::new()
    }

    /// Removes what was written of checkpoint `id`.
    fn discard(&self, id: CheckpointId) {
        if let Some(c) = self.checkpointing {
            let p = c.persistence.clone();
            tokio::spawn(async move { p.discard(id).await });
        }
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

/// Stops every task after `first` failed and names the failure: a root cause (user code) among
/// those that failed, in preference to the failures it caused (peers that lost a channel). With
/// `grace`, the tasks may first end on their own for that long while no root cause is known.
async fn fail_all(
    mut set: JoinSet<Result<(), TaskError>>,
    first: TaskError,
    grace: Option<Duration>,
) -> JobError {
    let mut chosen = first;
    if let Some(grace) = grace {
        let deadline = Instant::now() + grace;
        while !chosen.is_root_cause() {
            match tokio::time::timeout_at(deadline, set.join_next()).await {
                Ok(Some(Ok(Err(e)))) if e.is_root_cause() => chosen = e,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
    set.abort_all();
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
