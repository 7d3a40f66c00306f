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

use crate::checkpoint::CompletedCheckpoint;
use crate::checkpoint::persistence::WrittenStates;
use crate::cluster::TransportError;
use crate::cluster::placement::slot_owners;
use crate::cluster::wire::{Control, Deployment as WireDeployment, Up, UpKind};
use crate::error::{JobError, TaskError};
use crate::graph::NodeKind;
use crate::graph::erased::RunnableTask;
use crate::job::deploy::{
    CONTROL_CAPACITY, DeployInputs, DeployedTask, Deployment, MetricsRegistry, Scope,
    restored_shares,
};
use crate::metrics::OperatorMetrics;
use crate::operator::to_coordinator::ToCoordinator;
use crate::state::OperatorState;
use crate::task::control::{AttemptReport, TaskControl};
use futures::future::BoxFuture;
use sluice_core::sync::lock;
use sluice_core::{AttemptNumber, CheckpointId, NodeId};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
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

    /// The state files task managers wrote themselves, for the job's persistence.
    pub(crate) fn written_states(&self) -> Arc<WrittenStates> {
        self.written.clone()
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
        enum Route {
            Report(mpsc::Sender<AttemptReport>, AttemptReport),
            Coordinator(mpsc::Sender<ToCoordinator>, ToCoordinator),
            End(
                oneshot::Sender<Result<(), TaskError>>,
                Result<(), TaskError>,
            ),
        }
        let route = {
            let mut slots = lock(&self.slots);
            let Some(slot) = slots.get_mut(&up.task) else {
                return false;
            };
            if slot.attempt != up.attempt {
                return false;
            }
            match up.kind {
                UpKind::Ended(r) => match slot.end.take() {
                    Some(end) => Route::End(end, r.map_err(|e| e.into_task_error())),
                    None => return false,
                },
                UpKind::ToCoordinator {
                    node,
                    subtask,
                    event,
                } => {
                    if !slot.subtasks.contains(&(node, subtask)) {
                        return false;
                    }
                    Route::Coordinator(
                        slot.to_coordinator.clone(),
                        ToCoordinator {
                            node,
                            subtask,
                            attempt: up.attempt,
                            event,
                        },
                    )
                }
                kind => {
                    if let UpKind::Ack {
                        checkpoint,
                        written,
                        ..
                    } = &kind
                        && !written.is_empty()
                    {
                        self.written.add(*checkpoint, written.clone());
                    }
                    match kind.into_report(up.task) {
                        Some(report) => Route::Report(
                            slot.reports.clone(),
                            AttemptReport {
                                attempt: up.attempt,
                                report,
                            },
                        ),
                        None => return false,
                    }
                }
            }
        };
        match route {
            Route::Report(tx, r) => tx.send(r).await.is_ok(),
            Route::Coordinator(tx, e) => tx.send(e).await.is_ok(),
            Route::End(tx, r) => tx.send(r).is_ok(),
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

    /// Builds the proxies of the tasks in `scope` (see the module's rules).
    pub(crate) fn deploy(
        self: &Arc<Self>,
        inputs: &DeployInputs<'_>,
        scope: Scope<'_>,
        attempt: AttemptNumber,
        restore: Option<&CompletedCheckpoint>,
    ) -> Result<Deployment, JobError> {
        let DeployInputs {
            graph,
            plan,
            config,
            max_concurrent_checkpoints,
            reports_tx,
            to_coordinator_tx,
            ..
        } = *inputs;
        let tasks: Vec<usize> = match &scope {
            Scope::All => (0..plan.task_count()).collect(),
            Scope::Region { tasks, .. } => tasks.iter().copied().collect(),
            Scope::Remote(_) => {
                return Err(JobError::Internal(
                    "a job master cannot deploy a task manager's scope".into(),
                ));
            }
        };
        let mut shares = restored_shares(graph, plan, config, restore)?;
        let mut registry = MetricsRegistry::default();
        {
            let mut mirrors = lock(&self.metrics);
            for &t in &tasks {
                for (node, s) in plan.task_subtasks(t) {
                    let m = match &scope {
                        Scope::Region { metrics, .. } => metrics.get(node, s),
                        _ => None,
                    }
                    .unwrap_or_else(|| registry.register(node, &graph.nodes[node.0].name, s));
                    mirrors.insert((node, s), (attempt, m));
                }
            }
        }
        let needed = plan.parallelism.iter().copied().max().unwrap_or(0);
        let mut batch_tasks = BTreeMap::new();
        let mut controls = Vec::new();
        let mut node_mailboxes = BTreeMap::new();
        let mut source_tasks = Vec::new();
        let mut proxies = Vec::new();
        for &t in &tasks {
            let subtasks = plan.task_subtasks(t);
            let Some(&(head, s)) = subtasks.first() else {
                return Err(JobError::Internal(format!("task {t} runs no operator")));
            };
            let mut states = Vec::new();
            for &(node, s) in &subtasks {
                if let Some(state) = shares[node.0][s].take() {
                    states.push((node, s, state));
                }
            }
            if matches!(graph.nodes[head.0].kind, NodeKind::Source(_)) {
                source_tasks.push(t);
            }
            let (control_tx, control) = mpsc::channel(CONTROL_CAPACITY);
            for &(node, s) in &subtasks {
                node_mailboxes.insert((node, s), control_tx.clone());
            }
            controls.push((t, control_tx));
            let (end_tx, end) = oneshot::channel();
            lock(&self.slots).insert(
                t,
                Slot {
                    attempt,
                    tm: None,
                    reports: reports_tx.clone(),
                    to_coordinator: to_coordinator_tx.clone(),
                    end: Some(end_tx),
                    subtasks: subtasks.clone(),
                },
            );
            let names: Vec<&str> = subtasks
                .iter()
                .map(|(n, _)| graph.nodes[n.0].name.as_str())
                .collect();
            let p = plan.parallelism[head.0];
            batch_tasks.insert(t, (s, states));
            proxies.push((
                t,
                format!("task '{}', subtask {s} of {p}", names.join(" -> ")),
                control,
                end,
            ));
        }
        let batch = Arc::new(Batch {
            remote: self.clone(),
            fingerprint: graph.fingerprint(),
            attempt,
            needed,
            tasks: batch_tasks,
            restored_from: restore.map(|c| c.id),
            max_concurrent_checkpoints,
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
            metrics: registry,
            controls,
            source_tasks,
            node_mailboxes,
            pumps: Vec::new(),
        })
    }

    fn placed(&self, task: usize, attempt: AttemptNumber, tm: &str) {
        if let Some(slot) = lock(&self.slots).get_mut(&task)
            && slot.attempt == attempt
        {
            slot.tm = Some(tm.to_string());
        }
    }
}

/// One operator subtask's restored state.
type SubtaskShare = (NodeId, usize, OperatorState);

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
                for tm in on {
                    let tasks: Vec<usize> = placement
                        .iter()
                        .filter(|(_, p)| *p == tm)
                        .map(|(t, _)| *t)
                        .collect();
                    let states = tasks
                        .iter()
                        .flat_map(|t| self.tasks[t].1.iter().cloned())
                        .collect();
                    let deployment = WireDeployment {
                        fingerprint: self.fingerprint.clone(),
                        epoch: self.remote.epoch,
                        attempt: self.attempt,
                        placement: placement.clone(),
                        peers: peers.clone(),
                        tasks: tasks.clone(),
                        states,
                        restored_from: self.restored_from,
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
    fn run(self: Box<Self>) -> BoxFuture<'static, Result<(), TaskError>> {
        let Proxy {
            index,
            attempt,
            batch,
            mut control,
            mut end,
        } = *self;
        Box::pin(async move {
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
        })
    }
}
