//! Where a partition starts and where a bounded one stops: [`StartingOffsets`],
//! [`StoppingOffsets`], [`OffsetResetStrategy`], and the pure resolution of both from the facts
//! the enumerator fetched for the partition ([`PartitionFacts`]).

use std::collections::BTreeMap;

/// A topic-partition: `(topic, partition)`.
pub(crate) type TopicPartition = (String, i32);

/// What a partition without a usable committed offset starts from
/// ([`StartingOffsets::Committed`]), as Kafka's `auto.offset.reset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetResetStrategy {
    /// The partition's earliest offset.
    Earliest,
    /// The partition's latest offset (only records written from then on).
    Latest,
    /// No reset: a partition without a committed offset fails the job, naming it.
    None,
}

/// Where each partition starts (Flink's `OffsetsInitializer` for the starting offsets). Resolved
/// to a concrete offset by the enumerator before the split is assigned. Partitions discovered
/// while the job runs (after the first discovery) always start from their earliest offset, as in
/// Flink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StartingOffsets {
    /// Each partition's earliest offset (the default).
    Earliest,
    /// Each partition's latest offset at discovery.
    Latest,
    /// The offsets the consumer group committed; partitions without one (or with one outside
    /// the partition's range) use the reset strategy. Needs a group id.
    Committed(OffsetResetStrategy),
    /// For each partition, the first record whose timestamp is at or after this many
    /// milliseconds since the epoch (the latest offset if there is none).
    Timestamp(i64),
    /// The given offset of each listed `(topic, partition)`; partitions not listed start from
    /// their earliest offset.
    Specific(BTreeMap<(String, i32), i64>),
}

/// Where each partition stops in bounded mode (Flink's `OffsetsInitializer` for the stopping
/// offsets): the stopping offset itself is not read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoppingOffsets {
    /// Each partition's latest offset when the job starts.
    Latest,
    /// For each partition, the first record whose timestamp is at or after this many
    /// milliseconds since the epoch (the latest offset if there is none): records before it
    /// are read.
    Timestamp(i64),
    /// The given offset of each listed `(topic, partition)`; partitions not listed stop at
    /// their earliest offset, so nothing of them is read (Flink's `OffsetsInitializer.offsets`).
    Specific(BTreeMap<(String, i32), i64>),
}

/// What the enumerator fetched about one partition, to resolve its offsets from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PartitionFacts {
    /// The low watermark (earliest offset).
    pub(crate) low: i64,
    /// The high watermark (latest offset: the offset the next record will get).
    pub(crate) high: i64,
    /// The group's committed offset, if any was asked for and there is one.
    pub(crate) committed: Option<i64>,
    /// The first offset at or after the starting timestamp, if asked for and there is one.
    pub(crate) start_at_time: Option<i64>,
    /// The first offset at or after the stopping timestamp, if asked for and there is one.
    pub(crate) stop_at_time: Option<i64>,
}

/// What the enumerator must fetch besides the watermarks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FactsNeeded {
    /// The group's committed offsets.
    pub(crate) committed: bool,
    /// Offsets for the starting timestamp.
    pub(crate) start_time: Option<i64>,
    /// Offsets for the stopping timestamp.
    pub(crate) stop_time: Option<i64>,
}

impl FactsNeeded {
    /// What resolving `start` (and `stop`, in bounded mode) needs.
    pub(crate) fn of(start: &StartingOffsets, stop: Option<&StoppingOffsets>) -> Self {
        FactsNeeded {
            committed: matches!(start, StartingOffsets::Committed(_)),
            start_time: match start {
                StartingOffsets::Timestamp(t) => Some(*t),
                _ => None,
            },
            stop_time: match stop {
                Some(StoppingOffsets::Timestamp(t)) => Some(*t),
                _ => None,
            },
        }
    }
}

/// The offset `tp` starts from under `start`, given its facts; an error names the partition.
pub(crate) fn resolve_start(
    start: &StartingOffsets,
    tp: &TopicPartition,
    facts: &PartitionFacts,
) -> Result<i64, String> {
    let offset = match start {
        StartingOffsets::Earliest => facts.low,
        StartingOffsets::Latest => facts.high,
        StartingOffsets::Timestamp(_) => facts.start_at_time.unwrap_or(facts.high),
        StartingOffsets::Specific(map) => map.get(tp).copied().unwrap_or(facts.low),
        StartingOffsets::Committed(reset) => match facts.committed {
            Some(c) if c >= facts.low && c <= facts.high => c,
            _ => match reset {
                OffsetResetStrategy::Earliest => facts.low,
                OffsetResetStrategy::Latest => facts.high,
                OffsetResetStrategy::None => {
                    return Err(format!(
                        "partition {}-{} has no committed offset in range [{}, {}] (committed: \
                         {:?}) and the reset strategy is None",
                        tp.0, tp.1, facts.low, facts.high, facts.committed
                    ));
                }
            },
        },
    };
    Ok(offset.max(0))
}

