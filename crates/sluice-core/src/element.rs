//! The elements that travel between tasks and through an operator chain, and [`Batch`], the
//! records of one element with their optional event times.

use crate::{CheckpointId, Watermark, WatermarkStatus};
use serde::{Deserialize, Serialize};

/// The timestamp of a record that has none (Flink's `Long.MIN_VALUE` marker): it was emitted
/// without one into a batch whose other records carry event times.
pub const NO_TIMESTAMP: i64 = i64::MIN;

/// A checkpoint barrier: everything before it on a channel belongs to checkpoint `id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointBarrier {
    /// The checkpoint this barrier starts.
    pub id: CheckpointId,
    /// When the checkpoint was triggered, in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
}

/// The records of one stream element and, when a timestamp assigner ran upstream, their event
/// times in milliseconds as a parallel column (Flink's `StreamRecord` timestamp, stored beside the
/// records instead of wrapping each one).
///
/// A batch without a column costs nothing beyond the empty `Option`. A record inside a timed batch
/// that has no timestamp holds [`NO_TIMESTAMP`].
///
/// ```
/// use sluice_core::Batch;
///
/// let plain = Batch::from(vec![1u32, 2]);
/// assert!(plain.timestamps().is_none());
///
/// let timed = Batch::with_timestamps(vec!["a", "b"], vec![10, 20]);
/// assert_eq!(timed.iter_timed().collect::<Vec<_>>(), vec![(&"a", Some(10)), (&"b", Some(20))]);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Batch<T> {
    records: Vec<T>,
    timestamps: Option<Vec<i64>>,
}

impl<T> Batch<T> {
    /// Records without event times.
    #[inline]
    pub fn new(records: Vec<T>) -> Self {
        Batch {
            records,
            timestamps: None,
        }
    }

    /// Records with their event times, one per record.
    ///
    /// # Panics
    /// When the two lengths differ (a bug in the caller, never in input data).
    #[inline]
    pub fn with_timestamps(records: Vec<T>, timestamps: Vec<i64>) -> Self {
        assert_eq!(
            records.len(),
            timestamps.len(),
            "a batch needs one timestamp per record"
        );
        Batch {
            records,
            timestamps: Some(timestamps),
        }
    }

    /// Records with an optional timestamp column (same rule as [`Batch::with_timestamps`]).
    #[inline]
    pub fn from_parts(records: Vec<T>, timestamps: Option<Vec<i64>>) -> Self {
        match timestamps {
            Some(ts) => Self::with_timestamps(records, ts),
            None => Self::new(records),
        }
    }

    /// The number of records.
    #[inline]
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether the batch holds no record.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The records.
    #[inline]
    pub fn records(&self) -> &[T] {
        &self.records
    }

    /// The event times, when the batch carries them.
    #[inline]
    pub fn timestamps(&self) -> Option<&[i64]> {
        self.timestamps.as_deref()
    }

    /// Splits the batch into its records and its timestamp column.
    #[inline]
    pub fn into_parts(self) -> (Vec<T>, Option<Vec<i64>>) {
        (self.records, self.timestamps)
    }

    /// The records, dropping their timestamps.
    #[inline]
    pub fn into_records(self) -> Vec<T> {
        self.records
    }

    /// The same records passed through `f`, with the same timestamps.
    ///
    /// ```
    /// use sluice_core::Batch;
    /// let b = Batch::with_timestamps(vec![1u32, 2], vec![10, 20]).map(|x| x * 2);
    /// assert_eq!((b.records(), b.timestamps()), (&[2u32, 4][..], Some(&[10i64, 20][..])));
    /// ```
    #[inline]
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Batch<U> {
        Batch {
            records: self.records.into_iter().map(f).collect(),
            timestamps: self.timestamps,
        }
    }

    /// Each record with its timestamp (`None` for a batch without a column or a record holding
    /// [`NO_TIMESTAMP`]).
    pub fn iter_timed(&self) -> impl Iterator<Item = (&T, Option<i64>)> {
        let ts = self.timestamps.as_deref();
        self.records.iter().enumerate().map(move |(i, r)| {
            let t = ts.map(|ts| ts[i]).filter(|t| *t != NO_TIMESTAMP);
            (r, t)
        })
    }
}

impl<T> From<Vec<T>> for Batch<T> {
    #[inline]
    fn from(records: Vec<T>) -> Self {
        Batch::new(records)
    }
}

/// One element of a stream, as carried by a channel between two tasks.
///
/// Records travel in batches so that channel operations and dynamic dispatch are paid once per
/// batch, not once per record. Control elements (watermarks, status changes, barriers, end of
/// input) keep their position relative to the batches around them.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamElement<T> {
    /// A non-empty batch of records, with their event times when they have them.
    Records(Batch<T>),
    /// Event time has advanced to this watermark.
    Watermark(Watermark),
    /// The producing channel became idle or active again.
    Status(WatermarkStatus),
    /// A checkpoint barrier.
    Barrier(CheckpointBarrier),
    /// The producer has no more elements; nothing follows on this channel.
    EndOfInput,
}

impl<T> StreamElement<T> {
    /// A batch of records without event times.
    #[inline]
    pub fn records(records: Vec<T>) -> Self {
        StreamElement::Records(Batch::new(records))
    }

    /// The same element with its records (if it carries any) passed through `f`.
    #[inline]
    pub fn map_records<U>(self, f: impl FnMut(T) -> U) -> StreamElement<U> {
        match self {
            StreamElement::Records(b) => StreamElement::Records(b.map(f)),
            StreamElement::Watermark(w) => StreamElement::Watermark(w),
            StreamElement::Status(s) => StreamElement::Status(s),
            StreamElement::Barrier(b) => StreamElement::Barrier(b),
            StreamElement::EndOfInput => StreamElement::EndOfInput,
        }
    }
}
