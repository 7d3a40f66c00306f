//! `KafkaSource` end to end against the broker `.ci/kafka` starts (skipped without
//! `SLUICE_KAFKA_BOOTSTRAP` outside CI): a bounded read of every record once, a resume
//! mid-partition from a savepoint, a partition added while running, rescaling 2 → 3 → 1, the
//! stopping and starting offsets, per-partition watermarks under an event-time window, malformed
//! records (fail naming them, or skip and count), an unreachable broker, a missing topic and
//! waiting for one, and offsets committed to the group on completed checkpoints.

mod common;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use sluice_connectors::file::{JsonLinesSink, read_committed};
use sluice_kafka::{
    KafkaDeserializer, KafkaSource, KafkaSourceBuilder, MalformedRecords, OffsetResetStrategy,
    StartingOffsets, StoppingOffsets,
};
use sluice_runtime::prelude::*;
use sluice_runtime::testing::InputGate;
use sluice_runtime::window::{AggregateFunction, TumblingEventTimeWindows};
use sluice_source::FromSource;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// A record as the tests read it: where it was and what it held.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
struct Row {
    partition: i32,
    offset: i64,
    id: u64,
    ts: i64,
}

#[derive(Deserialize)]
struct Value {
    id: u64,
    ts: i64,
}

/// The value's JSON with the record's partition and offset.
fn rows() -> KafkaDeserializer<Row> {
    KafkaDeserializer::from_fn(|r| {
        let v: Value =
            serde_json::from_slice(r.value().unwrap_or_default()).map_err(|e| e.to_string())?;
        Ok(Some(Row {
            partition: r.partition(),
            offset: r.offset(),
            id: v.id,
            ts: v.ts,
        }))
    })
}

