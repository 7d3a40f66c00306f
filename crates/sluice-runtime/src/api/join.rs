//! Joins of two streams (Flink's `KeyedStream.intervalJoin`, `DataStream.join` and
//! `DataStream.coGroup`).
//!
//! - [`IntervalJoin`] / [`IntervalJoined`]: two keyed streams, each left record joined with the
//!   right records of its key whose event times lie within bounds of its own, by the two-input
//!   operator of `process/join.rs`.
//! - [`JoinedStreams`] and [`CoGroupedStreams`] (`where_`, `equal_to`, `window`, then
//!   `apply`): window joins. As Flink builds them (`CoGroupedStreams`' tagged union and union
//!   key selector), each side's records are tagged as `Either::Left` or `Either::Right` (keeping
//!   their event times), keyed by each side's key selector, and cut into windows by the window
//!   operator with a window function that splits each window's records into the two sides: a
//!   join emits every pair of a key's window, a co-group calls its function once per key and
//!   window. Late records are dropped as by any window; results carry the window's
//!   `max_timestamp`.

use crate::api::keyed::KeyedStream;
use crate::api::processed::ProcessedStream;
use crate::api::stream::DataStream;
use crate::process::{
    CoMapOperator, IntervalJoinOperator, JoinBounds, OutputTag, ProcessJoinFunction, StateKey,
    either_key,
};
use crate::window::{
    AnyEvictor, AnyTrigger, Evictor, ProcessWindowFunction, TimeWindow, Trigger, WindowAssigner,
};
use sluice_core::{Data, Either, UserError};
use std::marker::PhantomData;
use std::time::Duration;

/// Two keyed streams to be joined by event-time intervals (Flink's `KeyedStream.IntervalJoin`):
/// see [`KeyedStream::interval_join`]; set the bounds with
/// [`between_millis`](Self::between_millis).
pub struct IntervalJoin<A, B, K, FA, FB> {
    left: KeyedStream<A, K, FA>,
    right: KeyedStream<B, K, FB>,
}

impl<A, B, K, FA, FB> IntervalJoin<A, B, K, FA, FB>
where
    A: Data,
    B: Data,
    K: StateKey,
    FA: Fn(&A) -> K + Clone + Send + 'static,
    FB: Fn(&B) -> K + Clone + Send + 'static,
{
    pub(crate) fn new(left: KeyedStream<A, K, FA>, right: KeyedStream<B, K, FB>) -> Self {
        IntervalJoin { left, right }
    }

    /// Joins a left record at event time `l` with the right records of its key at `r` where
    /// `l + lower <= r <= l + upper`, in milliseconds (Flink's `between(lower, upper)`; signed,
    /// since the right record may come before the left one: `between_millis(-5_000, 0)` is
    /// "up to five seconds before"). Both bounds are inclusive unless made exclusive. A
    /// `lower` above `upper` is refused when the job is submitted.
    pub fn between_millis(self, lower: i64, upper: i64) -> IntervalJoined<A, B, K, FA, FB> {
        IntervalJoined {
            left: self.left,
            right: self.right,
            lower,
            upper,
            lower_exclusive: false,
            upper_exclusive: false,
            left_late: None,
            right_late: None,
        }
    }
}

/// An interval join with its bounds (Flink's `KeyedStream.IntervalJoined`): make a bound
/// exclusive, route late records to side outputs, then [`process`](Self::process) each pair.
pub struct IntervalJoined<A, B, K, FA, FB> {
    left: KeyedStream<A, K, FA>,
    right: KeyedStream<B, K, FB>,
    lower: i64,
    upper: i64,
    lower_exclusive: bool,
    upper_exclusive: bool,
    left_late: Option<OutputTag<A>>,
    right_late: Option<OutputTag<B>>,
}

