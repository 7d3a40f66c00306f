//! Exactly once under failures: randomized jobs with frequent checkpoints, panics injected in
//! front of the writers (also while snapshotting) and a failure of the committer right after a
//! snapshot was committed and before the job saw that checkpoint through, with checkpoints
//! without data committed as empty snapshots now and then; every input row is in the table
//! exactly once, and no checkpoint is committed twice.
//!
//! `SLUICE_EXACTLY_ONCE_TRIALS=N` runs N trials instead of the CI default of 8.

mod common;

use common::*;
use sluice_iceberg::{DistributionMode, IcebergSink, PartitionField};
use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::prelude::*;
use sluice_runtime::testing::{FailureInjector, SplitMix64};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

fn trial(seed: u64) {
    let mut rng = SplitMix64(seed);
    let p = rng.range(1, 4) as usize;
    let n = rng.range(3_000, 15_000);
    let keys = rng.range(1, 20);
    let interval = Duration::from_millis(rng.range(5, 30));
    let failures = rng.range(1, 3) as u32;
    let in_snapshot = rng.next_u64().is_multiple_of(3);
    let mode = match rng.range(0, 2) {
        0 => DistributionMode::None,
        1 => DistributionMode::Hash,
        _ => DistributionMode::Range,
    };
    // The committer fails once, right after committing the k-th checkpoint's snapshot.
    let fail_after_commit = rng.range(1, 4) as u32;
    // Checkpoints without data commit an empty snapshot every 1st to 4th in a row.
    let empty_commits = rng.range(1, 4) as usize;
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path());

    let env = StreamEnvironment::new();
    env.set_parallelism(p)
        .set_batch_size(rng.range(16, 256) as usize);
    env.enable_checkpointing(interval);
    env.set_checkpoint_storage(checkpoints.path());
    env.set_restart_strategy(RestartStrategy::fixed_delay(20, Duration::ZERO).unwrap());
    let mut fail = FailureInjector::seeded(0.01, seed).times(failures);
    if in_snapshot {
        fail = fail.during_snapshot();
    }
    let commits = Arc::new(AtomicU32::new(0));
    let failed_after_commit = Arc::new(AtomicU32::new(0));
    let (c, f) = (commits.clone(), failed_after_commit.clone());
    let hook = Arc::new(move |checkpoint: u64| {
        let k = c.fetch_add(1, Ordering::SeqCst) + 1;
        if k == fail_after_commit && f.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(format!(
                "injected failure after committing checkpoint {checkpoint}"
            ));
        }
        Ok(())
    });
    let source = env.from_generator(
        Generator::new(move |i| event(i, keys))
            .take(n)
            .rate_limit(300_000.0),
    );
    let stream = source.process(fail.clone());
    IcebergSink::builder(catalog.clone(), "db.events")
        .create_if_missing(schema())
        .partition_by(PartitionField::identity("key"))
        .distribution_mode(mode)
        .after_commit(hook)
        .max_continuous_empty_commits(empty_commits)
        .sink(&stream);
    let context = format!(
        "seed {seed}: parallelism {p}, {n} records, {keys} keys, {mode:?}, checkpoints every \
         {interval:?}, up to {failures} failures (in snapshot: {in_snapshot}), committer fails \
         after commit #{fail_after_commit}, empty commits every {empty_commits}"
    );
    let result = env
        .execute_blocking("exactly-once iceberg")
        .unwrap_or_else(|e| panic!("{context}: job failed: {e}"));

    let rows = read_rows(&catalog, "db.events");
    let mut ids: Vec<i64> = rows.iter().map(|r| r.0).collect();
    ids.sort_unstable();
    let dupes = ids.windows(2).filter(|w| w[0] == w[1]).count();
    assert_eq!(
        dupes, 0,
        "{context}: {dupes} rows twice ({} restarts)",
        result.restarts
    );
    assert_eq!(
        ids,
        (0..n as i64).collect::<Vec<_>>(),
        "{context}: rows lost ({} restarts)",
        result.restarts
    );
    // One snapshot per committed checkpoint, in increasing order.
    let mut seen: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for s in snapshots(&catalog, "db.events") {
        let job = s["sluice.job-id"].clone();
        let c: u64 = s["sluice.max-committed-checkpoint-id"].parse().unwrap();
        seen.entry(job).or_default().push(c);
    }
    for (job, cs) in &seen {
        assert!(
            cs.windows(2).all(|w| w[0] < w[1]),
            "{context}: job {job} committed checkpoints {cs:?}"
        );
    }
    if failed_after_commit.load(Ordering::SeqCst) > 0 {
        assert!(
            result.restarts >= 1,
            "{context}: the failure after commit did not restart the job"
        );
    }
}

#[test]
fn every_row_is_in_the_table_exactly_once_under_random_failures() {
    let trials: u64 = std::env::var("SLUICE_EXACTLY_ONCE_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    for t in 0..trials {
        trial(0x1ce_0000 + t);
    }
}
