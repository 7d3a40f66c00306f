//! Checkpoints and global failover: keyed state survives injected failures exactly once.

use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::prelude::*;
use sluice_runtime::testing::KeyedCounter;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Panics once, when the shared counter of seen records passes `at`.
#[derive(Clone)]
struct FailOnce {
    seen: Arc<AtomicU64>,
    at: u64,
}

impl Operator<u64> for FailOnce {
    type Out = u64;
    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        let before = self.seen.fetch_add(batch.len() as u64, Ordering::SeqCst);
        if before < self.at && before + batch.len() as u64 >= self.at {
            panic!("injected failure after {} records", self.at);
        }
        out.emit_batch(batch);
        Ok(())
    }
}

fn expected(n: u64, keys: u64) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    for i in 0..n {
        *m.entry(i % keys).or_insert(0) += 1;
    }
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_counts_are_exact_after_a_failure_and_restart_from_a_checkpoint() {
    let n = 200_000u64;
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(64);
    env.enable_checkpointing(Duration::from_millis(2));
    let storage = tempfile::tempdir().unwrap();
    env.set_checkpoint_storage(storage.path());
    env.set_restart_strategy(RestartStrategy::fixed_delay(3, Duration::ZERO).unwrap());
    let seen = Arc::new(AtomicU64::new(0));
    let out = env
        .from_generator(Generator::new(|i| i % 97).take(n).rate_limit(2_000_000.0))
        .process(FailOnce {
            seen: seen.clone(),
            at: n / 2,
        })
        .key_by(|k: &u64| *k)
        .process(KeyedCounter::new())
        .collect();
    let result = env.execute("failover").await.unwrap();
    assert_eq!(result.restarts, 1);
    assert!(result.completed_checkpoints >= 1);
    let got: BTreeMap<u64, u64> = out.take().into_iter().collect();
    assert_eq!(got, expected(n, 97));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_job_with_checkpointing_ends_with_a_final_checkpoint() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    env.enable_checkpointing(Duration::from_secs(3600));
    let storage = tempfile::tempdir().unwrap();
    env.set_checkpoint_storage(storage.path());
    let out = env
        .from_iter(0u64..10_000)
        .map(|k| k % 10)
        .key_by(|k: &u64| *k)
        .process(KeyedCounter::new())
        .collect();
    let result = env.execute("final").await.unwrap();
    assert_eq!(result.completed_checkpoints, 1, "only the final checkpoint");
    let got: BTreeMap<u64, u64> = out.take().into_iter().collect();
    assert_eq!(got, expected(10_000, 10));
}

/// `JobResult::metrics` sums every attempt, so the records the source emitted (and the operator
/// received) in the attempt that failed are counted, while `attempt_metrics` shows only the
/// last attempt. No checkpoint can complete before the failure (the periodic interval is an
/// hour, and a final checkpoint's barrier comes after record M), so the restart replays the
/// whole input and the last attempt's counts are exactly n.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_metrics_include_the_records_of_the_failed_attempt() {
    let (n, m) = (5_000u64, 1_000u64);
    let storage = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(1).set_batch_size(100);
    env.enable_checkpointing(Duration::from_secs(3600));
    env.set_checkpoint_storage(storage.path());
    env.set_restart_strategy(RestartStrategy::fixed_delay(1, Duration::ZERO).unwrap());
    let fail = sluice_runtime::testing::FailureInjector::at_record(0, m);
    env.from_generator(Generator::new(|i| i).take(n))
        .transform("Injector", fail.clone())
        .discard();
    let result = env.execute("metrics across attempts").await.unwrap();
    assert_eq!(fail.injected(), 1);
    assert_eq!(result.restarts, 1);

    let (all, last) = (&result.metrics, &result.attempt_metrics);
    let source = "Source: Generator";
    assert_eq!(last.operator(source).records_out, n, "{last:?}");
    assert_eq!(last.operator("Injector").records_in, n, "{last:?}");
    // The failed attempt's records: at least the M the injector saw before it failed.
    assert!(
        all.operator(source).records_out >= n + m,
        "the source's records over both attempts: {all:?}"
    );
    assert!(
        all.operator("Injector").records_in >= n + m,
        "the injector's records over both attempts: {all:?}"
    );
    assert_eq!(all.operator(source).subtasks, 1, "one subtask, summed");
}
