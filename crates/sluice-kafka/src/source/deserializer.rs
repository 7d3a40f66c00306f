//! [`KafkaDeserializer`]: turns a Kafka record ([`KafkaRecord`]: key, value, headers, timestamp,
//! topic, partition, offset) into the source's records, and [`MalformedRecords`], what a record
//! it refuses does.

use crate::source::fetch::RawHeader;
use serde::de::DeserializeOwned;
use std::fmt;
use std::sync::Arc;

/// One Kafka record as the deserializer sees it, borrowed from the reader's fetch buffer.
#[derive(Clone, Copy)]
pub struct KafkaRecord<'a> {
    pub(crate) topic: &'a str,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) timestamp: Option<i64>,
    pub(crate) key: Option<&'a [u8]>,
    pub(crate) value: Option<&'a [u8]>,
    /// The fetch buffer the header spans point into.
    pub(crate) data: &'a [u8],
    pub(crate) headers: &'a [RawHeader],
}

impl fmt::Debug for KafkaRecord<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaRecord")
            .field("topic", &self.topic)
            .field("partition", &self.partition)
            .field("offset", &self.offset)
            .field("timestamp", &self.timestamp)
            .field("key_len", &self.key.map(<[u8]>::len))
            .field("value_len", &self.value.map(<[u8]>::len))
            .field("headers", &self.headers.len())
            .finish()
    }
}

impl<'a> KafkaRecord<'a> {
    /// A record, for testing a deserializer without a broker.
    ///
    /// ```
    /// use sluice_kafka::{KafkaDeserializer, KafkaRecord};
    /// let r = KafkaRecord::new("clicks", 0, 41, Some(1_000), Some(b"k"), Some(b"\"hello\""));
    /// assert_eq!(KafkaDeserializer::<String>::json().deserialize(&r), Ok(Some("hello".to_string())));
    /// assert_eq!(r.key(), Some(&b"k"[..]));
    /// ```
    pub fn new(
        topic: &'a str,
        partition: i32,
        offset: i64,
        timestamp: Option<i64>,
        key: Option<&'a [u8]>,
        value: Option<&'a [u8]>,
    ) -> Self {
        KafkaRecord {
            topic,
            partition,
            offset,
            timestamp,
            key,
            value,
            data: &[],
            headers: &[],
        }
    }

    /// The record's topic.
    pub fn topic(&self) -> &'a str {
        self.topic
    }

    /// The record's partition.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The record's offset.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// The record's timestamp (create time or log-append time), in milliseconds since the
    /// epoch, if it has one.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// The key, if any.
    pub fn key(&self) -> Option<&'a [u8]> {
        self.key
    }

    /// The value; `None` for a tombstone.
    pub fn value(&self) -> Option<&'a [u8]> {
        self.value
    }

    /// The headers, in order: name and value (`None` for a null value).
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, Option<&'a [u8]>)> + 'a {
        let data = self.data;
        self.headers.iter().map(move |h| h.get(data))
    }

    /// The value of the first header named `name`.
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers()
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| v)
    }
}

type DeserializeFn<T> = Arc<dyn Fn(&KafkaRecord<'_>) -> Result<Option<T>, String> + Send + Sync>;

/// Turns Kafka records into the source's records (Flink's `KafkaRecordDeserializationSchema`).
/// `Ok(None)` drops a record (it still counts as read: its offset is passed); `Err` is a
/// malformed record, handled by [`MalformedRecords`]. The built-in deserializers drop tombstones
/// (records without a value).
///
/// Event time: the source's watermark strategy reads the timestamp from the records, so a job
/// that wants Kafka's record timestamp as event time puts it into the record here (see
/// [`from_fn`](Self::from_fn)).
///
/// ```
/// use sluice_kafka::{KafkaDeserializer, KafkaRecord};
///
/// // (Kafka timestamp, value as text) — the watermark strategy can read `.0`.
/// let d = KafkaDeserializer::from_fn(|r: &KafkaRecord| {
///     let text = std::str::from_utf8(r.value().unwrap_or_default()).map_err(|e| e.to_string())?;
///     Ok(Some((r.timestamp().unwrap_or(0), text.to_string())))
/// });
/// let r = KafkaRecord::new("t", 0, 0, Some(7), None, Some(b"hi"));
/// assert_eq!(d.deserialize(&r), Ok(Some((7, "hi".to_string()))));
/// ```
pub struct KafkaDeserializer<T> {
    f: DeserializeFn<T>,
}

impl<T> Clone for KafkaDeserializer<T> {
    fn clone(&self) -> Self {
        KafkaDeserializer { f: self.f.clone() }
    }
}

impl<T> fmt::Debug for KafkaDeserializer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KafkaDeserializer")
    }
}

