//! The lookup structures a [`RouteTable`](super::RouteTable) is compiled into, so that routing a
//! record costs a few instructions and rarely a branch whose direction depends on the key. Each
//! is built once per global statistics and gives exactly the answer of the plain search it
//! replaces (the tests compare them over many inputs):
//!
//! - [`KeyIndex`]: the Map statistics' keys in an open-addressing table (FxHash, linear
//!   probing, at most half full), each slot holding its key and the key's packed [`Route`] side
//!   by side: a hit is usually one probe, one comparison and one cache line;
//! - [`Choices`]: every key's choice of subtask as a table over the top 9 bits of the key's
//!   Weyl sequence value. A split key owns 512 buckets of 2 bytes, each holding the subtask
//!   of every sequence value in it; a key on one subtask owns a single bucket of that subtask,
//!   and the route's bucket mask (0) makes every sequence value read it. Single and split keys
//!   take the same instructions, so the long tail's mix of them costs no mispredicted branch.
//!   A bucket in which one share ends and the next begins (at most `m - 1` of 512 for `m`
//!   shares: 1.6 % of a 9-way split key's records) holds an [`Edge`] instead: the sequence
//!   value where the choice moves and the subtasks either side, one comparison. Only a bucket
//!   in which several shares end (a share under 1/512 of its key) searches the key's
//!   [`Shares`];
//! - [`SketchIndex`]: for keys with an order-preserving 64-bit prefix ([`order_prefix`]:
//!   integers, strings), the range bounds bucketed by prefix, at most two bounds a bucket: a
//!   key's range is the count of bounds in earlier buckets plus two comparisons of prefixes
//!   (whole keys only when a prefix is equal).

use rustc_hash::FxBuildHasher;
use std::any::Any;
use std::hash::{BuildHasher, Hash};

/// A key's entry in [`Choices`], packed in 64 bits: the index of its first bucket in the top 55
/// bits and, in the low 9 bits, the mask of the sequence bits that pick among its buckets (0
/// for a key on one subtask, 511 for a split key). Unpacking takes a shift and an `and`, with
/// no constant to load.
pub(crate) type Route = u64;

/// The route of an empty [`KeyIndex`] slot (never a real route: its base is out of range).
const EMPTY: Route = u64::MAX;

/// Where the bucket index starts in a [`Route`] (above the mask).
const BASE_SHIFT: u32 = SHARE_BUCKET_BITS;
/// Where the bucket bits start in a sequence value (its top bits).
const BUCKET_SHIFT: u32 = 64 - SHARE_BUCKET_BITS;

/// The keys of Map statistics and their routes, for lookups by key.
#[derive(Debug)]
pub(crate) struct KeyIndex<K> {
    /// Slot `i` holds a key and its route, or (empty, route [`EMPTY`]) a copy of the first key.
    /// An empty slot's key may be compared: a lookup of that key finds it in its own slot first
    /// (on its probe path every slot was occupied when it was inserted, and slots are never
    /// emptied), so a key match is always a real entry and only a mismatch reads the route to
    /// tell an empty slot.
    slots: Vec<(K, Route)>,
}

impl<K: Hash + Eq + Clone> KeyIndex<K> {
    /// An index of `entries` (distinct keys).
    pub(crate) fn new(entries: Vec<(K, Route)>) -> Self {
        let count = (entries.len() * 2).next_power_of_two().max(16);
        let Some(filler) = entries.first().map(|(k, _)| k.clone()) else {
            return KeyIndex { slots: Vec::new() };
        };
        let mask = count - 1;
        let mut slots = vec![(filler, EMPTY); count];
        for (key, route) in entries {
            let mut i = home(&key) & mask;
            while slots[i].1 != EMPTY {
                i = (i + 1) & mask;
            }
            slots[i] = (key, route);
        }
        KeyIndex { slots }
    }

    /// [`probe`] of the index, for tests.
    #[cfg(test)]
    pub(crate) fn find(&self, key: &K) -> Option<(usize, Route)> {
        let slot = probe(&self.slots, key, |s| (&s.0, s.1))?;
        Some((slot, self.slots[slot].1))
    }

    /// How many slots there are.
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }
}

