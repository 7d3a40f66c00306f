//! The coordinator's aggregation of local statistics per checkpoint (Iceberg's
//! `AggregatedStatisticsTracker`).
//!
//! - An aggregation per checkpoint id, so that several checkpoints can be in flight.
//! - An event for a checkpoint older than the last completed one is stale and ignored (one for
//!   the same checkpoint is accepted, as in Iceberg: the check is "strictly older").
//! - A second event of the same subtask for the same checkpoint is a duplicate and ignored.
//! - An aggregation completes when every subtask of the operator reported; then it and every
//!   older aggregation, complete or not, are dropped.
//! - Types: an aggregation starts as the last completed statistics' type (else Sketch if
//!   configured so, else Map). Map + Map merges counts; in `Auto` beyond
//!   [`COORDINATOR_SKETCH_SWITCH_THRESHOLD`](crate::sizing::COORDINATOR_SKETCH_SWITCH_THRESHOLD)
//!   keys the aggregation becomes a sketch. A Sketch from a subtask turns it into a sketch; a
//!   Map into a sketch aggregation is first replayed into a subtask-sized sketch; sketches
//!   merge in a [`ReservoirUnion`] of the coordinator's size; empty ones are skipped.

use crate::global::{CompletedData, CompletedStatistics};
use crate::rng::Rng;
use crate::sizing::ReservoirSizing;
use crate::statistics::{
    LocalStatistics, ReservoirUnion, ShuffleKey, StatisticsType, map_to_sketch,
};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// What one subtask's statistics did to the aggregation.
#[derive(Debug, PartialEq)]
pub enum Update<K> {
    /// Older than the last completed checkpoint: ignored.
    Stale {
        /// The last completed checkpoint.
        completed: u64,
    },
    /// The subtask already reported for this checkpoint: ignored.
    Duplicate,
    /// No such subtask (the index is not below the operator's parallelism): ignored.
    UnknownSubtask,
    /// Merged; other subtasks have yet to report.
    Pending {
        /// Subtasks that reported so far.
        reported: usize,
    },
    /// Merged, and every subtask has now reported: the merged statistics.
    Complete(CompletedStatistics<K>),
}

/// How the tracker is set up.
#[derive(Clone, Copy, Debug)]
pub struct TrackerSettings {
    /// The operator's parallelism: how many subtasks report per checkpoint.
    pub parallelism: usize,
    /// The configured statistics type.
    pub statistics_type: StatisticsType,
    /// `Auto`: an aggregation with more keys than this becomes a sketch.
    pub switch_threshold: usize,
    /// How large the merged sample is.
    pub sizing: ReservoirSizing,
}

enum Merged<K> {
    Map(FxHashMap<K, u64>),
    Sketch(ReservoirUnion<K>),
}

/// One checkpoint's aggregation.
struct Aggregation<K> {
    reported: Vec<bool>,
    count: usize,
    downstream: usize,
    merged: Merged<K>,
}

/// Aggregates the subtasks' statistics per checkpoint.
pub struct StatisticsTracker<K> {
    settings: TrackerSettings,
    aggregations: BTreeMap<u64, Aggregation<K>>,
    /// The last completed checkpoint and its type.
    completed: Option<(u64, StatisticsType)>,
    rng: Rng,
}

impl<K: ShuffleKey> StatisticsTracker<K> {
    /// A tracker that last completed `restored` (checkpoint and type), if anything.
    pub fn new(settings: TrackerSettings, restored: Option<(u64, StatisticsType)>) -> Self {
        StatisticsTracker {
            settings,
            aggregations: BTreeMap::new(),
            completed: restored,
            rng: Rng::random(),
        }
    }

