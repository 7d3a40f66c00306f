//! [`KafkaRecordSerializer`]: how a record becomes a Kafka record (topic, key, value, headers,
//! timestamp, partition). Key and value are written into buffers the sink reuses, so a record
//! costs no allocation of its own on the way to librdkafka (which copies it).

use serde::Serialize;
use std::sync::Arc;

type Writer<T> = Arc<dyn Fn(&T, &mut Vec<u8>) -> Result<(), String> + Send + Sync>;
/// A per-record function, shared by the subtasks' copies.
type PerRecord<T, R> = Option<Arc<dyn Fn(&T) -> R + Send + Sync>>;

/// What [`KafkaRecordSerializer::preview`] shows of a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreviewRecord {
    /// The topic.
    pub topic: String,
    /// The key, if the serializer sets one.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Vec<u8>,
}

/// Turns records of type `T` into Kafka records (Flink's `KafkaRecordSerializationSchema`).
///
/// ```
/// use sluice_kafka::KafkaRecordSerializer;
/// #[derive(serde::Serialize)]
/// struct Count { user: u64, clicks: u64 }
///
/// let s = KafkaRecordSerializer::<Count>::json("counts")
///     .key(|c: &Count| c.user.to_string())
///     .headers(|_| vec![("source".to_string(), b"sluice".to_vec())])
///     .timestamp(|_| 1_700_000_000_000);
/// let r = s.preview(&Count { user: 7, clicks: 3 }).unwrap();
/// assert_eq!((r.topic.as_str(), r.key.as_deref()), ("counts", Some(&b"7"[..])));
/// assert_eq!(r.value, br#"{"user":7,"clicks":3}"#);
/// ```
pub struct KafkaRecordSerializer<T> {
    topic: String,
    topic_selector: PerRecord<T, String>,
    value: Writer<T>,
    key: Option<Writer<T>>,
    headers: PerRecord<T, Vec<(String, Vec<u8>)>>,
    timestamp: PerRecord<T, i64>,
    partition: PerRecord<T, i32>,
}

impl<T> Clone for KafkaRecordSerializer<T> {
    fn clone(&self) -> Self {
        KafkaRecordSerializer {
            topic: self.topic.clone(),
            topic_selector: self.topic_selector.clone(),
            value: self.value.clone(),
            key: self.key.clone(),
            headers: self.headers.clone(),
            timestamp: self.timestamp.clone(),
            partition: self.partition.clone(),
        }
    }
}

impl<T: Serialize> KafkaRecordSerializer<T> {
    /// Values as JSON (`serde_json`) into `topic`.
    pub fn json(topic: impl Into<String>) -> Self {
        Self::new(topic, |r: &T, out: &mut Vec<u8>| {
            serde_json::to_writer(out, r).map_err(|e| format!("cannot encode JSON: {e}"))
        })
    }
}

impl<T: AsRef<[u8]>> KafkaRecordSerializer<T> {
    /// Values as the record's own bytes (`Vec<u8>`, `String`, ...) into `topic`.
    pub fn bytes(topic: impl Into<String>) -> Self {
        Self::new(topic, |r: &T, out: &mut Vec<u8>| {
            out.extend_from_slice(r.as_ref());
            Ok(())
        })
    }
}

impl<T> KafkaRecordSerializer<T> {
    /// Values written by `value` (into an empty buffer) into `topic`.
    pub fn new(
        topic: impl Into<String>,
        value: impl Fn(&T, &mut Vec<u8>) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        KafkaRecordSerializer {
            topic: topic.into(),
            topic_selector: None,
            value: Arc::new(value),
            key: None,
            headers: None,
            timestamp: None,
            partition: None,
        }
    }

    /// The key of each record (Kafka's default partitioner hashes it).
    pub fn key<K: AsRef<[u8]>>(mut self, key: impl Fn(&T) -> K + Send + Sync + 'static) -> Self {
        self.key = Some(Arc::new(move |r: &T, out: &mut Vec<u8>| {
            out.extend_from_slice(key(r).as_ref());
            Ok(())
        }));
        self
    }

    /// The topic of each record, instead of the fixed one.
    pub fn topic_selector(mut self, f: impl Fn(&T) -> String + Send + Sync + 'static) -> Self {
        self.topic_selector = Some(Arc::new(f));
        self
    }

    /// Headers of each record.
    pub fn headers(
        mut self,
        f: impl Fn(&T) -> Vec<(String, Vec<u8>)> + Send + Sync + 'static,
    ) -> Self {
        self.headers = Some(Arc::new(f));
        self
    }

    /// The timestamp (epoch milliseconds) of each record; without it the producer's clock.
    pub fn timestamp(mut self, f: impl Fn(&T) -> i64 + Send + Sync + 'static) -> Self {
        self.timestamp = Some(Arc::new(f));
        self
    }

    /// The partition of each record; without it the key decides (or librdkafka spreads them).
    pub fn partition(mut self, f: impl Fn(&T) -> i32 + Send + Sync + 'static) -> Self {
        self.partition = Some(Arc::new(f));
        self
    }

    /// The fixed topic (when no selector is set).
    pub fn default_topic(&self) -> &str {
        &self.topic
    }

    /// What `record` becomes: topic, key and value (for tests and for checking a serializer).
    pub fn preview(&self, record: &T) -> Result<PreviewRecord, String> {
        let mut parts = Parts::default();
        self.fill(record, &mut parts)?;
        Ok(PreviewRecord {
            topic: parts.topic.take().unwrap_or_else(|| self.topic.clone()),
            key: parts.has_key.then_some(parts.key),
            value: parts.value,
        })
    }

    /// Writes `record` into `parts` (buffers cleared first).
    pub(crate) fn fill(&self, record: &T, parts: &mut Parts) -> Result<(), String> {
        parts.value.clear();
        parts.key.clear();
        (self.value)(record, &mut parts.value)?;
        parts.has_key = match &self.key {
            Some(k) => {
                k(record, &mut parts.key)?;
                true
            }
            None => false,
        };
        parts.topic = self.topic_selector.as_ref().map(|f| f(record));
        parts.timestamp = self.timestamp.as_ref().map(|f| f(record));
        parts.partition = self.partition.as_ref().map(|f| f(record));
        parts.headers.clear();
        if let Some(h) = &self.headers {
            parts
                .headers
                .extend(h(record).into_iter().map(|(k, v)| (k, Some(v))));
        }
        Ok(())
    }
}

/// The reused buffers of one record on its way out.
#[derive(Default)]
pub(crate) struct Parts {
    pub(crate) topic: Option<String>,
    pub(crate) key: Vec<u8>,
    pub(crate) has_key: bool,
    pub(crate) value: Vec<u8>,
    pub(crate) timestamp: Option<i64>,
    pub(crate) partition: Option<i32>,
    pub(crate) headers: Vec<(String, Option<Vec<u8>>)>,
}
