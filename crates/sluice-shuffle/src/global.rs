//! What the coordinator aggregates ([`CompletedStatistics`]) and what it sends to the subtasks
//! ([`GlobalStatistics`]), how one becomes the other for a downstream parallelism, and the rule
//! for keys that advance ([`CompletedStatistics::advanced_from`]).

use crate::assignment::{AssignmentError, MapAssignment};
use crate::bounds::range_bounds;
use crate::rng::stable_hash;
use crate::statistics::{ShuffleKey, StatisticsType};
use serde::{Deserialize, Serialize};

/// The raw statistics of one completed aggregation: every subtask's statistics for one
/// checkpoint, merged. The coordinator checkpoints these (not the global statistics), so that a
/// restore at another downstream parallelism recomputes the assignment or bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompletedStatistics<K> {
    /// The checkpoint whose statistics these are.
    pub checkpoint: u64,
    /// The downstream parallelism the subtasks reported with them.
    pub downstream_parallelism: usize,
    /// Exact counts or samples.
    pub data: CompletedData<K>,
}

/// Least share of a checkpoint's statistics (weight for Map, samples for Sketch) above the
/// previous statistics' highest key that makes [`CompletedStatistics::advanced_from`] keep only
/// that part.
pub const ADVANCE_MIN_SHARE: f64 = 0.02;

/// Exact counts per key, or the merged sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CompletedData<K> {
    /// (key, count), in no particular order.
    Map(Vec<(K, u64)>),
    /// The merged sample of keys.
    Sketch(Vec<K>),
}

impl<K: Ord + Clone> CompletedStatistics<K> {
    /// The highest key counted or sampled.
    pub fn highest(&self) -> Option<&K> {
        match &self.data {
            CompletedData::Map(m) => m.iter().map(|(k, _)| k).max(),
            CompletedData::Sketch(s) => s.iter().max(),
        }
    }

    /// These statistics as they describe the traffic to come when keys advance past
    /// `previous` (the statistics completed before): only the part above `previous`'s highest
    /// key, if it holds at least [`ADVANCE_MIN_SHARE`] of the weight (Map) or samples (Sketch)
    /// and at least `downstream` keys or samples; otherwise unchanged.
    ///
    /// Statistics route records two checkpoints later. When keys lead with a time bucket, the
    /// checkpoint in which a new bucket begins holds both buckets, but what follows is all new:
    /// bounds (or an assignment) over both would give the new bucket only the ranges above the
    /// old one, a share of the subtasks. Kept, the old bucket's keys are below the statistics:
    /// a Sketch router spreads them by hash, a Map router round robin. With keys that do not
    /// advance, hardly anything lies above the previous highest key, and nothing changes.
    ///
    /// ```
    /// use sluice_shuffle::{CompletedData, CompletedStatistics};
    /// let stats = |checkpoint, samples: Vec<(u32, u32)>| CompletedStatistics {
    ///     checkpoint,
    ///     downstream_parallelism: 2,
    ///     data: CompletedData::Sketch(samples),
    /// };
    /// // Hour 7, then a checkpoint in which hour 8 begins: only hour 8 is kept.
    /// let before = stats(1, (0..100).map(|u| (7, u)).collect());
    /// let mixed = stats(2, (0..100).map(|u| (7 + u % 2, u)).collect());
    /// let kept = mixed.advanced_from(Some(&before), 2);
    /// let CompletedData::Sketch(samples) = &kept.data else { unreachable!() };
    /// assert!(samples.iter().all(|(hour, _)| *hour == 8));
    /// // The same hour again: unchanged.
    /// let again = stats(3, (0..100).map(|u| (7, u)).collect());
    /// assert_eq!(again.clone().advanced_from(Some(&before), 2), again);
    /// ```
    pub fn advanced_from(
        self,
        previous: Option<&CompletedStatistics<K>>,
        downstream: usize,
    ) -> Self {
        let Some(high) = previous.and_then(|p| p.highest()).cloned() else {
            return self;
        };
        let data = match self.data {
            CompletedData::Map(counts) => {
                let total: u64 = counts.iter().map(|(_, c)| *c).sum();
                let above: Vec<(K, u64)> =
                    counts.iter().filter(|(k, _)| *k > high).cloned().collect();
                let weight: u64 = above.iter().map(|(_, c)| *c).sum();
                if above.len() >= downstream
                    && weight < total
                    && weight as f64 >= ADVANCE_MIN_SHARE * total as f64
                {
                    CompletedData::Map(above)
                } else {
                    CompletedData::Map(counts)
                }
            }
            CompletedData::Sketch(samples) => {
                let above: Vec<K> = samples.iter().filter(|k| **k > high).cloned().collect();
                if above.len() >= downstream
                    && above.len() < samples.len()
                    && above.len() as f64 >= ADVANCE_MIN_SHARE * samples.len() as f64
                {
                    CompletedData::Sketch(above)
                } else {
                    CompletedData::Sketch(samples)
                }
            }
        };
        CompletedStatistics { data, ..self }
    }
}

