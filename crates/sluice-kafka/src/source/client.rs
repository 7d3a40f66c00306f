//! The enumerator's metadata client: a [`BaseConsumer`] that is never assigned, used from the
//! coordinator's worker pool only (its calls block), to list topics and partitions and to fetch
//! what offset resolution needs (watermarks, the group's committed offsets, offsets for times).
//! Which topics a subscription takes from a listing is decided by the pure [`subscribe`].

use crate::error::KafkaError;
use crate::settings::KafkaSettings;
use crate::source::offsets::{FactsNeeded, PartitionFacts, TopicPartition};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use regex::Regex;
use sluice_core::sync::lock;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// The topics a source reads.
#[derive(Clone, Debug)]
pub(crate) enum Subscription {
    /// These topics, each of which must exist (unless the source waits for topics).
    Topics(Vec<String>),
    /// Every topic whose whole name matches (anchored at both ends, as Java's `matches`).
    Pattern(Regex),
}

/// The partitions a subscription takes from a listing, and the listed topics that are missing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Discovered {
    pub(crate) partitions: Vec<TopicPartition>,
    pub(crate) missing: Vec<String>,
}

/// What `subscription` takes from `listing` (topic → its partitions).
pub(crate) fn subscribe(
    subscription: &Subscription,
    listing: &BTreeMap<String, Vec<i32>>,
) -> Discovered {
    let mut d = Discovered::default();
    let mut take = |topic: &str, parts: &[i32]| {
        d.partitions
            .extend(parts.iter().map(|p| (topic.to_string(), *p)));
    };
    match subscription {
        Subscription::Topics(topics) => {
            for t in topics {
                match listing.get(t) {
                    Some(parts) if !parts.is_empty() => take(t, parts),
                    _ => d.missing.push(t.clone()),
                }
            }
        }
        Subscription::Pattern(re) => {
            for (t, parts) in listing {
                if re.is_match(t) {
                    take(t, parts);
                }
            }
        }
    }
    d.partitions.sort();
    d.partitions.dedup();
    d
}

/// A metadata client (see the module docs); the consumer is made on first use.
pub(crate) struct MetadataClient {
    settings: KafkaSettings,
    group: String,
    timeout: Duration,
    consumer: Mutex<Option<BaseConsumer>>,
}

impl MetadataClient {
    pub(crate) fn new(settings: KafkaSettings, group: String, timeout: Duration) -> Self {
        MetadataClient {
            settings,
            group,
            timeout,
            consumer: Mutex::new(None),
        }
    }

    pub(crate) fn servers(&self) -> String {
        self.settings.bootstrap_servers().to_string()
    }

    fn with_consumer<R>(
        &self,
        f: impl FnOnce(&BaseConsumer) -> Result<R, KafkaError>,
    ) -> Result<R, KafkaError> {
        let mut slot = lock(&self.consumer);
        if slot.is_none() {
            let mut config = self.settings.client_config();
            config
                .set("group.id", &self.group)
                .set("enable.auto.commit", "false");
            let consumer: BaseConsumer = config.create().map_err(|source| KafkaError::Client {
                what: "creating the source's metadata consumer".into(),
                source,
            })?;
            *slot = Some(consumer);
        }
        match slot.as_ref() {
            Some(c) => f(c),
            None => Err(KafkaError::Settings {
                role: "Kafka source".into(),
                message: "the metadata consumer could not be made".into(),
            }),
        }
    }

    /// Every topic and its partitions, trying up to `attempts` times (each waits up to the
    /// request timeout); then [`KafkaError::Unreachable`] naming the bootstrap servers.
    pub(crate) fn list_topics(
        &self,
        attempts: u32,
    ) -> Result<BTreeMap<String, Vec<i32>>, KafkaError> {
        let mut last = String::new();
        for attempt in 1..=attempts.max(1) {
            let listed = self.with_consumer(|c| {
                c.fetch_metadata(None, self.timeout)
                    .map_err(|source| KafkaError::Client {
                        what: "fetching metadata".into(),
                        source,
                    })
            });
            match listed {
                Ok(m) => {
                    return Ok(m
                        .topics()
                        .iter()
                        .filter(|t| t.error().is_none())
                        .map(|t| {
                            let mut parts: Vec<i32> =
                                t.partitions().iter().map(|p| p.id()).collect();
                            parts.sort_unstable();
                            (t.name().to_string(), parts)
                        })
                        .collect());
                }
                Err(e) => {
                    tracing::warn!(
                        "kafka source: metadata attempt {attempt} of {attempts} at {} failed: {e}",
                        self.servers()
                    );
                    last = e.to_string();
                }
            }
        }
        Err(KafkaError::Unreachable {
            servers: self.servers(),
            attempts: attempts.max(1),
            message: last,
        })
    }

