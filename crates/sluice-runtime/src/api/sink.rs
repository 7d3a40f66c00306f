//! Sinks: the [`Sink`] trait, the operator that drives one (`SinkOp`), and the built-in
//! collecting, printing and discarding sinks.

use crate::operator::{Collector, Operator, OperatorContext};
use sluice_core::sync::lock;
use sluice_core::{CheckpointId, Data, UserError};
use std::sync::{Arc, Mutex};

/// Where a stream's records end up. One instance runs per subtask (cloned from the one given to
/// [`DataStream::sink_to`](crate::DataStream::sink_to)).
///
/// ```
/// use sluice_runtime::prelude::*;
/// use std::sync::{Arc, atomic::{AtomicU64, Ordering}};
///
/// #[derive(Clone)]
/// struct Counting(Arc<AtomicU64>);
/// impl Sink<u64> for Counting {
///     fn write_batch(&mut self, batch: Vec<u64>) -> Result<(), UserError> {
///         self.0.fetch_add(batch.len() as u64, Ordering::Relaxed);
///         Ok(())
///     }
/// }
///
/// let n = Arc::new(AtomicU64::new(0));
/// let env = StreamEnvironment::new();
/// env.from_iter(0u64..100).sink_to(Counting(n.clone()));
/// env.execute_blocking("count").unwrap();
/// assert_eq!(n.load(Ordering::Relaxed), 100);
/// ```
pub trait Sink<T>: Send + 'static {
    /// Called once before the first batch.
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let _ = ctx;
        Ok(())
    }
    /// Writes a non-empty batch.
    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), UserError>;
    /// The input ended: flush what is buffered.
    fn finish(&mut self) -> Result<(), UserError> {
        Ok(())
    }
    /// Releases resources; called after `finish`, or when this sink's task fails (a task aborted
    /// because another failed is dropped without `close`).
    fn close(&mut self) -> Result<(), UserError> {
        Ok(())
    }
    /// A checkpoint completed everywhere.
    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        let _ = checkpoint;
        Ok(())
    }
}

/// Collects every record in memory; read them with [`CollectHandle::take`] after the job.
#[derive(Clone)]
pub(crate) struct CollectSink<T>(pub(crate) Arc<Mutex<Vec<T>>>);

impl<T: Data> Sink<T> for CollectSink<T> {
    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), UserError> {
        self.0
            .lock()
            .map_err(|_| "the collect sink's buffer was poisoned by an earlier panic")?
            .extend(batch);
        Ok(())
    }
}

/// The records gathered by [`DataStream::collect`](crate::DataStream::collect).
#[derive(Clone, Debug)]
pub struct CollectHandle<T>(pub(crate) Arc<Mutex<Vec<T>>>);

impl<T> CollectHandle<T> {
    /// Takes the records collected so far (in arrival order; across subtasks the order is
    /// arbitrary).
    pub fn take(&self) -> Vec<T> {
        std::mem::take(&mut *lock(&self.0))
    }

    /// How many records are collected.
    pub fn len(&self) -> usize {
        lock(&self.0).len()
    }

    /// Whether nothing was collected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Prints every record, prefixed with the subtask (`3> record`) when parallel.
#[derive(Clone, Default)]
pub(crate) struct PrintSink {
    prefix: String,
}

impl<T: Data> Sink<T> for PrintSink {
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        if ctx.parallelism() > 1 {
            self.prefix = format!("{}> ", ctx.subtask_index() + 1);
        }
        Ok(())
    }
    fn write_batch(&mut self, batch: Vec<T>) -> Result<(), UserError> {
        use std::io::Write;
        let stdout = std::io::stdout();
        let mut lock = stdout.lock();
        for r in batch {
            writeln!(lock, "{}{r:?}", self.prefix)?;
        }
        Ok(())
    }
}

/// Drops everything (Flink's `DiscardingSink`).
#[derive(Clone, Default)]
pub(crate) struct DiscardSink;

impl<T: Data> Sink<T> for DiscardSink {
    fn write_batch(&mut self, _batch: Vec<T>) -> Result<(), UserError> {
        Ok(())
    }
}

/// Adapts a [`Sink`] to the operator interface; it emits nothing.
#[derive(Clone)]
pub(crate) struct SinkOp<S>(pub S);

impl<T: Data, S: Sink<T> + Clone> Operator<T> for SinkOp<S> {
    type Out = ();
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.0.open(ctx)
    }
    #[inline]
    fn process_batch(&mut self, batch: Vec<T>, _out: &mut Collector<()>) -> Result<(), UserError> {
        self.0.write_batch(batch)
    }
    fn process_watermark(
        &mut self,
        _w: sluice_core::Watermark,
        _out: &mut Collector<()>,
    ) -> Result<(), UserError> {
        Ok(())
    }
    fn end_input(&mut self, _out: &mut Collector<()>) -> Result<(), UserError> {
        self.0.finish()
    }
    fn close(&mut self) -> Result<(), UserError> {
        self.0.close()
    }
    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        self.0.notify_checkpoint_complete(checkpoint)
    }
}
