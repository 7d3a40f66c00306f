//! Deployment: turn a planned graph into typed tasks connected by bounded channels.
//!
//! [`deploy`] builds every task of an attempt, or, after a region failure, only the tasks of one
//! pipelined region ([`Scope::Region`]): the channels between them (a region has no channel to
//! another, by definition), their restored state, and their mailboxes, reporting into the
//! channels the running attempt already reads and counting into its metrics.

use crate::checkpoint::CompletedCheckpoint;
use crate::cluster::DataPlane;
use crate::cluster::wire::ChannelKey;
use crate::error::JobError;
use crate::graph::erased::Pump;
use crate::graph::erased::{AnyBox, RunnableTask, TaskParts};
use crate::graph::{NodeKind, StreamGraph};
use crate::job::JobConfig;
use crate::job::plan::Plan;
use crate::metrics::{JobMetrics, OperatorMetrics, SubtaskMetrics};
use crate::operator::to_coordinator::{
    CoordinatorLink, DirectSlot, TO_COORDINATOR_CAPACITY, ToCoordinator,
};
use crate::operator::{ContextParts, OperatorContext};
use crate::state::{OperatorState, redistribute};
use crate::task::control::{AttemptReport, TaskControl, TaskMailbox};
use sluice_core::{AttemptNumber, NodeId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Live metrics of every operator subtask of a running job.
#[derive(Default)]
pub(crate) struct MetricsRegistry {
    entries: Vec<(NodeId, String, usize, Arc<OperatorMetrics>)>,
}

impl MetricsRegistry {
    /// Registers fresh counters for operator `node` (named `name`), subtask `subtask`.
    pub(crate) fn register(
        &mut self,
        node: NodeId,
        name: &str,
        subtask: usize,
    ) -> Arc<OperatorMetrics> {
        let m = Arc::new(OperatorMetrics::default());
        self.entries
            .push((node, name.to_string(), subtask, m.clone()));
        m
    }

    /// The counters of operator `node`'s subtask `subtask`, if registered.
    pub(crate) fn get(&self, node: NodeId, subtask: usize) -> Option<Arc<OperatorMetrics>> {
        self.entries
            .iter()
            .find(|(id, _, s, _)| *id == node && *s == subtask)
            .map(|(_, _, _, m)| m.clone())
    }

    pub(crate) fn snapshot(&self) -> JobMetrics {
        JobMetrics {
            subtasks: self
                .entries
                .iter()
                .map(|(id, name, s, m)| SubtaskMetrics::read(*id, name, *s, m))
                .collect(),
        }
    }
}

/// A task ready to spawn, with a human-readable description.
pub(crate) struct DeployedTask {
    /// Its index (chain by chain, subtask by subtask), as the planner and the regions number it.
    pub(crate) index: usize,
    pub(crate) description: String,
    pub(crate) task: Box<dyn RunnableTask>,
}

/// Everything deployment built: the tasks and the master's ends of their mailboxes.
pub(crate) struct Deployment {
    pub(crate) tasks: Vec<DeployedTask>,
    /// The counters of the deployed subtasks (a fresh registry for a whole attempt; for a
    /// region, the running attempt's counters are reused and this is empty).
    pub(crate) metrics: MetricsRegistry,
    /// The control sender of each deployed task, in task order.
    pub(crate) controls: Vec<(usize, mpsc::Sender<TaskControl>)>,
    /// The indices of the deployed tasks that run sources.
    pub(crate) source_tasks: Vec<usize>,
    /// The mailbox of the task running each deployed (operator, subtask).
    pub(crate) node_mailboxes: BTreeMap<(NodeId, usize), mpsc::Sender<TaskControl>>,
    /// On a task manager: the futures that carry the channels crossing to other processes,
    /// with the task each belongs to and whether it sends (`true`) or receives.
    pub(crate) pumps: Vec<(usize, Pump, bool)>,
}

/// How the channels of a deployment on a task manager reach the other task managers.
pub(crate) struct RemoteWiring {
    /// The tasks this process runs.
    pub(crate) here: BTreeSet<usize>,
    /// The task manager of every task of the batch.
    pub(crate) placement: BTreeMap<usize, String>,
    /// The data-plane address of every task manager.
    pub(crate) peers: BTreeMap<String, String>,
    pub(crate) plane: Arc<dyn DataPlane>,
    pub(crate) epoch: u64,
}

impl RemoteWiring {
    /// The task manager of `task` and its data-plane address.
    fn peer(&self, task: usize) -> Result<(String, String), JobError> {
        let tm = self.placement.get(&task).ok_or_else(|| {
            JobError::Internal(format!("task {task} has no place in the deployment"))
        })?;
        let addr = self.peers.get(tm).ok_or_else(|| {
            JobError::Internal(format!("task manager '{tm}' has no data address"))
        })?;
        Ok((tm.clone(), addr.clone()))
    }
}

/// The master's ends of the channels every task of an attempt reports into.
pub(crate) struct MasterChannels {
    pub(crate) reports_tx: mpsc::Sender<AttemptReport>,
    pub(crate) reports: mpsc::Receiver<AttemptReport>,
    pub(crate) to_coordinator_tx: mpsc::Sender<ToCoordinator>,
    pub(crate) to_coordinators: mpsc::Receiver<ToCoordinator>,
}

impl MasterChannels {
    /// Channels for `tasks` tasks with up to `max_concurrent_checkpoints` pending checkpoints.
    ///
    /// Tasks never wait to report: each sends at most one report per pending checkpoint and one
    /// "finished" report. The channel holds that twice over, so that reports of a region's
    /// stopped attempt still queued when its new attempt starts never make a live task wait.
    pub(crate) fn new(tasks: usize, max_concurrent_checkpoints: Option<usize>) -> Self {
        let per_task = max_concurrent_checkpoints.unwrap_or(1) + 2;
        let (reports_tx, reports) = mpsc::channel(2 * tasks.max(1) * per_task + 1);
        let (to_coordinator_tx, to_coordinators) = mpsc::channel(TO_COORDINATOR_CAPACITY);
        MasterChannels {
            reports_tx,
            reports,
            to_coordinator_tx,
            to_coordinators,
        }
    }
}

/// Which tasks to deploy.
pub(crate) enum Scope<'a> {
    /// Every task, for a new attempt of the whole job.
    All,
    /// The tasks of one pipelined region, counting into the running attempt's metrics.
    Region {
        tasks: &'a BTreeSet<usize>,
        metrics: &'a MetricsRegistry,
    },
    /// The tasks a task manager runs, with fresh metrics, their channels to other processes
    /// through the wiring's data plane.
    Remote(&'a RemoteWiring),
}

impl Scope<'_> {
    fn includes(&self, task: usize) -> bool {
        match self {
            Scope::All => true,
            Scope::Region { tasks, .. } => tasks.contains(&task),
            Scope::Remote(w) => w.here.contains(&task),
        }
    }
}

