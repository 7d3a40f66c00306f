//! [`Collector`]: where an operator puts what it emits, in order.

use sluice_core::{StreamElement, Watermark, WatermarkStatus};

/// Receives an operator's output: records, one at a time or as whole batches, and watermarks.
///
/// The runtime hands the collected elements to the next operator of the chain (or to the network)
/// after each call into the operator, keeping their order. Emitting a whole batch with
/// [`emit_batch`](Collector::emit_batch) avoids copying: a `map` over a `Vec` that keeps the element
/// size reuses the input's allocation.
///
/// ```
/// use sluice_runtime::Collector;
/// use sluice_core::Watermark;
///
/// let mut out = Collector::new();
/// out.collect(1u32);
/// out.emit_watermark(Watermark::new(5));
/// out.emit_batch(vec![2, 3]);
/// assert_eq!(out.len_records(), 3);
/// ```
#[derive(Debug)]
pub struct Collector<T> {
    current: Vec<T>,
    elements: Vec<StreamElement<T>>,
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
            elements: Vec::new(),
        }
    }

    /// Emits one record.
    #[inline]
    pub fn collect(&mut self, record: T) {
        self.current.push(record);
    }

    /// Emits a batch of records after everything emitted so far.
    #[inline]
    pub fn emit_batch(&mut self, batch: Vec<T>) {
        if batch.is_empty() {
            return;
        }
        self.seal_current();
        self.elements.push(StreamElement::Records(batch));
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
