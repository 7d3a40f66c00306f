//! Windowed counts exactly once: event-time tumbling windows counted per key and committed
//! through an exactly-once sink are exact (each window once, with its full count) under random
//! injected failures, and across a stop-with-savepoint and a restore that rescales the window
//! operator from 2 to 3 subtasks, where windows whose timers were due during the outage fire
//! once after the restore.

use sluice::prelude::*;
use sluice::window::{AggregateFunction, TumblingEventTimeWindows};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

const KEYS: u64 = 13;
const WINDOW_MS: i64 = 500;

/// Record `i`: key `i % KEYS`, event time `i` ms.
fn record(i: u64) -> (u64, i64) {
    (i % KEYS, i as i64)
}

#[derive(Clone)]
struct Count;

impl AggregateFunction<(u64, i64)> for Count {
    type Acc = u64;
    type Out = u64;
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, _: (u64, i64), acc: &mut u64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
    fn merge(&self, a: u64, b: u64) -> u64 {
        a + b
    }
}

/// (key, window start) -> count, for records `0..n`.
fn expected(n: u64) -> BTreeMap<(u64, i64), u64> {
    let mut m = BTreeMap::new();
    for i in 0..n {
        let (k, t) = record(i);
        *m.entry((k, t - t.rem_euclid(WINDOW_MS))).or_insert(0) += 1;
    }
    m
}

/// Reads the committed window counts; fails on a window committed twice.
fn committed(dir: &std::path::Path) -> BTreeMap<(u64, i64), u64> {
    let rows: Vec<(u64, i64, u64)> = read_committed(dir).unwrap();
    let mut m = BTreeMap::new();
    for (k, start, n) in rows {
        assert!(
            m.insert((k, start), n).is_none(),
            "window ({k}, {start}) committed twice"
        );
    }
    m
}

/// source → timestamps → `inject` → key → tumbling window count → exactly-once JSON lines.
fn build<F>(
    env: &StreamEnvironment,
    source: Generator<F>,
    inject: impl Operator<(u64, i64), Out = (u64, i64)> + Clone,
    window_parallelism: usize,
    out: &std::path::Path,
) where
    F: Fn(u64) -> (u64, i64) + Clone + Send + Sync + 'static,
{
    env.from_generator(source)
        .assign_timestamps_and_watermarks(WatermarkStrategy::for_bounded_out_of_orderness(
            Duration::from_millis(20),
            |r: &(u64, i64)| r.1,
        ))
        .transform("inject", inject)
        .key_by(|r: &(u64, i64)| r.0)
        .window(TumblingEventTimeWindows::of(Duration::from_millis(
            WINDOW_MS as u64,
        )))
        .aggregate_with(Count, |k: &u64, w, n| (*k, w.start, n))
        .parallelism(window_parallelism)
        .sink_to_exactly_once(JsonLinesSink::new(out, "windows"))
        .parallelism(2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windowed_counts_are_exact_under_random_injected_failures() {
    let n = 40_000u64;
    let checkpoints = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(64);
    env.enable_checkpointing(Duration::from_millis(10));
    env.set_checkpoint_storage(checkpoints.path());
    env.set_restart_strategy(RestartStrategy::fixed_delay(10, Duration::ZERO).unwrap());
    let fail = sluice::testing::FailureInjector::seeded(0.01, 11).times(3);
    build(
        &env,
        Generator::new(record).take(n).rate_limit(400_000.0),
        fail.clone(),
        2,
        out.path(),
    );
    let result = env.execute("windows under failures").await.unwrap();
    assert_eq!(fail.injected(), 3);
    // Two subtasks may both fail in one attempt before it is torn down: one restart for both.
    assert!(
        (1..=3).contains(&result.restarts),
        "{} restarts for 3 injected failures",
        result.restarts
    );
    assert_eq!(committed(out.path()), expected(n));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windowed_counts_are_exact_across_a_savepoint_and_a_rescale_from_2_to_3() {
    let p = 2u64;
    let checkpoints = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let max_seen = Arc::new(AtomicU64::new(0));
    let reached = Arc::new(Notify::new());

    // Run 1: endless, window operator at parallelism 2, stopped with a savepoint.
    let env = StreamEnvironment::new();
    env.set_parallelism(p as usize).set_batch_size(32);
    env.enable_checkpointing(Duration::from_millis(20));
    env.set_checkpoint_storage(checkpoints.path());
    let (seen, notify) = (max_seen.clone(), reached.clone());
    build(
        &env,
        Generator::new(move |i| {
            if seen.fetch_max(i, Ordering::SeqCst) < 3_000 && i >= 3_000 {
                notify.notify_one();
            }
            record(i)
        })
        .rate_limit(100_000.0),
        sluice::testing::FailureInjector::seeded(0.0, 0),
        2,
        out.path(),
    );
    let job = env.submit("windows: first run").unwrap();
    reached.notified().await;
    let savepoint = job.stop_with_savepoint().await.unwrap();
    let first = job.await.unwrap();
    assert_eq!(first.stopped_with_savepoint, Some(savepoint));
    let before = committed(out.path()).len();
    assert!(before > 0, "some windows fired in the first run");

    // Run 2: bounded, restored, the window operator at parallelism 3. Every subtask's
    // position lies at most a stride beyond the highest index seen.
    let n = max_seen.load(Ordering::SeqCst) + p + 1 + 2_000;
    let env = StreamEnvironment::new();
    env.set_parallelism(p as usize).set_batch_size(32);
    env.enable_checkpointing(Duration::from_millis(20));
    env.set_checkpoint_storage(checkpoints.path());
    env.restore_from(checkpoints.path());
    build(
        &env,
        Generator::new(record).take(n),
        sluice::testing::FailureInjector::seeded(0.0, 0),
        3,
        out.path(),
    );
    let second = env.execute("windows: second run").await.unwrap();
    assert_eq!(second.restored_from, Some(savepoint));
    assert_eq!(committed(out.path()), expected(n));
}
