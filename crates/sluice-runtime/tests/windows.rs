//! Windows in jobs: `reduce` and a full-window `process` across a keyed exchange at parallelism
//! 2, allowed lateness updating a result, and the errors a window job can meet: a window size
//! of zero is refused at submit naming the operator; an event-time window without a timestamp
//! assigner fails the job saying so.

use sluice_runtime::prelude::*;
use sluice_runtime::window::{
    EventTimeSessionWindows, ProcessWindowFunction, TimeWindow, TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
};
use std::time::Duration;

fn by_time() -> WatermarkStrategy<(u32, i64)> {
    WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(100), |r: &(u32, i64)| {
        r.1
    })
}

#[test]
fn reduce_sums_each_tumbling_window_of_each_key() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    let records: Vec<(u32, i64)> = (0..2_000).map(|i| (i % 5, i64::from(i))).collect();
    let out = env
        .from_iter(records.clone())
        .assign_timestamps_and_watermarks(by_time())
        .map(|(k, t)| (k, t))
        .key_by(|r| r.0)
        .window(TumblingEventTimeWindows::of(Duration::from_millis(250)))
        .reduce(|a, b| (a.0, a.1 + b.1))
        .collect();
    env.execute_blocking("reduce").unwrap();
    let mut got = out.take();
    got.sort();
    let mut want = std::collections::BTreeMap::new();
    for (k, t) in records {
        *want.entry((k, t / 250)).or_insert(0) += t;
    }
    let mut got_sums: Vec<((u32, i64), i64)> = Vec::new();
    for (k, sum) in got {
        // Sums of timestamps in one window of 250 identify their window.
        let w = want
            .iter()
            .find(|((kk, _), s)| *kk == k && **s == sum)
            .map(|(w, _)| *w)
            .expect("a sum that matches a window");
        got_sums.push((w, sum));
    }
    got_sums.sort();
    assert_eq!(got_sums, want.into_iter().collect::<Vec<_>>());
}

#[derive(Clone)]
struct Sessions;

impl ProcessWindowFunction<u32, (u32, i64)> for Sessions {
    type Out = (u32, TimeWindow, Vec<i64>);
    fn process(
        &mut self,
        key: &u32,
        window: &TimeWindow,
        elements: &[(u32, i64)],
        out: &mut Vec<Self::Out>,
    ) -> Result<(), UserError> {
        let mut ts: Vec<i64> = elements.iter().map(|e| e.1).collect();
        ts.sort();
        out.push((*key, *window, ts));
        Ok(())
    }
}

#[test]
fn session_windows_see_all_their_records_in_process() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    // Key 1: two sessions (gap 50); key 2: one.
    let records = vec![(1u32, 0i64), (2, 10), (1, 30), (1, 200), (2, 55), (1, 240)];
    let out = env
        .from_iter(records)
        .assign_timestamps_and_watermarks(by_time())
        .key_by(|r| r.0)
        .window(EventTimeSessionWindows::with_gap(Duration::from_millis(50)))
        .process(Sessions)
        .collect();
    env.execute_blocking("sessions").unwrap();
    let mut got = out.take();
    got.sort_by_key(|o| (o.0, o.1.start));
    assert_eq!(
        got,
        vec![
            (1, TimeWindow::new(0, 80), vec![0, 30]),
            (1, TimeWindow::new(200, 290), vec![200, 240]),
            (2, TimeWindow::new(10, 105), vec![10, 55]),
        ]
    );
}

#[test]
fn a_window_of_size_zero_is_refused_at_submit_naming_the_operator() {
    let env = StreamEnvironment::new();
    env.from_iter(vec![(1u32, 1i64)])
        .assign_timestamps_and_watermarks(by_time())
        .key_by(|r| r.0)
        .window(TumblingEventTimeWindows::of(Duration::ZERO))
        .reduce(|a, _| a)
        .name("zero")
        .collect();
    let err = env.execute_blocking("zero").unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("'zero'") && msg.contains("size above 0"),
        "{msg}"
    );
}

#[test]
fn an_event_time_window_without_timestamps_fails_the_job_saying_why() {
    let env = StreamEnvironment::new();
    env.from_iter(vec![(1u32, 1i64)])
        .key_by(|r| r.0)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(1)))
        .reduce(|a, _| a)
        .collect();
    let msg = env
        .execute_blocking("no timestamps")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("assign_timestamps_and_watermarks"), "{msg}");
}

/// Flink's streaming execution quiesces processing time at end of input
/// (`StreamOperatorWrapper` stops pending processing-time timers before `finish`; only its
/// BATCH mode fires them all at the end): a processing-time window still open when the input
/// ends never fires, and its contents go with the job. sluice runs bounded jobs the streaming
/// way, so it does the same, also while a finished task lingers for the final checkpoint: here a
/// slow second pipeline keeps the job running for half a second after the window's input
/// ended, well past the window's end. (With the clock paused, the window's timer must also not
/// fire within its own millisecond: it failed about one run in a hundred while it did.)
#[tokio::test(start_paused = true)]
async fn processing_time_windows_still_open_at_end_of_input_do_not_fire() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    env.enable_checkpointing(Duration::from_secs(3600));
    env.set_checkpoint_storage(dir.path());
    let out = env
        .from_iter(vec![(1u32, 1i64), (2, 2), (1, 3)])
        .key_by(|r| r.0)
        .window(TumblingProcessingTimeWindows::of(Duration::from_millis(
            100,
        )))
        .reduce(|a, b| (a.0, a.1 + b.1))
        .collect();
    env.from_generator(Generator::new(|i| i).take(5).rate_limit(10.0))
        .discard();
    env.execute("processing-time window at end of input")
        .await
        .unwrap();
    assert_eq!(out.take(), Vec::<(u32, i64)>::new());
}