impl<K> CompletedStatistics<K> {
    /// Map or Sketch.
    pub fn kind(&self) -> StatisticsType {
        match self.data {
            CompletedData::Map(_) => StatisticsType::Map,
            CompletedData::Sketch(_) => StatisticsType::Sketch,
        }
    }

    /// Whether no key was counted or sampled (the coordinator then keeps what it had).
    pub fn is_empty(&self) -> bool {
        match &self.data {
            CompletedData::Map(m) => m.is_empty(),
            CompletedData::Sketch(s) => s.is_empty(),
        }
    }

    /// Distinct keys (Map) or samples (Sketch).
    pub fn len(&self) -> usize {
        match &self.data {
            CompletedData::Map(m) => m.len(),
            CompletedData::Sketch(s) => s.len(),
        }
    }
}

/// What the subtasks route by: a key assignment (Map) or range bounds (Sketch), computed from
/// the statistics of one checkpoint for one downstream parallelism.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GlobalStatistics<K> {
    /// The checkpoint whose statistics these were computed from.
    pub checkpoint: u64,
    /// The downstream parallelism they were computed for.
    pub downstream_parallelism: usize,
    /// The assignment or the bounds.
    pub routing: Routing<K>,
    /// Sketch: the lowest and the highest key sampled. A key outside them is one the
    /// statistics know nothing of (a time bucket newer than the sample's, as keys that lead
    /// with an hour bring at every hour): the router spreads such keys by hash instead of
    /// sending them all to the first or the last range.
    pub sampled: Option<(K, K)>,
}

/// A key assignment or range bounds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Routing<K> {
    /// Each key's subtasks and weights.
    Map(MapAssignment<K>),
    /// At most `downstream_parallelism - 1` sorted bounds.
    Sketch(Vec<K>),
}

impl<K: ShuffleKey> GlobalStatistics<K> {
    /// The global statistics of `completed` for `downstream_parallelism` subtasks, with a base
    /// weight of `base_weight_percent` % (Map only).
    pub fn compute(
        completed: &CompletedStatistics<K>,
        downstream_parallelism: usize,
        base_weight_percent: f64,
    ) -> Result<Self, AssignmentError> {
        let (routing, sampled) = match &completed.data {
            CompletedData::Map(counts) => {
                let assignment = MapAssignment::from_key_frequency(
                    downstream_parallelism,
                    counts.iter().cloned(),
                    base_weight_percent,
                )?;
                (Routing::Map(assignment), None)
            }
            CompletedData::Sketch(samples) => {
                let mut samples = samples.clone();
                let bounds = range_bounds(downstream_parallelism, &mut samples);
                // range_bounds sorted the samples.
                let sampled = samples.first().cloned().zip(samples.last().cloned());
                (Routing::Sketch(bounds), sampled)
            }
        };
        Ok(GlobalStatistics {
            checkpoint: completed.checkpoint,
            downstream_parallelism,
            routing,
            sampled,
        })
    }

    /// Map or Sketch.
    pub fn kind(&self) -> StatisticsType {
        match self.routing {
            Routing::Map(_) => StatisticsType::Map,
            Routing::Sketch(_) => StatisticsType::Sketch,
        }
    }

