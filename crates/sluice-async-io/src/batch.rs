//! The user side of batched async I/O: the [`AsyncBatchFunction`] trait (a batch of inputs in,
//! one result per input out), the [`Batched`] adapter that lets the async wait operator drive it,
//! [`BatchRetryScope`], and [`AsyncBatchError`].
//!
//! Most lookups answer many keys in one round trip (`MGET`, `WHERE id = ANY($1)`). With
//! [`AsyncWait::batched`](crate::AsyncWait::batched) the operator groups the records it admits
//! into batches of at most `max_batch_size`, sends a batch when it is full or when its oldest
//! record has waited `max_batch_delay`, and hands every record its own result; everything else
//! (capacity, order, watermarks, timeouts, retries, checkpoints) is per record, as without
//! batching. For example, with `max_batch_size = 3`, a 10 ms delay and a capacity of 8:
//!
//! ```text
//! records a b c d arrive at t = 0   -> [a b c] is sent at once (full), d waits
//! record  e arrives at t = 4 ms     -> d e wait (d is the oldest, since t = 0)
//! t = 10 ms                         -> [d e] is sent (d waited 10 ms)
//! [a b c] answers (x, fails, z)     -> a and c complete; b alone is retried (default scope),
//!                                      in the next batch, as attempt 2
//! ```

use crate::function::{AsyncFunction, AsyncTimeoutError};
use sluice_core::{Data, UserError};
use sluice_runtime::OperatorContext;
use std::future::Future;
use std::sync::Arc;

/// An asynchronous call made for a batch of input records: one request answers them all.
///
/// [`invoke_batch`](AsyncBatchFunction::invoke_batch) gets the inputs of one batch, in the order
/// they were admitted, and returns a future of one [`Results`](AsyncBatchFunction::Results) per
/// input, in the same order, or an error for the whole batch. One instance runs per subtask
/// (cloned before the job starts); as for [`AsyncFunction`], the future must own what it uses.
///
/// ```
/// use sluice_async_io::{AsyncBatchFunction, AsyncDataStream};
/// use sluice_runtime::prelude::*;
/// use std::future::Future;
/// use std::time::Duration;
///
/// /// Squares a whole batch in one "round trip".
/// #[derive(Clone)]
/// struct Squares;
///
/// impl AsyncBatchFunction<u64> for Squares {
///     type Out = u64;
///     type Results = Option<u64>;
///
///     fn invoke_batch(
///         &self,
///         inputs: Vec<u64>,
///     ) -> impl Future<Output = Result<Vec<Option<u64>>, UserError>> + Send + use<> {
///         async move { Ok(inputs.into_iter().map(|x| Some(x * x)).collect()) }
///     }
/// }
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(1);
/// let squares = AsyncDataStream::ordered_wait_batched(
///     &env.from_iter(0u64..1000),
///     Squares,
///     Duration::from_secs(5), // timeout per record
///     200,                    // capacity: records in flight
///     100,                    // max batch size
///     Duration::from_millis(5), // max batch delay
/// )
/// .unwrap()
/// .collect();
/// env.execute_blocking("squares").unwrap();
/// assert_eq!(squares.take(), (0u64..1000).map(|x| x * x).collect::<Vec<_>>());
/// ```
pub trait AsyncBatchFunction<In>: Clone + Send + 'static {
    /// The type of the records this function produces.
    type Out: Data;
    /// What one input produces: any collection of output records (`Option<Out>`, `Vec<Out>`).
    type Results: IntoIterator<Item = Self::Out> + Send + 'static;

    /// Called once per subtask before the first record: create clients and connections here.
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let _ = ctx;
        Ok(())
    }

    /// Starts the call for one batch. The future yields exactly one result per input, in input
    /// order (any other count fails the batch with [`AsyncBatchError::WrongCount`]), or one
    /// error for the whole batch, which every record of the batch then sees.
    fn invoke_batch(
        &self,
        inputs: Vec<In>,
    ) -> impl Future<Output = Result<Vec<Self::Results>, UserError>> + Send + use<Self, In>;

    /// The record's timeout expired (across all its attempts) before its result was accepted.
    /// Called exactly once for such a record; the default fails the job with
    /// [`AsyncTimeoutError`].
    fn timeout(&self, input: &In) -> Result<Self::Results, UserError> {
        let _ = input;
        Err(Box::new(AsyncTimeoutError))
    }

    /// Called once when the subtask ends (after every request completed) or fails.
    fn close(&mut self) -> Result<(), UserError> {
        Ok(())
    }
}

