//! The interval join (Flink's `IntervalJoinOperator` and `ProcessJoinFunction`): two keyed
//! streams joined on equal keys where the right record's event time lies within bounds of the
//! left record's.
//!
//! [`ProcessJoinFunction`] is the user's callback for each joined pair, [`JoinContext`] what it
//! sees (both records' event times, the pair's, the outputs). The operator behind
//! `KeyedStream::interval_join` is a two-input operator over [`Either`]; it keeps each side's
//! records per key in keyed state, in buckets by event time, and one event-time cleanup timer
//! per bucket, so both are checkpointed by key group and follow their keys through a restore
//! at another parallelism.
//!
//! Flink's rules, one by one:
//! - a record without an event time fails the job;
//! - a record whose event time is below the watermark is late: it goes to the side's late
//!   side output if one is set, or is dropped;
//! - a left record at `l` joins every buffered right record at `r` with
//!   `l + lower <= r <= l + upper` (an exclusive bound is moved in by one millisecond), and a
//!   right record every buffered left record for which that holds; the pair's event time is
//!   `max(l, r)`;
//! - a left record stays buffered until the watermark reaches `l + upper` (`l` when
//!   `upper <= 0`), a right record until it reaches `r - lower` (`r` when `lower >= 0`): the
//!   last times at which a partner can still arrive without being late. As in Flink, a partner
//!   with exactly that event time arriving once the watermark is there finds it gone.

use super::co::timestamp_at;
use super::operator::store_failure;
use super::output::{OutputTag, Tagged};
use super::timed::TimedOperator;
use crate::operator::{Collector, Operator, OperatorContext};
use crate::process::StateKey;
use crate::state::{OperatorState, ValueState};
use crate::timer::{InternalTimers, Timer};
use serde::{Deserialize, Serialize};
use sluice_core::{CheckpointId, Data, Either, UserError, Watermark};
use std::collections::BTreeMap;
use std::marker::PhantomData;

/// The function of an interval join (Flink's `ProcessJoinFunction`): called once for each
/// joined pair, with the left (first) stream's record and the right (second) stream's.
///
/// See `KeyedStream::interval_join` for a whole job.
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::process::{JoinContext, ProcessJoinFunction};
///
/// /// How long after each click (user, time) an order (user, time) came.
/// #[derive(Clone)]
/// struct Delay;
/// impl ProcessJoinFunction<(u32, i64), (u32, i64)> for Delay {
///     type Out = (u32, i64);
///     fn process_element(&mut self, click: (u32, i64), order: (u32, i64), ctx: &mut JoinContext<'_, (u32, i64)>) -> Result<(), UserError> {
///         ctx.collect((click.0, ctx.right_timestamp() - ctx.left_timestamp()));
///         Ok(())
///     }
/// }
/// ```
pub trait ProcessJoinFunction<A, B>: Clone + Send + 'static {
    /// The main output's record type.
    type Out: Data;

    /// Called once per subtask before any record.
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let _ = ctx;
        Ok(())
    }

    /// Called for each pair of a left and a right record with equal keys and event times
    /// within the bounds.
    fn process_element(
        &mut self,
        left: A,
        right: B,
        ctx: &mut JoinContext<'_, Self::Out>,
    ) -> Result<(), UserError>;
}

/// What a [`ProcessJoinFunction`] sees for one joined pair (Flink's
/// `ProcessJoinFunction.Context`): both records' event times, the pair's (the later of the
/// two), and the outputs, which carry the pair's event time.
pub struct JoinContext<'a, Out> {
    left_timestamp: i64,
    right_timestamp: i64,
    out: &'a mut Collector<Tagged<Out>>,
}