/// Where the restored state comes from.
pub(crate) enum Restore<'a> {
    /// A checkpoint, split over the subtasks here.
    Checkpoint(Option<&'a CompletedCheckpoint>),
    /// Shares the job master split already.
    Shares(Vec<(NodeId, usize, OperatorState)>),
}

/// Messages one task's mailbox holds before the master waits.
pub(crate) const CONTROL_CAPACITY: usize = 16;

/// Hands each operator subtask its share of the restored state.
pub(crate) fn restored_shares(
    graph: &StreamGraph,
    plan: &Plan,
    config: &JobConfig,
    restore: Option<&CompletedCheckpoint>,
) -> Result<Vec<Vec<Option<OperatorState>>>, JobError> {
    let mut shares: Vec<Vec<Option<OperatorState>>> = graph
        .nodes
        .iter()
        .map(|n| (0..plan.parallelism[n.id.0]).map(|_| None).collect())
        .collect();
    let Some(restore) = restore else {
        return Ok(shares);
    };
    for (id, old) in restore.operators.iter() {
        let Some(node) = graph.nodes.get(id.0) else {
            return Err(JobError::InvalidJob(format!(
                "checkpoint {} holds state of operator {id}, which this job does not have",
                restore.id
            )));
        };
        let p = plan.parallelism[id.0];
        if matches!(&node.kind, NodeKind::Source(f) if !f.rescalable()) && old.len() != p {
            return Err(JobError::InvalidJob(format!(
                "source '{}' ({id}) was checkpointed at parallelism {} and cannot be restored at \
                 parallelism {p}; keep the source's parallelism (rescale the operators after it)",
                node.name,
                old.len()
            )));
        }
        let split = redistribute(old.clone(), p, config.max_parallelism);
        for (s, st) in split.into_iter().enumerate() {
            shares[id.0][s] = Some(st);
        }
    }
    Ok(shares)
}

/// What every deployment needs besides its scope.
pub(crate) struct DeployInputs<'a> {
    pub(crate) graph: &'a StreamGraph,
    pub(crate) plan: &'a Plan,
    pub(crate) config: &'a JobConfig,
    /// With checkpointing: how many checkpoints may be in progress at once.
    pub(crate) max_concurrent_checkpoints: Option<usize>,
    pub(crate) direct_slots: &'a BTreeMap<NodeId, DirectSlot>,
    pub(crate) reports_tx: &'a mpsc::Sender<AttemptReport>,
    pub(crate) to_coordinator_tx: &'a mpsc::Sender<ToCoordinator>,
}

