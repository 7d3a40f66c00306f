//! Helpers shared by the integration tests: an operator that records what passes through it,
//! pseudo-random latencies, and a function that counts its concurrent calls.

#![allow(dead_code)]

use sluice_async_io::AsyncFunction;
use sluice_runtime::prelude::*;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One element seen by a [`Recorder`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen<T> {
    Record(T),
    Watermark(i64),
}

/// Records every record and watermark passing through, in order, and forwards them.
#[derive(Clone)]
pub struct Recorder<T>(pub Arc<Mutex<Vec<Seen<T>>>>);

impl<T> Recorder<T> {
    pub fn new() -> Self {
        Recorder(Arc::new(Mutex::new(Vec::new())))
    }

    pub fn seen(&self) -> Vec<Seen<T>>
    where
        T: Clone,
    {
        self.0.lock().unwrap().clone()
    }

    pub fn records(&self) -> Vec<T>
    where
        T: Clone,
    {
        self.seen()
            .into_iter()
            .filter_map(|s| match s {
                Seen::Record(r) => Some(r),
                Seen::Watermark(_) => None,
            })
            .collect()
    }
}

impl<T: Data> Operator<T> for Recorder<T> {
    type Out = T;
    fn process_batch(&mut self, batch: Vec<T>, out: &mut Collector<T>) -> Result<(), UserError> {
        self.0
            .lock()
            .unwrap()
            .extend(batch.iter().cloned().map(Seen::Record));
        out.emit_batch(batch);
        Ok(())
    }
    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut Collector<T>,
    ) -> Result<(), UserError> {
        self.0
            .lock()
            .unwrap()
            .push(Seen::Watermark(watermark.timestamp()));
        out.emit_watermark(watermark);
        Ok(())
    }
}

/// A pseudo-random latency in `0..max_ms` milliseconds for `x`, varied by `seed`.
pub fn latency(x: u64, seed: u64, max_ms: u64) -> Duration {
    let mut h = x
        .wrapping_add(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 31;
    h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^= h >> 29;
    Duration::from_millis(h % max_ms.max(1))
}

/// Counts concurrent calls (per group of inputs) and remembers the highest count seen.
#[derive(Clone, Default)]
pub struct Concurrency {
    current: Arc<[AtomicUsize; 4]>,
    max: Arc<[AtomicUsize; 4]>,
}

/// Decrements the count when the call ends or is dropped.
pub struct Running {
    c: Concurrency,
    group: usize,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.c.current[self.group].fetch_sub(1, Ordering::SeqCst);
    }
}

impl Concurrency {
    pub fn enter(&self, group: usize) -> Running {
        let now = self.current[group].fetch_add(1, Ordering::SeqCst) + 1;
        self.max[group].fetch_max(now, Ordering::SeqCst);
        Running {
            c: self.clone(),
            group,
        }
    }

    pub fn max(&self, group: usize) -> usize {
        self.max[group].load(Ordering::SeqCst)
    }
}

/// A lookup that waits a pseudo-random latency and counts its concurrent calls per subtask
/// (inputs below `split` are group 0, the others group 1).
#[derive(Clone)]
pub struct SlowLookup {
    pub concurrency: Concurrency,
    pub split: u64,
    pub max_ms: u64,
}

impl AsyncFunction<u64> for SlowLookup {
    type Out = u64;
    type Results = Option<u64>;

    fn invoke(
        &self,
        x: u64,
    ) -> impl Future<Output = Result<Option<u64>, UserError>> + Send + use<> {
        let running = self.concurrency.enter(usize::from(x >= self.split));
        let wait = latency(x, 7, self.max_ms);
        async move {
            tokio::time::sleep(wait).await;
            drop(running);
            Ok(Some(x))
        }
    }
}

/// A paused-clock runtime for property tests that build their own.
pub fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

/// How a test's async wait makes its calls: the tests of the per-record operator run for the
/// batched one too.
#[derive(Clone, Copy, Debug)]
pub enum Calls {
    /// One call per record ([`sluice_async_io::AsyncWait::new`]).
    PerRecord,
    /// Batches ([`sluice_async_io::AsyncWait::batched`]) of a [`PerElement`] function.
    Batched {
        /// The largest batch.
        size: usize,
        /// The longest a batch waits for more records.
        delay: Duration,
    },
}

/// One call per record, and batches of one record sent at once: for tests that time single
/// calls (a batch answers when its slowest record does).
pub const CALLS: [Calls; 2] = [
    Calls::PerRecord,
    Calls::Batched {
        size: 1,
        delay: Duration::ZERO,
    },
];

/// A way of making calls picked by a property test: 0 is per record, otherwise batches of up to
/// `size` records waiting up to `delay_ms`.
pub fn calls_of(size: usize, delay_ms: u64) -> Calls {
    if size == 0 {
        Calls::PerRecord
    } else {
        Calls::Batched {
            size,
            delay: Duration::from_millis(delay_ms),
        }
    }
}

/// Any [`AsyncFunction`] as a batch function: the calls of a batch run together and the batch
/// answers when all did, or fails with the first error.
#[derive(Clone)]
pub struct PerElement<F>(pub F);

impl<In: Send + 'static, F: AsyncFunction<In>> sluice_async_io::AsyncBatchFunction<In>
    for PerElement<F>
{
    type Out = F::Out;
    type Results = F::Results;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.0.open(ctx)
    }

    fn invoke_batch(
        &self,
        inputs: Vec<In>,
    ) -> impl Future<Output = Result<Vec<F::Results>, UserError>> + Send + use<In, F> {
        let calls: Vec<_> = inputs.into_iter().map(|x| self.0.invoke(x)).collect();
        futures::future::try_join_all(calls)
    }

    fn timeout(&self, input: &In) -> Result<F::Results, UserError> {
        self.0.timeout(input)
    }

    fn close(&mut self) -> Result<(), UserError> {
        self.0.close()
    }
}

/// Applies an async wait of `$func` to `$stream`, making calls as `$calls` says, with the
/// settings `$configure` applies to the builder `$w`. Evaluates to `(metrics, Result<stream>)`.
#[macro_export]
macro_rules! async_wait {
    ($calls:expr, $func:expr, $stream:expr, |$w:ident| $configure:expr) => {{
        match $calls {
            $crate::common::Calls::PerRecord => {
                let $w = sluice_async_io::AsyncWait::new($func);
                let w = $configure;
                (w.metrics(), w.apply($stream))
            }
            $crate::common::Calls::Batched { size, delay } => {
                let $w = sluice_async_io::AsyncWait::batched($crate::common::PerElement($func))
                    .max_batch_size(size)
                    .max_batch_delay(delay);
                let w = $configure;
                (w.metrics(), w.apply($stream))
            }
        }
    }};
}
