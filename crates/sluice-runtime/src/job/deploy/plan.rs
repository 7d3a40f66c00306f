//! The deployment plan: what one deployment builds, decided before anything is built. Pure.
//!
//! A [`DeploymentPlan`] is computed from the job's [`Plan`] and the set of tasks deployed
//! together in one process (every task of an attempt, one pipelined region, or a task
//! manager's part of either). It names:
//! - the tasks, numbered chain by chain and subtask by subtask, each with its chain, subtask
//!   and description;
//! - every channel with an end among them, in the order the tasks' writers and input gates
//!   take them (edge by edge, producer by producer, consumer by consumer): [`Local`] when both
//!   ends are here, [`Outgoing`] or [`Incoming`] when the other end runs in another process;
//! - each operator subtask's restored state, already dealt out at the job's parallelism;
//! - which task's mailbox serves each operator subtask.
//!
//! [`Local`]: ChannelKind::Local
//! [`Outgoing`]: ChannelKind::Outgoing
//! [`Incoming`]: ChannelKind::Incoming

use crate::checkpoint::CompletedCheckpoint;
use crate::error::JobError;
use crate::graph::{NodeKind, StreamGraph};
use crate::job::JobConfig;
use crate::job::plan::Plan;
use crate::state::{OperatorState, redistribute};
use sluice_core::{AttemptNumber, CheckpointId, NodeId};
use std::collections::{BTreeMap, BTreeSet};

/// One operator subtask's restored state.
pub(crate) type SubtaskShare = (NodeId, usize, OperatorState);

/// One task to build.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PlannedTask {
    /// Its index among the job's tasks.
    pub(crate) index: usize,
    /// The operators of its chain, head first.
    pub(crate) chain: Vec<NodeId>,
    /// Its subtask index in every operator of the chain.
    pub(crate) subtask: usize,
    /// The chain's parallelism.
    pub(crate) parallelism: usize,
    /// Whether the chain's head is a source.
    pub(crate) source: bool,
    /// How logs and failures name it.
    pub(crate) description: String,
}

impl PlannedTask {
    /// The operator subtasks it runs: each operator of its chain, at its subtask.
    pub(crate) fn subtasks(&self) -> impl Iterator<Item = (NodeId, usize)> + '_ {
        self.chain.iter().map(|id| (*id, self.subtask))
    }
}

/// Where a channel's other end is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChannelKind {
    /// Both ends run here: one bounded channel.
    Local,
    /// The producer runs here, the consumer in another process.
    Outgoing,
    /// The consumer runs here, the producer in another process.
    Incoming,
}

/// One channel of an exchange: from a producer subtask to a consumer subtask of one edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PlannedChannel {
    /// The edge of the job graph.
    pub(crate) edge: usize,
    /// The producing subtask.
    pub(crate) producer: usize,
    /// The consuming subtask.
    pub(crate) consumer: usize,
    /// The task running the producer.
    pub(crate) producer_task: usize,
    /// The task running the consumer.
    pub(crate) consumer_task: usize,
    pub(crate) kind: ChannelKind,
}

/// Where the restored state comes from.
pub(crate) enum Shares<'a> {
    /// A checkpoint (or none), dealt out at the job's parallelism.
    Checkpoint(Option<&'a CompletedCheckpoint>),
    /// Shares dealt out already (a task manager gets its tasks' from the job master).
    Given(Vec<SubtaskShare>),
}

/// What one deployment builds (see the module's list).
#[derive(Debug)]
pub(crate) struct DeploymentPlan {
    /// The attempt the tasks run as.
    pub(crate) attempt: AttemptNumber,
    /// The checkpoint the state comes from.
    pub(crate) restored_from: Option<CheckpointId>,
    /// Where that checkpoint's files are when not in the job's checkpoint storage.
    pub(crate) restored_at: Option<std::path::PathBuf>,
    /// The tasks, in task order.
    pub(crate) tasks: Vec<PlannedTask>,
    /// The channels with an end here, in the order writers and gates take them.
    pub(crate) channels: Vec<PlannedChannel>,
    /// The restored state of the operator subtasks here that have one.
    pub(crate) states: BTreeMap<(NodeId, usize), OperatorState>,
    /// The task whose mailbox serves each operator subtask here.
    pub(crate) mailboxes: BTreeMap<(NodeId, usize), usize>,
}

impl DeploymentPlan {
    /// The plan for the tasks `here` of `plan`, as attempt `attempt`, restored from `shares`.
    pub(crate) fn new(
        graph: &StreamGraph,
        plan: &Plan,
        config: &JobConfig,
        here: &BTreeSet<usize>,
        attempt: AttemptNumber,
        shares: Shares<'_>,
    ) -> Result<Self, JobError> {
        let first = first_tasks(plan, graph.nodes.len());
        let tasks = planned_tasks(graph, plan, &first, here);
        let mailboxes: BTreeMap<(NodeId, usize), usize> = tasks
            .iter()
            .flat_map(|t| t.subtasks().map(move |ns| (ns, t.index)))
            .collect();
        let (restored_from, restored_at) = match &shares {
            Shares::Checkpoint(Some(c)) => (Some(c.id), c.location.clone()),
            Shares::Checkpoint(None) | Shares::Given(_) => (None, None),
        };
        let mut states = subtask_states(graph, plan, config, shares)?;
        states.retain(|ns, _| mailboxes.contains_key(ns));
        Ok(DeploymentPlan {
            attempt,
            restored_from,
            restored_at,
            tasks,
            channels: channels(graph, plan, &first, here),
            states,
            mailboxes,
        })
    }

