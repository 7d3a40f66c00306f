//! Kafka mode (`--kafka BOOTSTRAP`): the generated clicks are produced into a topic with a plain
//! rdkafka producer (keyed by user, each record's timestamp the click's event time, the value
//! the same CSV line a click file holds), read back by `KafkaSource` (bounded: from the earliest
//! offsets to the latest ones at the start), and the counts are written exactly once by
//! `KafkaSink` (one Kafka transaction per checkpoint and sink subtask; JSON values, key = user)
//! to a second topic, which the check reads back with `isolation.level=read_committed`.

use crate::events::{self, CSV_HEADER, RawClick};
use crate::window::ClicksPerMinute;
use anyhow::{Context as _, bail};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};
use sluice_kafka::{
    DeliveryGuarantee, KafkaDeserializer, KafkaRecord, KafkaRecordSerializer, KafkaSink,
    KafkaSource, StartingOffsets, StoppingOffsets,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long one request to the brokers (metadata, topic creation and deletion) may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the read-back waits for the next record or end of partition before it gives up
/// (a transaction left open would block a `read_committed` reader this long).
const READ_PATIENCE: Duration = Duration::from_secs(10);
/// How long the producer may take to deliver the clicks after the last one was handed over.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(120);

/// The brokers and topics of a Kafka-mode run.
#[derive(Clone, Debug)]
pub struct Topics {
    /// `host:port[,host:port...]`.
    pub bootstrap: String,
    /// Where the clicks are produced and read from.
    pub clicks: String,
    /// Where the counts are written.
    pub counts: String,
    /// Partitions of both topics when they are created.
    pub partitions: i32,
}

/// The sink's transactional id prefix: derived from the counts topic, so the same for a
/// restored run (which must fence and commit the ids of the run it resumes) and distinct for
/// runs writing to other topics.
pub fn transactional_id_prefix(counts_topic: &str) -> String {
    format!("clickstream-{counts_topic}")
}

/// The clicks topic as the run found or filled it.
#[derive(Debug)]
pub struct Clicks {
    /// Clicks in the topic.
    pub events: u64,
    /// Its partitions.
    pub partitions: usize,
    /// How long producing them took, when this run produced them.
    pub produced: Option<Duration>,
}

fn admin(bootstrap: &str) -> anyhow::Result<AdminClient<DefaultClientContext>> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .with_context(|| format!("cannot create a Kafka admin client for {bootstrap}"))
}

/// Deletes both topics (if there) and creates them again empty, with `partitions` partitions.
/// The clicks topic keeps its records forever (`retention.ms=-1`): their timestamps are the
/// clicks' event times, in 2024, which time-based retention would otherwise delete at once.
pub async fn start_fresh(topics: &Topics) -> anyhow::Result<()> {
    let b = &topics.bootstrap;
    let admin = admin(b)?;
    // The broker answers once the deletion is done (or the operation timeout passed).
    let options = AdminOptions::new()
        .request_timeout(Some(REQUEST_TIMEOUT))
        .operation_timeout(Some(REQUEST_TIMEOUT));
    let names = [topics.clicks.as_str(), topics.counts.as_str()];
    let deleted = admin
        .delete_topics(&names, &options)
        .await
        .with_context(|| {
            format!("cannot delete the topics {names:?} of the last run at the Kafka brokers {b}")
        })?;
    for result in deleted {
        match result {
            Ok(_) | Err((_, RDKafkaErrorCode::UnknownTopicOrPartition)) => {}
            Err((topic, code)) => bail!("cannot delete the topic {topic} at {b}: {code}"),
        }
    }
    let new = [
        NewTopic::new(
            &topics.clicks,
            topics.partitions,
            TopicReplication::Fixed(-1),
        )
        .set("retention.ms", "-1"),
        NewTopic::new(
            &topics.counts,
            topics.partitions,
            TopicReplication::Fixed(-1),
        ),
    ];
    let created = admin
        .create_topics(&new, &options)
        .await
        .with_context(|| format!("cannot create the topics {names:?} at the Kafka brokers {b}"))?;
    for result in created {
        match result {
            Ok(_) => {}
            Err((topic, RDKafkaErrorCode::TopicAlreadyExists)) => bail!(
                "the topic {topic} at {b} still exists after it was deleted (the brokers are \
                 still deleting it): run again"
            ),
            Err((topic, code)) => bail!(
                "cannot create the topic {topic} with {} partitions at {b}: {code}",
                topics.partitions
            ),
        }
    }
    Ok(())
}

