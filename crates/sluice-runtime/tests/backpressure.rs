//! Backpressure: a sink that consumes only when the test lets it holds the source back. The source
//! never runs ahead of the sink by more than the job's buffers can hold, measured with counters.
//!
//! The job is `generator -> map (counts emitted records) -> rebalance -> gate (the slow sink)`,
//! two subtasks on each side, so four channels. Between the map's counter and the gate's counter a
//! record can only be:
//! - in a producer's network writer: at most one partially filled batch per channel, plus the one
//!   input batch the task is routing (it reads no input while sealed batches wait for room);
//! - in a channel: at most `channel_capacity` batches per channel;
//! - held by the gate: at most the one batch it received (it blocks its task's input meanwhile).

mod common;

use common::{Gate, GateControl};
use sluice_runtime::JobConfig;
use sluice_runtime::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const BATCH: usize = 4;
const CAPACITY: usize = 2;
const PRODUCERS: usize = 2;
const CONSUMERS: usize = 2;

/// The most records the job configured by [`job`] can hold between the emitted and the consumed
/// counter.
fn bound(config: &JobConfig) -> u64 {
    let channels = PRODUCERS * CONSUMERS;
    let tasks = PRODUCERS + CONSUMERS;
    // per channel: its queued batches and one partial batch; per task: one batch in hand
    (config.batch_size * (channels * (config.channel_capacity + 1) + tasks)) as u64
}

struct Counters {
    emitted: Arc<AtomicU64>,
    /// The largest `emitted - consumed` any record saw when it passed the map.
    max_ahead: Arc<AtomicU64>,
}

/// Configures the environment (small batches and channels, so the bound is tight).
fn configure(env: &StreamEnvironment) -> u64 {
    env.set_parallelism(PRODUCERS)
        .set_batch_size(BATCH)
        .set_channel_capacity(CAPACITY);
    bound(&env.config())
}

/// Builds the job; the gate starts with no permit.
fn job(env: &StreamEnvironment, total: u64) -> (Counters, GateControl) {
    let (gate, control) = Gate::new();
    let emitted = Arc::new(AtomicU64::new(0));
    let max_ahead = Arc::new(AtomicU64::new(0));
    let consumed = control.passed_counter();
    let (e, m) = (emitted.clone(), max_ahead.clone());
    env.from_generator(Generator::new(|i| i).take(total))
        .map(move |x| {
            // Both counters only grow, and `consumed` is read after `emitted` was: the lead
            // computed here can understate the true one (another subtask may have emitted in
            // between), never overstate it, so a lead above the bound is a real one.
            let emitted = e.fetch_add(1, Ordering::SeqCst) + 1;
            let ahead = emitted.saturating_sub(consumed.load(Ordering::SeqCst));
            m.fetch_max(ahead, Ordering::SeqCst);
            x
        })
        .name("count emitted")
        .rebalance()
        .transform("slow sink", gate)
        .parallelism(CONSUMERS)
        .discard()
        .parallelism(CONSUMERS);
    (Counters { emitted, max_ahead }, control)
}

/// Returns once every task of the current-thread runtime is waiting: with the paused clock,
/// tokio advances time (and so ends this sleep) only when no task can make progress. This waits
/// for quiescence, deterministically; it measures no real time.
async fn settle() {
    tokio::time::sleep(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn a_blocked_sink_stops_the_source_within_the_buffer_bound() {
    let env = StreamEnvironment::new();
    let bound = configure(&env);
    let total = bound * 40;
    let (counters, gate) = job(&env, total);
    let job = env.submit("backpressure").unwrap();

    // The sink consumes nothing: the source must stop by itself, with the buffers full. (Were
    // any queue unbounded, it would instead run through all `total` records.)
    settle().await;
    let emitted = counters.emitted.load(Ordering::SeqCst);
    assert_eq!(gate.passed(), 0);
    assert!(
        emitted <= bound,
        "the source ran {emitted} records ahead of a sink that consumed nothing (bound {bound})"
    );
    assert!(
        emitted >= (CAPACITY * BATCH) as u64,
        "the source stopped at {emitted} records before filling a channel"
    );

    // Let the sink consume a few records at a time (not a multiple of the batch size); each time
    // the source moves on by as much, and no further than the bound.
    let mut released = 0u64;
    for _ in 0..30 {
        gate.release(7);
        released += 7;
        settle().await;
        let (emitted, consumed) = (counters.emitted.load(Ordering::SeqCst), gate.passed());
        assert_eq!(
            consumed, released,
            "the sink consumed all it was allowed to"
        );
        assert!(
            emitted - consumed <= bound,
            "{emitted} emitted, {consumed} consumed: more than {bound} in flight"
        );
        assert!(
            emitted - consumed >= (CAPACITY * BATCH) as u64,
            "the source did not refill the buffers ({emitted} emitted, {consumed} consumed)"
        );
    }

    gate.release(total as usize);
    let result = job.await.unwrap();
    assert_eq!(gate.passed(), total);
    assert_eq!(counters.emitted.load(Ordering::SeqCst), total);
    let max_ahead = counters.max_ahead.load(Ordering::SeqCst);
    assert!(max_ahead <= bound, "max lead {max_ahead} > bound {bound}");
    assert_eq!(result.metrics.operator("slow sink").records_in, total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_never_runs_ahead_of_a_slow_sink_on_a_parallel_runtime() {
    let env = StreamEnvironment::new();
    let bound = configure(&env);
    let total = bound * 40;
    let (counters, mut gate) = job(&env, total);
    let job = env.submit("backpressure, threads").unwrap();

    // Feed the sink one batch's worth at a time, waiting until it consumed it, while the tasks
    // run on two worker threads. Every record checks the lead as it passes the map.
    let mut released = 0u64;
    while released < total {
        let n = (BATCH as u64).min(total - released);
        gate.release(n as usize);
        released += n;
        gate.wait_passed(released).await;
    }
    job.await.unwrap();
    assert_eq!(counters.emitted.load(Ordering::SeqCst), total);
    let max_ahead = counters.max_ahead.load(Ordering::SeqCst);
    assert!(max_ahead <= bound, "max lead {max_ahead} > bound {bound}");
}
