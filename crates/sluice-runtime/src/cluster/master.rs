//! The job master's side of cluster mode: [`RemoteTasks`] stands in for every task of the job.
//!
//! Deployment builds one *proxy* per task instead of the task itself. The job master's loop
//! cannot tell the difference: a proxy's mailbox is a local bounded channel, its reports and
//! coordinator events arrive on the attempt's channels, and its future ends when the task it
//! stands for ends. In between, the proxy forwards each mailbox message, in order, to the
//! task manager running the task (so a coordinator's events keep the order its valve released
//! them in), and an aborted proxy (a region restarting) cancels its task there.
//!
//! Ordering rules:
//! 1. The tasks deployed together (a whole attempt, or one pipelined region) are placed
//!    together, once, by whichever proxy runs first: it waits for enough slots, decides the
//!    placement ([`slot_owners`]) and sends each task manager its part before any proxy
//!    forwards a message.
//! 2. A task's slot (attempt, report channels, end signal) is registered before its proxy is
//!    spawned, so nothing a task manager sends can arrive before there is a place for it.
//! 3. What a task manager sends for an attempt or an epoch that is not the registered one is
//!    dropped: it belongs to a task that was stopped.
//! 4. A lost task manager ends every proxy placed on it with a failure naming it; the job
//!    master then fails over as for any task failure.

use crate::checkpoint::persistence::WrittenStates;
use crate::cluster::TransportError;
use crate::cluster::placement::slot_owners;
use crate::cluster::wire::{Control, Deployment as WireDeployment, Up, UpKind};
use crate::error::{JobError, TaskError};
use crate::graph::erased::RunnableTask;
use crate::job::deploy::{
    CONTROL_CAPACITY, DeployInputs, DeployedTask, Deployer, Deployment, DeploymentPlan,
    MetricsRegistry, PlannedTask, SubtaskShare, node_mailboxes,
};
use crate::metrics::OperatorMetrics;
use crate::operator::to_coordinator::ToCoordinator;
use crate::task::control::{AttemptReport, TaskControl};
use crate::task::thread::Started;
use futures::future::BoxFuture;
use sluice_core::sync::lock;
use sluice_core::{AttemptNumber, CheckpointId, NodeId};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OnceCell, mpsc, oneshot};

/// A task manager as the job master sees it when placing tasks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskManagerSlots {
    /// Its name, unique in the cluster.
    pub name: String,
    /// How many slots it offers.
    pub slots: u32,
    /// Where its data plane listens (`host:port`).
    pub data_address: String,
}

/// The job master's calls to task managers (implemented over gRPC by `sluice-node`, in memory
/// by tests).
pub trait TaskManagerGateway: Send + Sync + 'static {
    /// The live task managers, once they offer at least `slots` slots in all (registration
    /// order). Fails, naming what is missing, when none come in the gateway's own time.
    fn wait_for_slots(&self, slots: usize) -> BoxFuture<'_, Result<Vec<TaskManagerSlots>, String>>;
    /// Sends task manager `tm` its part of a deployment.
    fn deploy(
        &self,
        tm: &str,
        deployment: WireDeployment,
    ) -> BoxFuture<'_, Result<(), TransportError>>;
    /// Sends one task's mailbox message.
    fn control(&self, tm: &str, control: Control) -> BoxFuture<'_, Result<(), TransportError>>;
    /// Stops tasks of an attempt.
    fn cancel(
        &self,
        tm: &str,
        epoch: u64,
        attempt: AttemptNumber,
        tasks: Vec<usize>,
    ) -> BoxFuture<'_, Result<(), TransportError>>;
}

/// Where one task's messages go on the job master.
struct Slot {
    attempt: AttemptNumber,
    tm: Option<String>,
    reports: mpsc::Sender<AttemptReport>,
    to_coordinator: mpsc::Sender<ToCoordinator>,
    end: Option<oneshot::Sender<Result<(), TaskError>>>,
    /// The operators of its chain and its subtask index.
    subtasks: Vec<(NodeId, usize)>,
}

/// Where one message of a task manager goes on the job master.
enum Route {
    Report(mpsc::Sender<AttemptReport>, AttemptReport),
    Coordinator(mpsc::Sender<ToCoordinator>, ToCoordinator),
    End(
        oneshot::Sender<Result<(), TaskError>>,
        Result<(), TaskError>,
    ),
}

/// The job master's copy of a remote operator subtask's counters, and the attempt they count.
type Mirror = (AttemptNumber, Arc<OperatorMetrics>);

