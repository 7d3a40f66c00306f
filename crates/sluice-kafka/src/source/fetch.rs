//! The fetch thread of a reader: one [`BaseConsumer`] per subtask, owned and polled by a
//! dedicated std thread (librdkafka's consumer calls block), which copies the messages into
//! owned batches ([`FetchedBatch`]: one buffer per batch of one partition) and sends them through
//! a bounded tokio channel to the task. The task talks back through [`Commands`] (partitions to
//! assign at an offset, to unassign, offsets to commit), merged under a lock, so that queue is
//! bounded by the number of partitions; the thread applies them between two polls.
//!
//! The thread blocks in `consumer.poll(POLL_TIMEOUT)` (no busy loop) and in the channel's
//! `blocking_send` when the task is behind (backpressure). It ends when the [`Fetcher`] is
//! dropped: the stop flag is seen after the current poll, a send fails once the receiver is gone.

use crate::source::deserializer::KafkaRecord;
use crate::source::offsets::TopicPartition;
use rdkafka::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::KafkaError as RdKafkaError;
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use sluice_core::sync::lock;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

/// How long one poll of the consumer blocks when no message is there (commands wait at most
/// this long, and so does the thread's end).
const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// At most this many records in one batch.
const MAX_BATCH_RECORDS: usize = 2048;
/// At most about this many bytes of keys, values and headers in one batch.
const MAX_BATCH_BYTES: usize = 1 << 20;
/// Batches in flight between the fetch thread and the task.
const CHANNEL_CAPACITY: usize = 4;

/// The reader consumer's context: librdkafka reports the end of a partition
/// (`enable.partition.eof`, which bounded splits need) as an error event, which is logged at error
/// level by default; it is no error here. Real errors go to `tracing` as warnings: librdkafka
/// retries them itself, and what it gives up on surfaces in the poll.
pub(crate) struct ReaderContext;

impl ClientContext for ReaderContext {
    fn error(&self, error: RdKafkaError, reason: &str) {
        if !matches!(
            error,
            RdKafkaError::PartitionEOF(_) | RdKafkaError::Global(RDKafkaErrorCode::PartitionEOF)
        ) {
            tracing::warn!(target: "librdkafka", "{error}: {reason}");
        }
    }
}

impl ConsumerContext for ReaderContext {}

/// The reader's consumer.
pub(crate) type ReaderConsumer = BaseConsumer<ReaderContext>;

/// A `(start, end)` span of a batch's buffer.
pub(crate) type Span = (usize, usize);

/// One header of a fetched record: spans of its name and value in the batch's buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawHeader {
    pub(crate) name: Span,
    pub(crate) value: Option<Span>,
}

impl RawHeader {
    /// The header's name and value in `data`.
    pub(crate) fn get<'a>(&self, data: &'a [u8]) -> (&'a str, Option<&'a [u8]>) {
        let name = data
            .get(self.name.0..self.name.1)
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or_default();
        (name, self.value.and_then(|(a, b)| data.get(a..b)))
    }
}

/// One fetched record: its position and the spans of its bytes.
#[derive(Clone, Copy, Debug)]
struct RawRecord {
    offset: i64,
    timestamp: Option<i64>,
    key: Option<Span>,
    value: Option<Span>,
    headers: Span,
}

/// Records of one partition, in offset order, with their bytes in one buffer.
#[derive(Debug)]
pub(crate) struct FetchedBatch {
    pub(crate) topic: Arc<str>,
    pub(crate) partition: i32,
    data: Vec<u8>,
    records: Vec<RawRecord>,
    headers: Vec<RawHeader>,
}

impl FetchedBatch {
    pub(crate) fn new(topic: Arc<str>, partition: i32) -> Self {
        FetchedBatch {
            topic,
            partition,
            data: Vec::new(),
            records: Vec::new(),
            headers: Vec::new(),
        }
    }

    fn put(&mut self, bytes: Option<&[u8]>) -> Option<Span> {
        let bytes = bytes?;
        let start = self.data.len();
        self.data.extend_from_slice(bytes);
        Some((start, self.data.len()))
    }

