//! Triggers and evictors in the triggered window operator, with the expectations of Flink's
//! `CountTriggerTest`, `PurgingTriggerTest`, `ContinuousEventTimeTriggerTest`,
//! `ContinuousProcessingTimeTriggerTest`, `WindowOperatorTest` and
//! `EvictingWindowOperatorTest`: what fires when, what state and timers are kept, session
//! merging, evicting before and after, user code that fails, and (with the harness) trigger
//! state and evictor windows across a checkpoint restored at another parallelism.

use super::*;
use crate::operator::{Collector, Operator, OperatorContext};
use crate::process::{OutputTag, Tagged};
use sluice_core::{StreamElement, UserError, Watermark};
use std::time::Duration;

/// (key, value); the value is also the record's event time where it has one.
type Rec = (u8, i64);
/// (key, window start, the values the window function saw, in order)
type Out = (u8, i64, Vec<i64>);

#[derive(Clone)]
struct Collect;

impl ProcessWindowFunction<u8, Rec> for Collect {
    type Out = Out;
    fn process(
        &mut self,
        key: &u8,
        window: &TimeWindow,
        elements: &[Rec],
        out: &mut Vec<Out>,
    ) -> Result<(), UserError> {
        out.push((*key, window.start, elements.iter().map(|r| r.1).collect()));
        Ok(())
    }
}

type Key = fn(&Rec) -> u8;
type Plain = TriggerWindowOperator<Rec, u8, Key, Incremental<Process<Collect>>>;
type WithEvictor = TriggerWindowOperator<Rec, u8, Key, Evicting<Process<Collect>, Rec>>;

fn spec(assigner: WindowAssigner, lateness: i64) -> WindowSpec<Rec> {
    WindowSpec {
        assigner,
        allowed_lateness: lateness,
        late_tag: Some(OutputTag::new("late")),
        late_dropped: LateRecordsDropped::default(),
    }
}

fn key(r: &Rec) -> u8 {
    r.0
}

fn plain<Tr: Trigger<Rec> + Clone>(assigner: WindowAssigner, lateness: i64, trigger: Tr) -> Plain {
    TriggerWindowOperator::new(
        spec(assigner, lateness),
        AnyTrigger::from_trigger(trigger),
        Incremental(Process(Collect)),
        key as Key,
    )
}

fn evicting<Tr: Trigger<Rec> + Clone, E: Evictor<Rec> + Clone>(
    assigner: WindowAssigner,
    trigger: Tr,
    evictor: E,
) -> WithEvictor {
    TriggerWindowOperator::new(
        spec(assigner, 0),
        AnyTrigger::from_trigger(trigger),
        Evicting {
            contents: Process(Collect),
            evictor: AnyEvictor::from_evictor(evictor),
        },
        key as Key,
    )
}

/// Key `k`'s global window, as the operator's tables key it.
fn in_global(k: u8) -> super::triggered::KeyWindow<u8> {
    super::triggered::KeyWindow {
        key: k,
        window: TimeWindow::GLOBAL,
    }
}

/// Drives one operator by hand and collects its main output.
struct Drive<Op> {
    op: Op,
    c: Collector<Tagged<Out>>,
}

impl<Op: Operator<Rec, Out = Tagged<Out>>> Drive<Op> {
    fn new(mut op: Op) -> Self {
        op.open(&OperatorContext::for_test("window", 0, 1)).unwrap();
        Drive {
            op,
            c: Collector::new(),
        }
    }

    /// Records `(key, value)` with event time `value`.
    fn at(&mut self, recs: &[Rec]) -> Result<Vec<Out>, UserError> {
        self.c
            .set_input_timestamps(Some(recs.iter().map(|r| r.1).collect()));
        self.op.process_batch(recs.to_vec(), &mut self.c)?;
        Ok(self.take())
    }

    /// Records without event times (processing-time and global windows).
    fn untimed(&mut self, recs: &[Rec]) -> Result<Vec<Out>, UserError> {
        self.op.process_batch(recs.to_vec(), &mut self.c)?;
        Ok(self.take())
    }

