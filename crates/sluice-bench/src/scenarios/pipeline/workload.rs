//! The pipeline's arithmetic, shared by the sluice jobs and the baselines so that both sides do
//! exactly the same work per record: generate record `i`, map it, filter it, key it, and sum.

/// Number of distinct keys of the keyed sum.
pub const KEYS: u64 = 10_000;

/// Record `i` of the generator: a cheap bijective scramble of the index (Fibonacci hashing), so
/// that values are spread and nothing can be computed in closed form.
#[inline]
pub fn generate(i: u64) -> u64 {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The `map` step.
#[inline]
pub fn transform(x: u64) -> u64 {
    x ^ (x >> 29)
}

/// The `filter` step: keeps about two records in three.
#[inline]
pub fn keep(x: &u64) -> bool {
    !x.is_multiple_of(3)
}

/// The `key_by` key.
#[inline]
pub fn key(x: &u64) -> u64 {
    x % KEYS
}

/// Adds one (key, sum) entry to an order-independent digest of a sum-per-key table, so that
/// tables split over subtasks (disjoint keys) combine by wrapping addition.
#[inline]
pub fn digest_entry(key: u64, sum: u64) -> u64 {
    key.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ sum
}

/// The digest of a whole sum-per-key table.
pub fn digest<'a>(entries: impl IntoIterator<Item = (&'a u64, &'a u64)>) -> u64 {
    entries
        .into_iter()
        .fold(0u64, |acc, (&k, &s)| acc.wrapping_add(digest_entry(k, s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_keeps_about_two_thirds_and_keys_cover_the_range() {
        let n = 300_000u64;
        let kept: Vec<u64> = (0..n).map(generate).map(transform).filter(keep).collect();
        let share = kept.len() as f64 / n as f64;
        assert!((0.6..0.73).contains(&share), "{share}");
        let distinct: std::collections::HashSet<u64> = kept.iter().map(key).collect();
        assert_eq!(distinct.len() as u64, KEYS);
    }

    #[test]
    fn digest_does_not_depend_on_entry_order() {
        let a = [(1u64, 10u64), (2, 20), (3, 30)];
        let forward = digest(a.iter().map(|(k, s)| (k, s)));
        let backward = digest(a.iter().rev().map(|(k, s)| (k, s)));
        assert_eq!(forward, backward);
        assert_ne!(forward, digest(a[..2].iter().map(|(k, s)| (k, s))));
    }
}
