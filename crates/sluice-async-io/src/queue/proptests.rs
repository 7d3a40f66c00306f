//! Property tests of the three queues against a model, over random completion orders, keys,
//! watermark positions and slot reuse.

use super::*;
use proptest::prelude::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Ordered,
    Unordered,
    Keyed,
}

#[derive(Debug, Clone)]
enum Op {
    Push(u64),
    Watermark,
    Complete(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u64..4).prop_map(Op::Push),
        1 => Just(Op::Watermark),
        4 => any::<usize>().prop_map(Op::Complete),
    ]
}

#[derive(Debug)]
enum Elem {
    Rec {
        key: u64,
        completed: bool,
        emitted: Option<usize>,
    },
    Wm {
        value: i64,
        emitted: Option<usize>,
    },
}

struct Harness<Q> {
    q: Q,
    mode: Mode,
    elems: Vec<Elem>,
    /// Slot -> index in `elems` of the record it holds.
    active: Vec<Option<usize>>,
    free: Vec<usize>,
    emitted: usize,
    next_wm: i64,
}

impl<Q: CompletionQueue> Harness<Q> {
    fn new(q: Q, mode: Mode, capacity: usize) -> Self {
        Harness {
            q,
            mode,
            elems: Vec::new(),
            active: vec![None; capacity],
            free: (0..capacity).rev().collect(),
            emitted: 0,
            next_wm: 0,
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Push(key) => {
                let Some(slot) = self.free.pop() else { return };
                self.active[slot] = Some(self.elems.len());
                self.elems.push(Elem::Rec {
                    key,
                    completed: false,
                    emitted: None,
                });
                self.q.push_record(slot, key);
            }
            Op::Watermark => {
                self.next_wm += 1;
                let seq = self.elems.len() as u64;
                self.elems.push(Elem::Wm {
                    value: self.next_wm,
                    emitted: None,
                });
                self.q.push_watermark(Watermark::new(self.next_wm), seq);
            }
            Op::Complete(pick) => {
                let pending: Vec<usize> = (0..self.active.len())
                    .filter(|&s| {
                        self.active[s].is_some_and(|i| {
                            matches!(
                                self.elems[i],
                                Elem::Rec {
                                    completed: false,
                                    ..
                                }
                            )
                        })
                    })
                    .collect();
                if pending.is_empty() {
                    return;
                }
                let slot = pending[pick % pending.len()];
                if let Some(i) = self.active[slot]
                    && let Elem::Rec { completed, .. } = &mut self.elems[i]
                {
                    *completed = true;
                }
                self.q.complete(slot);
            }
        }
        self.drain();
        self.check_nothing_emittable_is_held();
    }

    fn drain(&mut self) {
        while let Some(e) = self.q.pop() {
            let n = self.emitted;
            self.emitted += 1;
            match e {
                Emit::Record(slot) => {
                    let i = self.active[slot].take().expect("popped a free slot");
                    match &mut self.elems[i] {
                        Elem::Rec {
                            completed, emitted, ..
                        } => {
                            assert!(*completed, "record {i} left before it completed");
                            assert!(emitted.is_none(), "record {i} left twice");
                            *emitted = Some(n);
                        }
                        Elem::Wm { .. } => unreachable!(),
                    }
                    self.free.push(slot);
                }
                Emit::Watermark(w) => {
                    let i = self
                        .elems
                        .iter()
                        .position(
                            |e| matches!(e, Elem::Wm { value, .. } if *value == w.timestamp()),
                        )
                        .expect("unknown watermark");
                    match &mut self.elems[i] {
                        Elem::Wm { emitted, .. } => {
                            assert!(emitted.is_none(), "watermark {w:?} left twice");
                            *emitted = Some(n);
                        }
                        Elem::Rec { .. } => unreachable!(),
                    }
                }
            }
        }
    }

    fn rec_emitted(&self, i: usize) -> bool {
        matches!(
            self.elems[i],
            Elem::Rec {
                emitted: Some(_),
                ..
            }
        )
    }

    fn records_before_emitted(&self, end: usize) -> bool {
        (0..end).all(|j| !matches!(self.elems[j], Elem::Rec { .. }) || self.rec_emitted(j))
    }

    /// Liveness: after a drain, nothing the mode allows to leave is still queued.
    fn check_nothing_emittable_is_held(&self) {
        for (i, e) in self.elems.iter().enumerate() {
            match *e {
                Elem::Rec {
                    key,
                    completed: true,
                    emitted: None,
                } => {
                    let last_wm = (0..i)
                        .rev()
                        .find(|&j| matches!(self.elems[j], Elem::Wm { .. }));
                    let emittable = match self.mode {
                        Mode::Ordered => self.records_before_emitted(i),
                        Mode::Unordered => last_wm.is_none_or(|w| self.records_before_emitted(w)),
                        Mode::Keyed => {
                            last_wm.is_none_or(|w| self.records_before_emitted(w))
                                && (0..i).all(|j| match self.elems[j] {
                                    Elem::Rec { key: k, .. } if k == key => self.rec_emitted(j),
                                    _ => true,
                                })
                        }
                    };
                    assert!(
                        !emittable,
                        "completed record {i} is held back: {:?}",
                        self.elems
                    );
                }
                Elem::Wm { emitted: None, .. } => {
                    let required = !matches!(self.elems.get(i + 1), Some(Elem::Wm { .. }));
                    if required {
                        assert!(
                            !self.records_before_emitted(i),
                            "watermark {i} is held back: {:?}",
                            self.elems
                        );
                    }
                }
                _ => {}
            }
        }
    }