    fn wm(&mut self, t: i64) -> Vec<Out> {
        self.op
            .process_watermark(Watermark::new(t), &mut self.c)
            .unwrap();
        self.take()
    }

    fn poll(&mut self) -> Vec<Out> {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if let std::task::Poll::Ready(r) = self.op.poll_pending(&mut cx, &mut self.c) {
            r.unwrap();
        }
        self.take()
    }

    fn take(&mut self) -> Vec<Out> {
        self.c
            .take_elements()
            .into_iter()
            .filter_map(|e| match e {
                StreamElement::Records(b) => Some(b.into_records()),
                _ => None,
            })
            .flatten()
            .filter_map(Tagged::into_main)
            .collect()
    }
}

fn global() -> WindowAssigner {
    GlobalWindows::create()
}

fn tumbling(ms: u64) -> WindowAssigner {
    TumblingEventTimeWindows::of(Duration::from_millis(ms))
}

fn sessions(gap: u64) -> WindowAssigner {
    EventTimeSessionWindows::with_gap(Duration::from_millis(gap))
}

const G: i64 = i64::MIN;

#[test]
fn results_are_typed_like_flinks_trigger_results() {
    assert!(TriggerResult::Fire.is_fire() && !TriggerResult::Fire.is_purge());
    assert!(TriggerResult::FireAndPurge.is_fire() && TriggerResult::FireAndPurge.is_purge());
    assert!(!TriggerResult::Purge.is_fire() && TriggerResult::Purge.is_purge());
    assert!(!TriggerResult::Continue.is_fire() && !TriggerResult::Continue.is_purge());
}

/// CountTriggerTest.testWindowSeparationAndFiring / testClear: the count is per window and
/// key, a firing restarts it, and the window's cleanup removes it and every timer.
#[test]
fn count_trigger_counts_per_window_and_key_and_restarts_at_each_firing() {
    let mut d = Drive::new(plain(tumbling(10), 0, CountTrigger::of(2)));
    assert_eq!(d.at(&[(1, 1), (2, 2), (1, 12)]).unwrap(), vec![]);
    assert_eq!(d.op.trigger_state.len(), 3, "one count per (key, window)");
    assert_eq!(d.at(&[(1, 3)]).unwrap(), vec![(1, 0, vec![1, 3])]);
    assert_eq!(
        d.op.trigger_state.len(),
        2,
        "the fired window's count restarted"
    );
    assert_eq!(
        d.at(&[(1, 4), (1, 5)]).unwrap(),
        vec![(1, 0, vec![1, 3, 4, 5])]
    );
    assert_eq!(d.wm(100), vec![], "a count trigger never fires on time");
    assert!(d.op.windows.is_empty() && d.op.trigger_state.is_empty() && d.op.timers.is_empty());
}

/// CountTriggerTest.testMergingWindows: the counts of merged sessions add up.
#[test]
fn count_trigger_adds_up_the_counts_of_merged_sessions() {
    let mut d = Drive::new(plain(sessions(10), 0, CountTrigger::of(3)));
    assert_eq!(d.at(&[(1, 0), (1, 15)]).unwrap(), vec![]);
    // [8, 18) touches [0, 10) and [15, 25): the merged count 2, then this record's.
    assert_eq!(d.at(&[(1, 8)]).unwrap(), vec![(1, 0, vec![0, 15, 8])]);
    assert_eq!(d.op.sessions.get(&1), Some(&vec![TimeWindow::new(0, 25)]));
    assert!(d.op.trigger_state.is_empty(), "the fired count restarted");
    assert_eq!(d.wm(24), vec![]);
    assert!(d.op.windows.is_empty() && d.op.sessions.is_empty() && d.op.timers.is_empty());
}

