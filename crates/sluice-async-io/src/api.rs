//! Adding async I/O to a job: the [`AsyncWait`] builder and Flink's [`AsyncDataStream`] helpers.
//!
//! Settings are validated when the operator is built, so [`AsyncWait::apply`],
//! [`AsyncWait::build`] and every [`AsyncDataStream`] function return a `Result` whose error names
//! the wrong value ([`AsyncConfigError`]), before the job starts.

use crate::batch::{AsyncBatchFunction, BatchRetryScope, Batched};
use crate::config::{self, AsyncConfigError, DEFAULT_BATCH_DELAY, DEFAULT_CAPACITY};
use crate::function::AsyncFunction;
use crate::metrics::AsyncMetrics;
use crate::operator::{
    AsyncWaitOperator, BatchSettings, Batches, KeyFn, Mode, PerRecord, Settings,
};
use crate::retry::AsyncRetryStrategy;
use rustc_hash::FxHasher;
use serde::Serialize;
use serde::de::DeserializeOwned;
use sluice_core::Data;
use sluice_runtime::{DataStream, Operator};
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

/// Builds an async wait operator: an [`AsyncFunction`] plus capacity, timeout, retry strategy and
/// output order; or, made with [`AsyncWait::batched`], an [`AsyncBatchFunction`] plus the same
/// settings and how records are grouped into batches.
///
/// `G` says how calls are made: [`Unbatched`] (one call per record) or [`Batching`].
///
/// Defaults: capacity [`DEFAULT_CAPACITY`] (100), no timeout, no retry, ordered output. A zero
/// timeout means no timeout (as in Flink); retries need a timeout.
///
/// Input records must be serializable: in-flight inputs are stored in checkpoints.
///
/// ```
/// use sluice_async_io::{AsyncRetryStrategy, AsyncWait, async_fn};
/// use sluice_runtime::prelude::*;
/// use std::time::Duration;
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(1);
/// let lookup = async_fn(|user: u64| async move {
///     // A real function would query a service here.
///     Ok(if user % 10 == 0 { vec![] } else { vec![(user, format!("user-{user}"))] })
/// });
/// let retry = AsyncRetryStrategy::fixed_delay(2, Duration::from_millis(5))
///     .if_empty_result()
///     .build()
///     .unwrap();
/// let wait = AsyncWait::new(lookup)
///     .capacity(32)
///     .timeout(Duration::from_secs(2))
///     .retry(retry)
///     .key_ordered(|user: &u64| user % 4);
/// let metrics = wait.metrics();
/// let enriched = wait.apply(&env.from_iter(1u64..=100)).unwrap().collect();
/// env.execute_blocking("enrich").unwrap();
///
/// assert_eq!(enriched.len(), 90);
/// // Users 10, 20, ..., 100 were retried twice each before their empty result was accepted.
/// assert_eq!(metrics.total().retries, 20);
/// ```
pub struct AsyncWait<In, F: AsyncFunction<In>, G = Unbatched> {
    func: F,
    grouping: G,
    capacity: usize,
    timeout: Duration,
    retry: AsyncRetryStrategy<F::Results>,
    mode: Mode,
    key_fn: Option<KeyFn<In>>,
    metrics: AsyncMetrics,
    name: Option<String>,
    _in: PhantomData<fn(In)>,
}

/// One call per record: the grouping of [`AsyncWait::new`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Unbatched;

/// Records grouped into batches: the grouping of [`AsyncWait::batched`]. A batch is sent when it
/// holds `max_batch_size` records, when its oldest record has waited `max_batch_delay`, when no
/// more records can join it (all capacity is taken), or at end of input.
#[derive(Clone, Copy, Debug)]
pub struct Batching {
    max_size: usize,
    max_delay: Duration,
    scope: BatchRetryScope,
}

impl<In, F> AsyncWait<In, F, Unbatched>
where
    In: Data + Serialize + DeserializeOwned,
    F: AsyncFunction<In>,
{
    /// An ordered async wait of `func` with the default capacity, no timeout and no retry.
    pub fn new(func: F) -> Self {
        AsyncWait::with_grouping(func, Unbatched)
    }

    /// Validates the settings and builds the operator (for
    /// [`DataStream::transform`]); most jobs use [`apply`](Self::apply) instead.
    pub fn build(self) -> Result<impl Operator<In, Out = F::Out> + Clone, AsyncConfigError> {
        let (func, settings) = self.into_parts()?;
        Ok(AsyncWaitOperator::new(
            func,
            PerRecord::new(|f: &F, input: In| f.invoke(input)),
            settings,
        ))
    }

    /// Validates the settings and adds the operator after `stream`.
    pub fn apply(self, stream: &DataStream<In>) -> Result<DataStream<F::Out>, AsyncConfigError> {
        let name = self.operator_name();
        Ok(stream.transform(&name, self.build()?))
    }
}

