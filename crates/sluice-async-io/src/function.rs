//! The user side of async I/O: the [`AsyncFunction`] trait, its closure form [`async_fn`], and the
//! error the default timeout handler fails with.

use sluice_core::{Data, UserError};
use sluice_runtime::OperatorContext;
use std::future::Future;

/// An asynchronous call made for every input record, for example a lookup in a database or a
/// request to a service.
///
/// One instance runs per subtask (cloned from the one given to the builder before the job
/// starts). [`invoke`](AsyncFunction::invoke) is called from the subtask's task, once per record
/// (and once more per retry), and returns a future; the operator keeps up to `capacity` of these
/// futures in flight and drives them itself, so `invoke` should return quickly and do its waiting
/// inside the future.
///
/// The future must not borrow `self` or the input (it is `'static`): clone what it needs (a
/// client handle, a key) into it. Because the trait declares the future as capturing only `Self`
/// and `In`, an implementation writes `+ use<>` (or `+ use<T>` for generic parameters it keeps)
/// after its return type, as in the example below.
///
/// Every completion produces any number of output records ([`Results`](AsyncFunction::Results),
/// for example `Option<Out>` or `Vec<Out>`). An error fails the job, unless a retry strategy
/// retries it; so does a panic. The error message names the operator, the subtask and the input.
///
/// ```
/// use sluice_async_io::{AsyncDataStream, AsyncFunction};
/// use sluice_runtime::prelude::*;
/// use std::collections::HashMap;
/// use std::future::Future;
/// use std::sync::Arc;
/// use std::time::Duration;
///
/// /// Looks up a user's name; a missing user yields nothing.
/// #[derive(Clone, Default)]
/// struct NameLookup {
///     names: Arc<HashMap<u64, String>>,
/// }
///
/// impl AsyncFunction<u64> for NameLookup {
///     type Out = (u64, String);
///     type Results = Option<(u64, String)>;
///
///     fn open(&mut self, _ctx: &OperatorContext) -> Result<(), UserError> {
///         // Create clients here; this runs once per subtask.
///         self.names = Arc::new(HashMap::from([(1, "ada".to_string()), (2, "bob".to_string())]));
///         Ok(())
///     }
///
///     fn invoke(
///         &self,
///         id: u64,
///     ) -> impl Future<Output = Result<Self::Results, UserError>> + Send + use<> {
///         let names = self.names.clone();
///         async move { Ok(names.get(&id).map(|n| (id, n.clone()))) }
///     }
///
///     fn timeout(&self, id: &u64) -> Result<Self::Results, UserError> {
///         Ok(Some((*id, "unknown".to_string()))) // a fallback instead of failing
///     }
/// }
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(1);
/// let ids = env.from_iter(vec![1u64, 3, 2]);
/// let named = AsyncDataStream::ordered_wait(&ids, NameLookup::default(), Duration::from_secs(5), 10)
///     .unwrap()
///     .collect();
/// env.execute_blocking("names").unwrap();
/// assert_eq!(named.take(), vec![(1, "ada".to_string()), (2, "bob".to_string())]);
/// ```
pub trait AsyncFunction<In>: Clone + Send + 'static {
    /// The type of the records this function produces.
    type Out: Data;
    /// What one call produces: any collection of output records (`Option<Out>`, `Vec<Out>`, ...).
    type Results: IntoIterator<Item = Self::Out> + Send + 'static;

    /// Called once per subtask before the first record: create clients and connections here.
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let _ = ctx;
        Ok(())
    }

    /// Starts the asynchronous call for `input`. Called once per attempt.
    fn invoke(
        &self,
        input: In,
    ) -> impl Future<Output = Result<Self::Results, UserError>> + Send + use<Self, In>;

    /// The record's timeout expired (across all its attempts) before a result was accepted.
    ///
    /// Called exactly once for such a record, after its in-flight call was dropped. The default
    /// fails the job with [`AsyncTimeoutError`]; override it to emit a fallback (or nothing, with
    /// an empty result).
    fn timeout(&self, input: &In) -> Result<Self::Results, UserError> {
        let _ = input;
        Err(Box::new(AsyncTimeoutError))
    }

    /// Called once when the subtask ends (after every request completed) or fails.
    fn close(&mut self) -> Result<(), UserError> {
        Ok(())
    }
}

