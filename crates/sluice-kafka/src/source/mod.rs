//! The Kafka source: [`KafkaSource`] and its [`KafkaSourceBuilder`], a FLIP-27 split source
//! with Flink's `KafkaSource` semantics.
//!
//! - `offsets.rs`: [`StartingOffsets`], [`StoppingOffsets`], [`OffsetResetStrategy`] and their
//!   pure resolution from fetched facts;
//! - `split.rs`: [`KafkaPartitionSplit`] and the rule that finishes a bounded split;
//! - `client.rs`: the enumerator's metadata consumer (worker pool only) and which topics a
//!   subscription takes;
//! - `enumerator.rs`: discovery, offset resolution and Flink's owner rule for assignment;
//! - `reader.rs` and `fetch.rs`: the reader of a subtask and its fetch thread;
//! - `deserializer.rs`: [`KafkaDeserializer`], [`KafkaRecord`], [`MalformedRecords`].

mod client;
mod deserializer;
mod enumerator;
mod fetch;
mod offsets;
mod reader;
mod split;

pub use deserializer::{KafkaDeserializer, KafkaRecord, MalformedRecords};
pub use enumerator::{KafkaEnumerator, KafkaEnumeratorCheckpoint};
pub use offsets::{OffsetResetStrategy, StartingOffsets, StoppingOffsets};
pub use reader::KafkaReader;
pub use split::KafkaPartitionSplit;

use crate::error::KafkaError;
use crate::settings::KafkaSettings;
use client::{MetadataClient, Subscription};
use enumerator::EnumeratorConfig;
use fetch::Fetcher;
use regex::Regex;
use sluice_core::{Data, UserError};
use sluice_source::{Boundedness, ReaderContext, Source, SplitEnumeratorContext};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Properties the source sets itself on its consumers.
const RESERVED: &[&str] = &[
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.partition.eof",
];
/// The partition discovery interval of an unbounded source unless set (Flink's default).
const DEFAULT_DISCOVERY: Duration = Duration::from_secs(5 * 60);
/// How long one metadata or offsets request to the brokers may take unless set.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Counters of a [`KafkaSource`], shared by all its readers (records read again after a restore
/// are counted again).
#[derive(Debug, Default)]
pub struct KafkaSourceMetrics {
    read: AtomicU64,
    skipped: AtomicU64,
}

