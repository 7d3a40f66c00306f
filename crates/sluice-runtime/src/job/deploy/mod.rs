//! Deployment: turn a planned graph into running tasks connected by bounded channels.
//!
//! Deployment happens in two steps. First a pure [`DeploymentPlan`] (`plan.rs`) names what to
//! build: the tasks in scope, each channel with an end among them (local, or outgoing to /
//! incoming from another process), every subtask's restored state, and which mailbox serves
//! each operator subtask. Then a [`Deployer`] carries the plan out:
//! - [`LocalDeployer`] (`build.rs`) builds the typed tasks here, through the type-erased
//!   factories of `graph/erased.rs`; a task manager in cluster mode builds its part of a
//!   deployment with the same code ([`build`]), its channels to other processes carried by
//!   pumps over the data plane ([`RemoteWiring`]);
//! - the cluster layer's remote deployer builds stand-ins that run the tasks on task managers.
//!
//! [`deploy`] is the one entry: it plans the tasks in [`Scope`] (every task of an attempt, or
//! one pipelined region: a region has no channel to another, by definition) and hands the plan
//! to the job's deployer. The tasks report into the channels the running attempt reads
//! ([`MasterChannels`]) and count into its metrics ([`MetricsRegistry`]).

mod build;
mod plan;

pub(crate) use build::{LocalDeployer, RemoteWiring, build};
pub(crate) use plan::{DeploymentPlan, PlannedTask, Shares, SubtaskShare};

use crate::checkpoint::CompletedCheckpoint;
use crate::checkpoint::persistence::WrittenStates;
use crate::error::JobError;
use crate::graph::StreamGraph;
use crate::graph::erased::RunnableTask;
use crate::job::JobConfig;
use crate::job::plan::Plan;
use crate::metrics::{JobMetrics, OperatorMetrics, SubtaskMetrics};
use crate::operator::to_coordinator::{DirectSlot, TO_COORDINATOR_CAPACITY, ToCoordinator};
use crate::task::control::{AttemptReport, TaskControl};
use sluice_core::{AttemptNumber, NodeId};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
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

    /// The counters of `node`'s subtask `subtask`: those of `running` (a region deployed into a
    /// running attempt) if it has them, fresh ones registered here otherwise.
    pub(crate) fn reuse_or_register(
        &mut self,
        running: Option<&MetricsRegistry>,
        node: NodeId,
        name: &str,
        subtask: usize,
    ) -> Arc<OperatorMetrics> {
        running
            .and_then(|m| m.get(node, subtask))
            .unwrap_or_else(|| self.register(node, name, subtask))
    }

    /// What every registered subtask counted so far.
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
}

impl Scope<'_> {
    /// The tasks of `plan` in the scope.
    fn tasks(&self, plan: &Plan) -> BTreeSet<usize> {
        match self {
            Scope::All => (0..plan.task_count()).collect(),
            Scope::Region { tasks, .. } => (*tasks).clone(),
        }
    }

    /// The running attempt's counters, which a region's tasks count into again.
    fn running_metrics(&self) -> Option<&MetricsRegistry> {
        match self {
            Scope::All => None,
            Scope::Region { metrics, .. } => Some(metrics),
        }
    }
}

/// Messages one task's mailbox holds before the master waits.
pub(crate) const CONTROL_CAPACITY: usize = 16;

/// What every deployment needs besides its scope.
pub(crate) struct DeployInputs<'a> {
    pub(crate) graph: &'a StreamGraph,
    pub(crate) plan: &'a Plan,
    pub(crate) config: &'a JobConfig,
    /// With checkpointing: how many checkpoints may be in progress at once.
    pub(crate) max_concurrent_checkpoints: Option<usize>,
    /// With checkpointing: the job's checkpoint storage (keyed stores upload ahead to it).
    pub(crate) checkpoint_storage: Option<Arc<dyn crate::storage::CheckpointStorage>>,
    pub(crate) direct_slots: &'a BTreeMap<NodeId, DirectSlot>,
    pub(crate) reports_tx: &'a mpsc::Sender<AttemptReport>,
    pub(crate) to_coordinator_tx: &'a mpsc::Sender<ToCoordinator>,
}

/// Carries out deployment plans: builds tasks here, or stand-ins for tasks that run elsewhere.
/// The environment chooses one per job (`submit` or `submit_remote`).
pub(crate) trait Deployer: Send + Sync {
    /// Builds what `plan` names, with the attempt's channels in `inputs`. `running` holds the
    /// running attempt's counters when a region is deployed into it (reused, not registered).
    fn deploy(
        &self,
        inputs: &DeployInputs<'_>,
        plan: DeploymentPlan,
        running: Option<&MetricsRegistry>,
    ) -> Result<Deployment, JobError>;

    /// How long the job master waits for a failure's root cause when the first failure to
    /// arrive is a consequence of another (a task that lost its peer), if at all.
    fn root_cause_grace(&self) -> Option<Duration> {
        None
    }

    /// The state files the tasks wrote to the checkpoint storage themselves, if they do.
    fn written_states(&self) -> Option<Arc<WrittenStates>> {
        None
    }
}

/// The mailbox of the task running each operator subtask of `plan`, from the tasks' `controls`.
pub(crate) fn node_mailboxes(
    plan: &DeploymentPlan,
    controls: &[(usize, mpsc::Sender<TaskControl>)],
) -> BTreeMap<(NodeId, usize), mpsc::Sender<TaskControl>> {
    let by_task: BTreeMap<usize, &mpsc::Sender<TaskControl>> =
        controls.iter().map(|(t, tx)| (*t, tx)).collect();
    plan.mailboxes
        .iter()
        .filter_map(|(ns, t)| by_task.get(t).map(|tx| (*ns, (*tx).clone())))
        .collect()
}

/// Deploys the tasks in `scope` as attempt `attempt` through `deployer`, restoring `restore`
/// if given: plans them, then carries the plan out.
pub(crate) fn deploy(
    deployer: &dyn Deployer,
    inputs: &DeployInputs<'_>,
    scope: Scope<'_>,
    attempt: AttemptNumber,
    restore: Option<&CompletedCheckpoint>,
) -> Result<Deployment, JobError> {
    let plan = DeploymentPlan::new(
        inputs.graph,
        inputs.plan,
        inputs.config,
        &scope.tasks(inputs.plan),
        attempt,
        Shares::Checkpoint(restore),
    )?;
    deployer.deploy(inputs, plan, scope.running_metrics())
}
