//! Reservoir sampling: [`Reservoir`], a uniform sample of at most `k` items of a stream, and
//! [`ReservoirUnion`], the merge of several reservoirs into one (the role of Apache DataSketches'
//! `ReservoirItemsSketch` and `ReservoirItemsUnion` in Iceberg's Flink sink).
//!
//! A reservoir fed item by item from empty skips ahead with Li's Algorithm L (one random draw
//! per *kept* item, so the operator's hot path is a comparison and the record's key is computed
//! only when it is kept). Once its history is no longer a plain stream (a weighted merge, a
//! forced count, a decoded copy), it falls back to Algorithm R (Vitter), as DataSketches does
//! throughout. Both keep every item seen with probability `k / n`.
//!
//! The union follows DataSketches' rules: reservoirs that saw no more than `k` items are
//! replayed item by item; full ones are merged with weights (each sample stands for `n / k`
//! items), the lighter one into the heavier one.

use crate::rng::Rng;
use serde::{Deserialize, Serialize};

/// Where the next kept item goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// Appended: the reservoir is not full yet.
    Push,
    /// Replaces the sample at this index.
    Replace(usize),
}

/// Algorithm L's state: the next item (1-based count) to keep and the current threshold.
#[derive(Clone, Debug)]
struct Skip {
    w: f64,
    next: u64,
}

/// A uniform random sample of at most `k` items of a stream.
///
/// ```
/// use sluice_shuffle::statistics::Reservoir;
///
/// let mut r = Reservoir::with_seed(100, 7);
/// for i in 0..10_000u64 {
///     r.update(i);
/// }
/// assert_eq!(r.items_seen(), 10_000);
/// assert_eq!(r.samples().len(), 100);
/// // Each of the 10,000 items had the same chance to be kept.
/// let mean = r.samples().iter().sum::<u64>() as f64 / 100.0;
/// assert!((3_500.0..6_500.0).contains(&mean), "{mean}");
/// ```
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reservoir<K> {
    k: usize,
    n: u64,
    samples: Vec<K>,
    #[serde(skip)]
    rng: Rng,
    #[serde(skip)]
    skip: Option<Skip>,
    /// Whether Algorithm L may be used: only for a reservoir fed item by item from empty.
    #[serde(skip)]
    plain: bool,
}

impl<K> Reservoir<K> {
    /// An empty reservoir of `k` samples (at least 1) with a random seed.
    pub fn new(k: usize) -> Self {
        Self::from_rng(k, Rng::random())
    }

    /// An empty reservoir of `k` samples (at least 1) drawing from `seed`.
    pub fn with_seed(k: usize, seed: u64) -> Self {
        Self::from_rng(k, Rng::new(seed))
    }

    fn from_rng(k: usize, rng: Rng) -> Self {
        Reservoir {
            k: k.max(1),
            n: 0,
            samples: Vec::new(),
            rng,
            skip: None,
            plain: true,
        }
    }

    /// The capacity.
    pub fn k(&self) -> usize {
        self.k
    }

    /// How many items the sample stands for.
    pub fn items_seen(&self) -> u64 {
        self.n
    }

    /// The samples, in no particular order.
    pub fn samples(&self) -> &[K] {
        &self.samples
    }

    /// The samples, by value.
    pub fn into_samples(self) -> Vec<K> {
        self.samples
    }

    /// Whether no item was seen.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// How many items each sample stands for: 1 until the reservoir is full, `n / k` after.
    pub fn implicit_weight(&self) -> f64 {
        if self.n < self.k as u64 {
            1.0
        } else {
            self.n as f64 / self.k as f64
        }
    }

    /// Counts one more item and says where it goes if it is kept (`None`: dropped). Call
    /// [`put`](Self::put) with the item for `Some`. Lets a caller build the item (a record's
    /// key) only when it is kept.
    #[inline]
    pub fn offer(&mut self) -> Option<Slot> {
        if self.n < self.k as u64 {
            self.n += 1;
            if self.n == self.k as u64 && self.plain {
                self.skip = Some(self.first_skip());
            }
            return Some(Slot::Push);
        }
        self.n += 1;
        match &mut self.skip {
            Some(s) => {
                if self.n < s.next {
                    return None;
                }
                let k = self.k as f64;
                let slot = self.rng.below(self.k as u64) as usize;
                s.w *= (self.rng.unit_open().ln() / k).exp();
                s.next = self.n + gap(self.rng.unit_open(), s.w) + 1;
                Some(Slot::Replace(slot))
            }
            None => {
                // Algorithm R: keep with probability k / n.
                if self.rng.unit() * (self.n as f64) < self.k as f64 {
                    Some(Slot::Replace(self.rng.below(self.k as u64) as usize))
                } else {
                    None
                }
            }
        }
    }

