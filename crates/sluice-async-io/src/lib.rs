//! Async I/O for sluice: call databases and services from a stream with many requests in flight,
//! bounded, ordered as you choose, with timeouts, retries and checkpointed in-flight requests.
//!
//! Where to find things:
//! - [`AsyncFunction`] (and its closure form [`async_fn`]): the call made per record;
//! - [`AsyncDataStream`] and the [`AsyncWait`] builder: adding the operator to a job, ordered,
//!   unordered or key-ordered;
//! - [`AsyncBatchFunction`] and [`AsyncWait::batched`] (or
//!   [`AsyncDataStream::ordered_wait_batched`]): one call per batch of records, for lookups that
//!   answer many keys per round trip; batching is only a different `Invoker` inside the same
//!   operator (`operator/calls.rs`), so everything below holds per record for it too;
//! - [`AsyncRetryStrategy`]: fixed-delay and exponential-backoff retries with predicates;
//! - [`AsyncMetrics`]: in-flight gauge, latency histogram, timeouts, retries and failures per
//!   subtask, read through the handle [`AsyncWait::metrics`] returns;
//! - internally, pure cores tested on their own: the completion queues (ordered ring, unordered
//!   watermark segments, per-key chains), the deadline set, the retry decision, and the future
//!   slab the operator drives its requests in.
//!
//! # Semantics
//! - **Order.** Ordered: output order is input order. Unordered: results leave as they complete,
//!   but a watermark leaves only after every record before it, and no record after it leaves
//!   before it. Key-ordered: like unordered, and results of the same key leave in input order.
//! - **Capacity and backpressure.** At most `capacity` records are held per subtask (in flight,
//!   waiting for a retry, or completed but waiting for their turn). When all are taken, the
//!   operator stops taking input; it keeps driving its requests and emitting results.
//! - **Timeouts** cover all attempts of a record. When one expires, the running call is dropped
//!   (or the pending retry cancelled) and [`AsyncFunction::timeout`] is called exactly once: by
//!   default it fails the job, or it returns a fallback (possibly empty).
//! - **Retries** follow Flink's attempt counting (`max_attempts = 3` allows 3 retries); a retry
//!   never races the timeout; at end of input delayed retries fire at once. See [`retry`
//!   semantics](AsyncRetryStrategy) for the two deliberate differences from Flink.
//! - **Failures.** An error (not retried) or a panic in `invoke`, the future, the timeout handler
//!   or the key function fails the job; the message names the operator, the subtask, the input
//!   (its `Debug` form) and the attempt.
//! - **End of input** drains every held record before the operator finishes.
//! - **Checkpoints.** A snapshot stores every held input (and the watermarks between them) as
//!   one state entry each, in input order, with its attempt count and the part of its timeout
//!   already used; a restore calls them again, in that order, before any new input, with the
//!   remaining budget. Entries can be dealt to any number of subtasks. Inputs therefore need
//!   `Serialize` and `Deserialize`.
//!
//! # Cost
//! The operator runs in the task loop, with no thread of its own. Per record it clones the input
//! (kept for retries, timeouts, errors and snapshots; wrap large inputs in an `Arc`), calls
//! `invoke`, and polls the future in a reused slot; a future ready at once whose result may leave
//! at once is emitted directly. The clock is read once per batch, timeouts live in one deadline
//! set armed on a single timer, and nothing is allocated per record besides what the user's
//! future allocates itself. The future's type stays generic: it is never boxed.
//!
//! ```
//! use sluice_async_io::{AsyncDataStream, async_fn};
//! use sluice_runtime::prelude::*;
//! use std::time::Duration;
//!
//! let env = StreamEnvironment::new();
//! env.set_parallelism(1);
//! let clicks = env.from_iter([(1u64, "/home"), (2, "/cart"), (1, "/pay")].map(|(u, p)| (u, p.to_string())));
//! let enriched = AsyncDataStream::ordered_wait(
//!     &clicks,
//!     async_fn(|(user, page): (u64, String)| async move {
//!         // Stand-in for a profile lookup over the network.
//!         tokio::time::sleep(Duration::from_millis(1)).await;
//!         Ok(Some(format!("{page} by user {user}")))
//!     }),
//!     Duration::from_secs(5),
//!     100,
//! )
//! .unwrap()
//! .collect();
//! env.execute_blocking("enrich").unwrap();
//! assert_eq!(
//!     enriched.take(),
//!     vec!["/home by user 1", "/cart by user 2", "/pay by user 1"]
//! );
//! ```

mod api;
mod batch;
mod config;
mod error;
mod function;
mod metrics;
mod operator;
mod queue;
mod retry;
mod slab;
mod timers;

pub use api::{AsyncDataStream, AsyncWait, Batching, Unbatched};
pub use batch::{AsyncBatchError, AsyncBatchFunction, BatchRetryScope, Batched};
pub use config::{
    AsyncConfigError, DEFAULT_BATCH_DELAY, DEFAULT_CAPACITY, MAX_CAPACITY, MIN_TIMEOUT,
};
pub use error::AsyncCallError;
pub use function::{
    AsyncFn, AsyncFunction, AsyncTimeoutError, FailOnTimeout, TimeoutHandler, async_fn,
};
pub use metrics::{AsyncMetrics, AsyncMetricsSnapshot, LATENCY_BOUNDS_SECONDS, LatencyHistogram};
pub use retry::{AsyncRetryStrategy, RetryStrategyBuilder};
