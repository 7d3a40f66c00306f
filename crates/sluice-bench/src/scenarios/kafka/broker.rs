//! The broker side of the `kafka` scenario: finding the broker (and failing with a message
//! naming the bootstrap servers when nothing answers), fresh topics named after the process and
//! the run, the plain producer loop that fills them, reading a topic back with
//! `read_committed` to check what a run wrote, and the broker process's CPU time.

use anyhow::{Context, bail};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, ClientContext, Message, Offset, TopicPartitionList};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Partitions of every topic the scenario makes.
pub const PARTITIONS: i32 = 4;
/// How long one metadata, admin or flush call may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// How long a read may go without a record before it fails.
const STALL: Duration = Duration::from_secs(30);

/// Set on every consumer of the scenario, the Kafka source's included: noida-db 0.2.3 answers
/// a fetch with everything from the fetch offset to the end of each partition, ignoring
/// `fetch.max.bytes` and `max.partition.fetch.bytes`, so with librdkafka's default limit of
/// 100 MB on a response the first fetch of a topic of more than about 100 MB fails ("Invalid
/// response size ...: increase receive.message.max.bytes") and the consumer retries it forever.
pub const RECEIVE_MAX: (&str, &str) = ("receive.message.max.bytes", "2147483647");

/// Runs of this process so far: every topic and transactional id prefix gets the next one.
static RUNS: AtomicU64 = AtomicU64::new(0);

/// A name unique to this process and run: `sluice-bench-kafka-<pid>-<run>-<what>`.
pub fn fresh_name(what: &str) -> String {
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    format!("sluice-bench-kafka-{}-{run}-{what}", std::process::id())
}

/// The checksum of what a side read or wrote: the record count and the sum of the value
/// lengths (the values' lengths vary, so a lost or doubled record changes it).
pub fn checksum(records: u64, bytes: u64) -> u64 {
    (records << 40) ^ bytes
}

/// The broker the scenario runs against.
pub struct Broker {
    /// Its bootstrap servers (`SLUICE_KAFKA_BOOTSTRAP`).
    pub bootstrap: String,
    /// The broker's process on this machine, when it is noida-db ([`broker_pid`]).
    pub pid: Option<u32>,
    admin: AdminClient<DefaultClientContext>,
}

impl Broker {
    /// Connects to `bootstrap` and checks that a broker answers a metadata request; the error
    /// names the servers and how to start the CI broker.
    pub fn connect(bootstrap: &str) -> anyhow::Result<Broker> {
        let not_there = || {
            format!(
                "no Kafka broker answers at {bootstrap} (SLUICE_KAFKA_BOOTSTRAP): start one \
                 (`source .ci/kafka` starts noida-db on 127.0.0.1:19092) or point \
                 SLUICE_KAFKA_BOOTSTRAP at one"
            )
        };
        let probe: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .set("group.id", "sluice-bench-probe")
            .create()
            .with_context(not_there)?;
        let metadata = probe
            .fetch_metadata(None, Duration::from_secs(5))
            .with_context(not_there)?;
        if metadata.brokers().is_empty() {
            bail!("{}: the metadata lists no brokers", not_there());
        }
        let admin = ClientConfig::new()
            .set("bootstrap.servers", bootstrap)
            .create()
            .with_context(not_there)?;
        Ok(Broker {
            bootstrap: bootstrap.to_string(),
            pid: broker_pid(),
            admin,
        })
    }

