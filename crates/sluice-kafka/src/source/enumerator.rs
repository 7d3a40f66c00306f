//! [`KafkaEnumerator`]: discovers the subscribed topic-partitions (on start and every discovery
//! interval, on the coordinator's worker pool), resolves their starting (and, bounded, stopping)
//! offsets there too, and assigns each partition to its owner reader by Flink's rule
//! ([`owner`], pure). Readers never request splits; assignments for readers not registered yet
//! wait for their registration. Its checkpoint is the partitions already assigned and the splits
//! still waiting, so a restore never assigns a partition twice.

use crate::error::KafkaError;
use crate::source::client::{Discovered, MetadataClient, Subscription, subscribe};
use crate::source::offsets::{
    FactsNeeded, StartingOffsets, StoppingOffsets, TopicPartition, resolve_start, resolve_stop,
};
use crate::source::split::KafkaPartitionSplit;
use serde::{Deserialize, Serialize};
use sluice_core::{CheckpointId, SubtaskIndex, UserError};
use sluice_source::{SplitEnumerator, SplitEnumeratorContext};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// Attempts of the first metadata fetch before the job fails as unreachable.
pub(crate) const FIRST_FETCH_ATTEMPTS: u32 = 3;
/// How often a source without partition discovery looks again for topics it waits for.
const TOPIC_WAIT_PERIOD: Duration = Duration::from_secs(1);

/// Java's `String.hashCode` (over UTF-16 code units, wrapping), which Flink's assignment uses.
pub(crate) fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// The reader that owns `topic`-`partition` among `readers` (Flink's
/// `KafkaSourceEnumerator.getSplitOwner`): the topic's start index, then round robin over the
/// partitions.
pub(crate) fn owner(topic: &str, partition: i32, readers: usize) -> SubtaskIndex {
    let readers = i64::try_from(readers.max(1)).unwrap_or(i64::MAX);
    let start = i64::from(java_string_hash(topic).wrapping_mul(31) & 0x7FFF_FFFF) % readers;
    let owner = (start + i64::from(partition.max(0))) % readers;
    usize::try_from(owner).unwrap_or(0)
}

/// What the Kafka enumerator stores in a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaEnumeratorCheckpoint {
    assigned: Vec<TopicPartition>,
    pending: Vec<KafkaPartitionSplit>,
    initial_discovery_done: bool,
}

/// The enumerator's settings, shared with its asynchronous calls.
pub(crate) struct EnumeratorConfig {
    pub(crate) client: MetadataClient,
    pub(crate) subscription: Subscription,
    pub(crate) starting: StartingOffsets,
    pub(crate) stopping: Option<StoppingOffsets>,
    pub(crate) discovery: Option<Duration>,
    pub(crate) wait_for_topics: bool,
}

/// A round of discovery as the worker pool saw it.
pub(crate) enum Round {
    Listed(Discovered),
    /// A later round failed (the broker is away for a while): tried again next interval.
    Failed(String),
}

/// Discovers and assigns the partitions of a Kafka source (see the module docs).
pub struct KafkaEnumerator {
    config: Arc<EnumeratorConfig>,
    assigned: BTreeSet<TopicPartition>,
    pending: Vec<KafkaPartitionSplit>,
    resolving: BTreeSet<TopicPartition>,
    initial_discovery_done: bool,
    /// No discovery round will come any more (bounded, or discovery off, with every topic
    /// found).
    discovery_over: bool,
    /// Cancels the periodic discovery call.
    periodic: Option<Box<dyn FnOnce() + Send>>,
    signalled: BTreeSet<SubtaskIndex>,
}

impl std::fmt::Debug for KafkaEnumerator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaEnumerator")
            .field("assigned", &self.assigned.len())
            .field("pending", &self.pending.len())
            .finish()
    }
}

impl KafkaEnumerator {
    pub(crate) fn new(
        config: Arc<EnumeratorConfig>,
        checkpoint: Option<KafkaEnumeratorCheckpoint>,
    ) -> Self {
        let c = checkpoint.unwrap_or_default();
        KafkaEnumerator {
            config,
            assigned: c.assigned.into_iter().collect(),
            pending: c.pending,
            resolving: BTreeSet::new(),
            initial_discovery_done: c.initial_discovery_done,
            discovery_over: false,
            periodic: None,
            signalled: BTreeSet::new(),
        }
    }

    fn bounded(&self) -> bool {
        self.config.stopping.is_some()
    }

    /// Whether discovery repeats: on with an interval; or waiting for topics.
    fn repeats(&self) -> bool {
        (self.config.discovery.is_some() && !self.bounded()) || self.config.wait_for_topics
    }

