//! The task manager's side of cluster mode: [`Worker`] runs the tasks the job master deploys
//! here.
//!
//! A task manager plans its part of a deployment with the same pure deployment plan as the job
//! master (the tasks it was sent, the state shares the job master dealt out) and builds it with
//! the same code as a local job: channels between two tasks of this process stay local bounded
//! channels; a channel to a task elsewhere is a local channel plus a *pump* that carries its
//! elements over the [`DataPlane`], encoded with serde. A task and its pumps run as one future: a pump's failure fails the task, and a task
//! that ended is done only once its outgoing pumps delivered everything, end of input included.
//!
//! Ordering rules:
//! 1. Everything the tasks of one deployment send up (checkpoint reports, coordinator events,
//!    task ends) leaves through one queue, reports first: a task's last report always
//!    reaches the job master before its end.
//! 2. Mailbox messages for a task are handed to it in the order they arrive, and only to the
//!    attempt they name.
//! 3. A cancelled task is dropped with its pumps and sends nothing more.

use crate::cluster::DataPlane;
use crate::cluster::wire::{
    Control, Deployment as WireDeployment, RemoteMetrics, RemoteTaskError, Up, UpKind,
};
use crate::error::JobError;
use crate::graph::StreamGraph;
use crate::job::JobConfig;
use crate::job::deploy::{
    DeployInputs, DeployedTask, Deployment, DeploymentPlan, MasterChannels, MetricsRegistry,
    RemoteWiring, Shares, build,
};
use crate::job::plan::Plan;
use crate::operator::to_coordinator::ToCoordinator;
use crate::storage::{CheckpointStorage, StateFileHandle};
use crate::task::control::{AttemptReport, TaskControl};
use sluice_core::sync::lock;
use sluice_core::{AttemptNumber, CheckpointId, NodeId};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// A job as a task manager holds it: the graph its binary built and the plan, the same as the
/// job master's (checked by fingerprint on every deployment).
pub struct WorkerJob {
    graph: StreamGraph,
    plan: Plan,
    config: JobConfig,
    fingerprint: String,
    /// The checkpoint storage the job configured: the task manager writes its tasks' state
    /// files there itself.
    storage: Option<Arc<dyn CheckpointStorage>>,
}

impl std::fmt::Debug for WorkerJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerJob")
            .field("tasks", &self.plan.task_count())
            .finish_non_exhaustive()
    }
}

impl WorkerJob {
    /// The job a task manager runs parts of: `graph` as planned into `plan` under `config`,
    /// its tasks writing their state files to `storage`.
    pub(crate) fn new(
        graph: StreamGraph,
        plan: Plan,
        config: JobConfig,
        storage: Option<Arc<dyn CheckpointStorage>>,
    ) -> Self {
        WorkerJob {
            fingerprint: graph.fingerprint(),
            graph,
            plan,
            config,
            storage,
        }
    }

    /// The graph's fingerprint.
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }
}

/// A task running here.
struct Running {
    epoch: u64,
    attempt: AttemptNumber,
    control: mpsc::Sender<TaskControl>,
    abort: AbortHandle,
}

/// Runs deployed tasks on a task manager.
pub struct Worker {
    job: WorkerJob,
    plane: Arc<dyn DataPlane>,
    up: mpsc::Sender<Up>,
    running: Mutex<HashMap<usize, Running>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("job", &self.job)
            .finish_non_exhaustive()
    }
}

/// How often a deployment's counters go to the job master.
const METRICS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Messages a deployment's tasks may queue up before they wait.
const UP_CAPACITY: usize = 1024;

impl Worker {
    /// A worker for `job`, reaching other task managers through `plane` and sending what its
    /// tasks report into `up` (which the caller forwards to the job master, in order).
    pub fn new(job: WorkerJob, plane: Arc<dyn DataPlane>, up: mpsc::Sender<Up>) -> Arc<Self> {
        Arc::new(Worker {
            job,
            plane,
            up,
            running: Mutex::new(HashMap::new()),
        })
    }

    /// A bounded queue for [`Worker::new`]'s `up`.
    pub fn up_channel() -> (mpsc::Sender<Up>, mpsc::Receiver<Up>) {
        mpsc::channel(UP_CAPACITY)
    }

    /// How many tasks run here now.
    pub fn running(&self) -> usize {
        lock(&self.running).len()
    }

