//! [`RangeRouter`]: global statistics compiled for routing, and the choice of a subtask for a
//! key (Iceberg's `MapRangePartitioner` and `SketchRangePartitioner`).
//!
//! - Map: a hash lookup of the key. A key on one subtask goes there; a key split over several
//!   goes to each in proportion to its routing weight; a key the statistics do not know goes to
//!   the range it falls in among the known keys (the first subtask of the next known key), or
//!   round robin when it is below or above all of them.
//! - Sketch: a binary search of the bounds, for a key within the lowest and highest key
//!   sampled; a key outside them is spread by a hash of the key.
//!
//! In both cases a subtask computed for more subtasks than there are now is folded with `%`
//! ([`adjust_for_rescale`]).
//!
//! Where sluice differs: Iceberg draws a uniform random number per record of a split key. sluice
//! walks a Weyl sequence per split key (adding the golden ratio modulo 2^64, started at a random
//! point per producer subtask): each share gets its proportion of the key's records within one
//! record over any stretch, not only on average, so a subtask holding part of a heavy key
//! receives no random excess. `sluice-bench shuffle-skew` measures the difference.
//!
//! Where sluice differs, Map: Iceberg sends every key the statistics do not know round robin.
//! With keys that recur unevenly (per-minute window results of Zipf-popular users: every key
//! counts 1 in an interval, but two intervals later only the popular users come back, and
//! their ids sit together in the key order), the known keys that come back pile onto the
//! subtasks of the popular range while the rest spreads evenly, and the writers drift apart
//! (the main example's 2 writers: 0.93 on the default run). sluice sends an unknown key within
//! the known keys to the range it falls in, so every subtask receives its range, whether its
//! keys came back or not; only keys outside the known ones go round robin.
//!
//! Where sluice differs, Sketch: Iceberg sends a key above the highest bound to the last range
//! and one below the lowest to the first, whatever the samples held. When keys lead with a time
//! bucket (`hour(ts), user`, as most Iceberg tables are partitioned), every new bucket is above
//! all the samples of the statistics routed by (they are two checkpoints old), so the whole
//! bucket's traffic goes to the last writer until statistics of it arrive; and when a reader
//! catches up (a burst of buffered windows, a backfill), that can be most of the traffic. sluice
//! spreads the keys outside the sampled range by a hash of the key, so each such key still goes
//! to one subtask and the traffic stays balanced; keys within it route by the bounds as in
//! Iceberg. `sluice-bench shuffle-skew` measures this on advancing keys.

use crate::bounds::{adjust_for_rescale, partition, ranges_of};
use crate::global::{GlobalStatistics, Routing};
use crate::rng::mix;
use crate::statistics::{ShuffleKey, StatisticsType};
use index::{
    Choices, ChoicesView, KeyIndex, SequencedKeys, SequencedView, Shares, SketchIndex, order_prefix,
};
use std::sync::Arc;

mod index;

/// 2^64 / φ: the step of the Weyl sequence.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

#[derive(Debug)]
enum Table<K> {
    Map {
        keys: KeyIndex<K>,
        choices: Choices,
        /// The keys in sort order, each with its first subtask: where a key the statistics do
        /// not know falls among them.
        order: Vec<(K, usize)>,
    },
    Sketch {
        bounds: Vec<K>,
        /// The bounds bucketed by key prefix, when the key type has one.
        index: Option<SketchIndex>,
        /// The lowest and highest key sampled: keys outside go by hash.
        sampled: Option<(K, K)>,
    },
}

/// Whether `key` lies outside the sampled range `sampled`.
#[inline(always)]
fn outside<K: Ord>(sampled: &Option<(K, K)>, key: &K) -> bool {
    match sampled {
        Some((low, high)) => key < low || key > high,
        None => false,
    }
}

