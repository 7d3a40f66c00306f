//! The global-progress coordinator end to end: under random injected task failures its totals
//! never count a record twice.

#[path = "../examples/global_progress/progress.rs"]
#[allow(dead_code)]
mod progress;

use progress::{GlobalProgress, Progress};
use sluice::checkpoint::CheckpointSettings;
use sluice::failover::RestartStrategy;
use sluice::prelude::*;
use sluice::testing::{FailureInjector, SplitMix64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

async fn trial(seed: u64) -> (u32, usize) {
    let (result, totals) = run(seed, Duration::from_secs(600)).await;
    (result.restarts, totals)
}

/// Runs one seeded trial with checkpoints that expire after `timeout`; checks its totals.
async fn run(seed: u64, timeout: Duration) -> (JobResult, usize) {
    let mut rng = SplitMix64(seed);
    let p = rng.range(1, 4) as usize;
    let n = rng.range(5_000, 20_000);
    let storage = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(p).set_batch_size(32);
    env.set_checkpoint_settings(
        CheckpointSettings::every(Duration::from_millis(rng.range(2, 5))).with_timeout(timeout),
    );
    env.set_checkpoint_storage(storage.path());
    env.set_restart_strategy(RestartStrategy::fixed_delay(20, Duration::ZERO).unwrap());
    let log = Arc::new(Mutex::new(Vec::new()));
    env.from_generator(Generator::new(|i| i).take(n).rate_limit(500_000.0))
        .process(FailureInjector::seeded(0.01, seed).times(2))
        .transform_with_coordinator(
            "Progress",
            Progress::default(),
            GlobalProgress::provider(log.clone()),
        )
        .discard();
    let context = format!("seed {seed}: parallelism {p}, {n} records");
    let result = env
        .execute("progress")
        .await
        .unwrap_or_else(|e| panic!("{context}: {e}"));
    let mut totals = log.lock().unwrap().clone();
    totals.sort();
    assert!(!totals.is_empty(), "{context}: no total was computed");
    for w in totals.windows(2) {
        assert!(
            w[0].0 < w[1].0,
            "{context}: two totals for checkpoint {}",
            w[0].0
        );
        assert!(w[0].1 <= w[1].1, "{context}: progress went back: {w:?}");
    }
    for (c, t) in &totals {
        assert!(
            *t <= n,
            "{context}: checkpoint {c} counted {t} of {n} records: double counting"
        );
    }
    assert_eq!(
        totals.last().map(|t| t.1),
        Some(n),
        "{context}: the final checkpoint must count every record once"
    );
    for s in result.metrics.subtasks_of("Progress") {
        if let Some(g) = s.gauges.get("global_progress") {
            assert!(
                totals.iter().any(|(_, t)| *t as i64 == *g),
                "{context}: subtask {} saw {g}",
                s.subtask
            );
        }
    }
    let count = totals.len();
    (result, count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_progress_never_double_counts_under_random_failures() {
    let (mut restarts, mut totals) = (0, 0);
    for t in 0..12 {
        let (r, n) = trial(0x9a0b_0000 + t).await;
        restarts += r;
        totals += n;
    }
    println!("12 trials: {restarts} restarts, {totals} totals");
    assert!(
        restarts >= 6,
        "only {restarts} restarts: the suite must exercise recovery"
    );
}

/// A failover used to leave a checkpoint waiting for a coordinator event that had been lost to
/// the failed task: the checkpoint stalled until its timeout (ten minutes by default) released it.
/// Over many seeds, no checkpoint may end by expiring: a count, not a wall-clock bound. (With a
/// 20 s timeout a stall shows up as an expired checkpoint instead of a hung test.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_checkpoint_stalls_until_its_timeout_after_failovers() {
    let seeds: u64 = std::env::var("SLUICE_STALL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let (mut restarts, mut triggered, mut expired) = (0, 0, Vec::new());
    for seed in 0..seeds {
        let (result, _) = run(0x57a1_0000 + seed, Duration::from_secs(20)).await;
        restarts += result.restarts;
        triggered += result.checkpoints.triggered;
        if result.checkpoints.expired > 0 {
            expired.push((seed, result.checkpoints.expired));
        }
    }
    println!("{seeds} seeds: {restarts} restarts, {triggered} checkpoints triggered");
    assert!(u64::from(restarts) > seeds / 2, "only {restarts} restarts");
    assert!(
        expired.is_empty(),
        "checkpoints expired (seed, count): {expired:?}"
    );
}
