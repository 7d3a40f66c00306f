//! [`DataStream`]: a typed stream and the transformations on it.

use crate::api::connected::ConnectedStreams;
use crate::api::environment::StreamEnvironment;
use crate::api::keyed::KeyedStream;
use crate::api::sink::{CollectHandle, CollectSink, DiscardSink, PrintSink, Sink, SinkOp};
use crate::exchange::partitioner::Partitioner;
use crate::graph::NodeKind;
use crate::graph::Partitioning;
use crate::graph::erased::{
    BuiltinWriter, CustomWriter, HashWriter, TwoInputOperator, TypedOperator, TypedOutput,
    WriterFactory,
};
use crate::operator::{FilterOp, FlatMapOp, IdentityOp, MapOp, Operator};
use crate::watermark::WatermarkStrategy;
use sluice_core::{Data, Either, NodeId};
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

/// A stream of records of type `T`: the output of one operator, plus how its records will be
/// partitioned to the next one.
///
/// Transformations add an operator and return its output stream. Partitioning methods
/// (`rebalance`, `broadcast`, `forward`, `partition_custom`, `key_by`) choose how records reach the
/// next operator. `name` and `parallelism` apply to the operator that produces this stream.
pub struct DataStream<T> {
    env: StreamEnvironment,
    node: NodeId,
    partitioning: Partitioning,
    writer: Arc<dyn WriterFactory>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for DataStream<T> {
    fn clone(&self) -> Self {
        DataStream {
            env: self.env.clone(),
            node: self.node,
            partitioning: self.partitioning,
            writer: self.writer.clone(),
            _t: PhantomData,
        }
    }
}

/// The end of a stream: a sink, which can still be named and given a parallelism.
pub struct DataStreamSink {
    env: StreamEnvironment,
    node: NodeId,
}

impl DataStreamSink {
    /// Names the sink (used in metrics and errors).
    pub fn name(self, name: &str) -> Self {
        let id = self.node;
        self.env
            .with_graph(|g| g.nodes[id.0].name = name.to_string());
        self
    }

    /// Sets the sink's parallelism.
    pub fn parallelism(self, parallelism: usize) -> Self {
        let id = self.node;
        self.env
            .with_graph(|g| g.nodes[id.0].parallelism = Some(parallelism));
        self
    }
}

impl<T: Data> DataStream<T> {
    pub(crate) fn new(env: StreamEnvironment, node: NodeId) -> Self {
        DataStream {
            env,
            node,
            partitioning: Partitioning::Default,
            writer: Arc::new(BuiltinWriter::<T>::new(Partitioning::Default)),
            _t: PhantomData,
        }
    }

    /// The operator producing this stream.
    pub fn node_id(&self) -> NodeId {
        self.node
    }

    /// The environment this stream belongs to.
    pub fn environment(&self) -> &StreamEnvironment {
        &self.env
    }

    /// Names the operator that produces this stream (used in metrics and error messages).
    pub fn name(self, name: &str) -> Self {
        let id = self.node;
        self.env
            .with_graph(|g| g.nodes[id.0].name = name.to_string());
        self
    }

    /// Sets the parallelism of the operator that produces this stream.
    pub fn parallelism(self, parallelism: usize) -> Self {
        let id = self.node;
        self.env
            .with_graph(|g| g.nodes[id.0].parallelism = Some(parallelism));
        self
    }

    /// The parallelism set on the operator producing this stream with
    /// [`parallelism`](Self::parallelism), or `None` when it runs at the environment's default.
    /// Feature crates use it to give an operator its input's parallelism, so that the two chain.
    pub fn configured_parallelism(&self) -> Option<usize> {
        let id = self.node;
        self.env.with_graph(|g| g.nodes[id.0].parallelism)
    }

    /// Refuses the job at submit time: `submit` and `execute` fail with
    /// [`JobError::InvalidJob`](crate::JobError::InvalidJob) naming the operator producing this
    /// stream and `reason`, before anything runs. For feature crates whose stream methods return
    /// a stream rather than a `Result`, so that a bad setting is still an error before the job
    /// starts.
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    ///
    /// let env = StreamEnvironment::new();
    /// env.from_iter(vec![1u64])
    ///     .map(|x| x)
    ///     .reject_at_submit("the cost must be between 0 and 100 %, got 120")
    ///     .discard();
    /// let err = env.execute_blocking("refused").unwrap_err();
    /// assert!(err.to_string().contains("'Map'"), "{err}");
    /// assert!(err.to_string().contains("got 120"), "{err}");
    /// ```
    pub fn reject_at_submit(self, reason: impl Into<String>) -> Self {
        self.refuse(reason.into());
        self
    }

