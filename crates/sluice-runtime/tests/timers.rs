//! Timers of keyed process functions, driven through the operator test harness: timers fire in
//! timestamp order when the watermark passes them, once per (key, timestamp), not after
//! deletion, each with its own key and that key's state current; processing-time timers fire
//! on tokio's paused clock; timers are checkpointed by key group, follow their keys on rescale,
//! and a timer due during an outage fires exactly once after the restore. Side outputs of a
//! process function are read as a stream.

use sluice_runtime::prelude::*;
use sluice_runtime::process::TimeDomain;
use sluice_runtime::process::{
    Context, KeyedProcessFunction, KeyedProcessOperator, OutputTag, Tagged,
};
use sluice_runtime::testing::OperatorTestHarness;
use std::time::Duration;

/// A command for key `.0`: register (`t > 0`) or delete (`t < 0`) an event-time timer at `|t|`,
/// or (`t == 0`) a processing-time timer 100 ms from now.
type Cmd = (u64, i64);

/// What fired: key, timer timestamp, the key's count of commands, the time domain.
type Fired = (u64, i64, u32, TimeDomain);

#[derive(Clone)]
struct Timers;

impl KeyedProcessFunction<u64, Cmd> for Timers {
    type Out = Fired;
    type State = u32;

    fn process_element(
        &mut self,
        (_, t): Cmd,
        ctx: &mut Context<'_, u64, u32, Fired>,
    ) -> Result<(), UserError> {
        *ctx.state() += 1;
        let mut timers = ctx.timer_service();
        match t {
            0 => {
                let at = timers.current_processing_time() + 100;
                timers.register_processing_time_timer(at);
            }
            t if t > 0 => timers.register_event_time_timer(t),
            t => timers.delete_event_time_timer(-t),
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        ctx: &mut Context<'_, u64, u32, Fired>,
    ) -> Result<(), UserError> {
        let key = *ctx.current_key();
        let count = ctx.state_if_present().copied().unwrap_or(0);
        let domain = ctx.time_domain().ok_or("on_timer without a time domain")?;
        // A timer ending in 7 registers one already due: it fires in the same round.
        if timestamp % 10 == 7 {
            ctx.timer_service().register_event_time_timer(timestamp - 1);
        }
        ctx.collect((key, timestamp, count, domain));
        Ok(())
    }
}

fn operator() -> impl Operator<Cmd, Out = Tagged<Fired>> + Clone {
    KeyedProcessOperator::new(Timers, |c: &Cmd| c.0)
}

fn fired<Op: Operator<Cmd, Out = Tagged<Fired>>>(
    h: &mut OperatorTestHarness<Cmd, Op>,
) -> Vec<Fired> {
    let out = h.records();
    h.take_output();
    out.into_iter().filter_map(Tagged::into_main).collect()
}

use TimeDomain::EventTime as E;

#[test]
fn timers_fire_in_order_once_each_with_their_own_key_and_state() {
    let mut h = OperatorTestHarness::new(operator());
    // Key 1 registers 30 and 10 (and 30 again); key 2 registers 20 and 40 and deletes 40.
    h.process_batch(vec![(1, 30), (2, 20), (1, 10), (1, 30), (2, 40), (2, -40)])
        .unwrap();
    h.process_watermark(Watermark::new(5)).unwrap();
    assert!(fired(&mut h).is_empty(), "nothing is due at 5");
    h.process_watermark(Watermark::new(30)).unwrap();
    assert_eq!(
        fired(&mut h),
        vec![(1, 10, 3, E), (2, 20, 3, E), (1, 30, 3, E)],
        "in timestamp order, 30 once, each with its key's own count"
    );
    h.process_watermark(Watermark::new(100)).unwrap();
    assert_eq!(h.watermarks(), vec![Watermark::new(100)], "forwarded");
    assert!(fired(&mut h).is_empty(), "40 was deleted");
}

#[test]
fn a_timer_registered_in_a_callback_for_a_passed_time_fires_in_the_same_round() {
    let mut h = OperatorTestHarness::new(operator());
    h.process_record((4, 17)).unwrap();
    h.process_watermark(Watermark::new(50)).unwrap();
    assert_eq!(fired(&mut h), vec![(4, 17, 1, E), (4, 16, 1, E)]);
}

#[test]
fn outputs_carry_the_records_event_time_and_timers_their_own() {
    let mut h = OperatorTestHarness::new(operator());
    h.process_record_at((1, 25), 3).unwrap();
    h.process_watermark(Watermark::new(25)).unwrap();
    assert_eq!(
        h.timed_records()
            .into_iter()
            .map(|(t, ts)| (t.into_main(), ts))
            .collect::<Vec<_>>(),
        vec![(Some((1, 25, 1, E)), Some(25))]
    );
}

#[tokio::test(start_paused = true)]
async fn processing_time_timers_fire_once_the_paused_clock_passed_them() {
    let mut h = OperatorTestHarness::new(operator());
    h.process_record((9, 0)).unwrap();
    assert!(!h.poll_pending().unwrap());
    tokio::time::advance(Duration::from_millis(100)).await;
    assert!(
        !h.poll_pending().unwrap(),
        "not within its own millisecond (Flink adds the same millisecond)"
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    assert!(h.poll_pending().unwrap());
    let got = fired(&mut h);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].0, got[0].2, got[0].3),
        (9, 1, TimeDomain::ProcessingTime)
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(!h.poll_pending().unwrap(), "it fired once");
}

