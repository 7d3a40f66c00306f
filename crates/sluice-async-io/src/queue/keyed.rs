//! [`KeyedQueue`]: records of the same key leave in input order, different keys overtake each
//! other, and no record crosses a watermark.
//!
//! Records of one key form a chain linked through their slots; only the head of a chain can
//! become ready. Keys are 64-bit hashes: two keys with the same hash are simply ordered with
//! respect to each other, which is safe (it only adds ordering).

use super::segments::Segments;
use super::{CompletionQueue, Emit, NIL, ensure_index};
use rustc_hash::FxHashMap;
use sluice_core::Watermark;

/// Per-key input order within watermark segments.
#[derive(Debug, Default)]
pub(crate) struct KeyedQueue {
    segments: Segments,
    /// Key -> (head slot, tail slot) of its chain of queued records.
    chains: FxHashMap<u64, (usize, usize)>,
    key_of: Vec<u64>,
    key_next: Vec<usize>,
    done: Vec<bool>,
}

impl KeyedQueue {
    /// An empty queue for slots `0..capacity` (it grows if a larger slot is pushed).
    pub(crate) fn new(capacity: usize) -> Self {
        let mut chains = FxHashMap::default();
        chains.reserve(capacity);
        KeyedQueue {
            segments: Segments::new(capacity),
            chains,
            key_of: vec![0; capacity],
            key_next: vec![NIL; capacity],
            done: vec![false; capacity],
        }
    }
}

impl CompletionQueue for KeyedQueue {
    fn push_record(&mut self, slot: usize, key: u64) {
        ensure_index(&mut self.key_of, slot, 0);
        ensure_index(&mut self.key_next, slot, NIL);
        ensure_index(&mut self.done, slot, false);
        self.segments.push_record(slot);
        self.key_of[slot] = key;
        self.key_next[slot] = NIL;
        self.done[slot] = false;
        match self.chains.get_mut(&key) {
            Some((_, tail)) => {
                self.key_next[*tail] = slot;
                *tail = slot;
            }
            None => {
                self.chains.insert(key, (slot, slot));
            }
        }
    }

    fn push_watermark(&mut self, watermark: Watermark, seq: u64) {
        self.segments.push_watermark(watermark, seq);
    }

    fn complete(&mut self, slot: usize) {
        self.done[slot] = true;
        if self
            .chains
            .get(&self.key_of[slot])
            .is_some_and(|(head, _)| *head == slot)
        {
            self.segments.make_ready(slot);
        }
    }

    fn pop(&mut self) -> Option<Emit> {
        let e = self.segments.pop()?;
        if let Emit::Record(slot) = e {
            self.done[slot] = false;
            let key = self.key_of[slot];
            let next = self.key_next[slot];
            if next == NIL {
                self.chains.remove(&key);
            } else {
                if let Some((head, _)) = self.chains.get_mut(&key) {
                    *head = next;
                }
                if self.done[next] {
                    self.segments.make_ready(next);
                }
            }
        }
        Some(e)
    }

    #[inline]
    fn emits_at_once(&self, key: u64) -> bool {
        self.segments.in_first_segment()
            && (self.chains.is_empty() || !self.chains.contains_key(&key))
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
    fn same_key_waits_other_keys_overtake() {
        let mut q = KeyedQueue::new(4);
        q.push_record(0, 7);
        q.push_record(1, 7);
        q.push_record(2, 8);
        assert!(!q.emits_at_once(7));
        assert!(!q.emits_at_once(8));
        assert!(q.emits_at_once(9));
        q.complete(1);
        q.complete(2);
        assert_eq!(q.pop(), Some(Emit::Record(2)), "key 8 overtakes key 7");
        assert_eq!(q.pop(), None, "slot 1 waits for slot 0 of the same key");
        q.complete(0);
        assert_eq!(q.pop(), Some(Emit::Record(0)));
        assert_eq!(q.pop(), Some(Emit::Record(1)));
        assert_eq!(q.pop(), None);
        assert!(q.is_empty());
        assert!(q.emits_at_once(7));
    }
}