    fn on_round(
        &mut self,
        ctx: &SplitEnumeratorContext<Self>,
        round: Round,
    ) -> Result<(), UserError> {
        if self.discovery_over {
            return Ok(());
        }
        let found = match round {
            Round::Listed(d) => d,
            Round::Failed(e) => {
                tracing::warn!("kafka source: partition discovery failed, trying again later: {e}");
                return Ok(());
            }
        };
        let waiting = match &self.config.subscription {
            Subscription::Topics(_) => !found.missing.is_empty(),
            Subscription::Pattern(_) => found.partitions.is_empty(),
        };
        if let Some(topic) = found.missing.first()
            && !self.config.wait_for_topics
            && !self.initial_discovery_done
        {
            return Err(KafkaError::MissingTopic {
                topic: topic.clone(),
                servers: self.config.client.servers(),
            }
            .into());
        }
        if waiting && self.config.wait_for_topics {
            tracing::info!("kafka source: waiting for topics {:?}", found.missing);
        }
        let known = |tp: &TopicPartition| {
            self.assigned.contains(tp)
                || self.resolving.contains(tp)
                || self
                    .pending
                    .iter()
                    .any(|s| s.partition == tp.1 && s.topic == tp.0)
        };
        let new: Vec<TopicPartition> = found
            .partitions
            .into_iter()
            .filter(|tp| !known(tp))
            .collect();
        let initial = !self.initial_discovery_done;
        if new.is_empty() {
            self.initial_discovery_done = true;
        } else {
            self.resolving.extend(new.iter().cloned());
            // Partitions found after the first discovery start from their earliest offset.
            let start = if initial {
                self.config.starting.clone()
            } else {
                StartingOffsets::Earliest
            };
            let config = self.config.clone();
            ctx.call_async(
                move || resolve(&config, &new, &start).map_err(UserError::from),
                move |e: &mut Self, ctx, splits| e.on_resolved(ctx, splits, initial),
            )?;
        }
        let repeats_for_partitions = self.config.discovery.is_some() && !self.bounded();
        let keep_waiting = waiting && self.config.wait_for_topics;
        if !(repeats_for_partitions || keep_waiting) {
            self.discovery_over = true;
            if let Some(cancel) = self.periodic.take() {
                cancel();
            }
        }
        self.assign_pending(ctx)?;
        self.maybe_finish(ctx)
    }

    fn on_resolved(
        &mut self,
        ctx: &SplitEnumeratorContext<Self>,
        splits: Vec<KafkaPartitionSplit>,
        initial: bool,
    ) -> Result<(), UserError> {
        for s in splits {
            self.resolving.remove(&s.topic_partition());
            self.pending.push(s);
        }
        if initial {
            self.initial_discovery_done = true;
        }
        self.assign_pending(ctx)?;
        self.maybe_finish(ctx)
    }

    /// Assigns every waiting split whose owner has a registered reader.
    fn assign_pending(&mut self, ctx: &SplitEnumeratorContext<Self>) -> Result<(), UserError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let readers = ctx.current_parallelism();
        let registered = ctx.registered_readers();
        let mut assignment: BTreeMap<SubtaskIndex, Vec<KafkaPartitionSplit>> = BTreeMap::new();
        let mut still = Vec::new();
        for s in std::mem::take(&mut self.pending) {
            let o = owner(&s.topic, s.partition, readers);
            if registered.contains_key(&o) {
                assignment.entry(o).or_default().push(s);
            } else {
                still.push(s);
            }
        }
        self.pending = still;
        if assignment.is_empty() {
            return Ok(());
        }
        for splits in assignment.values() {
            self.assigned
                .extend(splits.iter().map(KafkaPartitionSplit::topic_partition));
        }
        ctx.assign_splits(assignment)?;
        Ok(())
    }

    /// Bounded: once discovery is over and every split is assigned, no more splits will come.
    fn maybe_finish(&mut self, ctx: &SplitEnumeratorContext<Self>) -> Result<(), UserError> {
        if !(self.bounded()
            && self.discovery_over
            && self.initial_discovery_done
            && self.resolving.is_empty()
            && self.pending.is_empty())
        {
            return Ok(());
        }
        for subtask in ctx.registered_readers().into_keys() {
            if self.signalled.insert(subtask) {
                ctx.signal_no_more_splits(subtask)?;
            }
        }
        Ok(())
    }
}

