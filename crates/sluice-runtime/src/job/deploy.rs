//! Deployment: turn a planned graph into typed tasks connected by bounded channels.

use crate::error::JobError;
use crate::graph::erased::{AnyBox, RunnableTask, TaskParts};
use crate::graph::{NodeKind, StreamGraph};
use crate::job::JobConfig;
use crate::job::plan::Plan;
use crate::metrics::{JobMetrics, OperatorMetrics, SubtaskMetrics};
use crate::operator::OperatorContext;
use sluice_core::{AttemptNumber, NodeId};
use std::sync::Arc;

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

/// Builds every task of the job for `attempt`.
pub(crate) fn deploy(
    graph: &StreamGraph,
    plan: &Plan,
    config: &JobConfig,
    attempt: AttemptNumber,
) -> Result<(Vec<DeployedTask>, MetricsRegistry), JobError> {
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
                    OperatorContext::new(
                        n.id,
                        n.name.clone(),
                        s,
                        p,
                        config.max_parallelism,
                        attempt,
                        m,
                    )
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
            for producer in per_producer.iter_mut() {
                for consumer in receivers[edge.to.0].iter_mut().take(pt) {
                    let (tx, rx) = ops.channel(config.channel_capacity);
                    producer.push(tx);
                    consumer.push(rx);
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
                    next = f.build_stage(contexts[id.0][s].clone(), next)?;
                }
            }
            let parts = TaskParts {
                metrics: chain
                    .iter()
                    .map(|id| contexts[id.0][s].metrics().clone())
                    .collect(),
                description: format!("task '{chain_name}', subtask {s} of {p}"),
                batch_size: config.batch_size,
            };
            let description = parts.description.clone();
            let task = match &graph.nodes[head.0].kind {
                NodeKind::Source(f) => f.build_task(contexts[head.0][s].clone(), next, parts)?,
                NodeKind::Operator(f) => {
                    let rx = std::mem::take(&mut receivers[head.0][s]);
                    f.build_task(rx, next, parts)?
                }
            };
            tasks.push(DeployedTask { description, task });
        }
    }
    Ok((tasks, registry))
}
