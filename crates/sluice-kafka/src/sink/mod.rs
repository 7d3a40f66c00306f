//! [`KafkaSink`]: writes a stream to Kafka with delivery guarantee none, at-least-once or
//! exactly-once, driven by the runtime's two-phase-commit operator.
//!
//! - **None**: records are sent as they come; flushed when the sink closes.
//! - **At-least-once**: every checkpoint barrier waits until every record sent so far is
//!   acknowledged (Flink's flush on checkpoint); after a failure records may be written twice.
//! - **Exactly-once**: one Kafka transaction per checkpoint, taken from a bounded pool of
//!   transactional ids per subtask (`pool.rs`); flushed at the barrier (pre-commit), its
//!   transactional id, producer id and epoch stored in the checkpoint, committed when the
//!   checkpoint completes. After a restore the transactions pre-committed in the restored
//!   checkpoint are committed with an `EndTxn` request for their stored producer id and epoch
//!   (`resume.rs`), then every id they and this subtask could have used is fenced, which aborts
//!   whatever is still open. Readers must read with `isolation.level=read_committed`.
//!
//! Inside: `serialize.rs` (records → topic, key, value, headers), `producer.rs` (librdkafka's
//! producer, its delivery errors and its producer id), `pool.rs` (the ids, pure), `resume.rs`.

mod pool;
mod producer;
mod resume;
mod serialize;

pub use serialize::{KafkaRecordSerializer, PreviewRecord};

use crate::error::KafkaError;
use crate::settings::KafkaSettings;
use pool::Group;
use producer::{Outgoing, ProducerIdentity, SinkProducer};
use serde::{Deserialize, Serialize};
use serialize::Parts;
use sluice_core::{CheckpointId, Data, UserError};
use sluice_runtime::api::{Restored, TwoPhaseCommitSink};
use sluice_runtime::checkpoint::CheckpointSettings;
use sluice_runtime::{DataStream, DataStreamSink, OperatorContext};
use std::time::Duration;

/// What a [`KafkaSink`] promises about each record (Flink's `DeliveryGuarantee`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeliveryGuarantee {
    /// Sent, never waited for: records may be lost or doubled after a failure.
    None,
    /// Every checkpoint waits for every record sent before it: none lost, some may be doubled.
    #[default]
    AtLeastOnce,
    /// Kafka transactions committed with the checkpoints: each record visible once to
    /// `read_committed` readers.
    ExactlyOnce,
}

/// Transactions an exactly-once subtask may have at once, by default (one open, the rest
/// pre-committed and waiting for their checkpoints to complete).
pub const DEFAULT_POOL_SIZE: u32 = 4;

/// The transaction timeout by default: Apache Kafka's default `transaction.max.timeout.ms`, the
/// longest a broker accepts unless raised.
pub const DEFAULT_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// Settings the sink sets itself.
const RESERVED: &[&str] = &["transactional.id", "transaction.timeout.ms"];

/// One transaction of a [`KafkaSink`], as stored in checkpoints. Users do not build these.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KafkaTransaction {
    inner: Txn,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
enum Txn {
    /// At-least-once or none: nothing to commit.
    Plain,
    /// A Kafka transaction on slot `slot` of `group`.
    Kafka {
        group: Group,
        slot: u32,
        transactional_id: String,
        identity: Option<ProducerIdentity>,
        records: u64,
    },
}

/// Writes records to Kafka (Flink's `KafkaSink`); add it with
/// [`KafkaSinkExt::sink_to_kafka`].
///
/// ```no_run
/// use sluice_kafka::{DeliveryGuarantee, KafkaRecordSerializer, KafkaSink, KafkaSinkExt};
/// use sluice_runtime::prelude::*;
/// use std::time::Duration;
///
/// let sink = KafkaSink::<String>::builder()
///     .bootstrap_servers("127.0.0.1:9092")
///     .record_serializer(KafkaRecordSerializer::bytes("greetings"))
///     .delivery_guarantee(DeliveryGuarantee::ExactlyOnce)
///     .transactional_id_prefix("greetings-job")
///     .build()
///     .unwrap();
/// let env = StreamEnvironment::new();
/// env.enable_checkpointing(Duration::from_secs(1));
/// env.from_iter(["hello".to_string(), "world".to_string()]).sink_to_kafka(sink);
/// env.execute_blocking("greetings").unwrap();
/// ```
pub struct KafkaSink<T> {
    spec: ProducerSpec,
    serializer: KafkaRecordSerializer<T>,
    guarantee: DeliveryGuarantee,
    prefix: String,
    pool_size: u32,
    running: Option<Running>,
}

