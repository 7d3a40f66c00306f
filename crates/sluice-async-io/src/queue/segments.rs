//! [`Segments`]: records grouped between watermarks, shared by the unordered and key-ordered
//! queues.
//!
//! Each segment holds the records that arrived between two watermarks and ends with the later
//! watermark; the last segment is open (no watermark yet). Only the first segment may emit. Its
//! ready records leave in the order they became ready; when it has no unfinished record left, its
//! watermark leaves and the next segment becomes first. Ready lists are linked through the slots,
//! so no allocation happens per record.

use super::{Emit, NIL, ensure_index};
use sluice_core::Watermark;
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy)]
struct Segment {
    /// Records pushed into this segment and not yet popped.
    unfinished: usize,
    /// Ready list (slots), oldest first.
    head: usize,
    tail: usize,
    /// The watermark closing the segment, with its input position; `None` for the open segment.
    closing: Option<(Watermark, u64)>,
}

impl Segment {
    const OPEN: Segment = Segment {
        unfinished: 0,
        head: NIL,
        tail: NIL,
        closing: None,
    };
}

/// Watermark-separated segments of records with per-segment ready lists.
#[derive(Debug, Default)]
pub(crate) struct Segments {
    segs: VecDeque<Segment>,
    /// The number of the first segment; segment numbers grow by one per watermark.
    front_no: u64,
    /// The segment number of each slot's record.
    slot_seg: Vec<u64>,
    /// Ready-list links.
    next: Vec<usize>,
    records: usize,
}

impl Segments {
    pub(crate) fn new(capacity: usize) -> Self {
        let mut segs = VecDeque::with_capacity(capacity + 2);
        segs.push_back(Segment::OPEN);
        Segments {
            segs,
            front_no: 0,
            slot_seg: vec![0; capacity],
            next: vec![NIL; capacity],
            records: 0,
        }
    }

    fn last_mut(&mut self) -> &mut Segment {
        if self.segs.is_empty() {
            self.segs.push_back(Segment::OPEN);
        }
        let n = self.segs.len() - 1;
        &mut self.segs[n]
    }

    /// Adds a record to the open segment.
    #[inline]
    pub(crate) fn push_record(&mut self, slot: usize) {
        ensure_index(&mut self.slot_seg, slot, 0);
        ensure_index(&mut self.next, slot, NIL);
        self.last_mut().unfinished += 1;
        self.slot_seg[slot] = self.front_no + self.segs.len() as u64 - 1;
        self.next[slot] = NIL;
        self.records += 1;
    }

    /// Closes the open segment with `watermark`, or moves the previous segment's watermark up if
    /// no record arrived since.
    pub(crate) fn push_watermark(&mut self, watermark: Watermark, seq: u64) {
        let n = self.segs.len();
        let last_empty = self.last_mut().unfinished == 0;
        if last_empty && n >= 2 {
            self.segs[n - 2].closing = Some((watermark, seq));
        } else {
            self.last_mut().closing = Some((watermark, seq));
            self.segs.push_back(Segment::OPEN);
        }
    }

    /// Appends `slot` to its segment's ready list.
    #[inline]
    pub(crate) fn make_ready(&mut self, slot: usize) {
        let idx = (self.slot_seg[slot] - self.front_no) as usize;
        let tail = self.segs[idx].tail;
        self.next[slot] = NIL;
        if tail == NIL {
            self.segs[idx].head = slot;
        } else {
            self.next[tail] = slot;
        }
        self.segs[idx].tail = slot;
    }

    /// The next ready record of the first segment, or its watermark once it is finished.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Emit> {
        let front = self.segs.front_mut()?;
        if front.head != NIL {
            let slot = front.head;
            front.head = self.next[slot];
            if front.head == NIL {
                front.tail = NIL;
            }
            front.unfinished -= 1;
            self.records -= 1;
            return Some(Emit::Record(slot));
        }
        if front.unfinished == 0
            && let Some((w, _)) = front.closing
        {
            self.segs.pop_front();
            self.front_no += 1;
            if self.segs.is_empty() {
                self.segs.push_back(Segment::OPEN);
            }
            return Some(Emit::Watermark(w));
        }
        None
    }

    /// Whether no watermark is waiting, so a record pushed now belongs to the first segment.
    #[inline]
    pub(crate) fn in_first_segment(&self) -> bool {
        self.segs.len() <= 1
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.records == 0 && self.segs.len() <= 1
    }

    pub(crate) fn watermarks(&self, out: &mut Vec<(u64, Watermark)>) {
        out.extend(
            self.segs
                .iter()
                .filter_map(|s| s.closing.map(|(w, q)| (q, w))),
        );
    }
}