impl<A, B, K, FA, FB> IntervalJoined<A, B, K, FA, FB>
where
    A: Data,
    B: Data,
    K: StateKey,
    FA: Fn(&A) -> K + Clone + Send + 'static,
    FB: Fn(&B) -> K + Clone + Send + 'static,
{
    /// Excludes the lower bound: `l + lower < r`.
    pub fn lower_bound_exclusive(mut self) -> Self {
        self.lower_exclusive = true;
        self
    }

    /// Excludes the upper bound: `r < l + upper`.
    pub fn upper_bound_exclusive(mut self) -> Self {
        self.upper_exclusive = true;
        self
    }

    /// Sends left records that arrive late (event time below the watermark) to side output
    /// `tag`, with their event times, instead of dropping them.
    pub fn side_output_left_late_data(mut self, tag: &OutputTag<A>) -> Self {
        self.left_late = Some(tag.clone());
        self
    }

    /// Sends right records that arrive late (event time below the watermark) to side output
    /// `tag`, with their event times, instead of dropping them.
    pub fn side_output_right_late_data(mut self, tag: &OutputTag<B>) -> Self {
        self.right_late = Some(tag.clone());
        self
    }

    /// Calls `func` for each joined pair, in an operator named "Interval Join". The result is
    /// the function's main output; late records and the function's own side outputs come from
    /// [`ProcessedStream::get_side_output`].
    pub fn process<P: ProcessJoinFunction<A, B>>(self, func: P) -> ProcessedStream<P::Out> {
        let bounds = JoinBounds::new(
            self.lower,
            self.upper,
            self.lower_exclusive,
            self.upper_exclusive,
        );
        let op = IntervalJoinOperator::new(
            func,
            self.left.key_fn().clone(),
            self.right.key_fn().clone(),
            bounds,
        )
        .with_late_outputs(self.left_late, self.right_late);
        let raw = self
            .left
            .connect(&self.right)
            .transform("Interval Join", op);
        if self.lower > self.upper {
            raw.refuse(format!(
                "an interval join's lower bound ({} ms) is above its upper bound ({} ms)",
                self.lower, self.upper
            ));
        }
        ProcessedStream::new(raw, "Interval Join")
    }
}

/// Marks [`JoinedStreams`] as a join: `apply` takes a function of one pair.
#[derive(Debug)]
pub enum Join {}

/// Marks [`JoinedStreams`] as a co-group: `apply` takes a function of all of a key's records
/// in a window.
#[derive(Debug)]
pub enum CoGroup {}

/// Two streams to be joined (`M` = [`Join`], from [`DataStream::join`]) or co-grouped (`M` =
/// [`CoGroup`], from [`DataStream::co_group`]) in windows on equal keys (Flink's
/// `JoinedStreams` and `CoGroupedStreams`): choose each side's key with
/// [`where_`](Self::where_) and [`equal_to`](JoinWhere::equal_to), then the
/// [`window`](JoinEqualTo::window), then `apply`.
pub struct JoinedStreams<A, B, M = Join> {
    first: DataStream<A>,
    second: DataStream<B>,
    _m: PhantomData<fn() -> M>,
}

/// Two streams to be co-grouped in windows: see [`DataStream::co_group`].
pub type CoGroupedStreams<A, B> = JoinedStreams<A, B, CoGroup>;

impl<A: Data, B: Data, M> JoinedStreams<A, B, M> {
    pub(crate) fn new(first: DataStream<A>, second: DataStream<B>) -> Self {
        JoinedStreams {
            first,
            second,
            _m: PhantomData,
        }
    }

    /// The key of the first stream's records (Flink's `where`; `where` is a Rust keyword).
    pub fn where_<K, FA>(self, key: FA) -> JoinWhere<A, B, K, FA, M>
    where
        K: StateKey,
        FA: Fn(&A) -> K + Clone + Send + 'static,
    {
        JoinWhere {
            streams: self,
            key_a: key,
            _k: PhantomData,
        }
    }
}

/// A window join or co-group with the first stream's key: see [`equal_to`](Self::equal_to).
pub struct JoinWhere<A, B, K, FA, M> {
    streams: JoinedStreams<A, B, M>,
    key_a: FA,
    _k: PhantomData<fn() -> K>,
}

