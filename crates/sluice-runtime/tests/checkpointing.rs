//! Checkpoints end to end: barrier alignment, restart exhaustion, resuming a dropped job from a
//! retained checkpoint, rescaling keyed state, and checkpoint configuration errors.

use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::prelude::*;
use sluice_runtime::testing::{FailureInjector, KeyedCounter, PassThrough};
use sluice_runtime::{JobHandle, StreamEnvironment};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

type Log = Arc<Mutex<BTreeMap<u64, (u64, u64)>>>;

/// Counts records per tag (0 or 1) and logs the counts at every snapshot.
#[derive(Clone)]
struct CountAtSnapshot {
    counts: (u64, u64),
    log: Log,
}

impl Operator<(u8, u64)> for CountAtSnapshot {
    type Out = (u8, u64);
    fn process_batch(
        &mut self,
        batch: Vec<(u8, u64)>,
        out: &mut Collector<(u8, u64)>,
    ) -> Result<(), UserError> {
        for r in &batch {
            if r.0 == 0 {
                self.counts.0 += 1;
            } else {
                self.counts.1 += 1;
            }
        }
        out.emit_batch(batch);
        Ok(())
    }
    fn snapshot_state(
        &mut self,
        c: sluice_core::CheckpointId,
        _o: &mut Collector<(u8, u64)>,
    ) -> Result<OperatorState, UserError> {
        self.log.lock().unwrap().insert(c.0, self.counts);
        Ok(OperatorState::default())
    }
}