    /// Appends a record (its bytes copied into the batch's buffer).
    pub(crate) fn push(
        &mut self,
        offset: i64,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&str, Option<&[u8]>)],
    ) {
        let key = self.put(key);
        let value = self.put(value);
        let first = self.headers.len();
        for (name, v) in headers {
            let name = self.put(Some(name.as_bytes())).unwrap_or_default();
            let value = self.put(*v);
            self.headers.push(RawHeader { name, value });
        }
        self.records.push(RawRecord {
            offset,
            timestamp,
            key,
            value,
            headers: (first, self.headers.len()),
        });
    }

    fn push_message(&mut self, m: &BorrowedMessage<'_>) {
        let headers: Vec<(&str, Option<&[u8]>)> = m
            .headers()
            .map(|h| h.iter().map(|h| (h.key, h.value)).collect())
            .unwrap_or_default();
        self.push(
            m.offset(),
            m.timestamp().to_millis(),
            m.key(),
            m.payload(),
            &headers,
        );
    }

    /// How many records the batch holds.
    pub(crate) fn len(&self) -> usize {
        self.records.len()
    }

    /// The offset of record `i`.
    pub(crate) fn offset(&self, i: usize) -> Option<i64> {
        self.records.get(i).map(|r| r.offset)
    }

    /// Record `i`, borrowed from the batch.
    pub(crate) fn record(&self, i: usize) -> Option<KafkaRecord<'_>> {
        let r = self.records.get(i)?;
        let span = |s: Option<Span>| s.and_then(|(a, b)| self.data.get(a..b));
        Some(KafkaRecord {
            topic: &self.topic,
            partition: self.partition,
            offset: r.offset,
            timestamp: r.timestamp,
            key: span(r.key),
            value: span(r.value),
            data: &self.data,
            headers: self
                .headers
                .get(r.headers.0..r.headers.1)
                .unwrap_or_default(),
        })
    }
}

/// What the fetch thread sends the task.
#[derive(Debug)]
pub(crate) enum Fetched {
    /// Records of one partition.
    Batch(FetchedBatch),
    /// A partition reached its end: the consumer's positions of every assigned partition
    /// (sent only when the reader has stopping offsets).
    Positions(Vec<(TopicPartition, i64)>),
    /// librdkafka gave up on something it will not retry (the message says what): the reader
    /// fails its subtask with it.
    Failed(String),
}

/// Whether a consume error is one librdkafka will not get past by retrying: a response it
/// cannot take (too large for `receive.message.max.bytes`, or malformed), a refused
/// authorization, or a fatal client error. Anything else (brokers down, leaders moving) it
/// retries by itself.
pub(crate) fn fatal(error: &RdKafkaError) -> bool {
    use RDKafkaErrorCode as C;
    match error {
        RdKafkaError::MessageConsumption(code) | RdKafkaError::Global(code) => matches!(
            code,
            C::BadMessage
                | C::MessageSizeTooLarge
                | C::TopicAuthorizationFailed
                | C::GroupAuthorizationFailed
                | C::ClusterAuthorizationFailed
                | C::SaslAuthenticationFailed
                | C::Authentication
                | C::Fatal
        ),
        _ => false,
    }
}

/// What the task asks of the fetch thread, merged until the thread takes it.
#[derive(Debug, Default)]
pub(crate) struct Commands {
    assign: BTreeMap<TopicPartition, i64>,
    unassign: BTreeSet<TopicPartition>,
    commit: Option<BTreeMap<TopicPartition, i64>>,
}

impl Commands {
    fn is_empty(&self) -> bool {
        self.assign.is_empty() && self.unassign.is_empty() && self.commit.is_none()
    }
}

struct Shared {
    commands: Mutex<Commands>,
    stop: AtomicBool,
}

/// The task's side of a fetch thread (see the module docs).
pub(crate) struct Fetcher {
    shared: Arc<Shared>,
    rx: mpsc::Receiver<Fetched>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fetcher")
    }
}