impl<Out: Data> JoinContext<'_, Out> {
    /// The event time of the left record.
    pub fn left_timestamp(&self) -> i64 {
        self.left_timestamp
    }

    /// The event time of the right record.
    pub fn right_timestamp(&self) -> i64 {
        self.right_timestamp
    }

    /// The event time of the pair, `max(left, right)`: what its outputs carry.
    pub fn timestamp(&self) -> i64 {
        self.left_timestamp.max(self.right_timestamp)
    }

    /// Emits `value` on the main output with the pair's event time.
    pub fn collect(&mut self, value: Out) {
        let t = self.timestamp();
        self.out.collect_at(Tagged::Main(value), t);
    }

    /// Emits `value` on side output `tag` with the pair's event time.
    pub fn output<X: Data>(&mut self, tag: &OutputTag<X>, value: X) {
        let t = self.timestamp();
        self.out.collect_at(Tagged::side(tag, value), t);
    }
}

/// The interval join's bounds, both inclusive (an exclusive bound already moved in by one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct JoinBounds {
    pub(crate) lower: i64,
    pub(crate) upper: i64,
}

impl JoinBounds {
    /// `[lower, upper]`, each end moved in by one millisecond if exclusive (Flink's
    /// constructor does the same).
    pub(crate) fn new(
        lower: i64,
        upper: i64,
        lower_exclusive: bool,
        upper_exclusive: bool,
    ) -> Self {
        JoinBounds {
            lower: if lower_exclusive {
                lower.saturating_add(1)
            } else {
                lower
            },
            upper: if upper_exclusive {
                upper.saturating_sub(1)
            } else {
                upper
            },
        }
    }

    /// The event times of right records that join a left record at `l`, if any can.
    fn rights_of(&self, l: i64) -> Option<(i64, i64)> {
        let (lo, hi) = (l.saturating_add(self.lower), l.saturating_add(self.upper));
        (lo <= hi).then_some((lo, hi))
    }

    /// The event times of left records that join a right record at `r`, if any can.
    fn lefts_of(&self, r: i64) -> Option<(i64, i64)> {
        let (lo, hi) = (r.saturating_sub(self.upper), r.saturating_sub(self.lower));
        (lo <= hi).then_some((lo, hi))
    }

    /// When the watermark has passed every right record a left record at `l` can join.
    fn left_cleanup(&self, l: i64) -> i64 {
        if self.upper > 0 {
            l.saturating_add(self.upper)
        } else {
            l
        }
    }

    /// When the watermark has passed every left record a right record at `r` can join.
    fn right_cleanup(&self, r: i64) -> i64 {
        if self.lower < 0 {
            r.saturating_sub(self.lower)
        } else {
            r
        }
    }
}

/// Which buffer a cleanup timer empties, and its bucket (the records' event time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) enum Bucket {
    Left(i64),
    Right(i64),
}

/// One side's buffered records of one key, by event time (arrival order within a time).
type Buffer<T> = BTreeMap<i64, Vec<T>>;

/// The operator behind `IntervalJoined::process`: Flink's `IntervalJoinOperator` over
/// `Either<A, B>` records keyed by `key_a` (left) and `key_b` (right).
pub(crate) struct IntervalJoinOperator<A, B, K, FA, FB, P> {
    func: P,
    key_a: FA,
    key_b: FB,
    bounds: JoinBounds,
    left_late: Option<OutputTag<A>>,
    right_late: Option<OutputTag<B>>,
    left: ValueState<K, Buffer<A>>,
    right: ValueState<K, Buffer<B>>,
    timers: InternalTimers<K, Bucket>,
    max_parallelism: usize,
    _in: PhantomData<fn(A, B)>,
}

impl<A, B, K, FA, FB, P> Clone for IntervalJoinOperator<A, B, K, FA, FB, P>
where
    A: Data,
    B: Data,
    K: StateKey,
    FA: Clone,
    FB: Clone,
    P: Clone,
{
    /// A fresh instance: the same function and settings, nothing buffered.
    fn clone(&self) -> Self {
        let mut op = IntervalJoinOperator::new(
            self.func.clone(),
            self.key_a.clone(),
            self.key_b.clone(),
            self.bounds,
        );
        op.left_late = self.left_late.clone();
        op.right_late = self.right_late.clone();
        op
    }
}

