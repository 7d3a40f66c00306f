//! [`UnorderedQueue`]: records leave as they complete, but never across a watermark.

use super::segments::Segments;
use super::{CompletionQueue, Emit};
use sluice_core::Watermark;

/// Completion order within watermark segments.
#[derive(Debug, Default)]
pub(crate) struct UnorderedQueue {
    segments: Segments,
}

impl UnorderedQueue {
    /// An empty queue for slots `0..capacity` (it grows if a larger slot is pushed).
    pub(crate) fn new(capacity: usize) -> Self {
        UnorderedQueue {
            segments: Segments::new(capacity),
        }
    }
}

impl CompletionQueue for UnorderedQueue {
    #[inline]
    fn push_record(&mut self, slot: usize, _key: u64) {
        self.segments.push_record(slot);
    }

    fn push_watermark(&mut self, watermark: Watermark, seq: u64) {
        self.segments.push_watermark(watermark, seq);
    }

    #[inline]
    fn complete(&mut self, slot: usize) {
        self.segments.make_ready(slot);
    }

    #[inline]
    fn pop(&mut self) -> Option<Emit> {
        self.segments.pop()
    }

    #[inline]
    fn emits_at_once(&self, _key: u64) -> bool {
        self.segments.in_first_segment()
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    fn watermarks(&self, out: &mut Vec<(u64, Watermark)>) {
        self.segments.watermarks(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_overtake_each_other_but_not_a_watermark() {
        let mut q = UnorderedQueue::new(4);
        q.push_record(0, 0);
        q.push_record(1, 0);
        q.push_watermark(Watermark::new(10), 2);
        q.push_record(2, 0);
        q.complete(2);
        assert_eq!(q.pop(), None, "a record after the watermark waits for it");
        q.complete(1);
        assert_eq!(q.pop(), Some(Emit::Record(1)));
        assert_eq!(q.pop(), None, "the watermark waits for record 0");
        q.complete(0);
        assert_eq!(q.pop(), Some(Emit::Record(0)));
        assert_eq!(q.pop(), Some(Emit::Watermark(Watermark::new(10))));
        assert_eq!(q.pop(), Some(Emit::Record(2)));
        assert_eq!(q.pop(), None);
        assert!(q.is_empty());
    }

    #[test]
    fn a_lone_watermark_leaves_at_once() {
        let mut q = UnorderedQueue::new(1);
        assert!(q.emits_at_once(0));
        q.push_watermark(Watermark::new(3), 0);
        assert_eq!(q.pop(), Some(Emit::Watermark(Watermark::new(3))));
        assert!(q.is_empty());
    }
}