/// Flink's `countWindow(n)`: global windows, a purging count trigger.
#[test]
fn a_purging_count_trigger_on_global_windows_is_flinks_count_window() {
    let mut d = Drive::new(plain(global(), 0, PurgingTrigger::of(CountTrigger::of(3))));
    let recs: Vec<Rec> = (1..=7).map(|v| (1, v)).collect();
    assert_eq!(
        d.untimed(&recs).unwrap(),
        vec![(1, G, vec![1, 2, 3]), (1, G, vec![4, 5, 6])]
    );
    assert_eq!(d.op.windows.len(), 1, "the seventh record waits");
    assert!(
        d.op.timers.is_empty(),
        "the global window has no cleanup timer"
    );
    assert_eq!(d.wm(i64::MAX), vec![], "and never fires on time");
}

/// Without purging, the count trigger fires the window with everything it holds.
#[test]
fn a_count_trigger_alone_keeps_the_contents() {
    let mut d = Drive::new(plain(global(), 0, CountTrigger::of(3)));
    let recs: Vec<Rec> = (1..=6).map(|v| (1, v)).collect();
    assert_eq!(
        d.untimed(&recs).unwrap(),
        vec![(1, G, vec![1, 2, 3]), (1, G, vec![1, 2, 3, 4, 5, 6])]
    );
}

/// PurgingTriggerTest: every result of the nested trigger that fires becomes fire-and-purge;
/// the rest (and merging, clearing) are the nested trigger's. A late firing within the
/// allowed lateness then sees only the late record.
#[test]
fn a_purging_trigger_purges_what_its_trigger_fires() {
    let t: PurgingTrigger<Rec> = PurgingTrigger::of(CountTrigger::of(1));
    let mut state = trigger::TriggerState::default();
    let mut timers = Vec::new();
    let mut ctx = TriggerContext::new(G, 0, &mut state, &mut timers);
    let w = TimeWindow::new(0, 2);
    assert_eq!(
        t.on_element(&(1, 1), 1, &w, &mut ctx).unwrap(),
        TriggerResult::FireAndPurge
    );
    assert!(Trigger::<Rec>::can_merge(&t));
    let t: PurgingTrigger<Rec> = PurgingTrigger::of(EventTimeTrigger::create());
    assert_eq!(
        t.on_event_time(0, &w, &mut ctx).unwrap(),
        TriggerResult::Continue
    );
    assert_eq!(
        t.on_event_time(1, &w, &mut ctx).unwrap(),
        TriggerResult::FireAndPurge
    );

    let mut d = Drive::new(plain(
        tumbling(10),
        20,
        PurgingTrigger::of(EventTimeTrigger),
    ));
    d.at(&[(1, 1), (1, 2)]).unwrap();
    assert_eq!(d.wm(9), vec![(1, 0, vec![1, 2])]);
    assert!(d.op.windows.is_empty(), "purged at the firing");
    assert_eq!(
        d.at(&[(1, 3)]).unwrap(),
        vec![(1, 0, vec![3])],
        "late, alone"
    );
    assert_eq!(d.wm(29), vec![]);
    assert!(d.op.timers.is_empty());
}

/// ContinuousEventTimeTriggerTest.testWindowSeparationAndFiring and Flink's rule since 1.15
/// (`min(time + interval, maxTimestamp)`): a timer at the end of each interval, the window's
/// own at its end, one firing at the end.
#[test]
fn continuous_event_time_trigger_fires_every_interval_and_once_at_the_end() {
    let mut d = Drive::new(plain(
        tumbling(10),
        0,
        ContinuousEventTimeTrigger::of(Duration::from_millis(3)),
    ));
    assert_eq!(d.at(&[(1, 1), (1, 2), (2, 12)]).unwrap(), vec![]);
    // Window [0, 10): its end (9) and the first interval's end (3); [10, 20): 19 and 15.
    assert_eq!(d.op.timers.event_timers().len(), 4);
    assert_eq!(d.wm(3), vec![(1, 0, vec![1, 2])]);
    d.at(&[(1, 5)]).unwrap();
    assert_eq!(d.wm(5), vec![]);
    assert_eq!(d.wm(6), vec![(1, 0, vec![1, 2, 5])]);
    assert_eq!(d.wm(9), vec![(1, 0, vec![1, 2, 5])], "once at the end");
    // [10, 20) from 12: at 15 (12 - 12 % 3 + 3), 18, and its end.
    assert_eq!(d.wm(14), vec![]);
    assert_eq!(d.wm(19), vec![(2, 10, vec![12]); 3]);
    assert!(d.op.windows.is_empty() && d.op.trigger_state.is_empty() && d.op.timers.is_empty());
}