impl<A, B, K, FA, FB, P> IntervalJoinOperator<A, B, K, FA, FB, P>
where
    A: Data,
    B: Data,
    K: StateKey,
{
    /// Joins with `func` the left records keyed by `key_a` and the right ones keyed by
    /// `key_b` (the functions of the two `key_by`s before it) within `bounds`.
    pub(crate) fn new(func: P, key_a: FA, key_b: FB, bounds: JoinBounds) -> Self {
        IntervalJoinOperator {
            func,
            key_a,
            key_b,
            bounds,
            left_late: None,
            right_late: None,
            left: ValueState::new("_join/left"),
            right: ValueState::new("_join/right"),
            timers: InternalTimers::new("join"),
            max_parallelism: crate::DEFAULT_MAX_PARALLELISM,
            _in: PhantomData,
        }
    }

    /// Late left records go to side output `left`, late right records to `right`.
    pub(crate) fn with_late_outputs(
        mut self,
        left: Option<OutputTag<A>>,
        right: Option<OutputTag<B>>,
    ) -> Self {
        self.left_late = left;
        self.right_late = right;
        self
    }

    /// How many records each side holds buffered (left, right).
    #[cfg(test)]
    pub(crate) fn buffered(&mut self) -> (usize, usize) {
        fn count<K, T>(state: &mut ValueState<K, Buffer<T>>) -> usize
        where
            K: StateKey,
            T: Data,
        {
            let mut n = 0;
            state
                .for_each_mut(|_, b| {
                    n += b.values().map(Vec::len).sum::<usize>();
                    Ok::<(), crate::state::StoreError>(())
                })
                .map(|()| n)
                .unwrap_or(usize::MAX)
        }
        (count(&mut self.left), count(&mut self.right))
    }

    /// Whether nothing is buffered and no cleanup timer is left.
    #[cfg(test)]
    pub(crate) fn is_empty(&mut self) -> bool {
        self.left.is_empty() && self.right.is_empty() && self.timers.is_empty()
    }
}

/// Adds `value` to `key`'s buffer at `t`.
fn buffer<K: StateKey, T: Data>(state: &mut ValueState<K, Buffer<T>>, key: K, t: i64, value: T) {
    state.get_or_default(key).entry(t).or_default().push(value);
}

/// Removes `key`'s bucket at `t`, and the key once it has none.
fn remove_bucket<K: StateKey, T: Data>(state: &mut ValueState<K, Buffer<T>>, key: &K, t: i64) {
    if let Some(buf) = state.get_mut(key) {
        buf.remove(&t);
        if buf.is_empty() {
            state.remove(key);
        }
    }
}

impl<A, B, K, FA, FB, P> TimedOperator<K, Bucket, Tagged<P::Out>>
    for IntervalJoinOperator<A, B, K, FA, FB, P>
where
    A: Data,
    B: Data,
    K: StateKey,
    P: ProcessJoinFunction<A, B>,
{
    fn timers(&mut self) -> &mut InternalTimers<K, Bucket> {
        &mut self.timers
    }

    fn on_timer(
        &mut self,
        timer: Timer<K, Bucket>,
        _out: &mut Collector<Tagged<P::Out>>,
    ) -> Result<(), UserError> {
        match timer.namespace {
            Bucket::Left(t) => remove_bucket(&mut self.left, &timer.key, t),
            Bucket::Right(t) => remove_bucket(&mut self.right, &timer.key, t),
        }
        store_failure(&mut self.left)?;
        store_failure(&mut self.right)
    }
}

