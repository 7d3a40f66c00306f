//! The task manager's side of cluster mode: [`Worker`] runs the tasks the job master deploys
//! here.
//!
//! A deployment is built by the runtime's own `deploy` with a remote scope: channels between
//! two tasks of this process stay local bounded channels; a channel to a task elsewhere is a
//! local channel plus a *pump* that carries its elements over the [`DataPlane`], encoded with
//! serde. A task and its pumps run as one future: a pump's failure fails the task, and a task
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
use crate::error::{JobError, TaskError};
use crate::graph::StreamGraph;
use crate::job::JobConfig;
use crate::job::deploy::{
    DeployInputs, Deployment, MasterChannels, RemoteWiring, Restore, Scope, deploy,
};
use crate::job::plan::Plan;
use crate::storage::{CheckpointStorage, StateFileHandle};
use crate::task::control::TaskControl;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use sluice_core::AttemptNumber;
use sluice_core::CheckpointId;
use sluice_core::sync::lock;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// A job as a task manager holds it: the graph its binary built and the plan, the same as the
/// job master's (checked by fingerprint on every deployment).
pub struct WorkerJob {
    pub(crate) graph: StreamGraph,
    pub(crate) plan: Plan,
    pub(crate) config: JobConfig,
    pub(crate) fingerprint: String,
    /// The checkpoint storage the job configured: the task manager writes its tasks' state
    /// files there itself.
    pub(crate) storage: Option<Arc<dyn CheckpointStorage>>,
}

impl std::fmt::Debug for WorkerJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerJob")
            .field("tasks", &self.plan.task_count())
            .finish_non_exhaustive()
    }
}

