//! [`ConnectedStreams`] and [`KeyedConnectedStreams`]: two streams, possibly of different
//! types, feeding one two-input operator (Flink's `DataStream.connect`).
//!
//! The operator runs in its own task (a two-input operator heads its chain) and reads both
//! inputs through one gate: its watermark is the minimum of both inputs' watermarks, a
//! checkpoint barrier aligns across the channels of both, and each input keeps the
//! partitioning its stream chose (`key_by`, `broadcast`, `rebalance`, ...).

use crate::api::keyed::KeyedStream;
use crate::api::processed::ProcessedStream;
use crate::api::stream::DataStream;
use crate::operator::Operator;
use crate::process::{
    CoMapOperator, CoProcessFunction, CoProcessOperator, KeyedCoProcessFunction,
    KeyedProcessOperator, StateKey,
};
use crate::process::{KeyedCo, either_key};
use sluice_core::{Data, Either};

/// Two streams connected for a two-input operator (Flink's `ConnectedStreams`): see
/// [`DataStream::connect`].
///
/// ```
/// use sluice_runtime::prelude::*;
///
/// let env = StreamEnvironment::new();
/// let numbers = env.from_iter(vec![1u32, 2, 3]);
/// let words = env.from_iter(vec!["four".to_string()]);
/// let lengths = numbers
///     .connect(&words)
///     .map(|n: u32| n as usize, |w: String| w.len())
///     .collect();
/// env.execute_blocking("lengths").unwrap();
/// let mut lengths = lengths.take();
/// lengths.sort();
/// assert_eq!(lengths, vec![1, 2, 3, 4]);
/// ```
pub struct ConnectedStreams<A, B> {
    first: DataStream<A>,
    second: DataStream<B>,
}

impl<A: Data, B: Data> ConnectedStreams<A, B> {
    pub(crate) fn new(first: DataStream<A>, second: DataStream<B>) -> Self {
        ConnectedStreams { first, second }
    }

    /// The first input.
    pub fn first_input(&self) -> &DataStream<A> {
        &self.first
    }

    /// The second input.
    pub fn second_input(&self) -> &DataStream<B> {
        &self.second
    }

    /// Runs a [`CoProcessFunction`] over both inputs, named "Co-Process".
    pub fn process<P: CoProcessFunction<A, B>>(&self, func: P) -> ProcessedStream<P::Out> {
        let raw = self.transform("Co-Process", CoProcessOperator::new(func));
        ProcessedStream::new(raw, "Co-Process")
    }

    /// One output per record of either input: `first` for the first input's records, `second`
    /// for the second's (Flink's `CoMapFunction`), named "Co-Map".
    pub fn map<U, F1, F2>(&self, mut first: F1, mut second: F2) -> DataStream<U>
    where
        U: Data,
        F1: FnMut(A) -> U + Clone + Send + 'static,
        F2: FnMut(B) -> U + Clone + Send + 'static,
    {
        let op = CoMapOperator::new(
            move |a: A| std::iter::once(first(a)),
            move |b: B| std::iter::once(second(b)),
        );
        self.transform("Co-Map", op)
    }

    /// Any number of outputs per record of either input (Flink's `CoFlatMapFunction`), named
    /// "Co-Flat Map".
    pub fn flat_map<U, I1, I2, F1, F2>(&self, first: F1, second: F2) -> DataStream<U>
    where
        U: Data,
        I1: IntoIterator<Item = U>,
        I2: IntoIterator<Item = U>,
        F1: FnMut(A) -> I1 + Clone + Send + 'static,
        F2: FnMut(B) -> I2 + Clone + Send + 'static,
    {
        self.transform("Co-Flat Map", CoMapOperator::new(first, second))
    }

    /// Keys both inputs, each with its own selector, by keys of one type: records with equal
    /// keys from either input reach the same subtask and share its keyed state.
    pub fn key_by<K, FA, FB>(&self, first: FA, second: FB) -> KeyedConnectedStreams<A, B, K, FA, FB>
    where
        K: StateKey,
        FA: Fn(&A) -> K + Clone + Send + 'static,
        FB: Fn(&B) -> K + Clone + Send + 'static,
    {
        KeyedConnectedStreams {
            first: self.first.key_by(first),
            second: self.second.key_by(second),
        }
    }

    /// Adds a two-input [`Operator`] over [`Either`] under `name`: the first input's records
    /// arrive as `Either::Left`, the second's as `Either::Right`.
    pub fn transform<Op>(&self, name: &str, op: Op) -> DataStream<Op::Out>
    where
        Op: Operator<Either<A, B>> + Clone,
    {
        self.first.add_two_input(&self.second, name, op)
    }
}

/// Two keyed streams with keys of one type, connected (Flink's `ConnectedStreams` after
/// `keyBy`): see [`KeyedStream::connect`] and [`KeyedCoProcessFunction`].
pub struct KeyedConnectedStreams<A, B, K, FA, FB> {
    first: KeyedStream<A, K, FA>,
    second: KeyedStream<B, K, FB>,
}

impl<A, B, K, FA, FB> KeyedConnectedStreams<A, B, K, FA, FB>
where
    A: Data,
    B: Data,
    K: StateKey,
    FA: Fn(&A) -> K + Clone + Send + 'static,
    FB: Fn(&B) -> K + Clone + Send + 'static,
{
    pub(crate) fn new(first: KeyedStream<A, K, FA>, second: KeyedStream<B, K, FB>) -> Self {
        KeyedConnectedStreams { first, second }
    }

    /// Runs a [`KeyedCoProcessFunction`] over both inputs, with per-key state and timers shared
    /// by both, named "Keyed Co-Process".
    pub fn process<P: KeyedCoProcessFunction<K, A, B>>(&self, func: P) -> ProcessedStream<P::Out> {
        let key = either_key(self.first.key_fn().clone(), self.second.key_fn().clone());
        let refused = crate::state::StateTtlConfig::refusal(func.state_ttl().as_ref());
        let op = KeyedProcessOperator::new(KeyedCo::new(func), key);
        let raw = self.transform("Keyed Co-Process", op);
        if let Some(message) = refused {
            raw.refuse(message);
        }
        ProcessedStream::new(raw, "Keyed Co-Process")
    }

    /// Adds a two-input [`Operator`] over [`Either`] under `name`, after both keyed exchanges.
    pub fn transform<Op>(&self, name: &str, op: Op) -> DataStream<Op::Out>
    where
        Op: Operator<Either<A, B>> + Clone,
    {
        self.first
            .stream()
            .add_two_input(self.second.stream(), name, op)
    }

    /// The first input.
    pub fn first_input(&self) -> &KeyedStream<A, K, FA> {
        &self.first
    }

    /// The second input.
    pub fn second_input(&self) -> &KeyedStream<B, K, FB> {
        &self.second
    }
}
