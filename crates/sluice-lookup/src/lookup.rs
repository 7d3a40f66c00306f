//! [`Lookup`]: any [`LookupSource`] as a ready [`AsyncBatchFunction`], built from a key function
//! and a decoder, with retries of connection failures and an optional per-subtask cache.
//!
//! What one batch does, say the inputs `[a, b, c, d]` with keys `[1, 2, 1, 3]`, key 2 cached:
//!
//! ```text
//! keys          1 2 1 3
//! cache         - v - -        hits 1, misses 3
//! distinct      1 3            one round trip: fetch([1, 3]) -> [x, none]
//! retries       a connection failure waits Reconnect's delay and sends it again
//! cache         1 -> x (and 3 -> none if missing keys are cached)
//! decode        decode(a, x), decode(b, v), decode(c, x), decode(d, none)
//! ```

use crate::backoff::Reconnect;
use crate::cache::{Counters, LookupCache, LookupMetrics};
use crate::error::LookupError;
use crate::source::LookupSource;
use rustc_hash::FxHashMap;
use sluice_async_io::AsyncBatchFunction;
use sluice_core::{Data, UserError};
use sluice_runtime::{OperatorContext, OperatorMetrics};
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// A batched lookup: for each input, the key `key(&input)` is looked up in `source`, and
/// `decode(input, value)` makes the output (`None`: nothing is emitted for that input).
///
/// Use it with [`AsyncWait::batched`](sluice_async_io::AsyncWait::batched) (or
/// [`AsyncDataStream::unordered_wait_batched`](sluice_async_io::AsyncDataStream::unordered_wait_batched)).
/// Each batch asks the source once for the distinct keys the cache did not answer. Connection
/// failures are retried after the delays of [`Reconnect`]; when the server stays away the lookup
/// fails with [`LookupError::Unavailable`] naming it, and so does the job (unless the operator's
/// retry strategy retries errors, or its timeout comes first: give it more than
/// [`Reconnect::total`]).
///
/// ```
/// use sluice_lookup::{Lookup, LookupCache, LookupError, LookupSource};
/// use sluice_async_io::AsyncWait;
/// use sluice_runtime::prelude::*;
/// use std::collections::HashMap;
/// use std::future::Future;
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// /// A source in memory, standing in for a database.
/// #[derive(Clone)]
/// struct Names(Arc<HashMap<u64, String>>);
///
/// impl LookupSource for Names {
///     type Key = u64;
///     type Value = String;
///     fn server(&self) -> &str {
///         "names in memory"
///     }
///     fn connect(&mut self) -> Result<(), LookupError> {
///         Ok(())
///     }
///     fn fetch(
///         &self,
///         keys: &[u64],
///     ) -> impl Future<Output = Result<Vec<Option<String>>, LookupError>> + Send + 'static {
///         let found: Vec<_> = keys.iter().map(|k| self.0.get(k).cloned()).collect();
///         async move { Ok(found) }
///     }
/// }
///
/// let names = Names(Arc::new(HashMap::from([(1, "ada".into()), (2, "bob".into())])));
/// let lookup = Lookup::new(names, |click: &(u64, String)| click.0, |click, name: Option<&String>| {
///     Ok(name.map(|n| format!("{} by {n}", click.1)))
/// })
/// .with_cache(LookupCache::max_entries(1000));
/// let metrics = lookup.metrics();
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(1);
/// let clicks = env.from_iter(vec![(1u64, "/a".to_string()), (3, "/b".into()), (1, "/c".into())]);
/// let enriched = AsyncWait::batched(lookup)
///     .max_batch_size(100)
///     .timeout(Duration::from_secs(30))
///     .apply(&clicks)
///     .unwrap()
///     .collect();
/// env.execute_blocking("names").unwrap();
/// assert_eq!(enriched.take(), vec!["/a by ada".to_string(), "/c by ada".to_string()]);
/// assert_eq!(metrics.snapshot().keys_fetched, 2); // keys 1 and 3, once each
/// ```
pub struct Lookup<In, S: LookupSource, K, D> {
    source: S,
    key: Arc<K>,
    decode: Arc<D>,
    reconnect: Reconnect,
    cache: Option<LookupCache>,
    metrics: LookupMetrics,
    subtask: Option<Subtask<S>>,
    _in: PhantomData<fn(In)>,
}

/// What one subtask owns: its cache, its counters and the operator's gauges.
struct Subtask<S: LookupSource> {
    cache: Option<moka::sync::Cache<S::Key, Option<S::Value>>>,
    counters: Arc<Counters>,
    gauges: Arc<OperatorMetrics>,
}

