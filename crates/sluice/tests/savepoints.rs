//! Checkpoints on request and stop-with-savepoint through the job handle: a triggered
//! checkpoint reports its id and completes with it; without checkpointing a request is refused;
//! a job stopped with a savepoint and restored from it commits every record exactly once over
//! both runs, with its keyed state carried across.

use sluice::job::CheckpointError;
use sluice::prelude::*;
use sluice::testing::CountingPassThrough;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

const KEYS: u64 = 7;

/// What the first run's sources emitted: how many records, the highest index, and a signal
/// once `enough` records were seen.
#[derive(Clone)]
struct Seen {
    count: Arc<AtomicU64>,
    max: Arc<AtomicU64>,
    enough: u64,
    reached: Arc<Notify>,
}

/// The same job graph for both runs (restoring needs the same graph): `source` → record what
/// was seen → key by `index % KEYS` → count → exactly-once JSON lines in `out`.
fn build<F>(env: &StreamEnvironment, source: Generator<F>, seen: Seen, out: &std::path::Path)
where
    F: Fn(u64) -> (u64, u64) + Clone + Send + Sync + 'static,
{
    env.from_generator(source)
        .map(move |r: (u64, u64)| {
            seen.max.fetch_max(r.1, Ordering::SeqCst);
            if seen.count.fetch_add(1, Ordering::SeqCst) + 1 == seen.enough {
                seen.reached.notify_one();
            }
            r
        })
        .key_by(|r: &(u64, u64)| r.0)
        .process(CountingPassThrough::new())
        .sink_to_exactly_once(JsonLinesSink::new(out, "counted"));
}

fn record(i: u64) -> (u64, u64) {
    (i % KEYS, i)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_with_savepoint_and_restore_commit_every_record_exactly_once() {
    let p = 2;
    let checkpoints = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let seen = Seen {
        count: Arc::new(AtomicU64::new(0)),
        max: Arc::new(AtomicU64::new(0)),
        enough: 2_000,
        reached: Arc::new(Notify::new()),
    };

    // Run 1: endless, until it is stopped with a savepoint.
    let env = StreamEnvironment::new();
    env.set_parallelism(p).set_batch_size(32);
    env.enable_checkpointing(Duration::from_millis(20));
    env.set_checkpoint_storage(checkpoints.path());
    build(
        &env,
        Generator::new(record).rate_limit(50_000.0),
        seen.clone(),
        out.path(),
    );
    let job = env.submit("savepoint: first run").unwrap();
    seen.reached.notified().await;
    let pending = job.trigger_checkpoint().await.unwrap();
    let id = pending.id();
    assert_eq!(pending.completed().await, Ok(id));
    let savepoint = job.stop_with_savepoint().await.unwrap();
    assert!(
        savepoint > id,
        "the savepoint {savepoint} follows checkpoint {id}"
    );
    let first = job.await.unwrap();
    assert_eq!(first.stopped_with_savepoint, Some(savepoint));
    assert_eq!(first.last_checkpoint, Some(savepoint));
    assert!(first.last_checkpoint >= Some(id));

    // Every subtask's position in the savepoint is at most the highest index seen plus the
    // stride, so the second run's bound lies beyond every restored position.
    let n = seen.max.load(Ordering::SeqCst) + p as u64 + 1 + 3_000;

    // Run 2: the bounded remainder, restored from the savepoint.
    let env = StreamEnvironment::new();
    env.set_parallelism(p).set_batch_size(32);
    env.enable_checkpointing(Duration::from_millis(20));
    env.set_checkpoint_storage(checkpoints.path());
    env.restore_from(checkpoints.path());
    build(
        &env,
        Generator::new(record).take(n),
        seen.clone(),
        out.path(),
    );
    let second = env.execute("savepoint: second run").await.unwrap();
    assert_eq!(second.restored_from, Some(savepoint));
    assert_eq!(second.stopped_with_savepoint, None);

    let committed: Vec<(u64, u64)> = read_committed(out.path()).unwrap();
    let mut records = Vec::new();
    let mut finals = BTreeMap::new();
    for (k, v) in committed {
        if v > u64::MAX / 2 {
            assert!(
                finals.insert(k, u64::MAX - v).is_none(),
                "key {k}: two final counts"
            );
        } else {
            assert_eq!(v % KEYS, k);
            records.push(v);
        }
    }
    records.sort_unstable();
    let dupes = records.windows(2).filter(|w| w[0] == w[1]).count();
    assert_eq!(dupes, 0, "{dupes} records committed twice");
    assert_eq!(records.len() as u64, n, "records lost");
    assert_eq!(records, (0..n).collect::<Vec<_>>());
    let mut expected = BTreeMap::new();
    for i in 0..n {
        *expected.entry(i % KEYS).or_insert(0u64) += 1;
    }
    assert_eq!(
        finals, expected,
        "keyed counts carried across the savepoint"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_checkpointing_checkpoint_requests_are_refused() {
    let env = StreamEnvironment::new();
    env.from_generator(Generator::new(|i| i).rate_limit(10_000.0))
        .discard();
    let job = env.submit("no checkpoints").unwrap();
    assert_eq!(
        job.trigger_checkpoint().await.unwrap_err(),
        CheckpointError::NotEnabled
    );
    assert_eq!(
        job.stop_with_savepoint().await.unwrap_err(),
        CheckpointError::NotEnabled
    );
    // The refusals left the job running.
    assert!(!job.is_finished());
    job.cancel();
    assert!(matches!(job.await, Err(JobError::Cancelled)));
}