impl KafkaSourceMetrics {
    /// Records taken from Kafka so far (passed on, dropped by the deserializer, or skipped).
    pub fn records_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// Malformed records skipped so far ([`MalformedRecords::Skip`]).
    pub fn skipped_records(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    pub(crate) fn add(&self, read: u64, skipped: u64) {
        if read > 0 {
            self.read.fetch_add(read, Ordering::Relaxed);
        }
        if skipped > 0 {
            self.skipped.fetch_add(skipped, Ordering::Relaxed);
        }
    }
}

/// The settings of a built source.
struct Config {
    settings: KafkaSettings,
    subscription: Subscription,
    group_id: String,
    starting: StartingOffsets,
    stopping: Option<StoppingOffsets>,
    discovery: Option<Duration>,
    malformed: MalformedRecords,
    commit: bool,
    wait_for_topics: bool,
    request_timeout: Duration,
}

/// Reads Kafka topics as a split source (Flink's `KafkaSource`): each topic-partition is a
/// split ([`KafkaPartitionSplit`]), discovered and assigned by an enumerator on the source
/// coordinator, read by one consumer per subtask on a fetch thread, and checkpointed with its
/// next offset, so a restored job (also at another parallelism) resumes exactly where its
/// checkpoint was.
///
/// - **Topics**: a list ([`topics`](KafkaSourceBuilder::topics); a missing one fails the job,
///   naming it, unless [`wait_for_topics`](KafkaSourceBuilder::wait_for_topics)) or a regular
///   expression over all topic names ([`topic_pattern`](KafkaSourceBuilder::topic_pattern)).
/// - **Start**: [`StartingOffsets`] (default earliest). Partitions found while the job runs
///   start from their earliest offset.
/// - **End**: unbounded by default, with partition discovery every 5 minutes; with
///   [`bounded`](KafkaSourceBuilder::bounded) each partition ends at its [`StoppingOffsets`],
///   discovery runs once and the job ends when every partition is read.
/// - **Assignment**: Flink's rule (a topic's start reader from Java's `hashCode` of its name,
///   then round robin over partitions), so a partition always goes to the same subtask for a
///   given parallelism.
/// - **Records**: the [`KafkaDeserializer`] (default: the value as JSON) makes them, with
///   access to key, headers, timestamp, topic, partition and offset; a record it refuses fails
///   the job naming topic, partition and offset, or is skipped and counted
///   ([`MalformedRecords`], [`KafkaSourceMetrics`]).
/// - **Event time**: watermarks are generated per partition (the framework's per-split
///   watermarks) by the watermark strategy given to `from_source`, which reads the timestamp
///   from the record; to use Kafka's record timestamp, put [`KafkaRecord::timestamp`] into the
///   record in the deserializer.
/// - **Offsets**: with a group id, the offsets of each completed checkpoint are committed to
///   the group (asynchronously, for monitoring: the job itself resumes from its checkpoints).
/// - **Broker unreachable**: the first metadata fetch is tried 3 times (each up to the
///   [`request_timeout`](KafkaSourceBuilder::request_timeout)), then the job fails with
///   [`KafkaError::Unreachable`] naming the bootstrap servers. Later discovery rounds that fail
///   are logged and tried again at the next interval.
///
/// ```
/// use sluice_kafka::{KafkaDeserializer, KafkaSource, StartingOffsets, StoppingOffsets};
/// use sluice_source::{Boundedness, Source};
///
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// struct Click { user: u32, ts: i64 }
///
/// let source = KafkaSource::<Click>::builder()
///     .bootstrap_servers("127.0.0.1:9092")
///     .topics(["clicks"])
///     .group_id("click-counter")
///     .starting_offsets(StartingOffsets::Earliest)
///     .bounded(StoppingOffsets::Latest)
///     .deserializer(KafkaDeserializer::json())
///     .property("fetch.min.bytes", "1")
///     .build()
///     .unwrap();
/// assert_eq!(source.boundedness(), Boundedness::Bounded);
/// assert!(source.validate().is_ok());
///
/// // Refused before anything runs: no topics, or a property librdkafka does not know.
/// assert!(KafkaSource::<Click>::builder().bootstrap_servers("h:1").build().is_err());
/// let e = KafkaSource::<Click>::builder()
///     .bootstrap_servers("h:1")
///     .topics(["clicks"])
///     .property("no.such.thing", "1")
///     .build()
///     .unwrap_err();
/// assert!(e.to_string().contains("no.such.thing"));
/// ```
///
/// In a job (needs a broker):
///
/// ```no_run
/// # use sluice_kafka::{KafkaSource, StoppingOffsets};
/// # use sluice_runtime::prelude::*;
/// # use sluice_source::FromSource;
/// # use std::time::Duration;
/// # #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// # struct Click { user: u32, ts: i64 }
/// let source = KafkaSource::<Click>::builder()
///     .bootstrap_servers("127.0.0.1:9092")
///     .topics(["clicks"])
///     .bounded(StoppingOffsets::Latest)
///     .build()
///     .unwrap();
/// let env = StreamEnvironment::new();
/// let watermarks = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_secs(1), |c: &Click| c.ts);
/// let clicks = env.from_source(source, Some(watermarks), "clicks").collect();
/// env.execute_blocking("clicks").unwrap();
/// println!("{} clicks", clicks.take().len());
/// ```
pub struct KafkaSource<T> {
    config: Arc<Config>,
    deserializer: KafkaDeserializer<T>,
    metrics: Arc<KafkaSourceMetrics>,
}

impl<T> Clone for KafkaSource<T> {
    fn clone(&self) -> Self {
        KafkaSource {
            config: self.config.clone(),
            deserializer: self.deserializer.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

impl<T> std::fmt::Debug for KafkaSource<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSource")
            .field("settings", &self.config.settings)
            .field("subscription", &self.config.subscription)
            .field("group_id", &self.config.group_id)
            .field("starting", &self.config.starting)
            .field("stopping", &self.config.stopping)
            .finish()
    }
}

impl<T: Data> KafkaSource<T> {
    /// A builder (see [`KafkaSourceBuilder`]).
    pub fn builder() -> KafkaSourceBuilder<T> {
        KafkaSourceBuilder {
            settings: KafkaSettings::default(),
            topics: Vec::new(),
            pattern: None,
            group_id: None,
            starting: StartingOffsets::Earliest,
            stopping: None,
            discovery: Discovery::Default,
            deserializer: None,
            malformed: MalformedRecords::Fail,
            commit: None,
            wait_for_topics: false,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// The source's counters (keep a clone before handing the source to `from_source`).
    pub fn metrics(&self) -> Arc<KafkaSourceMetrics> {
        self.metrics.clone()
    }

    /// The consumer group the source's consumers use (the one given, or a generated one).
    pub fn group_id(&self) -> &str {
        &self.config.group_id
    }
}

/// Partition discovery as set on the builder.
#[derive(Clone, Copy, Debug)]
enum Discovery {
    Default,
    Every(Duration),
    Off,
}

/// Builds a [`KafkaSource`]; [`build`](Self::build) checks everything it can without a broker.
#[derive(Debug)]
pub struct KafkaSourceBuilder<T> {
    settings: KafkaSettings,
    topics: Vec<String>,
    pattern: Option<String>,
    group_id: Option<String>,
    starting: StartingOffsets,
    stopping: Option<StoppingOffsets>,
    discovery: Discovery,
    deserializer: Option<KafkaDeserializer<T>>,
    malformed: MalformedRecords,
    commit: Option<bool>,
    wait_for_topics: bool,
    request_timeout: Duration,
}

impl<T: Data> KafkaSourceBuilder<T> {
    /// The brokers to bootstrap from (`host:port[,host:port...]`).
    pub fn bootstrap_servers(mut self, servers: impl Into<String>) -> Self {
        self.settings = self.settings.set("bootstrap.servers", servers);
        self
    }

    /// All client settings at once (replaces properties set before).
    pub fn settings(mut self, settings: KafkaSettings) -> Self {
        self.settings = settings;
        self
    }

    /// A librdkafka consumer property, passed through (security settings too). The source sets
    /// `enable.auto.commit`, `enable.auto.offset.store` and `enable.partition.eof` itself;
    /// `group.id` set here is the group id.
    pub fn property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings = self.settings.set(name, value);
        self
    }

    /// The topics to read.
    pub fn topics<S: Into<String>>(mut self, topics: impl IntoIterator<Item = S>) -> Self {
        self.topics.extend(topics.into_iter().map(Into::into));
        self
    }

    /// Reads every topic whose whole name matches `pattern` (a `regex` expression).
    pub fn topic_pattern(mut self, pattern: impl Into<String>) -> Self {
        self.pattern = Some(pattern.into());
        self
    }

    /// The consumer group: committed offsets are read from it
    /// ([`StartingOffsets::Committed`]) and written to it on completed checkpoints.
    pub fn group_id(mut self, group: impl Into<String>) -> Self {
        self.group_id = Some(group.into());
        self
    }

    /// Where each partition starts (default [`StartingOffsets::Earliest`]).
    pub fn starting_offsets(mut self, starting: StartingOffsets) -> Self {
        self.starting = starting;
        self
    }

    /// Bounded mode: each partition ends at `stopping`, and the job ends once all are read.
    /// Partition discovery is off (the partitions are found once, at the start).
    pub fn bounded(mut self, stopping: StoppingOffsets) -> Self {
        self.stopping = Some(stopping);
        self
    }

    /// Looks for new partitions (and topics matching the pattern) every `interval` (unbounded;
    /// default 5 minutes, as in Flink). In bounded mode it is only how often missing topics are looked for with
    /// [`wait_for_topics`](Self::wait_for_topics).
    pub fn partition_discovery(mut self, interval: Duration) -> Self {
        self.discovery = Discovery::Every(interval);
        self
    }

    /// No partition discovery: the partitions found at the start are all that is read.
    pub fn no_partition_discovery(mut self) -> Self {
        self.discovery = Discovery::Off;
        self
    }

    /// How records are made (default: [`KafkaDeserializer::json`]).
    pub fn deserializer(mut self, deserializer: KafkaDeserializer<T>) -> Self {
        self.deserializer = Some(deserializer);
        self
    }

    /// What a record the deserializer refuses does (default [`MalformedRecords::Fail`]).
    pub fn on_malformed(mut self, policy: MalformedRecords) -> Self {
        self.malformed = policy;
        self
    }

    /// Whether the offsets of each completed checkpoint are committed to the group (default:
    /// when a group id is set). Committing needs a group id.
    pub fn commit_offsets_on_checkpoint(mut self, commit: bool) -> Self {
        self.commit = Some(commit);
        self
    }

    /// Whether a listed topic that does not exist is waited for (looked for again every
    /// discovery interval, and read from its earliest offset once it appears) instead of
    /// failing the job naming it (the default). With a pattern: waits until a topic matches.
    pub fn wait_for_topics(mut self, wait: bool) -> Self {
        self.wait_for_topics = wait;
        self
    }

    /// How long one metadata or offsets request may take (default 10 s). The first metadata
    /// fetch is tried 3 times before the job fails.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The source, or what is wrong: no topics, both topics and a pattern, a bad pattern, a
    /// setting librdkafka refuses, a reserved setting, committed offsets or committing without
    /// a group id, a zero interval or timeout.
    pub fn build(self) -> Result<KafkaSource<T>, KafkaError> {
        let bad = |message: String| KafkaError::Settings {
            role: "Kafka source".into(),
            message,
        };
        let subscription = match (self.topics.is_empty(), self.pattern) {
            (true, None) => return Err(bad("no topics: set topics or a topic pattern".into())),
            (false, Some(p)) => {
                return Err(bad(format!(
                    "both topics {:?} and a topic pattern {p:?} are set: use one",
                    self.topics
                )));
            }
            (false, None) => {
                if let Some(t) = self.topics.iter().find(|t| t.trim().is_empty()) {
                    return Err(bad(format!("an empty topic name {t:?}")));
                }
                let mut topics = self.topics;
                topics.sort();
                topics.dedup();
                Subscription::Topics(topics)
            }
            (true, Some(p)) => Subscription::Pattern(
                Regex::new(&format!("^(?:{p})$"))
                    .map_err(|e| bad(format!("bad topic pattern {p:?}: {e}")))?,
            ),
        };
        self.settings.check("Kafka source", RESERVED)?;
        let from_property = self.settings.get("group.id").map(str::to_string);
        let group = match (self.group_id, from_property) {
            (Some(g), Some(p)) if g != p => {
                return Err(bad(format!(
                    "group id {g:?} and property group.id = {p:?} differ"
                )));
            }
            (Some(g), _) | (None, Some(g)) => Some(g),
            (None, None) => None,
        };
        if matches!(self.starting, StartingOffsets::Committed(_)) && group.is_none() {
            return Err(bad(
                "starting from committed offsets needs a group id".into()
            ));
        }
        if self.commit == Some(true) && group.is_none() {
            return Err(bad(
                "committing offsets on checkpoints needs a group id".into()
            ));
        }
        if let StartingOffsets::Specific(m) = &self.starting
            && let Some(((t, p), o)) = m.iter().find(|(_, o)| **o < 0)
        {
            return Err(bad(format!("starting offset {o} of {t}-{p} is negative")));
        }
        if let Some(StoppingOffsets::Specific(m)) = &self.stopping
            && let Some(((t, p), o)) = m.iter().find(|(_, o)| **o < 0)
        {
            return Err(bad(format!("stopping offset {o} of {t}-{p} is negative")));
        }
        if self.request_timeout.is_zero() {
            return Err(bad("the request timeout must be positive".into()));
        }
        let discovery = match self.discovery {
            Discovery::Every(d) if d.is_zero() => {
                return Err(bad(
                    "the partition discovery interval must be positive".into()
                ));
            }
            Discovery::Every(d) => Some(d),
            Discovery::Default if self.stopping.is_none() => Some(DEFAULT_DISCOVERY),
            Discovery::Default | Discovery::Off => None,
        };
        let commit = self.commit.unwrap_or(group.is_some());
        let group_id = group.unwrap_or_else(generated_group_id);
        Ok(KafkaSource {
            config: Arc::new(Config {
                settings: self.settings,
                subscription,
                group_id,
                starting: self.starting,
                stopping: self.stopping,
                discovery,
                malformed: self.malformed,
                commit,
                wait_for_topics: self.wait_for_topics,
                request_timeout: self.request_timeout,
            }),
            deserializer: self.deserializer.unwrap_or_else(KafkaDeserializer::json),
            metrics: Arc::default(),
        })
    }
}

/// A group id for a source given none: its consumers are only assigned partitions (never
/// subscribed) and commit nothing, so the group is never joined.
fn generated_group_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("sluice-kafka-source-{}-{nanos}", std::process::id())
}

impl<T: Data> KafkaSource<T> {
    fn enumerator_config(&self) -> Arc<EnumeratorConfig> {
        let c = &self.config;
        Arc::new(EnumeratorConfig {
            client: MetadataClient::new(c.settings.clone(), c.group_id.clone(), c.request_timeout),
            subscription: c.subscription.clone(),
            starting: c.starting.clone(),
            stopping: c.stopping.clone(),
            discovery: c.discovery,
            wait_for_topics: c.wait_for_topics,
        })
    }
}

impl<T: Data> Source for KafkaSource<T> {
    type Out = T;
    type Split = KafkaPartitionSplit;
    type Enumerator = KafkaEnumerator;
    type Reader = KafkaReader<T>;