    /// Seeds the samplers (for reproducible tests and benchmarks).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = Rng::new(seed);
        self
    }

    /// Checkpoints with an aggregation in progress.
    pub fn in_progress(&self) -> Vec<u64> {
        self.aggregations.keys().copied().collect()
    }

    /// The type an aggregation of `checkpoint` currently has, if one is in progress.
    pub fn type_of(&self, checkpoint: u64) -> Option<StatisticsType> {
        self.aggregations.get(&checkpoint).map(|a| match a.merged {
            Merged::Map(_) => StatisticsType::Map,
            Merged::Sketch(_) => StatisticsType::Sketch,
        })
    }

    /// Merges the statistics `subtask` took at `checkpoint`, for `downstream` subtasks.
    pub fn update(
        &mut self,
        subtask: usize,
        checkpoint: u64,
        downstream: usize,
        statistics: LocalStatistics<K>,
    ) -> Update<K> {
        if let Some((completed, _)) = self.completed
            && completed > checkpoint
        {
            return Update::Stale { completed };
        }
        let parallelism = self.settings.parallelism;
        if subtask >= parallelism {
            return Update::UnknownSubtask;
        }
        let initial = match self.completed {
            Some((_, kind)) => kind,
            None => self.settings.statistics_type.initial(),
        };
        let seed = self.rng.next_u64();
        let sizing = self.settings.sizing;
        let aggregation = self
            .aggregations
            .entry(checkpoint)
            .or_insert_with(|| Aggregation {
                reported: vec![false; parallelism],
                count: 0,
                downstream,
                merged: match initial {
                    StatisticsType::Sketch => Merged::Sketch(union(sizing, downstream, seed)),
                    _ => Merged::Map(FxHashMap::default()),
                },
            });
        if aggregation.reported[subtask] {
            return Update::Duplicate;
        }
        aggregation.reported[subtask] = true;
        aggregation.count += 1;
        merge(aggregation, statistics, &self.settings, seed);
        if aggregation.count < parallelism {
            return Update::Pending {
                reported: aggregation.count,
            };
        }
        let Some(done) = self.aggregations.remove(&checkpoint) else {
            return Update::Pending { reported: 0 };
        };
        // This one and every older one, complete or not, are done.
        self.aggregations.retain(|c, _| *c > checkpoint);
        let completed = complete(checkpoint, done);
        self.completed = Some((checkpoint, completed.kind()));
        Update::Complete(completed)
    }
}

/// The coordinator's union for `downstream` subtasks under `sizing`.
fn union<K>(sizing: ReservoirSizing, downstream: usize, seed: u64) -> ReservoirUnion<K> {
    let size = sizing.coordinator(downstream);
    match sizing {
        ReservoirSizing::Iceberg => ReservoirUnion::with_seed(size, seed),
        ReservoirSizing::KeepAll => ReservoirUnion::keeping_all(size, seed),
    }
}

fn merge<K: ShuffleKey>(
    a: &mut Aggregation<K>,
    statistics: LocalStatistics<K>,
    settings: &TrackerSettings,
    seed: u64,
) {
    match statistics {
        LocalStatistics::Map(counts) => match &mut a.merged {
            Merged::Map(m) => {
                for (k, c) in counts {
                    *m.entry(k).or_insert(0) += c;
                }
                if settings.statistics_type == StatisticsType::Auto
                    && m.len() > settings.switch_threshold
                {
                    to_sketch(a, settings.sizing, seed);
                }
            }
            Merged::Sketch(union) => {
                let size = settings.sizing.operator(settings.parallelism, a.downstream);
                union.update(map_to_sketch(counts, size));
            }
        },
        LocalStatistics::Sketch(sketch) => {
            if matches!(a.merged, Merged::Map(_)) {
                to_sketch(a, settings.sizing, seed);
            }
            if let Merged::Sketch(union) = &mut a.merged
                && !sketch.is_empty()
            {
                union.update(sketch);
            }
        }
    }
}

/// Turns a Map aggregation into a sketch by replaying its counts.
fn to_sketch<K: ShuffleKey>(a: &mut Aggregation<K>, sizing: ReservoirSizing, seed: u64) {
    let mut union = union(sizing, a.downstream, seed);
    let counts = match std::mem::replace(&mut a.merged, Merged::Map(FxHashMap::default())) {
        Merged::Map(m) => m,
        Merged::Sketch(u) => {
            a.merged = Merged::Sketch(u);
            return;
        }
    };
    for (k, c) in counts {
        union.update_item_repeated(&k, c);
    }
    a.merged = Merged::Sketch(union);
}

fn complete<K: ShuffleKey>(checkpoint: u64, a: Aggregation<K>) -> CompletedStatistics<K> {
    let data = match a.merged {
        Merged::Map(m) => {
            tracing::debug!(
                checkpoint,
                keys = m.len(),
                "completed map statistics aggregation"
            );
            CompletedData::Map(m.into_iter().collect())
        }
        Merged::Sketch(union) => match union.result() {
            Some(r) => {
                tracing::debug!(
                    checkpoint,
                    reservoir = r.k(),
                    seen = r.items_seen(),
                    samples = r.samples().len(),
                    "completed sketch statistics aggregation"
                );
                CompletedData::Sketch(r.into_samples())
            }
            None => CompletedData::Sketch(Vec::new()),
        },
    };
    CompletedStatistics {
        checkpoint,
        downstream_parallelism: a.downstream,
        data,
    }
}

#[cfg(test)]
mod tests;