/// The job master's stand-ins for the tasks of a job running on task managers.
///
/// Create one with the gateway to the task managers, submit the job with
/// [`StreamEnvironment::submit_remote`](crate::StreamEnvironment::submit_remote), and feed it
/// what task managers send ([`up`](Self::up)) and which of them were lost
/// ([`task_manager_lost`](Self::task_manager_lost)).
pub struct RemoteTasks {
    gateway: Arc<dyn TaskManagerGateway>,
    epoch: u64,
    written: Arc<WrittenStates>,
    slots: Mutex<HashMap<usize, Slot>>,
    /// The job master's copy of each remote operator subtask's counters, with its attempt.
    metrics: Mutex<HashMap<(NodeId, usize), Mirror>>,
}

impl std::fmt::Debug for RemoteTasks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteTasks")
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl RemoteTasks {
    /// Stand-ins deploying through `gateway`, for the job master of epoch `epoch`.
    pub fn new(gateway: Arc<dyn TaskManagerGateway>, epoch: u64) -> Arc<Self> {
        Arc::new(RemoteTasks {
            gateway,
            epoch,
            written: Arc::default(),
            slots: Mutex::new(HashMap::new()),
            metrics: Mutex::new(HashMap::new()),
        })
    }

    /// The job master's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Hands over what a task manager sent for one task. Returns `false` when it was dropped
    /// (another epoch, or an attempt that is not running).
    pub async fn up(&self, up: Up) -> bool {
        if up.epoch != self.epoch {
            return false;
        }
        if let UpKind::Metrics(all) = &up.kind {
            let metrics = lock(&self.metrics);
            for m in all {
                if let Some((attempt, mine)) = metrics.get(&(m.node, m.subtask))
                    && *attempt == up.attempt
                {
                    mine.mirror(m);
                }
            }
            return true;
        }
        match self.route(up) {
            Some(Route::Report(tx, r)) => tx.send(r).await.is_ok(),
            Some(Route::Coordinator(tx, e)) => tx.send(e).await.is_ok(),
            Some(Route::End(tx, r)) => tx.send(r).is_ok(),
            None => false,
        }
    }

    /// Where what a task manager sent for one task goes, or `None` when it is dropped (rule 3).
    fn route(&self, up: Up) -> Option<Route> {
        let mut slots = lock(&self.slots);
        let slot = slots.get_mut(&up.task)?;
        if slot.attempt != up.attempt {
            return None;
        }
        match up.kind {
            UpKind::Ended(r) => {
                let end = slot.end.take()?;
                Some(Route::End(end, r.map_err(|e| e.into_task_error())))
            }
            UpKind::ToCoordinator {
                node,
                subtask,
                event,
            } => {
                if !slot.subtasks.contains(&(node, subtask)) {
                    return None;
                }
                let event = ToCoordinator {
                    node,
                    subtask,
                    attempt: up.attempt,
                    event,
                };
                Some(Route::Coordinator(slot.to_coordinator.clone(), event))
            }
            kind => {
                if let UpKind::Ack {
                    checkpoint,
                    written,
                    uploaded_bytes,
                    ..
                } = &kind
                    && !written.is_empty()
                {
                    self.written
                        .add(*checkpoint, written.clone(), *uploaded_bytes);
                }
                let report = kind.into_report(up.task)?;
                let report = AttemptReport {
                    attempt: up.attempt,
                    report,
                };
                Some(Route::Report(slot.reports.clone(), report))
            }
        }
    }

    /// Task manager `tm` is gone: every task placed on it fails with `reason`.
    pub fn task_manager_lost(&self, tm: &str, reason: &str) {
        let mut slots = lock(&self.slots);
        for slot in slots.values_mut() {
            if slot.tm.as_deref() == Some(tm)
                && let Some(end) = slot.end.take()
            {
                let _ = end.send(Err(TaskError::Internal(format!(
                    "task manager '{tm}' was lost: {reason}"
                ))));
            }
        }
    }

    /// The job master's copies of the counters of `plan`'s operator subtasks, which what task
    /// managers report lands in: `running`'s where it has them (a region deployed into a
    /// running attempt), fresh ones otherwise.
    fn mirror_metrics(
        &self,
        inputs: &DeployInputs<'_>,
        plan: &DeploymentPlan,
        running: Option<&MetricsRegistry>,
    ) -> MetricsRegistry {
        let mut registry = MetricsRegistry::default();
        let mut mirrors = lock(&self.metrics);
        for &(node, s) in plan.mailboxes.keys() {
            let name = &inputs.graph.nodes[node.0].name;
            let m = registry.reuse_or_register(running, node, name, s);
            mirrors.insert((node, s), (plan.attempt, m));
        }
        registry
    }

    /// Registers where what task managers send for `task` of `attempt` goes (rule 2); the
    /// receiver of its end.
    fn register(
        &self,
        inputs: &DeployInputs<'_>,
        task: &PlannedTask,
        attempt: AttemptNumber,
    ) -> oneshot::Receiver<Result<(), TaskError>> {
        let (end_tx, end) = oneshot::channel();
        lock(&self.slots).insert(
            task.index,
            Slot {
                attempt,
                tm: None,
                reports: inputs.reports_tx.clone(),
                to_coordinator: inputs.to_coordinator_tx.clone(),
                end: Some(end_tx),
                subtasks: task.subtasks().collect(),
            },
        );
        end
    }

    fn placed(&self, task: usize, attempt: AttemptNumber, tm: &str) {
        if let Some(slot) = lock(&self.slots).get_mut(&task)
            && slot.attempt == attempt
        {
            slot.tm = Some(tm.to_string());
        }
    }
}