impl<In, B> AsyncWait<In, Batched<B>, Batching>
where
    In: Data + Serialize + DeserializeOwned,
    B: AsyncBatchFunction<In>,
{
    /// An ordered, batched async wait of `func`: batches of at most 100 records
    /// ([`max_batch_size`](Self::max_batch_size)), each sent at the latest 10 ms after its first
    /// record arrived ([`max_batch_delay`](Self::max_batch_delay)); the default capacity, no
    /// timeout and no retry. Capacity, timeouts and retries count records, not batches.
    ///
    /// ```
    /// use sluice_async_io::{AsyncBatchFunction, AsyncWait};
    /// use sluice_runtime::prelude::*;
    /// use std::future::Future;
    /// use std::time::Duration;
    ///
    /// #[derive(Clone)]
    /// struct Lengths;
    /// impl AsyncBatchFunction<String> for Lengths {
    ///     type Out = usize;
    ///     type Results = [usize; 1];
    ///     fn invoke_batch(
    ///         &self,
    ///         inputs: Vec<String>,
    ///     ) -> impl Future<Output = Result<Vec<[usize; 1]>, UserError>> + Send + use<> {
    ///         async move { Ok(inputs.iter().map(|s| [s.len()]).collect()) }
    ///     }
    /// }
    ///
    /// let env = StreamEnvironment::new();
    /// env.set_parallelism(1);
    /// let wait = AsyncWait::batched(Lengths)
    ///     .max_batch_size(2)
    ///     .max_batch_delay(Duration::from_millis(1))
    ///     .timeout(Duration::from_secs(1))
    ///     .unordered();
    /// let metrics = wait.metrics();
    /// let words = env.from_iter(vec!["a".to_string(), "bb".into(), "ccc".into()]);
    /// let lengths = wait.apply(&words).unwrap().collect();
    /// env.execute_blocking("lengths").unwrap();
    /// let mut got = lengths.take();
    /// got.sort();
    /// assert_eq!(got, vec![1, 2, 3]);
    /// assert_eq!(metrics.total().batches, 2); // [a bb] then [ccc]
    /// ```
    pub fn batched(func: B) -> Self {
        AsyncWait::with_grouping(
            Batched(func),
            Batching {
                max_size: DEFAULT_CAPACITY,
                max_delay: DEFAULT_BATCH_DELAY,
                scope: BatchRetryScope::default(),
            },
        )
    }

    /// At most `size` records per batch (1 to [`config::MAX_CAPACITY`]).
    pub fn max_batch_size(mut self, size: usize) -> Self {
        self.grouping.max_size = size;
        self
    }

    /// A batch is sent at the latest `delay` after its oldest record arrived. Zero sends
    /// whatever is there each time the operator runs (batches form only from records that
    /// arrive together). Otherwise at least 1 ms.
    pub fn max_batch_delay(mut self, delay: Duration) -> Self {
        self.grouping.max_delay = delay;
        self
    }

    /// Which records a retry covers: only those whose outcome matched the retry strategy (the
    /// default), or the whole batch.
    pub fn retry_scope(mut self, scope: BatchRetryScope) -> Self {
        self.grouping.scope = scope;
        self
    }

    /// Validates the settings and builds the operator (for [`DataStream::transform`]).
    pub fn build(self) -> Result<impl Operator<In, Out = B::Out> + Clone, AsyncConfigError> {
        let Batching {
            max_size,
            max_delay,
            scope,
        } = self.grouping;
        config::validate_batching(max_size, max_delay)?;
        let (func, settings) = self.into_parts()?;
        let calls = Batches::new(
            |b: &B, inputs: Vec<In>| b.invoke_batch(inputs),
            BatchSettings {
                max_size,
                max_delay,
                scope,
            },
            settings.retry.clone(),
            settings.capacity,
        );
        Ok(AsyncWaitOperator::new(func, calls, settings))
    }

    /// Validates the settings and adds the operator after `stream`.
    pub fn apply(self, stream: &DataStream<In>) -> Result<DataStream<B::Out>, AsyncConfigError> {
        let name = self.operator_name();
        Ok(stream.transform(&name, self.build()?))
    }
}

