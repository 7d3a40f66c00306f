//! Functions over two connected inputs (Flink's `CoProcessFunction`, `KeyedCoProcessFunction`,
//! `CoMapFunction`, `CoFlatMapFunction`) and the operators that run them.
//!
//! A two-input operator is an [`Operator`] over [`Either`]: the input gate of its task hands
//! the first input's records on as `Either::Left` and the second's as `Either::Right`, with one
//! watermark (the minimum over both inputs) and one barrier alignment across both. So:
//! - [`CoProcessOperator`] runs a [`CoProcessFunction`] on each side's records;
//! - a [`KeyedCoProcessFunction`] runs inside the one-input [`KeyedProcessOperator`] through an
//!   adapter (`KeyedCo`) whose key function keys each side with its own selector: per-key state
//!   and timers are shared by both inputs and checkpointed by key group, as for one input;
//! - [`CoMapOperator`] applies one closure per side, keeping each record's event time.

use super::function::{Context, KeyedProcessFunction, StateKey};
use super::output::{Tagged, output_methods};
use crate::operator::{Collector, Operator, OperatorContext};
use crate::timer::ProcessingClock;
use serde::{Serialize, de::DeserializeOwned};
use sluice_core::{Data, Either, NO_TIMESTAMP, UserError, Watermark};
use std::marker::PhantomData;

#[cfg(doc)]
use super::KeyedProcessOperator;

/// A function over two connected streams (Flink's `CoProcessFunction`): one callback per input,
/// on one subtask, never concurrently, so both callbacks may share the function's own fields.
///
/// Keyed state and timers need keyed inputs: see [`KeyedCoProcessFunction`].
///
/// Tag each side and merge them, counting how many records each input sent:
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::process::{CoContext, CoProcessFunction};
///
/// #[derive(Clone)]
/// struct Tag;
/// impl CoProcessFunction<u32, String> for Tag {
///     type Out = String;
///     fn process_element1(&mut self, n: u32, ctx: &mut CoContext<'_, String>) -> Result<(), UserError> {
///         ctx.collect(format!("number {n}"));
///         Ok(())
///     }
///     fn process_element2(&mut self, s: String, ctx: &mut CoContext<'_, String>) -> Result<(), UserError> {
///         ctx.collect(format!("word {s}"));
///         Ok(())
///     }
/// }
///
/// let env = StreamEnvironment::new();
/// let numbers = env.from_iter(vec![1u32, 2]);
/// let words = env.from_iter(vec!["a".to_string()]);
/// let out = numbers.connect(&words).process(Tag).collect();
/// env.execute_blocking("tag").unwrap();
/// let mut out = out.take();
/// out.sort();
/// assert_eq!(out, vec!["number 1", "number 2", "word a"]);
/// ```
pub trait CoProcessFunction<A, B>: Clone + Send + 'static {
    /// The main output's record type.
    type Out: Data;

    /// Called once per subtask before any record.
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let _ = ctx;
        Ok(())
    }

    /// Called for each record of the first input.
    fn process_element1(
        &mut self,
        value: A,
        ctx: &mut CoContext<'_, Self::Out>,
    ) -> Result<(), UserError>;

    /// Called for each record of the second input.
    fn process_element2(
        &mut self,
        value: B,
        ctx: &mut CoContext<'_, Self::Out>,
    ) -> Result<(), UserError>;
}

/// What a [`CoProcessFunction`] callback sees: the record's event time, the watermark, the
/// processing time and the outputs.
pub struct CoContext<'a, Out> {
    timestamp: Option<i64>,
    watermark: i64,
    clock: &'a ProcessingClock,
    out: &'a mut Collector<Tagged<Out>>,
}

impl<Out: Data> CoContext<'_, Out> {
    output_methods!();
}

/// The event time of record `i` of a batch whose timestamp column is `ts`.
#[inline]
pub(crate) fn timestamp_at(ts: Option<&[i64]>, i: usize) -> Option<i64> {
    ts.map(|ts| ts[i]).filter(|t| *t != NO_TIMESTAMP)
}

/// The operator behind `ConnectedStreams::process`.
pub struct CoProcessOperator<A, B, P> {
    func: P,
    watermark: i64,
    clock: ProcessingClock,
    _in: PhantomData<fn(A, B)>,
}

impl<A, B, P: Clone> Clone for CoProcessOperator<A, B, P> {
    fn clone(&self) -> Self {
        CoProcessOperator::new(self.func.clone())
    }
}

