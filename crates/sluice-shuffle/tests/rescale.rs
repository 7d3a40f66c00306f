//! A job stopped with a savepoint while routing by statistics computed for 4 downstream
//! subtasks, restored with 2: the coordinator restores its statistics and recomputes them for 2
//! when the restored subtasks ask, and the subtasks route by their restored statistics from
//! their first record (no round robin after the restore).

use sluice_runtime::prelude::*;
use sluice_shuffle::metrics::ReportCause;
use sluice_shuffle::{RangeShuffle, RangeShuffleConfig, ShuffleMetrics, StatisticsType};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// 40 % key 0, the rest spread over keys 1..21.
fn record(i: u64) -> (u64, u64) {
    (if i % 5 < 2 { 0 } else { 1 + i % 20 }, i)
}

/// The same graph for both runs; `downstream` subtasks after the shuffle.
fn build<F>(
    env: &StreamEnvironment,
    source: Generator<F>,
    seen: (Arc<AtomicU64>, Arc<Notify>),
    downstream: usize,
) -> ShuffleMetrics
where
    F: Fn(u64) -> (u64, u64) + Clone + Send + Sync + 'static,
{
    let config = RangeShuffleConfig::default().statistics_type(StatisticsType::Map);
    let metrics = config.metrics();
    env.from_generator(source)
        .map(move |r: (u64, u64)| {
            if seen.0.fetch_add(1, Ordering::SeqCst) + 1 == 20_000 {
                seen.1.notify_one();
            }
            r
        })
        .range_shuffle(|r: &(u64, u64)| r.0, config)
        .map(|r| r)
        .parallelism(downstream)
        .discard()
        .parallelism(downstream);
    metrics
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statistics_for_4_subtasks_are_restored_and_recomputed_for_2() {
    let checkpoints = tempfile::tempdir().unwrap();
    let seen = (Arc::new(AtomicU64::new(0)), Arc::new(Notify::new()));

    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(32);
    env.enable_checkpointing(Duration::from_millis(10));
    env.set_checkpoint_storage(checkpoints.path());
    let first = build(
        &env,
        Generator::new(record).rate_limit(50_000.0),
        seen.clone(),
        4,
    );
    let job = env.submit("rescale: first run").unwrap();
    seen.1.notified().await;
    let pending = job.trigger_checkpoint().await.unwrap();
    pending.completed().await.unwrap();
    job.stop_with_savepoint().await.unwrap();
    job.await.unwrap();
    let learned = first.latest().expect("statistics learned in the first run");
    assert_eq!(learned.downstream_parallelism, 4);
    // Key 0 (40 %) is split over two of the four subtasks.
    assert_eq!(
        learned.route_of("0").unwrap().subtasks.len(),
        2,
        "{}",
        learned.describe()
    );

    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(32);
    env.enable_checkpointing(Duration::from_millis(10));
    env.set_checkpoint_storage(checkpoints.path());
    env.restore_from(checkpoints.path());
    let n = seen.0.load(Ordering::SeqCst) + 20_000;
    let second = build(&env, Generator::new(record).take(n), seen, 2);
    env.execute("rescale: second run").await.unwrap();

    let causes: Vec<(ReportCause, usize)> = second
        .history()
        .iter()
        .map(|r| (r.cause, r.downstream_parallelism))
        .collect();
    assert_eq!(causes[0], (ReportCause::Restored, 4), "{causes:?}");
    assert_eq!(causes[1], (ReportCause::Rescaled, 2), "{causes:?}");
    // Routed by the restored statistics (folded onto 2 subtasks) from the first record.
    assert_eq!(second.routed_round_robin(), 0);
    assert!(second.routed_by_statistics() > 0);
}