impl<T> Clone for KafkaSink<T> {
    fn clone(&self) -> Self {
        KafkaSink {
            spec: self.spec.clone(),
            serializer: self.serializer.clone(),
            guarantee: self.guarantee,
            prefix: self.prefix.clone(),
            pool_size: self.pool_size,
            running: None,
        }
    }
}

/// What every producer of a sink is made with.
#[derive(Clone)]
struct ProducerSpec {
    settings: KafkaSettings,
    transaction_timeout: Duration,
    request_timeout: Duration,
}

impl ProducerSpec {
    /// A producer, transactional with `id` (its id initialised, so fenced).
    fn make(&self, id: Option<&str>) -> Result<SinkProducer, UserError> {
        SinkProducer::create(
            &self.settings,
            id,
            self.transaction_timeout,
            self.request_timeout,
        )
        .map_err(user)
    }

    /// Makes a transactional producer for `id` on a thread of its own, dropping `old` there
    /// first, so that the task does not wait for librdkafka's start and `init_transactions` (a
    /// round trip to the transaction coordinator) unless it needs the producer at once.
    fn make_in_background(
        &self,
        id: String,
        old: Option<SinkProducer>,
    ) -> Result<Making, UserError> {
        let spec = self.clone();
        std::thread::Builder::new()
            .name(format!("kafka-producer-{id}"))
            .spawn(move || {
                drop(old);
                SinkProducer::create(
                    &spec.settings,
                    Some(&id),
                    spec.transaction_timeout,
                    spec.request_timeout,
                )
            })
            .map_err(|e| format!("cannot start a thread to make a Kafka producer: {e}").into())
    }
}

/// One slot of the pool: its producer (made when the slot is first used, or when fenced) and
/// whether a transaction holds it.
struct Slot {
    producer: Option<SinkProducer>,
    busy: bool,
    /// A producer being made for the slot on its own thread (after a commit, or while the
    /// pool is fenced), taken at the slot's next use.
    making: Option<Making>,
}

/// A producer being made (and its transactional id initialised) on a thread of its own.
type Making = std::thread::JoinHandle<Result<SinkProducer, KafkaError>>;

/// Waits for a producer made by [`ProducerSpec::make_in_background`].
fn wait_made(making: Making) -> Result<SinkProducer, UserError> {
    match producer::blocking(|| making.join()) {
        Ok(made) => made.map_err(user),
        Err(panic) => Err(format!(
            "making a Kafka producer panicked: {}",
            sluice_core::panic_message(&*panic)
        )
        .into()),
    }
}

/// What one subtask holds while it runs.
struct Running {
    operator: String,
    group: Group,
    plain: Option<SinkProducer>,
    slots: Vec<Slot>,
    parts: Parts,
    /// Whether every id of the own group was fenced (at the first transaction, or by `recover`).
    fenced: bool,
}

/// Builds a [`KafkaSink`].
pub struct KafkaSinkBuilder<T> {
    settings: KafkaSettings,
    serializer: Option<KafkaRecordSerializer<T>>,
    guarantee: DeliveryGuarantee,
    prefix: Option<String>,
    pool_size: u32,
    transaction_timeout: Duration,
    request_timeout: Duration,
}

impl<T> KafkaSink<T> {
    /// A builder: bootstrap servers and a record serializer are required; exactly-once also needs
    /// a transactional id prefix.
    pub fn builder() -> KafkaSinkBuilder<T> {
        KafkaSinkBuilder {
            settings: KafkaSettings::default(),
            serializer: None,
            guarantee: DeliveryGuarantee::default(),
            prefix: None,
            pool_size: DEFAULT_POOL_SIZE,
            transaction_timeout: DEFAULT_TRANSACTION_TIMEOUT,
            request_timeout: producer::DEFAULT_REQUEST_TIMEOUT,
        }
    }

