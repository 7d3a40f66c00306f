//! What a window computes: [`AggregateFunction`] (incremental, with an accumulator),
//! [`ProcessWindowFunction`] (all of a window's records at once), and the crate's
//! [`WindowContents`], the one shape the window operator drives (reduce, aggregate and process
//! are three implementations of it).

use super::assigner::TimeWindow;
use serde::{Serialize, de::DeserializeOwned};
use sluice_core::{Data, UserError};
use std::fmt::Debug;
use std::marker::PhantomData;

/// An incremental aggregation (Flink's `AggregateFunction`): records are added to an
/// accumulator as they arrive, so a window keeps one accumulator, never its records.
///
/// ```
/// use sluice_runtime::window::AggregateFunction;
///
/// /// The average of the values.
/// #[derive(Clone)]
/// struct Average;
///
/// impl AggregateFunction<f64> for Average {
///     type Acc = (f64, u64);
///     type Out = f64;
///     fn create_accumulator(&self) -> (f64, u64) { (0.0, 0) }
///     fn add(&self, value: f64, acc: &mut (f64, u64)) { acc.0 += value; acc.1 += 1; }
///     fn get_result(&self, acc: &(f64, u64)) -> f64 { acc.0 / acc.1 as f64 }
///     fn merge(&self, a: (f64, u64), b: (f64, u64)) -> (f64, u64) { (a.0 + b.0, a.1 + b.1) }
/// }
///
/// let avg = Average;
/// let mut acc = avg.create_accumulator();
/// avg.add(1.0, &mut acc);
/// avg.add(3.0, &mut acc);
/// assert_eq!(avg.get_result(&acc), 2.0);
/// ```
pub trait AggregateFunction<In>: Clone + Send + 'static {
    /// The accumulator: all a window keeps (stored in checkpoints).
    type Acc: Clone + Send + Debug + Serialize + DeserializeOwned + 'static;
    /// The result.
    type Out: Data;
    /// A new, empty accumulator.
    fn create_accumulator(&self) -> Self::Acc;
    /// Adds one record.
    fn add(&self, value: In, acc: &mut Self::Acc);
    /// The result for what was added.
    fn get_result(&self, acc: &Self::Acc) -> Self::Out;
    /// Merges two accumulators (session windows that grow into each other).
    fn merge(&self, a: Self::Acc, b: Self::Acc) -> Self::Acc;
}

/// A function over all records of a window (Flink's `ProcessWindowFunction`): the window keeps
/// its records until it fires.
pub trait ProcessWindowFunction<K, In>: Clone + Send + 'static {
    /// The output record type.
    type Out: Data;
    /// Called when `window` of `key` fires, with its records in arrival order.
    fn process(
        &mut self,
        key: &K,
        window: &TimeWindow,
        elements: &[In],
        out: &mut Vec<Self::Out>,
    ) -> Result<(), UserError>;
}

/// What a window keeps and emits; the window operator is generic over it.
pub trait WindowContents<K, In>: Clone + Send + 'static {
    /// The state of one window of one key.
    type Acc: Clone + Send + Debug + Serialize + DeserializeOwned + 'static;
    /// The output record type.
    type Out: Data;
    /// A window's first record.
    fn create(&self, value: In) -> Self::Acc;
    /// A further record.
    fn add(&self, acc: &mut Self::Acc, value: In);
    /// Two windows merged (sessions).
    fn merge(&self, a: Self::Acc, b: Self::Acc) -> Self::Acc;
    /// The window fires.
    fn emit(
        &mut self,
        key: &K,
        window: &TimeWindow,
        acc: &Self::Acc,
        out: &mut Vec<Self::Out>,
    ) -> Result<(), UserError>;
}

/// `reduce`: one value per window, combined pairwise.
#[derive(Clone)]
pub struct Reduce<F>(pub(crate) F);

impl<K, In, F> WindowContents<K, In> for Reduce<F>
where
    In: Data + Serialize + DeserializeOwned,
    F: Fn(In, In) -> In + Clone + Send + 'static,
{
    /// Always `Some` between calls; an `Option` so that `add` can move the value into the user's
    /// function without cloning it.
    type Acc = Option<In>;
    type Out = In;
    #[inline]
    fn create(&self, value: In) -> Option<In> {
        Some(value)
    }
    #[inline]
    fn add(&self, acc: &mut Option<In>, value: In) {
        *acc = Some(match acc.take() {
            Some(a) => (self.0)(a, value),
            None => value,
        });
    }
    fn merge(&self, a: Option<In>, b: Option<In>) -> Option<In> {
        match (a, b) {
            (Some(a), Some(b)) => Some((self.0)(a, b)),
            (a, b) => a.or(b),
        }
    }
    fn emit(
        &mut self,
        _: &K,
        _: &TimeWindow,
        acc: &Option<In>,
        out: &mut Vec<In>,
    ) -> Result<(), UserError> {
        out.extend(acc.iter().cloned());
        Ok(())
    }
}

/// `aggregate`: an [`AggregateFunction`]'s accumulator per window, its result (passed through
/// `W` with the key and window) when the window fires.
#[derive(Clone)]
pub struct Aggregate<A, W, R> {
    pub(crate) agg: A,
    pub(crate) with_window: W,
    pub(crate) _r: PhantomData<fn() -> R>,
}

impl<K, In, A, W, R> WindowContents<K, In> for Aggregate<A, W, R>
where
    A: AggregateFunction<In>,
    W: FnMut(&K, &TimeWindow, A::Out) -> R + Clone + Send + 'static,
    R: Data,
{
    type Acc = A::Acc;
    type Out = R;
    #[inline]
    fn create(&self, value: In) -> A::Acc {
        let mut acc = self.agg.create_accumulator();
        self.agg.add(value, &mut acc);
        acc
    }
    #[inline]
    fn add(&self, acc: &mut A::Acc, value: In) {
        self.agg.add(value, acc);
    }
    fn merge(&self, a: A::Acc, b: A::Acc) -> A::Acc {
        self.agg.merge(a, b)
    }
    fn emit(
        &mut self,
        key: &K,
        window: &TimeWindow,
        acc: &A::Acc,
        out: &mut Vec<R>,
    ) -> Result<(), UserError> {
        out.push((self.with_window)(key, window, self.agg.get_result(acc)));
        Ok(())
    }
}

/// `process`: the window keeps its records for a [`ProcessWindowFunction`].
#[derive(Clone)]
pub struct Process<P>(pub(crate) P);

impl<K, In, P> WindowContents<K, In> for Process<P>
where
    In: Data + Serialize + DeserializeOwned,
    P: ProcessWindowFunction<K, In>,
{
    type Acc = Vec<In>;
    type Out = P::Out;
    fn create(&self, value: In) -> Vec<In> {
        vec![value]
    }
    fn add(&self, acc: &mut Vec<In>, value: In) {
        acc.push(value);
    }
    fn merge(&self, mut a: Vec<In>, b: Vec<In>) -> Vec<In> {
        a.extend(b);
        a
    }
    fn emit(
        &mut self,
        key: &K,
        window: &TimeWindow,
        acc: &Vec<In>,
        out: &mut Vec<P::Out>,
    ) -> Result<(), UserError> {
        self.0.process(key, window, acc, out)
    }
}
