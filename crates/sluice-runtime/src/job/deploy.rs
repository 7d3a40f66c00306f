//! Deployment: turn a planned graph into typed tasks connected by bounded channels.

use crate::checkpoint::CompletedCheckpoint;
use crate::error::JobError;
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
use crate::task::control::{TaskControl, TaskMailbox, TaskReport};
use sluice_core::{AttemptNumber, NodeId};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Live metrics of every operator subtask of a running job.
#[derive(Default)]
pub(crate) struct MetricsRegistry {
    entries: Vec<(NodeId, String, usize, Arc<OperatorMetrics>)>,
}

impl MetricsRegistry {
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
    pub(crate) description: String,
    pub(crate) task: Box<dyn RunnableTask>,
}

/// Everything deployment built: the tasks and the master's ends of their mailboxes.
pub(crate) struct Deployment {
    pub(crate) tasks: Vec<DeployedTask>,
    pub(crate) metrics: MetricsRegistry,
    /// One control sender per task, in task order.
    pub(crate) controls: Vec<mpsc::Sender<TaskControl>>,
    /// Reports from every task.
    pub(crate) reports: mpsc::Receiver<TaskReport>,
    /// The indices of the tasks that run sources.
    pub(crate) source_tasks: Vec<usize>,
    /// The mailbox of the task running each (operator, subtask).
    pub(crate) node_mailboxes: BTreeMap<(NodeId, usize), mpsc::Sender<TaskControl>>,
    /// Events from operators to their coordinators.
    pub(crate) to_coordinators: mpsc::Receiver<ToCoordinator>,
}

/// Messages one task's mailbox holds before the master waits.
const CONTROL_CAPACITY: usize = 16;

/// Hands each operator subtask its share of the restored state.
fn restored_shares(
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

/// Builds every task of the job for `attempt`, restoring `restore` if given.
pub(crate) fn deploy(
    graph: &StreamGraph,
    plan: &Plan,
    config: &JobConfig,
    attempt: AttemptNumber,
    restore: Option<&CompletedCheckpoint>,
    // With checkpointing: how many checkpoints may be in progress at once.
    max_concurrent_checkpoints: Option<usize>,
    direct_slots: &BTreeMap<NodeId, DirectSlot>,
) -> Result<Deployment, JobError> {
    let checkpointing = max_concurrent_checkpoints.is_some();
    let max_concurrent_checkpoints = max_concurrent_checkpoints.unwrap_or(1);
    let mut shares = restored_shares(graph, plan, config, restore)?;
    let (to_coordinator_tx, to_coordinators) = mpsc::channel(TO_COORDINATOR_CAPACITY);
    let mut node_mailboxes = BTreeMap::new();
    let task_count = plan.task_count();
    let (report_tx, reports) =
        mpsc::channel(task_count.max(1) * (max_concurrent_checkpoints + 2) + 1);
    let mut controls = Vec::with_capacity(task_count);
    let mut source_tasks = Vec::new();
    // Contexts and metrics, per node and subtask.
    let mut registry = MetricsRegistry::default();
    let contexts: Vec<Vec<OperatorContext>> = graph
        .nodes
        .iter()
        .map(|n| {
            let p = plan.parallelism[n.id.0];
            (0..p)
                .map(|s| {
                    let m = Arc::new(OperatorMetrics::default());
                    registry.entries.push((n.id, n.name.clone(), s, m.clone()));
                    OperatorContext::new(ContextParts {
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
                    })
                })
                .collect()
        })
        .collect();

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
            if plan.is_pointwise(edge) {
                // Subtask i feeds subtask i only: one channel each, so that no channel ties
                // two pipelined regions together.
                for (producer, consumer) in
                    per_producer.iter_mut().zip(receivers[edge.to.0].iter_mut())
                {
                    let (tx, rx) = ops.channel(config.channel_capacity);
                    producer.push(tx);
                    consumer.push(rx);
                }
            } else {
                for producer in per_producer.iter_mut() {
                    for consumer in receivers[edge.to.0].iter_mut().take(pt) {
                        let (tx, rx) = ops.channel(config.channel_capacity);
                        producer.push(tx);
                        consumer.push(rx);
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
            let tail_node = &graph.nodes[tail.0];
            let mut outs = Vec::with_capacity(tail_node.outputs.len());
            for &e in &tail_node.outputs {
                let tx = std::mem::take(&mut senders[e][s]);
                outs.push(graph.edges[e].writer.build_writer(
                    tx,
                    contexts[tail.0][s].clone(),
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
                    next = f.build_stage(contexts[id.0][s].clone(), next, restored)?;
                }
            }
            let task_index = tasks.len();
            let (control_tx, control) = mpsc::channel(CONTROL_CAPACITY);
            for id in chain {
                node_mailboxes.insert((*id, s), control_tx.clone());
            }
            controls.push(control_tx);
            let mailbox = TaskMailbox {
                task: task_index,
                control,
                reports: report_tx.clone(),
                checkpointing,
            };
            let parts = TaskParts {
                metrics: chain
                    .iter()
                    .map(|id| contexts[id.0][s].metrics().clone())
                    .collect(),
                description: format!("task '{chain_name}', subtask {s} of {p}"),
                batch_size: config.batch_size,
                mailbox,
            };
            let description = parts.description.clone();
            let task = match &graph.nodes[head.0].kind {
                NodeKind::Source(f) => {
                    source_tasks.push(task_index);
                    let restored = shares[head.0][s].take();
                    f.build_task(contexts[head.0][s].clone(), next, parts, restored)?
                }
                NodeKind::Operator(f) => {
                    let rx = std::mem::take(&mut receivers[head.0][s]);
                    f.build_task(rx, next, parts)?
                }
            };
            tasks.push(DeployedTask { description, task });
        }
    }
    Ok(Deployment {
        tasks,
        metrics: registry,
        controls,
        reports,
        source_tasks,
        node_mailboxes,
        to_coordinators,
    })
}