    /// The delivery guarantee.
    pub fn delivery_guarantee(&self) -> DeliveryGuarantee {
        self.guarantee
    }
}

impl<T> KafkaSinkBuilder<T> {
    /// The brokers (`host:port[,host:port...]`).
    pub fn bootstrap_servers(mut self, servers: impl Into<String>) -> Self {
        self.settings = self.settings.set("bootstrap.servers", servers);
        self
    }

    /// All client settings at once (replacing those set so far).
    pub fn settings(mut self, settings: KafkaSettings) -> Self {
        self.settings = settings;
        self
    }

    /// A librdkafka producer property (security settings included).
    pub fn property(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.settings = self.settings.set(name, value);
        self
    }

    /// How records become Kafka records.
    pub fn record_serializer(mut self, serializer: KafkaRecordSerializer<T>) -> Self {
        self.serializer = Some(serializer);
        self
    }

    /// The delivery guarantee (at-least-once by default, as in Flink).
    pub fn delivery_guarantee(mut self, guarantee: DeliveryGuarantee) -> Self {
        self.guarantee = guarantee;
        self
    }

    /// The prefix of the transactional ids (exactly-once): unique to the job among everything
    /// writing to the cluster, and the same when the job is restored.
    pub fn transactional_id_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Some(prefix.into());
        self
    }

    /// Transactions a subtask may hold at once (exactly-once; [`DEFAULT_POOL_SIZE`]): one open
    /// and the pre-committed ones whose checkpoints have not completed yet.
    pub fn transactional_id_pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// Kafka's `transaction.timeout.ms` ([`DEFAULT_TRANSACTION_TIMEOUT`]): a broker aborts a
    /// transaction open longer. It must be longer than the checkpoint interval (checked at
    /// submit) and than the longest outage to recover from, or a restored checkpoint's
    /// transactions are gone; it may not exceed the broker's `transaction.max.timeout.ms`.
    pub fn transaction_timeout(mut self, timeout: Duration) -> Self {
        self.transaction_timeout = timeout;
        self
    }

    /// How long each of the three metadata requests a new producer makes may take before the
    /// brokers count as unreachable (10 s by default).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The sink, after checking the settings.
    pub fn build(self) -> Result<KafkaSink<T>, KafkaError> {
        let bad = |message: String| KafkaError::Settings {
            role: "sink".into(),
            message,
        };
        let serializer = self
            .serializer
            .ok_or_else(|| bad("no record serializer is set".into()))?;
        self.settings.check("sink", RESERVED)?;
        let prefix = match (self.guarantee, self.prefix) {
            (DeliveryGuarantee::ExactlyOnce, None) => {
                return Err(bad(
                    "exactly-once needs a transactional id prefix (transactional_id_prefix)".into(),
                ));
            }
            (_, Some(p)) if p.is_empty() || p.len() > 200 => {
                return Err(bad(format!(
                    "the transactional id prefix {p:?} must have 1 to 200 characters"
                )));
            }
            (_, p) => p.unwrap_or_default(),
        };
        if self.request_timeout.is_zero() {
            return Err(bad("the request timeout must be positive".into()));
        }
        if self.pool_size == 0 {
            return Err(bad(
                "the transactional id pool size must be at least 1".into()
            ));
        }
        if self.transaction_timeout < Duration::from_secs(1)
            || self.transaction_timeout.as_millis() > i32::MAX as u128
        {
            return Err(bad(format!(
                "transaction timeout {:?} is out of range (1 s to {} ms)",
                self.transaction_timeout,
                i32::MAX
            )));
        }
        Ok(KafkaSink {
            spec: ProducerSpec {
                settings: self.settings,
                transaction_timeout: self.transaction_timeout,
                request_timeout: self.request_timeout,
            },
            serializer,
            guarantee: self.guarantee,
            prefix,
            pool_size: self.pool_size,
            running: None,
        })
    }
}

