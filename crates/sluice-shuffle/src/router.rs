//! [`RangeRouter`]: global statistics compiled for routing, and the choice of a subtask for a
//! key (Iceberg's `MapRangePartitioner` and `SketchRangePartitioner`).
//!
//! - Map: a hash lookup of the key. A key on one subtask goes there; a key split over several
//!   goes to each in proportion to its routing weight; a key the statistics do not know goes
//!   round robin.
//! - Sketch: a binary search of the bounds.
//!
//! In both cases a subtask computed for more subtasks than there are now is folded with `%`
//! ([`adjust_for_rescale`]).
//!
//! Where sluice differs: Iceberg draws a uniform random number per record of a split key. sluice
//! walks a Weyl sequence per split key (adding the golden ratio modulo 2^64, started at a random
//! point per producer subtask): each share gets its proportion of the key's records within one
//! record over any stretch, not only on average, so a subtask holding part of a heavy key
//! receives no random excess. `sluice-bench shuffle-skew` measures the difference.

use crate::bounds::{adjust_for_rescale, partition, partition_point};
use crate::global::{GlobalStatistics, Routing};
use crate::rng::mix;
use crate::statistics::{ShuffleKey, StatisticsType};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// 2^64 / φ: the step of the Weyl sequence.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

#[derive(Clone, Copy, Debug)]
enum Target {
    One(usize),
    Split(usize),
}

#[derive(Debug)]
struct Split {
    subtasks: Vec<usize>,
    cumulative: Vec<u64>,
    total: u64,
}

#[derive(Debug)]
enum Table<K> {
    Map {
        keys: FxHashMap<K, Target>,
        splits: Vec<Split>,
    },
    Sketch {
        bounds: Vec<K>,
    },
}

/// Global statistics compiled for routing (a hash table of keys, or the bounds), shared by the
/// routers of one producer subtask.
#[derive(Debug)]
pub struct RouteTable<K> {
    checkpoint: u64,
    computed_for: usize,
    keys: usize,
    table: Table<K>,
}

impl<K: ShuffleKey> RouteTable<K> {
    /// Compiles `statistics`.
    pub fn new(statistics: &GlobalStatistics<K>) -> Self {
        let table = match &statistics.routing {
            Routing::Map(m) => {
                let mut keys = FxHashMap::default();
                keys.reserve(m.keys().len());
                let mut splits = Vec::new();
                for (k, a) in m.keys() {
                    let target = if a.subtasks().len() == 1 {
                        Target::One(a.subtasks()[0])
                    } else {
                        let mut total = 0;
                        let cumulative = a
                            .routing_weights()
                            .into_iter()
                            .map(|w| {
                                total += w;
                                total
                            })
                            .collect();
                        splits.push(Split {
                            subtasks: a.subtasks().to_vec(),
                            cumulative,
                            total,
                        });
                        Target::Split(splits.len() - 1)
                    };
                    keys.insert(k.clone(), target);
                }
                Table::Map { keys, splits }
            }
            Routing::Sketch(bounds) => Table::Sketch {
                bounds: bounds.clone(),
            },
        };
        RouteTable {
            checkpoint: statistics.checkpoint,
            computed_for: statistics.computed_for(),
            keys: statistics.len(),
            table,
        }
    }

    /// The checkpoint of the statistics.
    pub fn checkpoint(&self) -> u64 {
        self.checkpoint
    }

    /// Map or Sketch.
    pub fn kind(&self) -> StatisticsType {
        match self.table {
            Table::Map { .. } => StatisticsType::Map,
            Table::Sketch { .. } => StatisticsType::Sketch,
        }
    }

    /// Keys assigned (Map) or bounds (Sketch).
    pub fn len(&self) -> usize {
        self.keys
    }

    /// Whether nothing is assigned and there is no bound.
    pub fn is_empty(&self) -> bool {
        self.keys == 0
    }
}

impl<K> RangeRouter<K> {
    /// The table routed by.
    pub fn table(&self) -> &Arc<RouteTable<K>> {
        &self.table
    }

    /// How many keys the (Map) statistics did not know so far; they went round robin.
    pub fn unknown_keys(&self) -> u64 {
        self.unknown
    }
}

/// Routes keys by a [`RouteTable`]. One per producer subtask (it keeps the position of each
/// split key's sequence and the round-robin counter of unknown keys).
///
/// ```
/// use sluice_shuffle::{CompletedData, CompletedStatistics, GlobalStatistics, RangeRouter, RouteTable};
/// use std::sync::Arc;
///
/// // Key 1 weighs 60 of 100: over 2 subtasks it fills subtask 0 and puts 10 on subtask 1.
/// let completed = CompletedStatistics {
///     checkpoint: 1,
///     downstream_parallelism: 2,
///     data: CompletedData::Map(vec![(1u32, 60), (2, 30), (3, 10)]),
/// };
/// let global = GlobalStatistics::compute(&completed, 2, 0.0).unwrap();
/// let mut router = RangeRouter::new(Arc::new(RouteTable::new(&global)), 7);
/// let to_one: usize = (0..6_000).map(|_| router.route(&1, 2)).sum();
/// assert!((998..=1_002).contains(&to_one)); // 10 of every 60, within a record or two
/// assert_eq!(router.route(&3, 2), 1);
/// ```
#[derive(Debug)]
pub struct RangeRouter<K> {
    table: Arc<RouteTable<K>>,
    sequences: Vec<u64>,
    unknown: u64,
}

