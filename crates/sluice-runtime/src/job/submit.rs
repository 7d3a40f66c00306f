//! Job assembly: from what the environment configured to a running job master.
//!
//! [`Submission::prepare`] validates everything a job needs before anything runs (the graph and
//! its plan, the checkpoint settings and storage directory, the restart strategy) and names the
//! first bad value; [`Prepared::launch`] then spawns the job master and returns its
//! [`JobHandle`]. The environment keeps its graph until a submission is accepted, so a refused
//! job can be fixed and submitted again.

use crate::checkpoint::CheckpointSettings;
use crate::checkpoint::persistence::{CheckpointRun, StoragePersistence, default_dir};
use crate::error::JobError;
use crate::failover::{ExponentialBackoff, FailoverStrategy, RestartStrategy};
use crate::graph::{NodeKind, StreamGraph};
use crate::job::deploy::Deployer;
use crate::job::driver::run_job;
use crate::job::handle::{REQUEST_CAPACITY, SharedMetrics};
use crate::job::machine::RunSummary;
use crate::job::plan::{Plan, plan};
use crate::job::spec::{JobSpec, MasterInputs};
use crate::job::{CheckpointStats, JobConfig, JobHandle, JobRecorder, JobResult};
use crate::storage::{CheckpointStorage, LocalCheckpointStorage, validate_directory};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Flink's default with checkpointing (since 1.19): exponential backoff from 1 s to 1 min.
fn default_restart_with_checkpoints() -> Result<RestartStrategy, JobError> {
    RestartStrategy::exponential_backoff(ExponentialBackoff::new(
        Duration::from_secs(1),
        Duration::from_secs(60),
        1.5,
    ))
    .map_err(|e| JobError::Internal(format!("the default restart strategy is invalid: {e}")))
}

/// What the environment hands over to submit a job.
pub(crate) struct Submission<'a> {
    pub(crate) job_name: &'a str,
    pub(crate) graph: &'a StreamGraph,
    pub(crate) config: &'a JobConfig,
    pub(crate) checkpoints: Option<&'a CheckpointSettings>,
    pub(crate) restart: Option<RestartStrategy>,
    pub(crate) failover: FailoverStrategy,
    pub(crate) storage_dir: Option<&'a Path>,
    pub(crate) storage_backend: Option<Arc<dyn CheckpointStorage>>,
    pub(crate) restore_from: Option<&'a Path>,
    pub(crate) resume_latest: bool,
}

/// A submission that passed every check, ready to launch.
pub(crate) struct Prepared {
    runtime: tokio::runtime::Handle,
    job_name: String,
    plan: Plan,
    config: JobConfig,
    checkpoints: Option<(CheckpointSettings, Arc<dyn CheckpointStorage>)>,
    restart: RestartStrategy,
    failover: FailoverStrategy,
    restore_from: Option<PathBuf>,
    resume_latest: bool,
}

impl Submission<'_> {
    /// Checks everything, naming the first bad value.
    pub(crate) fn prepare(self) -> Result<Prepared, JobError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            JobError::InvalidJob(
                "submit/execute must be called inside a tokio runtime; use execute_blocking from \
                 synchronous code"
                    .into(),
            )
        })?;
        let plan = plan(self.graph, self.config)?;
        for node in &self.graph.nodes {
            if let NodeKind::Source(f) = &node.kind {
                f.validate().map_err(|e| {
                    JobError::InvalidJob(format!("source '{}' ({}): {e}", node.name, node.id))
                })?;
            }
        }
        for node in &self.graph.nodes {
            if let NodeKind::Operator(f) = &node.kind {
                f.validate(self.checkpoints).map_err(|e| {
                    JobError::InvalidJob(format!("operator '{}' ({}): {e}", node.name, node.id))
                })?;
            }
        }
        let checkpoints = match self.checkpoints {
            Some(c) => {
                c.validate().map_err(JobError::InvalidJob)?;
                let storage = match self.storage_backend {
                    Some(backend) => backend,
                    None => {
                        let dir = self
                            .storage_dir
                            .map(Path::to_path_buf)
                            .unwrap_or_else(|| default_dir(self.job_name));
                        validate_directory(&dir).map_err(|e| {
                            JobError::InvalidJob(format!(
                                "checkpoint storage {}: {e}",
                                dir.display()
                            ))
                        })?;
                        let retained = NonZeroUsize::new(c.retained).unwrap_or(NonZeroUsize::MIN);
                        Arc::new(LocalCheckpointStorage::new(dir, retained))
                    }
                };
                Some((c.clone(), storage))
            }
            None => None,
        };
        if self.resume_latest {
            if checkpoints.is_none() {
                return Err(JobError::InvalidJob(
                    "resume_from_latest_checkpoint needs checkpointing (enable_checkpointing)"
                        .into(),
                ));
            }
            if let Some(path) = self.restore_from {
                return Err(JobError::InvalidJob(format!(
                    "resume_from_latest_checkpoint and restore_from({}) both say where to \
                     start from; keep one",
                    path.display()
                )));
            }
        }
        let restart = match (self.restart, &checkpoints) {
            (Some(r), _) => r,
            (None, None) => RestartStrategy::none(),
            (None, Some(_)) => default_restart_with_checkpoints()?,
        };
        Ok(Prepared {
            runtime,
            job_name: self.job_name.to_string(),
            plan,
            config: self.config.clone(),
            checkpoints,
            restart,
            failover: self.failover,
            restore_from: self.restore_from.map(Path::to_path_buf),
            resume_latest: self.resume_latest,
        })
    }
}