#[tokio::test(start_paused = true)]
async fn timers_follow_their_keys_from_2_to_3_subtasks_and_those_due_during_the_outage_fire_once() {
    let keys: Vec<u64> = (0..60).collect();
    // Two subtasks each register, for their own keys, an event-time timer at 1000 + 10 key and a
    // processing-time timer 100 ms ahead; then the job "fails" after checkpoint 1.
    let mut snapshots = Vec::new();
    for s in 0..2 {
        let mut h = OperatorTestHarness::for_subtask(operator(), s, 2);
        let mine: Vec<Cmd> = keys
            .iter()
            .filter(|k| h.owns_key(*k))
            .flat_map(|&k| [(k, 1_000 + 10 * k as i64), (k, 0)])
            .collect();
        h.process_batch(mine).unwrap();
        h.process_watermark(Watermark::new(900)).unwrap();
        snapshots.push(h.snapshot(1).unwrap());
    }
    // The outage outlasts the processing-time timers.
    tokio::time::advance(Duration::from_secs(5)).await;

    let mut event = Vec::new();
    let mut processing = Vec::new();
    for s in 0..3 {
        let mut h = OperatorTestHarness::for_subtask(operator(), s, 3)
            .restore(snapshots.clone())
            .unwrap();
        assert!(
            h.poll_pending().unwrap(),
            "processing-time timers are due at once"
        );
        h.process_watermark(Watermark::new(5_000)).unwrap();
        h.process_watermark(Watermark::new(6_000)).unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        h.poll_pending().unwrap();
        for (k, t, count, domain) in fired(&mut h) {
            assert!(h.owns_key(&k), "key {k} fired on subtask {s} of 3");
            assert_eq!(count, 2, "the key's state came with it");
            match domain {
                TimeDomain::EventTime => event.push((k, t)),
                TimeDomain::ProcessingTime => processing.push(k),
            }
        }
    }
    event.sort();
    processing.sort();
    assert_eq!(
        event,
        keys.iter()
            .map(|&k| (k, 1_000 + 10 * k as i64))
            .collect::<Vec<_>>()
    );
    assert_eq!(
        processing, keys,
        "each processing-time timer fired exactly once"
    );
}

/// Sends odd records to a side output.
#[derive(Clone)]
struct SplitOdd(OutputTag<String>);

impl KeyedProcessFunction<u64, u64> for SplitOdd {
    type Out = u64;
    type State = ();
    fn process_element(
        &mut self,
        v: u64,
        ctx: &mut Context<'_, u64, (), u64>,
    ) -> Result<(), UserError> {
        if v % 2 == 1 {
            ctx.output(&self.0, format!("odd {v}"));
        } else {
            ctx.collect(v);
        }
        Ok(())
    }
}

#[test]
fn side_outputs_of_a_process_function_are_streams() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    let odd = OutputTag::<String>::new("odd");
    let processed = env
        .from_iter(0..100u64)
        .key_by(|v| v % 7)
        .process_keyed(SplitOdd(odd.clone()));
    let evens = processed.collect();
    let odds = processed.get_side_output(&odd).collect();
    env.execute_blocking("side outputs").unwrap();
    let mut evens = evens.take();
    evens.sort();
    assert_eq!(evens, (0..100).filter(|v| v % 2 == 0).collect::<Vec<_>>());
    let mut odds = odds.take();
    odds.sort();
    let mut want: Vec<String> = (0..100)
        .filter(|v| v % 2 == 1)
        .map(|v| format!("odd {v}"))
        .collect();
    want.sort();
    assert_eq!(odds, want);
}