impl Fetcher {
    /// Starts the fetch thread named `name` with `consumer` (no partition assigned yet).
    pub(crate) fn start(
        consumer: ReaderConsumer,
        name: String,
        report_ends: bool,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            commands: Mutex::new(Commands::default()),
            stop: AtomicBool::new(false),
        });
        let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
        let thread_shared = shared.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || fetch_loop(consumer, thread_shared, tx, report_ends))?;
        Ok(Fetcher { shared, rx })
    }

    /// Starts reading `tp` at `offset`.
    pub(crate) fn assign(&self, tp: TopicPartition, offset: i64) {
        let mut c = lock(&self.shared.commands);
        c.unassign.remove(&tp);
        c.assign.insert(tp, offset);
    }

    /// Stops reading `tp`.
    pub(crate) fn unassign(&self, tp: TopicPartition) {
        let mut c = lock(&self.shared.commands);
        if c.assign.remove(&tp).is_none() {
            c.unassign.insert(tp);
        }
    }

    /// Commits `offsets` (asynchronously; a newer commit not yet sent replaces an older one).
    pub(crate) fn commit(&self, offsets: BTreeMap<TopicPartition, i64>) {
        if !offsets.is_empty() {
            lock(&self.shared.commands).commit = Some(offsets);
        }
    }

    /// The next thing fetched, or `Pending` with `cx` woken when it comes; `None` if the
    /// thread ended.
    pub(crate) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Fetched>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for Fetcher {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // The receiver goes with `self`: a blocked send fails and the thread ends.
    }
}

fn tpl(entries: impl IntoIterator<Item = (TopicPartition, Option<i64>)>) -> TopicPartitionList {
    let mut l = TopicPartitionList::new();
    for ((topic, partition), offset) in entries {
        match offset {
            Some(o) => {
                if let Err(e) = l.add_partition_offset(&topic, partition, Offset::Offset(o)) {
                    tracing::warn!(
                        "kafka source: cannot set offset {o} of {topic}-{partition}: {e}"
                    );
                }
            }
            None => {
                l.add_partition(&topic, partition);
            }
        }
    }
    l
}

fn apply(consumer: &ReaderConsumer, commands: Commands) {
    if !commands.unassign.is_empty() {
        let l = tpl(commands.unassign.into_iter().map(|tp| (tp, None)));
        if let Err(e) = consumer.incremental_unassign(&l) {
            tracing::warn!("kafka source: unassigning {l:?} failed: {e}");
        }
    }
    if !commands.assign.is_empty() {
        let l = tpl(commands.assign.into_iter().map(|(tp, o)| (tp, Some(o))));
        if let Err(e) = consumer.incremental_assign(&l) {
            tracing::error!("kafka source: assigning {l:?} failed: {e}");
        }
    }
    if let Some(offsets) = commands.commit {
        let l = tpl(offsets.into_iter().map(|(tp, o)| (tp, Some(o))));
        if let Err(e) = consumer.commit(&l, CommitMode::Async) {
            tracing::warn!("kafka source: committing offsets failed (monitoring only): {e}");
        }
    }
}