    /// Reads, from the job's checkpoint storage, what the restored states of `d` need before
    /// [`deploy`](Self::deploy): the state files of the states sent as handles (dealt out here
    /// when the job was rescaled), then the files of the keyed stores (incremental
    /// checkpoints) they refer to.
    pub async fn fetch_restored(&self, d: &mut WireDeployment) -> Result<(), JobError> {
        if d.deferred.is_empty() && d.restored_from.is_none() {
            return Ok(());
        }
        // A checkpoint restored from a path is read there; any other from the job's storage.
        let at_path: Option<Arc<dyn CheckpointStorage>> = d.restored_at.as_ref().map(|root| {
            Arc::new(crate::storage::LocalCheckpointStorage::new(
                root.clone(),
                std::num::NonZeroUsize::MIN,
            )) as Arc<dyn CheckpointStorage>
        });
        let Some(storage) = at_path.as_ref().or(self.job.storage.as_ref()) else {
            if d.deferred.is_empty() {
                return Ok(());
            }
            return Err(JobError::InvalidJob(
                "the job master sent state as handles to checkpoint storage, but this task \
                 manager's job configures no checkpoint storage; configure the same storage \
                 in every process"
                    .into(),
            ));
        };
        for (node, subtask, deferred) in std::mem::take(&mut d.deferred) {
            match d
                .states
                .iter_mut()
                .find(|(n, s, _)| *n == node && *s == subtask)
            {
                Some((_, _, state)) => state.defer(deferred),
                None => {
                    return Err(JobError::Internal(format!(
                        "a handle for operator {node} subtask {subtask}, which the deployment \
                         has no state for"
                    )));
                }
            }
        }
        let mut states = Vec::new();
        for (node, subtask, s) in d.states.iter_mut() {
            states.push((*node, *subtask, s));
        }
        crate::checkpoint::persistence::resolve_deferred(
            storage.as_ref(),
            states,
            self.job.config.max_parallelism,
        )
        .await?;
        let Some(id) = d.restored_from else {
            return Ok(());
        };
        let mut states = Vec::new();
        for (node, _, s) in d.states.iter_mut() {
            states.push((*node, s));
        }
        crate::checkpoint::persistence::fetch_handles(storage.as_ref(), id, states).await
    }

    /// Deploys this task manager's part of `d` and starts its tasks.
    pub fn deploy(self: &Arc<Self>, d: WireDeployment) -> Result<(), JobError> {
        let job = &self.job;
        if d.fingerprint != job.fingerprint {
            return Err(JobError::InvalidJob(
                "the job master runs a different job graph than this task manager's binary \
                 built (fingerprints differ); run the same build everywhere"
                    .into(),
            ));
        }
        if !d.deferred.is_empty() || d.states.iter().any(|(_, _, s)| s.deferred().is_some()) {
            return Err(JobError::Internal(
                "a deployment with state handles must be fetched (fetch_restored) before it is \
                 deployed"
                    .into(),
            ));
        }
        let WireDeployment {
            epoch,
            attempt,
            placement,
            peers,
            tasks,
            states,
            max_concurrent_checkpoints,
            ..
        } = d;
        let here = tasks.iter().copied().collect();
        let plan = DeploymentPlan::new(
            &job.graph,
            &job.plan,
            &job.config,
            &here,
            attempt,
            Shares::Given(states),
        )?;
        let task_of = plan.mailboxes.clone();
        let wiring = RemoteWiring {
            placement,
            peers,
            plane: self.plane.clone(),
            epoch,
        };
        let MasterChannels {
            reports_tx,
            reports,
            to_coordinator_tx,
            to_coordinators,
        } = MasterChannels::new(tasks.len(), max_concurrent_checkpoints);
        let inputs = DeployInputs {
            graph: &job.graph,
            plan: &job.plan,
            config: &job.config,
            max_concurrent_checkpoints,
            checkpoint_storage: max_concurrent_checkpoints.and(job.storage.clone()),
            direct_slots: &BTreeMap::new(),
            reports_tx: &reports_tx,
            to_coordinator_tx: &to_coordinator_tx,
        };
        let Deployment {
            tasks: deployed,
            controls,
            metrics,
            ..
        } = build(&inputs, plan, None, Some(&wiring))?;
        drop((reports_tx, to_coordinator_tx));
        // Rule 1: one forwarder per deployment, reports before ends.
        let (ended_tx, ended) = mpsc::channel::<Up>(tasks.len().max(1));
        let forwarder = Forwarder {
            epoch,
            attempt,
            up: self.up.clone(),
            storage: job.storage.clone(),
            task_of,
            metrics,
        };
        tokio::spawn(forwarder.run(reports, to_coordinators, ended));
        self.start(deployed, controls, ended_tx, epoch, attempt)?;
        tracing::info!(epoch, attempt, tasks = ?tasks, "deployed tasks");
        Ok(())
    }

