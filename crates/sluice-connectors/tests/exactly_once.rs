//! Exactly-once under failures: randomized jobs with keyed state, frequent checkpoints and
//! injected panics (also during snapshots) commit exactly the expected records to files. Half
//! of the trials also pass the records through an operator whose coordinator fails on plan: at
//! an event or a checkpoint call, by returning an error, failing the job through its context, or
//! panicking on its thread, at any point of the job, including after the final checkpoint.
//!
//! The same trials run three times: with keyed state on the heap, in RocksDB (`sluice-rocksdb`,
//! caching so few decoded counts in front of the store that they are written back to it and read
//! from it again all the time), and in RocksDB with incremental checkpoints (the stores' files
//! in the checkpoint storage's shared area, each failover restoring the stores from them).
//!
//! `SLUICE_EXACTLY_ONCE_TRIALS=N` runs N trials of each instead of the CI default of 50.

use sluice_connectors::file::{JsonLinesSink, read_committed};
use sluice_coordinator::BaseCoordinator;
use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::prelude::*;
use sluice_runtime::testing::{
    CoordinatorFault, CoordinatorFaultInjector, CountingPassThrough, FailureInjector, IgnoreEvents,
    PassThrough, SplitMix64,
};
use std::collections::BTreeMap;
use std::time::Duration;

/// What one trial did.
#[derive(Default)]
struct Outcome {
    restarts: u32,
    checkpoints: u64,
    /// Failures injected into tasks.
    task_failures: u32,
    /// Failures injected into the coordinator (none without one).
    coordinator_failures: u32,
}

/// Where the trials keep keyed state.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Heap,
    RocksDb,
    /// RocksDB with incremental checkpoints: its files in the checkpoint storage's shared area.
    RocksDbIncremental,
}

