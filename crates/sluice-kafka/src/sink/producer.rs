//! The sink's producers: a librdkafka `BaseProducer` with a context that keeps the first
//! delivery error (the next write or barrier fails the job with it, naming topic and partition)
//! and, for a transactional producer, the producer id and epoch the broker assigned.
//!
//! librdkafka has no call that returns them, so they are read from its own `eos` debug line
//! ("Acquired PID{Id:…,Epoch:…}", logged whenever the id or epoch changes); a transaction's
//! identity is stored in the checkpoint so that a later process can commit it (`resume.rs`).
//! The parse is a pure function with tests, and the sink test against the broker checks it on
//! the librdkafka this crate builds.

use crate::error::KafkaError;
use crate::settings::KafkaSettings;
use rdkafka::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError as RdError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// A producer id and epoch, as the broker assigned them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct ProducerIdentity {
    pub(crate) producer_id: i64,
    pub(crate) epoch: i16,
}

/// The producer id and epoch in a librdkafka log line, if it announces them.
pub(crate) fn acquired_identity(line: &str) -> Option<ProducerIdentity> {
    let rest = &line[line.find("Acquired PID{Id:")? + "Acquired PID{Id:".len()..];
    let (id, rest) = rest.split_once(",Epoch:")?;
    let epoch = rest.split('}').next()?;
    Some(ProducerIdentity {
        producer_id: id.trim().parse().ok()?,
        epoch: epoch.trim().parse().ok()?,
    })
}

#[derive(Default)]
struct Shared {
    identity: Option<ProducerIdentity>,
    /// The first failed delivery: its topic and what failed.
    delivery_error: Option<(String, String)>,
}

/// The producers' context (see the module docs).
#[derive(Clone, Default)]
pub(crate) struct SinkContext {
    shared: Arc<(Mutex<Shared>, Condvar)>,
}

impl SinkContext {
    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The identity, waiting up to `timeout` for librdkafka's line announcing it (the
    /// producer's polling thread serves its logs).
    fn wait_identity(&self, timeout: Duration) -> Option<ProducerIdentity> {
        let guard = self.lock();
        let (guard, _) = self
            .shared
            .1
            .wait_timeout_while(guard, timeout, |s| s.identity.is_none())
            .unwrap_or_else(PoisonError::into_inner);
        guard.identity
    }
}

impl ClientContext for SinkContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, line: &str) {
        if let Some(id) = acquired_identity(line) {
            self.lock().identity = Some(id);
            self.shared.1.notify_all();
        }
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => tracing::error!(target: "librdkafka", "{fac} {line}"),
            RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", "{fac} {line}"),
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", "{fac} {line}")
            }
            RDKafkaLogLevel::Debug => tracing::trace!(target: "librdkafka", "{fac} {line}"),
        }
    }

    fn error(&self, error: RdError, reason: &str) {
        tracing::warn!(target: "librdkafka", "{error}: {reason}");
    }
}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, message)) = result {
            use rdkafka::Message;
            let mut shared = self.lock();
            if shared.delivery_error.is_none() {
                shared.delivery_error = Some((
                    message.topic().to_string(),
                    format!(
                        "delivery to {}-{} failed: {e}",
                        message.topic(),
                        message.partition()
                    ),
                ));
            }
        }
    }
}

/// One record ready to send, borrowed from the serializer's buffers.
pub(crate) struct Outgoing<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: Option<i32>,
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) value: Option<&'a [u8]>,
    pub(crate) timestamp: Option<i64>,
    pub(crate) headers: &'a [(String, Option<Vec<u8>>)],
}

/// A producer of the sink (transactional or not).
pub(crate) struct SinkProducer {
    producer: ThreadedProducer<SinkContext>,
    context: SinkContext,
    transactional_id: Option<String>,
}

/// Metadata requests a new producer makes before it gives up on the brokers.
const REACH_ATTEMPTS: u32 = 3;
/// How long each may take unless set ([`KafkaSinkBuilder::request_timeout`](crate::KafkaSinkBuilder::request_timeout)).
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a barrier's flush or a commit may take before it fails the job.
pub(crate) const FLUSH_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `f`, which waits on librdkafka, without holding a tokio worker (see `block_in_place`).
pub(crate) fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