/// Which records are retried when some records of a batch are to be retried (by the retry
/// strategy's predicates).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BatchRetryScope {
    /// Only the records whose own outcome matched a predicate (the default). An error for the
    /// whole batch is every record's outcome, so all of them are retried then.
    #[default]
    FailedElements,
    /// When any record of a batch is retried, every record of it is retried too (those whose
    /// attempts allow one more), its results discarded: for services whose answers are only
    /// valid as a whole.
    WholeBatch,
}

/// Errors the batching itself gives to the records of a batch.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AsyncBatchError {
    /// The batch call failed; every record of the batch sees this error, which wraps the
    /// function's (its message is the function's message).
    #[error("{0}")]
    Batch(Arc<dyn std::error::Error + Send + Sync>),
    /// The batch function returned a different number of results than it was given inputs.
    #[error("the batch function returned {got} results for {expected} inputs")]
    WrongCount {
        /// The number of inputs.
        expected: usize,
        /// The number of results.
        got: usize,
    },
    /// Another record of the same batch is retried and the scope is
    /// [`BatchRetryScope::WholeBatch`], so this record is retried with it.
    #[error("retried with the rest of its batch")]
    RetriedWithBatch,
}

impl AsyncBatchError {
    /// Whether `error` (as a retry predicate sees it) is the error of a whole failed batch.
    ///
    /// ```
    /// use sluice_async_io::AsyncBatchError;
    /// use std::sync::Arc;
    /// let e: sluice_core::UserError = Box::new(AsyncBatchError::Batch(Arc::new(
    ///     std::io::Error::other("connection reset"),
    /// )));
    /// assert!(AsyncBatchError::is_batch_failure(&e));
    /// assert_eq!(e.to_string(), "connection reset");
    /// ```
    pub fn is_batch_failure(error: &UserError) -> bool {
        matches!(
            error.downcast_ref::<AsyncBatchError>(),
            Some(AsyncBatchError::Batch(_))
        )
    }
}

/// Adapts an [`AsyncBatchFunction`] to the operator: opening, closing and timeouts go straight to
/// it. The batched operator never calls [`AsyncFunction::invoke`] on it; if called directly,
/// `invoke` sends a batch of one.
#[derive(Clone)]
pub struct Batched<B>(pub(crate) B);

impl<B> Batched<B> {
    /// Wraps `func` so that it can also run one record per call (`AsyncWait::new(Batched::new(f))`
    /// sends batches of one, for comparisons); [`AsyncWait::batched`](crate::AsyncWait::batched)
    /// wraps it itself.
    pub fn new(func: B) -> Self {
        Batched(func)
    }

    /// The batch function.
    pub fn inner(&self) -> &B {
        &self.0
    }
}

impl<In: Send + 'static, B: AsyncBatchFunction<In>> AsyncFunction<In> for Batched<B> {
    type Out = B::Out;
    type Results = B::Results;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.0.open(ctx)
    }

    fn invoke(
        &self,
        input: In,
    ) -> impl Future<Output = Result<B::Results, UserError>> + Send + use<In, B> {
        let call = self.0.invoke_batch(vec![input]);
        async move {
            let mut results = call.await?;
            match (results.pop(), results.len()) {
                (Some(r), 0) => Ok(r),
                (last, rest) => Err(Box::new(AsyncBatchError::WrongCount {
                    expected: 1,
                    got: rest + usize::from(last.is_some()),
                }) as UserError),
            }
        }
    }

    fn timeout(&self, input: &In) -> Result<B::Results, UserError> {
        self.0.timeout(input)
    }

    fn close(&mut self) -> Result<(), UserError> {
        self.0.close()
    }
}