impl<S: LookupSource> Clone for Subtask<S> {
    fn clone(&self) -> Self {
        Subtask {
            cache: self.cache.clone(),
            counters: self.counters.clone(),
            gauges: self.gauges.clone(),
        }
    }
}

impl<In, S: LookupSource, K, D> Clone for Lookup<In, S, K, D> {
    /// The same lookup for another subtask: settings and metrics handle shared, nothing opened.
    fn clone(&self) -> Self {
        Lookup {
            source: self.source.clone(),
            key: self.key.clone(),
            decode: self.decode.clone(),
            reconnect: self.reconnect,
            cache: self.cache,
            metrics: self.metrics.clone(),
            subtask: None,
            _in: PhantomData,
        }
    }
}

impl<In, S, K, D, Out> Lookup<In, S, K, D>
where
    S: LookupSource,
    K: Fn(&In) -> S::Key + Send + Sync + 'static,
    D: Fn(In, Option<&S::Value>) -> Result<Option<Out>, UserError> + Send + Sync + 'static,
{
    /// A lookup of `key(&input)` in `source`, whose output is `decode(input, value)`; no cache,
    /// the default [`Reconnect`].
    pub fn new(source: S, key: K, decode: D) -> Self {
        Lookup {
            source,
            key: Arc::new(key),
            decode: Arc::new(decode),
            reconnect: Reconnect::default(),
            cache: None,
            metrics: LookupMetrics::default(),
            subtask: None,
            _in: PhantomData,
        }
    }

    /// Puts a per-subtask cache in front of the source.
    pub fn with_cache(mut self, cache: LookupCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// How connection failures are retried (default [`Reconnect::default`]).
    pub fn reconnect(mut self, reconnect: Reconnect) -> Self {
        self.reconnect = reconnect;
        self
    }

    /// The lookup's metrics, summed over its subtasks.
    pub fn metrics(&self) -> LookupMetrics {
        self.metrics.clone()
    }

    /// The source's server, as error messages name it.
    pub fn server(&self) -> &str {
        self.source.server()
    }
}

impl<In, S, K, D, Out> AsyncBatchFunction<In> for Lookup<In, S, K, D>
where
    In: Send + 'static,
    S: LookupSource,
    K: Fn(&In) -> S::Key + Send + Sync + 'static,
    D: Fn(In, Option<&S::Value>) -> Result<Option<Out>, UserError> + Send + Sync + 'static,
    Out: Data,
{
    type Out = Out;
    type Results = Option<Out>;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.source.connect()?;
        let counters = Arc::new(Counters::default());
        let cache = self.cache.map(|c| c.build(S::weight, counters.clone()));
        self.subtask = Some(Subtask {
            cache,
            counters,
            gauges: ctx.metrics().clone(),
        });
        Ok(())
    }

    fn invoke_batch(
        &self,
        inputs: Vec<In>,
    ) -> impl Future<Output = Result<Vec<Option<Out>>, UserError>> + Send + use<In, S, K, D, Out>
    {
        let keys: Vec<S::Key> = inputs.iter().map(|i| (self.key)(i)).collect();
        let source = self.source.clone();
        let decode = self.decode.clone();
        let reconnect = self.reconnect;
        let cache_missing = self.cache.is_some_and(|c| c.caches_missing());
        let subtask = self.subtask.clone();
        let total = self.metrics.total.clone();
        async move {
            let Some(subtask) = subtask else {
                return Err("the lookup was called before it was opened".into());
            };
            let values = look_up(
                &source,
                keys,
                subtask.cache.as_ref(),
                cache_missing,
                reconnect,
                [&subtask.counters, &total],
            )
            .await;
            publish(&subtask);
            total.changed.notify_waiters();
            let values = values?;
            // Pushed into a vector sized once (collecting into a `Result` would grow it).
            let mut outputs = Vec::with_capacity(inputs.len());
            for (input, value) in inputs.into_iter().zip(values) {
                outputs.push(decode(input, value.as_ref())?);
            }
            Ok(outputs)
        }
    }
}

