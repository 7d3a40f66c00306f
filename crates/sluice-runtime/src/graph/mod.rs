//! The logical job graph built by the DataStream API, and its type-erased building blocks.
//!
//! The API knows every record type; the graph does not. Each node keeps factories, created while
//! the types were known, that later build its typed pieces (chain stages, channels, writers,
//! tasks) behind `Box<dyn Any>`. [`plan`](crate::job) then chains nodes into tasks and wires them.

pub(crate) mod erased;

use erased::{OperatorFactory, OutputOps, SourceFactory, WriterFactory};
use sluice_core::NodeId;
use std::fmt;
use std::sync::Arc;

/// How records cross an edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Partitioning {
    /// Forward when both sides have the same parallelism, rebalance otherwise (Flink's default).
    Default,
    /// Subtask i to subtask i; both sides must have the same parallelism.
    Forward,
    /// Round robin over all downstream subtasks.
    Rebalance,
    /// By the key's key group.
    Hash,
    /// Every record to every downstream subtask.
    Broadcast,
    /// By a user [`Partitioner`](crate::Partitioner).
    Custom,
}

impl fmt::Display for Partitioning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Partitioning::Default => "default",
            Partitioning::Forward => "forward",
            Partitioning::Rebalance => "rebalance",
            Partitioning::Hash => "hash",
            Partitioning::Broadcast => "broadcast",
            Partitioning::Custom => "custom",
        };
        f.write_str(s)
    }
}

pub(crate) enum NodeKind {
    Source(Arc<dyn SourceFactory>),
    Operator(Arc<dyn OperatorFactory>),
}

pub(crate) struct Node {
    pub(crate) id: NodeId,
    pub(crate) name: String,
    pub(crate) parallelism: Option<usize>,
    pub(crate) kind: NodeKind,
    pub(crate) inputs: Vec<usize>,
    pub(crate) outputs: Vec<usize>,
    pub(crate) out_ops: Arc<dyn OutputOps>,
    pub(crate) is_sink: bool,
    /// The operator's coordinator, if it declared one.
    pub(crate) coordinator: Option<Arc<dyn sluice_coordinator::CoordinatorProvider>>,
    /// A configuration found invalid while building the node (a window size of zero, a feature
    /// crate's bad setting through `DataStream::reject_at_submit`): `plan` refuses the job with
    /// it at submit time. The first reason recorded is kept.
    pub(crate) config_error: Option<String>,
}

pub(crate) struct Edge {
    pub(crate) from: NodeId,
    pub(crate) to: NodeId,
    pub(crate) partitioning: Partitioning,
    pub(crate) writer: Arc<dyn WriterFactory>,
}

/// The graph under construction (and, at submit time, the graph to run).
#[derive(Default)]
pub(crate) struct StreamGraph {
    pub(crate) nodes: Vec<Node>,
    pub(crate) edges: Vec<Edge>,
}

impl StreamGraph {
    /// A string that changes when the job graph changes shape: operators (name, kind, sink or
    /// not), and edges (endpoints and partitioning). A checkpoint of one graph does not restore
    /// into another.
    pub(crate) fn fingerprint(&self) -> String {
        use std::fmt::Write;
        let mut s = String::from("sluice-graph-v1;");
        for n in &self.nodes {
            let kind = match n.kind {
                NodeKind::Source(_) => "source",
                NodeKind::Operator(_) if n.is_sink => "sink",
                NodeKind::Operator(_) => "operator",
            };
            let _ = write!(s, "n{}:{}:{};", n.id.0, kind, n.name);
        }
        for e in &self.edges {
            let _ = write!(s, "e{}>{}:{};", e.from.0, e.to.0, e.partitioning);
        }
        s
    }

    pub(crate) fn add_node(
        &mut self,
        name: String,
        kind: NodeKind,
        out_ops: Arc<dyn OutputOps>,
        is_sink: bool,
    ) -> NodeId {
        let id = NodeId(self.nodes.len());
        self.nodes.push(Node {
            id,
            name,
            parallelism: None,
            kind,
            inputs: Vec::new(),
            outputs: Vec::new(),
            out_ops,
            is_sink,
            coordinator: None,
            config_error: None,
        });
        id
    }

    pub(crate) fn add_edge(
        &mut self,
        from: NodeId,
        to: NodeId,
        partitioning: Partitioning,
        writer: Arc<dyn WriterFactory>,
    ) {
        let e = self.edges.len();
        self.edges.push(Edge {
            from,
            to,
            partitioning,
            writer,
        });
        self.nodes[from.0].outputs.push(e);
        self.nodes[to.0].inputs.push(e);
    }
}
