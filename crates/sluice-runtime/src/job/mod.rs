//! Running a job: planning the graph into chained tasks, deploying them, and the job master that
//! watches them.
//!
//! `plan` validates the graph and decides which operators chain together (pure: no I/O, no
//! threads). `deploy` builds the typed tasks and the channels between them. `master` runs the
//! tasks on the tokio runtime: the first failure stops every other task and fails the job with
//! the failing operator and subtask named; a cancel stops them all promptly.

pub(crate) mod checkpointing;
mod config;
pub(crate) mod coordination;
pub(crate) mod deploy;
mod handle;
pub(crate) mod master;
pub(crate) mod plan;

pub use config::{DEFAULT_MAX_PARALLELISM, JobConfig};
pub use handle::{JobHandle, JobResult};
