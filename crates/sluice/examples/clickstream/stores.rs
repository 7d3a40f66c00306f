//! Profiles from a database instead of the HTTP service (`--lookup redis` or
//! `--lookup postgres`): the same profiles loaded into Redis (`clickstream:profile:<user>`, the
//! JSON of the profile) or PostgreSQL (table `clickstream_profiles`), and looked up with
//! `sluice-lookup` in batches (`MGET` or one `= ANY($1)` query per batch).

use crate::events::{Click, USERS};
use crate::lookup::{EnrichedClick, Profile};
use anyhow::Context as _;
use sluice::prelude::*;
use sluice_lookup::{Lookup, PostgresSource, RedisSource, RedisValue, Row};
use std::sync::Arc;
use std::time::Duration;

/// Where the profiles come from.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// The HTTP lookup service (started in process unless --lookup-url is given).
    Http,
    /// Redis at --redis-url: one MGET per batch.
    Redis,
    /// PostgreSQL at --postgres-url: one prepared `= ANY($1)` query per batch.
    Postgres,
}

const REDIS_PREFIX: &str = "clickstream:profile";
const PG_TABLE: &str = "clickstream_profiles";

/// Loads every user's profile into Redis, unless the last one is there already.
pub async fn load_redis(url: &str) -> anyhow::Result<()> {
    let client = redis::Client::open(url).context("invalid Redis url")?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("cannot connect to Redis at {url}"))?;
    let json = |user: u64| serde_json::to_string(&Profile::of(user));
    let last: Option<String> = redis::cmd("GET")
        .arg(format!("{REDIS_PREFIX}:{}", USERS - 1))
        .query_async(&mut conn)
        .await?;
    if last.as_deref() == Some(json(USERS - 1)?.as_str()) {
        return Ok(());
    }
    for chunk in (0..USERS).collect::<Vec<_>>().chunks(10_000) {
        let mut pipe = redis::pipe();
        for &user in chunk {
            pipe.set(format!("{REDIS_PREFIX}:{user}"), json(user)?)
                .ignore();
        }
        let () = pipe.query_async(&mut conn).await?;
    }
    Ok(())
}

/// Creates and fills the profiles table, unless it holds every user already.
pub async fn load_postgres(url: &str) -> anyhow::Result<()> {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .with_context(|| format!("cannot connect to PostgreSQL at {url}"))?;
    tokio::spawn(conn);
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {PG_TABLE} (
                 user_id BIGINT PRIMARY KEY, country TEXT NOT NULL, tier TEXT NOT NULL)"
        ))
        .await?;
    let rows: i64 = client
        .query_one(&format!("SELECT count(*) FROM {PG_TABLE}"), &[])
        .await?
        .get(0);
    if rows == USERS as i64 {
        return Ok(());
    }
    client
        .batch_execute(&format!("TRUNCATE {PG_TABLE}"))
        .await?;
    let insert = client
        .prepare(&format!(
            "INSERT INTO {PG_TABLE} SELECT * FROM unnest($1::BIGINT[], $2::TEXT[], $3::TEXT[])"
        ))
        .await?;
    for chunk in (0..USERS).collect::<Vec<_>>().chunks(10_000) {
        let profiles: Vec<Profile> = chunk.iter().map(|&u| Profile::of(u)).collect();
        let ids: Vec<i64> = chunk.iter().map(|&u| u as i64).collect();
        let countries: Vec<&str> = profiles.iter().map(|p| p.country.as_str()).collect();
        let tiers: Vec<&str> = profiles.iter().map(|p| p.tier.as_str()).collect();
        client.execute(&insert, &[&ids, &countries, &tiers]).await?;
    }
    Ok(())
}

/// How the lookup is run: the example's capacity, timeout, retries and order.
pub struct Settings {
    pub capacity: usize,
    pub timeout: Duration,
    pub ordered: bool,
    pub max_batch_size: usize,
}

/// The enrichment from Redis or PostgreSQL, batched; a user with no profile gets "unknown".
pub fn enrich(
    clicks: &DataStream<Click>,
    store: Store,
    url: &str,
    settings: &Settings,
    name: &str,
) -> anyhow::Result<DataStream<EnrichedClick>> {
    match store {
        Store::Redis => {
            let lookup = Lookup::new(
                RedisSource::mget(url)?,
                |c: &Click| format!("{REDIS_PREFIX}:{}", c.user),
                |click, v: Option<&RedisValue>| {
                    let profile = match v.and_then(RedisValue::as_bytes) {
                        Some(json) => serde_json::from_slice(json)?,
                        None => Profile::unknown(),
                    };
                    Ok(Some(EnrichedClick { click, profile }))
                },
            );
            batched(clicks, lookup, settings, name)
        }
        Store::Postgres => {
            let query =
                format!("SELECT user_id, country, tier FROM {PG_TABLE} WHERE user_id = ANY($1)");
            let lookup = Lookup::new(
                PostgresSource::<i64>::new(url, &query)?,
                |c: &Click| c.user as i64,
                |click, row: Option<&Arc<Row>>| {
                    let profile = match row {
                        Some(r) => Profile {
                            country: r.try_get(1)?,
                            tier: r.try_get(2)?,
                        },
                        None => Profile::unknown(),
                    };
                    Ok(Some(EnrichedClick { click, profile }))
                },
            );
            batched(clicks, lookup, settings, name)
        }
        Store::Http => anyhow::bail!("the HTTP lookup is not a store"),
    }
}

fn batched<B>(
    clicks: &DataStream<Click>,
    lookup: B,
    settings: &Settings,
    name: &str,
) -> anyhow::Result<DataStream<EnrichedClick>>
where
    B: AsyncBatchFunction<Click, Out = EnrichedClick>,
{
    let wait = AsyncWait::batched(lookup)
        .max_batch_size(settings.max_batch_size)
        .max_batch_delay(Duration::from_millis(2))
        .capacity(settings.capacity)
        .timeout(settings.timeout)
        .name(name);
    let wait = if settings.ordered {
        wait.ordered()
    } else {
        wait.unordered()
    };
    wait.apply(clicks).context("invalid lookup settings")
}
