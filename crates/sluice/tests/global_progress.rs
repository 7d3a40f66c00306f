//! The global-progress coordinator end to end: under random injected task failures, and under
//! injected coordinator failures, the job recovers and its totals never count a record twice.

#[path = "../examples/global_progress/progress.rs"]
#[allow(dead_code)]
mod progress;

use progress::{GlobalProgress, Progress};
use sluice::checkpoint::CheckpointSettings;
use sluice::coordinator::{BaseCoordinator, CoordinatorProvider};
use sluice::prelude::*;
use sluice::testing::{CoordinatorFault, CoordinatorFaultInjector, FailureInjector, SplitMix64};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the coordinator publishes its totals.
type Log = Arc<Mutex<Vec<(u64, u64)>>>;

/// Runs the progress job with random settings drawn from `seed`, `task_failures` injected task
/// failures, and the coordinator `provider` makes from the log; checks the totals. Returns the
/// restarts and the number of totals.
async fn trial<P: CoordinatorProvider + 'static>(
    seed: u64,
    task_failures: u32,
    provider: impl FnOnce(Log) -> P,
) -> (u32, usize) {
    let (result, totals) = run(seed, task_failures, provider, Duration::from_secs(600)).await;
    (result.restarts, totals)
}

/// [`trial`] with checkpoints that expire after `timeout`; returns the job's result.
async fn run<P: CoordinatorProvider + 'static>(
    seed: u64,
    task_failures: u32,
    provider: impl FnOnce(Log) -> P,
    timeout: Duration,
) -> (JobResult, usize) {
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
        .process(FailureInjector::seeded(0.01, seed).times(task_failures))
        .transform_with_coordinator("Progress", Progress::default(), provider(log.clone()))
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
        let (r, n) = trial(0x9a0b_0000 + t, 2, GlobalProgress::provider).await;
        restarts += r;
        totals += n;
    }
    println!("12 trials: {restarts} restarts, {totals} totals");
    assert!(
        restarts >= 6,
        "only {restarts} restarts: the suite must exercise recovery"
    );
}

/// Every coordinator instance fails at its first event (there is always one: the final
/// checkpoint's reports), `failures` times over the job; the job must restart exactly that often
/// and still count every record once (checked by `trial`).
async fn coordinator_fails_and_recovers(fault: CoordinatorFault, failures: u32, wrap_logic: bool) {
    for seed in [0x5eed_0001, 0x5eed_0002] {
        let faults = CoordinatorFaultInjector::at_event(1)
            .fault(fault)
            .times(failures);
        let injector = faults.clone();
        let (restarts, _) = if wrap_logic {
            trial(seed, 0, move |log| {
                BaseCoordinator::provider(move || {
                    injector.wrap_logic(GlobalProgress::new(log.clone()))
                })
            })
            .await
        } else {
            trial(seed, 0, move |log| {
                injector.wrap(GlobalProgress::provider(log))
            })
            .await
        };
        assert_eq!(
            faults.injected(),
            failures,
            "seed {seed:#x}: every planned failure fires"
        );
        assert_eq!(
            restarts, failures,
            "seed {seed:#x}: one restart per coordinator failure"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_returning_an_error_fails_over_and_the_job_recovers() {
    coordinator_fails_and_recovers(CoordinatorFault::ReturnError, 2, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_failing_the_job_through_its_context_fails_over_and_recovers() {
    coordinator_fails_and_recovers(CoordinatorFault::FailJob, 2, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_panicking_on_its_thread_fails_over_and_recovers() {
    coordinator_fails_and_recovers(CoordinatorFault::Panic, 2, true).await;
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
        let provider = GlobalProgress::provider;
        let (result, _) = run(0x57a1_0000 + seed, 2, provider, Duration::from_secs(20)).await;
        restarts += u64::from(result.restarts);
        triggered += result.checkpoints.triggered;
        if result.checkpoints.expired > 0 {
            expired.push((seed, result.checkpoints.expired));
        }
    }
    println!("{seeds} seeds: {restarts} restarts, {triggered} checkpoints triggered");
    assert!(restarts > seeds / 2, "only {restarts} restarts");
    assert!(
        expired.is_empty(),
        "checkpoints expired (seed, count): {expired:?}"
    );
}
