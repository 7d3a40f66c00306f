//! [`KafkaReader`]: the reader of one subtask. Its partitions are read by a fetch thread
//! (`fetch.rs`); the task decodes the fetched batches itself in `poll_next`, tracks each split's
//! next offset (the offset after the last record it returned: the split's position in a
//! checkpoint), finishes bounded splits at their stopping offset, and commits the offsets of a
//! checkpoint to the consumer group when the checkpoint completes (monitoring only).

use crate::error::KafkaError;
use crate::source::KafkaSourceMetrics;
use crate::source::deserializer::{KafkaDeserializer, MalformedRecords};
use crate::source::fetch::{Fetched, FetchedBatch, Fetcher};
use crate::source::offsets::TopicPartition;
use crate::source::split::{KafkaPartitionSplit, finished_at, split_id};
use sluice_core::{CheckpointId, Data, UserError};
use sluice_source::{ReaderPoll, SourceReader, SplitId};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::task::{Context, Poll};

/// Checkpoints whose offsets are kept for committing (older ones are dropped unnotified).
const MAX_PENDING_COMMITS: usize = 32;

/// A split being read.
#[derive(Debug)]
struct Reading {
    id: SplitId,
    next_offset: i64,
    stopping_offset: Option<i64>,
}

/// Reads the partitions assigned to one subtask (see the module docs).
pub struct KafkaReader<T> {
    fetcher: Fetcher,
    deserializer: KafkaDeserializer<T>,
    malformed: MalformedRecords,
    metrics: Arc<KafkaSourceMetrics>,
    splits: BTreeMap<TopicPartition, Reading>,
    /// Splits finished but not reported yet.
    finished: VecDeque<SplitId>,
    /// The batch being decoded and how far.
    current: Option<(FetchedBatch, usize)>,
    /// Offsets to commit per checkpoint, when committing is on.
    commits: Option<BTreeMap<CheckpointId, BTreeMap<TopicPartition, i64>>>,
}

impl<T> std::fmt::Debug for KafkaReader<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaReader")
            .field("splits", &self.splits)
            .finish()
    }
}

impl<T: Data> KafkaReader<T> {
    pub(crate) fn new(
        fetcher: Fetcher,
        deserializer: KafkaDeserializer<T>,
        malformed: MalformedRecords,
        metrics: Arc<KafkaSourceMetrics>,
        commit: bool,
    ) -> Self {
        KafkaReader {
            fetcher,
            deserializer,
            malformed,
            metrics,
            splits: BTreeMap::new(),
            finished: VecDeque::new(),
            current: None,
            commits: commit.then(BTreeMap::new),
        }
    }

    fn finish(&mut self, tp: &TopicPartition) {
        if let Some(r) = self.splits.remove(tp) {
            self.fetcher.unassign(tp.clone());
            self.finished.push_back(r.id);
        }
    }

    /// Decodes up to `max` records of the current batch; `None` when it held none for a split
    /// still read.
    fn decode(&mut self, max: usize) -> Result<Option<ReaderPoll<T>>, UserError> {
        let Some((batch, pos)) = &mut self.current else {
            return Ok(None);
        };
        let tp = (batch.topic.to_string(), batch.partition);
        let Some(split) = self.splits.get_mut(&tp) else {
            // A split finished or given away while its records were in flight.
            self.current = None;
            return Ok(None);
        };
        let mut out = Vec::new();
        let mut read = 0u64;
        let mut skipped = 0u64;
        let mut reached_stop = finished_at(split.next_offset, split.stopping_offset);
        while !reached_stop && *pos < batch.len() && out.len() < max {
            let (Some(offset), Some(record)) = (batch.offset(*pos), batch.record(*pos)) else {
                break;
            };
            *pos += 1;
            if offset < split.next_offset {
                continue; // already returned
            }
            if split.stopping_offset.is_some_and(|stop| offset >= stop) {
                reached_stop = true;
                break;
            }
            split.next_offset = offset + 1;
            read += 1;
            match self.deserializer.deserialize(&record) {
                Ok(Some(v)) => out.push(v),
                Ok(None) => {}
                Err(message) => match self.malformed {
                    MalformedRecords::Skip => skipped += 1,
                    MalformedRecords::Fail => {
                        return Err(KafkaError::Malformed {
                            topic: tp.0,
                            partition: tp.1,
                            offset,
                            message,
                        }
                        .into());
                    }
                },
            }
            reached_stop = finished_at(split.next_offset, split.stopping_offset);
        }
        let id = split.id.clone();
        self.metrics.add(read, skipped);
        if *pos >= batch.len() {
            self.current = None;
        }
        if reached_stop {
            self.current = None;
            self.finish(&tp);
        }
        Ok((!out.is_empty()).then_some(ReaderPoll::Records {
            split: id,
            records: out,
        }))
    }
}

impl<T: Data> SourceReader for KafkaReader<T> {
    type Out = T;
    type Split = KafkaPartitionSplit;

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<Result<ReaderPoll<T>, UserError>> {
        loop {
            if self.current.is_some() {
                match self.decode(max.max(1)) {
                    Ok(Some(records)) => return Poll::Ready(Ok(records)),
                    Ok(None) => continue,
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
            if let Some(id) = self.finished.pop_front() {
                return Poll::Ready(Ok(ReaderPoll::SplitFinished(id)));
            }
            if self.splits.is_empty() {
                return Poll::Ready(Ok(ReaderPoll::NeedsSplits));
            }
            match self.fetcher.poll_recv(cx) {
                Poll::Ready(Some(Fetched::Batch(b))) => self.current = Some((b, 0)),
                Poll::Ready(Some(Fetched::Failed(message))) => {
                    return Poll::Ready(Err(message.into()));
                }
                Poll::Ready(Some(Fetched::Positions(positions))) => {
                    for (tp, position) in positions {
                        let done = self
                            .splits
                            .get(&tp)
                            .is_some_and(|r| finished_at(position, r.stopping_offset));
                        if done {
                            self.finish(&tp);
                        }
                    }
                }
                Poll::Ready(None) => {
                    return Poll::Ready(Err("the Kafka source's fetch thread ended".into()));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn add_splits(&mut self, splits: Vec<KafkaPartitionSplit>) -> Result<(), UserError> {
        for s in splits {
            let id = split_id(&s.topic, s.partition);
            if s.is_finished() {
                self.finished.push_back(id);
                continue;
            }
            let tp = s.topic_partition();
            self.fetcher.assign(tp.clone(), s.next_offset);
            self.splits.insert(
                tp,
                Reading {
                    id,
                    next_offset: s.next_offset,
                    stopping_offset: s.stopping_offset,
                },
            );
        }
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        checkpoint: CheckpointId,
    ) -> Result<Vec<KafkaPartitionSplit>, UserError> {
        if let Some(commits) = &mut self.commits {
            let offsets = self
                .splits
                .iter()
                .map(|(tp, r)| (tp.clone(), r.next_offset))
                .collect();
            commits.insert(checkpoint, offsets);
            while commits.len() > MAX_PENDING_COMMITS {
                commits.pop_first();
            }
        }
        Ok(self
            .splits
            .iter()
            .map(|((topic, partition), r)| KafkaPartitionSplit {
                topic: topic.clone(),
                partition: *partition,
                next_offset: r.next_offset,
                stopping_offset: r.stopping_offset,
            })
            .collect())
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        if let Some(commits) = &mut self.commits {
            let offsets = commits.remove(&checkpoint);
            commits.retain(|c, _| *c > checkpoint);
            if let Some(offsets) = offsets {
                self.fetcher.commit(offsets);
            }
        }
        Ok(())
    }
}