/// Splits for `partitions`, their offsets resolved from what the broker says (blocking: on the
/// worker pool).
fn resolve(
    config: &EnumeratorConfig,
    partitions: &[TopicPartition],
    start: &StartingOffsets,
) -> Result<Vec<KafkaPartitionSplit>, KafkaError> {
    let needed = FactsNeeded::of(start, config.stopping.as_ref());
    let facts = config.client.facts(partitions, &needed)?;
    let mut splits = Vec::with_capacity(partitions.len());
    for tp in partitions {
        let Some(f) = facts.get(tp) else { continue };
        let next_offset = resolve_start(start, tp, f).map_err(|message| KafkaError::Settings {
            role: "Kafka source".into(),
            message,
        })?;
        splits.push(KafkaPartitionSplit {
            topic: tp.0.clone(),
            partition: tp.1,
            next_offset,
            stopping_offset: config.stopping.as_ref().map(|s| resolve_stop(s, tp, f)),
        });
    }
    Ok(splits)
}

/// One round of discovery (blocking: on the worker pool). The first round of an enumerator
/// retries and fails the job; later ones report a failure and are tried again.
fn discover(config: &EnumeratorConfig, first: bool) -> Result<Round, KafkaError> {
    let attempts = if first { FIRST_FETCH_ATTEMPTS } else { 1 };
    match config.client.list_topics(attempts) {
        Ok(listing) => Ok(Round::Listed(subscribe(&config.subscription, &listing))),
        Err(e) if first => Err(e),
        Err(e) => Ok(Round::Failed(e.to_string())),
    }
}

impl SplitEnumerator for KafkaEnumerator {
    type Split = KafkaPartitionSplit;
    type Checkpoint = KafkaEnumeratorCheckpoint;

    fn start(&mut self, ctx: &SplitEnumeratorContext<Self>) -> Result<(), UserError> {
        let config = self.config.clone();
        if !self.repeats() {
            ctx.call_async(
                move || discover(&config, true).map_err(UserError::from),
                |e: &mut Self, ctx, round| e.on_round(ctx, round),
            )?;
            return Ok(());
        }
        let period = match self.config.discovery {
            Some(d) if !self.bounded() => d,
            _ => TOPIC_WAIT_PERIOD,
        };
        let mut first = true;
        let periodic = ctx.call_async_periodic(
            move || {
                let round = discover(&config, first);
                first = false;
                round.map_err(UserError::from)
            },
            |e: &mut Self, ctx, round| e.on_round(ctx, round),
            Duration::ZERO,
            period,
        )?;
        self.periodic = Some(Box::new(move || periodic.cancel()));
        Ok(())
    }

    fn handle_split_request(
        &mut self,
        _ctx: &SplitEnumeratorContext<Self>,
        _subtask: SubtaskIndex,
    ) -> Result<(), UserError> {
        // Kafka readers are given their partitions; a request (a reader without partitions)
        // needs no answer.
        Ok(())
    }

    fn add_splits_back(
        &mut self,
        ctx: &SplitEnumeratorContext<Self>,
        splits: Vec<KafkaPartitionSplit>,
        _subtask: SubtaskIndex,
    ) -> Result<(), UserError> {
        for s in splits {
            self.assigned.remove(&s.topic_partition());
            self.pending.push(s);
        }
        self.assign_pending(ctx)
    }

    fn add_reader(
        &mut self,
        ctx: &SplitEnumeratorContext<Self>,
        subtask: SubtaskIndex,
    ) -> Result<(), UserError> {
        // A registration is a new attempt: it must be told again.
        self.signalled.remove(&subtask);
        self.assign_pending(ctx)?;
        self.maybe_finish(ctx)
    }

    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
    ) -> Result<KafkaEnumeratorCheckpoint, UserError> {
        Ok(KafkaEnumeratorCheckpoint {
            assigned: self.assigned.iter().cloned().collect(),
            pending: self.pending.clone(),
            initial_discovery_done: self.initial_discovery_done,
        })
    }

    fn close(&mut self) -> Result<(), UserError> {
        if let Some(cancel) = self.periodic.take() {
            cancel();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_javas() {
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("hello"), 99_162_322);
        assert_eq!(java_string_hash("clicks"), -1_357_714_453);
    }

    #[test]
    fn owners_follow_flinks_rule() {
        // Worked out with Java's arithmetic: "hello" starts at reader 2 of 3.
        let hello: Vec<_> = (0..4).map(|p| owner("hello", p, 3)).collect();
        assert_eq!(hello, vec![2, 0, 1, 2]);
        let clicks: Vec<_> = (0..3).map(|p| owner("clicks", p, 2)).collect();
        assert_eq!(clicks, vec![1, 0, 1]);
        assert_eq!(owner("anything", 7, 1), 0);
    }
}
