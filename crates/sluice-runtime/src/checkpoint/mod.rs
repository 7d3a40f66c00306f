//! Checkpoints: the coordinator's decisions, barrier alignment, and their configuration.
//!
//! Both state machines here are pure (no clock, no I/O, no threads); the job master and the tasks
//! carry out what they decide. See ARCHITECTURE.md for how a barrier travels.

mod aligner;
mod coordinator;

pub use aligner::{AlignEvent, BarrierAligner};
pub use coordinator::{CheckpointPlanner, CheckpointSettings, Decision, TaskIndex};
