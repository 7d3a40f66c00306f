//! The sluice sides of `lookup`: source of keys -> async wait of a `sluice-lookup` lookup ->
//! digest sink, at parallelism 1, per record or batched, with or without a cache.

use super::workload::{
    BATCH, CAPACITY, PG_CONNECTIONS, digest_step, enriched, pg_query, redis_key,
};
use sluice::async_io::Batched;
use sluice::prelude::*;
use sluice_lookup::{Lookup, LookupCache, PostgresSource, RedisSource, RedisValue, Row};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How the sluice side calls the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Calls {
    /// One request per record (`AsyncWait::new` over the same lookup, batches of one).
    PerRecord,
    /// Batches of [`BATCH`] records.
    Batched,
    /// Batches of [`BATCH`] behind a per-subtask cache of [`CACHE_ENTRIES`].
    Cached,
}

/// Entries of the cache of [`Calls::Cached`]: a tenth of the keys.
pub const CACHE_ENTRIES: u64 = 10_000;

const TIMEOUT: Duration = Duration::from_secs(60);

/// Adds up what it receives; at the end adds its sum to the shared total.
#[derive(Clone)]
struct DigestSink {
    acc: u64,
    total: Arc<AtomicU64>,
}

impl Sink<u64> for DigestSink {
    fn write_batch(&mut self, batch: Vec<u64>) -> Result<(), UserError> {
        self.acc = batch.iter().fold(self.acc, |a, &x| digest_step(a, x));
        Ok(())
    }

    fn finish(&mut self) -> Result<(), UserError> {
        self.total.fetch_add(self.acc, Ordering::Relaxed);
        Ok(())
    }
}

/// Runs `keys` through `lookup` as `calls` says; returns the digest.
async fn run<B>(keys: &[u64], lookup: B, calls: Calls) -> anyhow::Result<u64>
where
    B: AsyncBatchFunction<u64, Out = u64>,
{
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    let input = env.from_iter(keys.to_vec());
    let enriched = match calls {
        Calls::PerRecord => AsyncWait::new(Batched::new(lookup))
            .capacity(CAPACITY)
            .timeout(TIMEOUT)
            .unordered()
            .apply(&input)?,
        Calls::Batched | Calls::Cached => AsyncWait::batched(lookup)
            .max_batch_size(BATCH)
            .max_batch_delay(Duration::from_millis(1))
            .capacity(CAPACITY)
            .timeout(TIMEOUT)
            .unordered()
            .apply(&input)?,
    };
    let total = Arc::new(AtomicU64::new(0));
    enriched
        .sink_to(DigestSink {
            acc: 0,
            total: total.clone(),
        })
        .name("Sink: Digest");
    env.execute("lookup-bench").await?;
    Ok(total.load(Ordering::Relaxed))
}

fn cache(calls: Calls) -> Option<LookupCache> {
    (calls == Calls::Cached).then(|| LookupCache::max_entries(CACHE_ENTRIES))
}

/// The Redis side: `MGET` per batch.
pub async fn redis(url: &str, keys: &[u64], calls: Calls) -> anyhow::Result<u64> {
    let lookup = Lookup::new(
        RedisSource::mget(url)?,
        |id: &u64| redis_key(*id),
        |id, v: Option<&RedisValue>| Ok(enriched(id, v.and_then(RedisValue::as_bytes))),
    );
    match cache(calls) {
        Some(c) => run(keys, lookup.with_cache(c), calls).await,
        None => run(keys, lookup, calls).await,
    }
}

/// The PostgreSQL side: one prepared `= ANY($1)` query per batch.
pub async fn postgres(url: &str, keys: &[u64], calls: Calls) -> anyhow::Result<u64> {
    let source = PostgresSource::<i64>::new(url, &pg_query())?.max_connections(PG_CONNECTIONS);
    let lookup = Lookup::new(
        source,
        |id: &u64| *id as i64,
        |id, row: Option<&Arc<Row>>| match row {
            Some(r) => Ok(enriched(id, Some(r.try_get::<_, &str>(1)?.as_bytes()))),
            None => Ok(None),
        },
    );
    match cache(calls) {
        Some(c) => run(keys, lookup.with_cache(c), calls).await,
        None => run(keys, lookup, calls).await,
    }
}