impl<K: ShuffleKey> RangeRouter<K> {
    /// A router over `table`; `seed` picks where each split key's sequence starts.
    pub fn new(table: Arc<RouteTable<K>>, seed: u64) -> Self {
        let splits = match &table.table {
            Table::Map { splits, .. } => splits.len(),
            Table::Sketch { .. } => 0,
        };
        let sequences = (0..splits as u64).map(|i| mix(seed ^ mix(i))).collect();
        RangeRouter {
            table,
            sequences,
            unknown: 0,
        }
    }

    /// The subtask of `key` among `num_partitions`.
    #[inline]
    pub fn route(&mut self, key: &K, num_partitions: usize) -> usize {
        let computed_for = self.table.computed_for;
        match &self.table.table {
            Table::Sketch { bounds } => partition(key, bounds, num_partitions),
            Table::Map { keys, splits } => {
                let subtask = match keys.get(key) {
                    Some(Target::One(s)) => *s,
                    Some(Target::Split(i)) => {
                        let split = &splits[*i];
                        let s = &mut self.sequences[*i];
                        *s = s.wrapping_add(GOLDEN);
                        let x = ((u128::from(*s) * u128::from(split.total)) >> 64) as u64;
                        let pos = partition_point(&split.cumulative, |&c| c <= x);
                        split.subtasks[pos.min(split.subtasks.len() - 1)]
                    }
                    None => {
                        self.unknown += 1;
                        (self.unknown % num_partitions.max(1) as u64) as usize
                    }
                };
                adjust_for_rescale(subtask, computed_for, num_partitions)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::global::{CompletedData, CompletedStatistics};

    fn router(freq: Vec<(u32, u64)>, n: usize, seed: u64) -> RangeRouter<u32> {
        let c = CompletedStatistics {
            checkpoint: 1,
            downstream_parallelism: n,
            data: CompletedData::Map(freq),
        };
        let g = GlobalStatistics::compute(&c, n, 0.0).unwrap();
        RangeRouter::new(Arc::new(RouteTable::new(&g)), seed)
    }

    #[test]
    fn a_split_key_goes_to_each_share_in_proportion() {
        // Key 0 weighs 350 of 800 over 8 subtasks (target 100): shares 100, 100, 100, 50.
        let freq = vec![(0, 350), (1, 230), (2, 120), (3, 100)];
        for seed in 0..20 {
            let mut r = router(freq.clone(), 8, seed);
            let mut counts = [0u64; 8];
            for _ in 0..35_000 {
                counts[r.route(&0, 8)] += 1;
            }
            // Within a few records of 35,000 × share / 350, for every seed.
            for (s, expected) in [(0, 10_000), (1, 10_000), (2, 10_000), (3, 5_000)] {
                assert!(counts[s].abs_diff(expected) <= 4, "seed {seed}: {counts:?}");
            }
            // A short stretch is balanced too: 700 records give 200, 200, 200, 100 (± 3).
            let mut r = router(freq.clone(), 8, seed);
            let mut prefix = [0u64; 8];
            for _ in 0..700 {
                prefix[r.route(&0, 8)] += 1;
            }
            for (s, expected) in [(0, 200), (1, 200), (2, 200), (3, 100)] {
                assert!(prefix[s].abs_diff(expected) <= 3, "seed {seed}: {prefix:?}");
            }
        }
    }

    #[test]
    fn unknown_keys_go_round_robin() {
        let mut r = router(vec![(1, 10)], 4, 0);
        let got: Vec<usize> = (0..8).map(|_| r.route(&99, 4)).collect();
        assert_eq!(got, vec![1, 2, 3, 0, 1, 2, 3, 0]);
        assert_eq!(r.unknown_keys(), 8);
    }

    #[test]
    fn an_assignment_for_more_subtasks_folds_onto_fewer() {
        // 4 keys of equal weight over 4 subtasks, routed among 3 or 6.
        let mut r = router(vec![(0, 5), (1, 5), (2, 5), (3, 5)], 4, 0);
        let at3: Vec<usize> = (0..4).map(|k| r.route(&k, 3)).collect();
        assert_eq!(at3, vec![0, 1, 2, 0]);
        let at6: Vec<usize> = (0..4).map(|k| r.route(&k, 6)).collect();
        assert_eq!(at6, vec![0, 1, 2, 3]);
    }
}
