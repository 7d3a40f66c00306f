//! [`KeyedStream`]: a stream partitioned by key.

use crate::api::connected::KeyedConnectedStreams;
use crate::api::processed::ProcessedStream;
use crate::api::stream::DataStream;
use crate::api::windowed::WindowedStream;
use crate::operator::Operator;
use crate::process::{KeyedProcessFunction, KeyedProcessOperator, StateKey};
use crate::window::{CountEvictor, CountTrigger, GlobalWindows, PurgingTrigger, WindowAssigner};
use sluice_core::Data;
use std::marker::PhantomData;

/// A stream whose records reach the next operator partitioned by key: every record with the same
/// key goes to the same subtask.
///
/// ```
/// use sluice_runtime::prelude::*;
/// let env = StreamEnvironment::new();
/// env.set_parallelism(3);
/// let out = env
///     .from_iter(0u64..1000)
///     .key_by(|x| x % 7)
///     .map(|x| x % 7)
///     .collect();
/// env.execute_blocking("keys").unwrap();
/// assert_eq!(out.len(), 1000);
/// ```
pub struct KeyedStream<T, K, F> {
    stream: DataStream<T>,
    key_fn: F,
    _k: PhantomData<fn() -> K>,
}

impl<T, K, F: Clone> Clone for KeyedStream<T, K, F> {
    fn clone(&self) -> Self {
        KeyedStream {
            stream: self.stream.clone(),
            key_fn: self.key_fn.clone(),
            _k: PhantomData,
        }
    }
}