impl Prepared {
    /// The plan, the configuration and the checkpoint storage, for a task manager that runs
    /// parts of the job.
    pub(crate) fn into_worker_parts(self) -> (Plan, JobConfig, Option<Arc<dyn CheckpointStorage>>) {
        let storage = self.checkpoints.map(|(_, storage)| storage);
        (self.plan, self.config, storage)
    }

    /// Spawns the job master for `graph` and returns its handle; `deployer` builds its tasks
    /// (here, or on task managers).
    pub(crate) fn launch(self, graph: StreamGraph, deployer: Arc<dyn Deployer>) -> JobHandle {
        let checkpointing = self.checkpoints.map(|(settings, storage)| {
            let persistence = Arc::new(StoragePersistence {
                storage: storage.clone(),
                fingerprint: graph.fingerprint(),
                max_parallelism: self.config.max_parallelism,
                written: deployer.written_states(),
                staged: Default::default(),
            });
            CheckpointRun {
                settings,
                persistence,
                storage,
            }
        });
        let metrics = Arc::new(SharedMetrics::default());
        let recorder = JobRecorder::new(
            &self.job_name,
            &graph,
            &self.plan,
            checkpointing.is_some(),
            metrics.clone(),
        );
        let spec = JobSpec {
            graph,
            plan: self.plan,
            config: self.config,
            checkpointing,
            restart: self.restart,
            failover: self.failover,
            restore_path: self.restore_from,
            resume_latest: self.resume_latest,
            deployer,
        };
        let cancel = CancellationToken::new();
        let (request_tx, requests) = mpsc::channel(REQUEST_CAPACITY);
        let name = self.job_name;
        tracing::info!(job = %name, "submitting job");
        let started = Instant::now();
        let inputs = MasterInputs {
            cancel: cancel.clone(),
            requests,
            metrics: metrics.clone(),
            recorder: recorder.clone(),
        };
        let observer = recorder.observer();
        let join = {
            let (name, metrics) = (name.clone(), metrics.clone());
            self.runtime.spawn(async move {
                let result = run_job(spec, inputs).await;
                recorder.ended(&result);
                let duration = started.elapsed();
                tracing::info!(job = %name, ?duration, ok = result.is_ok(), "job ended");
                result.map(|summary| job_result(name, duration, &metrics, summary))
            })
        };
        JobHandle::new(name, join, cancel, metrics, request_tx, observer)
    }
}

fn job_result(
    job_name: String,
    duration: Duration,
    metrics: &SharedMetrics,
    summary: RunSummary,
) -> JobResult {
    let c = summary.checkpoints;
    JobResult {
        job_name,
        duration,
        metrics: metrics.job(),
        attempt_metrics: metrics.attempt(),
        restarts: summary.restarts,
        completed_checkpoints: c.completed,
        checkpoints: CheckpointStats {
            triggered: c.triggered,
            completed: c.completed,
            failed: c.failed,
            expired: c.expired,
        },
        last_checkpoint: summary.last_checkpoint,
        restored_from: summary.restored_from,
        stopped_with_savepoint: summary.stopped_with_savepoint,
    }
}
