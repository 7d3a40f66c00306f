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

use sluice_runtime::{JobError, JobResult, StreamEnvironment};

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
/// ([`NodeConfig::from_env`]): the whole job here (local, the default), as the job master of a
/// cluster, or as one of its task managers. Returns the job's result, or `None` on a task
/// manager once the job master said the job ended.
pub async fn execute(
    env: &StreamEnvironment,
    job_name: &str,
) -> Result<Option<JobResult>, NodeError> {
    let config = NodeConfig::from_env()?;
    execute_with(env, job_name, &config).await
}

/// [`execute`] with an explicit configuration.
pub async fn execute_with(
    env: &StreamEnvironment,
    job_name: &str,
    config: &NodeConfig,
) -> Result<Option<JobResult>, NodeError> {
    let health = Health::default();
    let _served = match config.health_addr {
        Some(addr) => Some(
            health
                .serve(addr)
                .await
                .map_err(|e| NodeError::Setup(format!("health endpoint on {addr}: {e}")))?
                .1,
        ),
        None => None,
    };
    let outcome = match config.role {
        Role::Local => Ok(Some(env.execute(job_name).await?)),
        Role::JobManager => jobmaster::run(env, job_name, config, &health)
            .await
            .map(Some),
        Role::TaskManager => taskmanager::run(env, job_name, config, &health)
            .await
            .map(|()| None),
    };
    if let Some(task) = _served {
        task.abort();
    }
    outcome
}