    /// Spawns the deployed tasks of `attempt`, each reporting its end into `ended`; a task of
    /// another attempt at the same index stops.
    fn start(
        self: &Arc<Self>,
        deployed: Vec<DeployedTask>,
        controls: Vec<(usize, mpsc::Sender<TaskControl>)>,
        ended: mpsc::Sender<Up>,
        epoch: u64,
        attempt: AttemptNumber,
    ) -> Result<(), JobError> {
        let controls: HashMap<usize, mpsc::Sender<TaskControl>> = controls.into_iter().collect();
        let mut running = lock(&self.running);
        for t in deployed {
            let index = t.index;
            let control = controls
                .get(&index)
                .cloned()
                .ok_or_else(|| JobError::Internal(format!("task {index} has no mailbox")))?;
            let (ended, worker) = (ended.clone(), Arc::downgrade(self));
            let handle = tokio::spawn(async move {
                // A task on a thread of its own stops there when this future is dropped (a
                // cancel aborts it).
                let result = t.task.run().run.await;
                if let Err(e) = &result {
                    tracing::debug!(task = index, error = ?e, "task failed");
                }
                if let Some(w) = worker.upgrade() {
                    let mut running = lock(&w.running);
                    if running
                        .get(&index)
                        .is_some_and(|r| r.attempt == attempt && r.epoch == epoch)
                    {
                        running.remove(&index);
                    }
                }
                let kind = UpKind::Ended(result.map_err(RemoteTaskError::from_task_error));
                let _ = ended
                    .send(Up {
                        epoch,
                        attempt,
                        task: index,
                        kind,
                    })
                    .await;
            });
            let abort = handle.abort_handle();
            let new = Running {
                epoch,
                attempt,
                control,
                abort,
            };
            if let Some(old) = running.insert(index, new) {
                old.abort.abort();
            }
        }
        Ok(())
    }

    /// Hands a mailbox message to its task. Returns `false` when the task does not run here
    /// (any more) in that attempt.
    pub async fn control(&self, c: Control) -> bool {
        let tx = {
            let running = lock(&self.running);
            match running.get(&c.task) {
                Some(r) if r.attempt == c.attempt && r.epoch == c.epoch => r.control.clone(),
                _ => return false,
            }
        };
        tx.send(c.kind).await.is_ok()
    }

    /// Stops `tasks` of `attempt` (every task of it when `tasks` is empty).
    pub fn cancel(&self, epoch: u64, attempt: AttemptNumber, tasks: &[usize]) {
        let mut running = lock(&self.running);
        running.retain(|t, r| {
            let hit =
                r.epoch == epoch && r.attempt == attempt && (tasks.is_empty() || tasks.contains(t));
            if hit {
                r.abort.abort();
            }
            !hit
        });
    }

    /// Stops every task deployed by a job master of an epoch before `epoch` (a newer job master
    /// took over; what it deploys itself stays).
    pub fn cancel_before_epoch(&self, epoch: u64) {
        lock(&self.running).retain(|_, r| {
            let old = r.epoch < epoch;
            if old {
                r.abort.abort();
            }
            !old
        });
    }

    /// Stops every task (the job master changed or the job ended).
    pub fn cancel_all(&self) {
        for (_, r) in lock(&self.running).drain() {
            r.abort.abort();
        }
    }
}

/// Sends up what the tasks of one deployment report, in order (rule 1): reports, coordinator
/// events, their counters every second, and their ends, each end after the last counters.
struct Forwarder {
    epoch: u64,
    attempt: AttemptNumber,
    up: mpsc::Sender<Up>,
    storage: Option<Arc<dyn CheckpointStorage>>,
    /// The task running each operator subtask.
    task_of: BTreeMap<(NodeId, usize), usize>,
    metrics: MetricsRegistry,
}

