//! The lookup structures a [`RouteTable`](super::RouteTable) is compiled into, so that routing a
//! record costs a few instructions and rarely a mispredicted branch. Each is built once per
//! global statistics and gives exactly the answer of the plain search it replaces (the tests
//! compare them over many inputs):
//!
//! - [`KeyIndex`]: the Map statistics' keys in an open-addressing table (linear probing, at
//!   most half full), keys and targets in two flat arrays: a hit is usually one probe;
//! - [`Shares`]: a split key's shares with a bucket table over the top bits of its Weyl
//!   sequence: most buckets fall within one share, so the share is read, not searched;
//! - [`SketchIndex`]: for keys with an order-preserving 64-bit prefix ([`order_prefix`]:
//!   integers, strings), the range bounds bucketed by prefix: a key's range is the count of
//!   bounds in earlier buckets plus a comparison with the (usually zero or one) bounds in its
//!   own bucket.

use rustc_hash::FxBuildHasher;
use std::any::Any;
use std::hash::{BuildHasher, Hash};

/// What a Map key routes to: one subtask, or a split key's [`Shares`] (by index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    One(usize),
    Split(usize),
}

/// A target packed in 32 bits: the top bit marks a split; all ones marks an empty slot.
const SPLIT: u32 = 1 << 31;
const EMPTY: u32 = u32::MAX;

/// The keys of Map statistics and their targets, for lookups by key.
#[derive(Debug)]
pub(crate) struct KeyIndex<K> {
    /// Slot `i` holds a key when `targets[i] != EMPTY`; empty slots hold a copy of some key,
    /// never compared (the target is checked first).
    keys: Vec<K>,
    targets: Vec<u32>,
    mask: usize,
}

impl<K: Hash + Eq + Clone> KeyIndex<K> {
    /// An index of `entries` (distinct keys). Targets must fit 31 bits (subtasks and split
    /// indices are far smaller).
    pub(crate) fn new(entries: Vec<(K, Target)>) -> Self {
        let slots = (entries.len() * 2).next_power_of_two().max(16);
        let mask = slots - 1;
        let Some(filler) = entries.first().map(|(k, _)| k.clone()) else {
            return KeyIndex {
                keys: Vec::new(),
                targets: vec![EMPTY; 1],
                mask: 0,
            };
        };
        let mut keys = vec![filler; slots];
        let mut targets = vec![EMPTY; slots];
        for (key, target) in entries {
            let packed = match target {
                Target::One(s) => u32::try_from(s).unwrap_or(SPLIT - 1) & !SPLIT,
                Target::Split(i) => SPLIT | (u32::try_from(i).unwrap_or(SPLIT - 1) & !SPLIT),
            };
            let mut i = home(&key) & mask;
            while targets[i] != EMPTY {
                i = (i + 1) & mask;
            }
            keys[i] = key;
            targets[i] = packed;
        }
        KeyIndex {
            keys,
            targets,
            mask,
        }
    }

    /// The target of `key`, if the statistics know it.
    #[inline(always)]
    pub(crate) fn get(&self, key: &K) -> Option<Target> {
        if self.keys.is_empty() {
            return None;
        }
        let mut i = home(key) & self.mask;
        loop {
            let t = self.targets[i];
            if t == EMPTY {
                return None;
            }
            if self.keys[i] == *key {
                return Some(if t & SPLIT == 0 {
                    Target::One(t as usize)
                } else {
                    Target::Split((t & !SPLIT) as usize)
                });
            }
            i = (i + 1) & self.mask;
        }
    }
}

/// The home slot of a key (before masking).
#[inline(always)]
fn home<K: Hash>(key: &K) -> usize {
    FxBuildHasher.hash_one(key) as usize
}

/// Bits of a split key's sequence value that pick its bucket.
const SHARE_BUCKET_BITS: u32 = 6;

/// A split key's shares: its subtasks, the cumulative routing weights, and for each bucket of
/// sequence values the shares it may fall in.
#[derive(Debug)]
pub(crate) struct Shares {
    pub(crate) subtasks: Vec<usize>,
    cumulative: Vec<u64>,
    total: u64,
    /// Per bucket: the count of cumulative weights at or below the bucket's smallest point,
    /// and how many more lie within the bucket (to be compared).
    buckets: Vec<(u32, u32)>,
}