    /// Creates `topic` with [`PARTITIONS`] partitions and waits until its metadata shows them
    /// all with a leader.
    pub fn create_topic(&self, topic: &str) -> anyhow::Result<()> {
        let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
        let results = futures::executor::block_on(self.admin.create_topics(
            &[NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1))],
            &options,
        ))
        .with_context(|| format!("creating topic {topic} on {}", self.bootstrap))?;
        for r in results {
            if let Err((name, code)) = r {
                bail!("creating topic {name} on {}: {code}", self.bootstrap);
            }
        }
        let consumer = self.consumer("sluice-bench-meta", false)?;
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let metadata = consumer
                .fetch_metadata(Some(topic), Duration::from_secs(5))
                .with_context(|| format!("metadata of {topic} from {}", self.bootstrap))?;
            let ready = metadata.topics().iter().any(|t| {
                t.name() == topic
                    && t.error().is_none()
                    && t.partitions().len() == PARTITIONS as usize
                    && t.partitions().iter().all(|p| p.leader() >= 0)
            });
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "topic {topic} on {} has no leaders for its {PARTITIONS} partitions after {TIMEOUT:?}",
                    self.bootstrap
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Deletes `topic` (best effort: a failure is only reported on stderr).
    pub fn delete_topic(&self, topic: &str) {
        let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
        match futures::executor::block_on(self.admin.delete_topics(&[topic], &options)) {
            Ok(results) => {
                for r in results {
                    if let Err((name, code)) = r {
                        eprintln!("... warning: could not delete topic {name}: {code}");
                    }
                }
            }
            Err(e) => eprintln!("... warning: could not delete topic {topic}: {e}"),
        }
    }

    /// A plain consumer with the settings the Kafka source gives its own (no auto commit,
    /// partition ends reported) and [`RECEIVE_MAX`], `read_committed` if asked.
    pub fn consumer(&self, group: &str, read_committed: bool) -> anyhow::Result<BaseConsumer> {
        ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set(RECEIVE_MAX.0, RECEIVE_MAX.1)
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "true")
            .set("auto.offset.reset", "earliest")
            .set(
                "isolation.level",
                if read_committed {
                    "read_committed"
                } else {
                    "read_uncommitted"
                },
            )
            .create()
            .with_context(|| format!("creating a consumer of {}", self.bootstrap))
    }

    /// A plain producer with librdkafka's defaults (`linger.ms` 5, as the Kafka sink leaves
    /// it), keeping the first delivery error.
    pub fn producer(&self) -> anyhow::Result<ThreadedProducer<Deliveries>> {
        ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create_with_context(Deliveries::default())
            .with_context(|| format!("creating a producer of {}", self.bootstrap))
    }

    /// Writes records `0..n` of `value` into `topic` with a plain producer, spread evenly over
    /// the partitions when `spread` (record `i` into partition `i % PARTITIONS`), else where
    /// librdkafka's default partitioner puts them; flushes, and fails on any delivery error.
    /// Returns the checksum of what it sent.
    pub fn produce(
        &self,
        topic: &str,
        n: u64,
        spread: bool,
        value: impl Fn(u64) -> String,
    ) -> anyhow::Result<u64> {
        let producer = self.producer()?;
        let mut bytes = 0u64;
        for i in 0..n {
            let v = value(i);
            bytes += v.len() as u64;
            let mut record: BaseRecord<'_, (), [u8], ()> =
                BaseRecord::to(topic).payload(v.as_bytes());
            if spread {
                record = record.partition((i % PARTITIONS as u64) as i32);
            }
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        // As the sink does: serve delivery reports until there is room.
                        record = back;
                        producer.poll(Duration::from_millis(100));
                    }
                    Err((e, _)) => bail!("sending to {topic} on {}: {e}", self.bootstrap),
                }
            }
        }
        producer
            .flush(TIMEOUT)
            .with_context(|| format!("flushing the producer of {topic}"))?;
        producer.context().check()?;
        Ok(checksum(n, bytes))
    }

    /// Reads every committed record of `topic` (`read_committed`, from offset 0 to each
    /// partition's end) and returns the checksum of what it read: what a run wrote, as a reader
    /// sees it.
    pub fn read_back(&self, topic: &str) -> anyhow::Result<u64> {
        let consumer = self.consumer(&format!("{topic}-check"), true)?;
        let (records, bytes) = read_to_end(&consumer, topic, true, |v| v.len() as u64)?;
        Ok(checksum(records, bytes))
    }
}