/// How long a job whose tasks run on task managers waits for a failure's root cause when the
/// first failure to arrive is a consequence (a task that lost its peer): the root cause's report
/// travels from another task manager and may be a few messages behind.
const REMOTE_ROOT_CAUSE_GRACE: Duration = Duration::from_secs(1);

/// Deploys a job's tasks to task managers: every planned task becomes a [`Proxy`], and the
/// tasks planned together are placed and sent together as one [`Batch`] (see the module's
/// rules).
pub(crate) struct RemoteDeployer(pub(crate) Arc<RemoteTasks>);

impl Deployer for RemoteDeployer {
    fn deploy(
        &self,
        inputs: &DeployInputs<'_>,
        mut plan: DeploymentPlan,
        running: Option<&MetricsRegistry>,
    ) -> Result<Deployment, JobError> {
        let remote = &self.0;
        let metrics = remote.mirror_metrics(inputs, &plan, running);
        let attempt = plan.attempt;
        let planned = std::mem::take(&mut plan.tasks);
        let (mut controls, mut source_tasks, mut proxies) = (Vec::new(), Vec::new(), Vec::new());
        let mut batch_tasks = BTreeMap::new();
        for task in &planned {
            let states = task
                .subtasks()
                .filter_map(|(node, s)| plan.take_state(node, s).map(|st| (node, s, st)))
                .collect();
            batch_tasks.insert(task.index, (task.subtask, states));
            if task.source {
                source_tasks.push(task.index);
            }
            let (control_tx, control) = mpsc::channel(CONTROL_CAPACITY);
            controls.push((task.index, control_tx));
            let end = remote.register(inputs, task, attempt);
            proxies.push((task.index, task.description.clone(), control, end));
        }
        let batch = Arc::new(Batch {
            remote: remote.clone(),
            fingerprint: inputs.graph.fingerprint(),
            attempt,
            needed: inputs.plan.parallelism.iter().copied().max().unwrap_or(0),
            tasks: batch_tasks,
            restored_from: plan.restored_from,
            restored_at: plan.restored_at.clone(),
            max_concurrent_checkpoints: inputs.max_concurrent_checkpoints,
            placed: OnceCell::new(),
        });
        let tasks = proxies
            .into_iter()
            .map(|(index, description, control, end)| DeployedTask {
                index,
                description,
                task: Box::new(Proxy {
                    index,
                    attempt,
                    batch: batch.clone(),
                    control,
                    end,
                }),
            })
            .collect();
        Ok(Deployment {
            tasks,
            metrics,
            node_mailboxes: node_mailboxes(&plan, &controls),
            controls,
            source_tasks,
        })
    }

    fn root_cause_grace(&self) -> Option<Duration> {
        Some(REMOTE_ROOT_CAUSE_GRACE)
    }

    fn written_states(&self) -> Option<Arc<WrittenStates>> {
        Some(self.0.written.clone())
    }
}

/// The tasks deployed together, placed once.
struct Batch {
    remote: Arc<RemoteTasks>,
    fingerprint: String,
    attempt: AttemptNumber,
    /// Slots the whole job needs (its largest parallelism).
    needed: usize,
    /// Each task's subtask index and restored state.
    tasks: BTreeMap<usize, (usize, Vec<SubtaskShare>)>,
    restored_from: Option<CheckpointId>,
    restored_at: Option<std::path::PathBuf>,
    max_concurrent_checkpoints: Option<usize>,
    placed: OnceCell<BTreeMap<usize, String>>,
}