/// Counts delivery failures of the clicks producer and keeps the first.
#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
    first: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut first) = self.first.lock() {
                first.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

impl Deliveries {
    fn check(&self, topics: &Topics) -> anyhow::Result<()> {
        let failed = self.failed.load(Ordering::Relaxed);
        if failed == 0 {
            return Ok(());
        }
        let first = self
            .first
            .lock()
            .ok()
            .and_then(|f| f.clone())
            .unwrap_or_default();
        bail!(
            "{failed} clicks could not be produced to the topic {} at {}: {first}",
            topics.clicks,
            topics.bootstrap
        )
    }
}

/// Produces clicks `0..events` into the clicks topic (blocking): key = user, timestamp = event
/// time, value = the CSV line of a click file. Idempotent, so a retried send is never written
/// twice: the topic then holds each click exactly once, which the check relies on.
pub fn produce(topics: &Topics, events: u64) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let b = &topics.bootstrap;
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", b)
        .set("enable.idempotence", "true")
        // Java's partitioner for keyed records, so other clients agree on a user's partition.
        .set("partitioner", "murmur2_random")
        .set("linger.ms", "20")
        .set("message.timeout.ms", "60000")
        .create_with_context(Deliveries::default())
        .with_context(|| format!("cannot create a Kafka producer for {b}"))?;
    let users = events::user_popularity().context("invalid user distribution")?;
    let (mut line, mut key) = (Vec::with_capacity(64), String::with_capacity(8));
    for i in 0..events {
        let click = events::generate(i, &users);
        line.clear();
        click
            .write_csv(&mut line)
            .context("cannot write a click line")?;
        let value = line.strip_suffix(b"\n").unwrap_or(&line);
        key.clear();
        let _ = write!(key, "{}", click.user());
        let mut record = BaseRecord::to(&topics.clicks)
            .key(key.as_bytes())
            .payload(value)
            .timestamp(click.time_ms());
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    // Waits for delivery reports to make room.
                    record = back;
                    producer.poll(Duration::from_millis(100));
                }
                Err((e, _)) => {
                    return Err(e).with_context(|| {
                        format!(
                            "cannot produce click {i} to the topic {} at {b}",
                            topics.clicks
                        )
                    });
                }
            }
        }
        if i % 1024 == 0 {
            producer.poll(Duration::ZERO);
            producer.context().check(topics)?;
        }
    }
    producer.flush(FLUSH_TIMEOUT).with_context(|| {
        format!(
            "the clicks were not all delivered to the topic {} at {b} within {FLUSH_TIMEOUT:?}",
            topics.clicks
        )
    })?;
    producer.context().check(topics)?;
    Ok(started.elapsed())
}

/// The read-back consumer's context: rdkafka hands every error event to `ClientContext::error`,
/// whose default logs it as an error, and with `enable.partition.eof` the end of each partition
/// is one; the reader takes those from `poll` and keeps the log for real errors.
struct QuietEof;

impl ClientContext for QuietEof {
    fn error(&self, error: KafkaError, reason: &str) {
        if !matches!(
            error,
            KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)
        ) {
            tracing::error!("librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for QuietEof {}

type CheckConsumer = BaseConsumer<QuietEof>;

fn consumer(bootstrap: &str, read_committed: bool) -> anyhow::Result<CheckConsumer> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set(
            "group.id",
            format!("clickstream-check-{}", std::process::id()),
        )
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "true")
        .set(
            "isolation.level",
            if read_committed {
                "read_committed"
            } else {
                "read_uncommitted"
            },
        )
        .create_with_context(QuietEof)
        .with_context(|| format!("cannot create a Kafka consumer for {bootstrap}"))
}

/// The partition ids of `topic`, or an error when it does not exist.
fn partitions_of(
    consumer: &CheckConsumer,
    bootstrap: &str,
    topic: &str,
) -> anyhow::Result<Vec<i32>> {
    let metadata = consumer
        .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
        .with_context(|| {
            format!("cannot fetch the metadata of the topic {topic} from {bootstrap}")
        })?;
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        bail!("the Kafka brokers at {bootstrap} do not know the topic {topic}");
    };
    if let Some(e) = t.error() {
        bail!(
            "the topic {topic} at {bootstrap}: {}",
            RDKafkaErrorCode::from(e)
        );
    }
    let mut ids: Vec<i32> = t.partitions().iter().map(|p| p.id()).collect();
    if ids.is_empty() {
        bail!("the topic {topic} at {bootstrap} has no partitions");
    }
    ids.sort_unstable();
    Ok(ids)
}

/// The clicks a restored run continues to read (blocking): those in the clicks topic, which must
/// be there.
pub fn existing_clicks(topics: &Topics) -> anyhow::Result<Clicks> {
    let (b, topic) = (&topics.bootstrap, &topics.clicks);
    let consumer = consumer(b, false)?;
    let partitions = partitions_of(&consumer, b, topic).with_context(|| {
        format!("resuming needs the clicks topic {topic} of the run it resumes")
    })?;
    let mut events = 0u64;
    for &p in &partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, REQUEST_TIMEOUT)
            .with_context(|| format!("cannot fetch the offsets of {topic}-{p} from {b}"))?;
        events += u64::try_from(high - low).unwrap_or(0);
    }
    Ok(Clicks {
        events,
        partitions: partitions.len(),
        produced: None,
    })
}