/// ContinuousEventTimeTriggerTest.testLateElementTriggersImmediately: a record for a window
/// the watermark passed (within the lateness) fires it at once and registers nothing.
#[test]
fn continuous_event_time_trigger_fires_late_records_at_once() {
    let mut d = Drive::new(plain(
        tumbling(10),
        100,
        ContinuousEventTimeTrigger::of(Duration::from_secs(3_600)),
    ));
    d.wm(20);
    assert_eq!(d.at(&[(1, 1)]).unwrap(), vec![(1, 0, vec![1])]);
    assert!(
        d.op.trigger_state.is_empty(),
        "no fire time for a late window"
    );
    assert_eq!(
        d.op.timers.event_timers().len(),
        1,
        "only the cleanup timer at 9 + 100"
    );
}

/// ContinuousEventTimeTriggerTest.testMergingWindows: the merged window takes the earliest
/// fire time of the merged ones and fires every interval from there; timers the merged windows
/// leave behind fire for windows that are gone and do nothing.
#[test]
fn continuous_event_time_trigger_merges_sessions_to_the_earliest_fire_time() {
    let mut d = Drive::new(plain(
        sessions(10),
        0,
        ContinuousEventTimeTrigger::of(Duration::from_millis(4)),
    ));
    // [0, 10) fires first at 4, [20, 30) at 24.
    d.at(&[(1, 0), (1, 20)]).unwrap();
    // [10, 20) merges both into [0, 30), which fires first at 4.
    d.at(&[(1, 10)]).unwrap();
    assert_eq!(d.op.sessions.get(&1), Some(&vec![TimeWindow::new(0, 30)]));
    assert_eq!(d.wm(4), vec![(1, 0, vec![0, 20, 10])]);
    // Then at 8, 12, ..., 28 and at the end, 29.
    let fired = d.wm(29);
    assert_eq!(fired.len(), 7, "{fired:?}");
    assert!(fired.iter().all(|o| o == &(1, 0, vec![0, 20, 10])));
    assert!(d.op.windows.is_empty() && d.op.sessions.is_empty());
    assert!(d.op.trigger_state.is_empty() && d.op.timers.is_empty());
}

/// ContinuousProcessingTimeTriggerTest, on tokio's paused clock: a processing-time window fires
/// every interval from its first record, the last time at its end. A timer for `T` fires once
/// the clock passed `T` (Flink's real processing-time service adds the same millisecond; its
/// test harness's manual clock does not).
#[tokio::test(start_paused = true)]
async fn continuous_processing_time_trigger_fires_every_interval_of_the_paused_clock() {
    let mut d = Drive::new(plain(
        TumblingProcessingTimeWindows::of(Duration::from_millis(1_000)),
        0,
        ContinuousProcessingTimeTrigger::of(Duration::from_millis(300)),
    ));
    // Start at a multiple of 3 s: the window is [t0, t0 + 1000), the intervals start at t0.
    let now = d.op.timers.current_processing_time();
    tokio::time::advance(Duration::from_millis(
        (3_000 - now.rem_euclid(3_000)) as u64,
    ))
    .await;
    let t0 = d.op.timers.current_processing_time();
    assert_eq!(t0 % 3_000, 0);
    d.untimed(&[(1, 1)]).unwrap();
    assert_eq!(d.poll(), vec![]);
    tokio::time::advance(Duration::from_millis(300)).await;
    assert_eq!(d.poll(), vec![], "not within the millisecond of its timer");
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(d.poll(), vec![(1, t0, vec![1])]);
    d.untimed(&[(1, 2)]).unwrap();
    tokio::time::advance(Duration::from_millis(300)).await;
    assert_eq!(d.poll(), vec![(1, t0, vec![1, 2])]);
    tokio::time::advance(Duration::from_millis(300)).await;
    assert_eq!(d.poll(), vec![(1, t0, vec![1, 2])]);
    tokio::time::advance(Duration::from_millis(99)).await;
    assert_eq!(d.poll(), vec![(1, t0, vec![1, 2])], "at the end, once");
    assert!(d.op.windows.is_empty() && d.op.trigger_state.is_empty() && d.op.timers.is_empty());
}