    /// Stores `item` where [`offer`](Self::offer) said.
    #[inline]
    pub fn put(&mut self, slot: Slot, item: K) {
        match slot {
            Slot::Push => self.samples.push(item),
            Slot::Replace(i) => self.samples[i] = item,
        }
    }

    /// Offers one item.
    #[inline]
    pub fn update(&mut self, item: K) {
        if let Some(slot) = self.offer() {
            self.put(slot, item);
        }
    }

    /// Offers `item` `count` times (a key counted `count` times by exact statistics), cloning it
    /// only when a copy is kept.
    pub fn update_repeated(&mut self, item: &K, count: u64)
    where
        K: Clone,
    {
        for _ in 0..count {
            if let Some(slot) = self.offer() {
                self.put(slot, item.clone());
            }
        }
    }

    /// Algorithm L's first threshold and skip, once the reservoir is full.
    fn first_skip(&mut self) -> Skip {
        let w = (self.rng.unit_open().ln() / self.k as f64).exp();
        Skip {
            w,
            next: self.n + gap(self.rng.unit_open(), w) + 1,
        }
    }

    /// The history is no longer a plain stream: sample with Algorithm R from now on.
    fn leave_plain(&mut self) {
        self.plain = false;
        self.skip = None;
    }

    /// Counts `more` items that the samples already stand for (after a weighted merge).
    fn force_increment(&mut self, more: u64) {
        self.n += more;
        self.leave_plain();
    }

    /// A reservoir of `max_k < k` samples drawn from this one, standing for the same items.
    fn downsampled(self, max_k: usize) -> Reservoir<K> {
        let mut out = Reservoir::from_rng(max_k, self.rng.clone());
        out.leave_plain();
        let n = self.n;
        for item in self.samples {
            out.update(item);
        }
        if out.n < n {
            out.force_increment(n - out.n);
        }
        out
    }
}

/// How many items Algorithm L skips: `floor(ln(u) / ln(1 - w))`, saturating.
#[inline]
fn gap(u: f64, w: f64) -> u64 {
    let g = (u.ln() / (-w).ln_1p()).floor();
    if g.is_finite() && g >= 0.0 {
        g as u64
    } else {
        u64::MAX / 2
    }
}

/// The merge of several reservoirs into one of at most `max_k` samples.
///
/// Two ways to merge: [`new`](Self::new) / [`with_seed`](Self::with_seed) merge as DataSketches
/// does (the result is no larger than the first full reservoir merged), and
/// [`keeping_all`](Self::keeping_all) keeps every sample it is given, as long as they stand for
/// the same number of items each (see there).
///
/// ```
/// use sluice_shuffle::statistics::{Reservoir, ReservoirUnion};
///
/// // Two subtasks saw 1,000 and 9,000 items and kept 100 samples each.
/// let (mut a, mut b) = (Reservoir::with_seed(100, 1), Reservoir::with_seed(100, 2));
/// (0..1_000u64).for_each(|i| a.update(i));
/// (1_000..10_000u64).for_each(|i| b.update(i));
/// let mut union = ReservoirUnion::with_seed(100, 3);
/// union.update(a);
/// union.update(b);
/// let merged = union.result().unwrap();
/// assert_eq!(merged.items_seen(), 10_000);
/// assert_eq!(merged.samples().len(), 100);
/// ```
#[derive(Debug)]
pub struct ReservoirUnion<K> {
    max_k: usize,
    gadget: Option<Reservoir<K>>,
    rng: Rng,
    /// `keeping_all`: the reservoirs merged so far, combined in `result`.
    parts: Option<Vec<Reservoir<K>>>,
}

impl<K> ReservoirUnion<K> {
    /// An empty union of at most `max_k` samples, with a random seed.
    pub fn new(max_k: usize) -> Self {
        ReservoirUnion {
            max_k: max_k.max(1),
            gadget: None,
            rng: Rng::random(),
            parts: None,
        }
    }