impl<A, B, P> CoProcessOperator<A, B, P> {
    /// Runs `func` on both inputs' records.
    pub fn new(func: P) -> Self {
        CoProcessOperator {
            func,
            watermark: i64::MIN,
            clock: ProcessingClock::new(),
            _in: PhantomData,
        }
    }
}

impl<A: Data, B: Data, P: CoProcessFunction<A, B>> Operator<Either<A, B>>
    for CoProcessOperator<A, B, P>
{
    type Out = Tagged<P::Out>;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.clock = ProcessingClock::new();
        self.func.open(ctx)
    }

    fn process_batch(
        &mut self,
        batch: Vec<Either<A, B>>,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        let timestamps = out.take_input_timestamps();
        for (i, record) in batch.into_iter().enumerate() {
            let mut ctx = CoContext {
                timestamp: timestamp_at(timestamps.as_deref(), i),
                watermark: self.watermark,
                clock: &self.clock,
                out,
            };
            match record {
                Either::Left(a) => self.func.process_element1(a, &mut ctx)?,
                Either::Right(b) => self.func.process_element2(b, &mut ctx)?,
            }
        }
        Ok(())
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        self.watermark = watermark.timestamp();
        out.emit_watermark(watermark);
        Ok(())
    }
}

/// A function over two connected keyed streams (Flink's `KeyedCoProcessFunction`): both
/// inputs are keyed by keys of the same type, and a record of either input sees the state and
/// timers of its key. [`on_timer`](Self::on_timer) fires for timers registered from either
/// side.
///
/// Match orders with their payments, whichever arrives first:
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::process::{Context, KeyedCoProcessFunction};
///
/// #[derive(Clone)]
/// struct Match;
/// #[derive(Default, serde::Serialize, serde::Deserialize)]
/// struct Seen { order: Option<u64>, paid: Option<u64> }
///
/// impl KeyedCoProcessFunction<u32, (u32, u64), (u32, u64)> for Match {
///     type Out = (u32, u64, u64); // (order id, amount ordered, amount paid)
///     type State = Seen;
///     fn process_element1(&mut self, order: (u32, u64), ctx: &mut Context<'_, u32, Seen, Self::Out>) -> Result<(), UserError> {
///         match ctx.state().paid {
///             Some(paid) => { ctx.collect((order.0, order.1, paid)); ctx.clear_state(); }
///             None => ctx.state().order = Some(order.1),
///         }
///         Ok(())
///     }
///     fn process_element2(&mut self, payment: (u32, u64), ctx: &mut Context<'_, u32, Seen, Self::Out>) -> Result<(), UserError> {
///         match ctx.state().order {
///             Some(ordered) => { ctx.collect((payment.0, ordered, payment.1)); ctx.clear_state(); }
///             None => ctx.state().paid = Some(payment.1),
///         }
///         Ok(())
///     }
/// }
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(2);
/// let orders = env.from_iter(vec![(1u32, 10u64), (2, 20)]).key_by(|o| o.0);
/// let payments = env.from_iter(vec![(2u32, 20u64), (1, 9)]).key_by(|p| p.0);
/// let matched = orders.connect(&payments).process(Match).collect();
/// env.execute_blocking("match").unwrap();
/// let mut matched = matched.take();
/// matched.sort();
/// assert_eq!(matched, vec![(1, 10, 9), (2, 20, 20)]);
/// ```
pub trait KeyedCoProcessFunction<K, A, B>: Clone + Send + 'static {
    /// The main output's record type.
    type Out: Data;
    /// The state kept per key, shared by both inputs (`()` for none).
    type State: Default + Serialize + DeserializeOwned + Send + 'static;

    /// How long a key's state lives after its last write; see
    /// [`KeyedProcessFunction::state_ttl`]. `None` by default.
    fn state_ttl(&self) -> Option<crate::state::StateTtlConfig> {
        None
    }

    /// Called once per subtask before any record.
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let _ = ctx;
        Ok(())
    }

    /// Called for each record of the first input, with its key current.
    fn process_element1(
        &mut self,
        value: A,
        ctx: &mut Context<'_, K, Self::State, Self::Out>,
    ) -> Result<(), UserError>;

    /// Called for each record of the second input, with its key current.
    fn process_element2(
        &mut self,
        value: B,
        ctx: &mut Context<'_, K, Self::State, Self::Out>,
    ) -> Result<(), UserError>;

    /// Called when a timer registered for `timestamp` fires, with the timer's key current.
    fn on_timer(
        &mut self,
        timestamp: i64,
        ctx: &mut Context<'_, K, Self::State, Self::Out>,
    ) -> Result<(), UserError> {
        let _ = (timestamp, ctx);
        Ok(())
    }
}