    fn boundedness(&self) -> Boundedness {
        match self.config.stopping {
            Some(_) => Boundedness::Bounded,
            None => Boundedness::ContinuousUnbounded,
        }
    }

    fn create_enumerator(
        &self,
        _ctx: &SplitEnumeratorContext<KafkaEnumerator>,
    ) -> Result<KafkaEnumerator, UserError> {
        Ok(KafkaEnumerator::new(self.enumerator_config(), None))
    }

    fn restore_enumerator(
        &self,
        _ctx: &SplitEnumeratorContext<KafkaEnumerator>,
        checkpoint: KafkaEnumeratorCheckpoint,
    ) -> Result<KafkaEnumerator, UserError> {
        Ok(KafkaEnumerator::new(
            self.enumerator_config(),
            Some(checkpoint),
        ))
    }

    fn create_reader(&self, ctx: ReaderContext) -> Result<KafkaReader<T>, UserError> {
        let c = &self.config;
        let subtask = ctx.subtask_index();
        let mut config = c
            .settings
            .clone()
            .with_default("auto.offset.reset", "earliest")
            .with_default("client.id", &format!("sluice-source-{subtask}"))
            .client_config();
        config
            .set("group.id", &c.group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "true");
        let consumer: fetch::ReaderConsumer = config
            .create_with_context(fetch::ReaderContext)
            .map_err(|source| KafkaError::Client {
                what: format!("creating the consumer of source subtask {subtask}"),
                source,
            })?;
        let fetcher = Fetcher::start(
            consumer,
            format!("kafka-fetch-{subtask}"),
            c.stopping.is_some(),
        )
        .map_err(|e| format!("cannot start the Kafka fetch thread of subtask {subtask}: {e}"))?;
        Ok(KafkaReader::new(
            fetcher,
            self.deserializer.clone(),
            c.malformed,
            self.metrics.clone(),
            c.commit,
        ))
    }

    fn validate(&self) -> Result<(), UserError> {
        // Everything checkable without a broker was checked by `build`; check the settings
        // again in case librdkafka's view changed (it is cheap).
        self.config.settings.check("Kafka source", RESERVED)?;
        Ok(())
    }
}