/// Produces `n` records into each of `partitions` (ids `base + partition * 1000 + i`, event
/// times from `ts(partition, i)`, also the Kafka timestamp).
fn fill(
    bootstrap: &str,
    topic: &str,
    partitions: std::ops::Range<i32>,
    n: u64,
    base: u64,
    ts: impl Fn(i32, u64) -> i64,
) {
    let mut records = Vec::new();
    for p in partitions {
        for i in 0..n {
            let id = base + p as u64 * 1000 + i;
            let t = ts(p, i);
            records.push((
                p,
                format!("k{id}"),
                format!("{{\"id\":{id},\"ts\":{t}}}"),
                t,
            ));
        }
    }
    common::produce(bootstrap, topic, &records);
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn source(bootstrap: &str, topic: &str) -> KafkaSourceBuilder<Row> {
    KafkaSource::<Row>::builder()
        .bootstrap_servers(bootstrap)
        .topics([topic])
        .deserializer(rows())
}

/// Rows a job saw, and a way to wait until it saw enough (no sleeping).
#[derive(Clone, Default)]
struct Seen {
    rows: Arc<Mutex<Vec<Row>>>,
    changed: Arc<Notify>,
}

impl Seen {
    fn push(&self, row: &Row) {
        self.rows.lock().unwrap().push(row.clone());
        self.changed.notify_waiters();
    }

    fn rows(&self) -> Vec<Row> {
        self.rows.lock().unwrap().clone()
    }

    async fn wait_for(&self, n: usize) {
        let wait = async {
            loop {
                let notified = self.changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.rows.lock().unwrap().len() >= n {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), wait)
            .await
            .unwrap_or_else(|_| panic!("saw {} rows of {n}", self.rows().len()));
    }
}

/// `(partition, offset)` of each row, sorted; panics on a duplicate.
fn positions(rows: &[Row]) -> Vec<(i32, i64)> {
    let mut p: Vec<(i32, i64)> = rows.iter().map(|r| (r.partition, r.offset)).collect();
    p.sort_unstable();
    let before = p.len();
    p.dedup();
    assert_eq!(p.len(), before, "a record was read twice");
    p
}

/// Every offset `0..n` of each of `partitions`.
fn all(partitions: std::ops::Range<i32>, offsets: std::ops::Range<i64>) -> Vec<(i32, i64)> {
    partitions
        .flat_map(|p| offsets.clone().map(move |o| (p, o)))
        .collect()
}

// ----- 1 -------------------------------------------------------------------------------------

/// A bounded source reads every record of a 3-partition topic once, and the job ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_source_reads_every_record_of_every_partition_once_and_ends() {
    let Some(bootstrap) = common::broker() else {
        return;
    };
    let topic = common::unique("bounded");
    common::create_topic(&bootstrap, &topic, 3).await;
    fill(&bootstrap, &topic, 0..3, 40, 0, |_, i| i as i64);
    let src = source(&bootstrap, &topic)
        .bounded(StoppingOffsets::Latest)
        .build()
        .unwrap();
    let metrics = src.metrics();
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(7);
    let out = env.from_source(src, None, "kafka").collect();
    env.execute("bounded").await.unwrap();
    let rows = out.take();
    assert_eq!(positions(&rows), all(0..3, 0..40));
    assert_eq!(metrics.records_read(), 120);
    let ids: BTreeSet<u64> = rows.iter().map(|r| r.id).collect();
    assert_eq!(ids.len(), 120);
}

// ----- 2 -------------------------------------------------------------------------------------

/// source → gate → exactly-once JSON-lines sink, the same graph for every run.
fn gated_job(
    env: &StreamEnvironment,
    src: KafkaSource<Row>,
    p: usize,
    gate: InputGate<Row>,
    out: &std::path::Path,
) {
    env.set_parallelism(2).set_batch_size(10);
    env.from_source(src, None, "kafka")
        .parallelism(p)
        .transform("Gate", gate)
        .parallelism(p)
        .sink_to_exactly_once(JsonLinesSink::new(out, "out"));
}

/// A job stopped with a savepoint mid-partition resumes where it stopped: the sink ends with
/// every record exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_job_resumes_mid_partition_with_nothing_lost_or_repeated() {
    let Some(bootstrap) = common::broker() else {
        return;
    };
    let topic = common::unique("resume");
    common::create_topic(&bootstrap, &topic, 2).await;
    fill(&bootstrap, &topic, 0..2, 200, 0, |_, i| i as i64);
    let out = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let bounded = || {
        source(&bootstrap, &topic)
            .bounded(StoppingOffsets::Latest)
            .build()
            .unwrap()
    };

    let env = StreamEnvironment::new();
    env.enable_checkpointing(Duration::from_millis(20));
    env.set_checkpoint_storage(checkpoints.path());
    let gate = InputGate::new(150, 1);
    let closed = gate.all_closed();
    gated_job(&env, bounded(), 1, gate, out.path());
    let job = env.submit("resume: first run").unwrap();
    closed.notified().await;
    let savepoint = job.stop_with_savepoint().await.unwrap();
    job.await.unwrap();
    let first = read_committed::<Row>(out.path()).unwrap().len();
    assert!((150..400).contains(&first), "run 1 committed {first}");

    let env = StreamEnvironment::new();
    env.enable_checkpointing(Duration::from_millis(20));
    env.set_checkpoint_storage(checkpoints.path());
    env.restore_from(checkpoints.path());
    gated_job(&env, bounded(), 1, InputGate::new(u64::MAX, 1), out.path());
    let second = env.execute("resume: second run").await.unwrap();
    assert_eq!(second.restored_from, Some(savepoint));
    let rows = read_committed::<Row>(out.path()).unwrap();
    assert_eq!(positions(&rows), all(0..2, 0..200));
}

// ----- 3 -------------------------------------------------------------------------------------