/// Builds the tasks in `scope` for `attempt`, restoring `restore` if given.
pub(crate) fn deploy(
    inputs: &DeployInputs<'_>,
    scope: Scope<'_>,
    attempt: AttemptNumber,
    restore: Restore<'_>,
) -> Result<Deployment, JobError> {
    let DeployInputs {
        graph,
        plan,
        config,
        max_concurrent_checkpoints,
        direct_slots,
        reports_tx,
        to_coordinator_tx,
    } = *inputs;
    let checkpointing = max_concurrent_checkpoints.is_some();
    let mut shares = match restore {
        Restore::Checkpoint(c) => restored_shares(graph, plan, config, c)?,
        Restore::Shares(list) => {
            let mut shares = restored_shares(graph, plan, config, None)?;
            for (node, s, state) in list {
                let slot = shares
                    .get_mut(node.0)
                    .and_then(|n| n.get_mut(s))
                    .ok_or_else(|| {
                        JobError::Internal(format!(
                            "restored state for subtask {s} of operator {node}, which this job \
                             does not have"
                        ))
                    })?;
                *slot = Some(state);
            }
            shares
        }
    };
    let mut pumps = Vec::new();
    let mut node_mailboxes = BTreeMap::new();
    let mut controls = Vec::new();
    let mut source_tasks = Vec::new();
    // The task of each (node, subtask): chain by chain, subtask by subtask.
    let mut first_task = vec![0; graph.nodes.len()];
    let mut next = 0;
    for chain in &plan.chains {
        for id in chain {
            first_task[id.0] = next;
        }
        next += chain.first().map_or(0, |h| plan.parallelism[h.0]);
    }
    let included = |node: NodeId, s: usize| scope.includes(first_task[node.0] + s);
    // Contexts and metrics, per node and subtask (`None` outside the scope).
    let mut registry = MetricsRegistry::default();
    let contexts: Vec<Vec<Option<OperatorContext>>> = graph
        .nodes
        .iter()
        .map(|n| {
            let p = plan.parallelism[n.id.0];
            (0..p)
                .map(|s| {
                    if !included(n.id, s) {
                        return None;
                    }
                    let m = match &scope {
                        Scope::Region { metrics, .. } => metrics.get(n.id, s),
                        Scope::All | Scope::Remote(_) => None,
                    };
                    let m = m.unwrap_or_else(|| {
                        let m = Arc::new(OperatorMetrics::default());
                        registry.entries.push((n.id, n.name.clone(), s, m.clone()));
                        m
                    });
                    Some(OperatorContext::new(ContextParts {
                        operator_id: n.id,
                        operator_name: n.name.clone(),
                        subtask_index: s,
                        parallelism: p,
                        max_parallelism: config.max_parallelism,
                        attempt_number: attempt,
                        metrics: m,
                        checkpointing,
                        to_coordinator: n.coordinator.as_ref().map(|_| CoordinatorLink {
                            master: to_coordinator_tx.clone(),
                            direct: direct_slots.get(&n.id).cloned().unwrap_or_default(),
                        }),
                    }))
                })
                .collect()
        })
        .collect();
    let context = |node: NodeId, s: usize| -> Result<OperatorContext, JobError> {
        contexts[node.0][s].clone().ok_or_else(|| {
            JobError::Internal(format!(
                "subtask {s} of operator {node} is deployed but outside the deployed region"
            ))
        })
    };

    // Channels of every network edge: senders[edge][producer subtask] and
    // receivers[node][consumer subtask], in input-edge order.
    let mut senders: Vec<Vec<Vec<AnyBox>>> = Vec::with_capacity(graph.edges.len());
    let mut receivers: Vec<Vec<Vec<AnyBox>>> = graph
        .nodes
        .iter()
        .map(|n| (0..plan.parallelism[n.id.0]).map(|_| Vec::new()).collect())
        .collect();
    for (e, edge) in graph.edges.iter().enumerate() {
        let pf = plan.parallelism[edge.from.0];
        let pt = plan.parallelism[edge.to.0];
        let mut per_producer: Vec<Vec<AnyBox>> = (0..pf).map(|_| Vec::new()).collect();
        if !plan.chained[e] {
            let ops = &graph.nodes[edge.from.0].out_ops;
            let pointwise = plan.is_pointwise(edge);
            for (i, producer) in per_producer.iter_mut().enumerate() {
                // Subtask i feeds subtask i only on a pointwise edge (one channel each, so
                // that no channel ties two pipelined regions together); every subtask
                // otherwise (a region holds every subtask on both sides or none).
                let consumers = if pointwise { i..i + 1 } else { 0..pt };
                for (j, consumer) in receivers[edge.to.0]
                    .iter_mut()
                    .enumerate()
                    .take(consumers.end)
                    .skip(consumers.start)
                {
                    let Scope::Remote(wiring) = &scope else {
                        if !included(edge.from, i) {
                            break;
                        }
                        let (tx, rx) = ops.channel(config.channel_capacity);
                        producer.push(tx);
                        consumer.push(rx);
                        continue;
                    };
                    let (pt_task, ct_task) =
                        (first_task[edge.from.0] + i, first_task[edge.to.0] + j);
                    let (p_here, c_here) = (
                        wiring.here.contains(&pt_task),
                        wiring.here.contains(&ct_task),
                    );
                    if !p_here && !c_here {
                        continue;
                    }
                    let (tx, rx) = ops.channel(config.channel_capacity);
                    let key = ChannelKey {
                        epoch: wiring.epoch,
                        attempt,
                        edge: u32::try_from(e).unwrap_or(u32::MAX),
                        producer: u32::try_from(i).unwrap_or(u32::MAX),
                        consumer: u32::try_from(j).unwrap_or(u32::MAX),
                    };
                    let what = format!(
                        "channel {e}:{i}->{j} ('{}' to '{}')",
                        graph.nodes[edge.from.0].name, graph.nodes[edge.to.0].name
                    );
                    match (p_here, c_here) {
                        (true, true) => {
                            producer.push(tx);
                            consumer.push(rx);
                        }
                        (true, false) => {
                            let (tm, addr) = wiring.peer(ct_task)?;
                            let out = wiring.plane.sender(&tm, &addr, key.id());
                            pumps.push((pt_task, ops.send_pump(rx, out, what)?, true));
                            producer.push(tx);
                        }
                        _ => {
                            let (tm, addr) = wiring.peer(pt_task)?;
                            let input = wiring.plane.receiver(&tm, &addr, key.id());
                            pumps.push((ct_task, ops.receive_pump(input, tx, what)?, false));
                            consumer.push(rx);
                        }
                    }
                }
            }
        }
        senders.push(per_producer);
    }

    let mut tasks = Vec::new();
    for chain in &plan.chains {
        let (Some(&head), Some(&tail)) = (chain.first(), chain.last()) else {
            continue;
        };
        let p = plan.parallelism[head.0];
        let names: Vec<&str> = chain
            .iter()
            .map(|id| graph.nodes[id.0].name.as_str())
            .collect();
        let chain_name = names.join(" -> ");
        for s in 0..p {
            let task_index = first_task[head.0] + s;
            if !scope.includes(task_index) {
                continue;
            }
            let tail_node = &graph.nodes[tail.0];
            let mut outs = Vec::with_capacity(tail_node.outputs.len());
            for &e in &tail_node.outputs {
                let tx = std::mem::take(&mut senders[e][s]);
                outs.push(graph.edges[e].writer.build_writer(
                    tx,
                    context(tail, s)?,
                    config.batch_size,
                    config.max_parallelism,
                )?);
            }
            let mut next = match outs.len() {
                0 => tail_node.out_ops.null_stage(),
                1 => outs
                    .pop()
                    .ok_or_else(|| JobError::Internal("lost a writer".into()))?,
                _ => tail_node.out_ops.tee_stage(outs)?,
            };
            for id in chain.iter().rev() {
                if let NodeKind::Operator(f) = &graph.nodes[id.0].kind {
                    let restored = shares[id.0][s].take();
                    next = f.build_stage(context(*id, s)?, next, restored)?;
                }
            }
            let (control_tx, control) = mpsc::channel(CONTROL_CAPACITY);
            for id in chain {
                node_mailboxes.insert((*id, s), control_tx.clone());
            }
            controls.push((task_index, control_tx));
            let mailbox = TaskMailbox {
                task: task_index,
                attempt,
                control,
                reports: reports_tx.clone(),
                checkpointing,
            };
            let parts = TaskParts {
                metrics: chain
                    .iter()
                    .map(|id| context(*id, s).map(|c| c.metrics().clone()))
                    .collect::<Result<_, _>>()?,
                description: format!("task '{chain_name}', subtask {s} of {p}"),
                batch_size: config.batch_size,
                mailbox,
            };
            let description = parts.description.clone();
            let task = match &graph.nodes[head.0].kind {
                NodeKind::Source(f) => {
                    source_tasks.push(task_index);
                    let restored = shares[head.0][s].take();
                    f.build_task(context(head, s)?, next, parts, restored)?
                }
                NodeKind::Operator(f) => {
                    let rx = std::mem::take(&mut receivers[head.0][s]);
                    f.build_task(rx, next, parts)?
                }
            };
            tasks.push(DeployedTask {
                index: task_index,
                description,
                task,
            });
        }
    }
    Ok(Deployment {
        tasks,
        metrics: registry,
        controls,
        source_tasks,
        node_mailboxes,
        pumps,
    })
}