/// Adds `sink_to_kafka` to streams.
pub trait KafkaSinkExt<T> {
    /// Writes the stream to Kafka through `sink` (operator name "Sink: Kafka").
    fn sink_to_kafka(&self, sink: KafkaSink<T>) -> DataStreamSink;
}

impl<T: Data> KafkaSinkExt<T> for DataStream<T> {
    fn sink_to_kafka(&self, sink: KafkaSink<T>) -> DataStreamSink {
        self.sink_to_exactly_once(sink).name("Sink: Kafka")
    }
}

fn user(e: KafkaError) -> UserError {
    Box::new(e)
}

impl<T> KafkaSink<T> {
    fn running(&mut self) -> Result<&mut Running, UserError> {
        self.running
            .as_mut()
            .ok_or_else(|| "the Kafka sink was used before it was opened".into())
    }

    /// The producer of slot `slot`, made (and its id fenced) when missing.
    fn slot_producer(&mut self, slot: u32) -> Result<&SinkProducer, UserError> {
        let KafkaSink {
            spec,
            prefix,
            running,
            ..
        } = self;
        let r = running
            .as_mut()
            .ok_or("the Kafka sink was used before it was opened")?;
        let id = r.group.id(prefix, slot);
        let s = r
            .slots
            .get_mut(slot as usize)
            .ok_or_else(|| format!("no slot {slot} in the pool of {}", r.operator))?;
        if s.producer.is_none() {
            s.producer = Some(match s.making.take() {
                Some(making) => wait_made(making)?,
                None => spec.make(Some(&id))?,
            });
        }
        s.producer
            .as_ref()
            .ok_or_else(|| format!("slot {slot} has no producer").into())
    }

    /// The producer of `slot` (or the plain one), if made.
    fn producer_ref(&self, slot: Option<u32>) -> Option<&SinkProducer> {
        let r = self.running.as_ref()?;
        match slot {
            Some(s) => r.slots.get(s as usize)?.producer.as_ref(),
            None => r.plain.as_ref(),
        }
    }

    /// Makes every slot's producer: fences each id of the own group, aborting what is open.
    fn fence_own_group(&mut self) -> Result<(), UserError> {
        // All ids at once: each initialisation is a round trip to the transaction coordinator.
        let KafkaSink {
            spec,
            prefix,
            running,
            ..
        } = self;
        let r = running
            .as_mut()
            .ok_or("the Kafka sink was used before it was opened")?;
        let group = r.group;
        for (slot, s) in r.slots.iter_mut().enumerate() {
            if s.producer.is_none() && s.making.is_none() {
                s.making = Some(spec.make_in_background(group.id(prefix, slot as u32), None)?);
            }
        }
        for slot in 0..self.pool_size {
            self.slot_producer(slot)?;
        }
        self.running()?.fenced = true;
        Ok(())
    }

    fn plain(&mut self) -> Result<&SinkProducer, UserError> {
        let KafkaSink { spec, running, .. } = self;
        let r = running
            .as_mut()
            .ok_or("the Kafka sink was used before it was opened")?;
        if r.plain.is_none() {
            r.plain = Some(spec.make(None)?);
        }
        r.plain
            .as_ref()
            .ok_or_else(|| "the sink has no producer".into())
    }

    /// Frees the slot of a finished transaction; after one that reached the broker the slot
    /// gets a new producer (a new epoch) before its next use (see `pool.rs`).
    fn release(&mut self, slot: u32, renew: bool) -> Result<(), UserError> {
        let KafkaSink {
            spec,
            prefix,
            running,
            ..
        } = self;
        let r = running
            .as_mut()
            .ok_or("the Kafka sink was used before it was opened")?;
        let id = r.group.id(prefix, slot);
        if let Some(s) = r.slots.get_mut(slot as usize) {
            s.busy = false;
            if renew {
                let old = s.producer.take();
                s.making = Some(spec.make_in_background(id, old)?);
            }
        }
        Ok(())
    }
}

impl<T: Data> TwoPhaseCommitSink<T> for KafkaSink<T> {
    type Transaction = KafkaTransaction;

