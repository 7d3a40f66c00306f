//! Apache Kafka for sluice: [`KafkaSource`], a FLIP-27 split source whose enumerator discovers
//! and assigns topic-partitions on the source coordinator, and [`KafkaSink`], with delivery
//! guarantee none, at-least-once or exactly-once (Kafka transactions, one per checkpoint, from a
//! bounded pool of transactional ids per subtask, resumed and committed after a restore).
//!
//! Where to find things:
//! - [`KafkaSettings`] (`settings.rs`): bootstrap servers and librdkafka properties passed
//!   through to every client, checked at submit;
//! - `source/`: [`KafkaSource`] and its builder, [`StartingOffsets`], [`StoppingOffsets`], the
//!   split ([`KafkaPartitionSplit`]), the enumerator (discovery and assignment), the reader (a
//!   fetch thread per subtask), [`KafkaDeserializer`] and [`KafkaRecord`];
//! - `sink/`: [`KafkaSink`] and its builder, [`DeliveryGuarantee`], [`KafkaRecordSerializer`],
//!   the transactional id pool (`pool.rs`, pure), the producers (`producer.rs`), and
//!   `resume.rs`, which commits a pre-committed transaction of an earlier process with an
//!   `EndTxn` request for its stored producer id and epoch;
//! - [`KafkaError`].

mod error;
mod settings;
mod sink;
mod source;

pub use error::KafkaError;
pub use settings::KafkaSettings;
pub use sink::{
    DEFAULT_POOL_SIZE, DEFAULT_TRANSACTION_TIMEOUT, DeliveryGuarantee, KafkaRecordSerializer,
    KafkaSink, KafkaSinkBuilder, KafkaSinkExt, KafkaTransaction, PreviewRecord,
};
pub use source::{
    KafkaDeserializer, KafkaPartitionSplit, KafkaRecord, KafkaSource, KafkaSourceBuilder,
    KafkaSourceMetrics, MalformedRecords, OffsetResetStrategy, StartingOffsets, StoppingOffsets,
};