impl<A, B, K, FA, M> JoinWhere<A, B, K, FA, M>
where
    A: Data,
    B: Data,
    K: StateKey,
    FA: Fn(&A) -> K + Clone + Send + 'static,
{
    /// The key of the second stream's records, of the same type as the first's (Flink's
    /// `equalTo`): records of both with equal keys meet in the same windows.
    pub fn equal_to<FB>(self, key: FB) -> JoinEqualTo<A, B, K, FA, FB, M>
    where
        FB: Fn(&B) -> K + Clone + Send + 'static,
    {
        JoinEqualTo {
            where_: self,
            key_b: key,
        }
    }
}

/// A window join or co-group with both keys: see [`window`](Self::window).
pub struct JoinEqualTo<A, B, K, FA, FB, M> {
    where_: JoinWhere<A, B, K, FA, M>,
    key_b: FB,
}

impl<A, B, K, FA, FB, M> JoinEqualTo<A, B, K, FA, FB, M>
where
    A: Data,
    B: Data,
    K: StateKey,
    FA: Fn(&A) -> K + Clone + Send + 'static,
    FB: Fn(&B) -> K + Clone + Send + 'static,
{
    /// The windows both streams are cut into (any [`WindowAssigner`]: tumbling, sliding,
    /// sessions, event or processing time).
    pub fn window(self, assigner: WindowAssigner) -> JoinWindow<A, B, K, FA, FB, M> {
        JoinWindow {
            first: self.where_.streams.first,
            second: self.where_.streams.second,
            key_a: self.where_.key_a,
            key_b: self.key_b,
            assigner,
            allowed_lateness: Duration::ZERO,
            trigger: None,
            evictor: None,
            _m: PhantomData,
        }
    }
}

/// A window join or co-group with its windows (Flink's `WithWindow`): optionally set the
/// allowed lateness, a trigger or an evictor (over the tagged records, `Either<A, B>`), then
/// `apply` the function.
pub struct JoinWindow<A, B, K, FA, FB, M> {
    first: DataStream<A>,
    second: DataStream<B>,
    key_a: FA,
    key_b: FB,
    assigner: WindowAssigner,
    allowed_lateness: Duration,
    trigger: Option<AnyTrigger<Either<A, B>>>,
    evictor: Option<AnyEvictor<Either<A, B>>>,
    _m: PhantomData<fn() -> (K, M)>,
}

impl<A, B, K, FA, FB, M> JoinWindow<A, B, K, FA, FB, M>
where
    A: Data,
    B: Data,
    K: StateKey,
    FA: Fn(&A) -> K + Clone + Send + 'static,
    FB: Fn(&B) -> K + Clone + Send + 'static,
{
    /// Keeps each window `lateness` past its end (event time): a record arriving then fires
    /// the window again with it added, as `WindowedStream::allowed_lateness` does.
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.allowed_lateness = lateness;
        self
    }

    /// Replaces the assigner's default trigger (see `WindowedStream::trigger`); the trigger
    /// sees the tagged records.
    pub fn trigger<Tr: Trigger<Either<A, B>> + Clone>(mut self, trigger: Tr) -> Self {
        self.trigger = Some(AnyTrigger::from_trigger(trigger));
        self
    }

    /// Removes records from each window when it fires (see `WindowedStream::evictor`); the
    /// evictor sees the tagged records.
    pub fn evictor<E: Evictor<Either<A, B>> + Clone>(mut self, evictor: E) -> Self {
        self.evictor = Some(AnyEvictor::from_evictor(evictor));
        self
    }

    /// Tags both sides, keys them, and runs the window operator with `func`, named `name`.
    fn build<P>(self, name: &str, func: P) -> ProcessedStream<P::Out>
    where
        P: ProcessWindowFunction<K, Either<A, B>>,
    {
        let tagged = self.first.connect(&self.second).transform(
            &format!("{name} (tag inputs)"),
            CoMapOperator::new(
                |a: A| std::iter::once(Either::Left(a)),
                |b: B| std::iter::once(Either::Right(b)),
            ),
        );
        let mut windowed = tagged
            .key_by(either_key(self.key_a, self.key_b))
            .window(self.assigner)
            .allowed_lateness(self.allowed_lateness);
        if let Some(trigger) = self.trigger {
            windowed = windowed.trigger(trigger);
        }
        if let Some(evictor) = self.evictor {
            windowed = windowed.evictor(evictor);
        }
        windowed.process(func).name(name)
    }
}