    fn validate(&self, checkpoints: Option<&CheckpointSettings>) -> Result<(), UserError> {
        if self.guarantee == DeliveryGuarantee::ExactlyOnce
            && let Some(c) = checkpoints
            && self.spec.transaction_timeout <= c.interval
        {
            return Err(format!(
                "the Kafka transaction timeout ({} ms, transaction.timeout.ms) must be longer than \
                 the checkpoint interval ({} ms): a broker would abort each transaction before its \
                 checkpoint completes",
                self.spec.transaction_timeout.as_millis(),
                c.interval.as_millis()
            )
            .into());
        }
        Ok(())
    }

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let to_u32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        self.running = Some(Running {
            operator: ctx.describe(),
            group: Group {
                parallelism: to_u32(ctx.parallelism()),
                subtask: to_u32(ctx.subtask_index()),
                size: self.pool_size,
            },
            plain: None,
            slots: (0..self.pool_size)
                .map(|_| Slot {
                    producer: None,
                    busy: false,
                    making: None,
                })
                .collect(),
            parts: Parts::default(),
            fenced: false,
        });
        Ok(())
    }

    fn begin_transaction(&mut self) -> Result<KafkaTransaction, UserError> {
        if self.guarantee != DeliveryGuarantee::ExactlyOnce {
            return Ok(KafkaTransaction { inner: Txn::Plain });
        }
        if !self.running()?.fenced {
            // A fresh start: what an earlier run left open on these ids is aborted too.
            self.fence_own_group()?;
        }
        let prefix = self.prefix.clone();
        let r = self.running()?;
        let busy: Vec<bool> = r.slots.iter().map(|s| s.busy).collect();
        let group = r.group;
        let Some(slot) = pool::free_slot(&busy) else {
            return Err(format!(
                "{}: all {} transactional ids ({}-*) hold transactions waiting for their \
                 checkpoints to complete; raise transactional_id_pool_size",
                r.operator,
                group.size,
                group.id(&prefix, 0).trim_end_matches("-0")
            )
            .into());
        };
        let producer = self.slot_producer(slot)?;
        producer.begin().map_err(user)?;
        let identity = producer.identity();
        let transactional_id = producer.transactional_id().to_string();
        if let Some(s) = self.running()?.slots.get_mut(slot as usize) {
            s.busy = true;
        }
        Ok(KafkaTransaction {
            inner: Txn::Kafka {
                group,
                slot,
                transactional_id,
                identity,
                records: 0,
            },
        })
    }

    fn write(&mut self, txn: &mut KafkaTransaction, batch: Vec<T>) -> Result<(), UserError> {
        let (producer, written) = match &mut txn.inner {
            Txn::Plain => (None, None),
            Txn::Kafka { slot, records, .. } => (Some(*slot), Some(records)),
        };
        let mut parts = std::mem::take(&mut self.running()?.parts);
        let result = (|| {
            match producer {
                Some(slot) => self.slot_producer(slot)?,
                None => self.plain()?,
            };
            let p = self
                .producer_ref(producer)
                .ok_or("the sink has no producer for its transaction")?;
            for record in &batch {
                let topic_fixed = self.serializer.default_topic();
                self.serializer
                    .fill(record, &mut parts)
                    .map_err(|message| {
                        user(KafkaError::Send {
                            topic: parts
                                .topic
                                .clone()
                                .unwrap_or_else(|| topic_fixed.to_string()),
                            message: format!("cannot serialize a record: {message}"),
                        })
                    })?;
                p.send(&Outgoing {
                    topic: parts.topic.as_deref().unwrap_or(topic_fixed),
                    partition: parts.partition,
                    key: parts.has_key.then_some(parts.key.as_slice()),
                    value: Some(&parts.value),
                    timestamp: parts.timestamp,
                    headers: &parts.headers,
                })
                .map_err(user)?;
            }
            p.check_delivery().map_err(user)
        })();
        self.running()?.parts = parts;
        if let Some(n) = written {
            *n += batch.len() as u64;
        }
        result
    }

    fn pre_commit(&mut self, txn: &mut KafkaTransaction) -> Result<(), UserError> {
        match &mut txn.inner {
            Txn::Plain => match self.guarantee {
                DeliveryGuarantee::AtLeastOnce => self.plain()?.flush().map_err(user),
                _ => Ok(()),
            },
            Txn::Kafka { slot, identity, .. } => {
                let p = self.slot_producer(*slot)?;
                p.flush().map_err(user)?;
                // The epoch as of now: what a later process needs to commit it.
                *identity = p.identity();
                if identity.is_none() {
                    return Err(format!(
                        "the producer of transactional id {} did not report its producer id",
                        p.transactional_id()
                    )
                    .into());
                }
                Ok(())
            }
        }
    }

    fn commit(&mut self, txn: KafkaTransaction, _: Option<CheckpointId>) -> Result<(), UserError> {
        let Txn::Kafka { slot, records, .. } = txn.inner else {
            return Ok(());
        };
        let p = self.slot_producer(slot)?;
        p.commit().map_err(user)?;
        self.release(slot, records > 0)
    }

    fn abort(&mut self, txn: KafkaTransaction) -> Result<(), UserError> {
        let Txn::Kafka { slot, records, .. } = txn.inner else {
            return Ok(());
        };
        // A slot's producer holds the transaction only in this process; a restored one is
        // aborted by fencing its id (`recover`).
        if let Some(Some(p)) = self
            .running
            .as_ref()
            .and_then(|r| r.slots.get(slot as usize))
            .map(|s| s.producer.as_ref())
        {
            p.abort().map_err(user)?;
        }
        self.release(slot, records > 0)
    }

    fn recover(&mut self, restored: Restored<KafkaTransaction>) -> Result<(), UserError> {
        let own = self.running()?.group;
        let mut groups = Vec::new();
        for (checkpoint, txn) in restored.pending {
            let Txn::Kafka {
                group,
                transactional_id,
                identity,
                records,
                ..
            } = txn.inner
            else {
                continue;
            };
            groups.push(group);
            if records == 0 {
                continue; // nothing reached the broker
            }
            let Some(identity) = identity else {
                return Err(format!(
                    "the restored transaction of {transactional_id} (checkpoint {}) has no producer id",
                    checkpoint.0
                )
                .into());
            };
            let servers = self.spec.settings.bootstrap_servers().to_string();
            let answer = producer::blocking(|| {
                resume::commit(
                    &servers,
                    &transactional_id,
                    identity.producer_id,
                    identity.epoch,
                    5,
                    Duration::from_secs(30),
                )
            })
            .map_err(|message| KafkaError::Transaction {
                action: "resume and commit",
                id: transactional_id.clone(),
                message,
            })
            .map_err(user)?;
            match answer.outcome {
                resume::Outcome::Committed => tracing::info!(
                    id = %transactional_id, checkpoint = checkpoint.0, records,
                    "committed a transaction of the restored checkpoint"
                ),
                resume::Outcome::AlreadyEnded => tracing::warn!(
                    id = %transactional_id, checkpoint = checkpoint.0, error = answer.error_code,
                    "a transaction of the restored checkpoint had been ended before: committed \
                     earlier, or lost if something else fenced its id first"
                ),
                resume::Outcome::Retry | resume::Outcome::Failed => {
                    return Err(user(KafkaError::Transaction {
                        action: "resume and commit",
                        id: transactional_id,
                        message: format!("the broker answered error {}", answer.error_code),
                    }));
                }
            }
        }
        for txn in &restored.open {
            if let Txn::Kafka { group, .. } = txn.inner {
                groups.push(group);
            }
        }
        // Fence every other group the restored states name, then take the own one into use.
        let mut fencing = Vec::new();
        for group in pool::foreign_groups(own, groups) {
            for id in group.ids(&self.prefix) {
                fencing.push(self.spec.make_in_background(id, None)?);
            }
        }
        for making in fencing {
            drop(wait_made(making)?);
        }
        if self.guarantee == DeliveryGuarantee::ExactlyOnce {
            self.fence_own_group()?;
        }
        Ok(())
    }

    fn close(&mut self) -> Result<(), UserError> {
        // Pre-committed transactions stay as they are: a restore may still commit them.
        if let Some(r) = self.running.as_mut()
            && let Some(p) = r.plain.take()
        {
            p.flush().map_err(user)?;
        }
        Ok(())
    }
}