/// The error of the default [`AsyncFunction::timeout`]: the call did not complete in time.
///
/// ```
/// use sluice_async_io::AsyncTimeoutError;
/// assert_eq!(AsyncTimeoutError.to_string(), "async function call timed out");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("async function call timed out")]
pub struct AsyncTimeoutError;

/// An [`AsyncFunction`] made of a closure returning a future; see [`async_fn`].
#[derive(Clone)]
pub struct AsyncFn<C, T = FailOnTimeout> {
    call: C,
    on_timeout: T,
}

/// Makes an [`AsyncFunction`] of a closure that returns a future of a result collection.
///
/// The closure is cloned per subtask; the future it returns must own what it uses (`async move`).
/// A timeout fails the job unless [`on_timeout`](AsyncFn::on_timeout) gives a fallback.
///
/// ```
/// use sluice_async_io::{AsyncDataStream, async_fn};
/// use sluice_runtime::prelude::*;
/// use std::time::Duration;
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(1);
/// let doubled = AsyncDataStream::unordered_wait(
///     &env.from_iter(0u64..100),
///     async_fn(|x: u64| async move { Ok(Some(x * 2)) }).on_timeout(|_x: &u64| Ok(None)),
///     Duration::from_secs(1),
///     16,
/// )
/// .unwrap()
/// .collect();
/// env.execute_blocking("double").unwrap();
/// let mut v = doubled.take();
/// v.sort();
/// assert_eq!(v, (0u64..100).map(|x| x * 2).collect::<Vec<_>>());
/// ```
pub fn async_fn<C>(call: C) -> AsyncFn<C, FailOnTimeout> {
    AsyncFn {
        call,
        on_timeout: FailOnTimeout,
    }
}

impl<C, T> AsyncFn<C, T> {
    /// Uses `handler` when a record times out: its result is emitted instead of failing the job.
    pub fn on_timeout<H>(self, handler: H) -> AsyncFn<C, H> {
        AsyncFn {
            call: self.call,
            on_timeout: handler,
        }
    }
}

/// The timeout handler of [`async_fn`] by default: fails with [`AsyncTimeoutError`].
#[derive(Clone, Copy, Debug, Default)]
pub struct FailOnTimeout;

/// What [`AsyncFn`] does when a record times out; implemented by [`FailOnTimeout`] and by
/// closures `Fn(&In) -> Result<R, UserError>`.
pub trait TimeoutHandler<In, R>: Clone + Send + 'static {
    /// The results for `input`, whose call timed out, or an error that fails the job.
    fn on_timeout(&self, input: &In) -> Result<R, UserError>;
}

impl<In, R> TimeoutHandler<In, R> for FailOnTimeout {
    fn on_timeout(&self, _input: &In) -> Result<R, UserError> {
        Err(Box::new(AsyncTimeoutError))
    }
}

impl<In, R, G> TimeoutHandler<In, R> for G
where
    G: Fn(&In) -> Result<R, UserError> + Clone + Send + 'static,
{
    fn on_timeout(&self, input: &In) -> Result<R, UserError> {
        self(input)
    }
}

impl<In, C, Fut, R, T> AsyncFunction<In> for AsyncFn<C, T>
where
    C: Fn(In) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<R, UserError>> + Send + 'static,
    R: IntoIterator + Send + 'static,
    R::Item: Data,
    T: TimeoutHandler<In, R>,
{
    type Out = R::Item;
    type Results = R;

    fn invoke(
        &self,
        input: In,
    ) -> impl Future<Output = Result<R, UserError>> + Send + use<In, C, Fut, R, T> {
        (self.call)(input)
    }

    fn timeout(&self, input: &In) -> Result<R, UserError> {
        self.on_timeout.on_timeout(input)
    }
}
