//! The window operator against a sequential model (a `BTreeMap` of windows that applies
//! Flink's rules one event at a time): tumbling, sliding and session windows, with out-of-order
//! records, random watermarks and allowed lateness give the same results and the same late
//! records after every input event. Plus checkpoints, processing time and cleanup.

use super::*;
use crate::operator::{Collector, Operator, OperatorContext};
use crate::process::{OutputTag, Tagged};
use proptest::prelude::*;
use sluice_core::{StreamElement, Watermark};
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::time::Duration;

type Rec = (u8, i64);
/// (key, window start, window end, count, sum of timestamps)
type Out = (u8, i64, i64, u64, i64);

#[derive(Clone, Debug)]
enum Ev {
    Rec(u8, i64),
    Wm(i64),
}

#[derive(Clone)]
struct CountSum;
impl AggregateFunction<Rec> for CountSum {
    type Acc = (u64, i64);
    type Out = (u64, i64);
    fn create_accumulator(&self) -> (u64, i64) {
        (0, 0)
    }
    fn add(&self, v: Rec, acc: &mut (u64, i64)) {
        acc.0 += 1;
        acc.1 += v.1;
    }
    fn get_result(&self, acc: &(u64, i64)) -> (u64, i64) {
        *acc
    }
    fn merge(&self, a: (u64, i64), b: (u64, i64)) -> (u64, i64) {
        (a.0 + b.0, a.1 + b.1)
    }
}

type WithWindow = fn(&u8, &TimeWindow, (u64, i64)) -> Out;
fn with_window(k: &u8, w: &TimeWindow, (n, s): (u64, i64)) -> Out {
    (*k, w.start, w.end, n, s)
}

type TestOperator = WindowOperator<Rec, u8, fn(&Rec) -> u8, Aggregate<CountSum, WithWindow, Out>>;

fn operator(assigner: WindowAssigner, lateness: i64) -> TestOperator {
    operator_with(
        assigner,
        lateness,
        Some(OutputTag::new("late")),
        LateRecordsDropped::default(),
    )
}

fn operator_with(
    assigner: WindowAssigner,
    lateness: i64,
    late_tag: Option<OutputTag<Rec>>,
    late_dropped: LateRecordsDropped,
) -> TestOperator {
    let spec = WindowSpec {
        assigner,
        allowed_lateness: lateness,
        late_tag,
        late_dropped,
    };
    let key: fn(&Rec) -> u8 = |r| r.0;
    WindowOperator::new(
        spec,
        Aggregate {
            agg: CountSum,
            with_window: with_window as WithWindow,
            _r: PhantomData,
        },
        key,
    )
}

type AggregateContents = Aggregate<CountSum, WithWindow, Out>;
type RecKey = fn(&Rec) -> u8;
type Triggered = TriggerWindowOperator<Rec, u8, RecKey, Incremental<AggregateContents>>;
type TriggeredEvicting = TriggerWindowOperator<Rec, u8, RecKey, Evicting<AggregateContents, Rec>>;

/// The triggered operator (`triggered.rs`) with `trigger`, keeping accumulators.
fn triggered_operator(
    assigner: WindowAssigner,
    lateness: i64,
    trigger: AnyTrigger<Rec>,
) -> Triggered {
    let key: fn(&Rec) -> u8 = |r| r.0;
    TriggerWindowOperator::new(
        spec(assigner, lateness),
        trigger,
        Incremental(aggregate_contents()),
        key,
    )
}

/// The triggered operator with `trigger` and an evictor that keeps every record: the
/// evicting operator, folding the aggregate over the records at each firing.
fn evicting_operator(
    assigner: WindowAssigner,
    lateness: i64,
    trigger: AnyTrigger<Rec>,
) -> TriggeredEvicting {
    let key: fn(&Rec) -> u8 = |r| r.0;
    TriggerWindowOperator::new(
        spec(assigner, lateness),
        trigger,
        Evicting {
            contents: aggregate_contents(),
            evictor: AnyEvictor::from_evictor(CountEvictor::of(usize::MAX)),
        },
        key,
    )
}

fn spec(assigner: WindowAssigner, lateness: i64) -> WindowSpec<Rec> {
    WindowSpec {
        assigner,
        allowed_lateness: lateness,
        late_tag: Some(OutputTag::new("late")),
        late_dropped: LateRecordsDropped::default(),
    }
}

fn aggregate_contents() -> AggregateContents {
    Aggregate {
        agg: CountSum,
        with_window: with_window as WithWindow,
        _r: PhantomData,
    }
}

/// Runs the events through the operator; per event, the sorted results and late records.
fn run_operator(
    mut op: impl Operator<Rec, Out = Tagged<Out>>,
    events: &[Ev],
) -> Vec<(Vec<Out>, Vec<Rec>)> {
    op.open(&OperatorContext::for_test("window", 0, 1)).unwrap();
    run_operator_on(&mut op, events)
}

