//! [`KafkaError`]: what the Kafka source and sink refuse or fail with. Every variant names what
//! was wrong: the setting, the bootstrap servers, the topic, the partition and offset, the
//! transactional id.

/// An error of the Kafka connector.
///
/// ```
/// use sluice_kafka::KafkaError;
/// let e = KafkaError::MissingTopic { topic: "clicks".into(), servers: "127.0.0.1:9092".into() };
/// assert_eq!(e.to_string(), "topic clicks does not exist on the Kafka brokers at 127.0.0.1:9092");
/// ```
#[derive(Debug, thiserror::Error)]
pub enum KafkaError {
    /// A setting is missing or refused (checked at submit).
    #[error("bad Kafka setting for {role}: {message}")]
    Settings {
        /// Which client: "source clicks", "sink counts".
        role: String,
        /// What was wrong, naming the setting and its value.
        message: String,
    },
    /// The brokers did not answer within the retries.
    #[error("cannot reach the Kafka brokers at {servers} after {attempts} attempts: {message}")]
    Unreachable {
        /// The bootstrap servers.
        servers: String,
        /// How many attempts were made.
        attempts: u32,
        /// The last error.
        message: String,
    },
    /// A topic the source was told to read does not exist.
    #[error("topic {topic} does not exist on the Kafka brokers at {servers}")]
    MissingTopic {
        /// The topic.
        topic: String,
        /// The bootstrap servers.
        servers: String,
    },
    /// A record could not be decoded.
    #[error("cannot deserialize the record at offset {offset} of {topic}-{partition}: {message}")]
    Malformed {
        /// Its topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// Its offset.
        offset: i64,
        /// What the deserializer said.
        message: String,
    },
    /// A record could not be encoded or sent.
    #[error("cannot send a record to Kafka topic {topic}: {message}")]
    Send {
        /// The topic.
        topic: String,
        /// What failed.
        message: String,
    },
    /// A client call failed.
    #[error("Kafka {what} failed: {source}")]
    Client {
        /// What was being done.
        what: String,
        /// librdkafka's error.
        source: rdkafka::error::KafkaError,
    },
    /// A transaction could not be finished.
    #[error("cannot {action} the Kafka transaction of transactional id {id}: {message}")]
    Transaction {
        /// "commit", "abort", "begin", "resume and commit".
        action: &'static str,
        /// The transactional id.
        id: String,
        /// What failed.
        message: String,
    },
}