impl<In, F, G> AsyncWait<In, F, G>
where
    In: Data + Serialize + DeserializeOwned,
    F: AsyncFunction<In>,
{
    fn with_grouping(func: F, grouping: G) -> Self {
        AsyncWait {
            func,
            grouping,
            capacity: DEFAULT_CAPACITY,
            timeout: Duration::ZERO,
            retry: AsyncRetryStrategy::none(),
            mode: Mode::Ordered,
            key_fn: None,
            metrics: AsyncMetrics::default(),
            name: None,
            _in: PhantomData,
        }
    }

    /// At most `capacity` requests in flight per subtask (1 to [`config::MAX_CAPACITY`]). When
    /// they are all taken the operator stops reading input: that is its backpressure.
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity;
        self
    }

    /// The time a record may take over all its attempts before
    /// [`AsyncFunction::timeout`] is called for it. Zero means no timeout. At least 1 ms.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Retries attempts as `strategy` says; needs a timeout.
    pub fn retry(mut self, strategy: AsyncRetryStrategy<F::Results>) -> Self {
        self.retry = strategy;
        self
    }

    /// Results leave in input order (the default).
    pub fn ordered(mut self) -> Self {
        self.mode = Mode::Ordered;
        self.key_fn = None;
        self
    }

    /// Results leave as they complete, but never across a watermark.
    pub fn unordered(mut self) -> Self {
        self.mode = Mode::Unordered;
        self.key_fn = None;
        self
    }

    /// Results of records with the same key (by `key_fn`) leave in input order; records of
    /// different keys overtake each other; none crosses a watermark.
    pub fn key_ordered<K, KF>(mut self, key_fn: KF) -> Self
    where
        K: Hash,
        KF: Fn(&In) -> K + Send + Sync + 'static,
    {
        self.mode = Mode::KeyOrdered;
        self.key_fn = Some(Arc::new(move |input: &In| {
            let mut h = FxHasher::default();
            key_fn(input).hash(&mut h);
            h.finish()
        }));
        self
    }

    /// Names the operator (default "Async Wait").
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_string());
        self
    }

    /// A handle on the operator's per-subtask metrics; see [`AsyncMetrics`].
    pub fn metrics(&self) -> AsyncMetrics {
        self.metrics.clone()
    }

    fn operator_name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| "Async Wait".to_string())
    }

    /// Validates the common settings and splits the builder.
    fn into_parts(self) -> Result<(F, Settings<In, F::Results>), AsyncConfigError> {
        config::validate(self.capacity, self.timeout, self.retry.delay_after(1))?;
        let settings = Settings {
            capacity: self.capacity,
            timeout: (!self.timeout.is_zero()).then_some(self.timeout),
            mode: self.mode,
            retry: self.retry,
            key_fn: self.key_fn,
            metrics: self.metrics,
        };
        Ok((self.func, settings))
    }
}

/// Flink's `AsyncDataStream` helpers: add an async wait operator after a stream in one call.
///
/// Each returns the result stream, or an [`AsyncConfigError`] naming an invalid value (capacity 0,
/// a timeout below 1 ms, retries without a timeout, ...). A zero `timeout` means no timeout. For
/// metrics, naming, or defaults, use the [`AsyncWait`] builder.
///
/// ```
/// use sluice_async_io::{AsyncDataStream, async_fn};
/// use sluice_runtime::prelude::*;
/// use std::time::Duration;
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(1);
/// let squares = AsyncDataStream::ordered_wait(
///     &env.from_iter(0u64..10),
///     async_fn(|x: u64| async move { Ok([x * x]) }),
///     Duration::from_secs(1),
///     4,
/// )
/// .unwrap()
/// .collect();
/// // The same key order as the builder's `key_ordered`: per key, results keep input order.
/// let by_parity = AsyncDataStream::key_ordered_wait(
///     &env.from_iter(0u64..10),
///     |x: &u64| x % 2,
///     async_fn(|x: u64| async move { Ok([x]) }),
///     Duration::from_secs(1),
///     4,
/// )
/// .unwrap()
/// .collect();
/// env.execute_blocking("squares").unwrap();
/// assert_eq!(squares.take(), (0u64..10).map(|x| x * x).collect::<Vec<_>>());
/// let by_parity = by_parity.take();
/// let evens: Vec<u64> = by_parity.iter().copied().filter(|x| x % 2 == 0).collect();
/// assert_eq!(evens, vec![0, 2, 4, 6, 8]);
///
/// let bad = AsyncDataStream::unordered_wait(
///     &env.from_iter(0u64..10),
///     async_fn(|x: u64| async move { Ok([x]) }),
///     Duration::from_secs(1),
///     0,
/// );
/// assert_eq!(bad.err().unwrap().to_string(), "async capacity must be between 1 and 1048576, got 0");
/// ```
pub struct AsyncDataStream;

