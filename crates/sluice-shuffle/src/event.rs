//! The events between the shuffle operator's subtasks and the shuffle coordinator.

use crate::global::GlobalStatistics;
use crate::statistics::{LocalStatistics, ShuffleKey};
use serde::{Deserialize, Serialize};

/// Subtask → coordinator.
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound = "K: ShuffleKey")]
pub enum ToCoordinator<K> {
    /// What the subtask counted since its previous checkpoint, sent when it snapshots
    /// `checkpoint`.
    Statistics {
        /// The checkpoint being taken.
        checkpoint: u64,
        /// How many downstream subtasks the subtask routes among.
        downstream_parallelism: usize,
        /// The counts or the sample.
        statistics: LocalStatistics<K>,
    },
    /// Sent after every restore: the current global statistics please, unless their signature
    /// is `signature` (what the subtask restored).
    Request {
        /// The signature of the restored statistics, if any.
        signature: Option<u64>,
        /// How many downstream subtasks the subtask routes among now.
        downstream_parallelism: usize,
    },
}

/// Coordinator → subtask.
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound = "K: ShuffleKey")]
pub enum ToOperator<K> {
    /// New global statistics.
    Statistics {
        /// The statistics.
        statistics: GlobalStatistics<K>,
        /// Route by them from now on (the answer to a request), instead of from the next
        /// checkpoint (a broadcast after an aggregation, so that every subtask switches at the
        /// same barrier).
        apply_immediately: bool,
    },
}