/// The slot of `key` in `slots` (an open-addressing table whose length is a power of two, each
/// slot read as its key and route by `entry`), if the table holds it.
#[inline(always)]
fn probe<S, K: Hash + Eq>(
    slots: &[S],
    key: &K,
    entry: impl Fn(&S) -> (&K, Route),
) -> Option<usize> {
    // The slot count is a power of two: masking by it minus one keeps every index in bounds,
    // which the compiler sees (no bounds check per probe).
    let mask = slots.len().checked_sub(1)?;
    let mut i = home(key) & mask;
    loop {
        let (k, route) = entry(&slots[i]);
        if k == key {
            return Some(i);
        }
        if route == EMPTY {
            return None;
        }
        i = (i + 1) & mask;
    }
}

/// A router's own copy of a [`KeyIndex`], with each key's Weyl sequence in the key's slot:
/// finding a key reaches its route and its sequence in one cache line, and the routing loop
/// keeps one table in registers instead of a table and a sequence array.
#[derive(Debug)]
pub(crate) struct SequencedKeys<K> {
    slots: Vec<Sequenced<K>>,
}

/// A slot of [`SequencedKeys`].
#[derive(Debug)]
pub(crate) struct Sequenced<K> {
    key: K,
    route: Route,
    sequence: u64,
}

impl<K: Hash + Eq + Clone> SequencedKeys<K> {
    /// A copy of `index` whose slot `i` starts its sequence at `start(i)`.
    pub(crate) fn new(index: &KeyIndex<K>, start: impl Fn(usize) -> u64) -> Self {
        let slots = index
            .slots
            .iter()
            .enumerate()
            .map(|(i, (key, route))| Sequenced {
                key: key.clone(),
                route: *route,
                sequence: start(i),
            })
            .collect();
        SequencedKeys { slots }
    }

    /// The slots, for a loop to keep in registers.
    pub(crate) fn view(&mut self) -> SequencedView<'_, K> {
        SequencedView {
            slots: &mut self.slots,
        }
    }
}

/// [`SequencedKeys`] borrowed for a loop.
#[derive(Debug)]
pub(crate) struct SequencedView<'a, K> {
    slots: &'a mut [Sequenced<K>],
}

impl<K: Hash + Eq> SequencedView<'_, K> {
    /// The route of `key` and the next value of its sequence (`step` added), if the
    /// statistics know the key.
    #[inline(always)]
    pub(crate) fn advance(&mut self, key: &K, step: u64) -> Option<(Route, u64)> {
        let i = probe(self.slots, key, |s| (&s.key, s.route))?;
        let slot = self.slots.get_mut(i)?;
        slot.sequence = slot.sequence.wrapping_add(step);
        Some((slot.route, slot.sequence))
    }
}

/// The home slot of a key (before masking).
#[inline(always)]
fn home<K: Hash>(key: &K) -> usize {
    FxBuildHasher.hash_one(key) as usize
}

/// Bits of a split key's sequence value that pick its bucket: 512 buckets of 2 bytes (1 KiB),
/// so a split into `m` shares sends at most `m - 1` of 512 sequence values to a search.
/// `shuffle-cost` measured 9 bits fastest: 8 search (and mispredict) twice as often, and with
/// 10 a long tail's split keys fill most of the L1 cache (some processes routed at half speed).
const SHARE_BUCKET_BITS: u32 = 9;

/// A split key's shares: its subtasks and the cumulative routing weights. The reference
/// choice, which [`Choices`] tabulates; searched only for the rare bucket in which two shares
/// end.
#[derive(Debug)]
pub(crate) struct Shares {
    subtasks: Vec<usize>,
    cumulative: Vec<u64>,
    total: u64,
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
        Shares {
            subtasks,
            cumulative,
            total,
        }
    }

    /// How many cumulative weights are at or below `s`'s point: the position of `s`'s share.
    fn position(&self, s: u64) -> usize {
        let x = point(s, self.total);
        self.cumulative.partition_point(|&c| c <= x)
    }

    /// The least sequence value whose point reaches `weight` (none if no value does).
    fn first_value_at(&self, weight: u64) -> Option<u64> {
        let v = (u128::from(weight) << 64).div_ceil(u128::from(self.total));
        u64::try_from(v).ok()
    }

    /// The subtask at share position `pos`.
    fn subtask(&self, pos: usize) -> usize {
        self.subtasks[pos.min(self.subtasks.len().saturating_sub(1))]
    }

    /// The subtask for the sequence value `s`: the share whose cumulative weights enclose
    /// `s`'s point in `0..total`.
    pub(crate) fn pick(&self, s: u64) -> usize {
        self.subtask(self.position(s))
    }
}

