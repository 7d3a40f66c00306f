//! A small seeded random number generator (SplitMix64) for sampling and routing: no dependency,
//! reproducible from a seed, a few nanoseconds per draw.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

/// SplitMix64: every call advances the state by the golden-ratio increment and mixes it.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator starting from `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// A generator with a seed that differs from run to run.
    pub(crate) fn random() -> Self {
        Rng(random_seed())
    }

    /// The next 64 random bits.
    #[inline]
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// A uniform value in `[0, 1)`.
    #[inline]
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform value in `(0, 1]` (never 0, so its logarithm is finite).
    #[inline]
    pub(crate) fn unit_open(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform value in `0..n` (`n > 0`), by Lemire's multiply-shift.
    #[inline]
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

impl Default for Rng {
    fn default() -> Self {
        Rng::random()
    }
}

/// The SplitMix64 finaliser: a bijective mix of 64 bits.
#[inline]
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 64 bits that differ from process to process (from the standard library's hash keys).
pub(crate) fn random_seed() -> u64 {
    RandomState::new().hash_one(0x5EED_u64)
}

/// A stable 64-bit hash of bytes (FNV-1a, then mixed): the same bytes give the same value in
/// every process and every build, which signatures of statistics need.
pub(crate) fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    mix(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_stay_in_range_and_are_reproducible() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..10_000 {
            let x = a.unit();
            assert!((0.0..1.0).contains(&x));
            let y = a.unit_open();
            assert!(y > 0.0 && y <= 1.0);
            assert!(a.below(13) < 13);
            b.unit();
            b.unit_open();
            b.below(13);
        }
        assert_eq!(a.next_u64(), b.next_u64());
    }

    #[test]
    fn the_stable_hash_depends_only_on_the_bytes() {
        assert_eq!(stable_hash(b"abc"), stable_hash(b"abc"));
        assert_ne!(stable_hash(b"abc"), stable_hash(b"abd"));
        assert_ne!(stable_hash(b""), stable_hash(b"\0"));
    }
}
