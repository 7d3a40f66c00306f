//! Cancelling an unbounded job: `JobHandle::cancel` stops every task, whether the job is busy,
//! backpressured or waiting on a timer, and awaiting the handle gives `JobError::Cancelled`.
//!
//! These tests await the cancelled job without any deadline: a cancel that did not stop the job
//! would hang them, and the test harness reports a hang. They measure no time.

mod common;

use common::{Gate, Guarded, LiveCounter};
use sluice_runtime::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::watch;

/// An unbounded generator, counted by `live`, with a map that publishes how many records it has
/// seen every 1000 records.
fn busy_source(
    env: &StreamEnvironment,
    live: &LiveCounter,
) -> (DataStream<u64>, watch::Receiver<u64>) {
    let guard = live.guard();
    let (tx, rx) = watch::channel(0);
    let tx = Arc::new(tx);
    let seen = Arc::new(AtomicU64::new(0));
    let stream = env
        .from_generator(Generator::new(move |i| {
            let _alive = &guard;
            i
        }))
        .map(move |i| {
            let n = seen.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_multiple_of(1_000) {
                tx.send_replace(n);
            }
            i
        })
        .name("progress");
    (stream, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_running_unbounded_job() {
    let live = LiveCounter::new();
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    let (source, mut progress) = busy_source(&env, &live);
    source
        .key_by(|i: &u64| i % 100)
        .process(Guarded::new(&live))
        .name("keyed")
        .discard();
    let job = env.submit("endless").unwrap();

    // Cancel while records are flowing through every task.
    progress.wait_for(|n| *n >= 50_000).await.unwrap();
    let running = job.metrics();
    assert!(running.operator("progress").records_in >= 50_000);
    assert!(!job.is_finished());

    job.cancel();
    assert!(matches!(job.await, Err(JobError::Cancelled)));
    assert_eq!(live.live(), 0, "a task still runs after the cancel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_a_backpressured_job() {
    let live = LiveCounter::new();
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(16);
    let (gate, mut control) = Gate::new();
    let (source, _progress) = busy_source(&env, &live);
    source
        .rebalance()
        .process(Guarded::new(&live))
        .transform("stuck sink", gate)
        .discard();
    let job = env.submit("stuck").unwrap();

    // The sink consumes a little then stops: the source fills the buffers and waits.
    control.release(100);
    control.wait_passed(100).await;

    job.cancel();
    assert!(matches!(job.await, Err(JobError::Cancelled)));
    assert_eq!(control.passed(), 100);
    assert_eq!(live.live(), 0, "a task still runs after the cancel");
}

/// On tokio's paused clock, so the minute between two records is virtual.
#[tokio::test(start_paused = true)]
async fn cancel_stops_a_source_waiting_on_its_rate_limit() {
    let live = LiveCounter::new();
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    let guard = live.guard();
    // One record a minute (the first after one minute too): once the map has seen it, the
    // source is asleep on its timer for the next minute.
    let (tx, mut first) = watch::channel(false);
    env.from_generator(
        Generator::new(move |i| {
            let _alive = &guard;
            i
        })
        .rate_limit(1.0 / 60.0),
    )
    .map(move |i| {
        tx.send_replace(true);
        i
    })
    .discard();
    let job = env.submit("slow").unwrap();
    first.wait_for(|b| *b).await.unwrap();

    job.cancel();
    assert!(matches!(job.await, Err(JobError::Cancelled)));
    assert_eq!(live.live(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_right_after_submit_is_reported_as_cancelled() {
    let live = LiveCounter::new();
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    let (source, _progress) = busy_source(&env, &live);
    source.rebalance().process(Guarded::new(&live)).discard();
    let job = env.submit("short-lived").unwrap();
    job.cancel();
    assert!(matches!(job.await, Err(JobError::Cancelled)));
    assert_eq!(live.live(), 0);
}