/// Marks a bucket whose choice needs a search (or whose subtask does not fit a bucket).
const MIXED: u16 = u16::MAX;
/// Bucket values from here up to [`MIXED`] (excluded) name an [`Edge`]: `value - EDGE`. Below
/// it, a bucket holds its subtask.
const EDGE: u16 = 1 << 15;

/// The choice of a bucket in which one share ends and the next begins: sequence values below
/// `from` go to `below`, the others to `above`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Edge {
    from: u64,
    below: u16,
    above: u16,
}

/// Every Map key's choice of subtask (see the [module](self) documentation).
#[derive(Debug, Default)]
pub(crate) struct Choices {
    /// Per bucket: its subtask, an [`Edge`] (from [`EDGE`] on), or [`MIXED`].
    buckets: Vec<u16>,
    /// The edges of the buckets in which one share gives way to the next.
    edges: Vec<Edge>,
    /// The shares of every key with a bucket that searches, by its first bucket (ascending).
    searched: Vec<(usize, Shares)>,
    /// The bucket of each subtask a key routes to alone (they share it).
    singles: std::collections::HashMap<usize, usize>,
}

impl Choices {
    /// The route of a key on `subtask` alone.
    pub(crate) fn single(&mut self, subtask: usize) -> Route {
        if let Some(&base) = self.singles.get(&subtask) {
            return (base as Route) << BASE_SHIFT;
        }
        let base = self.buckets.len();
        let bucket = fit(subtask);
        if bucket == MIXED {
            self.searched.push((base, Shares::new(vec![subtask], &[1])));
        }
        self.buckets.push(bucket);
        self.singles.insert(subtask, base);
        (base as Route) << BASE_SHIFT
    }

    /// The route of a key split over `shares`.
    pub(crate) fn split(&mut self, shares: Shares) -> Route {
        let base = self.buckets.len();
        let mut searches = false;
        for g in 0..1u64 << SHARE_BUCKET_BITS {
            let first = g << BUCKET_SHIFT;
            let last = first | ((1u64 << BUCKET_SHIFT) - 1);
            let (lo, hi) = (shares.position(first), shares.position(last));
            let bucket = if lo == hi {
                fit(shares.subtask(lo))
            } else {
                self.edge(&shares, lo, hi).unwrap_or(MIXED)
            };
            searches |= bucket == MIXED;
            self.buckets.push(bucket);
        }
        if searches {
            self.searched.push((base, shares));
        }
        (base as Route) << BASE_SHIFT | ((1 << SHARE_BUCKET_BITS) - 1)
    }

    /// The bucket value of an [`Edge`] for a bucket whose sequence values start at share
    /// position `lo` and end at `hi`, if the position moves once in it (from `lo` to `hi`
    /// at one value) and both subtasks and the edge's number fit a bucket.
    fn edge(&mut self, shares: &Shares, lo: usize, hi: usize) -> Option<u16> {
        // The position reaches `hi` where the point reaches the cumulative weight `hi - 1`,
        // and leaves `lo` where it reaches the cumulative weight `lo`: one value for both, or
        // the bucket holds more than one move.
        let from = shares.first_value_at(*shares.cumulative.get(hi.checked_sub(1)?)?)?;
        if shares.first_value_at(*shares.cumulative.get(lo)?)? != from
            || shares.position(from.checked_sub(1)?) != lo
            || shares.position(from) != hi
        {
            return None;
        }
        let (below, above) = (fit(shares.subtask(lo)), fit(shares.subtask(hi)));
        let number = u16::try_from(self.edges.len()).ok()?;
        if below >= EDGE || above >= EDGE || number >= MIXED - EDGE {
            return None;
        }
        self.edges.push(Edge { from, below, above });
        Some(EDGE + number)
    }

    /// The choices as slices, for a loop to keep in registers.
    pub(crate) fn view(&self) -> ChoicesView<'_> {
        ChoicesView {
            buckets: &self.buckets,
            edges: &self.edges,
            searched: &self.searched,
        }
    }

    /// [`ChoicesView::pick`], for tests.
    #[cfg(test)]
    pub(crate) fn pick(&self, route: Route, s: u64) -> usize {
        self.view().pick(route, s)
    }
}