    fn with_partitioning(mut self, p: Partitioning, writer: Arc<dyn WriterFactory>) -> Self {
        self.partitioning = p;
        self.writer = writer;
        self
    }

    /// Adds `op` (cloned per subtask) after this stream under `name`.
    pub fn transform<Op>(&self, name: &str, op: Op) -> DataStream<Op::Out>
    where
        Op: Operator<T> + Clone,
    {
        self.add_operator(name, op, false)
    }

    fn add_operator<Op>(&self, name: &str, op: Op, is_sink: bool) -> DataStream<Op::Out>
    where
        Op: Operator<T> + Clone,
    {
        let factory = Arc::new(TypedOperator::<T, Op>::new(op));
        let (from, partitioning, writer) = (self.node, self.partitioning, self.writer.clone());
        let id = self.env.with_graph(|g| {
            let id = g.add_node(
                name.to_string(),
                NodeKind::Operator(factory),
                Arc::new(TypedOutput::<Op::Out>(PhantomData)),
                is_sink,
            );
            g.add_edge(from, id, partitioning, writer);
            id
        });
        DataStream::new(self.env.clone(), id)
    }

    /// Adds the two-input operator `op` (cloned per subtask) under `name`, with this stream as
    /// its first input and `second` as its second: the first input's records reach it as
    /// `Either::Left`, the second's as `Either::Right`, each input partitioned as its stream
    /// says.
    pub(crate) fn add_two_input<B, Op>(
        &self,
        second: &DataStream<B>,
        name: &str,
        op: Op,
    ) -> DataStream<Op::Out>
    where
        B: Data,
        Op: Operator<Either<T, B>> + Clone,
    {
        let factory = Arc::new(TwoInputOperator::<T, B, Op>::new(op));
        let first = (self.node, self.partitioning, self.writer.clone());
        let other = (second.node, second.partitioning, second.writer.clone());
        let same = self.env.same_as(&second.env);
        let id = self.env.with_graph(|g| {
            let id = g.add_node(
                name.to_string(),
                NodeKind::Operator(factory),
                Arc::new(TypedOutput::<Op::Out>(PhantomData)),
                false,
            );
            g.add_edge(first.0, id, first.1, first.2);
            if same {
                g.add_edge(other.0, id, other.1, other.2);
            }
            id
        });
        let out = DataStream::new(self.env.clone(), id);
        if !same {
            out.refuse(format!(
                "'{name}' connects streams of two different environments"
            ));
        }
        out
    }

    /// Marks the operator producing this stream as misconfigured: submitting the job fails
    /// with `message`, naming the operator (the first message recorded is kept).
    pub(crate) fn refuse(&self, message: String) {
        let id = self.node;
        self.env.with_graph(|g| {
            g.nodes[id.0].config_error.get_or_insert(message);
        });
    }

    /// Adds `op` under `name` with an operator coordinator: the job master creates one
    /// coordinator through `provider`, on its own thread, and connects it with the operator's
    /// subtasks (events both ways, aligned with checkpoints; see the `sluice-coordinator` crate).
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
        let out = self.add_operator(name, op, false);
        let id = out.node;
        let provider: Arc<dyn sluice_coordinator::CoordinatorProvider> = Arc::new(provider);
        self.env
            .with_graph(|g| g.nodes[id.0].coordinator = Some(provider));
        out
    }

    /// Adds a user [`Operator`] (cloned per subtask), named "Process".
    pub fn process<Op>(&self, op: Op) -> DataStream<Op::Out>
    where
        Op: Operator<T> + Clone,
    {
        self.transform("Process", op)
    }

    /// One output record per input record.
    pub fn map<U: Data, F>(&self, f: F) -> DataStream<U>
    where
        F: FnMut(T) -> U + Clone + Send + 'static,
    {
        self.transform("Map", MapOp(f))
    }

    /// Keeps the records for which `f` is true.
    pub fn filter<F>(&self, f: F) -> DataStream<T>
    where
        F: FnMut(&T) -> bool + Clone + Send + 'static,
    {
        self.transform("Filter", FilterOp(f))
    }

    /// Any number of output records per input record.
    pub fn flat_map<U: Data, I, F>(&self, f: F) -> DataStream<U>
    where
        I: IntoIterator<Item = U>,
        F: FnMut(T) -> I + Clone + Send + 'static,
    {
        self.transform("Flat Map", FlatMapOp(f, PhantomData))
    }