/// A partition added while the job runs is discovered and read from its start; so is a new
/// topic matching the source's pattern.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_added_while_running_is_discovered_and_read() {
    let Some(bootstrap) = common::broker() else {
        return;
    };
    let topic = common::unique("grow");
    let more = format!("{topic}-more");
    common::create_topic(&bootstrap, &topic, 1).await;
    fill(&bootstrap, &topic, 0..1, 10, 0, |_, i| i as i64);
    let src = KafkaSource::<Row>::builder()
        .bootstrap_servers(&bootstrap)
        .topic_pattern(format!("{}(-more)?", regex::escape(&topic)))
        .deserializer(rows())
        .partition_discovery(Duration::from_millis(100))
        .build()
        .unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    let seen = Seen::default();
    let s = seen.clone();
    env.from_source(src, None, "kafka")
        .map(move |r: Row| {
            s.push(&r);
            r
        })
        .discard();
    let job = env.submit("grow").unwrap();
    seen.wait_for(10).await;
    common::add_partitions(&bootstrap, &topic, 2).await;
    fill(&bootstrap, &topic, 1..2, 15, 0, |_, i| i as i64);
    seen.wait_for(25).await;
    common::create_topic(&bootstrap, &more, 1).await;
    fill(&bootstrap, &more, 0..1, 5, 100_000, |_, i| i as i64);
    seen.wait_for(30).await;
    job.cancel();
    let _ = job.await;
    let rows = seen.rows();
    let (from_more, from_topic): (Vec<Row>, Vec<Row>) =
        rows.into_iter().partition(|r| r.id >= 100_000);
    let mut expected = all(0..1, 0..10);
    expected.extend(all(1..2, 0..15));
    assert_eq!(positions(&from_topic), expected);
    assert_eq!(positions(&from_more), all(0..1, 0..5));
}

// ----- 4 -------------------------------------------------------------------------------------

/// source → gate → map (noting what passed) → exactly-once sink, the same graph for every
/// run.
fn noting_job(
    env: &StreamEnvironment,
    src: KafkaSource<Row>,
    p: usize,
    gate: InputGate<Row>,
    seen: &Seen,
    out: &std::path::Path,
) {
    env.set_parallelism(2).set_batch_size(8);
    let s = seen.clone();
    env.from_source(src, None, "kafka")
        .parallelism(p)
        .transform("Gate", gate)
        .parallelism(p)
        .map(move |r: Row| {
            s.push(&r);
            r
        })
        .parallelism(p)
        .sink_to_exactly_once(JsonLinesSink::new(out, "out"));
}

/// Stopped with a savepoint mid-partition at parallelism 2, resumed at 3 and stopped
/// mid-partition again, resumed at 1 to the end: every record once overall.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescaling_2_3_1_reads_every_record_once() {
    let Some(bootstrap) = common::broker() else {
        return;
    };
    let topic = common::unique("rescale");
    common::create_topic(&bootstrap, &topic, 4).await;
    fill(&bootstrap, &topic, 0..4, 100, 0, |_, i| i as i64);
    let out = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let unbounded = || {
        source(&bootstrap, &topic)
            .partition_discovery(Duration::from_millis(200))
            .build()
            .unwrap()
    };
    let committed = || read_committed::<Row>(out.path()).unwrap().len();
    // Each gate passes at most its limit and a batch (8) per subtask, so after runs at 2 and
    // 3 every partition still has records: both stop mid-partition.
    for (run, (p, limit)) in [(2usize, 20u64), (3, 30), (1, u64::MAX)]
        .into_iter()
        .enumerate()
    {
        let env = StreamEnvironment::new();
        env.enable_checkpointing(Duration::from_millis(20));
        env.set_checkpoint_storage(checkpoints.path());
        if run > 0 {
            env.restore_from(checkpoints.path());
        }
        let seen = Seen::default();
        let gate = InputGate::new(limit, p);
        let closed = gate.all_closed();
        noting_job(&env, unbounded(), p, gate, &seen, out.path());
        let before = committed();
        let job = env.submit(&format!("rescale run {run} at {p}")).unwrap();
        if limit == u64::MAX {
            seen.wait_for(400 - before).await;
        } else {
            closed.notified().await;
        }
        job.stop_with_savepoint().await.unwrap();
        job.await.unwrap();
        let after = committed();
        assert!(after > before, "run {run} at {p} committed nothing");
        if run < 2 {
            assert!(after < 400, "run {run} at {p} read everything");
        }
    }
    let rows = read_committed::<Row>(out.path()).unwrap();
    assert_eq!(positions(&rows), all(0..4, 0..100));
}

// ----- 5 -------------------------------------------------------------------------------------

async fn run_bounded(src: KafkaSource<Row>) -> Result<Vec<(i32, i64)>, String> {
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    let out = env.from_source(src, None, "kafka").collect();
    env.execute("offsets").await.map_err(|e| e.to_string())?;
    Ok(positions(&out.take()))
}