    /// Keys assigned (Map) or bounds (Sketch).
    pub fn len(&self) -> usize {
        match &self.routing {
            Routing::Map(m) => m.keys().len(),
            Routing::Sketch(b) => b.len(),
        }
    }

    /// Whether there is no key assigned and no bound.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of subtasks the routing distinguishes: the assignment's parallelism, or the
    /// number of ranges (bounds + 1), which is what rescaling compares with.
    pub fn computed_for(&self) -> usize {
        match &self.routing {
            Routing::Map(m) => m.num_partitions(),
            Routing::Sketch(b) => b.len() + 1,
        }
    }

    /// A stable 64-bit digest of these statistics (their encoding, hashed): a subtask that
    /// restored statistics sends it with its request, and the coordinator answers only if its
    /// own differ (Iceberg sends `hashCode()`).
    pub fn signature(&self) -> u64 {
        match sluice_core::codec::encode(self) {
            Ok(bytes) => stable_hash(&bytes),
            // Cannot encode: a signature that matches nothing, so the coordinator answers.
            Err(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed_map() -> CompletedStatistics<u32> {
        CompletedStatistics {
            checkpoint: 4,
            downstream_parallelism: 2,
            data: CompletedData::Map(vec![(2, 30), (1, 60), (3, 10)]),
        }
    }

    #[test]
    fn map_statistics_become_an_assignment_for_any_parallelism() {
        let c = completed_map();
        let g2 = GlobalStatistics::compute(&c, 2, 0.0).unwrap();
        assert_eq!(
            (g2.checkpoint, g2.kind(), g2.len(), g2.computed_for()),
            (4, StatisticsType::Map, 3, 2)
        );
        let g5 = GlobalStatistics::compute(&c, 5, 0.0).unwrap();
        assert_eq!(g5.computed_for(), 5);
        assert_ne!(g2.signature(), g5.signature());
        assert_eq!(
            g2.signature(),
            GlobalStatistics::compute(&c, 2, 0.0).unwrap().signature()
        );
    }

    #[test]
    fn advancing_map_statistics_keep_the_new_bucket_only() {
        let map = |checkpoint, counts: Vec<((u32, u32), u64)>| CompletedStatistics {
            checkpoint,
            downstream_parallelism: 2,
            data: CompletedData::Map(counts),
        };
        let before = map(1, (0..50).map(|u| ((3, u), 10)).collect());
        let mixed = map(2, (0..50).map(|u| ((3 + u % 2, u), 10)).collect());
        let kept = mixed.advanced_from(Some(&before), 2);
        let CompletedData::Map(counts) = &kept.data else {
            panic!("expected a map")
        };
        assert_eq!(counts.len(), 25);
        assert!(counts.iter().all(|((bucket, _), _)| *bucket == 4));
        // Too little above the previous highest key (2 of 102 by weight): unchanged.
        let mut few: Vec<((u32, u32), u64)> = (0..50).map(|u| ((3, u), 2)).collect();
        few.extend([((4, 0), 1), ((4, 1), 1)]);
        let few = map(3, few);
        assert_eq!(few.clone().advanced_from(Some(&before), 2), few);
        // Fewer keys above than subtasks: unchanged; nothing before: unchanged.
        let one = map(4, vec![((3, 0), 1), ((9, 9), 50)]);
        assert_eq!(one.clone().advanced_from(Some(&before), 2), one);
        assert_eq!(one.clone().advanced_from(None, 2), one);
    }

    #[test]
    fn sketch_statistics_become_bounds() {
        let c = CompletedStatistics {
            checkpoint: 9,
            downstream_parallelism: 3,
            data: CompletedData::Sketch((0..30u32).rev().collect()),
        };
        let g = GlobalStatistics::compute(&c, 3, 50.0).unwrap();
        assert_eq!(g.routing, Routing::Sketch(vec![9, 19]));
        assert_eq!(g.computed_for(), 3);
        assert_eq!(g.sampled, Some((0, 29)), "the lowest and highest sample");
        let map = GlobalStatistics::compute(&completed_map(), 2, 0.0).unwrap();
        assert_eq!(map.sampled, None);
    }
}