impl<A, B, K, FA, FB, P> Operator<Either<A, B>> for IntervalJoinOperator<A, B, K, FA, FB, P>
where
    A: Data,
    B: Data,
    K: StateKey,
    FA: Fn(&A) -> K + Clone + Send + 'static,
    FB: Fn(&B) -> K + Clone + Send + 'static,
    P: ProcessJoinFunction<A, B>,
{
    type Out = Tagged<P::Out>;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.max_parallelism = ctx.max_parallelism();
        ctx.attach_keyed_state(&mut self.left)?;
        ctx.attach_keyed_state(&mut self.right)?;
        ctx.attach_timers(&mut self.timers)?;
        self.func.open(ctx)
    }

    fn process_batch(
        &mut self,
        batch: Vec<Either<A, B>>,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        let timestamps = out.take_input_timestamps();
        let watermark = self.timers.current_watermark();
        // A record reads its key's buffer on the other side and adds to its own: in a store,
        // the keys of the batch's records in time are read into both states first, in one go
        // per state (on the heap there is nothing to read, and no key is extracted twice).
        if self.left.is_attached() {
            let keys: Vec<K> = batch
                .iter()
                .enumerate()
                .filter(|(i, _)| {
                    timestamp_at(timestamps.as_deref(), *i).is_some_and(|t| t >= watermark)
                })
                .map(|(_, record)| match record {
                    Either::Left(a) => (self.key_a)(a),
                    Either::Right(b) => (self.key_b)(b),
                })
                .collect();
            self.left.prefetch(&keys);
            self.right.prefetch(&keys);
            store_failure(&mut self.left)?;
            store_failure(&mut self.right)?;
        }
        for (i, record) in batch.into_iter().enumerate() {
            let Some(t) = timestamp_at(timestamps.as_deref(), i) else {
                let side = if record.is_left() { "left" } else { "right" };
                return Err(format!(
                    "interval join: a record of the {side} input has no event time; both inputs \
                     of an interval join need timestamps (assign_timestamps_and_watermarks)"
                )
                .into());
            };
            match record {
                Either::Left(a) => {
                    if t < watermark {
                        if let Some(tag) = &self.left_late {
                            out.collect_at(Tagged::side(tag, a), t);
                        }
                        continue;
                    }
                    let key = (self.key_a)(&a);
                    if let (Some((lo, hi)), Some(rights)) =
                        (self.bounds.rights_of(t), self.right.get(&key))
                    {
                        for (&r, bucket) in rights.range(lo..=hi) {
                            for b in bucket {
                                let mut ctx = JoinContext {
                                    left_timestamp: t,
                                    right_timestamp: r,
                                    out,
                                };
                                self.func.process_element(a.clone(), b.clone(), &mut ctx)?;
                            }
                        }
                    }
                    self.timers.register_event_time_timer(
                        key.clone(),
                        Bucket::Left(t),
                        self.bounds.left_cleanup(t),
                    );
                    buffer(&mut self.left, key, t, a);
                }
                Either::Right(b) => {
                    if t < watermark {
                        if let Some(tag) = &self.right_late {
                            out.collect_at(Tagged::side(tag, b), t);
                        }
                        continue;
                    }
                    let key = (self.key_b)(&b);
                    if let (Some((lo, hi)), Some(lefts)) =
                        (self.bounds.lefts_of(t), self.left.get(&key))
                    {
                        for (&l, bucket) in lefts.range(lo..=hi) {
                            for a in bucket {
                                let mut ctx = JoinContext {
                                    left_timestamp: l,
                                    right_timestamp: t,
                                    out,
                                };
                                self.func.process_element(a.clone(), b.clone(), &mut ctx)?;
                            }
                        }
                    }
                    self.timers.register_event_time_timer(
                        key.clone(),
                        Bucket::Right(t),
                        self.bounds.right_cleanup(t),
                    );
                    buffer(&mut self.right, key, t, b);
                }
            }
            store_failure(&mut self.left)?;
            store_failure(&mut self.right)?;
        }
        self.timers.check()?;
        Ok(())
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        self.fire_event_timers(watermark, out)
    }

    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
        _out: &mut Collector<Self::Out>,
    ) -> Result<OperatorState, UserError> {
        let mut state = OperatorState::default();
        self.left.snapshot_into(self.max_parallelism, &mut state)?;
        self.right.snapshot_into(self.max_parallelism, &mut state)?;
        self.timers
            .snapshot_into(self.max_parallelism, &mut state)?;
        Ok(state)
    }

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.left.restore_from(&state)?;
        self.right.restore_from(&state)?;
        self.timers.restore_from(&state)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The interval join against a sequential model (random keys, event times, watermarks and
    //! bounds, negative and exclusive ones included), its cleanup, a record without an event
    //! time, and its state through restores at the same and other parallelisms.

    use super::*;
    use crate::testing::OperatorTestHarness;
    use proptest::prelude::*;

    /// (key, id): ids tell the records apart in the output.
    type Rec = (u8, u32);
    type In = Either<Rec, Rec>;
    /// (left id, right id, left time, right time).
    type Joined = (u32, u32, i64, i64);

    #[derive(Clone)]
    struct Pairs;
    impl ProcessJoinFunction<Rec, Rec> for Pairs {
        type Out = Joined;
        fn process_element(
            &mut self,
            left: Rec,
            right: Rec,
            ctx: &mut JoinContext<'_, Self::Out>,
        ) -> Result<(), UserError> {
            assert_eq!(left.0, right.0, "only equal keys meet");
            let (l, r) = (ctx.left_timestamp(), ctx.right_timestamp());
            assert_eq!(ctx.timestamp(), l.max(r));
            ctx.collect((left.1, right.1, l, r));
            Ok(())
        }
    }

    type Op = IntervalJoinOperator<Rec, Rec, u8, fn(&Rec) -> u8, fn(&Rec) -> u8, Pairs>;

    fn key(r: &Rec) -> u8 {
        r.0
    }

    fn late_left() -> OutputTag<Rec> {
        OutputTag::new("late left")
    }

    fn late_right() -> OutputTag<Rec> {
        OutputTag::new("late right")
    }

    fn operator(bounds: JoinBounds) -> Op {
        IntervalJoinOperator::new(Pairs, key as fn(&Rec) -> u8, key as fn(&Rec) -> u8, bounds)
            .with_late_outputs(Some(late_left()), Some(late_right()))
    }

    #[derive(Clone, Debug)]
    enum Ev {
        Left(u8, i64),
        Right(u8, i64),
        /// Advance the watermark by this much.
        Wm(i64),
    }

    /// What the operator emitted: joined pairs (left id, right id, left time, right time, the
    /// output's time), late left ids, late right ids; each sorted.
    type Seen = (Vec<(u32, u32, i64, i64, i64)>, Vec<u32>, Vec<u32>);

    fn seen(records: Vec<(Tagged<Joined>, Option<i64>)>) -> Seen {
        let (mut pairs, mut ll, mut lr) = (Vec::new(), Vec::new(), Vec::new());
        for (t, ts) in records {
            let ts = ts.expect("every output has an event time");
            match t {
                Tagged::Main((l, r, lt, rt)) => pairs.push((l, r, lt, rt, ts)),
                side => {
                    if let Some(rec) = side.clone().into_side(&late_left()) {
                        ll.push(rec.1);
                    } else if let Some(rec) = side.into_side(&late_right()) {
                        lr.push(rec.1);
                    } else {
                        panic!("an unknown side output");
                    }
                }
            }
        }
        pairs.sort();
        ll.sort();
        lr.sort();
        (pairs, ll, lr)
    }

    /// The model: one pass over the events. A record is late when its time is below the
    /// watermark at its arrival; two records of a key within the bounds join when neither is
    /// late and the earlier one's buffer was not cleaned up yet. Its cleanup time is `l + upper`
    /// for a left record, `r - lower` for a right one, or its own time when that is earlier;
    /// as with Flink's timers, it is cleaned up by the first watermark after its arrival that
    /// reaches that time, so a record arriving when the watermark is there already stays until
    /// the next watermark.
    fn model(events: &[Ev], b: JoinBounds) -> Seen {
        // (is left, key, time, id, watermarks seen before its arrival)
        let mut kept: Vec<(bool, u8, i64, u32, u32)> = Vec::new();
        let (mut ll, mut lr) = (Vec::new(), Vec::new());
        let mut wm = i64::MIN;
        let mut marks = 0u32;
        let mut pairs = Vec::new();
        for (id, ev) in events.iter().enumerate() {
            let id = id as u32;
            let (left, k, t) = match *ev {
                Ev::Wm(d) => {
                    wm = if wm == i64::MIN { d } else { wm + d };
                    marks += 1;
                    continue;
                }
                Ev::Left(k, t) => (true, k, t),
                Ev::Right(k, t) => (false, k, t),
            };
            if t < wm {
                if left {
                    ll.push(id)
                } else {
                    lr.push(id)
                }
                continue;
            }
            for &(other_left, ok, ot, oid, seen) in &kept {
                if other_left == left || ok != k {
                    continue;
                }
                let (lt, rt, lid, rid) = if left {
                    (t, ot, id, oid)
                } else {
                    (ot, t, oid, id)
                };
                let within = (lt as i128 + b.lower as i128) <= rt as i128
                    && rt as i128 <= lt as i128 + b.upper as i128;
                let cleanup = if other_left {
                    if b.upper > 0 { ot + b.upper } else { ot }
                } else if b.lower < 0 {
                    ot - b.lower
                } else {
                    ot
                };
                let cleaned = marks > seen && wm >= cleanup;
                if within && !cleaned {
                    pairs.push((lid, rid, lt, rt, lt.max(rt)));
                }
            }
            kept.push((left, k, t, id, marks));
        }
        pairs.sort();
        (pairs, ll, lr)
    }

    /// Feeds `events` (numbered from `first_id`) to the harnesses of `parallelism` subtasks,
    /// each record to the subtask that owns its key, each watermark to all.
    fn feed(
        harnesses: &mut [OperatorTestHarness<In, Op>],
        events: &[Ev],
        first_id: u32,
        wm: &mut i64,
    ) {
        for (i, ev) in events.iter().enumerate() {
            let id = first_id + i as u32;
            let (rec, t) = match *ev {
                Ev::Wm(d) => {
                    *wm = if *wm == i64::MIN { d } else { *wm + d };
                    for h in harnesses.iter_mut() {
                        h.process_watermark(Watermark::new(*wm)).unwrap();
                    }
                    continue;
                }
                Ev::Left(k, t) => (Either::Left((k, id)), t),
                Ev::Right(k, t) => (Either::Right((k, id)), t),
            };
            let k = match &rec {
                Either::Left(r) | Either::Right(r) => r.0,
            };
            let h = harnesses
                .iter_mut()
                .find(|h| h.owns_key(&k))
                .expect("one subtask owns every key");
            h.process_record_at(rec, t).unwrap();
        }
    }

    fn finish(harnesses: &mut [OperatorTestHarness<In, Op>]) -> Seen {
        let mut all = Vec::new();
        for h in harnesses.iter_mut() {
            h.process_watermark(Watermark::MAX).unwrap();
            assert!(h.operator_mut().is_empty(), "the final watermark cleans up");
            all.extend(h.timed_records());
        }
        seen(all)
    }

    fn events() -> impl Strategy<Value = Vec<Ev>> {
        let ev = prop_oneof![
            3 => (0u8..4, 0i64..80).prop_map(|(k, t)| Ev::Left(k, t)),
            3 => (0u8..4, 0i64..80).prop_map(|(k, t)| Ev::Right(k, t)),
            1 => (0i64..15).prop_map(Ev::Wm),
        ];
        prop::collection::vec(ev, 0..60)
    }

    fn bounds() -> impl Strategy<Value = (JoinBounds, i64, i64)> {
        (-25i64..25, 0i64..30, any::<bool>(), any::<bool>()).prop_map(|(lower, width, le, ue)| {
            (
                JoinBounds::new(lower, lower + width, le, ue),
                lower,
                lower + width,
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn interval_join_matches_the_sequential_model(events in events(), (b, _, _) in bounds()) {
            let mut h = vec![OperatorTestHarness::new(operator(b))];
            let mut wm = i64::MIN;
            feed(&mut h, &events, 0, &mut wm);
            prop_assert_eq!(finish(&mut h), model(&events, b));
        }

        #[test]
        fn interval_join_state_survives_restores_at_other_parallelisms(
            events in events(),
            (b, _, _) in bounds(),
            cut in 0usize..60,
            from in 1usize..4,
            to in 1usize..4,
        ) {
            let cut = cut.min(events.len());
            let mut before: Vec<_> = (0..from)
                .map(|s| OperatorTestHarness::for_subtask(operator(b), s, from))
                .collect();
            let mut wm = i64::MIN;
            feed(&mut before, &events[..cut], 0, &mut wm);
            let snapshots: Vec<OperatorState> =
                before.iter_mut().map(|h| h.snapshot(1).unwrap()).collect();
            let mut emitted: Vec<_> = before.iter().flat_map(|h| h.timed_records()).collect();
            let mut after: Vec<_> = (0..to)
                .map(|s| {
                    OperatorTestHarness::for_subtask(operator(b), s, to)
                        .restore(snapshots.clone())
                        .unwrap()
                })
                .collect();
            // A watermark is not part of the state: upstream sends it again.
            if wm != i64::MIN {
                for h in &mut after {
                    h.process_watermark(Watermark::new(wm)).unwrap();
                }
            }
            feed(&mut after, &events[cut..], cut as u32, &mut wm);
            let (pairs, ll, lr) = finish(&mut after);
            let (mut p0, mut l0, mut r0) = seen(std::mem::take(&mut emitted));
            p0.extend(pairs);
            l0.extend(ll);
            r0.extend(lr);
            p0.sort();
            l0.sort();
            r0.sort();
            prop_assert_eq!((p0, l0, r0), model(&events, b));
        }
    }

    #[test]
    fn bounds_and_cleanup_times_follow_flink() {
        // between(-2, 3): a left record at 10 meets right records at 8..=13.
        let b = JoinBounds::new(-2, 3, false, false);
        assert_eq!(b.rights_of(10), Some((8, 13)));
        assert_eq!(b.lefts_of(10), Some((7, 12)));
        assert_eq!((b.left_cleanup(10), b.right_cleanup(10)), (13, 12));
        // Exclusive bounds move in by one; (0, 0) exclusive joins nothing.
        let b = JoinBounds::new(-2, 3, true, true);
        assert_eq!(b.rights_of(10), Some((9, 12)));
        assert_eq!(JoinBounds::new(0, 0, true, true).rights_of(10), None);
        // Both bounds positive: a right record is kept only until its own time.
        let b = JoinBounds::new(2, 5, false, false);
        assert_eq!((b.left_cleanup(10), b.right_cleanup(10)), (15, 10));
        // Both negative: a left record is kept only until its own time.
        let b = JoinBounds::new(-5, -2, false, false);
        assert_eq!((b.left_cleanup(10), b.right_cleanup(10)), (10, 15));
        // Near the ends of time nothing overflows.
        let b = JoinBounds::new(-10, 10, false, false);
        assert_eq!(b.rights_of(i64::MAX - 1), Some((i64::MAX - 11, i64::MAX)));
        assert_eq!(b.lefts_of(i64::MIN + 1), Some((i64::MIN, i64::MIN + 11)));
    }

    #[test]
    fn buffers_shrink_as_the_watermark_passes_and_are_empty_after_the_last() {
        // Left records kept until t + 10, right ones until t + 5.
        let mut h = OperatorTestHarness::new(operator(JoinBounds::new(-5, 10, false, false)));
        for t in 0..10 {
            h.process_record_at(Either::Left((1, t as u32)), t).unwrap();
            h.process_record_at(Either::Right((1 + (t % 2) as u8, t as u32)), t)
                .unwrap();
        }
        assert_eq!(h.operator_mut().buffered(), (10, 10));
        h.process_watermark(Watermark::new(4)).unwrap();
        assert_eq!(h.operator_mut().buffered(), (10, 10));
        h.process_watermark(Watermark::new(5)).unwrap();
        assert_eq!(
            h.operator_mut().buffered(),
            (10, 9),
            "the right record at 0 is gone at 5"
        );
        h.process_watermark(Watermark::new(12)).unwrap();
        assert_eq!(h.operator_mut().buffered(), (7, 2));
        h.process_watermark(Watermark::new(19)).unwrap();
        assert_eq!(h.operator_mut().buffered(), (0, 0));
        assert!(h.operator_mut().is_empty(), "no key and no timer is left");
        // The watermark passes on.
        assert_eq!(
            h.watermarks(),
            vec![4, 5, 12, 19]
                .into_iter()
                .map(Watermark::new)
                .collect::<Vec<_>>()
        );
        // A snapshot of an empty join holds nothing.
        assert_eq!(h.snapshot(1).unwrap().keyed_entries().len(), 0);
    }

    #[test]
    fn a_record_at_the_cleanup_time_misses_the_partner_cleaned_up_as_in_flink() {
        let mut h = OperatorTestHarness::new(operator(JoinBounds::new(0, 5, false, false)));
        h.process_record_at(Either::Left((1, 0)), 10).unwrap();
        h.process_watermark(Watermark::new(15)).unwrap();
        // 15 is not late (not below the watermark), but the left record at 10 was kept only
        // until the watermark reached 10 + 5.
        h.process_record_at(Either::Right((1, 1)), 15).unwrap();
        h.process_record_at(Either::Right((1, 2)), 14).unwrap();
        let (pairs, ll, lr) = seen(h.timed_records());
        assert!(pairs.is_empty(), "{pairs:?}");
        assert!(ll.is_empty());
        assert_eq!(lr, vec![2], "14 is late");
    }

    #[test]
    fn a_record_without_an_event_time_fails_naming_the_side() {
        let mut h = OperatorTestHarness::new(operator(JoinBounds::new(0, 5, false, false)));
        let err = h.process_record(Either::Right((1, 0))).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("right input has no event time"),
            "{message}"
        );
    }

    #[test]
    fn late_records_are_dropped_without_a_side_output() {
        let op = IntervalJoinOperator::new(
            Pairs,
            key as fn(&Rec) -> u8,
            key as fn(&Rec) -> u8,
            JoinBounds::new(-100, 100, false, false),
        );
        let mut h = OperatorTestHarness::<In, _>::new(op);
        h.process_record_at(Either::Left((1, 0)), 50).unwrap();
        h.process_watermark(Watermark::new(50)).unwrap();
        h.process_record_at(Either::Right((1, 1)), 49).unwrap();
        h.process_record_at(Either::Right((1, 2)), 50).unwrap();
        let out = h.records();
        assert_eq!(out.len(), 1, "only the pair with the record at 50");
        assert!(matches!(out[0], Tagged::Main((0, 2, 50, 50))));
        assert_eq!(h.operator_mut().buffered(), (1, 1));
    }

    #[test]
    fn a_batch_reads_its_keys_from_a_store_in_one_read_per_state() {
        let backend = std::sync::Arc::new(crate::state::CountingBackend::default());
        let ctx = crate::operator::OperatorContext::for_test("join", 0, 1)
            .with_state_backend(backend.clone());
        let op = operator(JoinBounds::new(-100, 100, false, false));
        let mut h = OperatorTestHarness::<In, _>::with_context(op, ctx);
        let batch = |keys: std::ops::Range<u8>| {
            let records: Vec<In> = keys
                .flat_map(|k| [Either::Left((k, 0)), Either::Right((k, 1))])
                .collect();
            let times = vec![10; records.len()];
            (records, times)
        };
        let (records, times) = batch(0..64);
        h.process_timed_batch(records, times).unwrap();
        // The snapshot writes both sides back: from now on a missing key is read.
        h.snapshot(1).unwrap();
        let (records, times) = batch(64..128);
        h.process_timed_batch(records, times).unwrap();
        assert_eq!(
            backend.reads(),
            (0, 2),
            "(single reads, reads of many keys)"
        );
        assert_eq!(h.operator_mut().buffered(), (128, 128));
    }
}