/// A [`KeyedCoProcessFunction`] seen as a one-input [`KeyedProcessFunction`] over [`Either`].
pub(crate) struct KeyedCo<P, A, B> {
    func: P,
    _in: PhantomData<fn(A, B)>,
}

impl<P: Clone, A, B> Clone for KeyedCo<P, A, B> {
    fn clone(&self) -> Self {
        KeyedCo::new(self.func.clone())
    }
}

impl<P, A, B> KeyedCo<P, A, B> {
    pub(crate) fn new(func: P) -> Self {
        KeyedCo {
            func,
            _in: PhantomData,
        }
    }
}

impl<K, A, B, P> KeyedProcessFunction<K, Either<A, B>> for KeyedCo<P, A, B>
where
    A: 'static,
    B: 'static,
    P: KeyedCoProcessFunction<K, A, B>,
{
    type Out = P::Out;
    type State = P::State;

    fn state_ttl(&self) -> Option<crate::state::StateTtlConfig> {
        self.func.state_ttl()
    }

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.func.open(ctx)
    }

    fn process_element(
        &mut self,
        value: Either<A, B>,
        ctx: &mut Context<'_, K, Self::State, Self::Out>,
    ) -> Result<(), UserError> {
        match value {
            Either::Left(a) => self.func.process_element1(a, ctx),
            Either::Right(b) => self.func.process_element2(b, ctx),
        }
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        ctx: &mut Context<'_, K, Self::State, Self::Out>,
    ) -> Result<(), UserError> {
        self.func.on_timer(timestamp, ctx)
    }
}

/// One key function over both inputs: the first input's selector for its records, the
/// second's for its own.
pub(crate) fn either_key<A, B, K, FA, FB>(
    first: FA,
    second: FB,
) -> impl Fn(&Either<A, B>) -> K + Clone + Send + 'static
where
    A: 'static,
    B: 'static,
    K: StateKey,
    FA: Fn(&A) -> K + Clone + Send + 'static,
    FB: Fn(&B) -> K + Clone + Send + 'static,
{
    move |e: &Either<A, B>| match e {
        Either::Left(a) => first(a),
        Either::Right(b) => second(b),
    }
}

/// The operator behind `ConnectedStreams::flat_map` (and `map`): one closure per input, each
/// output carrying its input record's event time.
pub struct CoMapOperator<F1, F2, A, B, U> {
    first: F1,
    second: F2,
    _t: PhantomData<fn(A, B) -> U>,
}

impl<F1: Clone, F2: Clone, A, B, U> Clone for CoMapOperator<F1, F2, A, B, U> {
    fn clone(&self) -> Self {
        CoMapOperator::new(self.first.clone(), self.second.clone())
    }
}

impl<F1, F2, A, B, U> CoMapOperator<F1, F2, A, B, U> {
    /// Applies `first` to the first input's records and `second` to the second's.
    pub fn new(first: F1, second: F2) -> Self {
        CoMapOperator {
            first,
            second,
            _t: PhantomData,
        }
    }
}

impl<A, B, U, I1, I2, F1, F2> Operator<Either<A, B>> for CoMapOperator<F1, F2, A, B, U>
where
    A: Data,
    B: Data,
    U: Data,
    I1: IntoIterator<Item = U>,
    I2: IntoIterator<Item = U>,
    F1: FnMut(A) -> I1 + Clone + Send + 'static,
    F2: FnMut(B) -> I2 + Clone + Send + 'static,
{
    type Out = U;

    fn process_batch(
        &mut self,
        batch: Vec<Either<A, B>>,
        out: &mut Collector<U>,
    ) -> Result<(), UserError> {
        let timestamps = out.take_input_timestamps();
        for (i, record) in batch.into_iter().enumerate() {
            let t = timestamp_at(timestamps.as_deref(), i);
            match record {
                Either::Left(a) => (self.first)(a)
                    .into_iter()
                    .for_each(|u| out.collect_timed(u, t)),
                Either::Right(b) => (self.second)(b)
                    .into_iter()
                    .for_each(|u| out.collect_timed(u, t)),
            }
        }
        Ok(())
    }
}