    /// An empty union of at most `max_k` samples drawing from `seed`.
    pub fn with_seed(max_k: usize, seed: u64) -> Self {
        ReservoirUnion {
            max_k: max_k.max(1),
            gadget: None,
            rng: Rng::new(seed),
            parts: None,
        }
    }

    /// A union that keeps every sample of the reservoirs it merges, up to `max_k`.
    ///
    /// A sample of a reservoir that saw `n` items and holds `m` samples stands for `n / m`
    /// items. The union keeps each sample with probability `(n / m) / w`, `w` the largest such
    /// weight among the reservoirs merged, so every item of every stream had the same chance
    /// `1 / w` to end in the result: when the reservoirs stand for equally many items per
    /// sample (subtasks with similar traffic), everything is kept. Beyond `max_k` samples, a
    /// uniform `max_k` of them are kept. DataSketches' union instead never grows beyond the
    /// first full reservoir it merges, so merging ten reservoirs of `k` gives `k` samples.
    pub fn keeping_all(max_k: usize, seed: u64) -> Self {
        ReservoirUnion {
            parts: Some(Vec::new()),
            ..Self::with_seed(max_k, seed)
        }
    }

    /// The largest sample the union keeps.
    pub fn max_k(&self) -> usize {
        self.max_k
    }

    fn new_gadget(&mut self) -> Reservoir<K> {
        Reservoir::from_rng(self.max_k, Rng::new(self.rng.next_u64()))
    }

    /// Offers one item (with weight 1).
    pub fn update_item(&mut self, item: K) {
        if self.gadget.is_none() {
            self.gadget = Some(self.new_gadget());
        }
        if let Some(g) = &mut self.gadget {
            g.update(item);
        }
    }

    /// Offers `item` `count` times, cloning it only when a copy is kept.
    pub fn update_item_repeated(&mut self, item: &K, count: u64)
    where
        K: Clone,
    {
        if self.gadget.is_none() {
            self.gadget = Some(self.new_gadget());
        }
        if let Some(g) = &mut self.gadget {
            g.update_repeated(item, count);
        }
    }

    /// Merges a whole reservoir.
    pub fn update(&mut self, sketch: Reservoir<K>) {
        if let Some(parts) = &mut self.parts {
            if !sketch.is_empty() {
                parts.push(sketch);
            }
            return;
        }
        let sketch = if sketch.k > self.max_k {
            sketch.downsampled(self.max_k)
        } else {
            sketch
        };
        match self.gadget.take() {
            None => {
                if sketch.k < self.max_k && sketch.n <= sketch.k as u64 {
                    // Exact and smaller: keep everything in a gadget of the full size.
                    self.gadget = Some(self.new_gadget());
                    self.merge(sketch);
                } else {
                    self.gadget = Some(sketch);
                }
            }
            Some(g) => {
                self.gadget = Some(g);
                self.merge(sketch);
            }
        }
    }

    /// DataSketches' two-way merge of `source` into the gadget.
    fn merge(&mut self, source: Reservoir<K>) {
        let Some(gadget) = self.gadget.take() else {
            self.gadget = Some(source);
            return;
        };
        let (mut gadget, source) = if source.n <= source.k as u64 {
            (gadget, source)
        } else if gadget.n < gadget.k as u64 {
            // The gadget is still exact: replay it into the (full) source instead.
            (source, gadget)
        } else if source.implicit_weight() < gadget.n as f64 / (gadget.k as f64 - 1.0) {
            (gadget, source)
        } else {
            (source, gadget)
        };
        if source.n <= source.k as u64 {
            for item in source.samples {
                gadget.update(item);
            }
        } else {
            self.merge_weighted(&mut gadget, source);
        }
        self.gadget = Some(gadget);
    }

    /// Merges a full `source` whose samples are light enough: each is kept with probability
    /// `k * weight / total`, the running total growing by its weight.
    fn merge_weighted(&mut self, gadget: &mut Reservoir<K>, source: Reservoir<K>) {
        let weight = source.n as f64 / source.k as f64;
        let keep = gadget.k as f64 * weight;
        let mut total = gadget.n as f64;
        for item in source.samples {
            total += weight;
            if total * self.rng.unit() < keep {
                let slot = self.rng.below(gadget.k as u64) as usize;
                gadget.samples[slot] = item;
            }
        }
        gadget.force_increment(source.n);
    }

