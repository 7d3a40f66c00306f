//! `FileSource` end to end: exactly-once under random failures while reading 100 files, a job
//! stopped with a savepoint at parallelism 2 resumed at 3 and at 1, a file added to a running
//! continuous job read once, a directory vanishing under a continuous job failing it, malformed
//! lines (fail naming file and line, or skip and count), CSV, and a missing directory refused at
//! submit time.
//!
//! `SLUICE_FILE_SOURCE_TRIALS=N` runs N exactly-once trials instead of the default 6.

mod common;

use common::{Rec, Seen, write_files};
use serde::Deserialize;
use sluice_connectors::file::{JsonLinesSink, read_committed};
use sluice_runtime::failover::{FailoverStrategy, RestartStrategy};
use sluice_runtime::prelude::*;
use sluice_runtime::testing::{CountingPassThrough, FailureInjector, InputGate, SplitMix64};
use sluice_source::{FileSource, FromSource, MalformedLines};
use std::collections::BTreeMap;
use std::time::Duration;

/// Checks committed `(id % keys, id)` records and final counts: every id below `n` exactly once.
fn check_exactly_once(dir: &std::path::Path, n: u64, keys: u64, context: &str) {
    let committed: Vec<(u64, u64)> = read_committed(dir).unwrap();
    let mut ids = Vec::new();
    let mut finals = BTreeMap::new();
    for (k, v) in committed {
        if v > u64::MAX / 2 {
            assert!(
                finals.insert(k, u64::MAX - v).is_none(),
                "{context}: key {k} final twice"
            );
        } else {
            assert_eq!(v % keys, k, "{context}");
            ids.push(v);
        }
    }
    ids.sort_unstable();
    let dupes = ids.windows(2).filter(|w| w[0] == w[1]).count();
    assert_eq!(dupes, 0, "{context}: {dupes} records committed twice");
    assert_eq!(ids, (0..n).collect::<Vec<_>>(), "{context}: records lost");
    let mut expected = BTreeMap::new();
    for i in 0..n {
        *expected.entry(i % keys).or_insert(0u64) += 1;
    }
    assert_eq!(finals, expected, "{context}: keyed state not exactly once");
}

