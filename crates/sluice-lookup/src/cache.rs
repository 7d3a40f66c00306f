//! The lookup cache ([`LookupCache`], its settings) and the lookup metrics ([`LookupMetrics`]).
//!
//! The cache lives per subtask, in front of the source: a key found there is answered without a
//! request. It is bounded by entries or by bytes (the source's
//! [`weight`](crate::LookupSource::weight) of each entry), entries may expire after a time to
//! live, and keys the source does not know may be cached too (as "missing"). It is not part of
//! checkpoints: after a restore it starts empty. It is a `moka` future cache, whose eviction
//! work runs on the calling task, so it never blocks a tokio worker.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How a lookup caches answers. Bounded either by entries or by bytes (the last one set wins).
///
/// ```
/// use sluice_lookup::LookupCache;
/// use std::time::Duration;
///
/// let cache = LookupCache::max_entries(100_000)
///     .time_to_live(Duration::from_secs(60))
///     .cache_missing(true);
/// assert_eq!(cache.entries_bound(), Some(100_000));
/// assert_eq!(LookupCache::max_bytes(64 << 20).bytes_bound(), Some(64 << 20));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LookupCache {
    bound: Bound,
    ttl: Option<Duration>,
    cache_missing: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bound {
    Entries(u64),
    Bytes(u64),
}

impl LookupCache {
    /// A cache of at most `n` entries per subtask.
    pub fn max_entries(n: u64) -> Self {
        LookupCache {
            bound: Bound::Entries(n),
            ttl: None,
            cache_missing: false,
        }
    }

    /// A cache of at most about `bytes` per subtask, by the source's weight of each entry.
    pub fn max_bytes(bytes: u64) -> Self {
        LookupCache {
            bound: Bound::Bytes(bytes),
            ttl: None,
            cache_missing: false,
        }
    }

    /// Entries expire `ttl` after they were stored (default: never).
    pub fn time_to_live(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Whether keys the source does not know are cached too (default: no, they are asked again).
    pub fn cache_missing(mut self, yes: bool) -> Self {
        self.cache_missing = yes;
        self
    }

    /// The entry bound, if bounded by entries.
    pub fn entries_bound(&self) -> Option<u64> {
        match self.bound {
            Bound::Entries(n) => Some(n),
            Bound::Bytes(_) => None,
        }
    }

    /// The byte bound, if bounded by bytes.
    pub fn bytes_bound(&self) -> Option<u64> {
        match self.bound {
            Bound::Bytes(n) => Some(n),
            Bound::Entries(_) => None,
        }
    }

    pub(crate) fn caches_missing(&self) -> bool {
        self.cache_missing
    }

    /// Builds one subtask's cache; evictions (by size or expiry) are counted in `counters`.
    pub(crate) fn build<K, V>(
        &self,
        weigh: fn(&K, &V) -> u32,
        counters: Arc<Counters>,
    ) -> moka::sync::Cache<K, Option<V>>
    where
        K: std::hash::Hash + Eq + Send + Sync + 'static,
        V: Clone + Send + Sync + 'static,
    {
        let mut builder = moka::sync::Cache::builder().eviction_listener(
            move |_k: Arc<K>, _v: Option<V>, cause: moka::notification::RemovalCause| {
                if cause.was_evicted() {
                    counters.evictions.fetch_add(1, Ordering::Relaxed);
                }
            },
        );
        builder = match self.bound {
            Bound::Entries(n) => builder.max_capacity(n),
            Bound::Bytes(n) => builder
                .weigher(move |k: &K, v: &Option<V>| match v {
                    Some(v) => weigh(k, v),
                    None => 16,
                })
                .max_capacity(n),
        };
        if let Some(ttl) = self.ttl {
            builder = builder.time_to_live(ttl);
        }
        builder.build()
    }
}

/// Counters of one lookup (one subtask's, or all subtasks' summed).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    pub(crate) evictions: AtomicU64,
    pub(crate) round_trips: AtomicU64,
    pub(crate) keys_fetched: AtomicU64,
    pub(crate) connection_retries: AtomicU64,
    /// Woken after every batch and every connection retry.
    pub(crate) changed: tokio::sync::Notify,
}

impl Counters {
    pub(crate) fn add(&self, field: fn(&Counters) -> &AtomicU64, n: u64) {
        if n > 0 {
            field(self).fetch_add(n, Ordering::Relaxed);
        }
    }

    pub(crate) fn read_snapshot(&self) -> LookupMetricsSnapshot {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LookupMetricsSnapshot {
            hits: r(&self.hits),
            misses: r(&self.misses),
            evictions: r(&self.evictions),
            round_trips: r(&self.round_trips),
            keys_fetched: r(&self.keys_fetched),
            connection_retries: r(&self.connection_retries),
        }
    }
}

/// A handle on a lookup's metrics, summed over its subtasks; get it from
/// [`Lookup::metrics`](crate::Lookup::metrics) before the job starts, read it at any time.
///
/// Each subtask also publishes its own figures as gauges of the async operator's metrics
/// (`lookup_cache_hits`, `lookup_cache_misses`, `lookup_cache_evictions`,
/// `lookup_cache_entries`, `lookup_round_trips`, `lookup_connection_retries`), visible in the
/// job's metrics like any operator gauge.
#[derive(Clone, Debug, Default)]
pub struct LookupMetrics {
    pub(crate) total: Arc<Counters>,
}

impl LookupMetrics {
    /// The figures so far.
    pub fn snapshot(&self) -> LookupMetricsSnapshot {
        self.total.read_snapshot()
    }

    /// Waits until `condition` holds for the figures; they are checked after every batch and
    /// every connection retry (for tests and monitors that react to a lookup's progress).
    pub async fn wait_until(&self, condition: impl Fn(&LookupMetricsSnapshot) -> bool) {
        loop {
            let changed = self.total.changed.notified();
            if condition(&self.snapshot()) {
                return;
            }
            changed.await;
        }
    }
}

/// Lookup figures at one point in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LookupMetricsSnapshot {
    /// Keys answered by the cache.
    pub hits: u64,
    /// Keys the cache did not have (with no cache: every key).
    pub misses: u64,
    /// Entries the cache evicted (by size or expiry).
    pub evictions: u64,
    /// Requests sent to the server (one per batch with at least one miss, plus retries).
    pub round_trips: u64,
    /// Distinct keys asked of the server.
    pub keys_fetched: u64,
    /// Round trips retried after a connection failure.
    pub connection_retries: u64,
}
