//! Key groups: the unit in which keys are spread over subtasks and keyed state is rescaled.
//!
//! Keys are hashed with a fixed, seedless hash into one of `max_parallelism` key groups, and key
//! groups are spread over subtasks in contiguous ranges, so that the same key reaches the same
//! subtask in every run and keyed state can be rescaled by moving whole key groups. This is the
//! lowest layer both the exchanges (`key_by` routing) and the state (keyed entries and their
//! redistribution at restore) use.

use std::hash::{Hash, Hasher};

/// The default number of key groups (`JobConfig::max_parallelism`), Flink's default for jobs of
/// up to 128 subtasks. It lives with the key groups because every layer that spreads keys or
/// state over subtasks needs it, down to the operators' contexts.
pub const DEFAULT_MAX_PARALLELISM: usize = 128;

/// The key group of a key: a stable hash of the key, reduced to `0..max_parallelism`.
///
/// ```
/// use sluice_runtime::key_groups::{key_group, subtask_for_key_group};
/// let g = key_group(&"user-7", 128);
/// assert!(g < 128);
/// assert_eq!(g, key_group(&"user-7", 128)); // stable
/// assert!(subtask_for_key_group(g, 128, 4) < 4);
/// ```
#[inline]
pub fn key_group<K: Hash + ?Sized>(key: &K, max_parallelism: usize) -> usize {
    let mut h = rustc_hash::FxHasher::default();
    key.hash(&mut h);
    // FxHash leaves low bits weak for small integers; mix before reducing.
    let mixed = mix64(h.finish());
    ((mixed >> 32) as usize * max_parallelism) >> 32
}

/// The subtask that owns `key_group` when `max_parallelism` key groups are spread over
/// `parallelism` subtasks in contiguous ranges.
#[inline]
pub fn subtask_for_key_group(
    key_group: usize,
    max_parallelism: usize,
    parallelism: usize,
) -> usize {
    key_group * parallelism / max_parallelism
}

/// The key groups subtask `subtask` owns when `max_parallelism` key groups are spread over
/// `parallelism` subtasks: the contiguous range [`subtask_for_key_group`] maps to it.
///
/// ```
/// use sluice_runtime::key_groups::{key_group_range, subtask_for_key_group};
/// assert_eq!(key_group_range(0, 128, 3), 0..43);
/// assert_eq!(key_group_range(2, 128, 3), 86..128);
/// assert!(key_group_range(1, 128, 3).all(|g| subtask_for_key_group(g, 128, 3) == 1));
/// ```
pub fn key_group_range(
    subtask: usize,
    max_parallelism: usize,
    parallelism: usize,
) -> std::ops::Range<usize> {
    let start = |s: usize| (s * max_parallelism).div_ceil(parallelism.max(1));
    start(subtask)..start(subtask + 1).min(max_parallelism)
}

#[inline]
fn mix64(mut z: u64) -> u64 {
    // The finaliser of SplitMix64: a cheap, well-distributed bijection.
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_groups_spread_evenly_over_subtasks() {
        let mut counts = [0usize; 4];
        for k in 0u64..100_000 {
            counts[subtask_for_key_group(key_group(&k, 128), 128, 4)] += 1;
        }
        for c in counts {
            assert!((20_000..30_000).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn key_group_ranges_are_what_subtask_for_key_group_maps() {
        for maxp in [1, 7, 128, 1000] {
            for p in 1..=maxp.min(20) {
                let mut next = 0;
                for s in 0..p {
                    let r = key_group_range(s, maxp, p);
                    assert_eq!(r.start, next, "contiguous");
                    assert!(r.clone().all(|g| subtask_for_key_group(g, maxp, p) == s));
                    next = r.end;
                }
                assert_eq!(next, maxp, "every group owned");
            }
        }
    }

    #[test]
    fn every_key_group_maps_into_range() {
        for p in 1..=16 {
            for g in 0..128 {
                assert!(subtask_for_key_group(g, 128, p) < p);
            }
        }
    }
}