fn run_operator_on(
    op: &mut impl Operator<Rec, Out = Tagged<Out>>,
    events: &[Ev],
) -> Vec<(Vec<Out>, Vec<Rec>)> {
    let late = OutputTag::<Rec>::new("late");
    let mut c = Collector::new();
    let mut steps = Vec::new();
    for e in events {
        match *e {
            Ev::Rec(k, t) => {
                c.set_input_timestamps(Some(vec![t]));
                op.process_batch(vec![(k, t)], &mut c).unwrap();
            }
            Ev::Wm(w) => op.process_watermark(Watermark::new(w), &mut c).unwrap(),
        }
        let (mut outs, mut lates) = (Vec::new(), Vec::new());
        for el in c.take_elements() {
            if let StreamElement::Records(b) = el {
                for (r, ts) in b.iter_timed() {
                    match r.clone() {
                        Tagged::Main(o) => {
                            assert_eq!(ts, Some(o.2 - 1), "a result carries max_timestamp");
                            outs.push(o);
                        }
                        side => lates.extend(side.into_side(&late)),
                    }
                }
            }
        }
        outs.sort();
        lates.sort();
        steps.push((outs, lates));
    }
    steps
}

/// One window of the model.
#[derive(Clone, Debug)]
struct MWin {
    count: u64,
    sum: i64,
    /// Its trigger timer at `max_timestamp` is registered.
    pending: bool,
}

/// Flink's rules, one event at a time, over a `BTreeMap` of (key, window).
fn run_model(assigner: WindowAssigner, lateness: i64, events: &[Ev]) -> Vec<(Vec<Out>, Vec<Rec>)> {
    let mut wins: BTreeMap<(u8, TimeWindow), MWin> = BTreeMap::new();
    let mut wm = i64::MIN;
    let cleanup = |w: &TimeWindow| w.max_timestamp().checked_add(lateness).unwrap_or(i64::MAX);
    let out = |k: u8, w: &TimeWindow, m: &MWin| (k, w.start, w.end, m.count, m.sum);
    let mut steps = Vec::new();
    for e in events {
        let (mut outs, mut lates) = (Vec::new(), Vec::new());
        match *e {
            Ev::Rec(k, t) => {
                let mut assigned = Vec::new();
                assigner.assign(t, &mut assigned);
                let mut targets = Vec::new();
                if assigner.is_merging() {
                    let w = assigned[0];
                    let touching: Vec<TimeWindow> = wins
                        .keys()
                        .filter(|(kk, x)| *kk == k && x.intersects(&w))
                        .map(|(_, x)| *x)
                        .collect();
                    let contained = touching.len() == 1
                        && touching[0].start <= w.start
                        && touching[0].end >= w.end;
                    if touching.is_empty() || contained {
                        targets.push(touching.first().copied().unwrap_or(w));
                    } else {
                        let cover = touching.iter().fold(w, |c, x| c.cover(x));
                        let mut merged = MWin {
                            count: 0,
                            sum: 0,
                            pending: cover.max_timestamp() > wm,
                        };
                        for x in touching {
                            let m = wins.remove(&(k, x)).unwrap();
                            merged.count += m.count;
                            merged.sum += m.sum;
                        }
                        wins.insert((k, cover), merged);
                        targets.push(cover);
                    }
                } else {
                    targets = assigned;
                }
                targets.retain(|w| cleanup(w) > wm);
                if targets.is_empty() && t.saturating_add(lateness) <= wm {
                    lates.push((k, t));
                }
                for w in targets {
                    let m = wins.entry((k, w)).or_insert(MWin {
                        count: 0,
                        sum: 0,
                        pending: false,
                    });
                    m.count += 1;
                    m.sum += t;
                    if w.max_timestamp() <= wm {
                        outs.push(out(k, &w, m));
                    } else {
                        m.pending = true;
                    }
                }
            }
            Ev::Wm(w) => {
                wm = wm.max(w);
                for ((k, win), m) in wins.iter_mut() {
                    if m.pending && win.max_timestamp() <= wm {
                        m.pending = false;
                        outs.push(out(*k, win, m));
                    }
                }
                wins.retain(|(_, win), _| cleanup(win) > wm);
            }
        }
        outs.sort();
        lates.sort();
        steps.push((outs, lates));
    }
    steps
}

/// Records with out-of-order timestamps and watermarks that only grow (ending at the maximum).
fn events() -> impl Strategy<Value = Vec<Ev>> {
    prop::collection::vec((0u8..4, 0i64..300, 0u8..4), 1..120).prop_map(|raw| {
        let mut wm = -1;
        let mut evs = Vec::new();
        for (k, t, wm_step) in raw {
            evs.push(Ev::Rec(k % 3, t));
            if wm_step == 0 {
                wm += i64::from(k) * 15 + 1;
                evs.push(Ev::Wm(wm));
            }
        }
        evs.push(Ev::Wm(i64::MAX));
        evs
    })
}