impl AsyncDataStream {
    /// Results in input order.
    pub fn ordered_wait<In, F>(
        stream: &DataStream<In>,
        func: F,
        timeout: Duration,
        capacity: usize,
    ) -> Result<DataStream<F::Out>, AsyncConfigError>
    where
        In: Data + Serialize + DeserializeOwned,
        F: AsyncFunction<In>,
    {
        AsyncWait::new(func)
            .timeout(timeout)
            .capacity(capacity)
            .apply(stream)
    }

    /// Results as they complete, never across a watermark.
    pub fn unordered_wait<In, F>(
        stream: &DataStream<In>,
        func: F,
        timeout: Duration,
        capacity: usize,
    ) -> Result<DataStream<F::Out>, AsyncConfigError>
    where
        In: Data + Serialize + DeserializeOwned,
        F: AsyncFunction<In>,
    {
        AsyncWait::new(func)
            .timeout(timeout)
            .capacity(capacity)
            .unordered()
            .apply(stream)
    }

    /// Results in input order, with retries.
    pub fn ordered_wait_with_retry<In, F>(
        stream: &DataStream<In>,
        func: F,
        timeout: Duration,
        capacity: usize,
        retry: AsyncRetryStrategy<F::Results>,
    ) -> Result<DataStream<F::Out>, AsyncConfigError>
    where
        In: Data + Serialize + DeserializeOwned,
        F: AsyncFunction<In>,
    {
        AsyncWait::new(func)
            .timeout(timeout)
            .capacity(capacity)
            .retry(retry)
            .apply(stream)
    }

    /// Results as they complete, never across a watermark, with retries.
    pub fn unordered_wait_with_retry<In, F>(
        stream: &DataStream<In>,
        func: F,
        timeout: Duration,
        capacity: usize,
        retry: AsyncRetryStrategy<F::Results>,
    ) -> Result<DataStream<F::Out>, AsyncConfigError>
    where
        In: Data + Serialize + DeserializeOwned,
        F: AsyncFunction<In>,
    {
        AsyncWait::new(func)
            .timeout(timeout)
            .capacity(capacity)
            .unordered()
            .retry(retry)
            .apply(stream)
    }

    /// Batched calls ([`AsyncWait::batched`]), results in input order: batches of at most
    /// `max_batch_size` records, each sent at the latest `max_batch_delay` after its first
    /// record arrived; `capacity` and `timeout` count per record.
    pub fn ordered_wait_batched<In, B>(
        stream: &DataStream<In>,
        func: B,
        timeout: Duration,
        capacity: usize,
        max_batch_size: usize,
        max_batch_delay: Duration,
    ) -> Result<DataStream<B::Out>, AsyncConfigError>
    where
        In: Data + Serialize + DeserializeOwned,
        B: AsyncBatchFunction<In>,
    {
        batched_wait(func, timeout, capacity, max_batch_size, max_batch_delay).apply(stream)
    }

    /// Batched calls, results as they complete, never across a watermark; see
    /// [`ordered_wait_batched`](Self::ordered_wait_batched).
    pub fn unordered_wait_batched<In, B>(
        stream: &DataStream<In>,
        func: B,
        timeout: Duration,
        capacity: usize,
        max_batch_size: usize,
        max_batch_delay: Duration,
    ) -> Result<DataStream<B::Out>, AsyncConfigError>
    where
        In: Data + Serialize + DeserializeOwned,
        B: AsyncBatchFunction<In>,
    {
        batched_wait(func, timeout, capacity, max_batch_size, max_batch_delay)
            .unordered()
            .apply(stream)
    }

    /// Results of the same key (by `key_fn`) in input order; different keys overtake each other.
    pub fn key_ordered_wait<In, F, K, KF>(
        stream: &DataStream<In>,
        key_fn: KF,
        func: F,
        timeout: Duration,
        capacity: usize,
    ) -> Result<DataStream<F::Out>, AsyncConfigError>
    where
        In: Data + Serialize + DeserializeOwned,
        F: AsyncFunction<In>,
        K: Hash,
        KF: Fn(&In) -> K + Send + Sync + 'static,
    {
        AsyncWait::new(func)
            .timeout(timeout)
            .capacity(capacity)
            .key_ordered(key_fn)
            .apply(stream)
    }
}

/// The builder behind the batched [`AsyncDataStream`] helpers.
fn batched_wait<In, B>(
    func: B,
    timeout: Duration,
    capacity: usize,
    max_batch_size: usize,
    max_batch_delay: Duration,
) -> AsyncWait<In, Batched<B>, Batching>
where
    In: Data + Serialize + DeserializeOwned,
    B: AsyncBatchFunction<In>,
{
    AsyncWait::batched(func)
        .max_batch_size(max_batch_size)
        .max_batch_delay(max_batch_delay)
        .timeout(timeout)
        .capacity(capacity)
}