/// The fetch thread (see the module docs).
fn fetch_loop(
    consumer: ReaderConsumer,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Fetched>,
    report_ends: bool,
) {
    let mut topics: BTreeMap<String, Arc<str>> = BTreeMap::new();
    while !shared.stop.load(Ordering::Relaxed) {
        let commands = std::mem::take(&mut *lock(&shared.commands));
        if !commands.is_empty() {
            apply(&consumer, commands);
        }
        let mut open: BTreeMap<(Arc<str>, i32), FetchedBatch> = BTreeMap::new();
        let mut records = 0;
        let mut bytes = 0;
        let mut ended = false;
        let mut timeout = POLL_TIMEOUT;
        while records < MAX_BATCH_RECORDS && bytes < MAX_BATCH_BYTES {
            let Some(polled) = consumer.poll(timeout) else {
                break;
            };
            // Take what is already there without waiting, up to the batch limits.
            timeout = Duration::ZERO;
            match polled {
                Ok(m) => {
                    let topic = match topics.get(m.topic()) {
                        Some(t) => t.clone(),
                        None => {
                            let t: Arc<str> = Arc::from(m.topic());
                            topics.insert(m.topic().to_string(), t.clone());
                            t
                        }
                    };
                    records += 1;
                    bytes += m.payload_len() + m.key().map_or(0, <[u8]>::len);
                    open.entry((topic.clone(), m.partition()))
                        .or_insert_with(|| FetchedBatch::new(topic, m.partition()))
                        .push_message(&m);
                }
                Err(RdKafkaError::PartitionEOF(_)) => {
                    ended = true;
                    break;
                }
                Err(e) if fatal(&e) => {
                    let _ = tx.blocking_send(Fetched::Failed(format!(
                        "fetching from Kafka failed and cannot be retried: {e} (a response \
                         larger than receive.message.max.bytes is reported as a bad message)"
                    )));
                    return;
                }
                Err(e) => {
                    tracing::warn!("kafka source: fetching failed (librdkafka retries): {e}");
                    break;
                }
            }
        }
        for batch in open.into_values() {
            if tx.blocking_send(Fetched::Batch(batch)).is_err() {
                return;
            }
        }
        if ended && report_ends {
            let positions = match consumer.position() {
                Ok(l) => l
                    .elements()
                    .iter()
                    .filter_map(|e| match e.offset() {
                        Offset::Offset(o) => Some(((e.topic().to_string(), e.partition()), o)),
                        _ => None,
                    })
                    .collect(),
                Err(e) => {
                    tracing::warn!("kafka source: reading the consumer's positions failed: {e}");
                    Vec::new()
                }
            };
            if !positions.is_empty() && tx.blocking_send(Fetched::Positions(positions)).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_errors_librdkafka_cannot_retry_past_are_fatal() {
        use RDKafkaErrorCode as C;
        assert!(fatal(&RdKafkaError::MessageConsumption(C::BadMessage)));
        assert!(fatal(&RdKafkaError::MessageConsumption(
            C::TopicAuthorizationFailed
        )));
        assert!(fatal(&RdKafkaError::Global(C::Fatal)));
        assert!(!fatal(&RdKafkaError::MessageConsumption(C::AllBrokersDown)));
        assert!(!fatal(&RdKafkaError::MessageConsumption(
            C::NotLeaderForPartition
        )));
        assert!(!fatal(&RdKafkaError::PartitionEOF(0)));
    }

    #[test]
    fn a_batch_keeps_every_record_in_one_buffer() {
        let mut b = FetchedBatch::new(Arc::from("t"), 2);
        b.push(
            5,
            Some(10),
            Some(b"k"),
            Some(b"v1"),
            &[("h", Some(b"x")), ("n", None)],
        );
        b.push(6, None, None, None, &[]);
        assert_eq!(b.len(), 2);
        let r = b.record(0).unwrap();
        assert_eq!((r.topic(), r.partition(), r.offset()), ("t", 2, 5));
        assert_eq!((r.key(), r.value()), (Some(&b"k"[..]), Some(&b"v1"[..])));
        assert_eq!(r.timestamp(), Some(10));
        assert_eq!(
            r.headers().collect::<Vec<_>>(),
            vec![("h", Some(&b"x"[..])), ("n", None)]
        );
        let r = b.record(1).unwrap();
        assert_eq!(
            (r.offset(), r.key(), r.value(), r.headers().count()),
            (6, None, None, 0)
        );
        assert!(b.record(2).is_none());
    }

    #[test]
    fn commands_merge_so_the_queue_stays_bounded() {
        let mut c = Commands::default();
        let tp = ("t".to_string(), 0);
        c.assign.insert(tp.clone(), 4);
        c.assign.insert(tp.clone(), 9);
        assert_eq!(c.assign.len(), 1);
        assert!(!c.is_empty());
    }
}
