//! A job master that dies and starts again resumes from the object store's newest checkpoint,
//! and the exactly-once output over both runs holds every record once: against a local-file
//! object store always, and against a real S3-compatible server when `SLUICE_S3_ENDPOINT` names
//! one (`.ci/s3` starts moto's on 127.0.0.1; under CI the S3 test fails without it).

use sluice_connectors::file::{JsonLinesSink, read_committed};
use sluice_object_store::ObjectStoreCheckpointStorage;
use sluice_runtime::prelude::*;
use sluice_runtime::testing::{create_s3_bucket, required_env};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// The same graph for both runs: `source` → note what was seen → exactly-once JSON lines.
fn build<F>(env: &StreamEnvironment, source: Generator<F>, seen: &Seen, out: &std::path::Path)
where
    F: Fn(u64) -> u64 + Clone + Send + Sync + 'static,
{
    let seen = seen.clone();
    env.from_generator(source)
        .map(move |i: u64| {
            seen.max.fetch_max(i, Ordering::SeqCst);
            if seen.count.fetch_add(1, Ordering::SeqCst) + 1 == seen.enough {
                seen.reached.notify_one();
            }
            i
        })
        .sink_to_exactly_once(JsonLinesSink::new(out, "records"));
}

#[derive(Clone)]
struct Seen {
    count: Arc<AtomicU64>,
    max: Arc<AtomicU64>,
    enough: u64,
    reached: Arc<Notify>,
}

/// Run 1 checkpoints to `storage` and is cancelled mid-run (the job master's process dying);
/// run 2, a new environment on the same storage, resumes from the newest checkpoint and runs the
/// bounded remainder. Every record is committed exactly once.
async fn crash_and_resume(storage: Arc<ObjectStoreCheckpointStorage>) {
    let p = 2;
    let out = tempfile::tempdir().unwrap();
    let seen = Seen {
        count: Arc::new(AtomicU64::new(0)),
        max: Arc::new(AtomicU64::new(0)),
        enough: 2_000,
        reached: Arc::new(Notify::new()),
    };
    let env = StreamEnvironment::new();
    env.set_parallelism(p).set_batch_size(32);
    env.enable_checkpointing(Duration::from_millis(50));
    env.set_checkpoint_storage_backend(storage.clone());
    env.resume_from_latest_checkpoint();
    build(
        &env,
        Generator::new(|i| i).rate_limit(50_000.0),
        &seen,
        out.path(),
    );
    let job = env.submit("object store: first run").unwrap();
    seen.reached.notified().await;
    let pending = job.trigger_checkpoint().await.unwrap();
    let id = pending.id();
    assert_eq!(pending.completed().await, Ok(id));
    job.cancel();
    assert!(matches!(job.await, Err(JobError::Cancelled)));

    let n = seen.max.load(Ordering::SeqCst) + p as u64 + 1 + 3_000;
    let env = StreamEnvironment::new();
    env.set_parallelism(p).set_batch_size(32);
    env.enable_checkpointing(Duration::from_millis(50));
    env.set_checkpoint_storage_backend(storage);
    env.resume_from_latest_checkpoint();
    build(&env, Generator::new(|i| i).take(n), &seen, out.path());
    let second = env.execute("object store: second run").await.unwrap();
    let resumed = second.restored_from.expect("the second run resumes");
    assert!(resumed >= id, "resumed from {resumed}, older than {id}");

    let mut records: Vec<u64> = read_committed(out.path()).unwrap();
    records.sort_unstable();
    let dupes = records.windows(2).filter(|w| w[0] == w[1]).count();
    assert_eq!(dupes, 0, "{dupes} records committed twice");
    assert_eq!(records, (0..n).collect::<Vec<_>>(), "records lost");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_job_resumes_from_a_local_object_store_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/checkpoints", dir.path().display());
    std::fs::create_dir_all(dir.path().join("checkpoints")).unwrap();
    let retained = NonZeroUsize::new(3).unwrap();
    let storage =
        ObjectStoreCheckpointStorage::from_url(&url, Vec::<(&str, &str)>::new(), retained).unwrap();
    crash_and_resume(Arc::new(storage)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_job_resumes_from_s3_exactly_once() {
    let Some(endpoint) = required_env("SLUICE_S3_ENDPOINT", "source .ci/s3") else {
        return;
    };
    let bucket = format!("sluice-chk-{}", uuid::Uuid::new_v4().simple());
    let created = {
        let (endpoint, bucket) = (endpoint.clone(), bucket.clone());
        tokio::task::spawn_blocking(move || create_s3_bucket(&endpoint, &bucket))
    };
    created.await.unwrap().unwrap();
    let options = [
        ("aws_endpoint", endpoint.as_str()),
        ("aws_allow_http", "true"),
        ("aws_access_key_id", "test"),
        ("aws_secret_access_key", "test"),
        ("aws_region", "us-east-1"),
    ];
    let url = format!("s3://{bucket}/checkpoints/job");
    let storage =
        ObjectStoreCheckpointStorage::from_url(&url, options, NonZeroUsize::new(3).unwrap())
            .unwrap();
    crash_and_resume(Arc::new(storage)).await;
}