impl Shares {
    /// The shares of `subtasks` with routing `weights` (one each, not all zero).
    pub(crate) fn new(subtasks: Vec<usize>, weights: &[u64]) -> Self {
        let mut total = 0u64;
        let cumulative: Vec<u64> = weights
            .iter()
            .map(|w| {
                total += w;
                total
            })
            .collect();
        let count_le = |x: u64| cumulative.partition_point(|&c| c <= x);
        let buckets = (0..1u64 << SHARE_BUCKET_BITS)
            .map(|g| {
                let shift = 64 - SHARE_BUCKET_BITS;
                let first = g << shift;
                let last = first | ((1u64 << shift) - 1);
                let (lo, hi) = (count_le(point(first, total)), count_le(point(last, total)));
                (
                    u32::try_from(lo).unwrap_or(u32::MAX),
                    u32::try_from(hi - lo).unwrap_or(u32::MAX),
                )
            })
            .collect();
        Shares {
            subtasks,
            cumulative,
            total,
            buckets,
        }
    }

    /// The subtask for the sequence value `s`: the share whose cumulative weights enclose
    /// `s`'s point in `0..total`.
    #[inline(always)]
    pub(crate) fn pick(&self, s: u64) -> usize {
        let (lo, n) = self.buckets[(s >> (64 - SHARE_BUCKET_BITS)) as usize];
        let mut pos = lo as usize;
        if n > 0 {
            let x = point(s, self.total);
            let end = (pos + n as usize).min(self.cumulative.len());
            pos += self.cumulative[pos..end]
                .iter()
                .map(|&c| usize::from(c <= x))
                .sum::<usize>();
        }
        self.subtasks[pos.min(self.subtasks.len() - 1)]
    }

    /// The same choice by a plain search (what `pick` must equal).
    #[cfg(test)]
    pub(crate) fn pick_by_search(&self, s: u64) -> usize {
        let x = point(s, self.total);
        let pos = self.cumulative.partition_point(|&c| c <= x);
        self.subtasks[pos.min(self.subtasks.len() - 1)]
    }
}

/// Every split key's [`Shares`], with their bucket tables flattened into one array (entry
/// `split * 64 + bucket`): a bucket within one share holds that share's subtask, so the common
/// case is one load from one array, without going through the split's own vectors.
#[derive(Debug, Default)]
pub(crate) struct Splits {
    direct: Vec<u64>,
    shares: Vec<Shares>,
}

/// Marks a flattened bucket that straddles a share edge (its share must be computed).
const MIXED: u64 = 1 << 63;

impl Splits {
    /// Adds a split key's shares; returns its index.
    pub(crate) fn push(&mut self, shares: Shares) -> usize {
        for &(lo, n) in &shares.buckets {
            let entry = if n == 0 {
                let pos = (lo as usize).min(shares.subtasks.len() - 1);
                u64::try_from(shares.subtasks[pos]).unwrap_or(MIXED)
            } else {
                MIXED
            };
            self.direct.push(entry);
        }
        self.shares.push(shares);
        self.shares.len() - 1
    }

    /// How many split keys there are.
    pub(crate) fn len(&self) -> usize {
        self.shares.len()
    }

    /// The subtask of split key `i` for its sequence value `s` (as [`Shares::pick`]).
    #[inline(always)]
    pub(crate) fn pick(&self, i: usize, s: u64) -> usize {
        let e = self.direct[(i << SHARE_BUCKET_BITS) | (s >> (64 - SHARE_BUCKET_BITS)) as usize];
        if e & MIXED == 0 {
            e as usize
        } else {
            self.shares[i].pick(s)
        }
    }
}

/// Where the sequence value `s` falls in `0..total` (multiply-shift: monotone in `s`).
#[inline(always)]
fn point(s: u64, total: u64) -> u64 {
    ((u128::from(s) * u128::from(total)) >> 64) as u64
}

/// A 64-bit prefix of `key` that keeps its order (`a <= b` implies `prefix(a) <= prefix(b)`),
/// for the key types that have an obvious one (integers, strings); `None` for others. The type
/// test is resolved when the code is compiled for `K`, so it costs nothing per key.
#[inline(always)]
pub(crate) fn order_prefix<K: 'static>(key: &K) -> Option<u64> {
    const SIGN: u64 = 1 << 63;
    let k = key as &dyn Any;
    if let Some(v) = k.downcast_ref::<u64>() {
        Some(*v)
    } else if let Some(v) = k.downcast_ref::<u128>() {
        Some((*v >> 64) as u64)
    } else if let Some(v) = k.downcast_ref::<i64>() {
        Some((*v as u64) ^ SIGN)
    } else if let Some(v) = k.downcast_ref::<i128>() {
        Some(((*v >> 64) as i64 as u64) ^ SIGN)
    } else if let Some(v) = k.downcast_ref::<u32>() {
        Some(u64::from(*v))
    } else if let Some(v) = k.downcast_ref::<i32>() {
        Some((i64::from(*v) as u64) ^ SIGN)
    } else if let Some(v) = k.downcast_ref::<String>() {
        let mut first = [0u8; 8];
        let n = v.len().min(8);
        first[..n].copy_from_slice(&v.as_bytes()[..n]);
        Some(u64::from_be_bytes(first))
    } else {
        None
    }
}