    /// The merged reservoir (`None` when nothing was merged).
    pub fn result(mut self) -> Option<Reservoir<K>> {
        let Some(mut parts) = self.parts.take() else {
            return self.gadget;
        };
        // Single items offered with `update_item` went into the gadget: one more part.
        parts.extend(self.gadget.take());
        if parts.is_empty() {
            return None;
        }
        let weight = |r: &Reservoir<K>| r.n as f64 / r.samples.len().max(1) as f64;
        let heaviest = parts.iter().map(weight).fold(1.0, f64::max);
        let seen: u64 = parts.iter().map(|r| r.n).sum();
        let mut kept = Vec::with_capacity(parts.iter().map(|r| r.samples.len()).sum());
        for part in parts {
            let keep = weight(&part) / heaviest;
            for item in part.samples {
                if keep >= 1.0 || self.rng.unit() < keep {
                    kept.push(item);
                }
            }
        }
        if kept.len() > self.max_k {
            // A uniform max_k of them: a partial Fisher-Yates shuffle.
            for i in 0..self.max_k {
                let j = i + self.rng.below((kept.len() - i) as u64) as usize;
                kept.swap(i, j);
            }
            kept.truncate(self.max_k);
        }
        let mut merged = Reservoir::from_rng(self.max_k.max(kept.len()), self.rng.clone());
        merged.leave_plain();
        merged.n = seen.max(kept.len() as u64);
        merged.samples = kept;
        Some(merged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts per decile of `0..n` over many draws of a sample.
    fn deciles(samples: &[u64], n: u64) -> [u64; 10] {
        let mut d = [0u64; 10];
        for &s in samples {
            d[(s * 10 / n) as usize] += 1;
        }
        d
    }

    #[test]
    fn an_unfilled_reservoir_keeps_everything_in_order() {
        let mut r = Reservoir::with_seed(10, 1);
        (0..7u64).for_each(|i| r.update(i));
        assert_eq!(r.samples(), &[0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(r.items_seen(), 7);
        assert_eq!(r.implicit_weight(), 1.0);
    }

    #[test]
    fn algorithm_l_keeps_every_item_with_the_same_chance() {
        // 400 reservoirs of 50 over 0..20,000: each decile should hold about 10 % of the samples.
        let n = 20_000u64;
        let mut all = Vec::new();
        for seed in 0..400 {
            let mut r = Reservoir::with_seed(50, seed);
            (0..n).for_each(|i| r.update(i));
            assert_eq!(r.samples().len(), 50);
            all.extend_from_slice(r.samples());
        }
        let expected = all.len() as f64 / 10.0;
        for (i, c) in deciles(&all, n).iter().enumerate() {
            assert!(
                (*c as f64 - expected).abs() < expected * 0.06,
                "decile {i}: {c} vs {expected}"
            );
        }
    }

    #[test]
    fn algorithm_r_after_a_decode_keeps_sampling_uniformly() {
        let n = 20_000u64;
        let mut all = Vec::new();
        for seed in 0..300 {
            let mut r = Reservoir::with_seed(50, seed);
            (0..n / 2).for_each(|i| r.update(i));
            let bytes = sluice_core::codec::encode(&r).unwrap();
            let mut r: Reservoir<u64> = sluice_core::codec::decode(&bytes).unwrap();
            assert!(!r.plain);
            // A decoded reservoir draws from a fresh random seed; the test fixes it so that its
            // statistical bound is checked on the same draws every run.
            r.rng = crate::rng::Rng::new(seed.wrapping_mul(0x9E37_79B9) ^ 0x5EED);
            (n / 2..n).for_each(|i| r.update(i));
            assert_eq!(r.items_seen(), n);
            all.extend_from_slice(r.samples());
        }
        let expected = all.len() as f64 / 10.0;
        for (i, c) in deciles(&all, n).iter().enumerate() {
            assert!(
                (*c as f64 - expected).abs() < expected * 0.07,
                "decile {i}: {c} vs {expected}"
            );
        }
    }

    #[test]
    fn offer_lets_the_caller_build_only_the_kept_items() {
        let mut r = Reservoir::with_seed(100, 9);
        let mut built = 0;
        for i in 0..1_000_000u64 {
            if let Some(slot) = r.offer() {
                built += 1;
                r.put(slot, i);
            }
        }
        // k + k * ln(n / k): about 1,020 items built for a million seen.
        assert!(built < 2_000, "{built}");
        assert_eq!(r.items_seen(), 1_000_000);
    }

    #[test]
    fn a_union_of_unequal_streams_samples_the_union_uniformly() {
        // Subtask a sees 0..2,000, subtask b sees 2,000..20,000: the union must hold about 10 %
        // of its samples below 2,000.
        let mut low = 0usize;
        let mut total = 0usize;
        for seed in 0..200u64 {
            let mut a = Reservoir::with_seed(300, seed * 3);
            (0..2_000u64).for_each(|i| a.update(i));
            let mut b = Reservoir::with_seed(300, seed * 3 + 1);
            (2_000..20_000u64).for_each(|i| b.update(i));
            let mut u = ReservoirUnion::with_seed(200, seed * 3 + 2);
            if seed % 2 == 0 {
                u.update(a);
                u.update(b);
            } else {
                u.update(b);
                u.update(a);
            }
            let m = u.result().unwrap();
            assert_eq!(m.items_seen(), 20_000);
            assert_eq!(m.samples().len(), 200);
            low += m.samples().iter().filter(|&&s| s < 2_000).count();
            total += m.samples().len();
        }
        let share = low as f64 / total as f64;
        assert!((0.085..0.115).contains(&share), "{share}");
    }

    #[test]
    fn exact_reservoirs_merge_item_by_item_into_a_full_size_gadget() {
        let mut u = ReservoirUnion::with_seed(10, 1);
        for part in 0..3u64 {
            let mut r = Reservoir::with_seed(5, part);
            (part * 3..part * 3 + 3).for_each(|i| r.update(i));
            u.update(r);
        }
        let m = u.result().unwrap();
        assert_eq!(m.k(), 10);
        let mut s = m.samples().to_vec();
        s.sort();
        assert_eq!(s, (0..9).collect::<Vec<u64>>());
    }

    #[test]
    fn a_larger_reservoir_is_downsampled_to_the_union_size() {
        let mut r = Reservoir::with_seed(1_000, 4);
        (0..5_000u64).for_each(|i| r.update(i));
        let mut u = ReservoirUnion::with_seed(100, 5);
        u.update(r);
        let m = u.result().unwrap();
        assert_eq!(
            (m.k(), m.samples().len(), m.items_seen()),
            (100, 100, 5_000)
        );
        assert!(u_is_empty_is_none());
    }

    #[test]
    fn keeping_all_keeps_every_sample_of_equally_weighted_reservoirs() {
        let mut u = ReservoirUnion::keeping_all(1_000, 7);
        for part in 0..4u64 {
            let mut r = Reservoir::with_seed(200, part);
            (part * 10_000..(part + 1) * 10_000).for_each(|i| r.update(i));
            u.update(r);
        }
        let m = u.result().unwrap();
        assert_eq!((m.samples().len(), m.items_seen()), (800, 40_000));
        assert_eq!(m.samples().iter().filter(|&&s| s < 10_000).count(), 200);
    }

    #[test]
    fn keeping_all_thins_lighter_samples_so_every_item_counts_alike() {
        // a: 2,000 items in 300 samples (weight 6.7); b: 18,000 in 300 (weight 60). The union
        // keeps a's samples with probability 6.7 / 60, so about 10 % of it is below 2,000.
        let (mut low, mut total) = (0, 0);
        for seed in 0..100u64 {
            let mut a = Reservoir::with_seed(300, seed * 3);
            (0..2_000u64).for_each(|i| a.update(i));
            let mut b = Reservoir::with_seed(300, seed * 3 + 1);
            (2_000..20_000u64).for_each(|i| b.update(i));
            let mut u = ReservoirUnion::keeping_all(10_000, seed);
            u.update(a);
            u.update(b);
            let m = u.result().unwrap();
            assert_eq!(m.items_seen(), 20_000);
            low += m.samples().iter().filter(|&&s| s < 2_000).count();
            total += m.samples().len();
        }
        let share = low as f64 / total as f64;
        assert!((0.085..0.115).contains(&share), "{share}");
        // And the result is capped.
        let mut u = ReservoirUnion::keeping_all(50, 1);
        let mut r = Reservoir::with_seed(100, 2);
        (0..100u64).for_each(|i| r.update(i));
        u.update(r);
        assert_eq!(u.result().unwrap().samples().len(), 50);
    }

    fn u_is_empty_is_none() -> bool {
        ReservoirUnion::<u8>::with_seed(3, 0).result().is_none()
    }
}
