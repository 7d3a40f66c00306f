//! [`Collector`]: where an operator puts what it emits, in order, and where it finds the event
//! times of the batch it is processing.

use sluice_core::{Batch, NO_TIMESTAMP, StreamElement, Watermark, WatermarkStatus};

/// Receives an operator's output: records, one at a time or as whole batches, and watermarks.
///
/// The runtime hands the collected elements to the next operator of the chain (or to the network)
/// after each call into the operator, keeping their order. Emitting a whole batch with
/// [`emit_batch`](Collector::emit_batch) avoids copying: a `map` over a `Vec` that keeps the element
/// size reuses the input's allocation.
///
/// **Event time.** While [`Operator::process_batch`](crate::Operator::process_batch) runs, the
/// collector also holds the input batch's event times, when a timestamp assigner ran upstream:
/// [`input_timestamps`](Collector::input_timestamps) (one per input record, in order). An operator
/// gives its output event times with [`collect_at`](Collector::collect_at) or
/// [`emit_batch_at`](Collector::emit_batch_at); records emitted without one carry none. The
/// built-in `map`, `filter`, `flat_map` and process functions keep each input's timestamp on what
/// it produced, as Flink's `TimestampedCollector` does.
///
/// ```
/// use sluice_runtime::Collector;
/// use sluice_core::{StreamElement, Watermark};
///
/// let mut out = Collector::new();
/// out.collect(1u32);
/// out.emit_watermark(Watermark::new(5));
/// out.emit_batch(vec![2, 3]);
/// out.collect_at(4, 1_000);
/// assert_eq!(out.len_records(), 4);
/// let elements = out.take_elements();
/// let StreamElement::Records(last) = &elements[3] else { panic!() };
/// assert_eq!(last.timestamps(), Some(&[1_000][..]));
/// ```
#[derive(Debug)]
pub struct Collector<T> {
    current: Vec<T>,
    /// Timestamps of `current`, filled lazily: empty while nothing in `current` has one, and
    /// otherwise padded with `NO_TIMESTAMP` up to the record before the next timestamped one.
    current_ts: Vec<i64>,
    elements: Vec<StreamElement<T>>,
    input_ts: Option<Vec<i64>>,
}

impl<T> Default for Collector<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Collector<T> {
    /// An empty collector.
    pub fn new() -> Self {
        Collector {
            current: Vec::new(),
            current_ts: Vec::new(),
            elements: Vec::new(),
            input_ts: None,
        }
    }

    /// Emits one record without an event time.
    #[inline]
    pub fn collect(&mut self, record: T) {
        self.current.push(record);
    }

    /// Emits one record with event time `timestamp` (milliseconds).
    #[inline]
    pub fn collect_at(&mut self, record: T, timestamp: i64) {
        if self.current_ts.len() < self.current.len() {
            self.current_ts.resize(self.current.len(), NO_TIMESTAMP);
        }
        self.current_ts.push(timestamp);
        self.current.push(record);
    }

    /// Emits one record with an optional event time.
    #[inline]
    pub fn collect_timed(&mut self, record: T, timestamp: Option<i64>) {
        match timestamp {
            Some(t) => self.collect_at(record, t),
            None => self.collect(record),
        }
    }

    /// Emits a batch of records without event times after everything emitted so far.
    ///
    /// The records carry no event time downstream, even when the input batch had them: an
    /// operator that passes its input on (or emits one record per input record, in order)
    /// keeps the times with [`forward_batch`](Collector::forward_batch), as Flink keeps a
    /// record's timestamp by default; a downstream event-time window fails on records without
    /// one. (Attaching the input's times here by default would silently give unrelated records
    /// of the same count the wrong times.)
    #[inline]
    pub fn emit_batch(&mut self, batch: Vec<T>) {
        if batch.is_empty() {
            return;
        }
        self.seal_current();
        self.elements.push(StreamElement::records(batch));
    }

    /// Emits a batch of records with an optional column of event times (one per record).
    ///
    /// # Panics
    /// When the column's length differs from the batch's.
    #[inline]
    pub fn emit_batch_at(&mut self, batch: Vec<T>, timestamps: Option<Vec<i64>>) {
        if batch.is_empty() {
            return;
        }
        self.seal_current();
        self.elements
            .push(StreamElement::Records(Batch::from_parts(batch, timestamps)));
    }

