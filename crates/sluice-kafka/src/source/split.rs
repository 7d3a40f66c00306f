//! [`KafkaPartitionSplit`]: one topic-partition with its next offset (and its stopping offset in
//! bounded mode): the split of the Kafka source and its position in a checkpoint.

use serde::{Deserialize, Serialize};
use sluice_source::{SourceSplit, SplitId};

/// One topic-partition to read, from `next_offset` on (Flink's `KafkaPartitionSplit`). Its id
/// is `"{topic}-{partition}"`. In a reader's checkpoint `next_offset` is the offset after the
/// last record it returned, so a restored job resumes there.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct KafkaPartitionSplit {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset of the next record to read (resolved by the enumerator, `>= 0`).
    pub next_offset: i64,
    /// In bounded mode, the offset at which the split ends (that offset is not read).
    pub stopping_offset: Option<i64>,
}

impl KafkaPartitionSplit {
    /// The split's topic-partition.
    pub(crate) fn topic_partition(&self) -> (String, i32) {
        (self.topic.clone(), self.partition)
    }

    /// Whether the split is read to its end: in bounded mode, once the next offset reached the
    /// stopping offset (immediately if it started there or beyond).
    pub(crate) fn is_finished(&self) -> bool {
        finished_at(self.next_offset, self.stopping_offset)
    }
}

/// Whether a split at `position` with `stop` is finished: `position >= stop` (never without a
/// stopping offset). `position` is the next offset to read, or the consumer's position after a
/// partition end (a transactional topic ends in control records, which have offsets but are
/// never returned).
pub(crate) fn finished_at(position: i64, stop: Option<i64>) -> bool {
    stop.is_some_and(|stop| position >= stop)
}

impl SourceSplit for KafkaPartitionSplit {
    fn split_id(&self) -> SplitId {
        split_id(&self.topic, self.partition)
    }
}

/// The id of the split of `topic`-`partition`.
pub(crate) fn split_id(topic: &str, partition: i32) -> SplitId {
    SplitId::from(format!("{topic}-{partition}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_is_named_after_its_partition_and_finishes_at_its_stopping_offset() {
        let mut s = KafkaPartitionSplit {
            topic: "clicks".into(),
            partition: 3,
            next_offset: 4,
            stopping_offset: Some(6),
        };
        assert_eq!(&*s.split_id(), "clicks-3");
        assert!(!s.is_finished());
        s.next_offset = 6;
        assert!(s.is_finished());
        assert!(finished_at(7, Some(6)), "a control record past the stop");
        assert!(finished_at(0, Some(0)), "starting at the stop");
        assert!(!finished_at(i64::MAX, None), "unbounded never finishes");
    }
}
