//! What every side of `lookup` does, written once: the profiles stored in the servers, the
//! Zipf-distributed keys looked up, how a found profile becomes a number, and the digest.

use rand::SeedableRng;
use rand_distr::{Distribution, Zipf};
use rustc_hash::FxHasher;
use std::hash::Hasher;

/// Distinct keys in the servers (issue 13: "100,000 distinct keys").
pub const KEYS: u64 = 100_000;

/// The Zipf exponent of the keys looked up (YCSB's default).
pub const ZIPF_EXPONENT: f64 = 0.99;

/// Keys per batch on every batched side (issue 13: "batch 100").
pub const BATCH: usize = 100;

/// Requests in flight: records for sluice's operator, so `CAPACITY / BATCH` batches; the
/// hand-written loops keep as many batch calls in flight.
pub const CAPACITY: usize = 1_000;

/// Connections of each PostgreSQL pool (sluice's source and the hand-written loop alike).
pub const PG_CONNECTIONS: usize = 4;

/// The Redis key of profile `id`.
pub fn redis_key(id: u64) -> String {
    format!("sluice-bench:profile:{id}")
}

/// The PostgreSQL table of the profiles.
pub const PG_TABLE: &str = "sluice_bench_profiles";

/// The query of both PostgreSQL sides.
pub fn pg_query() -> String {
    format!("SELECT id, profile FROM {PG_TABLE} WHERE id = ANY($1)")
}

/// The profile stored for `id` (the same bytes in both servers); ids divisible by 50 have none,
/// so some lookups miss.
pub fn profile(id: u64) -> Option<String> {
    (!id.is_multiple_of(50)).then(|| {
        format!(
            r#"{{"user":{id},"name":"user-{id}","tier":"{}","country":"{}","since":"2024-01-01"}}"#,
            ["free", "plus", "pro"][(id % 3) as usize],
            ["DE", "FR", "US", "JP", "BR"][(id % 5) as usize]
        )
    })
}

/// `n` keys in `1..=KEYS`, Zipf-distributed, the same for a given seed.
pub fn keys(n: u64, seed: u64) -> Vec<u64> {
    let zipf = Zipf::new(KEYS as f64, ZIPF_EXPONENT).expect("valid Zipf parameters");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| zipf.sample(&mut rng) as u64).collect()
}

/// What a lookup of `id` that found `value` emits (nothing when it found nothing).
pub fn enriched(id: u64, value: Option<&[u8]>) -> Option<u64> {
    value.map(|v| {
        let mut h = FxHasher::default();
        h.write(v);
        h.finish() ^ id
    })
}

/// The order-independent digest of all emitted numbers.
pub fn digest_step(acc: u64, x: u64) -> u64 {
    acc.wrapping_add(x)
}
