//! The clickstream example's Kafka mode (`--kafka`) against the broker `.ci/kafka` starts (found
//! through `SLUICE_KAFKA_BOOTSTRAP`; without it the tests are skipped with a notice, except
//! under CI, where they fail): the clicks produced into a topic, read by the Kafka source, the
//! counts written exactly once by the Kafka sink. Each run's own check must pass, and an
//! independent client (confluent-kafka through `SLUICE_KAFKA_PYTHON`, with `read_committed`)
//! must read every (user, minute) count once, equal to what the generator gives. Once from a
//! fresh start, once with an injected failure and the restore. Topics are unique per test.

mod clickstream_common;
// The generator itself, to work out the expected counts without the example.
#[allow(dead_code)]
#[path = "../examples/clickstream/events.rs"]
mod events;

use clickstream_common::{assert_passed, example_binary};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

/// Clicks per run: about 20 s of event time, two minutes' windows.
const EVENTS: u64 = 5_000;

/// The broker's bootstrap servers, or `None` (the test is skipped) outside CI.
fn broker() -> Option<String> {
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

/// A topic name unique to this test and process.
fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("clickstream-{name}-{}-{nanos}", std::process::id())
}

/// Runs the example in Kafka mode with small sizes in `dir`, plus `extra` flags.
fn run_example(dir: &Path, bootstrap: &str, clicks: &str, counts: &str, extra: &[&str]) -> Output {
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let events = EVENTS.to_string();
    let mut args: Vec<String> = [
        "--kafka",
        bootstrap,
        "--kafka-clicks-topic",
        clicks,
        "--kafka-counts-topic",
        counts,
        // More partitions than readers, and not a multiple of them.
        "--kafka-partitions",
        "3",
        "--events",
        &events,
        "--parallelism",
        "2",
        "--lookup-latency-ms",
        "1",
        "--checkpoint-interval-ms",
        "100",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.extend(["--checkpoint-dir".to_string(), path("checkpoints")]);
    args.extend(extra.iter().map(|a| a.to_string()));
    Command::new(example_binary())
        .args(&args)
        .current_dir(dir)
        .output()
        .expect("the example starts")
}

/// The independent reader: confluent-kafka, `read_committed`, every partition from offset 0 to
/// its end; prints `[{"partition", "offset", "key", "value"}, ...]` as JSON.
const READER: &str = r#"
import json, sys
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic = sys.argv[1], sys.argv[2]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "sluice-clickstream-check",
              "enable.auto.commit": False, "isolation.level": "read_committed",
              "enable.partition.eof": True, "auto.offset.reset": "earliest"})
meta = c.list_topics(topic, timeout=10).topics[topic]
if meta.error is not None:
    sys.exit("topic " + topic + ": " + str(meta.error))
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

/// What confluent-kafka reads from the counts topic with `read_committed`: (user, first
/// millisecond of the minute) → clicks, asserting that no pair comes twice and every record's
/// key is its user.
fn read_counts_independently(bootstrap: &str, topic: &str) -> BTreeMap<(u64, i64), u64> {
    let python = std::env::var("SLUICE_KAFKA_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .args(["-c", READER, bootstrap, topic])
        .output()
        .unwrap_or_else(|e| panic!("cannot run the confluent-kafka reader with {python}: {e}"));
    assert!(
        out.status.success(),
        "the confluent-kafka reader failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).expect("the reader prints JSON");
    let mut counts = BTreeMap::new();
    for r in &records {
        let value: serde_json::Value = serde_json::from_str(r["value"].as_str().unwrap_or(""))
            .unwrap_or_else(|e| panic!("a count that is not JSON ({e}): {r}"));
        let (Some(user), Some(minute_us), Some(clicks)) = (
            value["user"].as_u64(),
            value["minute"].as_i64(),
            value["clicks"].as_u64(),
        ) else {
            panic!("a count without user, minute and clicks: {r}");
        };
        assert_eq!(
            r["key"].as_str(),
            Some(user.to_string().as_str()),
            "the key is not the user: {r}"
        );
        let before = counts.insert((user, minute_us / 1_000), clicks);
        assert!(before.is_none(), "read twice: {r}");
    }
    counts
}

/// The (user, minute) counts the generator gives for the first `events` clicks.
fn expected_counts(events: u64) -> BTreeMap<(u64, i64), u64> {
    let users = events::user_popularity().expect("the user distribution");
    events::Expected::compute(events, &users)
        .per_minute
        .into_iter()
        .collect()
}

/// The independent reader agrees with the generator: every (user, minute) once, each count
/// right; and with the example's summary about the number of rows.
fn assert_counts_exactly_once(bootstrap: &str, counts_topic: &str, stdout: &str) {
    let read = read_counts_independently(bootstrap, counts_topic);
    let expected = expected_counts(EVENTS);
    let missing: Vec<_> = expected
        .iter()
        .filter(|(k, v)| read.get(k) != Some(v))
        .take(5)
        .collect();
    let unexpected: Vec<_> = read
        .iter()
        .filter(|(k, _)| !expected.contains_key(k))
        .take(5)
        .collect();
    assert!(
        missing.is_empty() && unexpected.is_empty(),
        "{} counts read, {} expected; missing or wrong (first 5): {missing:?}; unexpected \
         (first 5): {unexpected:?}",
        read.len(),
        expected.len()
    );
    // "committed    N rows (U users, M minutes) in the topic ..."
    let rows = format!("committed    {} rows", grouped(read.len() as u64));
    assert!(
        stdout.contains(&rows),
        "no {rows:?} in the summary:\n{stdout}"
    );
}

fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[test]
fn kafka_mode_commits_every_minute_count_once() {
    let Some(b) = broker() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (clicks, counts) = (unique("clicks"), unique("counts"));
    let (stdout, _) = assert_passed(&run_example(dir.path(), &b, &clicks, &counts, &[]));
    assert!(
        stdout.contains(&format!(
            "producing {} clicks into the Kafka topic {clicks} (3 partitions)",
            grouped(EVENTS)
        )),
        "{stdout}"
    );
    assert!(stdout.contains("0 restarts"), "{stdout}");
    assert!(
        stdout.contains(&format!("from the topic {clicks} (3 partitions)")),
        "{stdout}"
    );
    assert_counts_exactly_once(&b, &counts, &stdout);
}

#[test]
fn kafka_mode_survives_an_injected_failure_with_every_count_once() {
    let Some(b) = broker() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (clicks, counts) = (unique("clicks-fail"), unique("counts-fail"));
    let (stdout, stderr) = assert_passed(&run_example(
        dir.path(),
        &b,
        &clicks,
        &counts,
        &["--fail-after", "2000"],
    ));
    assert!(
        stderr.contains("injected failure"),
        "no failure reported:\n{stderr}"
    );
    assert!(
        stdout.contains("1 restart (1 failure injected)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("** attempt 1 "),
        "no restore reported:\n{stdout}"
    );
    assert_counts_exactly_once(&b, &counts, &stdout);
}