    /// Partitions by key: all records with the same key reach the same subtask of the next
    /// operator, in every run (keys are hashed into key groups; see
    /// [`key_group`](crate::key_groups::key_group)).
    pub fn key_by<K, F>(&self, key_fn: F) -> KeyedStream<T, K, F>
    where
        K: Hash + 'static,
        F: Fn(&T) -> K + Clone + Send + 'static,
    {
        let writer = Arc::new(HashWriter::<T, K, F>::new(key_fn.clone()));
        KeyedStream::new(
            self.clone().with_partitioning(Partitioning::Hash, writer),
            key_fn,
        )
    }

    /// Round robin to all subtasks of the next operator.
    pub fn rebalance(&self) -> DataStream<T> {
        self.clone().with_partitioning(
            Partitioning::Rebalance,
            Arc::new(BuiltinWriter::<T>::new(Partitioning::Rebalance)),
        )
    }

    /// Every record to every subtask of the next operator.
    pub fn broadcast(&self) -> DataStream<T> {
        self.clone().with_partitioning(
            Partitioning::Broadcast,
            Arc::new(BuiltinWriter::<T>::new(Partitioning::Broadcast)),
        )
    }

    /// Subtask i to subtask i of the next operator (which must have the same parallelism).
    pub fn forward(&self) -> DataStream<T> {
        self.clone().with_partitioning(
            Partitioning::Forward,
            Arc::new(BuiltinWriter::<T>::new(Partitioning::Forward)),
        )
    }

    /// Routes records with a user [`Partitioner`] (cloned per producing subtask).
    pub fn partition_custom<P: Partitioner<T> + Clone>(&self, partitioner: P) -> DataStream<T> {
        self.clone().with_partitioning(
            Partitioning::Custom,
            Arc::new(CustomWriter::<T, P>::new(partitioner)),
        )
    }

    /// Connects this stream with `other` for a two-input operator (Flink's `connect`): the
    /// result's `process`, `map` and `flat_map` see this stream's records as the first input
    /// and `other`'s as the second; `key_by` keys both. See [`ConnectedStreams`].
    pub fn connect<B: Data>(&self, other: &DataStream<B>) -> ConnectedStreams<T, B> {
        ConnectedStreams::new(self.clone(), other.clone())
    }

    /// Joins this stream with `other` in windows (Flink's `DataStream.join`): choose the keys
    /// with `where_` (this stream's) and `equal_to` (`other`'s), then the window, then `apply`
    /// a function to every pair of records with equal keys in the same window. Results carry
    /// the window's `max_timestamp`; late records are dropped. See
    /// [`JoinedStreams`](crate::api::JoinedStreams).
    ///
    /// Orders (user, time) with the payments (user, time, amount) of the same user and minute:
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_runtime::window::TumblingEventTimeWindows;
    /// use std::time::Duration;
    ///
    /// let env = StreamEnvironment::new();
    /// env.set_parallelism(2);
    /// let orders = env
    ///     .from_iter(vec![(1u32, 1_000i64), (2, 2_000), (1, 61_000)])
    ///     .assign_timestamps_and_watermarks(WatermarkStrategy::for_monotonous_timestamps(|o: &(u32, i64)| o.1));
    /// let payments = env
    ///     .from_iter(vec![(1u32, 5_000i64, 30u64), (1, 70_000, 5), (3, 1_000, 9)])
    ///     .assign_timestamps_and_watermarks(WatermarkStrategy::for_monotonous_timestamps(|p: &(u32, i64, u64)| p.1));
    /// let paid = orders
    ///     .join(&payments)
    ///     .where_(|o| o.0)
    ///     .equal_to(|p| p.0)
    ///     .window(TumblingEventTimeWindows::of(Duration::from_secs(60)))
    ///     .apply(|o: (u32, i64), p: (u32, i64, u64)| (o.0, o.1, p.2))
    ///     .collect();
    /// env.execute_blocking("paid orders").unwrap();
    /// let mut paid = paid.take();
    /// paid.sort();
    /// assert_eq!(paid, vec![(1, 1_000, 30), (1, 61_000, 5)]);
    /// ```
    pub fn join<B: Data>(&self, other: &DataStream<B>) -> crate::api::JoinedStreams<T, B> {
        crate::api::JoinedStreams::new(self.clone(), other.clone())
    }