impl<A, B, K, FA, FB> JoinWindow<A, B, K, FA, FB, Join>
where
    A: Data,
    B: Data,
    K: StateKey,
    FA: Fn(&A) -> K + Clone + Send + 'static,
    FB: Fn(&B) -> K + Clone + Send + 'static,
{
    /// Emits `f(a, b)` for every pair of a first-stream record `a` and a second-stream record
    /// `b` with equal keys in the same window (Flink's `JoinFunction`), in an operator named
    /// "Window Join". Each result carries its window's `max_timestamp` as event time.
    pub fn apply<O, F>(self, mut f: F) -> ProcessedStream<O>
    where
        O: Data,
        F: FnMut(A, B) -> O + Clone + Send + 'static,
    {
        self.flat_apply(move |a, b| std::iter::once(f(a, b)))
    }

    /// Emits everything `f(a, b)` returns for every pair of the window (Flink's
    /// `FlatJoinFunction`), in an operator named "Window Join".
    pub fn flat_apply<O, I, F>(self, f: F) -> ProcessedStream<O>
    where
        O: Data,
        I: IntoIterator<Item = O>,
        F: FnMut(A, B) -> I + Clone + Send + 'static,
    {
        self.build("Window Join", JoinPairs { f, _t: PhantomData })
    }
}

impl<A, B, K, FA, FB> JoinWindow<A, B, K, FA, FB, CoGroup>
where
    A: Data,
    B: Data,
    K: StateKey,
    FA: Fn(&A) -> K + Clone + Send + 'static,
    FB: Fn(&B) -> K + Clone + Send + 'static,
{
    /// Calls `f(key, firsts, seconds)` once per key and window with at least one record of
    /// either stream (Flink's `CoGroupFunction`; one side may be empty), with each side's
    /// records in arrival order, and emits what it returns, in an operator named
    /// "Window CoGroup". Each result carries its window's `max_timestamp` as event time.
    pub fn apply<O, I, F>(self, f: F) -> ProcessedStream<O>
    where
        O: Data,
        I: IntoIterator<Item = O>,
        F: FnMut(&K, Vec<A>, Vec<B>) -> I + Clone + Send + 'static,
    {
        self.build("Window CoGroup", CoGroupSides { f, _t: PhantomData })
    }
}

/// A window's tagged records split into the two sides, each in arrival order.
fn split<A: Clone, B: Clone>(elements: &[Either<A, B>]) -> (Vec<A>, Vec<B>) {
    let mut lefts = Vec::new();
    let mut rights = Vec::new();
    for e in elements {
        match e {
            Either::Left(a) => lefts.push(a.clone()),
            Either::Right(b) => rights.push(b.clone()),
        }
    }
    (lefts, rights)
}

/// The window function of a join: every pair of the window, left records outermost.
pub(crate) struct JoinPairs<F, A, B> {
    f: F,
    _t: PhantomData<fn(A, B)>,
}

impl<F: Clone, A, B> Clone for JoinPairs<F, A, B> {
    fn clone(&self) -> Self {
        JoinPairs {
            f: self.f.clone(),
            _t: PhantomData,
        }
    }
}

impl<K, A, B, O, I, F> ProcessWindowFunction<K, Either<A, B>> for JoinPairs<F, A, B>
where
    A: Data,
    B: Data,
    O: Data,
    I: IntoIterator<Item = O>,
    F: FnMut(A, B) -> I + Clone + Send + 'static,
{
    type Out = O;

    fn process(
        &mut self,
        _key: &K,
        _window: &TimeWindow,
        elements: &[Either<A, B>],
        out: &mut Vec<O>,
    ) -> Result<(), UserError> {
        let (lefts, rights) = split(elements);
        for a in &lefts {
            for b in &rights {
                out.extend((self.f)(a.clone(), b.clone()));
            }
        }
        Ok(())
    }
}

/// The window function of a co-group: one call per key and window.
pub(crate) struct CoGroupSides<F, A, B> {
    f: F,
    _t: PhantomData<fn(A, B)>,
}

