//! Scenarios `shuffle-skew` and `shuffle-cost` (issue 10): how balanced the range shuffle's
//! routing is, and what it costs.
//!
//! - [`skew`](mod@skew): (max − mean) / mean records per downstream subtask over seeded runs, at 8 and 32
//!   subtasks: Map statistics on a long-tail distribution (a 24-key decaying head and a 240-key
//!   flat tail, the generator of Iceberg's `TestRangePartitionerSkew`), Sketch statistics on
//!   random 128-bit ids (1M records through the real sampling, merge and bounds). Beside them:
//!   hash partitioning on the same records, Iceberg's random choice among a key's subtasks on
//!   the same assignment (Map), Iceberg's coordinator sample size (Sketch), and the means
//!   Iceberg reports.
//! - [`cost`]: the range partitioner's records/s beside a hash partitioner on the same keys,
//!   and the coordinator's aggregation and assignment time for 32 subtasks × 100,000-key maps
//!   beside a hand-written merge and sort of the same maps.

pub mod cost;
pub mod skew;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;

/// Iceberg's long-tail weights (`DataDistributionUtil.longTailDistribution(100_000, 24, 240,
/// 100, 2.0, 0.7)`): 24 keys decaying by 0.7 from 100,000 (stopping at 100) with up to 2 %
/// jitter, then 240 keys of weight 100 × U[0, 2).
pub fn long_tail(seed: u64) -> BTreeMap<u64, u64> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut weights = BTreeMap::new();
    let mut current: u64 = 100_000;
    for key in 0..24u64 {
        let jitter = rng.random_range(0.0..0.02);
        weights.insert(key, ((current as f64 * (1.0 + jitter)) as u64).max(1));
        if current > 100 {
            current = (current as f64 * 0.7) as u64;
        }
    }
    for key in 24..264u64 {
        weights.insert(key, ((100.0 * rng.random_range(0.0..2.0)) as u64).max(1));
    }
    weights
}

/// Draws keys by weight from `weights` (inverse CDF).
pub struct WeightedKeys {
    keys: Vec<u64>,
    cumulative: Vec<u64>,
}

impl WeightedKeys {
    /// A sampler of `weights`.
    pub fn new(weights: &BTreeMap<u64, u64>) -> Self {
        let mut total = 0;
        let (keys, cumulative) = weights
            .iter()
            .map(|(k, w)| {
                total += w;
                (*k, total)
            })
            .unzip();
        WeightedKeys { keys, cumulative }
    }

    /// One key.
    pub fn draw(&self, rng: &mut impl Rng) -> u64 {
        let total = *self.cumulative.last().unwrap_or(&1);
        let x = rng.random_range(0..total);
        self.keys[self.cumulative.partition_point(|&c| c <= x)]
    }
}

/// (max − mean) / mean of `counts`.
pub fn skew(counts: &[u64]) -> f64 {
    let max = *counts.iter().max().unwrap_or(&0) as f64;
    let mean = counts.iter().sum::<u64>() as f64 / counts.len().max(1) as f64;
    if mean == 0.0 {
        0.0
    } else {
        (max - mean) / mean
    }
}