/// Target bounds per bucket of [`SketchIndex`] on average (a power of two).
const BUCKETS_PER_BOUND: usize = 8;
/// A bucket holding more bounds than this makes the index not worth it (keys sharing long
/// prefixes): routing falls back to the binary search.
const MAX_BOUNDS_PER_BUCKET: u32 = 4;

/// Range bounds bucketed by their keys' [`order_prefix`].
#[derive(Debug)]
pub(crate) struct SketchIndex {
    /// The prefix of the first bound, and how far the last one's lies beyond it.
    low: u64,
    span: u64,
    shift: u32,
    /// Per bucket: the count of bounds in earlier buckets, and of bounds in this one.
    buckets: Vec<(u32, u32)>,
}

impl SketchIndex {
    /// An index of `bounds` (sorted), or `None` when the keys have no prefix, there is no
    /// bound, or the bounds crowd into few buckets.
    pub(crate) fn new<K: 'static>(bounds: &[K]) -> Option<Self> {
        let prefixes: Vec<u64> = bounds.iter().map(order_prefix).collect::<Option<_>>()?;
        let (&low, &high) = (prefixes.first()?, prefixes.last()?);
        let span = high - low;
        let want_bits = (bounds.len() * BUCKETS_PER_BOUND)
            .next_power_of_two()
            .trailing_zeros()
            .min(16);
        let shift = (64 - span.leading_zeros()).saturating_sub(want_bits);
        let mut buckets = vec![(0u32, 0u32); usize::try_from(span >> shift).ok()? + 1];
        for p in &prefixes {
            buckets[((p - low) >> shift) as usize].1 += 1;
        }
        if buckets.iter().any(|b| b.1 > MAX_BOUNDS_PER_BUCKET) {
            return None;
        }
        let mut before = 0;
        for b in &mut buckets {
            b.0 = before;
            before += b.1;
        }
        Some(SketchIndex {
            low,
            span,
            shift,
            buckets,
        })
    }

    /// The range of `key` (whose prefix is `prefix`) among `bounds`: how many bounds are below
    /// it, as `bounds.partition_point(|b| b < key)` counts them.
    #[inline(always)]
    pub(crate) fn range<K: Ord>(&self, bounds: &[K], key: &K, prefix: u64) -> usize {
        let g = (prefix.saturating_sub(self.low).min(self.span) >> self.shift) as usize;
        let (before, n) = self.buckets[g];
        let start = before as usize;
        let end = (start + n as usize).min(bounds.len());
        start
            + bounds[start..end]
                .iter()
                .map(|b| usize::from(b < key))
                .sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn the_key_index_finds_every_key_and_nothing_else() {
        for n in [0usize, 1, 5, 264, 1000] {
            let entries: Vec<(u64, Target)> = (0..n as u64)
                .map(|k| {
                    let t = if k % 3 == 0 {
                        Target::Split(k as usize)
                    } else {
                        Target::One(k as usize % 32)
                    };
                    (k * 7919, t)
                })
                .collect();
            let index = KeyIndex::new(entries.clone());
            for (k, t) in &entries {
                assert_eq!(index.get(k), Some(*t), "n {n}, key {k}");
            }
            for k in 0..3000u64 {
                if k % 7919 != 0 || k / 7919 >= n as u64 {
                    assert_eq!(index.get(&k), None, "n {n}, absent key {k}");
                }
            }
        }
        let strings = KeyIndex::new(vec![("a".to_string(), Target::One(1))]);
        assert_eq!(strings.get(&"a".to_string()), Some(Target::One(1)));
        assert_eq!(strings.get(&"b".to_string()), None);
    }

    #[test]
    fn a_share_read_from_its_bucket_is_the_share_searched() {
        let mut rng = Rng::new(11);
        for weights in [
            vec![1u64, 1],
            vec![100, 100, 100, 50],
            vec![1, 0, 5, 0, 0, 9],
            vec![3; 40],
            vec![u64::from(u32::MAX), 1, 7],
        ] {
            let shares = Shares::new((0..weights.len()).collect(), &weights);
            let random: Vec<u64> = (0..20_000).map(|_| rng.next_u64()).collect();
            // Bucket edges exactly.
            let edges = (0..64u64).flat_map(|g| {
                [
                    g << 58,
                    (g << 58).wrapping_sub(1),
                    (g << 58) | ((1 << 58) - 1),
                ]
            });
            let draws: Vec<u64> = random.into_iter().chain(edges).collect();
            for &s in &draws {
                assert_eq!(shares.pick(s), shares.pick_by_search(s), "{weights:?}");
            }
            // The same through the flattened table, behind another split key.
            let mut splits = Splits::default();
            splits.push(Shares::new(vec![7, 8], &[1, 1]));
            let i = splits.push(Shares::new((0..weights.len()).collect(), &weights));
            assert_eq!(splits.len(), 2);
            for &s in &draws {
                assert_eq!(splits.pick(i, s), shares.pick_by_search(s), "{weights:?}");
            }
        }
    }

    #[test]
    fn prefixes_keep_the_order() {
        let mut ints: Vec<i64> = vec![i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        ints.sort();
        let p: Vec<u64> = ints.iter().map(|k| order_prefix(k).unwrap()).collect();
        assert!(p.windows(2).all(|w| w[0] <= w[1]), "{p:?}");
        let strings = ["", "a", "a\0", "ab", "abcdefgh", "abcdefghz", "b"].map(String::from);
        let p: Vec<u64> = strings.iter().map(|k| order_prefix(k).unwrap()).collect();
        assert!(p.windows(2).all(|w| w[0] <= w[1]), "{p:?}");
        let wide = [0u128, 1, u128::from(u64::MAX) + 1, u128::MAX];
        let p: Vec<u64> = wide.iter().map(|k| order_prefix(k).unwrap()).collect();
        assert!(p.windows(2).all(|w| w[0] <= w[1]), "{p:?}");
        assert_eq!(order_prefix(&(1u8, 2u8)), None);
    }

    /// `SketchIndex::range` against `partition_point` for `keys` among `bounds`.
    fn check<K: Ord + std::fmt::Debug + 'static>(bounds: &[K], keys: &[K]) -> bool {
        let Some(index) = SketchIndex::new(bounds) else {
            return false;
        };
        for k in keys {
            let p = order_prefix(k).unwrap();
            assert_eq!(
                index.range(bounds, k, p),
                bounds.partition_point(|b| b < k),
                "key {k:?} among {bounds:?}"
            );
        }
        true
    }

    #[test]
    fn a_range_read_from_the_sketch_index_is_the_range_searched() {
        let mut rng = Rng::new(5);
        // Random wide ids, 31 bounds.
        let mut bounds: Vec<u128> = (0..31)
            .map(|_| u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64()))
            .collect();
        bounds.sort();
        let mut keys: Vec<u128> = (0..20_000)
            .map(|_| u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64()))
            .collect();
        keys.extend(bounds.iter().flat_map(|b| [*b - 1, *b, *b + 1]));
        keys.extend([0, u128::MAX]);
        assert!(check(&bounds, &keys));
        // Small integers, two bounds sharing a bucket.
        let small: Vec<u64> = vec![3, 5, 400, 900, 4_000, 7_000, 10_000];
        assert!(check(&small, &(0..12_000).collect::<Vec<u64>>()));
        // Negative numbers.
        let signed: Vec<i32> = vec![-300, -2, 0, 5, 1 << 20];
        assert!(check(&signed, &(-400..400).collect::<Vec<i32>>()));
        // One bound.
        assert!(check(&[7u64], &[0, 6, 7, 8, u64::MAX]));
        // Strings.
        let words = ["apple", "kiwi", "mango", "zebra"].map(String::from);
        let probes = ["", "a", "apple", "apples", "b", "mango", "zz"].map(String::from);
        assert!(check(&words, &probes));
        // Strings sharing their first 8 bytes crowd one bucket: no index.
        let crowded: Vec<String> = (0..10).map(|i| format!("customer-{i:04}")).collect();
        assert!(SketchIndex::new(&crowded).is_none());
        // No prefix, or no bound: no index.
        assert!(SketchIndex::new(&[(1u8, 1u8)]).is_none());
        assert!(SketchIndex::new::<u64>(&[]).is_none());
    }
}
