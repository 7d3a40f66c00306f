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