/// Stopping at specific offsets and at a timestamp; starting at a timestamp and from
/// committed offsets with each reset strategy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_reads_honour_stopping_and_starting_offsets() {
    let Some(bootstrap) = common::broker() else {
        return;
    };
    let topic = common::unique("offsets");
    common::create_topic(&bootstrap, &topic, 3).await;
    let t0 = now_ms() - 60_000;
    // Timestamps t0 + i * 100 in every partition.
    fill(&bootstrap, &topic, 0..3, 10, 0, |_, i| t0 + i as i64 * 100);
    let tp = |p: i32| (topic.clone(), p);

    // Specific stopping offsets: partition 2 is not listed and reads nothing.
    let stop = BTreeMap::from([(tp(0), 5), (tp(1), 3)]);
    let src = source(&bootstrap, &topic)
        .bounded(StoppingOffsets::Specific(stop))
        .build()
        .unwrap();
    let mut expected = all(0..1, 0..5);
    expected.extend(all(1..2, 0..3));
    assert_eq!(run_bounded(src).await.unwrap(), expected);

    // Stopping at a timestamp: records before it.
    let src = source(&bootstrap, &topic)
        .bounded(StoppingOffsets::Timestamp(t0 + 450))
        .build()
        .unwrap();
    assert_eq!(run_bounded(src).await.unwrap(), all(0..3, 0..5));

    // Starting at a timestamp, with specific starting offsets beside.
    let src = source(&bootstrap, &topic)
        .starting_offsets(StartingOffsets::Timestamp(t0 + 700))
        .bounded(StoppingOffsets::Latest)
        .build()
        .unwrap();
    assert_eq!(run_bounded(src).await.unwrap(), all(0..3, 7..10));
    let src = source(&bootstrap, &topic)
        .starting_offsets(StartingOffsets::Specific(BTreeMap::from([(tp(1), 8)])))
        .bounded(StoppingOffsets::Specific(BTreeMap::from([
            (tp(0), 2),
            (tp(1), 10),
            (tp(2), 1),
        ])))
        .build()
        .unwrap();
    let mut expected = all(0..1, 0..2);
    expected.extend(all(1..2, 8..10));
    expected.extend(all(2..3, 0..1));
    assert_eq!(run_bounded(src).await.unwrap(), expected);

    // Committed offsets: partition 0 at 6, the others have none.
    let group = common::unique("group");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", &group)
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(&topic, 0, Offset::Offset(6))
        .unwrap();
    tokio::task::spawn_blocking(move || consumer.commit(&list, CommitMode::Sync).unwrap())
        .await
        .unwrap();
    let committed = |reset| {
        source(&bootstrap, &topic)
            .group_id(&group)
            .commit_offsets_on_checkpoint(false)
            .starting_offsets(StartingOffsets::Committed(reset))
            .bounded(StoppingOffsets::Latest)
            .build()
            .unwrap()
    };
    let mut expected = all(0..1, 6..10);
    expected.extend(all(1..3, 0..10));
    assert_eq!(
        run_bounded(committed(OffsetResetStrategy::Earliest))
            .await
            .unwrap(),
        expected
    );
    assert_eq!(
        run_bounded(committed(OffsetResetStrategy::Latest))
            .await
            .unwrap(),
        all(0..1, 6..10)
    );
    let e = run_bounded(committed(OffsetResetStrategy::None))
        .await
        .unwrap_err();
    assert!(
        e.contains(&format!("partition {topic}-1 has no committed offset"))
            || e.contains(&format!("partition {topic}-2 has no committed offset")),
        "{e}"
    );
}

// ----- 6 -------------------------------------------------------------------------------------

#[derive(Clone)]
struct Count;

impl AggregateFunction<Row> for Count {
    type Acc = u64;
    type Out = u64;
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, _: Row, acc: &mut u64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
    fn merge(&self, a: u64, b: u64) -> u64 {
        a + b
    }
}

