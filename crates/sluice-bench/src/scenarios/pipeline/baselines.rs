//! The hand-written baselines of the pipeline scenario: the same arithmetic as the sluice jobs
//! (see [`super::workload`]), as plain loops and as a plain multi-threaded crossbeam exchange.
//! `black_box` hides the record count and consumes the result so that the compiler can neither
//! precompute nor delete the work.

use super::workload::{digest, generate, keep, key, transform};
use crossbeam_channel::{Receiver, Sender, bounded};
use rustc_hash::FxHashMap;
use sluice::key_groups::{key_group, subtask_for_key_group};
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::hint::black_box;

/// What the crossbeam baseline sends: a batch of records.
type Batch = Vec<u64>;

/// generator -> map -> filter -> sum as one loop; returns the wrapping sum.
pub fn chain_loop(records: u64) -> u64 {
    let n = black_box(records);
    let mut sum = 0u64;
    for i in 0..n {
        let x = transform(generate(i));
        if keep(&x) {
            sum = sum.wrapping_add(x);
        }
    }
    black_box(sum)
}

/// The keyed sum as one loop over a hash map with hasher `S`; returns the table's digest.
pub fn keyed_loop<S: BuildHasher + Default>(records: u64) -> u64 {
    let n = black_box(records);
    let mut sums: HashMap<u64, u64, S> = HashMap::default();
    for i in 0..n {
        let x = transform(generate(i));
        if keep(&x) {
            let s = sums.entry(key(&x)).or_insert(0);
            *s = s.wrapping_add(x);
        }
    }
    black_box(digest(&sums))
}

/// The keyed sum over `std::collections::HashMap` (SipHash).
pub fn keyed_loop_std(records: u64) -> u64 {
    keyed_loop::<std::hash::RandomState>(records)
}

/// The keyed sum over `FxHashMap`, the map the sluice sink uses.
pub fn keyed_loop_fx(records: u64) -> u64 {
    keyed_loop::<rustc_hash::FxBuildHasher>(records)
}

/// The exchange at parallelism `p` without sluice: `p` producer threads (producer `s` generates
/// indices `s, s + p, ...`, like the generator's subtask `s`) route records by key group into one
/// buffer per consumer, send a buffer when it holds `batch` records, over bounded crossbeam
/// channels (`capacity` batches per producer-consumer pair, as in sluice); `p` consumer threads
/// keep the sums per key. Returns the digest of all tables.
pub fn keyed_crossbeam(records: u64, p: usize, batch: usize, capacity: usize) -> u64 {
    let n = black_box(records);
    let max_parallelism = sluice::JobConfig::default().max_parallelism;
    let (txs, rxs): (Vec<Sender<Batch>>, Vec<Receiver<Batch>>) =
        (0..p).map(|_| bounded(capacity * p)).unzip();
    let total = std::thread::scope(|scope| {
        let consumers: Vec<_> = rxs
            .into_iter()
            .map(|rx| {
                scope.spawn(move || {
                    let mut sums: FxHashMap<u64, u64> = FxHashMap::default();
                    for records in rx {
                        for x in records {
                            let s = sums.entry(key(&x)).or_insert(0);
                            *s = s.wrapping_add(x);
                        }
                    }
                    digest(&sums)
                })
            })
            .collect();
        for s in 0..p {
            let txs = txs.clone();
            scope.spawn(move || {
                let mut bufs: Vec<Vec<u64>> = (0..p).map(|_| Vec::with_capacity(batch)).collect();
                let mut i = s as u64;
                while i < n {
                    let x = transform(generate(i));
                    if keep(&x) {
                        let g = key_group(&key(&x), max_parallelism);
                        let t = subtask_for_key_group(g, max_parallelism, p);
                        bufs[t].push(x);
                        if bufs[t].len() >= batch {
                            let full = std::mem::replace(&mut bufs[t], Vec::with_capacity(batch));
                            // A consumer only hangs up after every sender is gone.
                            let _ = txs[t].send(full);
                        }
                    }
                    i += p as u64;
                }
                for (t, buf) in bufs.into_iter().enumerate() {
                    if !buf.is_empty() {
                        let _ = txs[t].send(buf);
                    }
                }
            });
        }
        drop(txs);
        consumers
            .into_iter()
            .map(|c| c.join().unwrap_or(0))
            .fold(0u64, u64::wrapping_add)
    });
    black_box(total)
}