fn counter(log: &Log) -> CountAtSnapshot {
    CountAtSnapshot {
        counts: (0, 0),
        log: log.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_after_alignment_holds_exactly_the_records_before_the_barrier_on_both_inputs() {
    let env = StreamEnvironment::new();
    env.set_parallelism(1)
        .set_batch_size(16)
        .set_channel_capacity(64);
    env.enable_checkpointing(Duration::from_millis(5));
    let dir = tempfile::tempdir().unwrap();
    env.set_checkpoint_storage(dir.path());
    let (fast_log, slow_log, union_log): (Log, Log, Log) = Default::default();
    let fast = env
        .from_generator(
            Generator::new(|i| (0u8, i))
                .take(40_000)
                .rate_limit(400_000.0),
        )
        .process(counter(&fast_log));
    let slow = env
        .from_generator(
            Generator::new(|i| (1u8, i))
                .take(1_000)
                .rate_limit(10_000.0),
        )
        .process(counter(&slow_log));
    fast.union([slow]).process(counter(&union_log)).discard();
    let result = env.execute("alignment").await.unwrap();
    assert!(result.completed_checkpoints >= 3, "{result:?}");

    let (fast_log, slow_log, union_log) = (
        fast_log.lock().unwrap().clone(),
        slow_log.lock().unwrap().clone(),
        union_log.lock().unwrap().clone(),
    );
    let mut compared = 0;
    let mut fast_ran_ahead = 0;
    for (id, (ua, ub)) in &union_log {
        let (Some(fa), Some(sb)) = (fast_log.get(id), slow_log.get(id)) else {
            continue;
        };
        assert_eq!(
            (*ua, *ub),
            (fa.0, sb.1),
            "checkpoint {id}: the union's snapshot must hold exactly the records before the barrier on both inputs"
        );
        compared += 1;
        if fa.0 < 40_000 && sb.1 < 1_000 {
            fast_ran_ahead += 1;
        }
    }
    assert!(compared >= 3, "only {compared} checkpoints compared");
    assert!(
        fast_ran_ahead >= 1,
        "no checkpoint was taken while both inputs were still running"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_restart_strategy_reports_the_attempts_and_the_cause() {
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    env.set_restart_strategy(RestartStrategy::fixed_delay(2, Duration::ZERO).unwrap());
    env.from_iter(0u64..1_000)
        .process(FailureInjector::at_record(0, 10).times(100))
        .discard();
    let err = env.execute("exhaust").await.unwrap_err();
    match &err {
        JobError::RestartsExhausted { attempts, last } => {
            assert_eq!(*attempts, 2);
            assert!(last.to_string().contains("injected failure"), "{last}");
        }
        other => panic!("expected RestartsExhausted, got {other:?}"),
    }
    assert!(
        err.to_string().contains("gave up after 2 restarts"),
        "{err}"
    );
    assert_eq!(err.task_failure().map(|f| f.subtask), Some(0));
}

const N: u64 = 60_000;
const KEYS: u64 = 101;

/// The same job graph every time: a 2-subtask source, keyed counts at the default parallelism.
fn build(env: &StreamEnvironment, rate: f64) -> (CollectHandle<(u64, u64)>, Signals) {
    build_with_source(env, rate, 2)
}

fn build_with_source(
    env: &StreamEnvironment,
    rate: f64,
    source_parallelism: usize,
) -> (CollectHandle<(u64, u64)>, Signals) {
    let (tx, rx) = watch::channel(0);
    let (processed_tx, processed_rx) = watch::channel(0);
    let out = env
        .from_generator(Generator::new(|i| i % KEYS).take(N).rate_limit(rate))
        .parallelism(source_parallelism)
        .key_by(|k: &u64| *k)
        .transform(
            "Signals",
            // Reports how many records went by and which checkpoints completed.
            PassThrough::new()
                .on_batch(move |_, n| processed_tx.send_modify(|p| *p += n as u64))
                .on_checkpoint_complete(move |_, c| {
                    tx.send_replace(c.0);
                }),
        )
        .process(KeyedCounter::new())
        .collect();
    (
        out,
        Signals {
            completed: rx,
            processed: processed_rx,
        },
    )
}

/// What the job reports while it runs.
struct Signals {
    completed: watch::Receiver<u64>,
    processed: watch::Receiver<u64>,
}

fn expected() -> BTreeMap<u64, u64> {
    let mut m = BTreeMap::new();
    for i in 0..N {
        *m.entry(i % KEYS).or_insert(0) += 1;
    }
    m
}

/// Runs the job at parallelism 2 until a checkpoint completed, then cancels it and drops its
/// environment. Returns the checkpoint directory.
async fn checkpoint_then_stop(storage: &std::path::Path) {
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    env.enable_checkpointing(Duration::from_secs(3600));
    env.set_checkpoint_storage(storage);
    // Slow enough that the checkpoint and the cancel come long before the input ends, even on
    // a loaded machine.
    let (out, mut signals) = build(&env, 30_000.0);
    let job: JobHandle = env.submit("resumable").unwrap();
    // Checkpoint once a quarter of the records went through, so that it holds real progress.
    if signals.processed.wait_for(|n| *n >= N / 4).await.is_err() {
        panic!("the job ended early: {:?}", job.await);
    }
    let pending = job.trigger_checkpoint().await.unwrap();
    pending.completed().await.unwrap();
    signals.completed.wait_for(|id| *id >= 1).await.unwrap();
    job.cancel();
    assert!(matches!(job.await, Err(JobError::Cancelled)));
    assert!(out.is_empty(), "the stopped job emitted no final counts");
    drop(env);
}

async fn resume(storage: &std::path::Path, parallelism: usize) -> BTreeMap<u64, u64> {
    let env = StreamEnvironment::new();
    env.set_parallelism(parallelism);
    env.restore_from(storage);
    let (out, _signals) = build(&env, 1e9);
    let result = env.execute("resumable").await.unwrap();
    assert_eq!(result.restarts, 0);
    assert!(
        result.restored_from.is_some(),
        "the job must start from the checkpoint"
    );
    // The restored sources skip what the checkpoint already holds.
    let read = result.metrics.operator("Process").records_in;
    assert!(
        read > 0 && read < N,
        "the resumed job read {read} of {N} records"
    );
    out.take().into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_resumed_from_a_retained_checkpoint_continues_exactly_where_it_stopped() {
    let storage = tempfile::tempdir().unwrap();
    checkpoint_then_stop(storage.path()).await;
    assert_eq!(resume(storage.path(), 2).await, expected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_state_checkpointed_at_parallelism_2_restores_at_3_and_at_1() {
    let storage = tempfile::tempdir().unwrap();
    checkpoint_then_stop(storage.path()).await;
    assert_eq!(resume(storage.path(), 3).await, expected());
    assert_eq!(resume(storage.path(), 1).await, expected());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restoring_into_a_different_job_graph_is_a_clear_error() {
    let storage = tempfile::tempdir().unwrap();
    checkpoint_then_stop(storage.path()).await;
    let env = StreamEnvironment::new();
    env.restore_from(storage.path());
    env.from_iter(0u64..10).map(|x| x + 1).discard();
    let err = env.execute("other").await.unwrap_err();
    assert!(err.to_string().contains("cannot restore"), "{err}");
}

/// Submits a 10-record job checkpointing with `configure`, inside a runtime, and returns the
/// error `submit` must refuse it with.
fn refused_at_submit(configure: impl FnOnce(&StreamEnvironment)) -> JobError {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let _guard = rt.enter();
    let env = StreamEnvironment::new();
    env.enable_checkpointing(Duration::from_millis(10));
    configure(&env);
    env.from_iter(0u64..10).discard();
    env.submit("refused")
        .err()
        .expect("the configuration must be refused at submit")
}

#[test]
fn checkpoint_configuration_errors_name_the_bad_value() {
    let err = refused_at_submit(|env| {
        env.enable_checkpointing(Duration::ZERO);
    });
    assert!(err.to_string().contains("interval"), "{err}");

    let file = tempfile::NamedTempFile::new().unwrap();
    let under_file = file.path().join("checkpoints");
    let err = refused_at_submit(|env| {
        env.set_checkpoint_storage(&under_file);
    });
    assert!(
        err.to_string().contains(&under_file.display().to_string()),
        "{err}"
    );
}

#[test]
fn an_empty_checkpoint_storage_path_is_refused_at_submit() {
    let err = refused_at_submit(|env| {
        env.set_checkpoint_storage("");
    });
    assert!(
        matches!(err, JobError::InvalidJob(_)) && err.to_string().contains("\"\""),
        "{err}"
    );
}

#[test]
fn an_object_store_url_as_a_checkpoint_directory_is_refused_at_submit() {
    // Without the check, checkpoints went to a local directory named `s3:`.
    let err = refused_at_submit(|env| {
        env.set_checkpoint_storage("s3://bucket/checkpoints");
    });
    let message = err.to_string();
    assert!(
        message.contains("s3://bucket/checkpoints")
            && message.contains("set_checkpoint_storage_backend"),
        "{message}"
    );
    assert!(!std::path::Path::new("s3:").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restoring_from_a_path_that_does_not_exist_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-checkpoints");
    let env = StreamEnvironment::new();
    env.restore_from(&missing);
    env.from_iter(0u64..10).discard();
    let err = env.execute("missing").await.unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(&format!("{} does not exist", missing.display())),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restoring_a_checkpoint_directory_without_metadata_names_the_missing_file() {
    let tmp = tempfile::tempdir().unwrap();
    let chk = tmp.path().join("chk-7");
    std::fs::create_dir(&chk).unwrap();
    std::fs::write(chk.join("node-0.subtask-0.state"), b"partial").unwrap();
    let env = StreamEnvironment::new();
    env.restore_from(&chk);
    env.from_iter(0u64..10).discard();
    let err = env.execute("no metadata").await.unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains(&chk.join("_metadata").display().to_string()),
        "{message}"
    );
}

/// Issue 23: a restore from the storage directory skipped the checkpoint whose `_metadata` was
/// deleted and also removed it, so restoring that `chk-N` by itself then said "does not exist".
/// A restore only reads: the checkpoint stays, and restoring it names the missing file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_whose_metadata_was_deleted_stays_and_restoring_it_names_the_metadata() {
    let storage = tempfile::tempdir().unwrap();
    checkpoint_then_stop(storage.path()).await;
    let chk = storage.path().join("chk-1");
    std::fs::remove_file(chk.join("_metadata")).unwrap();
    let metadata = chk.join("_metadata").display().to_string();

    let restore = |from: &std::path::Path| {
        let env = StreamEnvironment::new();
        env.restore_from(from);
        let _ = build(&env, 1e9);
        env
    };
    let err = restore(storage.path())
        .execute("from the storage")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no complete, valid checkpoint") && err.contains(&metadata),
        "{err}"
    );
    assert!(chk.is_dir(), "a restore removes nothing");
    let err = restore(&chk)
        .execute("from the checkpoint")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("{metadata} is missing")), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_job_keeps_its_graph_so_it_can_be_fixed_and_submitted_again() {
    let env = StreamEnvironment::new();
    env.set_parallelism(0);
    let out = env.from_iter(0u64..10).collect();
    let err = env.execute("bad").await.unwrap_err();
    assert!(err.to_string().contains("parallelism"), "{err}");
    env.set_parallelism(2);
    env.execute("fixed").await.unwrap();
    assert_eq!(out.len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generator_checkpointed_at_parallelism_2_resumes_at_3_exactly() {
    let storage = tempfile::tempdir().unwrap();
    checkpoint_then_stop(storage.path()).await;
    let env = StreamEnvironment::new();
    env.restore_from(storage.path());
    // The generator's splits are dealt over three subtasks (one gets none).
    let (out, _signals) = build_with_source(&env, 1e9, 3);
    let result = env.execute("resumable").await.unwrap();
    assert!(result.restored_from.is_some());
    let got: BTreeMap<u64, u64> = out.take().into_iter().collect();
    assert_eq!(got, expected());
}

/// Emits one extra record from every snapshot, including the final checkpoint's, which comes
/// after its input ended.
#[derive(Clone)]
struct EmitsWhileSnapshotting;

impl Operator<u64> for EmitsWhileSnapshotting {
    type Out = u64;
    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        out.emit_batch(batch);
        Ok(())
    }
    fn snapshot_state(
        &mut self,
        _c: sluice_core::CheckpointId,
        out: &mut Collector<u64>,
    ) -> Result<OperatorState, UserError> {
        out.collect(u64::MAX);
        Ok(OperatorState::default())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_emitted_after_end_of_input_fail_the_job_instead_of_being_lost() {
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    env.set_restart_strategy(RestartStrategy::none());
    env.enable_checkpointing(Duration::from_secs(3600));
    let dir = tempfile::tempdir().unwrap();
    env.set_checkpoint_storage(dir.path());
    let out = env
        .from_iter(0u64..10)
        .process(EmitsWhileSnapshotting)
        .name("late-emitter")
        .collect();
    let err = env.execute("emit after end").await.unwrap_err();
    let failure = err.task_failure().expect("a task failure");
    assert_eq!(failure.operator_name, "late-emitter", "{err}");
    assert!(
        failure.message.contains("after its input had ended"),
        "{err}"
    );
    drop(out);
}