    /// Takes the restored state of operator `node`'s subtask `subtask`, if it has one.
    pub(crate) fn take_state(&mut self, node: NodeId, subtask: usize) -> Option<OperatorState> {
        self.states.remove(&(node, subtask))
    }
}

/// The index of each node's subtask 0's task: tasks are numbered chain by chain, subtask by
/// subtask.
fn first_tasks(plan: &Plan, nodes: usize) -> Vec<usize> {
    let mut first = vec![0; nodes];
    let mut next = 0;
    for chain in &plan.chains {
        for id in chain {
            first[id.0] = next;
        }
        next += chain.first().map_or(0, |h| plan.parallelism[h.0]);
    }
    first
}

fn planned_tasks(
    graph: &StreamGraph,
    plan: &Plan,
    first: &[usize],
    here: &BTreeSet<usize>,
) -> Vec<PlannedTask> {
    let mut tasks = Vec::new();
    for chain in &plan.chains {
        let Some(&head) = chain.first() else {
            continue;
        };
        let p = plan.parallelism[head.0];
        let names: Vec<&str> = chain
            .iter()
            .map(|id| graph.nodes[id.0].name.as_str())
            .collect();
        let chain_name = names.join(" -> ");
        for s in (0..p).filter(|s| here.contains(&(first[head.0] + s))) {
            tasks.push(PlannedTask {
                index: first[head.0] + s,
                chain: chain.clone(),
                subtask: s,
                parallelism: p,
                source: matches!(graph.nodes[head.0].kind, NodeKind::Source(_)),
                description: format!("task '{chain_name}', subtask {s} of {p}"),
            });
        }
    }
    tasks
}

/// The channels of every network edge with an end `here`. An all-to-all edge connects every
/// producer subtask to every consumer subtask; a pointwise edge subtask `i` to subtask `i` only
/// (one channel each, so that no channel ties two pipelined regions together).
fn channels(
    graph: &StreamGraph,
    plan: &Plan,
    first: &[usize],
    here: &BTreeSet<usize>,
) -> Vec<PlannedChannel> {
    let mut out = Vec::new();
    for (e, edge) in graph.edges.iter().enumerate() {
        if plan.chained[e] {
            continue;
        }
        let (pf, pt) = (plan.parallelism[edge.from.0], plan.parallelism[edge.to.0]);
        let pointwise = plan.is_pointwise(edge);
        for i in 0..pf {
            let consumers = if pointwise { i..(i + 1).min(pt) } else { 0..pt };
            for j in consumers {
                let (producer_task, consumer_task) = (first[edge.from.0] + i, first[edge.to.0] + j);
                let kind = match (here.contains(&producer_task), here.contains(&consumer_task)) {
                    (true, true) => ChannelKind::Local,
                    (true, false) => ChannelKind::Outgoing,
                    (false, true) => ChannelKind::Incoming,
                    (false, false) => continue,
                };
                out.push(PlannedChannel {
                    edge: e,
                    producer: i,
                    consumer: j,
                    producer_task,
                    consumer_task,
                    kind,
                });
            }
        }
    }
    out
}

/// Every operator subtask's restored state, from `shares`.
fn subtask_states(
    graph: &StreamGraph,
    plan: &Plan,
    config: &JobConfig,
    shares: Shares<'_>,
) -> Result<BTreeMap<(NodeId, usize), OperatorState>, JobError> {
    match shares {
        Shares::Checkpoint(None) => Ok(BTreeMap::new()),
        Shares::Checkpoint(Some(c)) => restored_shares(graph, plan, config, c),
        Shares::Given(list) => list
            .into_iter()
            .map(|(node, s, state)| {
                if node.0 >= graph.nodes.len() || s >= plan.parallelism[node.0] {
                    return Err(JobError::Internal(format!(
                        "restored state for subtask {s} of operator {node}, which this job does \
                         not have"
                    )));
                }
                Ok(((node, s), state))
            })
            .collect(),
    }
}

/// Deals each operator's state in `restore` out to its subtasks at the job's parallelism.
fn restored_shares(
    graph: &StreamGraph,
    plan: &Plan,
    config: &JobConfig,
    restore: &CompletedCheckpoint,
) -> Result<BTreeMap<(NodeId, usize), OperatorState>, JobError> {
    let mut shares = BTreeMap::new();
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
            shares.insert((*id, s), st);
        }
    }
    Ok(shares)
}

#[cfg(test)]
mod tests;
