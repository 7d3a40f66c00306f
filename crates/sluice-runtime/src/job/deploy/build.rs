//! Building tasks: what carries a [`DeploymentPlan`] out in this process. The one place that
//! builds typed tasks, for a local job ([`LocalDeployer`]) and for a task manager's part of a
//! cluster job alike.
//!
//! For each planned task the chain is built from its tail to its head: the tail ends in a
//! network writer per output edge (several behind a fan-out stage; none for a sink, which ends
//! in a null stage), then each operator wraps the next stage, restored from its share. The head
//! gets its input: the source's reader, or an input gate over its channels. A channel to
//! another process is a local channel plus a pump over the data plane ([`RemoteWiring`]); the
//! task then runs with its pumps as one future.

use super::plan::{ChannelKind, DeploymentPlan, PlannedChannel, PlannedTask};
use super::{
    CONTROL_CAPACITY, DeployInputs, DeployedTask, Deployer, Deployment, MetricsRegistry,
    node_mailboxes,
};
use crate::error::JobError;
use crate::exchange::remote::{ChannelKey, DataPlane, Pump, run_with_pumps};
use crate::graph::erased::{AnyBox, OutputOps, RunnableTask, TaskParts};
use crate::graph::{NodeKind, Partitioning, StreamGraph};
use crate::operator::to_coordinator::CoordinatorLink;
use crate::operator::{ContextParts, OperatorContext};
use crate::task::control::{TaskControl, TaskMailbox};
use crate::task::thread::Started;
use sluice_core::{AttemptNumber, NodeId};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Builds every task of a plan here, with local channels only.
pub(crate) struct LocalDeployer;

impl Deployer for LocalDeployer {
    fn deploy(
        &self,
        inputs: &DeployInputs<'_>,
        plan: DeploymentPlan,
        running: Option<&MetricsRegistry>,
    ) -> Result<Deployment, JobError> {
        build(inputs, plan, running, None)
    }
}

/// How the channels of a deployment on a task manager reach the other task managers.
pub(crate) struct RemoteWiring {
    /// The task manager of every task of the batch.
    pub(crate) placement: BTreeMap<usize, String>,
    /// The data-plane address of every task manager.
    pub(crate) peers: BTreeMap<String, String>,
    pub(crate) plane: Arc<dyn DataPlane>,
    /// The job master's epoch.
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

    /// The data-plane id of channel `c` of attempt `attempt`.
    fn channel_id(&self, c: &PlannedChannel, attempt: AttemptNumber) -> u64 {
        let n = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
        ChannelKey {
            epoch: self.epoch,
            attempt,
            edge: n(c.edge),
            producer: n(c.producer),
            consumer: n(c.consumer),
        }
        .id()
    }

    /// The pump carrying what the local receiver `rx` of outgoing channel `c` gets to its
    /// consumer's task manager.
    fn send(
        &self,
        ops: &dyn OutputOps,
        rx: AnyBox,
        c: &PlannedChannel,
        attempt: AttemptNumber,
        what: String,
    ) -> Result<Pump, JobError> {
        let (tm, addr) = self.peer(c.consumer_task)?;
        let out = self.plane.sender(&tm, &addr, self.channel_id(c, attempt));
        ops.send_pump(rx, out, what)
    }

    /// The pump carrying what incoming channel `c`'s producer sends into the local sender `tx`.
    fn receive(
        &self,
        ops: &dyn OutputOps,
        tx: AnyBox,
        c: &PlannedChannel,
        attempt: AttemptNumber,
        what: String,
    ) -> Result<Pump, JobError> {
        let (tm, addr) = self.peer(c.producer_task)?;
        let input = self.plane.receiver(&tm, &addr, self.channel_id(c, attempt));
        ops.receive_pump(input, tx, what)
    }
}

/// Builds the tasks `plan` names, restored from its shares; their channels to other processes
/// (if any) through `wiring`. `running` holds the counters a region's tasks count into again.
pub(crate) fn build(
    inputs: &DeployInputs<'_>,
    mut plan: DeploymentPlan,
    running: Option<&MetricsRegistry>,
    wiring: Option<&RemoteWiring>,
) -> Result<Deployment, JobError> {
    let mut metrics = MetricsRegistry::default();
    let contexts = Contexts::new(inputs, &plan, running, &mut metrics);
    let mut ends = Ends::open(inputs, &plan, wiring)?;
    let planned = std::mem::take(&mut plan.tasks);
    let mut tasks = Vec::with_capacity(planned.len());
    let mut controls = Vec::with_capacity(planned.len());
    let mut source_tasks = Vec::new();
    for task in &planned {
        let (control_tx, control) = mpsc::channel(CONTROL_CAPACITY);
        let built = build_task(inputs, &mut plan, task, &contexts, &mut ends, control)?;
        let (sends, receives) = ends.pumps.remove(&task.index).unwrap_or_default();
        let built: Box<dyn RunnableTask> = if sends.is_empty() && receives.is_empty() {
            built
        } else {
            Box::new(WithPumps {
                task: built,
                sends,
                receives,
            })
        };
        if task.source {
            source_tasks.push(task.index);
        }
        controls.push((task.index, control_tx));
        tasks.push(DeployedTask {
            index: task.index,
            description: task.description.clone(),
            task: built,
        });
    }
    let node_mailboxes = node_mailboxes(&plan, &controls);
    Ok(Deployment {
        tasks,
        metrics,
        controls,
        source_tasks,
        node_mailboxes,
    })
}