impl WorkerJob {
    /// How many tasks the job has.
    pub fn task_count(&self) -> usize {
        self.plan.task_count()
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
        let wiring = RemoteWiring {
            here: tasks.iter().copied().collect(),
            placement,
            peers,
            plane: self.plane.clone(),
            epoch,
        };
        let MasterChannels {
            reports_tx,
            mut reports,
            to_coordinator_tx,
            mut to_coordinators,
        } = MasterChannels::new(tasks.len(), max_concurrent_checkpoints);
        let Deployment {
            tasks: deployed,
            controls,
            pumps,
            metrics,
            ..
        } = deploy(
            &DeployInputs {
                graph: &job.graph,
                plan: &job.plan,
                config: &job.config,
                max_concurrent_checkpoints,
                direct_slots: &BTreeMap::new(),
                reports_tx: &reports_tx,
                to_coordinator_tx: &to_coordinator_tx,
            },
            Scope::Remote(&wiring),
            attempt,
            Restore::Shares(states),
        )?;
        drop((reports_tx, to_coordinator_tx));
        let controls: HashMap<usize, mpsc::Sender<TaskControl>> = controls.into_iter().collect();
        let task_of: HashMap<(sluice_core::NodeId, usize), usize> = tasks
            .iter()
            .flat_map(|&t| job.plan.task_subtasks(t).into_iter().map(move |ns| (ns, t)))
            .collect();
        let mut pumps_of: HashMap<usize, (Vec<_>, Vec<_>)> = HashMap::new();
        for (t, pump, sends) in pumps {
            let entry = pumps_of.entry(t).or_default();
            if sends {
                entry.0.push(pump);
            } else {
                entry.1.push(pump);
            }
        }
        // Rule 1: one forwarder per deployment, reports before ends.
        let (ended_tx, mut ended) = mpsc::channel::<Up>(tasks.len().max(1));
        let up = self.up.clone();
        let storage = job.storage.clone();
        let counters = move || Up {
            epoch,
            attempt,
            task: usize::MAX,
            kind: UpKind::Metrics(
                metrics
                    .snapshot()
                    .subtasks
                    .iter()
                    .map(RemoteMetrics::of)
                    .collect(),
            ),
        };
        tokio::spawn(async move {
            let mut every_second = tokio::time::interval(METRICS_EVERY);
            every_second.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let (mut reports_open, mut events_open, mut ends_open) = (true, true, true);
            while reports_open || events_open || ends_open {
                let msg = tokio::select! {
                    biased;
                    r = reports.recv(), if reports_open => match r {
                        Some(r) => {
                            let (task, attempt) = (r.report.task(), r.attempt);
                            let mut kind = UpKind::from_report(r.report);
                            if let (Some(storage), UpKind::Ack { checkpoint, states, written }) = (&storage, &mut kind) {
                                *written = write_states(storage, *checkpoint, states).await;
                            }
                            Up { epoch, attempt, task, kind }
                        }
                        None => { reports_open = false; continue; }
                    },
                    e = to_coordinators.recv(), if events_open => match e {
                        Some(e) => Up {
                            epoch,
                            attempt: e.attempt,
                            task: task_of.get(&(e.node, e.subtask)).copied().unwrap_or(usize::MAX),
                            kind: UpKind::ToCoordinator { node: e.node, subtask: e.subtask, event: e.event },
                        },
                        None => { events_open = false; continue; }
                    },
                    e = ended.recv(), if ends_open => match e {
                        Some(e) => {
                            // The task's last counters go before its end.
                            if up.send(counters()).await.is_err() {
                                return;
                            }
                            e
                        }
                        None => { ends_open = false; continue; }
                    },
                    _ = every_second.tick() => counters(),
                };
                if up.send(msg).await.is_err() {
                    return;
                }
            }
        });
        let mut running = lock(&self.running);
        for t in deployed {
            let index = t.index;
            let (sends, receives) = pumps_of.remove(&index).unwrap_or_default();
            let fut = t.task.run();
            let ended_tx = ended_tx.clone();
            let worker = Arc::downgrade(self);
            let handle = tokio::spawn(async move {
                let result = run_with_pumps(fut, sends, receives).await;
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
                let _ = ended_tx
                    .send(Up {
                        epoch,
                        attempt,
                        task: index,
                        kind: UpKind::Ended(result.map_err(RemoteTaskError::from_task_error)),
                    })
                    .await;
            });
            let control = controls
                .get(&index)
                .cloned()
                .ok_or_else(|| JobError::Internal(format!("task {index} has no mailbox")))?;
            if let Some(old) = running.insert(
                index,
                Running {
                    epoch,
                    attempt,
                    control,
                    abort: handle.abort_handle(),
                },
            ) {
                old.abort.abort();
            }
        }
        tracing::info!(epoch, attempt, tasks = ?tasks, "deployed tasks");
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

/// Writes a task's acknowledged states to the checkpoint storage (encoded on the blocking
/// pool); the handles, or none when a write failed (the job master then writes them).
async fn write_states(
    storage: &Arc<dyn CheckpointStorage>,
    checkpoint: CheckpointId,
    states: &[(sluice_core::NodeId, usize, crate::state::OperatorState)],
) -> Vec<StateFileHandle> {
    let writes = states.iter().map(|(node, subtask, state)| {
        let (storage, state, node, subtask) = (storage.clone(), state.clone(), *node, *subtask);
        async move {
            let bytes = tokio::task::spawn_blocking(move || sluice_core::codec::encode(&state))
                .await
                .map_err(|e| format!("encoding a state panicked: {e}"))?
                .map_err(|e| e.to_string())?;
            storage
                .write_state(checkpoint, node, subtask, bytes)
                .await
                .map_err(|e| e.to_string())
        }
    });
    match futures::future::try_join_all(writes).await {
        Ok(handles) => handles,
        Err(e) => {
            tracing::warn!(%checkpoint, error = %e, "could not write state files; the job master writes them");
            Vec::new()
        }
    }
}

/// Runs a task with its pumps: a pump's failure fails the task; a task that ended
/// successfully is done once its outgoing pumps delivered everything.
async fn run_with_pumps(
    task: futures::future::BoxFuture<'static, Result<(), TaskError>>,
    sends: Vec<crate::graph::erased::Pump>,
    receives: Vec<crate::graph::erased::Pump>,
) -> Result<(), TaskError> {
    let mut sends: FuturesUnordered<_> = sends.into_iter().collect();
    let mut receives: FuturesUnordered<_> = receives.into_iter().collect();
    let mut task = task;
    loop {
        tokio::select! {
            r = &mut task => {
                r?;
                break;
            }
            Some(r) = sends.next(), if !sends.is_empty() => r?,
            Some(r) = receives.next(), if !receives.is_empty() => r?,
        }
    }
    while let Some(r) = sends.next().await {
        r?;
    }
    Ok(())
}