impl Forwarder {
    async fn run(
        self,
        mut reports: mpsc::Receiver<AttemptReport>,
        mut to_coordinators: mpsc::Receiver<ToCoordinator>,
        mut ended: mpsc::Receiver<Up>,
    ) {
        let mut every_second = tokio::time::interval(METRICS_EVERY);
        every_second.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (mut reports_open, mut events_open, mut ends_open) = (true, true, true);
        while reports_open || events_open || ends_open {
            let msg = tokio::select! {
                biased;
                r = reports.recv(), if reports_open => match r {
                    Some(r) => self.report(r).await,
                    None => { reports_open = false; continue; }
                },
                e = to_coordinators.recv(), if events_open => match e {
                    Some(e) => self.event(e),
                    None => { events_open = false; continue; }
                },
                e = ended.recv(), if ends_open => match e {
                    Some(e) => {
                        // The task's last counters go before its end.
                        if self.up.send(self.counters()).await.is_err() {
                            return;
                        }
                        e
                    }
                    None => { ends_open = false; continue; }
                },
                _ = every_second.tick() => self.counters(),
            };
            if self.up.send(msg).await.is_err() {
                return;
            }
        }
    }

    /// A task's report, with the state files of an acknowledgement written here.
    async fn report(&self, r: AttemptReport) -> Up {
        let (task, attempt) = (r.report.task(), r.attempt);
        let mut kind = UpKind::from_report(r.report);
        if let (
            Some(storage),
            UpKind::Ack {
                checkpoint,
                states,
                written,
                uploaded_bytes,
            },
        ) = (&self.storage, &mut kind)
        {
            (*written, *uploaded_bytes) = write_states(storage, *checkpoint, states).await;
            if !written.is_empty() {
                // Stored: the job master gets handles, not the entries.
                for (_, _, s) in states.iter_mut() {
                    *s = s.without_entries();
                }
            }
        }
        Up {
            epoch: self.epoch,
            attempt,
            task,
            kind,
        }
    }

    /// An event from an operator subtask to its coordinator.
    fn event(&self, e: ToCoordinator) -> Up {
        Up {
            epoch: self.epoch,
            attempt: e.attempt,
            task: self
                .task_of
                .get(&(e.node, e.subtask))
                .copied()
                .unwrap_or(usize::MAX),
            kind: UpKind::ToCoordinator {
                node: e.node,
                subtask: e.subtask,
                event: e.event,
            },
        }
    }

    /// The counters of the deployment's operator subtasks.
    fn counters(&self) -> Up {
        let all = self.metrics.snapshot().subtasks;
        Up {
            epoch: self.epoch,
            attempt: self.attempt,
            task: usize::MAX,
            kind: UpKind::Metrics(all.iter().map(RemoteMetrics::of).collect()),
        }
    }
}

/// Writes a task's acknowledged states to the checkpoint storage (encoded on the blocking
/// pool); the handles and the bytes of table files uploaded for them, or none when a write
/// failed (the job master then writes them).
async fn write_states(
    storage: &Arc<dyn CheckpointStorage>,
    checkpoint: CheckpointId,
    states: &[(NodeId, usize, crate::state::OperatorState)],
) -> (Vec<StateFileHandle>, u64) {
    let writes = states.iter().map(|(node, subtask, state)| {
        let (storage, state, node, subtask) = (storage.clone(), state.clone(), *node, *subtask);
        async move {
            let uploaded =
                crate::checkpoint::persistence::upload_store_files(&storage, &state).await?;
            let bytes = tokio::task::spawn_blocking(move || sluice_core::codec::encode(&state))
                .await
                .map_err(|e| format!("encoding a state panicked: {e}"))?
                .map_err(|e| e.to_string())?;
            let handle = storage
                .write_state(checkpoint, node, subtask, bytes)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((handle, uploaded))
        }
    });
    match futures::future::try_join_all(writes).await {
        Ok(written) => {
            let uploaded = written.iter().map(|(_, bytes)| bytes).sum();
            (written.into_iter().map(|(h, _)| h).collect(), uploaded)
        }
        Err(e) => {
            tracing::warn!(%checkpoint, error = %e, "could not write state files; the job master writes them");
            (Vec::new(), 0)
        }
    }
}
