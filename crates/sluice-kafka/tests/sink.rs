//! The Kafka sink against the broker `.ci/kafka` starts, read back by an independent client
//! (confluent-kafka with `read_committed`): exactly once under injected failures, including a
//! failure after a checkpoint completed and before its transactions were committed (the restore
//! commits them with `EndTxn`), across a rescale, and at least once without transactions.

mod common;

use common::{broker, create_topic, read_committed, unique};
use sluice_core::CheckpointId;
use sluice_kafka::{
    DeliveryGuarantee, KafkaRecordSerializer, KafkaSink, KafkaSinkExt, KafkaTransaction,
};
use sluice_runtime::api::{Restored, TwoPhaseCommitSink};
use sluice_runtime::checkpoint::CheckpointSettings;
use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::prelude::*;
use sluice_runtime::testing::FailureInjector;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

fn sink(
    bootstrap: &str,
    topic: &str,
    guarantee: DeliveryGuarantee,
    prefix: &str,
) -> KafkaSink<u64> {
    KafkaSink::<u64>::builder()
        .bootstrap_servers(bootstrap)
        .record_serializer(
            KafkaRecordSerializer::new(topic, |v: &u64, out: &mut Vec<u8>| {
                out.extend_from_slice(v.to_string().as_bytes());
                Ok(())
            })
            .key(|v: &u64| (v % 17).to_string()),
        )
        .delivery_guarantee(guarantee)
        .transactional_id_prefix(prefix)
        .build()
        .unwrap()
}

/// How many times each value was read.
fn counts(bootstrap: &str, topic: &str) -> BTreeMap<u64, usize> {
    let mut m = BTreeMap::new();
    for r in read_committed(bootstrap, topic) {
        *m.entry(r.value.parse::<u64>().unwrap()).or_insert(0) += 1;
    }
    m
}

fn assert_exactly_once(bootstrap: &str, topic: &str, n: u64) {
    let c = counts(bootstrap, topic);
    let twice: Vec<_> = c.iter().filter(|(_, k)| **k > 1).take(5).collect();
    assert!(twice.is_empty(), "read more than once: {twice:?}");
    let missing: Vec<u64> = (0..n).filter(|v| !c.contains_key(v)).take(5).collect();
    assert!(missing.is_empty(), "missing (first 5): {missing:?} of {n}");
    assert_eq!(c.len() as u64, n);
}

fn env(checkpoints: &std::path::Path, interval_ms: u64) -> StreamEnvironment {
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(50);
    env.enable_checkpointing(Duration::from_millis(interval_ms));
    env.set_checkpoint_storage(checkpoints);
    env.set_restart_strategy(RestartStrategy::fixed_delay(10, Duration::ZERO).unwrap());
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_under_injected_failures() {
    let Some(b) = broker() else { return };
    let topic = unique("sink-eo");
    create_topic(&b, &topic, 3).await;
    let n = 20_000u64;
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path(), 50);
    let fail = FailureInjector::seeded(0.02, 5).times(3);
    env.from_generator(Generator::new(|i| i).take(n).rate_limit(100_000.0))
        .transform("inject", fail.clone())
        .sink_to_kafka(sink(&b, &topic, DeliveryGuarantee::ExactlyOnce, &topic));
    let result = env.execute("kafka exactly once").await.unwrap();
    assert_eq!(fail.injected(), 3);
    assert!(result.restarts >= 1);
    assert_exactly_once(&b, &topic, n);
}

/// Fails the first commit of a completed checkpoint that holds records: the checkpoint is
/// complete, its transaction pre-committed and not committed, and the restore must commit it.
#[derive(Clone)]
struct FailFirstCommit {
    inner: KafkaSink<u64>,
    failed: Arc<AtomicU32>,
    resumed: Arc<AtomicUsize>,
}