    /// The facts of each of `partitions` that resolving their offsets needs.
    pub(crate) fn facts(
        &self,
        partitions: &[TopicPartition],
        needed: &FactsNeeded,
    ) -> Result<BTreeMap<TopicPartition, PartitionFacts>, KafkaError> {
        self.with_consumer(|c| {
            let client = |what: String| move |source| KafkaError::Client { what, source };
            let mut facts = BTreeMap::new();
            for (topic, partition) in partitions {
                let (low, high) = c
                    .fetch_watermarks(topic, *partition, self.timeout)
                    .map_err(client(format!(
                        "fetching the offsets of {topic}-{partition}"
                    )))?;
                facts.insert(
                    (topic.clone(), *partition),
                    PartitionFacts {
                        low,
                        high,
                        ..PartitionFacts::default()
                    },
                );
            }
            if needed.committed {
                let list = offsets_list(partitions, None)?;
                let got = c
                    .committed_offsets(list, self.timeout)
                    .map_err(client(format!(
                        "fetching the committed offsets of group {}",
                        self.group
                    )))?;
                for (tp, o) in partitions.iter().zip(read_offsets(&got, partitions)) {
                    if let Some(f) = facts.get_mut(tp) {
                        f.committed = o;
                    }
                }
            }
            for (time, start) in [(needed.start_time, true), (needed.stop_time, false)] {
                let Some(time) = time else { continue };
                let list = offsets_list(partitions, Some(time))?;
                let got = c
                    .offsets_for_times(list, self.timeout)
                    .map_err(client(format!("fetching the offsets for time {time}")))?;
                for (tp, o) in partitions.iter().zip(read_offsets(&got, partitions)) {
                    if let Some(f) = facts.get_mut(tp) {
                        if start {
                            f.start_at_time = o;
                        } else {
                            f.stop_at_time = o;
                        }
                    }
                }
            }
            Ok(facts)
        })
    }
}

/// A list of `partitions`, each at `offset` (or without one).
fn offsets_list(
    partitions: &[TopicPartition],
    offset: Option<i64>,
) -> Result<TopicPartitionList, KafkaError> {
    let mut l = TopicPartitionList::new();
    for (topic, partition) in partitions {
        match offset {
            Some(o) => l
                .add_partition_offset(topic, *partition, Offset::Offset(o))
                .map_err(|source| KafkaError::Client {
                    what: format!("listing {topic}-{partition}"),
                    source,
                })?,
            None => {
                l.add_partition(topic, *partition);
            }
        }
    }
    Ok(l)
}

/// The concrete offset `list` holds for each of `partitions`, in their order (`None` for none).
fn read_offsets(list: &TopicPartitionList, partitions: &[TopicPartition]) -> Vec<Option<i64>> {
    partitions
        .iter()
        .map(
            |(t, p)| match list.find_partition(t, *p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) if o >= 0 => Some(o),
                _ => None,
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing() -> BTreeMap<String, Vec<i32>> {
        BTreeMap::from([
            ("clicks-a".to_string(), vec![0, 1]),
            ("clicks-b".to_string(), vec![0]),
            ("xclicks-c".to_string(), vec![0]),
            ("views".to_string(), vec![0, 1, 2]),
        ])
    }

    #[test]
    fn listed_topics_are_taken_and_missing_ones_named() {
        let s = Subscription::Topics(vec!["views".into(), "nope".into()]);
        let d = subscribe(&s, &listing());
        assert_eq!(d.partitions.len(), 3);
        assert_eq!(d.missing, vec!["nope".to_string()]);
    }

    #[test]
    fn a_pattern_matches_whole_topic_names() {
        let s = Subscription::Pattern(Regex::new("^(?:clicks-.*)$").unwrap());
        let d = subscribe(&s, &listing());
        assert_eq!(
            d.partitions,
            vec![
                ("clicks-a".to_string(), 0),
                ("clicks-a".to_string(), 1),
                ("clicks-b".to_string(), 0)
            ]
        );
        assert!(d.missing.is_empty());
    }
}
