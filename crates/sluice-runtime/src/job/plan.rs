//! Planning: validate the graph and chain operators into tasks. A pure function of the graph.

use crate::error::JobError;
use crate::failover::{Connection, Exchange, Regions};
use crate::graph::{Edge, Partitioning, StreamGraph};
use crate::job::JobConfig;
use sluice_core::NodeId;

/// The decisions taken before anything runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Resolved parallelism of each node.
    pub(crate) parallelism: Vec<usize>,
    /// Whether each edge is a direct call inside a chain (true) or a network exchange.
    pub(crate) chained: Vec<bool>,
    /// The chains, head first; each chain runs as one task per subtask.
    pub(crate) chains: Vec<Vec<NodeId>>,
}

impl Plan {
    /// How many tasks the plan runs: one per subtask of each chain.
    pub(crate) fn task_count(&self) -> usize {
        self.chains.iter().map(|c| self.chain_parallelism(c)).sum()
    }

    /// The operator subtasks task `task` runs (numbered chain by chain, subtask by subtask):
    /// each operator of its chain, at its subtask.
    pub(crate) fn task_subtasks(&self, task: usize) -> Vec<(NodeId, usize)> {
        let mut first = 0;
        for chain in &self.chains {
            let p = self.chain_parallelism(chain);
            if task < first + p {
                return chain.iter().map(|id| (*id, task - first)).collect();
            }
            first += p;
        }
        Vec::new()
    }

    /// How many subtasks (tasks) `chain` runs: its head's parallelism.
    fn chain_parallelism(&self, chain: &[NodeId]) -> usize {
        chain.first().map_or(0, |h| self.parallelism[h.0])
    }

    /// Whether `edge` pairs producer subtask `i` with consumer subtask `i` only (forward, or
    /// the default partitioning between equal parallelisms): deployment then connects each
    /// producer subtask to its one consumer subtask, and the two share a pipelined region.
    pub(crate) fn is_pointwise(&self, edge: &Edge) -> bool {
        match edge.partitioning {
            Partitioning::Forward => true,
            Partitioning::Default => self.parallelism[edge.from.0] == self.parallelism[edge.to.0],
            _ => false,
        }
    }

    /// The pipelined regions of the planned tasks (numbered as deployment numbers them: chain by
    /// chain, subtask by subtask): the groups that fail over together.
    pub(crate) fn regions(&self, graph: &StreamGraph) -> Regions {
        let mut chain_of = vec![0; self.parallelism.len()];
        for (c, chain) in self.chains.iter().enumerate() {
            for id in chain {
                chain_of[id.0] = c;
            }
        }
        let parallelism: Vec<usize> = self
            .chains
            .iter()
            .map(|c| self.chain_parallelism(c))
            .collect();
        let exchanges: Vec<Exchange> = graph
            .edges
            .iter()
            .zip(&self.chained)
            .filter(|(_, chained)| !**chained)
            .map(|(e, _)| {
                let pointwise = self.is_pointwise(e);
                Exchange {
                    from: chain_of[e.from.0],
                    to: chain_of[e.to.0],
                    connection: if pointwise {
                        Connection::Pointwise
                    } else {
                        Connection::AllToAll
                    },
                }
            })
            .collect();
        Regions::compute(&parallelism, &exchanges)
    }
}

/// Validates `graph` under `config` and chains it.
///
/// An edge is chained when its consumer has exactly this one input, its producer has exactly this
/// one output, both have the same parallelism, and the edge is forward (or both sides run as a
/// single subtask, where every partitioning is forward).
pub(crate) fn plan(graph: &StreamGraph, config: &JobConfig) -> Result<Plan, JobError> {
    config.validate()?;
    if !graph.nodes.iter().any(|n| n.is_sink) {
        return Err(JobError::InvalidJob(
            "the job has no sink: end a stream with collect(), print() or sink_to(..)".into(),
        ));
    }
    let describe = |id: NodeId| format!("'{}' ({})", graph.nodes[id.0].name, id);
    let mut parallelism = Vec::with_capacity(graph.nodes.len());
    for n in &graph.nodes {
        if let Some(e) = &n.config_error {
            return Err(JobError::InvalidJob(format!(
                "operator {}: {e}",
                describe(n.id)
            )));
        }
        let p = n.parallelism.unwrap_or(config.parallelism);
        if p == 0 {
            return Err(JobError::InvalidJob(format!(
                "operator {}: parallelism must be at least 1, got 0",
                describe(n.id)
            )));
        }
        if p > config.max_parallelism {
            return Err(JobError::InvalidJob(format!(
                "operator {}: parallelism {p} exceeds the max parallelism {}",
                describe(n.id),
                config.max_parallelism
            )));
        }
        parallelism.push(p);
    }
    let mut chained = Vec::with_capacity(graph.edges.len());
    for e in &graph.edges {
        let (pf, pt) = (parallelism[e.from.0], parallelism[e.to.0]);
        if e.partitioning == Partitioning::Forward && pf != pt {
            return Err(JobError::InvalidJob(format!(
                "forward edge from {} (parallelism {pf}) to {} (parallelism {pt}) needs equal \
                 parallelism on both sides; use rebalance() or give both the same parallelism",
                describe(e.from),
                describe(e.to)
            )));
        }
        let forward_like = match e.partitioning {
            Partitioning::Forward => true,
            Partitioning::Default => pf == pt,
            _ => pf == 1 && pt == 1,
        };
        let from = &graph.nodes[e.from.0];
        let to = &graph.nodes[e.to.0];
        chained.push(forward_like && pf == pt && from.outputs.len() == 1 && to.inputs.len() == 1);
    }
    let mut chains = Vec::new();
    for n in &graph.nodes {
        let is_head = !(n.inputs.len() == 1 && chained[n.inputs[0]]);
        if !is_head {
            continue;
        }
        let mut chain = vec![n.id];
        let mut cur = n;
        while cur.outputs.len() == 1 && chained[cur.outputs[0]] {
            let next = graph.edges[cur.outputs[0]].to;
            chain.push(next);
            cur = &graph.nodes[next.0];
        }
        chains.push(chain);
    }
    Ok(Plan {
        parallelism,
        chained,
        chains,
    })
}
