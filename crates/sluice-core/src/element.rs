//! The elements that travel between tasks and through an operator chain.

use crate::{CheckpointId, Watermark, WatermarkStatus};
use serde::{Deserialize, Serialize};

/// A checkpoint barrier: everything before it on a channel belongs to checkpoint `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointBarrier {
    /// The checkpoint this barrier starts.
    pub id: CheckpointId,
    /// When the checkpoint was triggered, in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
}

/// One element of a stream, as carried by a channel between two tasks.
///
/// Records travel in batches so that channel operations and dynamic dispatch are paid once per
/// batch, not once per record. Control elements (watermarks, status changes, barriers, end of
/// input) keep their position relative to the batches around them.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamElement<T> {
    /// A non-empty batch of records.
    Records(Vec<T>),
    /// Event time has advanced to this watermark.
    Watermark(Watermark),
    /// The producing channel became idle or active again.
    Status(WatermarkStatus),
    /// A checkpoint barrier.
    Barrier(CheckpointBarrier),
    /// The producer has no more elements; nothing follows on this channel.
    EndOfInput,
}
