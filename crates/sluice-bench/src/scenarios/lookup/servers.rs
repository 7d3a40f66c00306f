//! Loading the profiles into the servers before a run (idempotent: skipped when present).

use super::workload::{KEYS, PG_TABLE, profile, redis_key};
use anyhow::Context as _;

/// Stores every profile in Redis, unless the last one is there already.
pub async fn load_redis(url: &str) -> anyhow::Result<()> {
    let client = redis::Client::open(url)?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("connecting to Redis at {url}"))?;
    let marker: Option<String> = redis::cmd("GET")
        .arg(redis_key(KEYS - 1))
        .query_async(&mut conn)
        .await?;
    if marker == profile(KEYS - 1) {
        return Ok(());
    }
    for chunk in (1..=KEYS).collect::<Vec<_>>().chunks(5_000) {
        let mut pipe = redis::pipe();
        for &id in chunk {
            match profile(id) {
                Some(p) => pipe.set(redis_key(id), p).ignore(),
                None => pipe.del(redis_key(id)).ignore(),
            };
        }
        let () = pipe.query_async(&mut conn).await?;
    }
    Ok(())
}

/// Creates and fills the profiles table, unless it holds every profile already.
pub async fn load_postgres(url: &str) -> anyhow::Result<()> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("connecting to PostgreSQL at {url}"))?;
    tokio::spawn(conn);
    let present = client
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE tablename = $1",
            &[&PG_TABLE],
        )
        .await?
        .get::<_, i64>(0);
    let expected = (1..=KEYS).filter(|&id| profile(id).is_some()).count() as i64;
    if present == 1 {
        let rows: i64 = client
            .query_one(&format!("SELECT count(*) FROM {PG_TABLE}"), &[])
            .await?
            .get(0);
        if rows == expected {
            return Ok(());
        }
    }
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {PG_TABLE};
             CREATE TABLE {PG_TABLE} (id BIGINT PRIMARY KEY, profile TEXT NOT NULL);"
        ))
        .await?;
    let insert = client
        .prepare(&format!(
            "INSERT INTO {PG_TABLE} SELECT * FROM unnest($1::BIGINT[], $2::TEXT[])"
        ))
        .await?;
    let ids: Vec<u64> = (1..=KEYS).filter(|&id| profile(id).is_some()).collect();
    for chunk in ids.chunks(10_000) {
        let keys: Vec<i64> = chunk.iter().map(|&id| id as i64).collect();
        let values: Vec<String> = chunk.iter().filter_map(|&id| profile(id)).collect();
        client.execute(&insert, &[&keys, &values]).await?;
    }
    client.batch_execute(&format!("ANALYZE {PG_TABLE}")).await?;
    Ok(())
}