/// Builds one task: its chain from tail to head, then its input.
fn build_task(
    inputs: &DeployInputs<'_>,
    plan: &mut DeploymentPlan,
    task: &PlannedTask,
    contexts: &Contexts,
    ends: &mut Ends,
    control: mpsc::Receiver<TaskControl>,
) -> Result<Box<dyn RunnableTask>, JobError> {
    let graph = inputs.graph;
    let s = task.subtask;
    let (Some(&head), Some(&tail)) = (task.chain.first(), task.chain.last()) else {
        return Err(JobError::Internal(format!(
            "task {} runs no operator",
            task.index
        )));
    };
    let mut next = tail_stage(inputs, tail, s, contexts, ends)?;
    for id in task.chain.iter().rev() {
        if let NodeKind::Operator(f) = &graph.nodes[id.0].kind {
            next = f.build_stage(contexts.get(*id, s)?, next, plan.take_state(*id, s))?;
        }
    }
    let parts = TaskParts {
        metrics: task
            .chain
            .iter()
            .map(|id| contexts.get(*id, s).map(|c| c.metrics().clone()))
            .collect::<Result<_, _>>()?,
        description: task.description.clone(),
        batch_size: inputs.config.batch_size,
        mailbox: TaskMailbox {
            task: task.index,
            attempt: plan.attempt,
            control,
            reports: inputs.reports_tx.clone(),
            checkpointing: inputs.max_concurrent_checkpoints.is_some(),
        },
        store_calls: calls_a_store(graph, &task.chain, &contexts.get(head, s)?),
    };
    match &graph.nodes[head.0].kind {
        NodeKind::Source(f) => f.build_task(
            contexts.get(head, s)?,
            next,
            parts,
            plan.take_state(head, s),
        ),
        NodeKind::Operator(f) => {
            let receivers = ends.receivers.remove(&(head, s)).unwrap_or_default();
            f.build_task(receivers, next, parts)
        }
    }
}

/// Whether a task running `chain` calls a keyed store: the job keeps keyed state in a store
/// and an operator of the chain is keyed (its input is partitioned by key; at parallelism 1 a
/// key-by may be chained).
fn calls_a_store(graph: &StreamGraph, chain: &[NodeId], ctx: &OperatorContext) -> bool {
    ctx.state_backend().store().is_some()
        && chain.iter().any(|id| {
            graph.nodes[id.0]
                .inputs
                .iter()
                .any(|&e| graph.edges[e].partitioning == Partitioning::Hash)
        })
}

/// The last stage of a chain's subtask `s`: a network writer per output edge of its tail
/// (behind a fan-out stage when there are several), or a null stage for a sink.
fn tail_stage(
    inputs: &DeployInputs<'_>,
    tail: NodeId,
    s: usize,
    contexts: &Contexts,
    ends: &mut Ends,
) -> Result<AnyBox, JobError> {
    let (graph, config) = (inputs.graph, inputs.config);
    let tail_node = &graph.nodes[tail.0];
    let mut outs = Vec::with_capacity(tail_node.outputs.len());
    for &e in &tail_node.outputs {
        let tx = ends.senders.remove(&(e, s)).unwrap_or_default();
        outs.push(graph.edges[e].writer.build_writer(
            tx,
            contexts.get(tail, s)?,
            config.batch_size,
            config.max_parallelism,
        )?);
    }
    match outs.len() {
        0 => Ok(tail_node.out_ops.null_stage()),
        1 => outs
            .pop()
            .ok_or_else(|| JobError::Internal("lost a writer".into())),
        _ => tail_node.out_ops.tee_stage(outs),
    }
}

/// The context of every operator subtask of the plan.
struct Contexts(BTreeMap<(NodeId, usize), OperatorContext>);

