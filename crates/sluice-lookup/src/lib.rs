//! Lookups for sluice: enrich a stream from Redis or PostgreSQL in a few lines, with many keys
//! per round trip, an optional cache in front, and exactly-once results (the lookups run in the
//! batched async wait operator of `sluice-async-io`, whose in-flight records are checkpointed).
//!
//! Where to find things:
//! - [`Lookup`] (`lookup.rs`): any source as a ready
//!   [`AsyncBatchFunction`](sluice_async_io::AsyncBatchFunction): a key function, a decoder,
//!   one round trip per batch for the distinct keys the cache did not answer, connection
//!   failures retried;
//! - [`RedisSource`] (`redis.rs`): `MGET` or pipelined `HGETALL` per batch, over a reconnecting
//!   multiplexed connection;
//! - [`PostgresSource`] (`postgres.rs`): one prepared `... = ANY($1)` query per batch, over a
//!   small pool;
//! - [`LookupSource`] (`source.rs`): the trait a new store implements (one method, `fetch`);
//! - [`LookupCache`] and [`LookupMetrics`] (`cache.rs`): the per-subtask cache (entries or
//!   bytes, time to live, missing keys) and hit, miss, eviction and round-trip counts, also
//!   published as gauges of the operator;
//! - [`Reconnect`] (`backoff.rs`): how long a server may be away before the job fails;
//! - [`LookupError`] (`error.rs`): failures, each naming the server.
//!
//! A Redis lookup of user profiles, batched and cached:
//!
//! ```no_run
//! use sluice_async_io::AsyncWait;
//! use sluice_lookup::{Lookup, LookupCache, RedisSource, RedisValue};
//! use sluice_runtime::prelude::*;
//! use std::time::Duration;
//!
//! let env = StreamEnvironment::new();
//! let users = env.from_iter(1u64..=1000);
//! let profiles = Lookup::new(
//!     RedisSource::mget("redis://127.0.0.1:6379/").unwrap(),
//!     |user: &u64| format!("profile:{user}"),
//!     |user, v: Option<&RedisValue>| Ok(v.and_then(RedisValue::as_bytes).map(|b| (user, b.len()))),
//! )
//! .with_cache(LookupCache::max_entries(10_000).time_to_live(Duration::from_secs(60)));
//! let enriched = AsyncWait::batched(profiles)
//!     .max_batch_size(100)
//!     .max_batch_delay(Duration::from_millis(5))
//!     .capacity(1000)
//!     .timeout(Duration::from_secs(30))
//!     .unordered()
//!     .apply(&users)
//!     .unwrap();
//! enriched.print();
//! env.execute_blocking("profiles").unwrap();
//! ```

mod backoff;
mod cache;
mod error;
mod lookup;
mod postgres;
mod redis;
mod source;

pub use backoff::Reconnect;
pub use cache::{LookupCache, LookupMetrics, LookupMetricsSnapshot};
pub use error::{Cause, LookupError};
pub use lookup::Lookup;
pub use postgres::PostgresSource;
pub use redis::{RedisSource, RedisValue};
pub use source::LookupSource;
pub use tokio_postgres::Row;
