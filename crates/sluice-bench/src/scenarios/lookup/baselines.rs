//! The hand-written baselines of `lookup`: a plain loop over the keys in chunks of [`BATCH`],
//! one `MGET` (Redis) or prepared `= ANY($1)` query (PostgreSQL) per chunk, keeping
//! `CAPACITY / BATCH` calls in flight (`buffer_unordered`) on the same kind of connection as
//! sluice's side (one multiplexed Redis connection; a pool of [`PG_CONNECTIONS`]).

use super::workload::{
    BATCH, CAPACITY, PG_CONNECTIONS, digest_step, enriched, pg_query, redis_key,
};
use futures::{StreamExt, TryStreamExt};
use std::collections::HashMap;

const IN_FLIGHT: usize = CAPACITY / BATCH;

/// Pipelined `MGET`s of the keys; returns the digest.
pub async fn redis(url: &str, keys: &[u64]) -> anyhow::Result<u64> {
    let client = redis::Client::open(url)?;
    let conn = client.get_multiplexed_async_connection().await?;
    futures::stream::iter(keys.chunks(BATCH))
        .map(|chunk| {
            let mut conn = conn.clone();
            let names: Vec<String> = chunk.iter().map(|&id| redis_key(id)).collect();
            async move {
                let values: Vec<Option<Vec<u8>>> = redis::cmd("MGET")
                    .arg(&names)
                    .query_async(&mut conn)
                    .await?;
                Ok::<u64, anyhow::Error>(
                    chunk
                        .iter()
                        .zip(&values)
                        .filter_map(|(&id, v)| enriched(id, v.as_deref()))
                        .fold(0, digest_step),
                )
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_fold(0, |acc, d| async move { Ok(digest_step(acc, d)) })
        .await
}

/// Pipelined `= ANY($1)` queries of the keys over a pool; returns the digest.
pub async fn postgres(url: &str, keys: &[u64]) -> anyhow::Result<u64> {
    let mut config = deadpool_postgres::Config::new();
    config.url = Some(url.to_string());
    config.pool = Some(deadpool_postgres::PoolConfig::new(PG_CONNECTIONS));
    let pool = config.create_pool(
        Some(deadpool_postgres::Runtime::Tokio1),
        tokio_postgres::NoTls,
    )?;
    let query = pg_query();
    futures::stream::iter(keys.chunks(BATCH))
        .map(|chunk| {
            let (pool, query) = (pool.clone(), &query);
            async move {
                let client = pool.get().await?;
                let statement = client.prepare_cached(query).await?;
                let ids: Vec<i64> = chunk.iter().map(|&id| id as i64).collect();
                let rows = client.query(&statement, &[&ids]).await?;
                let found: HashMap<i64, &str> = rows
                    .iter()
                    .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
                    .collect::<Result<_, tokio_postgres::Error>>()?;
                Ok::<u64, anyhow::Error>(
                    chunk
                        .iter()
                        .filter_map(|&id| {
                            enriched(id, found.get(&(id as i64)).map(|p| p.as_bytes()))
                        })
                        .fold(0, digest_step),
                )
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_fold(0, |acc, d| async move { Ok(digest_step(acc, d)) })
        .await
}