impl Contexts {
    /// Contexts counting into `running`'s metrics where it has them, into fresh ones
    /// registered in `registry` otherwise.
    fn new(
        inputs: &DeployInputs<'_>,
        plan: &DeploymentPlan,
        running: Option<&MetricsRegistry>,
        registry: &mut MetricsRegistry,
    ) -> Self {
        let mut all = BTreeMap::new();
        // Operator by operator, subtask by subtask: the order the registry reads them in.
        for &(node, s) in plan.mailboxes.keys() {
            let n = &inputs.graph.nodes[node.0];
            let metrics = registry.reuse_or_register(running, node, &n.name, s);
            let context = OperatorContext::new(ContextParts {
                operator_id: node,
                operator_name: n.name.clone(),
                subtask_index: s,
                parallelism: inputs.plan.parallelism[node.0],
                max_parallelism: inputs.config.max_parallelism,
                attempt_number: plan.attempt,
                metrics,
                checkpointing: inputs.max_concurrent_checkpoints.is_some(),
                state_backend: inputs.config.state_backend.clone(),
                checkpoint_storage: inputs.checkpoint_storage.clone(),
                to_coordinator: n.coordinator.as_ref().map(|_| CoordinatorLink {
                    master: inputs.to_coordinator_tx.clone(),
                    direct: inputs.direct_slots.get(&node).cloned().unwrap_or_default(),
                }),
            });
            all.insert((node, s), context);
        }
        Contexts(all)
    }

    fn get(&self, node: NodeId, s: usize) -> Result<OperatorContext, JobError> {
        self.0.get(&(node, s)).cloned().ok_or_else(|| {
            JobError::Internal(format!(
                "subtask {s} of operator {node} is deployed but outside the deployment"
            ))
        })
    }
}

/// The ends of the planned channels until the tasks take them.
#[derive(Default)]
struct Ends {
    /// Per (edge, producer subtask): its senders, consumer by consumer.
    senders: BTreeMap<(usize, usize), Vec<AnyBox>>,
    /// Per (operator, consumer subtask): its receivers, in input-edge order, each with the
    /// position of its edge among the operator's inputs (0, or 1 for a two-input operator's
    /// second input).
    receivers: BTreeMap<(NodeId, usize), Vec<(usize, AnyBox)>>,
    /// Per task: the pumps of its channels to other processes, sending and receiving.
    pumps: BTreeMap<usize, (Vec<Pump>, Vec<Pump>)>,
}

impl Ends {
    /// One bounded channel per planned channel; for a channel to or from another process,
    /// the local end's pump through `wiring`.
    fn open(
        inputs: &DeployInputs<'_>,
        plan: &DeploymentPlan,
        wiring: Option<&RemoteWiring>,
    ) -> Result<Self, JobError> {
        let graph = inputs.graph;
        let mut ends = Ends::default();
        for c in &plan.channels {
            let edge = &graph.edges[c.edge];
            let ops = graph.nodes[edge.from.0].out_ops.as_ref();
            let (tx, rx) = ops.channel(inputs.config.channel_capacity);
            let what = format!(
                "channel {}:{}->{} ('{}' to '{}')",
                c.edge,
                c.producer,
                c.consumer,
                graph.nodes[edge.from.0].name,
                graph.nodes[edge.to.0].name
            );
            let remote = || {
                wiring.ok_or_else(|| {
                    JobError::Internal(format!("{what} leads to a task outside this deployment"))
                })
            };
            let (tx, rx) = match c.kind {
                ChannelKind::Local => (Some(tx), Some(rx)),
                ChannelKind::Outgoing => {
                    let pump = remote()?.send(ops, rx, c, plan.attempt, what.clone())?;
                    ends.pumps.entry(c.producer_task).or_default().0.push(pump);
                    (Some(tx), None)
                }
                ChannelKind::Incoming => {
                    let pump = remote()?.receive(ops, tx, c, plan.attempt, what.clone())?;
                    ends.pumps.entry(c.consumer_task).or_default().1.push(pump);
                    (None, Some(rx))
                }
            };
            if let Some(tx) = tx {
                ends.senders
                    .entry((c.edge, c.producer))
                    .or_default()
                    .push(tx);
            }
            if let Some(rx) = rx {
                let input = graph.nodes[edge.to.0]
                    .inputs
                    .iter()
                    .position(|&e| e == c.edge)
                    .unwrap_or(0);
                ends.receivers
                    .entry((edge.to, c.consumer))
                    .or_default()
                    .push((input, rx));
            }
        }
        Ok(ends)
    }
}

/// A task that runs with the pumps of its channels to other processes: a pump's failure fails
/// it, and it is done once its outgoing pumps delivered everything.
struct WithPumps {
    task: Box<dyn RunnableTask>,
    sends: Vec<Pump>,
    receives: Vec<Pump>,
}

impl RunnableTask for WithPumps {
    fn run(self: Box<Self>) -> Started {
        let WithPumps {
            task,
            sends,
            receives,
        } = *self;
        let Started { run, stop } = task.run();
        Started {
            run: Box::pin(run_with_pumps(run, sends, receives)),
            stop,
        }
    }
}