impl<T: 'static> KafkaDeserializer<T> {
    /// A deserializer from a function of the whole record.
    pub fn from_fn(
        f: impl Fn(&KafkaRecord<'_>) -> Result<Option<T>, String> + Send + Sync + 'static,
    ) -> Self {
        KafkaDeserializer { f: Arc::new(f) }
    }

    /// The value decoded as JSON with serde.
    pub fn json() -> Self
    where
        T: DeserializeOwned,
    {
        Self::from_fn(|r| match r.value {
            None => Ok(None),
            Some(v) => serde_json::from_slice(v)
                .map(Some)
                .map_err(|e| e.to_string()),
        })
    }

    /// Deserializes one record.
    pub fn deserialize(&self, record: &KafkaRecord<'_>) -> Result<Option<T>, String> {
        (self.f)(record)
    }
}

impl KafkaDeserializer<Vec<u8>> {
    /// The value's bytes.
    pub fn bytes() -> Self {
        Self::from_fn(|r| Ok(r.value.map(<[u8]>::to_vec)))
    }
}

impl KafkaDeserializer<String> {
    /// The value as UTF-8 text (invalid UTF-8 is a malformed record).
    pub fn utf8() -> Self {
        Self::from_fn(|r| match r.value {
            None => Ok(None),
            Some(v) => std::str::from_utf8(v)
                .map(|s| Some(s.to_string()))
                .map_err(|e| format!("not UTF-8: {e}")),
        })
    }
}

/// What a record the deserializer refuses does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MalformedRecords {
    /// Fail the job, naming the topic, partition and offset (the default).
    #[default]
    Fail,
    /// Skip the record and count it in
    /// [`KafkaSourceMetrics::skipped_records`](crate::KafkaSourceMetrics::skipped_records).
    Skip,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_deserializers_decode_values_and_drop_tombstones() {
        let r = KafkaRecord::new("t", 1, 2, None, None, Some(b"{\"a\":1}"));
        let v: Option<serde_json::Value> = KafkaDeserializer::json().deserialize(&r).unwrap();
        assert_eq!(v, Some(serde_json::json!({"a": 1})));
        assert_eq!(
            KafkaDeserializer::utf8().deserialize(&r),
            Ok(Some("{\"a\":1}".to_string()))
        );
        assert_eq!(
            KafkaDeserializer::bytes().deserialize(&r),
            Ok(Some(b"{\"a\":1}".to_vec()))
        );
        let tomb = KafkaRecord::new("t", 1, 3, None, Some(b"k"), None);
        assert_eq!(
            KafkaDeserializer::<u32>::json().deserialize(&tomb),
            Ok(None)
        );
        assert_eq!(KafkaDeserializer::utf8().deserialize(&tomb), Ok(None));
        let bad = KafkaRecord::new("t", 1, 4, None, None, Some(&[0xff, 0xfe]));
        assert!(KafkaDeserializer::utf8().deserialize(&bad).is_err());
        assert!(KafkaDeserializer::<u32>::json().deserialize(&bad).is_err());
    }

    #[test]
    fn headers_are_visible() {
        let data = b"a1b";
        let headers = vec![
            RawHeader {
                name: (0, 1),
                value: Some((1, 2)),
            },
            RawHeader {
                name: (2, 3),
                value: None,
            },
        ];
        let r = KafkaRecord {
            data,
            headers: &headers,
            ..KafkaRecord::new("t", 0, 0, None, None, None)
        };
        assert_eq!(r.header("a"), Some(&b"1"[..]));
        assert_eq!(r.header("b"), None);
        assert_eq!(r.headers().count(), 2);
    }
}