/// The offset `tp` stops at under `stop`, given its facts.
pub(crate) fn resolve_stop(
    stop: &StoppingOffsets,
    tp: &TopicPartition,
    facts: &PartitionFacts,
) -> i64 {
    let offset = match stop {
        StoppingOffsets::Latest => facts.high,
        StoppingOffsets::Timestamp(_) => facts.stop_at_time.unwrap_or(facts.high),
        StoppingOffsets::Specific(map) => map.get(tp).copied().unwrap_or(facts.low),
    };
    offset.max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> PartitionFacts {
        PartitionFacts {
            low: 5,
            high: 20,
            committed: Some(12),
            start_at_time: Some(9),
            stop_at_time: None,
        }
    }

    fn tp() -> TopicPartition {
        ("t".into(), 1)
    }

    #[test]
    fn starting_offsets_resolve_from_the_facts() {
        let f = facts();
        assert_eq!(resolve_start(&StartingOffsets::Earliest, &tp(), &f), Ok(5));
        assert_eq!(resolve_start(&StartingOffsets::Latest, &tp(), &f), Ok(20));
        assert_eq!(
            resolve_start(&StartingOffsets::Timestamp(1), &tp(), &f),
            Ok(9)
        );
        let no_time = PartitionFacts {
            start_at_time: None,
            ..facts()
        };
        assert_eq!(
            resolve_start(&StartingOffsets::Timestamp(1), &tp(), &no_time),
            Ok(20)
        );
        let specific = StartingOffsets::Specific(BTreeMap::from([(tp(), 7)]));
        assert_eq!(resolve_start(&specific, &tp(), &f), Ok(7));
        assert_eq!(resolve_start(&specific, &("t".into(), 2), &f), Ok(5));
    }

    #[test]
    fn committed_offsets_fall_back_to_the_reset_strategy() {
        let c = |r| StartingOffsets::Committed(r);
        assert_eq!(
            resolve_start(&c(OffsetResetStrategy::None), &tp(), &facts()),
            Ok(12)
        );
        for committed in [None, Some(2), Some(21), Some(-1001)] {
            let f = PartitionFacts {
                committed,
                ..facts()
            };
            assert_eq!(
                resolve_start(&c(OffsetResetStrategy::Earliest), &tp(), &f),
                Ok(5)
            );
            assert_eq!(
                resolve_start(&c(OffsetResetStrategy::Latest), &tp(), &f),
                Ok(20)
            );
            let e = resolve_start(&c(OffsetResetStrategy::None), &tp(), &f).unwrap_err();
            assert!(e.contains("partition t-1 has no committed offset"), "{e}");
        }
    }

    #[test]
    fn stopping_offsets_resolve_from_the_facts() {
        let f = facts();
        assert_eq!(resolve_stop(&StoppingOffsets::Latest, &tp(), &f), 20);
        assert_eq!(resolve_stop(&StoppingOffsets::Timestamp(3), &tp(), &f), 20);
        let at = PartitionFacts {
            stop_at_time: Some(11),
            ..facts()
        };
        assert_eq!(resolve_stop(&StoppingOffsets::Timestamp(3), &tp(), &at), 11);
        let specific = StoppingOffsets::Specific(BTreeMap::from([(tp(), 8)]));
        assert_eq!(resolve_stop(&specific, &tp(), &f), 8);
        assert_eq!(resolve_stop(&specific, &("u".into(), 0), &f), 5);
    }

    #[test]
    fn only_what_is_needed_is_fetched() {
        let n = FactsNeeded::of(
            &StartingOffsets::Committed(OffsetResetStrategy::Latest),
            Some(&StoppingOffsets::Timestamp(4)),
        );
        assert_eq!(
            n,
            FactsNeeded {
                committed: true,
                start_time: None,
                stop_time: Some(4)
            }
        );
        assert_eq!(
            FactsNeeded::of(&StartingOffsets::Earliest, None),
            FactsNeeded::default()
        );
    }
}