/// The subtask among `num_partitions` of a key outside the sampled range: by a hash of the key
/// (the same on every producer subtask, so the key goes to one subtask), counted in `unknown`.
#[cold]
#[inline(never)]
fn spread<K: std::hash::Hash>(key: &K, unknown: &mut u64, num_partitions: usize) -> usize {
    use std::hash::Hasher;
    *unknown += 1;
    let mut h = rustc_hash::FxHasher::default();
    key.hash(&mut h);
    (mix(h.finish()) % num_partitions.max(1) as u64) as usize
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
                let mut entries = Vec::with_capacity(m.keys().len());
                let mut choices = Choices::default();
                let mut order = Vec::with_capacity(m.keys().len());
                for (k, a) in m.keys() {
                    order.push((k.clone(), a.subtasks().first().copied().unwrap_or(0)));
                    let route = match a.subtasks() {
                        [one] => choices.single(*one),
                        subtasks => {
                            choices.split(Shares::new(subtasks.to_vec(), &a.routing_weights()))
                        }
                    };
                    entries.push((k.clone(), route));
                }
                Table::Map {
                    keys: KeyIndex::new(entries),
                    choices,
                    order,
                }
            }
            Routing::Sketch(bounds) => Table::Sketch {
                bounds: bounds.clone(),
                index: SketchIndex::new(bounds),
                sampled: statistics.sampled.clone(),
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

    /// How many keys the statistics did not know so far: Map, keys not assigned (they went
    /// round robin); Sketch, keys outside the sampled range (they went by hash).
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
    /// The Map table's keys with each split key's sequence (empty for Sketch).
    keys: Option<SequencedKeys<K>>,
    unknown: u64,
}

impl<K: ShuffleKey> RangeRouter<K> {
    /// A router over `table`; `seed` picks where each split key's sequence starts.
    pub fn new(table: Arc<RouteTable<K>>, seed: u64) -> Self {
        let keys = match &table.table {
            Table::Map { keys, .. } => {
                Some(SequencedKeys::new(keys, |i| mix(seed ^ mix(i as u64))))
            }
            Table::Sketch { .. } => None,
        };
        RangeRouter {
            table,
            keys,
            unknown: 0,
        }
    }

    /// The subtask of `key` among `num_partitions`.
    #[inline]
    pub fn route(&mut self, key: &K, num_partitions: usize) -> usize {
        let computed_for = self.table.computed_for;
        match &self.table.table {
            Table::Sketch {
                bounds, sampled, ..
            } => {
                if outside(sampled, key) {
                    spread(key, &mut self.unknown, num_partitions)
                } else {
                    partition(key, bounds, num_partitions)
                }
            }
            Table::Map { choices, order, .. } => {
                let subtask = match &mut self.keys {
                    Some(keys) => map_target(
                        &mut keys.view(),
                        choices.view(),
                        order,
                        &mut self.unknown,
                        key,
                        num_partitions,
                    ),
                    None => next_unknown(&mut self.unknown, num_partitions),
                };
                adjust_for_rescale(subtask, computed_for, num_partitions)
            }
        }
    }