impl SinkProducer {
    /// A producer with `settings`; transactional with `transactional_id` (its transactions are
    /// initialised: an earlier producer with the id is fenced and its open transaction aborted).
    pub(crate) fn create(
        settings: &KafkaSettings,
        transactional_id: Option<&str>,
        transaction_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Self, KafkaError> {
        let mut config = settings.client_config();
        if let Some(id) = transactional_id {
            config.set("transactional.id", id);
            config.set(
                "transaction.timeout.ms",
                transaction_timeout.as_millis().to_string(),
            );
            // The producer id and epoch come from librdkafka's eos debug line.
            let debug = match settings.get("debug") {
                Some(d) if !d.is_empty() => format!("{d},eos"),
                _ => "eos".to_string(),
            };
            config.set("debug", debug);
            config.set_log_level(RDKafkaLogLevel::Debug);
        }
        let context = SinkContext::default();
        let producer: ThreadedProducer<SinkContext> = config
            .create_with_context(context.clone())
            .map_err(|source| KafkaError::Client {
            what: "creating a producer".into(),
            source,
        })?;
        let p = SinkProducer {
            producer,
            context,
            transactional_id: transactional_id.map(str::to_string),
        };
        blocking(|| p.check_reachable(settings.bootstrap_servers(), request_timeout))?;
        if let Some(id) = transactional_id {
            blocking(|| p.producer.init_transactions(FLUSH_TIMEOUT)).map_err(|e| {
                KafkaError::Transaction {
                    action: "initialise",
                    id: id.to_string(),
                    message: e.to_string(),
                }
            })?;
        }
        Ok(p)
    }

    /// Asks the brokers for metadata, up to [`REACH_ATTEMPTS`] times, so that brokers that are
    /// not there fail the job at once, naming them, rather than at the first barrier's flush.
    fn check_reachable(&self, servers: &str, timeout: Duration) -> Result<(), KafkaError> {
        let mut last = String::new();
        for attempt in 1..=REACH_ATTEMPTS {
            match self.producer.client().fetch_metadata(None, timeout) {
                Ok(_) => return Ok(()),
                Err(e) => {
                    tracing::warn!(
                        "kafka sink: metadata attempt {attempt} of {REACH_ATTEMPTS} at {servers} failed: {e}"
                    );
                    last = e.to_string();
                }
            }
        }
        Err(KafkaError::Unreachable {
            servers: servers.to_string(),
            attempts: REACH_ATTEMPTS,
            message: last,
        })
    }

    /// The transactional id, if any.
    pub(crate) fn transactional_id(&self) -> &str {
        self.transactional_id.as_deref().unwrap_or("")
    }

    /// The producer id and epoch the broker gave this transactional producer.
    pub(crate) fn identity(&self) -> Option<ProducerIdentity> {
        blocking(|| self.context.wait_identity(Duration::from_secs(10)))
    }

    fn txn_error(&self, action: &'static str, e: impl ToString) -> KafkaError {
        KafkaError::Transaction {
            action,
            id: self.transactional_id().to_string(),
            message: e.to_string(),
        }
    }

    /// Fails with the first delivery error seen, if any.
    pub(crate) fn check_delivery(&self) -> Result<(), KafkaError> {
        match self.context.lock().delivery_error.take() {
            Some((topic, message)) => Err(KafkaError::Send { topic, message }),
            None => Ok(()),
        }
    }

    /// Queues one record; when librdkafka's queue is full, serves delivery reports (waiting for
    /// one, off the tokio worker) until there is room.
    pub(crate) fn send(&self, r: &Outgoing<'_>) -> Result<(), KafkaError> {
        let mut record: BaseRecord<'_, [u8], [u8], ()> = BaseRecord::to(r.topic);
        if let Some(k) = r.key {
            record = record.key(k);
        }
        if let Some(v) = r.value {
            record = record.payload(v);
        }
        if let Some(p) = r.partition {
            record = record.partition(p);
        }
        if let Some(t) = r.timestamp {
            record = record.timestamp(t);
        }
        if !r.headers.is_empty() {
            let mut h = OwnedHeaders::new_with_capacity(r.headers.len());
            for (key, value) in r.headers {
                h = h.insert(Header {
                    key,
                    value: value.as_deref(),
                });
            }
            record = record.headers(h);
        }
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((
                    RdError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull),
                    back,
                )) => {
                    record = back;
                    blocking(|| self.producer.poll(Duration::from_millis(100)));
                }
                Err((e, _)) => {
                    return Err(KafkaError::Send {
                        topic: r.topic.to_string(),
                        message: e.to_string(),
                    });
                }
            }
        }
    }

    /// Waits until every queued record is acknowledged.
    pub(crate) fn flush(&self) -> Result<(), KafkaError> {
        blocking(|| self.producer.flush(FLUSH_TIMEOUT)).map_err(|source| KafkaError::Client {
            what: "flushing the producer".into(),
            source,
        })?;
        self.check_delivery()
    }

    /// Begins a transaction.
    pub(crate) fn begin(&self) -> Result<(), KafkaError> {
        self.producer
            .begin_transaction()
            .map_err(|e| self.txn_error("begin", e))
    }

    /// Commits the open transaction (flushing first).
    pub(crate) fn commit(&self) -> Result<(), KafkaError> {
        blocking(|| self.producer.commit_transaction(FLUSH_TIMEOUT))
            .map_err(|e| self.txn_error("commit", e))
    }

    /// Aborts the open transaction.
    pub(crate) fn abort(&self) -> Result<(), KafkaError> {
        blocking(|| self.producer.abort_transaction(FLUSH_TIMEOUT))
            .map_err(|e| self.txn_error("abort", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_is_read_from_librdkafkas_acquired_line() {
        assert_eq!(
            acquired_identity("[thrd:main]: Acquired PID{Id:1000,Epoch:0}"),
            Some(ProducerIdentity {
                producer_id: 1000,
                epoch: 0
            })
        );
        assert_eq!(
            acquired_identity(
                "[thrd:main]: Acquired PID{Id:7,Epoch:3} (previous PID{Id:7,Epoch:2})"
            ),
            Some(ProducerIdentity {
                producer_id: 7,
                epoch: 3
            })
        );
        assert_eq!(
            acquired_identity("Ignoring InitProduceId response (PID{Id:7,Epoch:3})"),
            None
        );
        assert_eq!(acquired_identity("Acquired PID{Invalid}"), None);
    }
}