/// Assigns every partition of `topic` from offset 0 and reads until each reaches its end:
/// the end of partition librdkafka reports (`until_eof`, for `read_committed` reads, which end
/// at the last stable offset) or the high watermark fetched at the start. Calls `f` on each
/// value; returns the records read and the sum of what `f` returned.
pub fn read_to_end(
    consumer: &BaseConsumer,
    topic: &str,
    until_eof: bool,
    mut f: impl FnMut(&[u8]) -> u64,
) -> anyhow::Result<(u64, u64)> {
    let mut ends = Vec::with_capacity(PARTITIONS as usize);
    for p in 0..PARTITIONS {
        let (_, high) = consumer
            .fetch_watermarks(topic, p, TIMEOUT)
            .with_context(|| format!("watermarks of {topic}-{p}"))?;
        ends.push(high);
    }
    let mut list = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        list.add_partition_offset(topic, p, Offset::Offset(0))
            .with_context(|| format!("assigning {topic}-{p}"))?;
    }
    consumer
        .assign(&list)
        .with_context(|| format!("assigning {topic}"))?;
    // Partitions still to read: with `until_eof` until librdkafka says the partition ended,
    // else until the offset before the high watermark was read.
    let mut open: Vec<bool> = ends.iter().map(|&e| until_eof || e > 0).collect();
    let mut left = open.iter().filter(|o| **o).count();
    let (mut records, mut sum) = (0u64, 0u64);
    let mut last = Instant::now();
    let (mut errors, mut first_error) = (0u64, None);
    while left > 0 {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                records += 1;
                sum += f(m.payload().unwrap_or_default());
                let p = m.partition() as usize;
                if !until_eof && m.offset() + 1 >= ends[p] && open[p] {
                    open[p] = false;
                    left -= 1;
                }
                last = Instant::now();
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                let p = p as usize;
                if until_eof && p < open.len() && open[p] {
                    open[p] = false;
                    left -= 1;
                }
            }
            Some(Err(e)) => {
                // As the Kafka source does: librdkafka goes on fetching after a consume error,
                // and the checksum shows whether anything was lost.
                errors += 1;
                if first_error.is_none() {
                    first_error = Some(e.to_string());
                }
                if errors > 10_000 {
                    bail!("reading {topic}: {errors} consume errors, the first: {e}");
                }
            }
            None if last.elapsed() > STALL => {
                bail!("reading {topic}: no record for {STALL:?} with {left} partitions left")
            }
            None => {}
        }
    }
    if let Some(e) = first_error {
        eprintln!(
            "... note: reading {topic}, librdkafka reported {errors} consume errors (the first: \
             {e}); {records} records read"
        );
    }
    Ok((records, sum))
}

/// A producer context that keeps the first delivery error.
#[derive(Default)]
pub struct Deliveries {
    error: Mutex<Option<String>>,
}

impl Deliveries {
    /// Fails with the first delivery error, if there was one.
    pub fn check(&self) -> anyhow::Result<()> {
        let error = self.error.lock().map(|mut e| e.take()).unwrap_or_default();
        match error {
            Some(e) => bail!("{e}"),
            None => Ok(()),
        }
    }
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, m)) = result
            && let Ok(mut first) = self.error.lock()
            && first.is_none()
        {
            *first = Some(format!(
                "delivery to {}-{} failed: {e}",
                m.topic(),
                m.partition()
            ));
        }
    }
}

/// The pid of the broker process when it runs on this machine as noida-db: the one process
/// whose executable is called `noida-db` (its Python launcher has the same command name but
/// runs `python3`), for its CPU time per run.
pub fn broker_pid() -> Option<u32> {
    let mut found = std::fs::read_dir("/proc").ok()?.filter_map(|e| {
        let e = e.ok()?;
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let exe = std::fs::read_link(e.path().join("exe")).ok()?;
        (exe.file_name()? == "noida-db").then_some(pid)
    });
    let pid = found.next()?;
    found.next().is_none().then_some(pid)
}

/// The CPU time (user and system) process `pid` used so far, from `/proc/<pid>/stat`.
pub fn cpu_time_of(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis((utime + stime) * 10))
}