    /// Appends the subtask of each record's key (`key(record)`) among `num_partitions`: the
    /// same subtasks, in the same order, as [`route`](Self::route) called record by record,
    /// with the table's kind decided once per batch, and (Sketch) the searches of
    /// [`LANES`] keys at a time run side by side.
    ///
    /// ```
    /// use sluice_shuffle::{CompletedData, CompletedStatistics, GlobalStatistics, RangeRouter, RouteTable};
    /// use std::sync::Arc;
    ///
    /// let completed = CompletedStatistics {
    ///     checkpoint: 1,
    ///     downstream_parallelism: 4,
    ///     data: CompletedData::Sketch((0u32..400).collect()),
    /// };
    /// let table = Arc::new(RouteTable::new(&GlobalStatistics::compute(&completed, 4, 0.0).unwrap()));
    /// let records: Vec<(u32, &str)> = (0..20).map(|i| (i * 20, "payload")).collect();
    /// let mut batch = Vec::new();
    /// RangeRouter::new(table.clone(), 1).route_batch(&records, |r: &(u32, &str)| r.0, 4, &mut batch);
    /// let mut one_by_one = RangeRouter::new(table, 1);
    /// let expected: Vec<usize> = records.iter().map(|r| one_by_one.route(&r.0, 4)).collect();
    /// assert_eq!(batch, expected);
    /// assert_eq!(&batch[..6], &[0, 0, 0, 0, 0, 1]);
    /// ```
    pub fn route_batch<T>(
        &mut self,
        records: &[T],
        key: impl Fn(&T) -> K,
        num_partitions: usize,
        out: &mut Vec<usize>,
    ) {
        let computed_for = self.table.computed_for;
        out.reserve(records.len());
        match &self.table.table {
            Table::Sketch {
                bounds,
                index: Some(index),
                sampled,
            } => {
                let computed_for = bounds.len() + 1;
                let (bounds, index) = (&bounds[..], index.view());
                let unknown = &mut self.unknown;
                let start = out.len();
                let key = &key;
                out.extend(records.iter().map(move |r| {
                    let k = key(r);
                    if outside(sampled, &k) {
                        // Marked, and replaced by the hash's subtask below.
                        return usize::MAX;
                    }
                    match order_prefix(&k) {
                        Some(p) => index.range(bounds, &k, p),
                        None => partition(&k, bounds, computed_for),
                    }
                }));
                for (s, r) in out[start..].iter_mut().zip(records) {
                    if *s == usize::MAX {
                        *s = spread(&key(r), unknown, num_partitions);
                    } else if computed_for > num_partitions {
                        *s = adjust_for_rescale(*s, computed_for, num_partitions);
                    }
                }
            }
            Table::Sketch {
                bounds,
                index: None,
                sampled,
            } => {
                let chunks = records.chunks_exact(LANES);
                let rest = chunks.remainder();
                for chunk in chunks {
                    let keys: [K; LANES] = std::array::from_fn(|j| key(&chunk[j]));
                    for (range, k) in ranges_of(bounds, &keys).into_iter().zip(&keys) {
                        out.push(if outside(sampled, k) {
                            spread(k, &mut self.unknown, num_partitions)
                        } else {
                            adjust_for_rescale(range, bounds.len() + 1, num_partitions)
                        });
                    }
                }
                for r in rest {
                    let k = key(r);
                    out.push(if outside(sampled, &k) {
                        spread(&k, &mut self.unknown, num_partitions)
                    } else {
                        partition(&k, bounds, num_partitions)
                    });
                }
            }
            Table::Map { choices, order, .. } => {
                // Everything the closure reads, by value or as a plain reference, so that the
                // loop keeps it in registers.
                let choices = choices.view();
                let unknown = &mut self.unknown;
                let start = out.len();
                match &mut self.keys {
                    Some(keys) => {
                        let mut keys = keys.view();
                        out.extend(records.iter().map(move |r| {
                            map_target(&mut keys, choices, order, unknown, &key(r), num_partitions)
                        }));
                    }
                    None => out.extend(
                        records
                            .iter()
                            .map(|_| next_unknown(unknown, num_partitions)),
                    ),
                }
                // Folded in a pass of its own, which the common case (no fold) skips.
                if computed_for > num_partitions {
                    for s in &mut out[start..] {
                        *s = adjust_for_rescale(*s, computed_for, num_partitions);
                    }
                }
            }
        }
    }
}

/// Keys whose range searches [`RangeRouter::route_batch`] runs side by side (Sketch).
pub const LANES: usize = 8;

/// The subtask (among those the statistics were computed for) of `key` by Map statistics.
#[inline(always)]
fn map_target<K: ShuffleKey>(
    keys: &mut SequencedView<'_, K>,
    choices: ChoicesView<'_>,
    order: &[(K, usize)],
    unknown: &mut u64,
    key: &K,
    num_partitions: usize,
) -> usize {
    // Every key known walks its sequence, so that keys on one subtask and split keys take the
    // same instructions (the former's choice does not depend on the value).
    match keys.advance(key, GOLDEN) {
        Some((route, s)) => choices.pick(route, s),
        None => unknown_target(order, unknown, key, num_partitions),
    }
}

/// The subtask of a key the Map statistics do not know: between the lowest and highest key
/// they know, the first subtask of the next known key in sort order (the range it falls in);
/// outside them, round robin.
#[cold]
#[inline(never)]
fn unknown_target<K: Ord>(
    order: &[(K, usize)],
    unknown: &mut u64,
    key: &K,
    num_partitions: usize,
) -> usize {
    match (order.first(), order.last()) {
        (Some((low, _)), Some((high, _))) if key > low && key < high => {
            *unknown += 1;
            order[order.partition_point(|(k, _)| k < key)].1
        }
        _ => next_unknown(unknown, num_partitions),
    }
}

