//! What the Kafka tests share: the broker `.ci/kafka` starts (found through
//! `SLUICE_KAFKA_BOOTSTRAP`; without it a test is skipped with a notice, except under CI, where
//! it fails), topics named after the test and the process, a plain rdkafka producer to fill them,
//! and the independent reader: confluent-kafka (`SLUICE_KAFKA_PYTHON`) with `read_committed`.
#![allow(dead_code)]

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::time::Duration;

/// The broker's bootstrap servers, or `None` (the test is skipped) outside CI.
pub fn broker() -> Option<String> {
    match std::env::var("SLUICE_KAFKA_BOOTSTRAP") {
        Ok(v) if !v.is_empty() => Some(v),
        _ if std::env::var_os("CI").is_some() => {
            panic!("SLUICE_KAFKA_BOOTSTRAP is not set under CI: source .ci/kafka first")
        }
        _ => {
            eprintln!("skipped: SLUICE_KAFKA_BOOTSTRAP is not set (source .ci/kafka to run it)");
            None
        }
    }
}

/// A name unique to this test and process.
pub fn unique(name: &str) -> String {
    format!("{name}-{}-{}", std::process::id(), rand_suffix())
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64 % 1_000_000_007)
        .unwrap_or(0)
}

fn admin(bootstrap: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client")
}

/// Creates `topic` with `partitions` partitions.
pub async fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    let r = admin(bootstrap)
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create topics");
    for x in r {
        x.expect("topic created");
    }
}

/// Raises `topic` to `partitions` partitions.
pub async fn add_partitions(bootstrap: &str, topic: &str, partitions: usize) {
    let r = admin(bootstrap)
        .create_partitions(
            &[NewPartitions::new(topic, partitions)],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create partitions");
    for x in r {
        x.expect("partitions created");
    }
}

/// Produces `(partition, key, value, timestamp ms)` records, flushed, with a plain producer.
pub fn produce(bootstrap: &str, topic: &str, records: &[(i32, String, String, i64)]) {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    for (partition, key, value, ts) in records {
        let mut r = BaseRecord::to(topic)
            .partition(*partition)
            .key(key.as_bytes())
            .payload(value.as_bytes())
            .timestamp(*ts);
        loop {
            match p.send(r) {
                Ok(()) => break,
                Err((_, back)) => {
                    r = back;
                    p.poll(Duration::from_millis(50));
                }
            }
        }
    }
    p.flush(Duration::from_secs(30)).expect("flush");
}

/// One record as the independent reader saw it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Read {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    pub value: String,
}

const READER: &str = r#"
import json, sys
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, isolation = sys.argv[1], sys.argv[2], sys.argv[3]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "sluice-check", "enable.auto.commit": False,
              "isolation.level": isolation, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
meta = c.list_topics(topic, timeout=10).topics[topic]
parts = sorted(meta.partitions)
c.assign([TopicPartition(topic, p, 0) for p in parts])
left = set(parts)
out = []
while left:
    m = c.poll(10)
    if m is None:
        sys.exit("timed out reading " + topic + ", partitions left: " + str(sorted(left)))
    if m.error():
        if m.error().code() == -191:  # end of partition
            left.discard(m.partition())
            continue
        sys.exit(str(m.error()))
    k = m.key()
    out.append({"partition": m.partition(), "offset": m.offset(),
                "key": None if k is None else k.decode(), "value": m.value().decode()})
c.close()
print(json.dumps(out))
"#;

/// Every record of `topic` as confluent-kafka reads it with `read_committed` (what committed
/// transactions hold; aborted and open ones are not shown, and an open one blocks the read).
pub fn read_committed(bootstrap: &str, topic: &str) -> Vec<Read> {
    read_with(bootstrap, topic, "read_committed")
}

/// Every record of `topic`, committed or not.
pub fn read_uncommitted(bootstrap: &str, topic: &str) -> Vec<Read> {
    read_with(bootstrap, topic, "read_uncommitted")
}

fn read_with(bootstrap: &str, topic: &str, isolation: &str) -> Vec<Read> {
    let python = std::env::var("SLUICE_KAFKA_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = std::process::Command::new(&python)
        .args(["-c", READER, bootstrap, topic, isolation])
        .output()
        .expect("run the confluent-kafka reader");
    assert!(
        out.status.success(),
        "the confluent-kafka reader failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("reader JSON");
    rows.into_iter()
        .map(|r| Read {
            partition: r["partition"].as_i64().unwrap_or(-1) as i32,
            offset: r["offset"].as_i64().unwrap_or(-1),
            key: r["key"].as_str().map(str::to_string),
            value: r["value"].as_str().unwrap_or_default().to_string(),
        })
        .collect()
}