impl TwoPhaseCommitSink<u64> for FailFirstCommit {
    type Transaction = KafkaTransaction;
    fn validate(&self, c: Option<&CheckpointSettings>) -> Result<(), UserError> {
        TwoPhaseCommitSink::<u64>::validate(&self.inner, c)
    }
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.inner.open(ctx)
    }
    fn begin_transaction(&mut self) -> Result<KafkaTransaction, UserError> {
        self.inner.begin_transaction()
    }
    fn write(&mut self, txn: &mut KafkaTransaction, batch: Vec<u64>) -> Result<(), UserError> {
        self.inner.write(txn, batch)
    }
    fn pre_commit(&mut self, txn: &mut KafkaTransaction) -> Result<(), UserError> {
        self.inner.pre_commit(txn)
    }
    fn commit(&mut self, txn: KafkaTransaction, at: Option<CheckpointId>) -> Result<(), UserError> {
        if at.is_some_and(|c| c.0 >= 3) && self.failed.fetch_add(1, Ordering::SeqCst) == 0 {
            // Forget the producer, as a crash would: the transaction stays pre-committed.
            return Err("injected: the process died before committing".into());
        }
        self.inner.commit(txn, at)
    }
    fn abort(&mut self, txn: KafkaTransaction) -> Result<(), UserError> {
        self.inner.abort(txn)
    }
    fn recover(&mut self, restored: Restored<KafkaTransaction>) -> Result<(), UserError> {
        self.resumed
            .fetch_add(restored.pending.len(), Ordering::SeqCst);
        self.inner.recover(restored)
    }
    fn close(&mut self) -> Result<(), UserError> {
        TwoPhaseCommitSink::<u64>::close(&mut self.inner)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_checkpoint_whose_commit_failed_is_committed_by_the_restore() {
    let Some(b) = broker() else { return };
    let topic = unique("sink-resume");
    create_topic(&b, &topic, 2).await;
    let n = 10_000u64;
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path(), 30);
    let wrapped = FailFirstCommit {
        inner: sink(&b, &topic, DeliveryGuarantee::ExactlyOnce, &topic),
        failed: Arc::default(),
        resumed: Arc::default(),
    };
    // Slow enough that several checkpoints complete while records flow.
    env.from_generator(Generator::new(|i| i).take(n).rate_limit(10_000.0))
        .sink_to_exactly_once(wrapped.clone())
        .parallelism(1);
    let result = env.execute("kafka resume").await.unwrap();
    assert!(
        result.restarts >= 1,
        "the injected commit failure restarts the job"
    );
    assert!(wrapped.failed.load(Ordering::SeqCst) >= 1);
    assert!(
        wrapped.resumed.load(Ordering::SeqCst) >= 1,
        "the restore found pre-committed transactions to commit"
    );
    assert_exactly_once(&b, &topic, n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_once_across_savepoints_and_a_rescale_from_2_to_3_to_1() {
    let Some(b) = broker() else { return };
    let topic = unique("sink-rescale");
    create_topic(&b, &topic, 3).await;
    let dir = tempfile::tempdir().unwrap();
    let total = 9_000u64;
    for (step, parallelism) in [2usize, 3, 1].into_iter().enumerate() {
        let env = env(dir.path(), 30);
        if step > 0 {
            env.restore_from(dir.path());
        }
        // Runs 1 and 2 stop with a savepoint once the source passed a third of the records more.
        let threshold = (step as u64 + 1) * total / 3;
        let (seen, reached) = (Arc::new(AtomicU64::new(0)), Arc::new(Notify::new()));
        let (s, r) = (seen.clone(), reached.clone());
        env.from_generator(
            Generator::new(move |i| {
                if s.fetch_max(i, Ordering::SeqCst) < threshold && i >= threshold {
                    r.notify_one();
                }
                i
            })
            .take(total)
            .rate_limit(6_000.0),
        )
        .sink_to_kafka(sink(&b, &topic, DeliveryGuarantee::ExactlyOnce, &topic))
        .parallelism(parallelism);
        let mut job = env.submit("kafka rescale").unwrap();
        if step < 2 {
            tokio::select! {
                () = reached.notified() => {}
                r = &mut job => panic!("run {step} ended before its savepoint: {r:?}"),
            }
            job.stop_with_savepoint().await.unwrap();
        }
        job.await.unwrap();
    }
    assert_exactly_once(&b, &topic, total);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_loses_nothing_under_failures() {
    let Some(b) = broker() else { return };
    let topic = unique("sink-alo");
    create_topic(&b, &topic, 2).await;
    let n = 10_000u64;
    let dir = tempfile::tempdir().unwrap();
    let env = env(dir.path(), 50);
    let fail = FailureInjector::at_record(0, 3_000);
    env.from_generator(Generator::new(|i| i).take(n).rate_limit(100_000.0))
        .transform("inject", fail.clone())
        .sink_to_kafka(sink(&b, &topic, DeliveryGuarantee::AtLeastOnce, &topic));
    env.execute("kafka at least once").await.unwrap();
    assert!(fail.injected() >= 1);
    let c = counts(&b, &topic);
    let missing: Vec<u64> = (0..n).filter(|v| !c.contains_key(v)).take(5).collect();
    assert!(missing.is_empty(), "lost: {missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_timeout_not_above_the_checkpoint_interval_is_refused_at_submit() {
    let env = StreamEnvironment::new();
    env.enable_checkpointing(Duration::from_secs(120));
    let s = KafkaSink::<u64>::builder()
        .bootstrap_servers("127.0.0.1:1")
        .record_serializer(KafkaRecordSerializer::json("t"))
        .delivery_guarantee(DeliveryGuarantee::ExactlyOnce)
        .transactional_id_prefix("p")
        .transaction_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    env.from_iter(0u64..3).sink_to_kafka(s);
    let e = env
        .submit("refused")
        .err()
        .expect("refused at submit")
        .to_string();
    assert!(
        e.contains("Sink: Kafka") && e.contains("60000 ms") && e.contains("120000 ms"),
        "{e}"
    );
}

#[test]
fn bad_sink_settings_are_named_when_built() {
    let e = KafkaSink::<u64>::builder()
        .bootstrap_servers("h:1")
        .record_serializer(KafkaRecordSerializer::json("t"))
        .delivery_guarantee(DeliveryGuarantee::ExactlyOnce)
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("transactional id prefix"), "{e}");
    let e = KafkaSink::<u64>::builder()
        .bootstrap_servers("h:1")
        .property("acks", "some")
        .record_serializer(KafkaRecordSerializer::json("t"))
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("acks = some"), "{e}");
    let e = KafkaSink::<u64>::builder()
        .bootstrap_servers("h:1")
        .property("transactional.id", "mine")
        .record_serializer(KafkaRecordSerializer::json("t"))
        .build()
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("transactional.id"), "{e}");
}

/// The example binary beside this test's: `target/<profile>/deps/<test>` →
/// `target/<profile>/examples/numbers_exactly_once`.
fn example_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(std::path::Path::parent).unwrap();
    let binary = dir.join("examples").join(format!(
        "numbers_exactly_once{}",
        std::env::consts::EXE_SUFFIX
    ));
    assert!(
        binary.is_file(),
        "{} is missing: `cargo test` builds the examples first; with a filter, build it with \
         `cargo build -p sluice-kafka --example numbers_exactly_once`",
        binary.display()
    );
    binary
}