/// The round-robin subtask of the next unknown key, out of line (it divides) so that it does
/// not crowd the routing loop.
#[cold]
#[inline(never)]
fn next_unknown(unknown: &mut u64, num_partitions: usize) -> usize {
    *unknown += 1;
    (*unknown % num_partitions.max(1) as u64) as usize
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
    fn keys_without_a_prefix_are_routed_in_batches_by_side_by_side_searches() {
        let c = CompletedStatistics {
            checkpoint: 1,
            downstream_parallelism: 5,
            data: CompletedData::Sketch((0..50u32).map(|i| (i % 7, i)).collect()),
        };
        let g = GlobalStatistics::compute(&c, 5, 0.0).unwrap();
        let table = Arc::new(RouteTable::new(&g));
        let keys: Vec<(u32, u32)> = (0..1_003u32).map(|i| (i % 9, i % 61)).collect();
        for n in [5, 2] {
            let mut one = RangeRouter::new(table.clone(), 3);
            let expected: Vec<usize> = keys.iter().map(|k| one.route(k, n)).collect();
            let mut got = Vec::new();
            RangeRouter::new(table.clone(), 3).route_batch(&keys, |k| *k, n, &mut got);
            assert_eq!(got, expected, "{n} subtasks");
        }
    }

    #[test]
    fn keys_outside_the_samples_route_alike_one_by_one_and_in_batches() {
        // u64 keys have an order prefix (the indexed path), tuples of u64 and String do not.
        let c = CompletedStatistics {
            checkpoint: 1,
            downstream_parallelism: 4,
            data: CompletedData::Sketch((100..500u64).collect()),
        };
        let table = Arc::new(RouteTable::new(
            &GlobalStatistics::compute(&c, 4, 0.0).unwrap(),
        ));
        let keys: Vec<u64> = (0..2_000u64).map(|i| i * 7 % 900).collect();
        for n in [4, 3, 6] {
            let mut one = RangeRouter::new(table.clone(), 5);
            let expected: Vec<usize> = keys.iter().map(|k| one.route(k, n)).collect();
            let mut batch = RangeRouter::new(table.clone(), 5);
            let mut got = Vec::new();
            batch.route_batch(&keys, |k| *k, n, &mut got);
            assert_eq!(got, expected, "{n} subtasks");
            assert_eq!(batch.unknown_keys(), one.unknown_keys());
            assert!(got.iter().all(|s| *s < n));
        }
        let outside = keys.iter().filter(|k| !(100..500).contains(*k)).count() as u64;
        let mut r = RangeRouter::new(table.clone(), 5);
        keys.iter().for_each(|k| {
            r.route(k, 4);
        });
        assert_eq!(r.unknown_keys(), outside);

        let c = CompletedStatistics {
            checkpoint: 1,
            downstream_parallelism: 3,
            data: CompletedData::Sketch((0..90u64).map(|i| (i / 30, i.to_string())).collect()),
        };
        let table = Arc::new(RouteTable::new(
            &GlobalStatistics::compute(&c, 3, 0.0).unwrap(),
        ));
        let keys: Vec<(u64, String)> = (0..1_001u64)
            .map(|i| (i % 5, (i % 40).to_string()))
            .collect();
        let mut one = RangeRouter::new(table.clone(), 2);
        let expected: Vec<usize> = keys.iter().map(|k| one.route(k, 3)).collect();
        let mut got = Vec::new();
        RangeRouter::new(table, 2).route_batch(&keys, |k| k.clone(), 3, &mut got);
        assert_eq!(got, expected);
    }

    #[test]
    fn unknown_keys_among_known_ones_go_to_their_range() {
        // Keys 0, 10, ..., 90 of equal weight over 2 subtasks: 0..=40 on 0, 50..=90 on 1.
        let mut r = router((0..10).map(|k| (k * 10, 5)).collect(), 2, 0);
        assert_eq!(r.route(&5, 2), 0, "between 0 and 10");
        assert_eq!(
            r.route(&41, 2),
            1,
            "just above subtask 0's last key: the next range"
        );
        assert_eq!(r.route(&89, 2), 1);
        assert_eq!(r.unknown_keys(), 3);
        // Outside the known keys: round robin, whatever the key.
        let outside: Vec<usize> = (0..4).map(|_| r.route(&1_000, 2)).collect();
        assert_eq!(outside, vec![0, 1, 0, 1]);
        // The same in batches.
        let keys = [5u32, 41, 89, 1_000, 1_000];
        let mut a = router((0..10).map(|k| (k * 10, 5)).collect(), 2, 0);
        let one: Vec<usize> = keys.iter().map(|k| a.route(k, 2)).collect();
        let mut got = Vec::new();
        router((0..10).map(|k| (k * 10, 5)).collect(), 2, 0).route_batch(
            &keys,
            |k| *k,
            2,
            &mut got,
        );
        assert_eq!(got, one);
    }

    #[test]
    fn unknown_keys_outside_the_known_ones_go_round_robin() {
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
