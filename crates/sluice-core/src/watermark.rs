//! Event time: watermarks and the idle/active status of a stream.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A promise that no record with an event time at or below this timestamp (milliseconds) follows.
///
/// ```
/// use sluice_core::Watermark;
/// let w = Watermark::new(1_000);
/// assert_eq!(w.timestamp(), 1_000);
/// assert!(w < Watermark::MAX);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Watermark(i64);

impl Watermark {
    /// The lowest watermark: nothing is known yet.
    pub const MIN: Watermark = Watermark(i64::MIN);
    /// The highest watermark, emitted at end of input: event time is complete.
    pub const MAX: Watermark = Watermark(i64::MAX);

    /// A watermark at `timestamp` milliseconds.
    pub const fn new(timestamp: i64) -> Self {
        Watermark(timestamp)
    }

    /// The timestamp in milliseconds.
    pub const fn timestamp(self) -> i64 {
        self.0
    }
}

impl fmt::Debug for Watermark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Watermark::MIN => f.write_str("Watermark(MIN)"),
            Watermark::MAX => f.write_str("Watermark(MAX)"),
            Watermark(t) => write!(f, "Watermark({t})"),
        }
    }
}

/// Whether a stream currently carries watermarks (`Active`) or is temporarily silent (`Idle`).
///
/// An idle input channel is left out of the minimum that decides a task's watermark, so one
/// silent partition does not hold back event time for the whole job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum WatermarkStatus {
    /// The stream produces records and watermarks.
    Active,
    /// The stream has been silent for longer than its idleness timeout.
    Idle,
}