/// The values of `keys`: from the cache where it has them, the rest in one round trip.
///
/// Each distinct key is fetched once; the keys fetched are moved out of `keys`, not cloned.
async fn look_up<S: LookupSource>(
    source: &S,
    keys: Vec<S::Key>,
    cache: Option<&moka::sync::Cache<S::Key, Option<S::Value>>>,
    cache_missing: bool,
    reconnect: Reconnect,
    counters: [&Arc<Counters>; 2],
) -> Result<Vec<Option<S::Value>>, LookupError> {
    let count = |field: Field, n: u64| add_all(counters, field, n);
    let mut values: Vec<Option<S::Value>> = vec![None; keys.len()];
    // For each record not answered by the cache, the index of its key among the distinct keys
    // to fetch; and those keys' first positions in `keys` (ascending).
    let mut from_fetch: Vec<(usize, usize)> = Vec::with_capacity(keys.len());
    let mut distinct: Vec<usize> = Vec::with_capacity(keys.len());
    let mut hits = 0;
    {
        let mut index: FxHashMap<&S::Key, usize> = FxHashMap::default();
        index.reserve(keys.len());
        for (i, key) in keys.iter().enumerate() {
            if let Some(cache) = cache
                && let Some(cached) = cache.get(key)
            {
                values[i] = cached;
                hits += 1;
                continue;
            }
            let next = distinct.len();
            let at = *index.entry(key).or_insert(next);
            if at == next {
                distinct.push(i);
            }
            from_fetch.push((i, at));
        }
    }
    count(|c| &c.hits, hits);
    count(|c| &c.misses, from_fetch.len() as u64);
    if distinct.is_empty() {
        return Ok(values);
    }
    let wanted: Vec<S::Key> = if distinct.len() == keys.len() {
        keys
    } else {
        let mut firsts = distinct.iter().copied().peekable();
        keys.into_iter()
            .enumerate()
            .filter(|(i, _)| firsts.next_if_eq(i).is_some())
            .map(|(_, k)| k)
            .collect()
    };
    let mut fetched = fetch_with_retries(source, &wanted, reconnect, counters).await?;
    if fetched.len() != wanted.len() {
        return Err(LookupError::Answer {
            server: source.server().to_string(),
            reason: format!("{} values for {} keys", fetched.len(), wanted.len()),
        });
    }
    if let Some(cache) = cache {
        for (key, value) in wanted.into_iter().zip(&fetched) {
            if value.is_some() || cache_missing {
                cache.insert(key, value.clone());
            }
        }
    }
    if from_fetch.len() == fetched.len() {
        // Every record asked a key of its own: each takes its value.
        for (i, at) in from_fetch {
            values[i] = fetched[at].take();
        }
        return Ok(values);
    }
    // A key asked by several records is cloned for all but its last one, which takes it.
    let mut uses = vec![0u32; fetched.len()];
    for &(_, at) in &from_fetch {
        uses[at] += 1;
    }
    for (i, at) in from_fetch {
        uses[at] -= 1;
        values[i] = if uses[at] == 0 {
            fetched[at].take()
        } else {
            fetched[at].clone()
        };
    }
    Ok(values)
}

/// One round trip for `keys`, retried after connection failures as `reconnect` says.
async fn fetch_with_retries<S: LookupSource>(
    source: &S,
    keys: &[S::Key],
    reconnect: Reconnect,
    counters: [&Arc<Counters>; 2],
) -> Result<Vec<Option<S::Value>>, LookupError> {
    let count = |field: Field, n: u64| add_all(counters, field, n);
    let mut retries = 0;
    let mut waited = Duration::ZERO;
    loop {
        count(|c| &c.round_trips, 1);
        count(|c| &c.keys_fetched, keys.len() as u64);
        let error = match source.fetch(keys).await {
            Ok(values) => return Ok(values),
            Err(e) if e.is_transient() => e,
            Err(e) => return Err(e),
        };
        retries += 1;
        let Some(delay) = reconnect.delay_before_retry(retries) else {
            return Err(LookupError::Unavailable {
                server: source.server().to_string(),
                attempts: retries,
                waited,
                last: error.to_string(),
            });
        };
        tracing::warn!(server = source.server(), %error, ?delay, "lookup failed to connect; retrying");
        count(|c| &c.connection_retries, 1);
        for c in counters {
            c.changed.notify_waiters();
        }
        waited += delay;
        tokio::time::sleep(delay).await;
    }
}

/// A counter of [`Counters`].
type Field = fn(&Counters) -> &std::sync::atomic::AtomicU64;

fn add_all(counters: [&Arc<Counters>; 2], field: Field, n: u64) {
    for c in counters {
        c.add(field, n);
    }
}

/// Copies one subtask's figures into its operator's gauges.
fn publish<S: LookupSource>(subtask: &Subtask<S>) {
    let s = subtask.counters.read_snapshot();
    let g = &subtask.gauges;
    let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    g.set_gauge("lookup_round_trips", as_i64(s.round_trips));
    g.set_gauge("lookup_connection_retries", as_i64(s.connection_retries));
    if let Some(cache) = &subtask.cache {
        g.set_gauge("lookup_cache_hits", as_i64(s.hits));
        g.set_gauge("lookup_cache_misses", as_i64(s.misses));
        g.set_gauge("lookup_cache_evictions", as_i64(s.evictions));
        g.set_gauge("lookup_cache_entries", as_i64(cache.entry_count()));
    }
}