    /// Completes everything still pending, drains, and checks the order of everything emitted.
    fn finish(mut self) {
        for slot in 0..self.active.len() {
            if let Some(i) = self.active[slot]
                && let Elem::Rec { completed, .. } = &mut self.elems[i]
                && !*completed
            {
                *completed = true;
                self.q.complete(slot);
            }
        }
        self.drain();
        assert!(
            self.q.is_empty(),
            "queue not empty after completing everything"
        );
        let idx = |e: &Elem| match e {
            Elem::Rec { emitted, .. } | Elem::Wm { emitted, .. } => *emitted,
        };
        for (i, e) in self.elems.iter().enumerate() {
            match e {
                Elem::Rec { emitted: None, .. } => panic!("record {i} never left"),
                Elem::Wm {
                    emitted: Some(w), ..
                } => {
                    for (j, other) in self.elems.iter().enumerate() {
                        if let Elem::Rec {
                            emitted: Some(r), ..
                        } = other
                        {
                            if j < i {
                                assert!(r < w, "record {j} left after the later watermark {i}");
                            } else {
                                assert!(r > w, "record {j} left before the earlier watermark {i}");
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        if let Some(last) = self
            .elems
            .iter()
            .rposition(|e| matches!(e, Elem::Wm { .. }))
        {
            assert!(
                idx(&self.elems[last]).is_some(),
                "the last watermark never left"
            );
        }
        let wm_order: Vec<usize> = self
            .elems
            .iter()
            .filter(|e| matches!(e, Elem::Wm { .. }))
            .filter_map(idx)
            .collect();
        assert!(
            wm_order.windows(2).all(|w| w[0] < w[1]),
            "watermarks reordered"
        );
        let recs: Vec<(u64, usize)> = self
            .elems
            .iter()
            .filter_map(|e| match e {
                Elem::Rec {
                    key,
                    emitted: Some(n),
                    ..
                } => Some((*key, *n)),
                _ => None,
            })
            .collect();
        match self.mode {
            Mode::Ordered => assert!(recs.windows(2).all(|w| w[0].1 < w[1].1), "out of order"),
            Mode::Keyed => {
                for k in 0..4 {
                    let of_k: Vec<usize> = recs.iter().filter(|r| r.0 == k).map(|r| r.1).collect();
                    assert!(of_k.windows(2).all(|w| w[0] < w[1]), "key {k} out of order");
                }
            }
            Mode::Unordered => {}
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn ordered_queue_keeps_input_order(ops in proptest::collection::vec(op(), 0..200), cap in 1usize..8) {
        let mut h = Harness::new(OrderedQueue::new(cap), Mode::Ordered, cap);
        for o in &ops { h.apply(o); }
        h.finish();
    }

    #[test]
    fn unordered_queue_never_crosses_a_watermark(ops in proptest::collection::vec(op(), 0..200), cap in 1usize..8) {
        let mut h = Harness::new(UnorderedQueue::new(cap), Mode::Unordered, cap);
        for o in &ops { h.apply(o); }
        h.finish();
    }

    #[test]
    fn keyed_queue_keeps_order_per_key(ops in proptest::collection::vec(op(), 0..200), cap in 1usize..8) {
        let mut h = Harness::new(KeyedQueue::new(cap), Mode::Keyed, cap);
        for o in &ops { h.apply(o); }
        h.finish();
    }

    #[test]
    fn any_queue_dispatches_like_its_variant(ops in proptest::collection::vec(op(), 0..100), cap in 1usize..6) {
        let mut h = Harness::new(AnyQueue::Keyed(KeyedQueue::new(1)), Mode::Keyed, cap);
        for o in &ops { h.apply(o); }
        h.finish();
    }

    /// The fast path: when a queue says a record would leave at once, pushing and completing it
    /// must indeed make it the next element out.
    #[test]
    fn emits_at_once_is_truthful(ops in proptest::collection::vec(op(), 0..100), key in 0u64..4, mode in 0..3u8) {
        let cap = 6;
        let q = match mode {
            0 => AnyQueue::Ordered(OrderedQueue::new(cap)),
            1 => AnyQueue::Unordered(UnorderedQueue::new(cap)),
            _ => AnyQueue::Keyed(KeyedQueue::new(cap)),
        };
        let m = [Mode::Ordered, Mode::Unordered, Mode::Keyed][mode as usize];
        let mut h = Harness::new(q, m, cap + 1);
        h.free.retain(|&s| s != cap);
        for o in &ops { h.apply(o); }
        if h.q.emits_at_once(key) {
            h.q.push_record(cap, key);
            h.q.complete(cap);
            prop_assert_eq!(h.q.pop(), Some(Emit::Record(cap)));
        }
    }
}
