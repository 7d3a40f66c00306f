//! What the coordinator aggregates ([`CompletedStatistics`]) and what it sends to the subtasks
//! ([`GlobalStatistics`]), and how one becomes the other for a downstream parallelism.

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

/// Exact counts per key, or the merged sample.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum CompletedData<K> {
    /// (key, count), in no particular order.
    Map(Vec<(K, u64)>),
    /// The merged sample of keys.
    Sketch(Vec<K>),
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
        let routing = match &completed.data {
            CompletedData::Map(counts) => Routing::Map(MapAssignment::from_key_frequency(
                downstream_parallelism,
                counts.iter().cloned(),
                base_weight_percent,
            )?),
            CompletedData::Sketch(samples) => {
                let mut samples = samples.clone();
                Routing::Sketch(range_bounds(downstream_parallelism, &mut samples))
            }
        };
        Ok(GlobalStatistics {
            checkpoint: completed.checkpoint,
            downstream_parallelism,
            routing,
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
    fn sketch_statistics_become_bounds() {
        let c = CompletedStatistics {
            checkpoint: 9,
            downstream_parallelism: 3,
            data: CompletedData::Sketch((0..30u32).rev().collect()),
        };
        let g = GlobalStatistics::compute(&c, 3, 50.0).unwrap();
        assert_eq!(g.routing, Routing::Sketch(vec![9, 19]));
        assert_eq!(g.computed_for(), 3);
    }
}