/// Parses a record's value as the CSV line of a click file (`time_ms,user,url,agent`, the
/// columns of [`CSV_HEADER`]), as the file source does; a record that is not one fails the job,
/// which names its topic, partition and offset.
pub fn deserializer() -> KafkaDeserializer<RawClick> {
    KafkaDeserializer::from_fn(|r: &KafkaRecord<'_>| {
        let Some(value) = r.value() else {
            return Ok(None); // a tombstone: no click
        };
        let line = value.strip_suffix(b"\n").unwrap_or(value);
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(line);
        match reader.deserialize().next() {
            Some(click) => click
                .map(Some)
                .map_err(|e| format!("not a click as a CSV line ({CSV_HEADER}): {e}")),
            None => Err("an empty value, not a click".into()),
        }
    })
}

/// The bounded source of the clicks topic: from the earliest offsets to the latest ones when
/// the job starts.
pub fn source(topics: &Topics) -> anyhow::Result<KafkaSource<RawClick>> {
    KafkaSource::<RawClick>::builder()
        .bootstrap_servers(&topics.bootstrap)
        .topics([&topics.clicks])
        .starting_offsets(StartingOffsets::Earliest)
        .bounded(StoppingOffsets::Latest)
        .deserializer(deserializer())
        .build()
        .with_context(|| {
            format!(
                "invalid Kafka source of the topic {} at {}",
                topics.clicks, topics.bootstrap
            )
        })
}

/// The exactly-once sink of the counts topic: JSON values, key = user.
pub fn sink(topics: &Topics) -> anyhow::Result<KafkaSink<ClicksPerMinute>> {
    let serializer = KafkaRecordSerializer::<ClicksPerMinute>::json(&topics.counts)
        .key(|row: &ClicksPerMinute| row.user.to_string());
    KafkaSink::<ClicksPerMinute>::builder()
        .bootstrap_servers(&topics.bootstrap)
        .record_serializer(serializer)
        .delivery_guarantee(DeliveryGuarantee::ExactlyOnce)
        .transactional_id_prefix(transactional_id_prefix(&topics.counts))
        .build()
        .with_context(|| {
            format!(
                "invalid Kafka sink of the topic {} at {}",
                topics.counts, topics.bootstrap
            )
        })
}

/// What the counts topic holds after the run, as a `read_committed` reader sees it.
pub struct Committed {
    /// Its rows: (user, first millisecond of the minute, clicks).
    pub rows: Vec<(u64, i64, u64)>,
    /// Records per partition.
    pub per_partition: BTreeMap<i32, u64>,
}

/// Reads the counts topic back (blocking) with `isolation.level=read_committed`: every partition
/// from offset 0 to its end (`enable.partition.eof`), each value a JSON row whose key is its
/// user.
pub fn read_back(topics: &Topics) -> anyhow::Result<Committed> {
    let (b, topic) = (&topics.bootstrap, &topics.counts);
    let consumer = consumer(b, true)?;
    let partitions = partitions_of(&consumer, b, topic)?;
    let mut assignment = TopicPartitionList::new();
    for &p in &partitions {
        assignment
            .add_partition_offset(topic, p, Offset::Offset(0))
            .with_context(|| format!("cannot assign {topic}-{p}"))?;
    }
    consumer
        .assign(&assignment)
        .with_context(|| format!("cannot assign the partitions of {topic} at {b}"))?;
    let mut left: BTreeSet<i32> = partitions.iter().copied().collect();
    let mut per_partition: BTreeMap<i32, u64> = partitions.iter().map(|&p| (p, 0)).collect();
    let mut rows = Vec::new();
    while !left.is_empty() {
        let message = match consumer.poll(READ_PATIENCE) {
            None => bail!(
                "no record and no end of partition within {READ_PATIENCE:?} reading the topic \
                 {topic} at {b} back (partitions left: {left:?}; an open transaction blocks a \
                 read_committed reader)"
            ),
            Some(Err(KafkaError::PartitionEOF(p))) => {
                left.remove(&p);
                continue;
            }
            Some(Err(e)) => {
                return Err(e).with_context(|| format!("cannot read the topic {topic} at {b}"));
            }
            Some(Ok(m)) => m,
        };
        let at = || {
            format!(
                "the record at offset {} of {topic}-{}",
                message.offset(),
                message.partition()
            )
        };
        let row: ClicksPerMinute = serde_json::from_slice(message.payload().unwrap_or_default())
            .with_context(|| format!("{} is not a JSON row of clicks per minute", at()))?;
        let key = message.key().map(String::from_utf8_lossy);
        if key.as_deref() != Some(row.user.to_string().as_str()) {
            bail!("{} has the key {key:?}, not its user {}", at(), row.user);
        }
        *per_partition.entry(message.partition()).or_insert(0) += 1;
        rows.push((row.user as u64, row.minute / 1_000, row.clicks as u64));
    }
    Ok(Committed {
        rows,
        per_partition,
    })
}
