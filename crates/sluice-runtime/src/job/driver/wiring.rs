//! The driver's hold on what runs: the channels of the attempt deployed as a whole (reports,
//! events to coordinators, task mailboxes) and the tasks' futures with the attempt each runs.

use crate::error::TaskError;
use crate::job::coordination::Coordinators;
use crate::job::deploy::{DeployInputs, DeployedTask, MasterChannels, MetricsRegistry};
use crate::job::machine::{JobFact, TaskExit, TaskIndex};
use crate::job::spec::JobSpec;
use crate::operator::to_coordinator::{DirectSlot, ToCoordinator};
use crate::task::control::{AttemptReport, TaskControl};
use crate::task::thread::{Started, ThreadStop};
use sluice_core::{AttemptNumber, NodeId};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinError, JoinSet};

/// The channels of the attempt deployed as a whole, and what a region's deployment reuses.
pub(super) struct Wiring {
    pub(super) reports: mpsc::Receiver<AttemptReport>,
    pub(super) reports_tx: mpsc::Sender<AttemptReport>,
    pub(super) to_coordinators: mpsc::Receiver<ToCoordinator>,
    pub(super) to_coordinator_tx: mpsc::Sender<ToCoordinator>,
    pub(super) direct_slots: BTreeMap<NodeId, DirectSlot>,
    pub(super) metrics: Arc<MetricsRegistry>,
    pub(super) controls: Vec<mpsc::Sender<TaskControl>>,
    pub(super) source_tasks: Vec<usize>,
}

impl Wiring {
    pub(super) fn new(spec: &JobSpec, coordinators: &Coordinators) -> Self {
        let max = spec
            .checkpointing
            .as_ref()
            .map(|c| c.settings.max_concurrent);
        let c = MasterChannels::new(spec.plan.task_count(), max);
        Wiring {
            reports: c.reports,
            reports_tx: c.reports_tx,
            to_coordinators: c.to_coordinators,
            to_coordinator_tx: c.to_coordinator_tx,
            direct_slots: coordinators.direct_slots(),
            metrics: Arc::default(),
            controls: Vec::new(),
            source_tasks: Vec::new(),
        }
    }

    pub(super) fn inputs<'a>(&'a self, spec: &'a JobSpec) -> DeployInputs<'a> {
        DeployInputs {
            graph: &spec.graph,
            plan: &spec.plan,
            config: &spec.config,
            max_concurrent_checkpoints: spec
                .checkpointing
                .as_ref()
                .map(|c| c.settings.max_concurrent),
            checkpoint_storage: spec.checkpointing.as_ref().map(|c| c.storage.clone()),
            direct_slots: &self.direct_slots,
            reports_tx: &self.reports_tx,
            to_coordinator_tx: &self.to_coordinator_tx,
        }
    }
}

/// The running tasks' futures, and which task and attempt each runs.
#[derive(Default)]
pub(super) struct RunningTasks {
    pub(super) set: JoinSet<Result<(), TaskError>>,
    pub(super) ids: HashMap<tokio::task::Id, (TaskIndex, AttemptNumber)>,
    pub(super) handles: BTreeMap<TaskIndex, Stopper>,
}

/// How a running task is stopped: a task on the workers is aborted (its future is dropped where
/// it is polled); a task on a thread of its own is asked to stop there, and its future ends once
/// the thread has dropped it, so that the job sees the end only when the task let go of its
/// stores.
pub(super) enum Stopper {
    Abort(AbortHandle),
    Thread(ThreadStop),
}

impl RunningTasks {
    pub(super) fn spawn(&mut self, t: DeployedTask, attempt: AttemptNumber) {
        let (index, description) = (t.index, t.description);
        let Started { run: fut, stop } = t.task.run();
        let handle = self.set.spawn(async move {
            let r = fut.await;
            if let Err(e) = &r {
                tracing::debug!(task = %description, error = ?e, "task failed");
            }
            r
        });
        self.ids.insert(handle.id(), (index, attempt));
        let stopper = match stop {
            Some(thread) => Stopper::Thread(thread),
            None => Stopper::Abort(handle),
        };
        self.handles.insert(index, stopper);
    }

    /// Stops `tasks`; their ends come out of the join set.
    pub(super) fn stop(&self, tasks: &[TaskIndex]) {
        for t in tasks {
            match self.handles.get(t) {
                Some(Stopper::Thread(thread)) => thread.stop(),
                Some(Stopper::Abort(spawned)) => spawned.abort(),
                None => {}
            }
        }
    }

    /// What a joined task tells the machine.
    pub(super) fn ended(
        &mut self,
        joined: Result<(tokio::task::Id, Result<(), TaskError>), JoinError>,
    ) -> Option<JobFact> {
        let (id, exit) = match joined {
            Ok((id, Ok(()))) => (id, TaskExit::Finished),
            Ok((id, Err(TaskError::Stopped))) => (id, TaskExit::Cancelled),
            Ok((id, Err(e))) => (id, TaskExit::Failed(e)),
            Err(j) if j.is_cancelled() => (j.id(), TaskExit::Cancelled),
            Err(j) => (
                j.id(),
                TaskExit::Failed(TaskError::Internal(format!(
                    "a task panicked outside user code: {j}"
                ))),
            ),
        };
        let (task, attempt) = self.ids.remove(&id)?;
        self.handles.remove(&task);
        Some(JobFact::TaskEnded {
            task,
            attempt,
            exit,
        })
    }
}
