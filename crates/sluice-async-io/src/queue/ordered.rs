//! [`OrderedQueue`]: a ring of records and watermarks that leave strictly in input order.

use super::{CompletionQueue, Emit, ensure_index};
use sluice_core::Watermark;
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy)]
enum Elem {
    Record(usize),
    Watermark(Watermark, u64),
}

/// Records and watermarks in input order; only a completed head leaves.
#[derive(Debug, Default)]
pub(crate) struct OrderedQueue {
    ring: VecDeque<Elem>,
    done: Vec<bool>,
}

impl OrderedQueue {
    /// An empty queue for slots `0..capacity` (it grows if a larger slot is pushed).
    pub(crate) fn new(capacity: usize) -> Self {
        OrderedQueue {
            ring: VecDeque::with_capacity(2 * capacity + 1),
            done: vec![false; capacity],
        }
    }
}

impl CompletionQueue for OrderedQueue {
    #[inline]
    fn push_record(&mut self, slot: usize, _key: u64) {
        ensure_index(&mut self.done, slot, false);
        self.done[slot] = false;
        self.ring.push_back(Elem::Record(slot));
    }

    fn push_watermark(&mut self, watermark: Watermark, seq: u64) {
        if let Some(Elem::Watermark(w, s)) = self.ring.back_mut() {
            *w = watermark;
            *s = seq;
        } else {
            self.ring.push_back(Elem::Watermark(watermark, seq));
        }
    }

    #[inline]
    fn complete(&mut self, slot: usize) {
        ensure_index(&mut self.done, slot, false);
        self.done[slot] = true;
    }

    #[inline]
    fn pop(&mut self) -> Option<Emit> {
        match *self.ring.front()? {
            Elem::Watermark(w, _) => {
                self.ring.pop_front();
                Some(Emit::Watermark(w))
            }
            Elem::Record(slot) if self.done[slot] => {
                self.ring.pop_front();
                self.done[slot] = false;
                Some(Emit::Record(slot))
            }
            Elem::Record(_) => None,
        }
    }

    #[inline]
    fn emits_at_once(&self, _key: u64) -> bool {
        self.ring.is_empty()
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    fn watermarks(&self, out: &mut Vec<(u64, Watermark)>) {
        out.extend(self.ring.iter().filter_map(|e| match *e {
            Elem::Watermark(w, s) => Some((s, w)),
            Elem::Record(_) => None,
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completed_record_waits_for_the_head() {
        let mut q = OrderedQueue::new(4);
        q.push_record(0, 0);
        q.push_record(1, 0);
        q.push_watermark(Watermark::new(5), 2);
        q.complete(1);
        assert_eq!(q.pop(), None);
        q.complete(0);
        assert_eq!(q.pop(), Some(Emit::Record(0)));
        assert_eq!(q.pop(), Some(Emit::Record(1)));
        assert_eq!(q.pop(), Some(Emit::Watermark(Watermark::new(5))));
        assert_eq!(q.pop(), None);
        assert!(q.is_empty());
    }

    #[test]
    fn consecutive_watermarks_merge() {
        let mut q = OrderedQueue::new(1);
        q.push_record(0, 0);
        q.push_watermark(Watermark::new(1), 1);
        q.push_watermark(Watermark::new(2), 2);
        let mut w = Vec::new();
        q.watermarks(&mut w);
        assert_eq!(w, vec![(2, Watermark::new(2))]);
    }
}
