//! Checkpoints: their configuration, and the pure state machines that run them.
//!
//! Where to find things:
//! - [`CheckpointSettings`] (public): interval, timeout, pause, concurrency, retention and the
//!   tolerated failures, with Flink's defaults;
//! - `planner`: the checkpoint coordinator's decisions (trigger, complete, expire, abort,
//!   subsume, the final checkpoint after end of input);
//! - `aligner`: which input channels a task blocks while it aligns a barrier;
//! - `completed`: what turns acknowledgements and coordinator snapshots into a completed
//!   checkpoint;
//! - `failures`: tolerable checkpoint failures (Flink's `CheckpointFailureManager`);
//! - `persistence`: writing a completed checkpoint to storage and reading one back to restore.
//!
//! Everything but the persistence is pure (no clock, no I/O, no threads); the job master and the
//! tasks carry out what it decides. See ARCHITECTURE.md for how a barrier travels.

mod aligner;
mod completed;
mod failures;
pub(crate) mod persistence;
mod planner;
mod settings;

pub(crate) use aligner::{AlignEvent, BarrierAligner};
pub(crate) use completed::{CompletedCheckpoint, PendingStates, SubtaskState};
pub(crate) use failures::FailureCounter;
pub(crate) use planner::{AbortReason, CheckpointPlanner, Decision, TaskIndex};
pub use settings::CheckpointSettings;