    /// Emits `batch` with the input batch's event times: for a pass-through (or any operator
    /// whose output is its input batch, or one record per input record in the same order).
    ///
    /// # Panics
    /// When the input had event times and `batch` has another length.
    #[inline]
    pub fn forward_batch(&mut self, batch: Vec<T>) {
        let timestamps = self.input_ts.take();
        self.emit_batch_at(batch, timestamps);
    }

    /// Emits a watermark after everything emitted so far.
    pub fn emit_watermark(&mut self, watermark: Watermark) {
        self.seal_current();
        self.elements.push(StreamElement::Watermark(watermark));
    }

    /// Marks the output idle or active again (used by watermark generators).
    pub fn emit_status(&mut self, status: WatermarkStatus) {
        self.seal_current();
        self.elements.push(StreamElement::Status(status));
    }

    /// The event times of the input batch being processed, one per record, when it has them.
    #[inline]
    pub fn input_timestamps(&self) -> Option<&[i64]> {
        self.input_ts.as_deref()
    }

    /// Takes the input batch's event times (to move them onto the output without copying).
    #[inline]
    pub fn take_input_timestamps(&mut self) -> Option<Vec<i64>> {
        self.input_ts.take()
    }

    /// Sets the event times of the next input batch (the runtime does this before each
    /// `process_batch`; useful to drive an operator by hand).
    #[inline]
    pub fn set_input_timestamps(&mut self, timestamps: Option<Vec<i64>>) {
        self.input_ts = timestamps;
    }

    /// How many records are waiting in the collector.
    pub fn len_records(&self) -> usize {
        self.current.len()
            + self
                .elements
                .iter()
                .map(|e| match e {
                    StreamElement::Records(r) => r.len(),
                    _ => 0,
                })
                .sum::<usize>()
    }

    /// Whether nothing was emitted since the last drain.
    pub fn is_empty(&self) -> bool {
        self.current.is_empty() && self.elements.is_empty()
    }

    fn seal_current(&mut self) {
        if !self.current.is_empty() {
            let batch = std::mem::take(&mut self.current);
            let batch = if self.current_ts.is_empty() {
                Batch::new(batch)
            } else {
                let mut ts = std::mem::take(&mut self.current_ts);
                ts.resize(batch.len(), NO_TIMESTAMP);
                Batch::with_timestamps(batch, ts)
            };
            self.elements.push(StreamElement::Records(batch));
        }
    }

    /// Takes everything emitted so far, in order, leaving the collector empty (useful to test an
    /// operator outside a job).
    pub fn take_elements(&mut self) -> Vec<StreamElement<T>> {
        self.seal_current();
        std::mem::take(&mut self.elements)
    }

    /// Gives back the (emptied) element vector so its allocation is reused.
    pub(crate) fn return_buffer(&mut self, mut buf: Vec<StreamElement<T>>) {
        if self.elements.is_empty() {
            buf.clear();
            self.elements = buf;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batches(out: &mut Collector<u32>) -> Vec<Batch<u32>> {
        out.take_elements()
            .into_iter()
            .filter_map(|e| match e {
                StreamElement::Records(b) => Some(b),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn records_without_a_timestamp_make_batches_without_a_column() {
        let mut out = Collector::new();
        out.collect(1);
        out.collect(2);
        assert_eq!(batches(&mut out), vec![Batch::new(vec![1, 2])]);
    }

    #[test]
    fn mixed_records_get_the_no_timestamp_marker_in_order() {
        let mut out = Collector::new();
        out.collect(1);
        out.collect_at(2, 20);
        out.collect(3);
        out.collect_at(4, 40);
        out.collect(5);
        assert_eq!(
            batches(&mut out),
            vec![Batch::with_timestamps(
                vec![1, 2, 3, 4, 5],
                vec![NO_TIMESTAMP, 20, NO_TIMESTAMP, 40, NO_TIMESTAMP]
            )]
        );
        // The next batch starts without a column again.
        out.collect(6);
        assert_eq!(batches(&mut out), vec![Batch::new(vec![6])]);
    }
}