    /// Co-groups this stream with `other` in windows (Flink's `DataStream.coGroup`): like
    /// [`join`](Self::join), but `apply`'s function is called once per key and window with
    /// all of that key's records of both streams in the window (one side may be empty). See
    /// [`CoGroupedStreams`](crate::api::CoGroupedStreams).
    ///
    /// Per user and minute, how many clicks and how many orders:
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_runtime::window::TumblingEventTimeWindows;
    /// use std::time::Duration;
    ///
    /// let env = StreamEnvironment::new();
    /// env.set_parallelism(2);
    /// let by_time = || WatermarkStrategy::for_monotonous_timestamps(|r: &(u32, i64)| r.1);
    /// let clicks = env
    ///     .from_iter(vec![(1u32, 1_000i64), (1, 2_000), (2, 3_000)])
    ///     .assign_timestamps_and_watermarks(by_time());
    /// let orders = env
    ///     .from_iter(vec![(1u32, 4_000i64), (3, 5_000)])
    ///     .assign_timestamps_and_watermarks(by_time());
    /// let counts = clicks
    ///     .co_group(&orders)
    ///     .where_(|c| c.0)
    ///     .equal_to(|o| o.0)
    ///     .window(TumblingEventTimeWindows::of(Duration::from_secs(60)))
    ///     .apply(|user: &u32, clicks: Vec<(u32, i64)>, orders: Vec<(u32, i64)>| {
    ///         [(*user, clicks.len(), orders.len())]
    ///     })
    ///     .collect();
    /// env.execute_blocking("clicks and orders").unwrap();
    /// let mut counts = counts.take();
    /// counts.sort();
    /// assert_eq!(counts, vec![(1, 2, 1), (2, 1, 0), (3, 0, 1)]);
    /// ```
    pub fn co_group<B: Data>(&self, other: &DataStream<B>) -> crate::api::CoGroupedStreams<T, B> {
        crate::api::CoGroupedStreams::new(self.clone(), other.clone())
    }

    /// Merges this stream with `others` into one stream, named "Union".
    pub fn union(&self, others: impl IntoIterator<Item = DataStream<T>>) -> DataStream<T> {
        let streams: Vec<DataStream<T>> = std::iter::once(self.clone()).chain(others).collect();
        let factory = Arc::new(TypedOperator::<T, IdentityOp<T>>::new(IdentityOp(
            PhantomData,
        )));
        let id = self.env.with_graph(|g| {
            let id = g.add_node(
                "Union".to_string(),
                NodeKind::Operator(factory),
                Arc::new(TypedOutput::<T>(PhantomData)),
                false,
            );
            for s in &streams {
                g.add_edge(s.node, id, s.partitioning, s.writer.clone());
            }
            id
        });
        DataStream::new(self.env.clone(), id)
    }

    /// Generates watermarks for this stream with `strategy`.
    pub fn assign_timestamps_and_watermarks(
        &self,
        strategy: WatermarkStrategy<T>,
    ) -> DataStream<T> {
        self.transform("Timestamps/Watermarks", strategy.assigner())
    }

    /// Ends the stream in `sink` (cloned per subtask).
    pub fn sink_to<S: Sink<T> + Clone>(&self, sink: S) -> DataStreamSink {
        let s = self.add_operator("Sink", SinkOp(sink), true);
        DataStreamSink {
            env: s.env,
            node: s.node,
        }
    }

    /// Ends the stream in a [`TwoPhaseCommitSink`](crate::api::TwoPhaseCommitSink): with
    /// checkpointing enabled, every record becomes visible exactly once, whatever fails.
    pub fn sink_to_exactly_once<S>(&self, sink: S) -> DataStreamSink
    where
        S: crate::api::TwoPhaseCommitSink<T> + Clone,
    {
        let s = self.add_operator(
            "Sink: Exactly-once",
            crate::api::TwoPhaseCommitOp::new(sink),
            true,
        );
        DataStreamSink {
            env: s.env,
            node: s.node,
        }
    }

    /// Collects every record in memory, for tests and examples.
    pub fn collect(&self) -> CollectHandle<T> {
        let shared = Arc::new(Mutex::new(Vec::new()));
        self.sink_to(CollectSink(shared.clone()))
            .name("Sink: Collect");
        CollectHandle(shared)
    }

    /// Prints every record to standard output.
    pub fn print(&self) -> DataStreamSink {
        self.sink_to(PrintSink::default()).name("Sink: Print")
    }

    /// Drops every record (useful for benchmarks and for jobs run for their side effects).
    pub fn discard(&self) -> DataStreamSink {
        self.sink_to(DiscardSink).name("Sink: Discard")
    }
}
