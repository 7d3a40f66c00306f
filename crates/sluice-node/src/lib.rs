//! The processes of a sluice cluster (Flink's application mode): the job's own binary runs as
//! the job master or as a task manager, chosen by its environment, and in local mode (the
//! default) runs the whole job in its own process as before.
//!
//! Where to find things:
//! - [`execute`]: what a job's `main` calls instead of `StreamEnvironment::execute`;
//! - [`NodeConfig`] (`config.rs`): the role and addresses, from `SLUICE_*` variables;
//! - `jobmaster.rs`: the job master: the control service task managers call, the registry of
//!   task managers with their heartbeats, and the runtime's gateway to them;
//! - `taskmanager.rs`: the task manager: registration, heartbeats, the control service the
//!   job master calls, and the runtime's worker;
//! - [`plane`]: the data plane between task managers over `sluice-net`;
//! - [`Health`]: `/healthz` and `/readyz` for probes.
//!
//! The variables (flags of a binary may set them too):
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `SLUICE_MODE` | `local`, `jobmanager` or `taskmanager` | `local` |
//! | `SLUICE_SECRET` / `SLUICE_SECRET_FILE` | the secret every process shares (16 bytes or more) | required in a cluster |
//! | `SLUICE_RPC_ADDR` | where the control service binds | `127.0.0.1:6123` (job master), `127.0.0.1:0` |
//! | `SLUICE_DATA_ADDR` | where a task manager's data plane binds | `127.0.0.1:0` |
//! | `SLUICE_ADVERTISED_HOST` | the host others reach this process at | the bound address |
//! | `SLUICE_JOBMANAGER` | the job master's `host:port` (task managers) | required |
//! | `SLUICE_SLOTS` | slots a task manager offers | 1 |
//! | `SLUICE_TASK_MANAGER_ID` | a task manager's name | `<hostname>-<pid>` |
//! | `SLUICE_HEALTH_ADDR` | where `/healthz` and `/readyz` are served | off |
//! | `SLUICE_HEARTBEAT_INTERVAL_MS`, `SLUICE_HEARTBEAT_TIMEOUT_MS` | heartbeats | 500, 5000 |
//! | `SLUICE_SLOT_WAIT_MS` | how long the job master waits for enough slots | 120000 |
//! | `SLUICE_DATA_WINDOW_KIB` | buffer a task manager grants each incoming data channel, in KiB (64 to 262144) | 1024 |
//!
//! ```no_run
//! use sluice_runtime::prelude::*;
//!
//! # async fn job() -> Result<(), Box<dyn std::error::Error>> {
//! let env = StreamEnvironment::new();
//! env.set_parallelism(2);
//! env.from_iter(0u64..1_000).map(|x| x * 2).discard();
//! // Local by default; SLUICE_MODE=jobmanager or taskmanager make this process one of a cluster.
//! match sluice_node::execute(&env, "doubling").await? {
//!     Some(result) => println!("job finished: {} restarts, {} checkpoints", result.restarts, result.completed_checkpoints),
//!     None => println!("this task manager's part is done"),
//! }
//! # Ok(())
//! # }
//! ```

mod config;
mod health;
mod jobmaster;
pub mod plane;
mod taskmanager;

pub use config::{ConfigError, NodeConfig, Role};
pub use health::Health;
pub use jobmaster::ClusterGuard;

use sluice_runtime::{JobError, JobHandle, JobResult, StreamEnvironment};

/// Why a process of a cluster could not run.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// Its configuration is invalid.
    #[error("cluster configuration: {0}")]
    Config(#[from] ConfigError),
    /// It could not bind or reach what it needs.
    #[error("{0}")]
    Setup(String),
    /// The job failed.
    #[error(transparent)]
    Job(#[from] JobError),
}

/// Runs the job built in `env` in the role the process environment says
/// ([`NodeConfig::from_env`]) to its end: the whole job here (local, the default), as the job
/// master of a cluster, or as one of its task managers. Returns the job's result, or `None`
/// on a task manager once the job master said the job ended.
pub async fn execute(
    env: &StreamEnvironment,
    job_name: &str,
) -> Result<Option<JobResult>, NodeError> {
    let config = NodeConfig::from_env()?;
    match submit(env, job_name, &config).await? {
        Submitted::Job { handle, cluster } => {
            let result = handle.await;
            if let Some(cluster) = cluster {
                cluster.finish().await;
            }
            Ok(Some(result?))
        }
        Submitted::TaskManager(run) => run.wait().await.map(|()| None),
    }
}

/// A job started in the role of this process.
pub enum Submitted {
    /// Local mode or the job master: the job's handle (await it for the result, watch it
    /// through its observer); on a job master, `cluster` keeps the task managers served:
    /// [`finish`](ClusterGuard::finish) it once the job ended.
    Job {
        /// The running job.
        handle: JobHandle,
        /// The cluster side of a job master.
        cluster: Option<ClusterGuard>,
    },
    /// A task manager, running until the job master says the job ended.
    TaskManager(TaskManagerRun),
}

impl std::fmt::Debug for Submitted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Submitted::Job { handle, cluster } => f
                .debug_struct("Job")
                .field("name", &handle.name())
                .field("cluster", cluster)
                .finish(),
            Submitted::TaskManager(run) => f.debug_tuple("TaskManager").field(run).finish(),
        }
    }
}

/// A running task manager.
pub struct TaskManagerRun {
    task: tokio::task::JoinHandle<Result<(), NodeError>>,
    health: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for TaskManagerRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskManagerRun").finish_non_exhaustive()
    }
}

impl TaskManagerRun {
    /// Waits until the job master says the job ended.
    pub async fn wait(self) -> Result<(), NodeError> {
        let result = self
            .task
            .await
            .map_err(|e| NodeError::Setup(format!("the task manager stopped: {e}")))?;
        if let Some(h) = self.health {
            h.abort();
        }
        result
    }
}

/// Starts the job built in `env` in the role `config` says and returns at once (see
/// [`Submitted`]). Must be called inside a tokio runtime.
pub async fn submit(
    env: &StreamEnvironment,
    job_name: &str,
    config: &NodeConfig,
) -> Result<Submitted, NodeError> {
    let health = Health::default();
    let served = match config.health_addr {
        Some(addr) => Some(
            health
                .serve(addr)
                .await
                .map_err(|e| NodeError::Setup(format!("health endpoint on {addr}: {e}")))?
                .1,
        ),
        None => None,
    };
    match config.role {
        Role::Local => {
            health.set_ready(true);
            Ok(Submitted::Job {
                handle: env.submit(job_name)?,
                cluster: None,
            })
        }
        Role::JobManager => {
            let (handle, cluster) = jobmaster::start(env, job_name, config, &health).await?;
            Ok(Submitted::Job {
                handle,
                cluster: Some(cluster),
            })
        }
        Role::TaskManager => {
            let job = env.worker_job(job_name)?;
            let task = tokio::spawn(taskmanager::run(job, config.clone(), health));
            Ok(Submitted::TaskManager(TaskManagerRun {
                task,
                health: served,
            }))
        }
    }
}
