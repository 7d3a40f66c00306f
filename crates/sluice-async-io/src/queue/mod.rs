//! The completion queues: pure data structures deciding what may leave the operator, and when.
//!
//! A queue knows requests only by their slot number (`0..capacity`) and watermarks by value; it
//! does no I/O and reads no clock. The operator pushes every record and watermark in input order,
//! marks records complete, and pops what may be emitted:
//! - [`OrderedQueue`]: everything leaves in input order;
//! - [`UnorderedQueue`]: records leave in completion order, but never across a watermark;
//! - [`KeyedQueue`]: like unordered, and records of the same key leave in input order.
//!
//! Consecutive watermarks with no record between them are merged (only the last one is kept),
//! so a queue holds at most one watermark per record plus one, and stays bounded by capacity.

mod keyed;
mod ordered;
mod segments;
mod unordered;

#[cfg(test)]
mod proptests;

pub(crate) use keyed::KeyedQueue;
pub(crate) use ordered::OrderedQueue;
pub(crate) use unordered::UnorderedQueue;

use sluice_core::Watermark;

/// Slot number meaning "none" in intrusive lists.
pub(crate) const NIL: usize = usize::MAX;

/// What a queue lets leave next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Emit {
    /// The record in this slot: emit its results and free the slot.
    Record(usize),
    /// This watermark.
    Watermark(Watermark),
}

/// The operations every completion queue offers.
pub(crate) trait CompletionQueue {
    /// A record entered in `slot` (not yet complete). `key` matters only to key-ordered queues.
    fn push_record(&mut self, slot: usize, key: u64);
    /// A watermark arrived after everything pushed so far; `seq` is its input position, kept for
    /// snapshots.
    fn push_watermark(&mut self, watermark: Watermark, seq: u64);
    /// The record in `slot` has its final result.
    fn complete(&mut self, slot: usize);
    /// The next element that may leave, if any.
    fn pop(&mut self) -> Option<Emit>;
    /// Whether a record with `key`, pushed now and completed at once, would be the next to leave
    /// (so it may bypass the queue).
    fn emits_at_once(&self, key: u64) -> bool;
    /// Whether nothing is queued.
    fn is_empty(&self) -> bool;
    /// Appends the queued watermarks, with their input positions.
    fn watermarks(&self, out: &mut Vec<(u64, Watermark)>);
}

/// One of the three queues, chosen when the operator is built.
#[derive(Debug)]
pub(crate) enum AnyQueue {
    Ordered(OrderedQueue),
    Unordered(UnorderedQueue),
    Keyed(KeyedQueue),
}

impl CompletionQueue for AnyQueue {
    #[inline]
    fn push_record(&mut self, slot: usize, key: u64) {
        match self {
            AnyQueue::Ordered(q) => q.push_record(slot, key),
            AnyQueue::Unordered(q) => q.push_record(slot, key),
            AnyQueue::Keyed(q) => q.push_record(slot, key),
        }
    }
    fn push_watermark(&mut self, watermark: Watermark, seq: u64) {
        match self {
            AnyQueue::Ordered(q) => q.push_watermark(watermark, seq),
            AnyQueue::Unordered(q) => q.push_watermark(watermark, seq),
            AnyQueue::Keyed(q) => q.push_watermark(watermark, seq),
        }
    }
    #[inline]
    fn complete(&mut self, slot: usize) {
        match self {
            AnyQueue::Ordered(q) => q.complete(slot),
            AnyQueue::Unordered(q) => q.complete(slot),
            AnyQueue::Keyed(q) => q.complete(slot),
        }
    }
    #[inline]
    fn pop(&mut self) -> Option<Emit> {
        match self {
            AnyQueue::Ordered(q) => q.pop(),
            AnyQueue::Unordered(q) => q.pop(),
            AnyQueue::Keyed(q) => q.pop(),
        }
    }
    #[inline]
    fn emits_at_once(&self, key: u64) -> bool {
        match self {
            AnyQueue::Ordered(q) => q.emits_at_once(key),
            AnyQueue::Unordered(q) => q.emits_at_once(key),
            AnyQueue::Keyed(q) => q.emits_at_once(key),
        }
    }
    #[inline]
    fn is_empty(&self) -> bool {
        match self {
            AnyQueue::Ordered(q) => q.is_empty(),
            AnyQueue::Unordered(q) => q.is_empty(),
            AnyQueue::Keyed(q) => q.is_empty(),
        }
    }
    fn watermarks(&self, out: &mut Vec<(u64, Watermark)>) {
        match self {
            AnyQueue::Ordered(q) => q.watermarks(out),
            AnyQueue::Unordered(q) => q.watermarks(out),
            AnyQueue::Keyed(q) => q.watermarks(out),
        }
    }
}

/// Grows `v` so that index `i` exists.
#[inline]
pub(crate) fn ensure_index<T: Clone>(v: &mut Vec<T>, i: usize, fill: T) {
    if i >= v.len() {
        v.resize(i + 1, fill);
    }
}