/// Runs one trial; returns how many restarts it took.
async fn exactly_once_trial(seed: u64) -> u32 {
    let mut rng = SplitMix64(seed);
    let source_p = rng.range(1, 3) as usize;
    let lines = rng.range(10, 60);
    let keys = rng.range(1, 20);
    let batch = rng.range(4, 32) as usize;
    let interval = Duration::from_millis(rng.range(1, 5));
    let failures = rng.range(1, 3) as u32;
    let input = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let n = write_files(input.path(), 100, lines, 0);

    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(batch);
    env.enable_checkpointing(interval);
    env.set_checkpoint_storage(checkpoints.path());
    env.set_restart_strategy(RestartStrategy::fixed_delay(20, Duration::ZERO).unwrap());
    let fail = FailureInjector::seeded(0.03, seed).times(failures);
    env.from_source(FileSource::<Rec>::json_lines(input.path()), None, "files")
        .parallelism(source_p)
        .map(move |r: Rec| (r.id % keys, r.id))
        .parallelism(source_p)
        .process(fail.clone())
        .key_by(|r: &(u64, u64)| r.0)
        .process(CountingPassThrough::new())
        .sink_to_exactly_once(JsonLinesSink::new(out.path(), "out"));
    let context = format!(
        "seed {seed}: source parallelism {source_p}, 100 files of {lines} lines, {keys} keys, \
         batches of {batch}, checkpoints every {interval:?}, up to {failures} failures"
    );
    let result = env
        .execute("file source exactly once")
        .await
        .unwrap_or_else(|e| panic!("{context}: job failed: {e}"));
    check_exactly_once(
        out.path(),
        n,
        keys,
        &format!("{context}, {} restarts", result.restarts),
    );
    result.restarts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_100_files_is_exactly_once_under_random_failures() {
    let trials: u64 = std::env::var("SLUICE_FILE_SOURCE_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let mut restarts = 0;
    for seed in 0..trials {
        restarts += exactly_once_trial(seed).await;
    }
    assert!(restarts > 0, "no trial failed: the suite tested nothing");
}

const KEYS: u64 = 5;

/// The same graph for both runs (restoring needs it): files → map → gate → key by → count →
/// sink.
fn rescale_job(
    env: &StreamEnvironment,
    input: &std::path::Path,
    out: &std::path::Path,
    p: usize,
    gate: InputGate<(u64, u64)>,
) {
    env.set_parallelism(2).set_batch_size(16);
    env.from_source(FileSource::<Rec>::json_lines(input), None, "files")
        .parallelism(p)
        .map(|r: Rec| (r.id % KEYS, r.id))
        .parallelism(p)
        .transform("Gate", gate)
        .parallelism(p)
        .key_by(|r: &(u64, u64)| r.0)
        .process(CountingPassThrough::new())
        .sink_to_exactly_once(JsonLinesSink::new(out, "out"));
}

async fn stop_at_2_and_resume_at(p: usize) {
    let input = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let n = write_files(input.path(), 40, 100, 0);

    // Run 1 at parallelism 2: each subtask stops taking records a few files in, mid-file.
    let env = StreamEnvironment::new();
    env.enable_checkpointing(Duration::from_millis(10));
    env.set_checkpoint_storage(checkpoints.path());
    let gate = InputGate::new(250, 2);
    let closed = gate.all_closed();
    rescale_job(&env, input.path(), out.path(), 2, gate);
    let job = env.submit("rescale: first run at 2").unwrap();
    closed.notified().await;
    let savepoint = job.stop_with_savepoint().await.unwrap();
    let first = job.await.unwrap();
    assert_eq!(first.stopped_with_savepoint, Some(savepoint));
    // The savepoint holds half-read files and files not handed out yet.
    let committed = read_committed::<(u64, u64)>(out.path()).unwrap().len() as u64;
    assert!(
        committed >= 500 && committed < n,
        "run 1 committed {committed} of {n}"
    );

    // Run 2 at parallelism `p`, to the end.
    let env = StreamEnvironment::new();
    env.enable_checkpointing(Duration::from_millis(10));
    env.set_checkpoint_storage(checkpoints.path());
    env.restore_from(checkpoints.path());
    rescale_job(
        &env,
        input.path(),
        out.path(),
        p,
        InputGate::new(u64::MAX, p),
    );
    let second = env.execute("rescale: second run").await.unwrap();
    assert_eq!(second.restored_from, Some(savepoint));
    check_exactly_once(
        out.path(),
        n,
        KEYS,
        &format!("stopped at 2, resumed at {p}"),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_stopped_at_parallelism_2_resumes_at_3_exactly() {
    stop_at_2_and_resume_at(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_stopped_at_parallelism_2_resumes_at_1_exactly() {
    stop_at_2_and_resume_at(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_added_to_a_running_continuous_job_is_read_once() {
    let input = tempfile::tempdir().unwrap();
    let first = write_files(input.path(), 2, 50, 0);
    let env = StreamEnvironment::new();
    let seen = Seen::default();
    let s = seen.clone();
    env.from_source(
        FileSource::<Rec>::json_lines(input.path()).continuous(Duration::from_millis(5)),
        None,
        "watched",
    )
    .map(move |r: Rec| {
        s.push(r.id);
        r.id
    })
    .discard();
    let job = env.submit("continuous").unwrap();
    seen.wait_for(first as usize).await;
    // A file added while the job runs is read once; a later one proves discovery went on (the
    // enumerator hands files out in name order, so a second read of the first would come
    // before the second's records).
    let added = write_files(input.path(), 1, 30, first);
    seen.wait_for((first + added) as usize).await;
    let later = write_files(input.path(), 1, 20, first + added);
    let total = first + added + later;
    seen.wait_for(total as usize).await;
    job.cancel();
    let _ = job.await;
    let mut ids = seen.ids();
    ids.sort_unstable();
    assert_eq!(ids, (0..total).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_that_disappears_under_a_continuous_job_fails_it_with_the_cause() {
    let root = tempfile::tempdir().unwrap();
    let input = root.path().join("inbox");
    std::fs::create_dir(&input).unwrap();
    let n = write_files(&input, 1, 10, 0);
    let env = StreamEnvironment::new();
    let seen = Seen::default();
    let s = seen.clone();
    env.from_source(
        FileSource::<Rec>::json_lines(&input).continuous(Duration::from_millis(5)),
        None,
        "inbox",
    )
    .map(move |r: Rec| s.push(r.id))
    .discard();
    let job = env.submit("vanishing directory").unwrap();
    seen.wait_for(n as usize).await;
    // The next periodic listing (an asynchronous call of the enumerator) fails: the job fails
    // with its cause instead of waiting for files forever.
    std::fs::remove_dir_all(&input).unwrap();
    let err = job.await.unwrap_err().to_string();
    assert!(
        err.contains("cannot list directory") && err.contains("inbox"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_line_fails_the_job_naming_file_and_line() {
    let input = tempfile::tempdir().unwrap();
    std::fs::write(input.path().join("good.json"), "{\"id\":1}\n").unwrap();
    std::fs::write(
        input.path().join("bad.json"),
        "{\"id\":1}\n{\"id\":2}\n{\"id\":\n",
    )
    .unwrap();
    let env = StreamEnvironment::new();
    env.from_source(FileSource::<Rec>::json_lines(input.path()), None, "files")
        .discard();
    let err = env.execute("malformed").await.unwrap_err().to_string();
    assert!(err.contains("malformed line 3 in file"), "{err}");
    assert!(err.contains("bad.json"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_lines_can_be_skipped_and_counted() {
    let input = tempfile::tempdir().unwrap();
    std::fs::write(
        input.path().join("mixed.json"),
        "{\"id\":1}\nnot json\n\n{\"id\":2}\n{\"id\":true}\n",
    )
    .unwrap();
    let env = StreamEnvironment::new();
    let source = FileSource::<Rec>::json_lines(input.path()).on_malformed(MalformedLines::Skip);
    let metrics = source.metrics();
    let out = env.from_source(source, None, "files").collect();
    env.execute("skip").await.unwrap();
    let ids: Vec<u64> = out.take().iter().map(|r| r.id).collect();
    assert_eq!(ids, vec![1, 2]);
    assert_eq!(metrics.skipped_lines(), 2);
}

#[derive(Clone, Debug, Deserialize, serde::Serialize, PartialEq)]
struct Person {
    name: String,
    age: u32,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_files_with_a_header_are_decoded_with_serde() {
    let input = tempfile::tempdir().unwrap();
    std::fs::write(
        input.path().join("people.csv"),
        "name,age\nada,36\nalan,41\n",
    )
    .unwrap();
    let env = StreamEnvironment::new();
    let out = env
        .from_source(FileSource::<Person>::csv(input.path()), None, "people")
        .collect();
    env.execute("csv").await.unwrap();
    assert_eq!(
        out.take(),
        vec![
            Person {
                name: "ada".into(),
                age: 36
            },
            Person {
                name: "alan".into(),
                age: 41
            }
        ]
    );
}

#[tokio::test]
async fn a_missing_directory_is_refused_at_submit_time() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nowhere");
    let env = StreamEnvironment::new();
    env.from_source(FileSource::<Rec>::json_lines(&missing), None, "inbox")
        .discard();
    let err = env.submit("missing").map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("source 'inbox'"), "{err}");
    assert!(
        err.contains("nowhere") && err.contains("does not exist"),
        "{err}"
    );
}

#[tokio::test]
async fn a_regular_file_is_refused_at_submit_time_as_not_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    std::fs::write(&file, "{}\n").unwrap();
    let env = StreamEnvironment::new();
    env.from_source(FileSource::<Rec>::json_lines(&file), None, "inbox")
        .discard();
    let err = env.submit("file").map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("source 'inbox'"), "{err}");
    assert!(
        err.contains(&format!("{} is not a directory", file.display())),
        "{err}"
    );
    assert!(!err.contains("does not exist"), "{err}");
}

/// A source whose subtasks feed forward into the sink is one pipelined region per subtask: a
/// failing reader restarts alone, the coordinator takes back the splits assigned to it since the
/// restored checkpoint (`subtask_reset`) and serves them again, and every record is committed
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_reader_restarts_alone_and_its_splits_are_served_again_exactly_once() {
    let mut restarts = 0;
    for seed in 0..4u64 {
        let input = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let checkpoints = tempfile::tempdir().unwrap();
        let n = write_files(input.path(), 60, 40, 0);
        let env = StreamEnvironment::new();
        env.set_parallelism(2).set_batch_size(8);
        env.enable_checkpointing(Duration::from_millis(2));
        env.set_checkpoint_storage(checkpoints.path());
        env.set_restart_strategy(RestartStrategy::fixed_delay(20, Duration::ZERO).unwrap());
        env.set_failover_strategy(FailoverStrategy::Region);
        env.from_source(FileSource::<Rec>::json_lines(input.path()), None, "files")
            .map(|r: Rec| (r.id % 7, r.id))
            .process(FailureInjector::seeded(0.05, seed).times(2))
            .sink_to_exactly_once(JsonLinesSink::new(out.path(), "out"));
        let result = env.execute("regions of a file source").await.unwrap();
        restarts += result.restarts;
        let mut ids: Vec<u64> = read_committed::<(u64, u64)>(out.path())
            .unwrap()
            .into_iter()
            .map(|(_, id)| id)
            .collect();
        ids.sort_unstable();
        assert_eq!(
            ids,
            (0..n).collect::<Vec<_>>(),
            "seed {seed}, {} restarts: every record committed once",
            result.restarts
        );
    }
    assert!(restarts > 0, "no trial failed: the test tested nothing");
}
