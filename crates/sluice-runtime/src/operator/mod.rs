//! The [`Operator`] trait: the one interface every transformation implements, built-in or user.
//!
//! An operator runs as one instance per subtask. The task loop calls it with whole batches of
//! records, with watermarks, at end of input, and (for operators that have asynchronous work in
//! flight, like the async I/O operator) polls it for completed work without ever blocking. The
//! state and coordinator hooks carry checkpoints and operator events.
//!
//! A worked example, a per-key running count written as a user operator:
//!
//! ```
//! use sluice_runtime::prelude::*;
//! use std::collections::HashMap;
//!
//! #[derive(Clone, Default)]
//! struct CountPerKey(HashMap<u64, u64>);
//!
//! impl Operator<u64> for CountPerKey {
//!     type Out = (u64, u64);
//!     fn process_batch(&mut self, batch: Vec<u64>, out: &mut Collector<(u64, u64)>) -> Result<(), UserError> {
//!         for key in batch {
//!             let n = self.0.entry(key).or_insert(0);
//!             *n += 1;
//!             out.collect((key, *n));
//!         }
//!         Ok(())
//!     }
//! }
//!
//! let env = StreamEnvironment::new();
//! let out = env
//!     .from_iter(vec![1u64, 2, 1, 1])
//!     .key_by(|k| *k)
//!     .process(CountPerKey::default())
//!     .collect();
//! env.execute_blocking("count").unwrap();
//! let mut counts = out.take();
//! counts.sort();
//! assert_eq!(counts, vec![(1, 1), (1, 2), (1, 3), (2, 1)]);
//! ```

mod blocking;
mod builtin;
mod collector;
mod context;
mod source_head;
pub(crate) mod to_coordinator;

pub use blocking::blocking;
pub(crate) use builtin::{FilterOp, FlatMapOp, IdentityOp, MapOp};
pub use collector::Collector;
pub(crate) use context::ContextParts;
pub use context::OperatorContext;
pub use source_head::{SourceHead, SourceHeadPoll};

use crate::state::OperatorState;
use sluice_core::{CheckpointId, Data, OperatorEvent, UserError, Watermark};
use std::task::{Context, Poll};

/// One transformation of a stream, run as one instance per parallel subtask.
///
/// Only [`process_batch`](Operator::process_batch) is required. Every other method has a default
/// that suits a stateless, synchronous operator. The runtime calls the methods of one instance
/// from one task only, never concurrently, in this order: `initialize_state` (when restoring),
/// `open`, then any number of `process_batch` / `process_watermark` / `handle_operator_event` /
/// `poll_pending` / `snapshot_state` calls, then `end_input` (bounded input only, followed by
/// `poll_pending` until [`has_pending`](Operator::has_pending) is false), then `close`.
///
/// The instance handed to the DataStream API is cloned once per subtask before the job starts.
pub trait Operator<In: Data>: Send + 'static {
    /// The type of the records this operator emits.
    type Out: Data;

    /// Called once before any record, with the subtask's context. Keep a clone of `ctx` if later
    /// calls need it.
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let _ = ctx;
        Ok(())
    }

    /// Checks the operator's configuration against the job's at submit time (`checkpoints` is
    /// `None` when checkpointing is off): an error refuses the job before it runs, naming the
    /// operator. The default accepts everything.
    fn validate(
        &self,
        checkpoints: Option<&crate::checkpoint::CheckpointSettings>,
    ) -> Result<(), UserError> {
        let _ = checkpoints;
        Ok(())
    }

    /// Processes a non-empty batch of records, emitting results into `out`.
    ///
    /// When the records carry event times (a timestamp assigner ran upstream), they are in
    /// [`Collector::input_timestamps`], one per record. An operator that should keep them on its
    /// output passes them on: [`Collector::forward_batch`] for a pass-through,
    /// [`Collector::collect_at`] per record; what is emitted with `collect` or `emit_batch`
    /// carries no event time.
    fn process_batch(
        &mut self,
        batch: Vec<In>,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError>;

    /// Event time advanced to `watermark`. The default forwards it.
    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        out.emit_watermark(watermark);
        Ok(())
    }

    /// All input has been seen (bounded streams only). Pending work may still complete afterwards:
    /// the runtime keeps polling [`poll_pending`](Operator::poll_pending) until
    /// [`has_pending`](Operator::has_pending) returns false, and only then ends the operator's
    /// output.
    fn end_input(&mut self, out: &mut Collector<Self::Out>) -> Result<(), UserError> {
        let _ = out;
        Ok(())
    }

    /// Called once when the operator's task ends: after its output ended, or when this task
    /// itself failed. When another task fails, the job master aborts this one and the operator
    /// is dropped without `close` (as a cancelled Flink task is disposed): release resources in
    /// `Drop` if they must be released in every case.
    fn close(&mut self) -> Result<(), UserError> {
        Ok(())
    }

    /// Drives asynchronous work the operator has in flight and emits what completed.
    ///
    /// Return `Poll::Ready(Ok(()))` when something was emitted or changed (the task loop calls again
    /// after forwarding the output) and `Poll::Pending` when nothing is ready, after arranging for
    /// `cx`'s waker to be woken when something will be. The default has no pending work.
    fn poll_pending(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Collector<Self::Out>,
    ) -> Poll<Result<(), UserError>> {
        let _ = (cx, out);
        Poll::Pending
    }

    /// Whether asynchronous work is still in flight. End of input waits until this is false.
    fn has_pending(&self) -> bool {
        false
    }

    /// Whether the operator cannot take more input right now (for example, its in-flight capacity
    /// is used up). While true, the task stops reading its inputs: that is backpressure. It keeps
    /// polling [`poll_pending`](Operator::poll_pending), checkpoint barriers and operator events.
    fn is_input_blocked(&self) -> bool {
        false
    }

    /// Snapshots the operator's state for `checkpoint`. Called at the checkpoint barrier, between
    /// two batches; results emitted into `out` precede the barrier downstream.
    fn snapshot_state(
        &mut self,
        checkpoint: CheckpointId,
        out: &mut Collector<Self::Out>,
    ) -> Result<OperatorState, UserError> {
        let _ = (checkpoint, out);
        Ok(OperatorState::default())
    }

    /// Restores state taken by [`snapshot_state`](Operator::snapshot_state), before `open`. When the
    /// parallelism changed, `state` holds the share of the old subtasks' entries given to this one.
    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        let _ = state;
        Ok(())
    }

    /// Checkpoint `checkpoint` completed everywhere: side effects prepared for it may be committed.
    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        let _ = checkpoint;
        Ok(())
    }

    /// Checkpoint `checkpoint` was aborted.
    fn notify_checkpoint_aborted(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        let _ = checkpoint;
        Ok(())
    }

    /// An event from this operator's coordinator. It arrives through the task's mailbox, between
    /// two batches, never concurrently with a record.
    fn handle_operator_event(
        &mut self,
        event: OperatorEvent,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        let _ = out;
        Err(format!(
            "operator received an event ({} bytes) but does not handle operator events",
            event.payload().len()
        )
        .into())
    }
}