/// ProcessingTimeTriggerTest / EventTimeTriggerTest through the triggered operator: set on
/// windows of the other time, the trigger's own timers decide.
#[tokio::test(start_paused = true)]
async fn the_processing_time_trigger_fires_event_time_windows_by_the_clock() {
    let mut d = Drive::new(plain(tumbling(10), 0, ProcessingTimeTrigger::create()));
    let now = d.op.timers.current_processing_time();
    d.at(&[(1, now + 5)]).unwrap();
    assert_eq!(d.wm(now), vec![]);
    let start = TimeWindow::start_with_offset(now + 5, 0, 10);
    tokio::time::advance(Duration::from_millis((start + 9 - now) as u64)).await;
    assert_eq!(
        d.poll(),
        vec![],
        "its timer (at 9) fires once the clock passed it"
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    assert_eq!(d.poll(), vec![(1, start, vec![now + 5])]);
    assert_eq!(d.wm(start + 9), vec![], "the watermark only cleans up");
    assert!(d.op.windows.is_empty() && d.op.timers.is_empty());
}

/// EvictingWindowOperatorTest with a CountEvictor: before the function, the newest `n` are
/// kept and seen; after it, the function sees all and the newest `n` stay.
#[test]
fn count_evictor_keeps_the_newest_records_before_or_after_the_function() {
    let recs: Vec<Rec> = (1..=6).map(|v| (1, v)).collect();
    let mut before = Drive::new(evicting(global(), CountTrigger::of(3), CountEvictor::of(2)));
    assert_eq!(
        before.untimed(&recs).unwrap(),
        vec![(1, G, vec![2, 3]), (1, G, vec![5, 6])]
    );
    let after_evictor = CountEvictor::of(2).do_evict_after(true);
    let mut after = Drive::new(evicting(global(), CountTrigger::of(3), after_evictor));
    assert_eq!(
        after.untimed(&recs).unwrap(),
        vec![(1, G, vec![1, 2, 3]), (1, G, vec![2, 3, 4, 5, 6])]
    );
    assert_eq!(after.op.windows.get(&in_global(1)).map(Vec::len), Some(2));
}

/// EvictingWindowOperatorTest with a TimeEvictor: the records within the size of the newest
/// one's timestamp, before or after the function.
#[test]
fn time_evictor_keeps_the_last_stretch_of_event_time_before_or_after_the_function() {
    let recs: Vec<Rec> = vec![(1, 1), (1, 2), (1, 5), (1, 6)];
    let size = Duration::from_millis(3);
    let mut before = Drive::new(evicting(
        global(),
        CountTrigger::of(4),
        TimeEvictor::of(size),
    ));
    assert_eq!(before.at(&recs).unwrap(), vec![(1, G, vec![5, 6])]);
    let after_evictor = TimeEvictor::of(size).do_evict_after(true);
    let mut after = Drive::new(evicting(global(), CountTrigger::of(4), after_evictor));
    assert_eq!(after.at(&recs).unwrap(), vec![(1, G, vec![1, 2, 5, 6])]);
    let kept: Vec<i64> = after
        .op
        .windows
        .get(&in_global(1))
        .unwrap()
        .iter()
        .map(|r| r.value.1)
        .collect();
    assert_eq!(kept, vec![5, 6]);
    // Records without timestamps are not evicted by time.
    let mut untimed = Drive::new(evicting(
        global(),
        CountTrigger::of(4),
        TimeEvictor::of(size),
    ));
    assert_eq!(
        untimed.untimed(&recs).unwrap(),
        vec![(1, G, vec![1, 2, 5, 6])]
    );
}

/// An evictor on event-time windows with their default trigger: the evicting operator, firing
/// at the end of the window over what is left.
#[test]
fn an_evictor_on_tumbling_windows_fires_at_the_end_over_what_is_left() {
    let mut d = Drive::new(evicting(
        tumbling(10),
        EventTimeTrigger,
        CountEvictor::of(2),
    ));
    d.at(&[(1, 1), (1, 2), (1, 3), (2, 4)]).unwrap();
    let mut fired = d.wm(9);
    fired.sort();
    assert_eq!(fired, vec![(1, 0, vec![2, 3]), (2, 0, vec![4])]);
    assert!(d.op.windows.is_empty() && d.op.timers.is_empty());
}

/// Evicting windows of sessions merge their records.
#[test]
fn evicting_session_windows_merge_their_records() {
    let mut d = Drive::new(evicting(
        sessions(10),
        EventTimeTrigger,
        CountEvictor::of(3),
    ));
    d.at(&[(1, 0), (1, 20), (1, 10), (1, 13)]).unwrap();
    assert_eq!(d.wm(100), vec![(1, 0, vec![20, 10, 13])]);
}

#[derive(Clone)]
struct Failing;

impl Trigger<Rec> for Failing {
    fn on_element(
        &self,
        _: &Rec,
        _: i64,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        Err("the user trigger broke".into())
    }
    fn on_event_time(
        &self,
        _: i64,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        Ok(TriggerResult::Continue)
    }
    fn on_processing_time(
        &self,
        _: i64,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        Ok(TriggerResult::Continue)
    }
    fn clear(&self, _: &TimeWindow, _: &mut TriggerContext<'_>) -> Result<(), UserError> {
        Ok(())
    }
}

impl Evictor<Rec> for Failing {
    fn evict_before(
        &self,
        _: &mut Vec<TimestampedValue<Rec>>,
        _: &TimeWindow,
        _: &EvictorContext,
    ) -> Result<(), UserError> {
        Err("the user evictor broke".into())
    }
    fn evict_after(
        &self,
        _: &mut Vec<TimestampedValue<Rec>>,
        _: &TimeWindow,
        _: &EvictorContext,
    ) -> Result<(), UserError> {
        Ok(())
    }
}

/// A user trigger or evictor that returns an error fails the operator (so the job), saying
/// which call of which window failed and why.
#[test]
fn a_failing_user_trigger_or_evictor_fails_with_a_clear_message() {
    let mut d = Drive::new(plain(tumbling(10), 0, Failing));
    let e = d.at(&[(1, 1)]).unwrap_err().to_string();
    assert!(
        e.contains("trigger failed in on_element") && e.contains("the user trigger broke"),
        "{e}"
    );
    let mut d = Drive::new(evicting(global(), CountTrigger::of(1), Failing));
    let e = d.untimed(&[(1, 1)]).unwrap_err().to_string();
    assert!(
        e.contains("evictor failed in evict_before") && e.contains("the user evictor broke"),
        "{e}"
    );
}

/// A state descriptor that names a type other than the one stored fails instead of misreading.
#[test]
fn partitioned_state_of_another_type_is_an_error() {
    let mut state = trigger::TriggerState::default();
    let mut timers = Vec::new();
    let mut ctx = TriggerContext::new(G, 0, &mut state, &mut timers);
    const AS_STRING: ValueStateDescriptor<String> = ValueStateDescriptor::new("count");
    const COUNT: ReducingStateDescriptor<u64> = ReducingStateDescriptor::new("count", |a, b| a + b);
    ctx.get_partitioned_state(&COUNT).add(300).unwrap();
    ctx.get_partitioned_state(&COUNT).add(2).unwrap();
    assert_eq!(ctx.get_partitioned_state(&COUNT).get().unwrap(), Some(302));
    // 302 encodes as a varint; read as a string of that length it runs out of bytes.
    assert!(ctx.get_value_state(&AS_STRING).value().is_err());
}

/// Built-ins become enum variants (no dynamic call), user triggers are boxed; the default
/// triggers are recognised for the fast path.
#[test]
fn built_in_triggers_are_recognised() {
    let a = tumbling(10);
    assert!(matches!(
        AnyTrigger::<Rec>::from_trigger(CountTrigger::of(2)),
        AnyTrigger::Count(_)
    ));
    assert!(matches!(
        AnyTrigger::<Rec>::from_trigger(PurgingTrigger::of(CountTrigger::of(2))),
        AnyTrigger::Purging(_)
    ));
    assert!(matches!(
        AnyTrigger::<Rec>::from_trigger(Failing),
        AnyTrigger::User(_)
    ));
    assert!(AnyTrigger::<Rec>::from_trigger(EventTimeTrigger).is_default_for(&a));
    assert!(!AnyTrigger::<Rec>::from_trigger(ProcessingTimeTrigger).is_default_for(&a));
    assert!(!AnyTrigger::<Rec>::from_trigger(EventTimeTrigger).is_default_for(&global()));
    assert!(matches!(
        AnyTrigger::<Rec>::default_for(&global()),
        AnyTrigger::Never(_)
    ));
    assert!(
        AnyTrigger::<Rec>::from_trigger(ContinuousEventTimeTrigger::of(Duration::ZERO))
            .validate()
            .is_err()
    );
}

/// The stream API: a session window with a trigger that cannot merge is refused at submit,
/// and `count_window` / `count_window_sliding` are Flink's `countWindow`.
#[test]
fn the_stream_api_refuses_non_merging_triggers_on_sessions_and_counts_windows() {
    use crate::prelude::*;
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    let _ = env
        .from_iter(vec![(1u8, 1i64)])
        .assign_timestamps_and_watermarks(WatermarkStrategy::for_monotonous_timestamps(
            |r: &Rec| r.1,
        ))
        .key_by(|r| r.0)
        .window(sessions(10))
        .trigger(Failing)
        .reduce(|a, b| (a.0, a.1 + b.1))
        .collect();
    let e = env.execute_blocking("refused").unwrap_err().to_string();
    assert!(e.contains("needs a trigger that can merge"), "{e}");

    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    let keyed = env
        .from_iter((1..=8i64).map(|v| ((v % 2) as u8, v)))
        .key_by(|r| r.0);
    let tumbling = keyed
        .count_window(2)
        .reduce(|a, b| (a.0, a.1 + b.1))
        .collect();
    let sliding = keyed.count_window_sliding(3, 2).process(Collect).collect();
    env.execute_blocking("count windows").unwrap();
    let mut t = tumbling.take();
    t.sort();
    assert_eq!(t, vec![(0, 2 + 4), (0, 6 + 8), (1, 1 + 3), (1, 5 + 7)]);
    let mut s = sliding.take();
    s.sort();
    assert_eq!(
        s,
        vec![
            (0, G, vec![2, 4]),
            (0, G, vec![4, 6, 8]),
            (1, G, vec![1, 3]),
            (1, G, vec![3, 5, 7]),
        ]
    );
}

/// Trigger state (counts) and evictor windows (records) of many keys, checkpointed at
/// parallelism 2 and restored at 3 with the harness: every key continues where it was, on
/// the subtask that owns it now.
#[cfg(feature = "testing")]
#[test]
fn trigger_state_and_evictor_windows_follow_their_keys_across_a_rescale() {
    use crate::testing::OperatorTestHarness;
    let keys: Vec<u8> = (0..40).collect();
    // Fires at every second record, over the last two kept: [a, b], then [c, d].
    let make = || evicting(global(), CountTrigger::of(2), CountEvictor::of(2));
    let mut snapshots = Vec::new();
    let mut fired = Vec::new();
    for s in 0..2 {
        let mut h = OperatorTestHarness::for_subtask(make(), s, 2);
        let mine: Vec<Rec> = keys
            .iter()
            .filter(|k| h.owns_key(*k))
            .map(|&k| (k, 1))
            .collect();
        for v in 1..=3 {
            h.process_batch(mine.iter().map(|&(k, _)| (k, v)).collect())
                .unwrap();
        }
        fired.extend(h.records().into_iter().filter_map(Tagged::into_main));
        snapshots.push(h.snapshot(1).unwrap());
    }
    fired.sort();
    let want: Vec<Out> = keys.iter().map(|&k| (k, G, vec![1, 2])).collect();
    assert_eq!(fired, want);
    let mut after = Vec::new();
    for s in 0..3 {
        let mut h = OperatorTestHarness::for_subtask(make(), s, 3)
            .restore(snapshots.clone())
            .unwrap();
        let mine: Vec<Rec> = keys
            .iter()
            .filter(|k| h.owns_key(*k))
            .map(|&k| (k, 4))
            .collect();
        h.process_batch(mine).unwrap();
        after.extend(h.records().into_iter().filter_map(Tagged::into_main));
    }
    after.sort();
    let want: Vec<Out> = keys.iter().map(|&k| (k, G, vec![3, 4])).collect();
    assert_eq!(
        after, want,
        "each key's count (1) and records ([1, 2, 3]) were restored"
    );
}

/// The same for a purging count trigger on event-time sessions, restored at parallelism 1:
/// the counts, the sessions and their timers come back, and cleanup still happens.
#[cfg(feature = "testing")]
#[test]
fn session_trigger_state_restores_with_its_timers() {
    use crate::testing::OperatorTestHarness;
    let make = || plain(sessions(10), 0, PurgingTrigger::of(CountTrigger::of(3)));
    let mut h = OperatorTestHarness::new(make());
    h.process_timed_batch(vec![(1, 0), (1, 5), (2, 30)], vec![0, 5, 30])
        .unwrap();
    let snapshot = h.snapshot(1).unwrap();
    let mut r = OperatorTestHarness::new(make())
        .restore(vec![snapshot])
        .unwrap();
    r.process_record_at((1, 9), 9).unwrap();
    assert_eq!(
        r.records()
            .into_iter()
            .filter_map(Tagged::into_main)
            .collect::<Vec<_>>(),
        vec![(1, 0, vec![0, 5, 9])]
    );
    r.process_watermark(Watermark::new(100)).unwrap();
    let op = r.operator_mut();
    assert!(op.windows.is_empty() && op.sessions.is_empty());
    assert!(op.trigger_state.is_empty() && op.timers.is_empty());
}

/// With the windows in a store, a batch reads what its records look up with one read of many
/// keys per state: the contents and the trigger's state (a count trigger keeps one) of the
/// windows they add to, and for sessions the keys' sessions first.
#[test]
fn a_batch_reads_its_windows_and_trigger_state_from_a_store_in_one_read_per_state() {
    use crate::state::CountingBackend;
    use std::sync::Arc;
    let recs = |t: i64| (0..64).map(|k| (k, t)).collect::<Vec<Rec>>();
    for (assigner, at, start, reads) in [(tumbling(100), 8, 0, 2), (sessions(10), 9, 7, 3)] {
        let mut first = Drive::new(plain(assigner, 0, CountTrigger::of(2)));
        assert!(first.at(&recs(7)).unwrap().is_empty());
        let state = first
            .op
            .snapshot_state(sluice_core::CheckpointId(1), &mut first.c)
            .unwrap();
        // Restored into a store: every key's window (and session) there, none cached.
        let backend = Arc::new(CountingBackend::default());
        let mut op = plain(assigner, 0, CountTrigger::of(2));
        op.initialize_state(state).unwrap();
        op.open(&OperatorContext::for_test("window", 0, 1).with_state_backend(backend.clone()))
            .unwrap();
        let mut second = Drive {
            op,
            c: Collector::new(),
        };
        let before = backend.reads();
        let mut fired = second.at(&recs(at)).unwrap();
        let after = backend.reads();
        assert_eq!(
            (after.0 - before.0, after.1 - before.1),
            (0, reads),
            "(single reads, reads of many keys) with {assigner:?}"
        );
        fired.sort();
        let want: Vec<Out> = (0..64).map(|k| (k, start, vec![7, at])).collect();
        assert_eq!(
            fired, want,
            "the second record of each key fires its window"
        );
    }
}