impl<T: Data, K, F: Fn(&T) -> K + Clone + Send + 'static> KeyedStream<T, K, F> {
    pub(crate) fn new(stream: DataStream<T>, key_fn: F) -> Self {
        KeyedStream {
            stream,
            key_fn,
            _k: PhantomData,
        }
    }

    /// The stream before the keyed exchange, partitioned by key.
    pub(crate) fn stream(&self) -> &DataStream<T> {
        &self.stream
    }

    /// Connects this keyed stream with another keyed by keys of the same type (Flink's
    /// `KeyedStream.connect`): records of both with equal keys reach the same subtask, where a
    /// [`KeyedCoProcessFunction`](crate::process::KeyedCoProcessFunction) sees their shared
    /// state and timers.
    pub fn connect<B, G>(
        &self,
        other: &KeyedStream<B, K, G>,
    ) -> KeyedConnectedStreams<T, B, K, F, G>
    where
        B: Data,
        K: StateKey,
        G: Fn(&B) -> K + Clone + Send + 'static,
    {
        KeyedConnectedStreams::new(self.clone(), other.clone())
    }

    /// Joins this keyed stream (the left side) with `other` (the right side) by event-time
    /// intervals (Flink's `KeyedStream.intervalJoin`): a left record at `l` meets each right
    /// record of its key at `r` with `l + lower <= r <= l + upper`, bounds set with
    /// [`between_millis`](crate::api::IntervalJoin::between_millis). Each side's records are
    /// kept per key until the watermark passes the last time a partner could come; records
    /// need event times, and late ones are dropped or sent to a side output. See
    /// [`IntervalJoined`](crate::api::IntervalJoined) and
    /// [`ProcessJoinFunction`](crate::process::ProcessJoinFunction).
    ///
    /// Each click (user, time) with the orders (user, time) its user placed up to ten
    /// seconds after it:
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_runtime::process::{JoinContext, ProcessJoinFunction};
    ///
    /// #[derive(Clone)]
    /// struct Delay;
    /// impl ProcessJoinFunction<(u32, i64), (u32, i64)> for Delay {
    ///     type Out = (u32, i64, i64); // (user, click time, delay to the order)
    ///     fn process_element(&mut self, click: (u32, i64), order: (u32, i64), ctx: &mut JoinContext<'_, Self::Out>) -> Result<(), UserError> {
    ///         ctx.collect((click.0, click.1, order.1 - click.1));
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let env = StreamEnvironment::new();
    /// env.set_parallelism(2);
    /// let by_time = || WatermarkStrategy::for_monotonous_timestamps(|r: &(u32, i64)| r.1);
    /// let clicks = env
    ///     .from_iter(vec![(1u32, 1_000i64), (2, 2_000), (1, 30_000)])
    ///     .assign_timestamps_and_watermarks(by_time())
    ///     .key_by(|c| c.0);
    /// let orders = env
    ///     .from_iter(vec![(1u32, 4_000i64), (2, 1_000), (1, 35_000), (1, 50_000)])
    ///     .assign_timestamps_and_watermarks(by_time())
    ///     .key_by(|o| o.0);
    /// let delays = clicks
    ///     .interval_join(&orders)
    ///     .between_millis(0, 10_000)
    ///     .process(Delay)
    ///     .collect();
    /// env.execute_blocking("click to order").unwrap();
    /// let mut delays = delays.take();
    /// delays.sort();
    /// // User 2 ordered before clicking; user 1's order at 50 s came too late after any click.
    /// assert_eq!(delays, vec![(1, 1_000, 3_000), (1, 30_000, 5_000)]);
    /// ```
    pub fn interval_join<B, G>(
        &self,
        other: &KeyedStream<B, K, G>,
    ) -> crate::api::IntervalJoin<T, B, K, F, G>
    where
        B: Data,
        K: StateKey,
        G: Fn(&B) -> K + Clone + Send + 'static,
    {
        crate::api::IntervalJoin::new(self.clone(), other.clone())
    }

    /// The function that extracts the key.
    pub fn key_fn(&self) -> &F {
        &self.key_fn
    }

    /// The key of `record`.
    pub fn key_of(&self, record: &T) -> K {
        (self.key_fn)(record)
    }

    /// Adds a user [`Operator`] that receives the records partitioned by key.
    pub fn process<Op: Operator<T> + Clone>(&self, op: Op) -> DataStream<Op::Out> {
        self.stream.process(op)
    }

    /// Runs a [`KeyedProcessFunction`] on each record with its key current, with per-key state
    /// and timers (Flink's `KeyedStream.process`). The result is the function's main output;
    /// its side outputs come from [`ProcessedStream::get_side_output`].
    pub fn process_keyed<P>(&self, func: P) -> ProcessedStream<P::Out>
    where
        K: StateKey,
        P: KeyedProcessFunction<K, T>,
    {
        let refused = crate::state::StateTtlConfig::refusal(func.state_ttl().as_ref());
        let op = KeyedProcessOperator::new(func, self.key_fn.clone());
        let raw = self.stream.transform("Keyed Process", op);
        if let Some(message) = refused {
            raw.refuse(message);
        }
        ProcessedStream::new(raw, "Keyed Process")
    }

    /// Cuts the stream into windows of each key (Flink's `KeyedStream.window`); see
    /// [`WindowedStream`].
    pub fn window(&self, assigner: WindowAssigner) -> WindowedStream<T, K, F>
    where
        K: StateKey,
    {
        WindowedStream::new(self.clone(), assigner)
    }

    /// Windows of `size` records per key (Flink's `countWindow(size)`): [`GlobalWindows`] with
    /// `PurgingTrigger::of(CountTrigger::of(size))`, so each window fires with its `size`
    /// records and starts again empty. Records left over at the end of input never fire.
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// let env = StreamEnvironment::new();
    /// env.set_parallelism(1);
    /// let sums = env
    ///     .from_iter(1..=7u64)
    ///     .key_by(|n| n % 2)
    ///     .count_window(2)
    ///     .reduce(|a, b| a + b)
    ///     .collect();
    /// env.execute_blocking("pairs").unwrap();
    /// let mut sums = sums.take();
    /// sums.sort();
    /// assert_eq!(sums, vec![4, 6, 12], "1+3, 2+4, 5+7; the 6 waits for a partner");
    /// ```
    pub fn count_window(&self, size: u64) -> WindowedStream<T, K, F>
    where
        K: StateKey,
    {
        self.window(GlobalWindows::create())
            .trigger(PurgingTrigger::of(CountTrigger::of(size)))
    }

    /// Sliding windows of the last `size` records per key, every `slide` records (Flink's
    /// `countWindow(size, slide)`): [`GlobalWindows`] with `CountTrigger::of(slide)` and
    /// `CountEvictor::of(size)`; the window keeps its records.
    pub fn count_window_sliding(&self, size: u64, slide: u64) -> WindowedStream<T, K, F>
    where
        K: StateKey,
    {
        self.window(GlobalWindows::create())
            .evictor(CountEvictor::of(
                usize::try_from(size).unwrap_or(usize::MAX),
            ))
            .trigger(CountTrigger::of(slide))
    }

    /// Adds a user [`Operator`] under `name`.
    pub fn transform<Op: Operator<T> + Clone>(&self, name: &str, op: Op) -> DataStream<Op::Out> {
        self.stream.transform(name, op)
    }

    /// Adds a user [`Operator`] with an operator coordinator (see
    /// [`DataStream::transform_with_coordinator`]).
    pub fn transform_with_coordinator<Op, P>(
        &self,
        name: &str,
        op: Op,
        provider: P,
    ) -> DataStream<Op::Out>
    where
        Op: Operator<T> + Clone,
        P: sluice_coordinator::CoordinatorProvider + 'static,
    {
        self.stream.transform_with_coordinator(name, op, provider)
    }

    /// A `map` after the keyed exchange.
    pub fn map<U: Data, G: FnMut(T) -> U + Clone + Send + 'static>(&self, f: G) -> DataStream<U> {
        self.stream.map(f)
    }

    /// A `filter` after the keyed exchange.
    pub fn filter<G: FnMut(&T) -> bool + Clone + Send + 'static>(&self, f: G) -> DataStream<T> {
        self.stream.filter(f)
    }

    /// A `flat_map` after the keyed exchange.
    pub fn flat_map<
        U: Data,
        I: IntoIterator<Item = U>,
        G: FnMut(T) -> I + Clone + Send + 'static,
    >(
        &self,
        f: G,
    ) -> DataStream<U> {
        self.stream.flat_map(f)
    }

    /// Ends the keyed stream in a sink.
    pub fn sink_to<S: crate::Sink<T> + Clone>(
        &self,
        sink: S,
    ) -> crate::api::stream::DataStreamSink {
        self.stream.sink_to(sink)
    }
}
