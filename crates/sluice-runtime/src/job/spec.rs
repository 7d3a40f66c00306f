//! What the job master is given: the job ([`JobSpec`]: graph, plan, checkpointing, restart and
//! failover strategies, where it starts from, where its tasks run) and the channels from its
//! handle ([`MasterInputs`]).

use crate::checkpoint::CompletedCheckpoint;
use crate::checkpoint::persistence::CheckpointRun;
use crate::error::JobError;
use crate::failover::{FailoverStrategy, RestartStrategy};
use crate::graph::StreamGraph;
use crate::job::deploy::{DeployInputs, Deployer, Deployment, Scope, deploy};
use crate::job::handle::{HandleRequest, SharedMetrics};
use crate::job::plan::Plan;
use crate::job::{JobConfig, JobRecorder};
use sluice_core::AttemptNumber;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Everything the master needs to run a job.
pub(crate) struct JobSpec {
    pub(crate) graph: StreamGraph,
    pub(crate) plan: Plan,
    pub(crate) config: JobConfig,
    pub(crate) checkpointing: Option<CheckpointRun>,
    pub(crate) restart: RestartStrategy,
    /// What a task failure restarts.
    pub(crate) failover: FailoverStrategy,
    /// Where to restore from before the first attempt (a checkpoint or storage directory).
    pub(crate) restore_path: Option<std::path::PathBuf>,
    /// Whether to restore the newest valid checkpoint of the job's own checkpoint storage, if
    /// it holds one, before the first attempt.
    pub(crate) resume_latest: bool,
    /// What builds the tasks: here, or stand-ins for tasks on task managers in cluster mode.
    pub(crate) deployer: Arc<dyn Deployer>,
}

impl JobSpec {
    /// Deploys the tasks in `scope` through the job's deployer: here, or on task managers in
    /// cluster mode.
    pub(crate) fn deploy(
        &self,
        inputs: &DeployInputs<'_>,
        scope: Scope<'_>,
        attempt: AttemptNumber,
        restore: Option<&CompletedCheckpoint>,
    ) -> Result<Deployment, JobError> {
        deploy(self.deployer.as_ref(), inputs, scope, attempt, restore)
    }

    /// How long a failing job waits for a root cause from other processes (cluster mode).
    pub(crate) fn root_cause_grace(&self) -> Option<Duration> {
        self.deployer.root_cause_grace()
    }
}

/// The channels the master reads besides those of an attempt.
pub(crate) struct MasterInputs {
    pub(crate) cancel: CancellationToken,
    pub(crate) requests: mpsc::Receiver<HandleRequest>,
    pub(crate) metrics: Arc<SharedMetrics>,
    /// The live view, recorded as things happen.
    pub(crate) recorder: JobRecorder,
}
