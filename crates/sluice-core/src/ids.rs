//! Identifiers shared by the job graph, tasks, checkpoints and coordinators.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The identity of one operator (a node of the job graph).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct NodeId(pub usize);

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// The index of one parallel instance of an operator, `0..parallelism`.
pub type SubtaskIndex = usize;

/// How many times a subtask has been (re)started; the first run is attempt 0.
pub type AttemptNumber = u32;

/// The id of a checkpoint. Ids grow strictly; the first checkpoint is 1 (0 means "none yet").
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct CheckpointId(pub u64);

impl CheckpointId {
    /// The id that follows this one.
    ///
    /// ```
    /// use sluice_core::CheckpointId;
    /// assert_eq!(CheckpointId(7).next(), CheckpointId(8));
    /// ```
    pub fn next(self) -> CheckpointId {
        CheckpointId(self.0 + 1)
    }
}

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
