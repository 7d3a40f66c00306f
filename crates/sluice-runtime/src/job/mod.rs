//! Running a job: planning the graph into chained tasks, deploying them, and the job master that
//! watches them.
//!
//! Where to find things:
//! - `plan`: validates the graph and decides which operators chain together (pure);
//! - `deploy`: builds the typed tasks and the channels between them;
//! - `attempt`: one attempt of a job as a pure state machine (facts in, actions out);
//! - `master`: the loop that runs attempts, waits on its channels and carries out the
//!   machine's actions; restarts per the restart strategy;
//! - `coordination`: the job master's side of operator coordinators (holders, valves);
//! - [`JobConfig`], [`JobHandle`], [`JobResult`]: configuring, watching and awaiting a job.

pub(crate) mod attempt;
mod config;
pub(crate) mod coordination;
pub(crate) mod deploy;
mod handle;
pub(crate) mod master;
pub(crate) mod plan;
pub(crate) mod submit;

pub use config::{DEFAULT_MAX_PARALLELISM, JobConfig};
pub use handle::{CheckpointError, CheckpointStats, JobHandle, JobResult, PendingCheckpoint};
