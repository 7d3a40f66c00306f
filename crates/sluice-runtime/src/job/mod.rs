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
//! - `observer`, `status`: the live view of a running job ([`JobObserver`], recorded by the
//!   master as things happen) and what its snapshot holds ([`JobStatus`]);
//! - [`JobConfig`], [`JobHandle`], [`JobResult`]: configuring, watching and awaiting a job.

pub(crate) mod attempt;
mod config;
pub(crate) mod coordination;
pub(crate) mod deploy;
mod handle;
pub(crate) mod master;
mod observer;
pub(crate) mod plan;
mod status;
pub(crate) mod submit;

pub use config::{DEFAULT_MAX_PARALLELISM, JobConfig};
pub use handle::{CheckpointError, CheckpointStats, JobHandle, JobResult, PendingCheckpoint};
pub use observer::JobObserver;
pub(crate) use observer::JobRecorder;
pub use status::{
    CHECKPOINT_DURATION_BOUNDS, CHECKPOINT_HISTORY, CHECKPOINT_SIZE_BOUNDS, CheckpointCounts,
    CheckpointHistory, CheckpointRecord, CheckpointStatus, EXCEPTION_HISTORY, EdgeStatus,
    ExceptionRecord, JobState, JobStatus, OperatorStatus, OperatorSubtask, TaskState, VertexStatus,
    VertexSubtask,
};