/// One subtask reads two partitions: one far ahead in event time, one lagging. The watermark
/// is the minimum over the partitions, so the lagging one's records are not late and the
/// per-window counts equal a sequential count of every record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_partition_watermarks_hold_an_event_time_window_back() {
    let Some(bootstrap) = common::broker() else {
        return;
    };
    let topic = common::unique("watermarks");
    common::create_topic(&bootstrap, &topic, 2).await;
    // Partition 0: 0 s .. 60 s; partition 1 lags: 0 s .. 12 s. Window 5 s, key id % 3.
    fill(&bootstrap, &topic, 0..1, 120, 0, |_, i| i as i64 * 500);
    fill(&bootstrap, &topic, 1..2, 120, 0, |_, i| i as i64 * 100);
    let src = source(&bootstrap, &topic)
        .bounded(StoppingOffsets::Latest)
        .build()
        .unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(1).set_batch_size(4);
    let watermarks = WatermarkStrategy::for_monotonous_timestamps(|r: &Row| r.ts);
    let late = sluice_runtime::process::OutputTag::<Row>::new("late");
    let counts = env
        .from_source(src, Some(watermarks), "kafka")
        .key_by(|r: &Row| r.id % 3)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(5)))
        .side_output_late_data(&late)
        .aggregate_with(Count, |k, w, n| (*k, w.start, n));
    let late = counts.get_side_output(&late).collect();
    let counts = counts.collect();
    env.execute("windows").await.unwrap();
    let mut model: BTreeMap<(u64, i64), u64> = BTreeMap::new();
    for p in 0..2u64 {
        for i in 0..120u64 {
            let ts = if p == 0 { i * 500 } else { i * 100 } as i64;
            *model
                .entry(((p * 1000 + i) % 3, ts / 5000 * 5000))
                .or_default() += 1;
        }
    }
    assert!(late.take().is_empty(), "records were late");
    let got: BTreeMap<(u64, i64), u64> = counts
        .take()
        .into_iter()
        .map(|(k, s, n)| ((k, s), n))
        .collect();
    assert_eq!(got, model);
}

// ----- 7 -------------------------------------------------------------------------------------

/// A malformed record fails the job naming topic, partition and offset; with `Skip` it is
/// counted and the rest is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_record_fails_the_job_naming_it_or_is_skipped_and_counted() {
    let Some(bootstrap) = common::broker() else {
        return;
    };
    let topic = common::unique("malformed");
    common::create_topic(&bootstrap, &topic, 2).await;
    fill(&bootstrap, &topic, 0..2, 3, 0, |_, i| i as i64);
    common::produce(
        &bootstrap,
        &topic,
        &[(1, "bad".into(), "{not json".into(), 5)],
    );
    fill(&bootstrap, &topic, 0..2, 2, 50, |_, i| i as i64);

    let src = source(&bootstrap, &topic)
        .bounded(StoppingOffsets::Latest)
        .build()
        .unwrap();
    let e = run_bounded(src).await.unwrap_err();
    assert!(
        e.contains(&format!("offset 3 of {topic}-1")),
        "the error names the record: {e}"
    );

    let src = source(&bootstrap, &topic)
        .bounded(StoppingOffsets::Latest)
        .on_malformed(MalformedRecords::Skip)
        .build()
        .unwrap();
    let metrics = src.metrics();
    let read = run_bounded(src).await.unwrap();
    let mut expected = all(0..1, 0..5);
    expected.extend([(1, 0), (1, 1), (1, 2), (1, 4), (1, 5)]);
    assert_eq!(read, expected);
    assert_eq!(metrics.skipped_records(), 1);
    assert_eq!(metrics.records_read(), 11);
}

// ----- 8 -------------------------------------------------------------------------------------

