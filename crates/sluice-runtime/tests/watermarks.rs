//! Watermarks end to end through jobs: a task's watermark is the minimum over its input channels,
//! an idle input stops holding event time back, and end of input sends the maximum watermark all
//! the way to the sink.

mod common;

use common::{Gate, WatermarkRecorder};
use sluice_runtime::prelude::*;
use std::time::Duration;

fn monotonous() -> WatermarkStrategy<i64> {
    WatermarkStrategy::for_monotonous_timestamps(|t: &i64| *t)
}

/// Two sources whose records each wait at a gate the test opens, unioned; an operator after the
/// union records the watermarks the union's task emits. Opening the gates in a chosen order shows
/// the task follows the slower input, whichever input it heard from last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watermark_after_a_union_is_the_minimum_over_its_inputs() {
    let env = StreamEnvironment::new();
    // One record per batch, so each record is followed by its own watermark (timestamp - 1).
    env.set_parallelism(1).set_batch_size(1);
    let (gate_fast, fast) = Gate::new();
    let (gate_slow, slow) = Gate::new();
    let ahead = env
        .from_iter(vec![1_000i64, 1_001, 1_002, 1_003, 1_004])
        .assign_timestamps_and_watermarks(monotonous())
        .transform("gate ahead", gate_fast);
    let behind = env
        .from_iter(vec![10i64, 2_000, 2_001])
        .assign_timestamps_and_watermarks(monotonous())
        .transform("gate behind", gate_slow);
    let (recorder, log) = WatermarkRecorder::new();
    let (recorder, mut seen) = recorder.with_channel(64);
    let out = ahead
        .union([behind])
        .transform("record watermarks", recorder)
        .collect();
    let job = env.submit("min over channels").unwrap();

    // The input ahead reaches 999 first; the union must wait for the one behind, at 9.
    fast.release(1);
    slow.release(1);
    assert_eq!(seen.recv().await.unwrap().watermark, Watermark::new(9));
    // The one behind jumps to 1999: now the input ahead (999) is the minimum.
    slow.release(1);
    assert_eq!(seen.recv().await.unwrap().watermark, Watermark::new(999));
    fast.release(1);
    assert_eq!(seen.recv().await.unwrap().watermark, Watermark::new(1_000));

    fast.release(100);
    slow.release(100);
    job.await.unwrap();
    let all: Vec<Watermark> = log.seen().into_iter().map(|s| s.watermark).collect();
    assert!(
        all.windows(2).all(|w| w[0] < w[1]),
        "watermarks went back: {all:?}"
    );
    assert_eq!(all.last(), Some(&Watermark::MAX), "{all:?}");
    // Every watermark is one an input had reached: the ahead input's 999..=1003, or, once it
    // ended, the other's 1999 or 2000.
    let possible = |w: &Watermark| {
        [9, 1_999, 2_000].contains(&w.timestamp())
            || (999..=1_003).contains(&w.timestamp())
            || *w == Watermark::MAX
    };
    assert!(all.iter().all(possible), "{all:?}");
    assert_eq!(out.len(), 8);
}

/// One subtask of the source sees no record at all (a filter drops its whole share); after the
/// idleness timeout it reports itself idle, and the downstream watermark follows the other
/// subtask alone. Runs on tokio's paused clock: the timeout is virtual time.
#[tokio::test(start_paused = true)]
async fn an_idle_subtask_does_not_hold_back_the_watermark() {
    const IDLENESS: Duration = Duration::from_millis(500);
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(16);
    let (recorder, _log) = WatermarkRecorder::new();
    let (recorder, mut seen) = recorder.with_channel(1_024);
    let start = tokio::time::Instant::now();
    // Subtask s of the generator makes the indices s, s + 2, ...: subtask 1 only odd ones.
    env.from_generator(Generator::new(|i| i as i64).rate_limit(200.0))
        .filter(|i| i % 2 == 0)
        .assign_timestamps_and_watermarks(monotonous().with_idleness(IDLENESS))
        .rebalance()
        .transform("record watermarks", recorder)
        .parallelism(1)
        .discard()
        .parallelism(1);
    let job = env.submit("idleness").unwrap();

    // Without idleness the silent subtask would hold the watermark at its minimum forever; the
    // deadline is virtual time, so it turns that hang into a failure without measuring anything.
    let first = tokio::time::timeout(Duration::from_secs(60), seen.recv())
        .await
        .expect("no watermark got past the idle subtask")
        .unwrap();
    assert!(
        first.at >= start + IDLENESS,
        "a watermark passed before the silent subtask was idle: {first:?}"
    );
    assert!(first.watermark > Watermark::MIN && first.watermark < Watermark::MAX);

    // And it keeps advancing with the active subtask alone.
    let target = first.watermark.timestamp() + 1_000;
    let later = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            let w = seen.recv().await.unwrap();
            if w.watermark.timestamp() >= target {
                return w;
            }
        }
    })
    .await
    .expect("the watermark stopped advancing");
    assert!(later.watermark > first.watermark);

    job.cancel();
    assert!(matches!(job.await, Err(JobError::Cancelled)));
}

/// At end of input every source sends the maximum watermark; through a keyed exchange it reaches
/// every subtask of the last operator before the sink, once, after all of its records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_of_input_brings_the_maximum_watermark_to_the_sink() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(8);
    let (recorder, log) = WatermarkRecorder::new();
    let out = env
        .from_iter(0i64..500)
        .parallelism(3)
        .assign_timestamps_and_watermarks(monotonous())
        .key_by(|t: &i64| t % 10)
        .transform("record watermarks", recorder)
        .parallelism(3)
        .collect();
    env.execute("max watermark").await.unwrap();
    assert_eq!(out.len(), 500);

    let ends = log.end_counts();
    assert_eq!(ends.iter().map(|e| e.0).collect::<Vec<_>>(), vec![0, 1, 2]);
    for (subtask, records) in ends {
        let seen: Vec<_> = log
            .seen()
            .into_iter()
            .filter(|s| s.subtask == subtask)
            .collect();
        let marks: Vec<Watermark> = seen.iter().map(|s| s.watermark).collect();
        assert!(marks.windows(2).all(|w| w[0] < w[1]), "{marks:?}");
        let last = seen
            .last()
            .expect("every subtask sees the maximum watermark");
        assert_eq!(
            last.watermark,
            Watermark::MAX,
            "subtask {subtask}: {marks:?}"
        );
        assert_eq!(
            last.records_before, records,
            "subtask {subtask} got records after the maximum watermark"
        );
    }
}

/// Without any watermark strategy, end of input still sends the maximum watermark, and only it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_maximum_watermark_arrives_without_a_strategy() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    let (recorder, log) = WatermarkRecorder::new();
    env.from_iter(0u64..100)
        .rebalance()
        .transform("record watermarks", recorder)
        .discard();
    env.execute("max watermark, no strategy").await.unwrap();
    for s in 0..2 {
        assert_eq!(log.of_subtask(s), vec![Watermark::MAX], "subtask {s}");
    }
}