impl Batch {
    /// Where each task of the batch runs, placing and deploying the batch on the first call.
    async fn place(&self) -> Result<&BTreeMap<usize, String>, TaskError> {
        self.placed
            .get_or_try_init(|| async {
                let gateway = &self.remote.gateway;
                let tms = gateway
                    .wait_for_slots(self.needed)
                    .await
                    .map_err(TaskError::Internal)?;
                let offered: Vec<(String, u32)> =
                    tms.iter().map(|t| (t.name.clone(), t.slots)).collect();
                let owners = slot_owners(self.needed, &offered)
                    .map_err(|e| TaskError::Internal(e.to_string()))?;
                let mut placement = BTreeMap::new();
                for (&t, (s, _)) in &self.tasks {
                    let tm = owners.get(*s).ok_or_else(|| {
                        TaskError::Internal(format!("subtask {s} of task {t} has no slot"))
                    })?;
                    placement.insert(t, tm.clone());
                }
                let peers: BTreeMap<String, String> = tms
                    .iter()
                    .filter(|t| placement.values().any(|p| *p == t.name))
                    .map(|t| (t.name.clone(), t.data_address.clone()))
                    .collect();
                let on: BTreeSet<&String> = placement.values().collect();
                let mut handles = 0;
                for tm in on {
                    let tasks: Vec<usize> = placement
                        .iter()
                        .filter(|(_, p)| *p == tm)
                        .map(|(t, _)| *t)
                        .collect();
                    // A state stored in checkpoint storage goes as its handle (a stub), which
                    // the task manager resolves: no state's entries cross the job master.
                    let (mut states, mut deferred) = (Vec::new(), Vec::new());
                    for (node, subtask, state) in tasks.iter().flat_map(|t| &self.tasks[t].1) {
                        match state.stub() {
                            Some(mut stub) => {
                                if let Some(d) = stub.take_deferred() {
                                    deferred.push((*node, *subtask, d));
                                }
                                states.push((*node, *subtask, stub));
                            }
                            None => states.push((*node, *subtask, state.clone())),
                        }
                    }
                    handles += deferred.len();
                    let deployment = WireDeployment {
                        fingerprint: self.fingerprint.clone(),
                        epoch: self.remote.epoch,
                        attempt: self.attempt,
                        placement: placement.clone(),
                        peers: peers.clone(),
                        tasks: tasks.clone(),
                        states,
                        deferred,
                        restored_from: self.restored_from,
                        restored_at: self.restored_at.clone(),
                        max_concurrent_checkpoints: self.max_concurrent_checkpoints,
                    };
                    for &t in &tasks {
                        self.remote.placed(t, self.attempt, tm);
                    }
                    gateway.deploy(tm, deployment).await.map_err(|e| {
                        TaskError::Internal(format!("deploying to task manager '{tm}' failed: {e}"))
                    })?;
                }
                tracing::info!(
                    attempt = self.attempt,
                    tasks = placement.len(),
                    state_handles = handles,
                    "tasks deployed to task managers"
                );
                Ok(placement)
            })
            .await
    }
}

/// The job master's stand-in for one task.
struct Proxy {
    index: usize,
    attempt: AttemptNumber,
    batch: Arc<Batch>,
    control: mpsc::Receiver<TaskControl>,
    end: oneshot::Receiver<Result<(), TaskError>>,
}

/// Cancels a task on its task manager unless disarmed (the proxy was aborted).
struct CancelOnDrop {
    remote: Option<(Arc<RemoteTasks>, String)>,
    attempt: AttemptNumber,
    task: usize,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some((remote, tm)) = self.remote.take() else {
            return;
        };
        let (attempt, task) = (self.attempt, self.task);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let epoch = remote.epoch;
                if let Err(e) = remote.gateway.cancel(&tm, epoch, attempt, vec![task]).await {
                    tracing::debug!(task, %tm, error = %e, "could not cancel a task");
                }
            });
        }
    }
}

impl RunnableTask for Proxy {
    fn run(self: Box<Self>) -> Started {
        let Proxy {
            index,
            attempt,
            batch,
            mut control,
            mut end,
        } = *self;
        Started::on_the_workers(Box::pin(async move {
            let placement = batch.place().await?;
            let tm = placement
                .get(&index)
                .cloned()
                .ok_or_else(|| TaskError::Internal(format!("task {index} was not placed")))?;
            let remote = batch.remote.clone();
            let mut guard = CancelOnDrop {
                remote: Some((remote.clone(), tm.clone())),
                attempt,
                task: index,
            };
            let mut mailbox_open = true;
            loop {
                tokio::select! {
                    biased;
                    ended = &mut end => {
                        guard.remote = None;
                        return ended.unwrap_or_else(|_| Err(TaskError::Internal(format!(
                            "task {index} lost its place on the job master"
                        ))));
                    }
                    msg = control.recv(), if mailbox_open => {
                        let Some(msg) = msg else {
                            mailbox_open = false;
                            continue;
                        };
                        let control = Control {
                            epoch: remote.epoch,
                            attempt,
                            task: index,
                            kind: msg,
                        };
                        remote.gateway.control(&tm, control).await.map_err(|e| {
                            TaskError::Internal(format!(
                                "task manager '{tm}' did not take a message for task {index}: {e}"
                            ))
                        })?;
                    }
                }
            }
        }))
    }
}