async fn trial(seed: u64, backend: Backend) -> Outcome {
    let mut rng = SplitMix64(seed);
    let p = rng.range(1, 4) as usize;
    let source_p = rng.range(1, p as u64) as usize;
    let n = rng.range(2_000, 12_000);
    let keys = rng.range(1, 50);
    let interval = Duration::from_millis(rng.range(1, 5));
    let failures = rng.range(1, 3) as u32;
    let in_snapshot = rng.next_u64().is_multiple_of(3);
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();

    let env = StreamEnvironment::new();
    if let Backend::RocksDb | Backend::RocksDbIncremental = backend {
        // No value cache to speak of: 16 counts, fewer than the keys of most trials.
        env.set_state_backend(
            sluice_rocksdb::RocksDbStateBackend::new(state.path())
                .memory_budget(4 << 20)
                .value_cache_bytes(0)
                .incremental(matches!(backend, Backend::RocksDbIncremental)),
        );
    }
    env.set_parallelism(p)
        .set_batch_size(rng.range(8, 64) as usize);
    env.enable_checkpointing(interval);
    env.set_checkpoint_storage(checkpoints.path());
    env.set_restart_strategy(RestartStrategy::fixed_delay(20, Duration::ZERO).unwrap());
    let mut fail = FailureInjector::seeded(0.02, seed).times(failures);
    if in_snapshot {
        fail = fail.during_snapshot();
    }
    // Drawn after the other parameters, so that those stay what they were for each seed.
    let coordinator = rng.next_u64().is_multiple_of(2).then(|| {
        let plan = match rng.range(0, 1) {
            0 => CoordinatorFaultInjector::at_event(rng.range(1, 4)),
            _ => CoordinatorFaultInjector::at_checkpoint(rng.range(1, 3)),
        };
        let fault = match rng.range(0, 2) {
            0 => CoordinatorFault::ReturnError,
            1 => CoordinatorFault::FailJob,
            _ => CoordinatorFault::Panic,
        };
        plan.fault(fault).times(rng.range(1, 2) as u32)
    });
    let source = env
        .from_generator(
            Generator::new(move |i| (i % keys, i))
                .take(n)
                .rate_limit(400_000.0),
        )
        .parallelism(source_p);
    let mut stream = source.process(fail.clone());
    if let Some(faults) = &coordinator {
        let faults = faults.clone();
        stream = stream.transform_with_coordinator(
            "Coordinated",
            // Reports every snapshot, so that the coordinator handles events as well as
            // checkpoints.
            PassThrough::new().on_snapshot(|ctx, c| ctx.send_to_coordinator(&c.0)),
            BaseCoordinator::provider(move || faults.wrap_logic(IgnoreEvents)),
        );
    }
    stream
        .key_by(|r: &(u64, u64)| r.0)
        .process(CountingPassThrough::new())
        .sink_to_exactly_once(JsonLinesSink::new(dir.path(), "out"));
    let context = format!(
        "seed {seed} ({backend:?}): parallelism {p}, source parallelism {source_p}, {n} records, {keys} keys, \
         checkpoints every {interval:?}, up to {failures} failures (in snapshot: {in_snapshot}), \
         coordinator faults: {coordinator:?}"
    );
    let result = env
        .execute("exactly-once")
        .await
        .unwrap_or_else(|e| panic!("{context}: job failed: {e}"));

    let committed: Vec<(u64, u64)> = read_committed(dir.path()).unwrap();
    let mut records: Vec<u64> = Vec::new();
    let mut finals: BTreeMap<u64, u64> = BTreeMap::new();
    for (k, v) in committed {
        if v > u64::MAX / 2 {
            assert!(
                finals.insert(k, u64::MAX - v).is_none(),
                "{context}: key {k} final count twice"
            );
        } else {
            assert_eq!(v % keys, k, "{context}");
            records.push(v);
        }
    }
    records.sort_unstable();
    let dupes = records.windows(2).filter(|w| w[0] == w[1]).count();
    assert_eq!(
        dupes, 0,
        "{context}: {dupes} records committed twice ({} restarts)",
        result.restarts
    );
    assert_eq!(
        records.len() as u64,
        n,
        "{context}: records lost ({} restarts)",
        result.restarts
    );
    assert_eq!(records, (0..n).collect::<Vec<_>>(), "{context}");
    let mut expected = BTreeMap::new();
    for i in 0..n {
        *expected.entry(i % keys).or_insert(0u64) += 1;
    }
    assert_eq!(finals, expected, "{context}: keyed state not exactly once");
    Outcome {
        restarts: result.restarts,
        checkpoints: result.completed_checkpoints,
        task_failures: fail.injected(),
        coordinator_failures: coordinator.map_or(0, |c| c.injected()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_output_is_exactly_the_input_under_random_failures() {
    trials(Backend::Heap).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_output_is_exactly_the_input_under_random_failures_with_state_in_rocksdb() {
    trials(Backend::RocksDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_output_is_exactly_the_input_under_random_failures_with_incremental_rocksdb() {
    trials(Backend::RocksDbIncremental).await;
}

async fn trials(backend: Backend) {
    let trials: u64 = std::env::var("SLUICE_EXACTLY_ONCE_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let (mut restarted, mut restarts, mut checkpoints) = (0, 0, 0);
    let (mut coordinator_failures, mut coordinator_restarts) = (0, 0);
    for t in 0..trials {
        let o = trial(0x5eed_0000 + t, backend).await;
        restarted += u64::from(o.restarts > 0);
        restarts += u64::from(o.restarts);
        checkpoints += o.checkpoints;
        coordinator_failures += o.coordinator_failures;
        // A restart no injected task failure explains was caused by the coordinator.
        coordinator_restarts += o.restarts.saturating_sub(o.task_failures);
    }
    println!(
        "{backend:?}: {trials} trials: {restarted} restarted ({restarts} restarts, {coordinator_restarts} \
         caused by {coordinator_failures} coordinator failures), {checkpoints} checkpoints"
    );
    // The suite must exercise recovery, not just run clean jobs.
    assert!(
        restarted * 2 >= trials,
        "only {restarted} of {trials} trials failed and restarted"
    );
    assert!(
        checkpoints >= trials * 2,
        "only {checkpoints} checkpoints in {trials} trials"
    );
    // Exactly once must hold under coordinator failures too, not only without them.
    if trials >= 20 {
        assert!(
            coordinator_failures > 0 && coordinator_restarts > 0,
            "no coordinator failure failed a job over: {coordinator_failures} injected"
        );
    }
}