fn lateness() -> impl Strategy<Value = i64> {
    prop_oneof![Just(0i64), Just(7), Just(40)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn tumbling_windows_match_the_model(evs in events(), size in 5u64..60, lateness in lateness()) {
        let a = TumblingEventTimeWindows::of(Duration::from_millis(size));
        prop_assert_eq!(run_operator(operator(a, lateness), &evs), run_model(a, lateness, &evs));
    }

    #[test]
    fn sliding_windows_match_the_model(
        evs in events(), slide in 3u64..30, times in 1u64..4, extra in 0u64..3, lateness in lateness()
    ) {
        let a = SlidingEventTimeWindows::of(Duration::from_millis(slide * times + extra), Duration::from_millis(slide));
        prop_assert_eq!(run_operator(operator(a, lateness), &evs), run_model(a, lateness, &evs));
    }

    #[test]
    fn session_windows_match_the_model(evs in events(), gap in 1u64..40, lateness in lateness()) {
        let a = EventTimeSessionWindows::with_gap(Duration::from_millis(gap));
        prop_assert_eq!(run_operator(operator(a, lateness), &evs), run_model(a, lateness, &evs));
    }

    /// A snapshot at any point restored into a fresh operator continues exactly as the
    /// original would have: session windows (contents and timers), tumbling and sliding
    /// windows (panes, and which of their windows had fired, with lateness).
    #[test]
    fn a_restored_operator_continues_like_the_original(
        evs in events(), cut in 0usize..120, a in any_assigner(), lateness in lateness()
    ) {
        let cut = cut.min(evs.len());
        let whole = run_operator(operator(a, lateness), &evs);
        let mut first = operator(a, lateness);
        first.open(&OperatorContext::for_test("window", 0, 1)).unwrap();
        let head = run_operator_on(&mut first, &evs[..cut]);
        let mut c = Collector::new();
        let state = first.snapshot_state(sluice_core::CheckpointId(1), &mut c).unwrap();
        let mut second = operator(a, lateness);
        second.initialize_state(state).unwrap();
        second.open(&OperatorContext::for_test("window", 0, 1)).unwrap();
        // The restored operator has not seen the watermark yet: give it the last one first.
        if let Some(w) = last_watermark(&evs[..cut]) {
            let steps = run_operator_on(&mut second, &[Ev::Wm(w)]);
            prop_assert_eq!(&steps[0], &(Vec::new(), Vec::new()), "nothing is due twice");
        }
        let tail = run_operator_on(&mut second, &evs[cut..]);
        let mut both = head;
        both.extend(tail);
        prop_assert_eq!(both, whole);
    }

    /// The same across a rescale 1 -> 2: each key's windows (and whether they fired) follow
    /// its key group, and the two subtasks together continue as the one would have.
    #[test]
    fn a_rescaled_operator_continues_like_the_original(
        evs in events(), cut in 0usize..120, a in any_assigner(), lateness in lateness()
    ) {
        const MAX_PARALLELISM: usize = 128;
        let cut = cut.min(evs.len());
        let whole = run_operator(operator(a, lateness), &evs);
        let mut first = operator(a, lateness);
        first.open(&OperatorContext::for_test("window", 0, 1)).unwrap();
        let head = run_operator_on(&mut first, &evs[..cut]);
        let mut c = Collector::new();
        let state = first.snapshot_state(sluice_core::CheckpointId(1), &mut c).unwrap();
        let states = crate::state::redistribute(vec![state], 2, MAX_PARALLELISM);
        let mut subtasks = Vec::new();
        for (i, state) in states.into_iter().enumerate() {
            let mut op = operator(a, lateness);
            op.initialize_state(state).unwrap();
            op.open(&OperatorContext::for_test("window", i, 2)).unwrap();
            if let Some(w) = last_watermark(&evs[..cut]) {
                let steps = run_operator_on(&mut op, &[Ev::Wm(w)]);
                prop_assert_eq!(&steps[0], &(Vec::new(), Vec::new()), "nothing is due twice");
            }
            subtasks.push(op);
        }
        let owner = |k: u8| {
            crate::key_groups::subtask_for_key_group(
                crate::key_groups::key_group(&k, MAX_PARALLELISM),
                MAX_PARALLELISM,
                2,
            )
        };
        let mut both = head;
        for e in &evs[cut..] {
            let mut step = (Vec::new(), Vec::new());
            for (i, op) in subtasks.iter_mut().enumerate() {
                if matches!(*e, Ev::Rec(k, _) if owner(k) != i) {
                    continue;
                }
                let (outs, lates) = run_operator_on(op, std::slice::from_ref(e)).remove(0);
                step.0.extend(outs);
                step.1.extend(lates);
            }
            step.0.sort();
            step.1.sort();
            both.push(step);
        }
        prop_assert_eq!(both, whole);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// The triggered operator running the default triggers as triggers (Flink's
    /// `EventTimeTrigger` set explicitly, which the API sends to the fast path) follows the
    /// same rules as the fast operator: the model's results and late records after every
    /// event, for tumbling, sliding and session windows with lateness. With an evictor that
    /// keeps everything, the evicting operator does too.
    #[test]
    fn the_triggered_operator_with_the_event_time_trigger_matches_the_model(
        evs in events(), a in any_assigner(), lateness in lateness()
    ) {
        let want = run_model(a, lateness, &evs);
        let t = || AnyTrigger::from_trigger(EventTimeTrigger::create());
        prop_assert_eq!(&run_operator(triggered_operator(a, lateness, t()), &evs), &want);
        prop_assert_eq!(&run_operator(evicting_operator(a, lateness, t()), &evs), &want);
    }

    /// With a count trigger (its count is per window and key, checkpointed) and an evicting
    /// operator (all records of each window checkpointed), a snapshot at any point restored
    /// into a fresh operator, at parallelism 1 or rescaled to 2, continues exactly as the
    /// original.
    #[test]
    fn a_restored_or_rescaled_triggered_operator_continues_like_the_original(
        evs in events(), cut in 0usize..120, a in any_assigner(), lateness in lateness(),
        n in 1u64..4, purge in any::<bool>(), parallelism in 1usize..3,
    ) {
        let trigger = || if purge {
            AnyTrigger::from_trigger(PurgingTrigger::of(CountTrigger::of(n)))
        } else {
            AnyTrigger::from_trigger(CountTrigger::of(n))
        };
        let on = Backends::Heap;
        check_restore(|| triggered_operator(a, lateness, trigger()), &evs, cut, parallelism, on)?;
        check_restore(|| evicting_operator(a, lateness, trigger()), &evs, cut, parallelism, on)?;
    }

    /// The triggered and evicting operators with their window contents, trigger state and
    /// sessions in a store (a cache of 16 values per state) follow the model too.
    #[test]
    fn the_triggered_operator_in_a_store_matches_the_model(
        evs in events(), a in any_assigner(), lateness in lateness()
    ) {
        let want = run_model(a, lateness, &evs);
        let t = || AnyTrigger::from_trigger(EventTimeTrigger::create());
        let mut op = triggered_operator(a, lateness, t());
        op.open(&store_context(0, 1)).unwrap();
        prop_assert_eq!(&run_operator_on(&mut op, &evs), &want);
        let mut op = evicting_operator(a, lateness, t());
        op.open(&store_context(0, 1)).unwrap();
        prop_assert_eq!(&run_operator_on(&mut op, &evs), &want);
    }

    /// With a count trigger, a snapshot of the triggered operator taken with its state in a
    /// store or on the heap restores into either, at parallelism 1 or 2, and continues as the
    /// original.
    #[test]
    fn the_triggered_operator_moves_between_the_heap_and_a_store(
        evs in events(), cut in 0usize..120, a in any_assigner(), lateness in lateness(),
        n in 1u64..4, from_store in any::<bool>(), to_store in any::<bool>(),
        parallelism in 1usize..3,
    ) {
        let trigger = || AnyTrigger::from_trigger(CountTrigger::of(n));
        let on = Backends::Stores { from: from_store, to: to_store };
        check_restore(|| triggered_operator(a, lateness, trigger()), &evs, cut, parallelism, on)?;
        check_restore(|| evicting_operator(a, lateness, trigger()), &evs, cut, parallelism, on)?;
    }
}

/// Where the operators of `check_restore` keep their keyed state before and after the restore.
#[derive(Clone, Copy)]
enum Backends {
    Heap,
    Stores { from: bool, to: bool },
}

impl Backends {
    fn context(self, before: bool, subtask: usize, parallelism: usize) -> OperatorContext {
        let store = match self {
            Backends::Heap => false,
            Backends::Stores { from, to } => {
                if before {
                    from
                } else {
                    to
                }
            }
        };
        if store {
            store_context(subtask, parallelism)
        } else {
            OperatorContext::for_test("window", subtask, parallelism)
        }
    }
}

/// Runs `evs` through one operator, and through one cut at `cut`, snapshot and restored at
/// `parallelism` (records to their key's subtask): the same steps.
fn check_restore<Op: Operator<Rec, Out = Tagged<Out>>>(
    make: impl Fn() -> Op,
    evs: &[Ev],
    cut: usize,
    parallelism: usize,
    on: Backends,
) -> Result<(), TestCaseError> {
    const MAX_PARALLELISM: usize = 128;
    let cut = cut.min(evs.len());
    let whole = run_operator(make(), evs);
    let mut first = make();
    first.open(&on.context(true, 0, 1)).unwrap();
    let head = run_operator_on(&mut first, &evs[..cut]);
    let mut c = Collector::new();
    let state = first
        .snapshot_state(sluice_core::CheckpointId(1), &mut c)
        .unwrap();
    let states = crate::state::redistribute(vec![state], parallelism, MAX_PARALLELISM);
    let mut subtasks = Vec::new();
    for (i, state) in states.into_iter().enumerate() {
        let mut op = make();
        op.initialize_state(state).unwrap();
        op.open(&on.context(false, i, parallelism)).unwrap();
        if let Some(w) = last_watermark(&evs[..cut]) {
            let steps = run_operator_on(&mut op, &[Ev::Wm(w)]);
            prop_assert_eq!(&steps[0], &(Vec::new(), Vec::new()), "nothing is due twice");
        }
        subtasks.push(op);
    }
    let owner = |k: u8| {
        crate::key_groups::subtask_for_key_group(
            crate::key_groups::key_group(&k, MAX_PARALLELISM),
            MAX_PARALLELISM,
            parallelism,
        )
    };
    let mut both = head;
    for e in &evs[cut..] {
        let mut step = (Vec::new(), Vec::new());
        for (i, op) in subtasks.iter_mut().enumerate() {
            if matches!(*e, Ev::Rec(k, _) if owner(k) != i) {
                continue;
            }
            let (outs, lates) = run_operator_on(op, std::slice::from_ref(e)).remove(0);
            step.0.extend(outs);
            step.1.extend(lates);
        }
        step.0.sort();
        step.1.sort();
        both.push(step);
    }
    prop_assert_eq!(both, whole);
    Ok(())
}

/// The last watermark among `events`.
fn last_watermark(events: &[Ev]) -> Option<i64> {
    events
        .iter()
        .filter_map(|e| match e {
            Ev::Wm(w) => Some(*w),
            _ => None,
        })
        .max()
}

/// Tumbling, sliding or session windows of event time, of a few sizes.
fn any_assigner() -> impl Strategy<Value = WindowAssigner> {
    prop_oneof![
        (5u64..60).prop_map(|size| TumblingEventTimeWindows::of(Duration::from_millis(size))),
        (3u64..30, 1u64..4).prop_map(|(slide, times)| SlidingEventTimeWindows::of(
            Duration::from_millis(slide * times + 1),
            Duration::from_millis(slide)
        )),
        (1u64..40).prop_map(|gap| EventTimeSessionWindows::with_gap(Duration::from_millis(gap))),
    ]
}

#[test]
fn nothing_of_a_window_outlives_its_cleanup_time_and_aggregation_keeps_no_records() {
    let a = SlidingEventTimeWindows::of(Duration::from_millis(100), Duration::from_millis(10));
    let mut op = operator(a, 50);
    op.open(&OperatorContext::for_test("window", 0, 1)).unwrap();
    let mut c = Collector::new();
    for t in 0..10_000i64 {
        c.set_input_timestamps(Some(vec![t % 90]));
        op.process_batch(vec![(1, t % 90)], &mut c).unwrap();
    }
    let state = op
        .snapshot_state(sluice_core::CheckpointId(1), &mut c)
        .unwrap();
    let contents: usize = state
        .keyed_entries()
        .iter()
        .filter(|e| e.state == operator::CONTENTS_STATE)
        .map(|e| e.data.len())
        .sum();
    assert!(
        contents < 20 * 40,
        "20 windows of one key keep an accumulator each, not 10,000 records: {contents} bytes"
    );
    // The last window holding 89 is [80, 180): max timestamp 179, cleanup at 179 + 50.
    op.process_watermark(Watermark::new(228), &mut c).unwrap();
    assert!(
        !op.panes.is_empty(),
        "the last window is within its lateness"
    );
    op.process_watermark(Watermark::new(229), &mut c).unwrap();
    assert!(op.windows.is_empty() && op.panes.is_empty() && op.timers.is_empty());
}

/// After a restore the watermark starts over: a record for a window that had fired before the
/// checkpoint, arriving before the watermark passes the window again, is added to the whole
/// window, which fires again when the watermark passes its end (not just the new record).
#[test]
fn a_fired_window_updated_after_a_restore_fires_again_whole() {
    let a = TumblingEventTimeWindows::of(Duration::from_millis(10));
    let mut first = operator(a, 100);
    first
        .open(&OperatorContext::for_test("window", 0, 1))
        .unwrap();
    let steps = run_operator_on(&mut first, &[Ev::Rec(1, 3), Ev::Rec(1, 4), Ev::Wm(9)]);
    assert_eq!(
        steps[2].0,
        vec![(1, 0, 10, 2, 7)],
        "fired before the checkpoint"
    );
    let mut c = Collector::new();
    let state = first
        .snapshot_state(sluice_core::CheckpointId(1), &mut c)
        .unwrap();
    let mut second = operator(a, 100);
    second.initialize_state(state).unwrap();
    second
        .open(&OperatorContext::for_test("window", 0, 1))
        .unwrap();
    let steps = run_operator_on(&mut second, &[Ev::Wm(5), Ev::Rec(1, 5), Ev::Wm(9)]);
    assert_eq!(steps[0].0, Vec::new(), "nothing fires twice by itself");
    assert_eq!(
        steps[1].0,
        Vec::new(),
        "the watermark is before the window's end"
    );
    assert_eq!(
        steps[2].0,
        vec![(1, 0, 10, 3, 12)],
        "the whole window, once"
    );
}

#[test]
fn late_records_without_a_side_output_are_dropped_and_counted() {
    let a = TumblingEventTimeWindows::of(Duration::from_millis(10));
    let dropped = LateRecordsDropped::default();
    let mut op = operator_with(a, 0, None, dropped.clone());
    op.open(&OperatorContext::for_test("window", 0, 1)).unwrap();
    let mut c = Collector::new();
    op.process_watermark(Watermark::new(100), &mut c).unwrap();
    c.set_input_timestamps(Some(vec![5, 95, 150]));
    op.process_batch(vec![(1, 5), (1, 95), (1, 150)], &mut c)
        .unwrap();
    assert_eq!(dropped.get(), 2);
    assert_eq!(op.panes.window_count(), 1);
}

/// A subtask context of attempt `attempt` (a restart's operators open with the next number).
fn context_of_attempt(subtask: usize, parallelism: usize, attempt: u32) -> OperatorContext {
    OperatorContext::new(crate::operator::ContextParts {
        operator_id: sluice_core::NodeId(0),
        operator_name: "window".into(),
        subtask_index: subtask,
        parallelism,
        max_parallelism: crate::DEFAULT_MAX_PARALLELISM,
        attempt_number: attempt,
        metrics: Default::default(),
        checkpointing: true,
        to_coordinator: None,
        state_backend: Default::default(),
        checkpoint_storage: None,
    })
}

/// The late-drop count is per attempt, as Flink's metrics are: after a restart the new attempt
/// counts from zero, so the late records it replays from the restored position are counted
/// once, not once per attempt; a straggling drop from the failed attempt is ignored.
#[test]
fn late_records_replayed_after_a_restart_are_counted_once() {
    let a = TumblingEventTimeWindows::of(Duration::from_millis(10));
    let dropped = LateRecordsDropped::default();
    let late_batch = |op: &mut WindowOperator<Rec, u8, _, _>, c: &mut Collector<_>| {
        op.process_watermark(Watermark::new(100), c).unwrap();
        c.set_input_timestamps(Some(vec![5, 15, 150]));
        op.process_batch(vec![(1, 5), (2, 15), (1, 150)], c)
            .unwrap();
    };
    // Attempt 0, two subtasks: each drops its two late records.
    let mut first: Vec<_> = (0..2)
        .map(|s| {
            let mut op = operator_with(a, 0, None, dropped.clone());
            op.open(&context_of_attempt(s, 2, 0)).unwrap();
            op
        })
        .collect();
    let mut c = Collector::new();
    for op in &mut first {
        late_batch(op, &mut c);
    }
    assert_eq!(dropped.get(), 4);
    // The job restarts: attempt 1 opens, replays the same input and drops the same records.
    let mut second = operator_with(a, 0, None, dropped.clone());
    second.open(&context_of_attempt(0, 1, 1)).unwrap();
    assert_eq!(dropped.get(), 0, "a new attempt counts from zero");
    late_batch(&mut second, &mut c);
    assert_eq!(dropped.get(), 2);
    // A drop from the failed attempt that arrives late does not count.
    late_batch(&mut first[0], &mut c);
    assert_eq!(dropped.get(), 2);
}

#[tokio::test(start_paused = true)]
async fn processing_time_windows_fire_when_the_paused_clock_passes_their_end() {
    let a = TumblingProcessingTimeWindows::of(Duration::from_millis(1_000));
    let mut op = operator(a, 0);
    op.open(&OperatorContext::for_test("window", 0, 1)).unwrap();
    // Start at a window's start (the paused clock reads the wall clock of the process's first
    // read, anywhere in a window).
    let now = op.timers.current_processing_time();
    tokio::time::advance(Duration::from_millis(
        (1_000 - now.rem_euclid(1_000)) as u64,
    ))
    .await;
    assert_eq!(op.timers.current_processing_time() % 1_000, 0);
    let mut c = Collector::new();
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    op.process_batch(vec![(1, 0), (2, 0), (1, 0)], &mut c)
        .unwrap();
    assert!(op.poll_pending(&mut cx, &mut c).is_pending());
    tokio::time::advance(Duration::from_millis(999)).await;
    assert!(
        op.poll_pending(&mut cx, &mut c).is_pending(),
        "not within its last millisecond, as in Flink: a record may still join it"
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(op.poll_pending(&mut cx, &mut c).is_ready());
    let mut counts: Vec<(u8, u64)> = c
        .take_elements()
        .into_iter()
        .filter_map(|e| match e {
            StreamElement::Records(b) => Some(b.into_records()),
            _ => None,
        })
        .flatten()
        .filter_map(Tagged::into_main)
        .map(|o| (o.0, o.3))
        .collect();
    counts.sort();
    assert_eq!(counts, vec![(1, 2), (2, 1)]);
    assert!(op.windows.is_empty() && op.panes.is_empty() && op.timers.is_empty());
}

/// A context whose job keeps keyed state in a store (in memory, with a cache of at most 16
/// values per state, so that windows are written back and read again all the time).
fn store_context(subtask: usize, parallelism: usize) -> OperatorContext {
    OperatorContext::for_test("window", subtask, parallelism)
        .with_state_backend(crate::state::MemoryStateBackend::new(0))
}

#[test]
fn a_batch_reads_its_windows_from_a_store_in_one_read() {
    fn feed(op: &mut TestOperator, keys: std::ops::Range<u8>) {
        let records: Vec<Rec> = keys.map(|k| (k, 1)).collect();
        let mut c = Collector::new();
        c.set_input_timestamps(Some(vec![7; records.len()]));
        op.process_batch(records, &mut c).unwrap();
    }
    let backend = std::sync::Arc::new(crate::state::CountingBackend::default());
    let ctx = OperatorContext::for_test("window", 0, 1).with_state_backend(backend.clone());
    let sliding = SlidingEventTimeWindows::of(Duration::from_millis(10), Duration::from_millis(5));
    let mut op = operator(sliding, 0);
    op.open(&ctx).unwrap();
    feed(&mut op, 0..64);
    // The snapshot writes the windows back: from now on a missing one is read.
    op.snapshot_state(sluice_core::CheckpointId(1), &mut Collector::new())
        .unwrap();
    // Each record adds to two sliding windows: 64 new keys, 128 (window, key)s, one read.
    feed(&mut op, 64..128);
    assert_eq!(
        backend.reads(),
        (0, 1),
        "(single reads, reads of many keys)"
    );
}

#[test]
fn a_batch_of_session_records_reads_its_sessions_and_their_contents_in_two_reads() {
    fn feed(op: &mut TestOperator, at: i64) {
        let records: Vec<Rec> = (0..64).map(|k| (k, 1)).collect();
        let mut c = Collector::new();
        c.set_input_timestamps(Some(vec![at; records.len()]));
        op.process_batch(records, &mut c).unwrap();
    }
    let sessions = EventTimeSessionWindows::with_gap(Duration::from_millis(10));
    let mut first = operator(sessions, 0);
    first
        .open(&OperatorContext::for_test("window", 0, 1))
        .unwrap();
    feed(&mut first, 7);
    let state = first
        .snapshot_state(sluice_core::CheckpointId(1), &mut Collector::new())
        .unwrap();
    // Restored into a store: 64 keys' sessions and contents there, none cached.
    let backend = std::sync::Arc::new(crate::state::CountingBackend::default());
    let ctx = OperatorContext::for_test("window", 0, 1).with_state_backend(backend.clone());
    let mut second = operator(sessions, 0);
    second.initialize_state(state).unwrap();
    second.open(&ctx).unwrap();
    let before = backend.reads();
    // Each record extends its key's session: one read for the 64 sessions, one for the 64
    // sessions' contents.
    feed(&mut second, 9);
    let after = backend.reads();
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (0, 2),
        "(single reads, reads of many keys)"
    );
    let steps = run_operator_on(&mut second, &[Ev::Wm(100)]);
    let mut fired: Vec<Out> = steps[0].0.clone();
    fired.sort();
    assert_eq!(fired.len(), 64);
    assert!(
        fired.iter().all(|o| o.3 == 2),
        "each session holds both records: {fired:?}"
    );
}

fn run_in_store(mut op: TestOperator, events: &[Ev]) -> Vec<(Vec<Out>, Vec<Rec>)> {
    op.open(&store_context(0, 1)).unwrap();
    run_operator_on(&mut op, events)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    /// With a keyed store, where the window contents and timers live in the store, the
    /// operator still follows the model, for every assigner.
    #[test]
    fn windows_in_a_store_match_the_model(evs in events(), a in any_assigner(), lateness in lateness()) {
        prop_assert_eq!(run_in_store(operator(a, lateness), &evs), run_model(a, lateness, &evs));
    }

    /// A snapshot taken with the windows in a store restores into a store, or onto the heap,
    /// at parallelism 1 or 2, and the restored subtasks continue as the original would have;
    /// a heap snapshot restores into a store as well.
    #[test]
    fn windows_move_between_the_heap_and_a_store_through_checkpoints(
        evs in events(), cut in 0usize..120, a in any_assigner(), lateness in lateness(),
        from_store in any::<bool>(), to_store in any::<bool>(), parallelism in 1usize..3,
    ) {
        const MAX_PARALLELISM: usize = 128;
        let cut = cut.min(evs.len());
        let whole = run_model(a, lateness, &evs);
        let mut first = operator(a, lateness);
        let ctx = if from_store { store_context(0, 1) } else { OperatorContext::for_test("window", 0, 1) };
        first.open(&ctx).unwrap();
        let head = run_operator_on(&mut first, &evs[..cut]);
        let mut c = Collector::new();
        let state = first.snapshot_state(sluice_core::CheckpointId(1), &mut c).unwrap();
        let states = crate::state::redistribute(vec![state], parallelism, MAX_PARALLELISM);
        let mut subtasks = Vec::new();
        for (i, state) in states.into_iter().enumerate() {
            let mut op = operator(a, lateness);
            op.initialize_state(state).unwrap();
            let ctx = if to_store {
                store_context(i, parallelism)
            } else {
                OperatorContext::for_test("window", i, parallelism)
            };
            op.open(&ctx).unwrap();
            if let Some(w) = last_watermark(&evs[..cut]) {
                let steps = run_operator_on(&mut op, &[Ev::Wm(w)]);
                prop_assert_eq!(&steps[0], &(Vec::new(), Vec::new()), "nothing is due twice");
            }
            subtasks.push(op);
        }
        let owner = |k: u8| {
            crate::key_groups::subtask_for_key_group(
                crate::key_groups::key_group(&k, MAX_PARALLELISM),
                MAX_PARALLELISM,
                parallelism,
            )
        };
        let mut both = head;
        for e in &evs[cut..] {
            let mut step = (Vec::new(), Vec::new());
            for (i, op) in subtasks.iter_mut().enumerate() {
                if matches!(*e, Ev::Rec(k, _) if owner(k) != i) {
                    continue;
                }
                let (outs, lates) = run_operator_on(op, std::slice::from_ref(e)).remove(0);
                step.0.extend(outs);
                step.1.extend(lates);
            }
            step.0.sort();
            step.1.sort();
            both.push(step);
        }
        prop_assert_eq!(both, whole);
    }
}

/// With a store, the triggered operator's window contents and trigger state are in it, and
/// every window's go once it is cleaned up.
#[test]
fn with_a_store_the_triggered_operator_keeps_its_windows_there_until_cleanup() {
    let a = TumblingEventTimeWindows::of(Duration::from_millis(10));
    let mut op = triggered_operator(a, 5, AnyTrigger::from_trigger(CountTrigger::of(2)));
    op.open(&store_context(0, 1)).unwrap();
    assert!(op.windows.is_attached() && op.trigger_state.is_attached());
    let evs: Vec<Ev> = (0..200).map(|i| Ev::Rec((i % 3) as u8, i)).collect();
    run_operator_on(&mut op, &evs);
    assert!(!op.windows.entries().unwrap().is_empty());
    assert!(!op.trigger_state.entries().unwrap().is_empty());
    run_operator_on(&mut op, &[Ev::Wm(i64::MAX)]);
    assert!(
        op.windows.entries().unwrap().is_empty(),
        "contents cleaned up"
    );
    assert!(
        op.trigger_state.entries().unwrap().is_empty(),
        "trigger state cleared"
    );
    assert!(op.timers.is_empty());
}

/// With a store, a window's contents are not on the heap: the panes keep their windows only,
/// and every window is gone from the store once it is cleaned up.
#[test]
fn with_a_store_the_contents_live_in_it_and_go_when_cleaned_up() {
    let a = TumblingEventTimeWindows::of(Duration::from_millis(10));
    let mut op = operator(a, 5);
    op.open(&store_context(0, 1)).unwrap();
    let evs: Vec<Ev> = (0..200).map(|i| Ev::Rec((i % 3) as u8, i)).collect();
    run_operator_on(&mut op, &evs);
    assert_eq!(op.panes.window_count(), 0, "no window contents on the heap");
    assert!(op.panes.iter().count() >= 20, "the panes are known");
    let stored = op.stored.as_mut().unwrap();
    assert!(!stored.entries().unwrap().is_empty());
    run_operator_on(&mut op, &[Ev::Wm(i64::MAX)]);
    let stored = op.stored.as_mut().unwrap();
    assert!(
        stored.entries().unwrap().is_empty(),
        "every window cleaned up"
    );
    assert!(op.timers.is_empty());
}