/// `subtask` as a bucket entry, or [`MIXED`] if it does not fit one (below [`EDGE`]).
fn fit(subtask: usize) -> u16 {
    u16::try_from(subtask)
        .ok()
        .filter(|&b| b < EDGE)
        .unwrap_or(MIXED)
}

/// [`Choices`] borrowed for a loop.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ChoicesView<'a> {
    buckets: &'a [u16],
    edges: &'a [Edge],
    searched: &'a [(usize, Shares)],
}

impl ChoicesView<'_> {
    /// The subtask of a key with `route` for its sequence value `s`.
    #[inline(always)]
    pub(crate) fn pick(&self, route: Route, s: u64) -> usize {
        let base = (route >> BASE_SHIFT) as usize;
        let bucket = self.buckets[base + ((s >> BUCKET_SHIFT) & route) as usize];
        if bucket < EDGE {
            return usize::from(bucket);
        }
        match self.edges.get(usize::from(bucket - EDGE)) {
            Some(e) => usize::from(if s < e.from { e.below } else { e.above }),
            None => search(self.searched, base, s),
        }
    }
}

/// The choice of a bucket in which shares end: a search of the key's shares, out of line so
/// that the rare case does not crowd the routing loop's registers.
#[cold]
#[inline(never)]
fn search(searched: &[(usize, Shares)], base: usize, s: u64) -> usize {
    match searched.binary_search_by_key(&base, |(b, _)| *b) {
        Ok(i) => searched[i].1.pick(s),
        // Every route whose buckets search has its shares here.
        Err(_) => 0,
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

/// Bounds per bucket of [`SketchIndex`] on average to start from (a power of two).
const BUCKETS_PER_BOUND: usize = 8;
/// The bounds a key is compared with by prefix alone: a bucket holding more is searched.
const FAST_BOUNDS: u32 = 2;
/// How many times more buckets are tried, while some bucket holds more than [`FAST_BOUNDS`].
const MORE_BUCKET_BITS: u32 = 4;
/// The most bucket bits.
const MAX_BUCKET_BITS: u32 = 16;
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
    buckets: Vec<SketchBucket>,
}

/// One bucket of a [`SketchIndex`]: the count of bounds in earlier buckets, of bounds in this
/// one, and the prefixes of the two bounds from its first on (`u64::MAX` past the last bound).
#[derive(Clone, Copy, Debug)]
struct SketchBucket {
    before: u32,
    count: u32,
    first: u64,
    second: u64,
}

impl SketchIndex {
    /// An index of `bounds` (sorted), or `None` when the keys have no prefix, there is no
    /// bound, or the bounds crowd into few buckets.
    pub(crate) fn new<K: 'static>(bounds: &[K]) -> Option<Self> {
        let prefixes: Vec<u64> = bounds.iter().map(order_prefix).collect::<Option<_>>()?;
        let (&low, &high) = (prefixes.first()?, prefixes.last()?);
        u32::try_from(bounds.len()).ok()?;
        let span = high - low;
        let start_bits = (bounds.len() * BUCKETS_PER_BOUND)
            .next_power_of_two()
            .trailing_zeros()
            .min(MAX_BUCKET_BITS);
        let end_bits = (start_bits + MORE_BUCKET_BITS).min(MAX_BUCKET_BITS);
        // The first bucket width whose buckets hold at most `FAST_BOUNDS` bounds each, or the
        // narrowest tried.
        let mut best = None;
        for bits in start_bits..=end_bits {
            let shift = (64 - span.leading_zeros()).saturating_sub(bits);
            let mut counts = vec![0u32; usize::try_from(span >> shift).ok()? + 1];
            for p in &prefixes {
                counts[((p - low) >> shift) as usize] += 1;
            }
            let most = counts.iter().max().copied().unwrap_or(0);
            best = Some((shift, counts, most));
            if most <= FAST_BOUNDS {
                break;
            }
        }
        let (shift, counts, most) = best?;
        if most > MAX_BOUNDS_PER_BUCKET {
            return None;
        }
        let prefix = |i: u32| prefixes.get(i as usize).copied().unwrap_or(u64::MAX);
        let mut before = 0;
        let buckets = counts
            .into_iter()
            .map(|count| {
                let bucket = SketchBucket {
                    before,
                    count,
                    first: prefix(before),
                    second: prefix(before + 1),
                };
                before += count;
                bucket
            })
            .collect();
        Some(SketchIndex {
            low,
            span,
            shift,
            buckets,
        })
    }

    /// [`SketchView::range`], for tests.
    #[cfg(test)]
    pub(crate) fn range<K: Ord>(&self, bounds: &[K], key: &K, prefix: u64) -> usize {
        self.view().range(bounds, key, prefix)
    }

    /// The index as plain values and a slice, for a loop to keep in registers.
    pub(crate) fn view(&self) -> SketchView<'_> {
        SketchView {
            low: self.low,
            span: self.span,
            shift: self.shift,
            buckets: &self.buckets,
        }
    }
}

