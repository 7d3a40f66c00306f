//! What the job master is given: the job ([`JobSpec`]: graph, plan, checkpointing, restart and
//! failover strategies, where it starts from, where its tasks run) and the channels from its
//! handle ([`MasterInputs`]).

use crate::checkpoint::CompletedCheckpoint;
use crate::checkpoint::persistence::CheckpointRun;
use crate::cluster::RemoteTasks;
use crate::error::JobError;
use crate::failover::{FailoverStrategy, RestartStrategy};
use crate::graph::StreamGraph;
use crate::job::deploy::{DeployInputs, Deployment, Restore, Scope, deploy};
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
    /// In cluster mode: the stand-ins that run every task on task managers.
    pub(crate) remote: Option<Arc<RemoteTasks>>,
}

impl JobSpec {
    /// Deploys the tasks in `scope`: here, or on task managers in cluster mode.
    pub(crate) fn deploy(
        &self,
        inputs: &DeployInputs<'_>,
        scope: Scope<'_>,
        attempt: AttemptNumber,
        restore: Option<&CompletedCheckpoint>,
    ) -> Result<Deployment, JobError> {
        match &self.remote {
            Some(remote) => remote.deploy(inputs, scope, attempt, restore),
            None => deploy(inputs, scope, attempt, Restore::Checkpoint(restore)),
        }
    }

    /// How long a failing job waits for a root cause from other processes, in cluster mode.
    pub(crate) fn root_cause_grace(&self) -> Option<Duration> {
        self.remote.as_ref().map(|_| REMOTE_ROOT_CAUSE_GRACE)
    }
}

/// How long a job whose tasks run on task managers waits for a failure's root cause when the
/// first failure to arrive is a consequence (a task that lost its peer): the root cause's report
/// travels from another task manager and may be a few messages behind.
const REMOTE_ROOT_CAUSE_GRACE: Duration = Duration::from_secs(1);

/// The channels the master reads besides those of an attempt.
pub(crate) struct MasterInputs {
    pub(crate) cancel: CancellationToken,
    pub(crate) requests: mpsc::Receiver<HandleRequest>,
    pub(crate) metrics: Arc<SharedMetrics>,
    /// The live view, recorded as things happen.
    pub(crate) recorder: JobRecorder,
}
