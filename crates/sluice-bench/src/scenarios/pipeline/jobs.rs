//! The sluice side of the pipeline scenario: the jobs and their summing sinks.

use super::workload::{digest, generate, keep, key, transform};
use rustc_hash::FxHashMap;
use sluice::prelude::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Sums every record it receives; at the end adds its subtask's total to a shared one.
#[derive(Clone)]
struct SumSink {
    sum: u64,
    total: Arc<AtomicU64>,
}

impl Sink<u64> for SumSink {
    fn write_batch(&mut self, batch: Vec<u64>) -> Result<(), UserError> {
        self.sum = batch.iter().fold(self.sum, |a, &x| a.wrapping_add(x));
        Ok(())
    }

    fn finish(&mut self) -> Result<(), UserError> {
        // fetch_add wraps on overflow, like the baselines' wrapping sums.
        self.total.fetch_add(self.sum, Ordering::Relaxed);
        Ok(())
    }
}

/// Keeps a sum per key in a hash map; at the end adds its table's digest to a shared one.
#[derive(Clone)]
struct SumPerKeySink {
    sums: FxHashMap<u64, u64>,
    digest: Arc<AtomicU64>,
}

impl Sink<u64> for SumPerKeySink {
    fn write_batch(&mut self, batch: Vec<u64>) -> Result<(), UserError> {
        for x in batch {
            let s = self.sums.entry(key(&x)).or_insert(0);
            *s = s.wrapping_add(x);
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), UserError> {
        self.digest.fetch_add(digest(&self.sums), Ordering::Relaxed);
        Ok(())
    }
}

fn environment(parallelism: usize) -> StreamEnvironment {
    let env = StreamEnvironment::new();
    env.set_parallelism(parallelism);
    env
}

/// generator -> map -> filter -> sum, without a key; returns the wrapping sum.
pub async fn chain(records: u64, parallelism: usize) -> anyhow::Result<u64> {
    let env = environment(parallelism);
    let total = Arc::new(AtomicU64::new(0));
    env.from_generator(Generator::new(generate).take(records))
        .map(transform)
        .filter(keep)
        .sink_to(SumSink {
            sum: 0,
            total: total.clone(),
        })
        .name("Sink: Sum");
    env.execute("pipeline-chain").await?;
    Ok(total.load(Ordering::Relaxed))
}

/// `map` and `filter` fused by hand into one operator: one in-place loop per batch that maps
/// and compacts. No fusion of the two built-in operators could do better than this.
#[derive(Clone)]
struct MapThenFilter;

impl Operator<u64> for MapThenFilter {
    type Out = u64;
    fn process_batch(
        &mut self,
        mut batch: Vec<u64>,
        out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        let mut kept = 0;
        for i in 0..batch.len() {
            let x = transform(batch[i]);
            batch[kept] = x;
            kept += usize::from(keep(&x));
        }
        batch.truncate(kept);
        out.emit_batch(batch);
        Ok(())
    }
}

/// `chain` with map and filter fused by hand into one operator (`chain-p1-fused-op`).
pub async fn chain_fused_operator(records: u64) -> anyhow::Result<u64> {
    let env = environment(1);
    let total = Arc::new(AtomicU64::new(0));
    env.from_generator(Generator::new(generate).take(records))
        .transform("Map+Filter", MapThenFilter)
        .sink_to(SumSink {
            sum: 0,
            total: total.clone(),
        })
        .name("Sink: Sum");
    env.execute("pipeline-chain-fused-operator").await?;
    Ok(total.load(Ordering::Relaxed))
}

/// `chain` with no operator at all (`chain-p1-source-only`): the generator maps and filters
/// (a rejected record becomes 0, which adds nothing to the sum), the sink sums. Whatever the
/// operators between a source and a sink cost, the job cannot run faster than this.
pub async fn chain_source_only(records: u64) -> anyhow::Result<u64> {
    let env = environment(1);
    let total = Arc::new(AtomicU64::new(0));
    let generate_mapped_filtered = |i| {
        let x = transform(generate(i));
        if keep(&x) { x } else { 0 }
    };
    env.from_generator(Generator::new(generate_mapped_filtered).take(records))
        .sink_to(SumSink {
            sum: 0,
            total: total.clone(),
        })
        .name("Sink: Sum");
    env.execute("pipeline-chain-source-only").await?;
    Ok(total.load(Ordering::Relaxed))
}

/// generator -> map -> filter -> key_by -> sum-per-key sink; returns the table's digest.
pub async fn keyed(records: u64, parallelism: usize) -> anyhow::Result<u64> {
    let env = environment(parallelism);
    let total = Arc::new(AtomicU64::new(0));
    env.from_generator(Generator::new(generate).take(records))
        .map(transform)
        .filter(keep)
        .key_by(key)
        .sink_to(SumPerKeySink {
            sums: FxHashMap::default(),
            digest: total.clone(),
        })
        .name("Sink: Sum per key");
    env.execute("pipeline-keyed").await?;
    Ok(total.load(Ordering::Relaxed))
}