/// No broker: the job fails after bounded retries, naming the servers. A missing topic is
/// named. With `wait_for_topics` the job waits and reads the topic once it appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_broker_or_topic_fails_the_job_naming_it_unless_topics_are_waited_for() {
    let Some(bootstrap) = common::broker() else {
        return;
    };
    let started = std::time::Instant::now();
    let src = KafkaSource::<Row>::builder()
        .bootstrap_servers("127.0.0.1:1")
        .topics(["nowhere"])
        .request_timeout(Duration::from_millis(300))
        .bounded(StoppingOffsets::Latest)
        .build()
        .unwrap();
    let e = run_bounded(src).await.unwrap_err();
    assert!(
        e.contains("cannot reach the Kafka brokers at 127.0.0.1:1 after 3 attempts"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(20));

    let missing = common::unique("missing");
    let src = source(&bootstrap, &missing)
        .bounded(StoppingOffsets::Latest)
        .build()
        .unwrap();
    let e = run_bounded(src).await.unwrap_err();
    assert!(
        e.contains(&format!(
            "topic {missing} does not exist on the Kafka brokers at {bootstrap}"
        )),
        "{e}"
    );

    let later = common::unique("later");
    let src = source(&bootstrap, &later)
        .wait_for_topics(true)
        .partition_discovery(Duration::from_millis(100))
        .build()
        .unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    env.enable_checkpointing(Duration::from_secs(3600));
    let seen = Seen::default();
    let s = seen.clone();
    env.from_source(src, None, "kafka")
        .map(move |r: Row| {
            s.push(&r);
            r
        })
        .discard();
    let job = env.submit("waiting").unwrap();
    // A completed checkpoint: the coordinator has started (and looked for the topic).
    job.trigger_checkpoint()
        .await
        .unwrap()
        .completed()
        .await
        .unwrap();
    assert!(!job.is_finished(), "the job did not wait for its topic");
    common::create_topic(&bootstrap, &later, 1).await;
    fill(&bootstrap, &later, 0..1, 5, 0, |_, i| i as i64);
    seen.wait_for(5).await;
    job.cancel();
    let _ = job.await;
    assert_eq!(positions(&seen.rows()), all(0..1, 0..5));
}

// ----- 9 -------------------------------------------------------------------------------------

/// The offsets of a completed checkpoint are committed to the group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_are_committed_to_the_group_after_a_completed_checkpoint() {
    let Some(bootstrap) = common::broker() else {
        return;
    };
    let topic = common::unique("commit");
    let group = common::unique("commit-group");
    common::create_topic(&bootstrap, &topic, 2).await;
    fill(&bootstrap, &topic, 0..2, 12, 0, |_, i| i as i64);
    let src = source(&bootstrap, &topic).group_id(&group).build().unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    env.enable_checkpointing(Duration::from_secs(3600));
    let seen = Seen::default();
    let s = seen.clone();
    env.from_source(src, None, "kafka")
        .map(move |r: Row| {
            s.push(&r);
            r
        })
        .discard();
    let job = env.submit("commits").unwrap();
    seen.wait_for(24).await;
    let consumer: Arc<BaseConsumer> = Arc::new(
        ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", &group)
            .create()
            .unwrap(),
    );
    let committed = || {
        let consumer = consumer.clone();
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || {
            let mut list = TopicPartitionList::new();
            list.add_partition(&topic, 0);
            list.add_partition(&topic, 1);
            let got = consumer
                .committed_offsets(list, Duration::from_secs(10))
                .unwrap();
            [0, 1].map(|p| got.find_partition(&topic, p).unwrap().offset())
        })
    };
    assert_eq!(
        committed().await.unwrap(),
        [Offset::Invalid, Offset::Invalid]
    );
    // Each completed checkpoint commits (asynchronously): checkpoint until the commit shows.
    let mut last = None;
    for _ in 0..100 {
        job.trigger_checkpoint()
            .await
            .unwrap()
            .completed()
            .await
            .unwrap();
        let got = committed().await.unwrap();
        if got == [Offset::Offset(12), Offset::Offset(12)] {
            last = Some(got);
            break;
        }
        last = Some(got);
    }
    job.cancel();
    let _ = job.await;
    assert_eq!(last, Some([Offset::Offset(12), Offset::Offset(12)]));

    // A bounded job that commits, with frequent checkpoints, still ends when its readers do
    // (notifications for finished readers are harmless).
    let src = source(&bootstrap, &topic)
        .group_id(&group)
        .bounded(StoppingOffsets::Latest)
        .build()
        .unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(3);
    env.enable_checkpointing(Duration::from_millis(5));
    let out = env.from_source(src, None, "kafka").collect();
    env.execute("bounded commits").await.unwrap();
    assert_eq!(positions(&out.take()), all(0..2, 0..12));
}
