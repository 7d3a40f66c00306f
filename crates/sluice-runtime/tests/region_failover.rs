//! Region failover (Flink's default failover strategy): a failed task restarts with its
//! pipelined region only, from the latest completed checkpoint, while the rest of the job keeps
//! running; outputs stay exact either way.

use sluice_core::CheckpointId;
use sluice_runtime::api::TwoPhaseCommitSink;
use sluice_runtime::failover::{FailoverStrategy, RestartStrategy};
use sluice_runtime::prelude::*;
use sluice_runtime::testing::{FailureInjector, KeyedCounter, PassThrough};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn expected(n: u64, keys: u64) -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    for i in 0..n {
        *m.entry(i % keys).or_insert(0) += 1;
    }
    m
}

/// The (subtask, attempt) pairs that processed records.
type Seen = Arc<Mutex<BTreeSet<(usize, u32)>>>;

/// Records which attempts of which subtasks processed records.
fn attempts_seen() -> (PassThrough, Seen) {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let s = seen.clone();
    let op = PassThrough::new().on_batch(move |ctx: &OperatorContext, _n: usize| {
        s.lock()
            .unwrap()
            .insert((ctx.subtask_index(), ctx.attempt_number()));
    });
    (op, seen)
}

fn env_with_checkpoints(failover: FailoverStrategy) -> (StreamEnvironment, tempfile::TempDir) {
    let env = StreamEnvironment::new();
    env.set_parallelism(1).set_batch_size(64);
    env.enable_checkpointing(Duration::from_millis(5));
    let storage = tempfile::tempdir().unwrap();
    env.set_checkpoint_storage(storage.path());
    env.set_restart_strategy(RestartStrategy::fixed_delay(3, Duration::ZERO).unwrap());
    env.set_failover_strategy(failover);
    (env, storage)
}

/// Two independent pipelines; one fails. With region failover the other never restarts; with
/// full failover both do. Both outputs are exact either way.
async fn two_pipelines(failover: FailoverStrategy) -> (BTreeSet<u32>, BTreeSet<u32>) {
    let n = 40_000u64;
    let (env, _storage) = env_with_checkpoints(failover);
    let (watch_a, seen_a) = attempts_seen();
    let (watch_b, seen_b) = attempts_seen();
    let out_a = env
        .from_generator(Generator::new(|i| i % 13).take(n).rate_limit(400_000.0))
        .process(FailureInjector::at_record(0, n / 2))
        .process(watch_a)
        .key_by(|k: &u64| *k)
        .process(KeyedCounter::new())
        .collect();
    let out_b = env
        .from_generator(Generator::new(|i| i % 7).take(n).rate_limit(400_000.0))
        .process(watch_b)
        .key_by(|k: &u64| *k)
        .process(KeyedCounter::new())
        .collect();
    let result = env.execute("two pipelines").await.unwrap();
    assert_eq!(result.restarts, 1, "{failover}");
    // Last count per key wins: replayed records re-emit lower counts before the final ones.
    let got_a: BTreeMap<u64, u64> = out_a.take().into_iter().collect();
    let got_b: BTreeMap<u64, u64> = out_b.take().into_iter().collect();
    assert_eq!(got_a, expected(n, 13), "{failover}");
    assert_eq!(got_b, expected(n, 7), "{failover}");
    let attempts = |s: &Seen| {
        s.lock()
            .unwrap()
            .iter()
            .map(|(_, a)| *a)
            .collect::<BTreeSet<u32>>()
    };
    (attempts(&seen_a), attempts(&seen_b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_restarts_only_its_region_and_the_other_pipeline_never_restarts() {
    let (a, b) = two_pipelines(FailoverStrategy::Region).await;
    assert_eq!(a.len(), 2, "the failed pipeline ran as two attempts: {a:?}");
    assert_eq!(
        b,
        BTreeSet::from([0]),
        "the other pipeline kept its first attempt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_failover_restarts_both_pipelines() {
    let (a, b) = two_pipelines(FailoverStrategy::Full).await;
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(b.len(), 2, "the other pipeline restarted too: {b:?}");
}

/// Keeps committed records in memory, checking that no transaction commits twice.
#[derive(Clone, Default)]
struct Memory {
    committed: Arc<Mutex<Vec<u64>>>,
    ids: Arc<Mutex<BTreeSet<(usize, u64)>>>,
    subtask: usize,
    next: u64,
}

impl TwoPhaseCommitSink<u64> for Memory {
    type Transaction = (usize, u64, Vec<u64>);
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.subtask = ctx.subtask_index();
        // Transaction ids unique per attempt: a restarted subtask starts far above.
        self.next = u64::from(ctx.attempt_number()) << 32;
        Ok(())
    }
    fn begin_transaction(&mut self) -> Result<Self::Transaction, UserError> {
        self.next += 1;
        Ok((self.subtask, self.next, Vec::new()))
    }
    fn write(&mut self, txn: &mut Self::Transaction, batch: Vec<u64>) -> Result<(), UserError> {
        txn.2.extend(batch);
        Ok(())
    }
    fn pre_commit(&mut self, _txn: &mut Self::Transaction) -> Result<(), UserError> {
        Ok(())
    }
    fn commit(
        &mut self,
        txn: Self::Transaction,
        _checkpoint: Option<CheckpointId>,
    ) -> Result<(), UserError> {
        if self.ids.lock().unwrap().insert((txn.0, txn.1)) {
            self.committed.lock().unwrap().extend(txn.2);
        }
        Ok(())
    }
    fn abort(&mut self, _txn: Self::Transaction) -> Result<(), UserError> {
        Ok(())
    }
}

/// A forward pipeline at parallelism 2 is two regions: subtask 1 fails twice and restarts
/// alone, and the exactly-once sink commits every record once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_when_one_of_two_forward_subtasks_fails() {
    let n = 60_000u64;
    let (env, _storage) = env_with_checkpoints(FailoverStrategy::Region);
    env.set_parallelism(2);
    let sink = Memory::default();
    let (watch, seen) = attempts_seen();
    env.from_generator(Generator::new(|i| i).take(n).rate_limit(600_000.0))
        .process(FailureInjector::at_record(1, n / 6).times(2))
        .process(watch)
        .sink_to_exactly_once(sink.clone());
    let result = env.execute("forward regions").await.unwrap();
    assert_eq!(result.restarts, 2);
    let mut got = sink.committed.lock().unwrap().clone();
    got.sort_unstable();
    assert_eq!(
        got,
        (0..n).collect::<Vec<_>>(),
        "every record committed once"
    );
    let seen = seen.lock().unwrap();
    let subtask0: BTreeSet<u32> = seen
        .iter()
        .filter(|(s, _)| *s == 0)
        .map(|(_, a)| *a)
        .collect();
    let subtask1: BTreeSet<u32> = seen
        .iter()
        .filter(|(s, _)| *s == 1)
        .map(|(_, a)| *a)
        .collect();
    assert_eq!(subtask0, BTreeSet::from([0]), "subtask 0 never restarted");
    assert_eq!(
        subtask1.len(),
        3,
        "subtask 1 ran three attempts: {subtask1:?}"
    );
}
