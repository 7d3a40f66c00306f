//! Running a job: planning the graph into chained tasks, deploying them, and the job master that
//! watches them.
//!
//! Where to find things:
//! - `plan`: validates the graph and decides which operators chain together (pure);
//! - `deploy`: builds the typed tasks and the channels between them;
//! - `machine`: the whole job as one pure state machine (its lifecycle and every legal move at
//!   its top: attempts, restarts of regions and of the job, root causes, stale reports);
//! - `attempt`: one attempt of a job as a pure state machine (checkpoints, the end of the job),
//!   run by the job machine;
//! - `driver`: the job master's loop: waits on its channels, turns what arrives into facts for
//!   the job machine and carries out its actions;
//! - `spec`: what the job master is given (the job, the handle's channels);
//! - `prepare`: what the job starts from (a restore point) and its checkpointing;
//! - `coordination`: the job master's side of operator coordinators (holders, valves);
//! - `observer`, `status`: the live view of a running job ([`JobObserver`], recorded by the
//!   master as things happen) and what its snapshot holds ([`JobStatus`]);
//! - [`JobConfig`], [`JobHandle`], [`JobResult`]: configuring, watching and awaiting a job.

pub(crate) mod attempt;
mod config;
pub(crate) mod coordination;
pub(crate) mod deploy;
pub(crate) mod driver;
pub(crate) mod handle;
pub(crate) mod machine;
mod observer;
pub(crate) mod plan;
mod prepare;
pub(crate) mod spec;
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