/// A [`SketchIndex`] borrowed for a loop.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SketchView<'a> {
    low: u64,
    span: u64,
    shift: u32,
    buckets: &'a [SketchBucket],
}

impl SketchView<'_> {
    /// The range of `key` (whose prefix is `prefix`) among `bounds`: how many bounds are below
    /// it, as `bounds.partition_point(|b| b < key)` counts them.
    ///
    /// It is the count of bounds in earlier buckets plus those of the key's bucket that are
    /// below it. The bounds from the bucket's first on are those of the bucket, then bounds of
    /// later buckets, whose prefixes are above the key's. A bound whose prefix is below (above)
    /// the key's is below (above) the key, so when the bucket holds at most two bounds, two
    /// comparisons of prefixes decide; only an equal prefix, or a crowded bucket, needs keys
    /// compared.
    #[inline(always)]
    pub(crate) fn range<K: Ord>(&self, bounds: &[K], key: &K, prefix: u64) -> usize {
        let g = (prefix.saturating_sub(self.low).min(self.span) >> self.shift) as usize;
        let b = self.buckets[g];
        let start = b.before as usize;
        if b.count > FAST_BOUNDS || b.first == prefix || b.second == prefix {
            let end = (start + b.count as usize).min(bounds.len());
            return start
                + bounds[start..end]
                    .iter()
                    .map(|b| usize::from(b < key))
                    .sum::<usize>();
        }
        start + usize::from(b.first < prefix) + usize::from(b.second < prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn the_key_index_finds_every_key_and_nothing_else() {
        for n in [0usize, 1, 5, 264, 1000] {
            let entries: Vec<(u64, Route)> = (0..n as u64).map(|k| (k * 7919, k * 3)).collect();
            let index = KeyIndex::new(entries.clone());
            let mut slots = std::collections::HashSet::new();
            for (k, r) in &entries {
                let (slot, route) = index.find(k).unwrap();
                assert_eq!(route, *r, "n {n}, key {k}");
                assert!(slot < index.slots() && slots.insert(slot), "n {n}, key {k}");
            }
            for k in 0..3000u64 {
                if k % 7919 != 0 || k / 7919 >= n as u64 {
                    assert_eq!(index.find(&k), None, "n {n}, absent key {k}");
                }
            }
        }
        let strings = KeyIndex::new(vec![("a".to_string(), 1)]);
        assert_eq!(strings.find(&"a".to_string()).map(|f| f.1), Some(1));
        assert_eq!(strings.find(&"b".to_string()), None);
    }

    /// Draws of sequence values: random ones, every bucket's edges, and around every value
    /// at which `shares` moves to its next share.
    fn draws(rng: &mut Rng, shares: &Shares) -> Vec<u64> {
        let random = (0..20_000).map(|_| rng.next_u64());
        let edges = (0..1u64 << SHARE_BUCKET_BITS).flat_map(|g| {
            let first = g << BUCKET_SHIFT;
            [
                first,
                first.wrapping_sub(1),
                first | ((1 << BUCKET_SHIFT) - 1),
            ]
        });
        let total = u128::from(shares.total);
        let moves = shares.cumulative.iter().flat_map(|&c| {
            let t = ((u128::from(c) << 64).div_ceil(total)).min(u128::from(u64::MAX)) as u64;
            [t.wrapping_sub(1), t, t.wrapping_add(1)]
        });
        random.chain(edges).chain(moves).collect()
    }

    #[test]
    fn a_choice_read_from_its_bucket_is_the_share_searched() {
        let mut rng = Rng::new(11);
        for weights in [
            vec![1u64, 1],
            vec![100, 100, 100, 50],
            vec![1, 0, 5, 0, 0, 9],
            vec![3; 40],
            vec![1, 1_000_000, 1, 1],
            vec![u64::from(u32::MAX), 1, 7],
            vec![u64::MAX / 4, u64::MAX / 4, 5],
        ] {
            let subtasks = || (0..weights.len()).map(|i| i * 3).collect::<Vec<_>>();
            let searched = Shares::new(subtasks(), &weights);
            // Behind a single key and another split key, as in a table.
            let mut choices = Choices::default();
            let single = choices.single(5);
            choices.split(Shares::new(vec![7, 8], &[1, 1]));
            let route = choices.split(Shares::new(subtasks(), &weights));
            for s in draws(&mut rng, &searched) {
                assert_eq!(choices.pick(route, s), searched.pick(s), "{weights:?}, {s}");
                assert_eq!(choices.pick(single, s), 5);
            }
        }
        // A split into 9 shares searches in at most 8 of its 512 buckets.
        let mut choices = Choices::default();
        choices.split(Shares::new((0..9).collect(), &[9; 9]));
        let searched = choices.buckets.iter().filter(|&&b| b >= EDGE).count();
        assert!(searched <= 8, "{searched}");
        // Each of them is an edge, resolved by one comparison: none searches.
        assert!(!choices.buckets.contains(&MIXED));
        assert!(choices.searched.is_empty());
        // A share under a bucket's width puts several moves in one bucket: that one searches.
        let mut choices = Choices::default();
        let route = choices.split(Shares::new(vec![0, 1, 2], &[700, 1, 3_000]));
        assert_eq!(choices.buckets.iter().filter(|&&b| b == MIXED).count(), 1);
        let thin = Shares::new(vec![0, 1, 2], &[700, 1, 3_000]);
        for s in draws(&mut rng, &thin) {
            assert_eq!(choices.pick(route, s), thin.pick(s), "{s}");
        }
    }

    #[test]
    fn keys_on_one_subtask_share_its_bucket() {
        let mut choices = Choices::default();
        let (a, b, c) = (choices.single(3), choices.single(4), choices.single(3));
        assert_eq!(a, c);
        assert_ne!(a, b);
        assert_eq!(choices.buckets.len(), 2);
        for s in [0, 1 << 63, u64::MAX] {
            assert_eq!((choices.pick(a, s), choices.pick(b, s)), (3, 4));
        }
        // A subtask that does not fit a bucket is searched for instead, also in a split.
        let huge = usize::from(u16::MAX) + 10;
        let route = choices.single(huge);
        assert_eq!(choices.pick(route, 12345), huge);
        let split = choices.split(Shares::new(vec![4, huge], &[1, 1]));
        assert_eq!(choices.pick(split, 0), 4);
        assert_eq!(choices.pick(split, u64::MAX), huge);
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
        // Three bounds close together among far ones: narrower buckets, until two at most a
        // bucket.
        let close: Vec<u64> = vec![
            0,
            40_000,
            1 << 17,
            (1 << 17) + (1 << 12),
            (1 << 17) + (1 << 13),
            (1 << 20) - 1,
        ];
        let mut probes: Vec<u64> = (0..(1 << 20) + 5).step_by(7).collect();
        probes.extend(close.iter().flat_map(|b| [b.saturating_sub(1), *b, b + 1]));
        assert!(check(&close, &probes));
        let index = SketchIndex::new(&close).unwrap();
        assert!(
            index.buckets.iter().all(|b| b.count <= FAST_BOUNDS),
            "{index:?}"
        );
        // Wide keys whose bounds share their prefix with the probes: whole keys compared.
        let base = 7u128 << 64;
        let shared: Vec<u128> = vec![base + 10, base + 20, (8u128 << 64) + 5];
        let probes: Vec<u128> = (0..30)
            .map(|i| base + i)
            .chain([8u128 << 64, (8 << 64) + 5, (8 << 64) + 6, u128::MAX])
            .collect();
        assert!(check(&shared, &probes));
        // Strings sharing their first 8 bytes crowd one bucket: no index.
        let crowded: Vec<String> = (0..10).map(|i| format!("customer-{i:04}")).collect();
        assert!(SketchIndex::new(&crowded).is_none());
        // No prefix, or no bound: no index.
        assert!(SketchIndex::new(&[(1u8, 1u8)]).is_none());
        assert!(SketchIndex::new::<u64>(&[]).is_none());
    }
}