impl<F: Clone, A, B> Clone for CoGroupSides<F, A, B> {
    fn clone(&self) -> Self {
        CoGroupSides {
            f: self.f.clone(),
            _t: PhantomData,
        }
    }
}

impl<K, A, B, O, I, F> ProcessWindowFunction<K, Either<A, B>> for CoGroupSides<F, A, B>
where
    A: Data,
    B: Data,
    O: Data,
    I: IntoIterator<Item = O>,
    F: FnMut(&K, Vec<A>, Vec<B>) -> I + Clone + Send + 'static,
{
    type Out = O;

    fn process(
        &mut self,
        key: &K,
        _window: &TimeWindow,
        elements: &[Either<A, B>],
        out: &mut Vec<O>,
    ) -> Result<(), UserError> {
        let (lefts, rights) = split(elements);
        out.extend((self.f)(key, lefts, rights));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The window join and co-group functions inside the window operator, as `apply` builds
    //! them, against a sequential model: random keys, event times and watermarks, tumbling and
    //! sliding windows; late records are dropped.

    use super::*;
    use crate::process::Tagged;
    use crate::testing::OperatorTestHarness;
    use crate::window::{
        LateRecordsDropped, Process, SlidingEventTimeWindows, TumblingEventTimeWindows,
        WindowOperator, WindowSpec,
    };
    use proptest::prelude::*;
    use sluice_core::Watermark;
    use std::collections::BTreeMap;

    /// (key, id).
    type Rec = (u8, u32);
    type In = Either<Rec, Rec>;
    /// A co-group's call: the key and each side's ids.
    type Group = (u8, Vec<u32>, Vec<u32>);

    fn key(r: &Rec) -> u8 {
        r.0
    }

    fn window_operator<P>(
        assigner: WindowAssigner,
        func: P,
    ) -> impl Operator<In, Out = Tagged<P::Out>>
    where
        P: ProcessWindowFunction<u8, In>,
    {
        let spec = WindowSpec {
            assigner,
            allowed_lateness: 0,
            late_tag: None,
            late_dropped: LateRecordsDropped::default(),
        };
        WindowOperator::new(spec, Process(func), either_key(key, key))
    }

    use crate::operator::Operator;

    #[derive(Clone, Debug)]
    enum Ev {
        Left(u8, i64),
        Right(u8, i64),
        Wm(i64),
    }

    fn run<Op: Operator<In>>(op: Op, events: &[Ev]) -> Vec<(Op::Out, Option<i64>)> {
        let mut h = OperatorTestHarness::new(op);
        let mut wm = i64::MIN;
        for (id, ev) in events.iter().enumerate() {
            let id = id as u32;
            match *ev {
                Ev::Wm(d) => {
                    wm = if wm == i64::MIN { d } else { wm + d };
                    h.process_watermark(Watermark::new(wm)).unwrap();
                }
                Ev::Left(k, t) => h.process_record_at(Either::Left((k, id)), t).unwrap(),
                Ev::Right(k, t) => h.process_record_at(Either::Right((k, id)), t).unwrap(),
            }
        }
        h.process_watermark(Watermark::MAX).unwrap();
        h.timed_records()
    }

    /// The windows `[start, start + size)` holding `t` (every `slide`), as Flink assigns them.
    fn windows_of(t: i64, size: i64, slide: i64) -> Vec<i64> {
        let last = t - t.rem_euclid(slide);
        (0..)
            .map(|i| last - i * slide)
            .take_while(|s| *s > t - size)
            .collect()
    }

    /// The model: per key and window start, the ids of each side's records in arrival order,
    /// leaving out a record for a window whose end the watermark had reached when it arrived
    /// (late for that window: it fired and was cleaned up already).
    #[allow(clippy::type_complexity)]
    fn model(events: &[Ev], size: i64, slide: i64) -> BTreeMap<(u8, i64), (Vec<u32>, Vec<u32>)> {
        let mut windows: BTreeMap<(u8, i64), (Vec<u32>, Vec<u32>)> = BTreeMap::new();
        let mut wm = i64::MIN;
        for (id, ev) in events.iter().enumerate() {
            let (left, k, t) = match *ev {
                Ev::Wm(d) => {
                    wm = if wm == i64::MIN { d } else { wm + d };
                    continue;
                }
                Ev::Left(k, t) => (true, k, t),
                Ev::Right(k, t) => (false, k, t),
            };
            for start in windows_of(t, size, slide) {
                if start + size - 1 <= wm {
                    continue;
                }
                let w = windows.entry((k, start)).or_default();
                if left { &mut w.0 } else { &mut w.1 }.push(id as u32);
            }
        }
        windows
    }

    fn events() -> impl Strategy<Value = Vec<Ev>> {
        let ev = prop_oneof![
            3 => (0u8..3, 0i64..100).prop_map(|(k, t)| Ev::Left(k, t)),
            3 => (0u8..3, 0i64..100).prop_map(|(k, t)| Ev::Right(k, t)),
            1 => (0i64..20).prop_map(Ev::Wm),
        ];
        prop::collection::vec(ev, 0..60)
    }

    /// Window size and slide (equal for tumbling windows), and the assigner.
    fn assigners() -> impl Strategy<Value = (i64, i64, WindowAssigner)> {
        prop_oneof![
            (1i64..30).prop_map(|size| (
                size,
                size,
                TumblingEventTimeWindows::of(Duration::from_millis(size as u64))
            )),
            (1i64..10, 1i64..4).prop_map(|(slide, n)| (
                slide * n,
                slide,
                SlidingEventTimeWindows::of(
                    Duration::from_millis((slide * n) as u64),
                    Duration::from_millis(slide as u64)
                )
            )),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn window_join_emits_every_pair_of_each_window(
            events in events(),
            (size, slide, assigner) in assigners(),
        ) {
            let join = JoinPairs { f: |a: Rec, b: Rec| [(a.0, a.1, b.1)], _t: PhantomData };
            let mut got: Vec<((u8, u32, u32), i64)> = run(window_operator(assigner, join), &events)
                .into_iter()
                .map(|(t, ts)| (t.into_main().unwrap(), ts.unwrap()))
                .collect();
            got.sort();
            let mut want = Vec::new();
            for ((k, start), (lefts, rights)) in model(&events, size, slide) {
                for &l in &lefts {
                    for &r in &rights {
                        want.push(((k, l, r), start + size - 1));
                    }
                }
            }
            want.sort();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn co_group_sees_each_key_and_window_once_with_both_sides(
            events in events(),
            (size, slide, assigner) in assigners(),
        ) {
            let ids = |rs: Vec<Rec>| rs.into_iter().map(|r| r.1).collect::<Vec<_>>();
            let co = CoGroupSides {
                f: move |k: &u8, a: Vec<Rec>, b: Vec<Rec>| Some((*k, ids(a), ids(b))),
                _t: PhantomData,
            };
            let mut got: Vec<(Group, i64)> =
                run(window_operator(assigner, co), &events)
                    .into_iter()
                    .map(|(t, ts)| (t.into_main().unwrap(), ts.unwrap()))
                    .collect();
            got.sort();
            let mut want: Vec<_> = model(&events, size, slide)
                .into_iter()
                .map(|((k, start), (l, r))| ((k, l, r), start + size - 1))
                .collect();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn late_records_of_a_window_join_are_dropped() {
        let join = JoinPairs {
            f: |a: Rec, b: Rec| [(a.1, b.1)],
            _t: PhantomData,
        };
        let assigner = TumblingEventTimeWindows::of(Duration::from_millis(10));
        let events = [
            Ev::Left(1, 5),   // 0: window [0, 10)
            Ev::Wm(9),        // fires [0, 10): no right record yet
            Ev::Right(1, 3),  // 2: late, dropped
            Ev::Left(1, 12),  // 3: window [10, 20)
            Ev::Right(1, 15), // 4
        ];
        let got: Vec<_> = run(window_operator(assigner, join), &events)
            .into_iter()
            .map(|(t, ts)| (t.into_main().unwrap(), ts.unwrap()))
            .collect();
        assert_eq!(got, vec![((3, 4), 19)]);
    }
}