#[test]
fn a_sigkilled_job_resumed_from_its_checkpoint_writes_every_record_once() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let Some(b) = broker() else { return };
    let topic = unique("sink-sigkill");
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(create_topic(&b, &topic, 3));
    let dir = tempfile::tempdir().unwrap();
    let n = 40_000u64;
    let args = |resume: bool| {
        let mut a = vec![
            "--bootstrap".to_string(),
            b.clone(),
            "--topic".into(),
            topic.clone(),
            "--checkpoint-dir".into(),
            dir.path().to_string_lossy().into_owned(),
            "--count".into(),
            n.to_string(),
            "--rate".into(),
            "10000".into(),
            "--checkpoint-interval-ms".into(),
            "100".into(),
        ];
        if resume {
            a.push("--resume".into());
        }
        a
    };
    let mut first = Command::new(example_binary())
        .args(args(false))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the third completed checkpoint, then kill it mid-run.
    let stdout = first.stdout.take().unwrap();
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        assert!(
            !line.starts_with("done"),
            "the first run ended before it was killed"
        );
        if line == "checkpoints completed: 3" {
            break;
        }
    }
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    let second = Command::new(example_binary())
        .args(args(true))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&second.stdout);
    assert!(
        second.status.success(),
        "the resumed run failed: {out}\n{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(out.contains("restored from Some"), "{out}");
    assert_exactly_once(&b, &topic, n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_that_are_not_there_fail_the_job_naming_them() {
    for guarantee in [
        DeliveryGuarantee::AtLeastOnce,
        DeliveryGuarantee::ExactlyOnce,
    ] {
        let env = StreamEnvironment::new();
        env.enable_checkpointing(Duration::from_millis(100));
        env.set_restart_strategy(RestartStrategy::none());
        let s = KafkaSink::<u64>::builder()
            .bootstrap_servers("127.0.0.1:1")
            .record_serializer(KafkaRecordSerializer::json("nowhere"))
            .delivery_guarantee(guarantee)
            .transactional_id_prefix("nowhere")
            .request_timeout(Duration::from_millis(300))
            .build()
            .unwrap();
        env.from_iter(0u64..10).sink_to_kafka(s);
        let e = env.execute("no broker").await.unwrap_err().to_string();
        assert!(
            e.contains("cannot reach the Kafka brokers at 127.0.0.1:1 after 3 attempts"),
            "{guarantee:?}: {e}"
        );
    }
}
