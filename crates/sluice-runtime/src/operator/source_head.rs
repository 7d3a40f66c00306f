//! [`SourceHead`]: the seam through which a source that talks to an operator coordinator (the
//! FLIP-27 split source of `sluice-source`) runs at the head of a task.
//!
//! A plain source only yields batches. A source head also receives the events its coordinator
//! sends (split assignments), yields watermarks and idleness of its own, and decides itself when
//! its input has ended. The runtime drives it like any source input: polled between two mailbox
//! messages, snapshotted between two batches at a checkpoint, its events delivered through the
//! task's mailbox, never concurrently with a poll. A head is added with
//! [`StreamEnvironment::add_source_head`](crate::StreamEnvironment::add_source_head); its state
//! is a list of entries, dealt out evenly when the job restores at another parallelism.

use crate::state::OperatorState;
use sluice_core::{Batch, CheckpointId, OperatorEvent, UserError, Watermark, WatermarkStatus};
use std::task::{Context, Poll};

/// What a [`SourceHead`] yields when polled.
#[derive(Debug)]
pub enum SourceHeadPoll<T> {
    /// A non-empty batch of records, with their event times when the head assigns them (a
    /// source read with a watermark strategy does, as Flink's source operator does).
    Records(Batch<T>),
    /// Event time advanced (the head owns its subtask's watermark).
    Watermark(Watermark),
    /// The subtask became idle or active again.
    Status(WatermarkStatus),
    /// The input has ended: nothing more will be yielded. The runtime then emits the maximum
    /// watermark and finishes the task's chain.
    End,
}

/// A source at the head of a task that receives operator events (see the module docs).
///
/// The runtime calls one instance from one task only: `open` once before the first poll, then
/// any number of `poll_next`, `handle_operator_event` and `snapshot_state` calls. None of them
/// may block: a head with nothing ready returns `Poll::Pending` from `poll_next` after arranging
/// for `cx`'s waker to be woken (an operator event always leads to another poll).
///
/// ```
/// use sluice_runtime::{OperatorState, SourceHead, SourceHeadPoll};
/// use sluice_core::{CheckpointId, OperatorEvent, UserError};
/// use std::task::{Context, Poll};
///
/// /// Yields the numbers its coordinator sends, one event each; ends at the number 0.
/// struct Relay(Vec<u64>, bool);
///
/// impl SourceHead<u64> for Relay {
///     fn poll_next(&mut self, _cx: &mut Context<'_>, _max: usize) -> Poll<Result<SourceHeadPoll<u64>, UserError>> {
///         if !self.0.is_empty() {
///             let records = std::mem::take(&mut self.0);
///             return Poll::Ready(Ok(SourceHeadPoll::Records(records.into())));
///         }
///         if self.1 { Poll::Ready(Ok(SourceHeadPoll::End)) } else { Poll::Pending }
///     }
///     fn handle_operator_event(&mut self, event: OperatorEvent) -> Result<(), UserError> {
///         let n: u64 = sluice_core::codec::decode(event.payload())?;
///         if n == 0 { self.1 = true } else { self.0.push(n) }
///         Ok(())
///     }
///     fn snapshot_state(&mut self, _c: CheckpointId) -> Result<OperatorState, UserError> {
///         Ok(OperatorState::default())
///     }
/// }
/// # let _ = Relay(vec![], false);
/// ```
pub trait SourceHead<T>: Send + 'static {
    /// Called once, before the first poll (a split source registers its reader here).
    fn open(&mut self) -> Result<(), UserError> {
        Ok(())
    }

    /// The next thing the source has ready; `max` bounds the records of one batch.
    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<Result<SourceHeadPoll<T>, UserError>>;

    /// An event from this source's coordinator, between two polls.
    fn handle_operator_event(&mut self, event: OperatorEvent) -> Result<(), UserError>;

    /// The source's state at checkpoint `checkpoint`: a list of entries (for a split source, one
    /// per split with its position), dealt out evenly over the subtasks on a rescaled restore.
    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<OperatorState, UserError>;

    /// Checkpoint `checkpoint` completed everywhere (Flink's `notifyCheckpointComplete`), told
    /// by the task between two polls, before the operators of its chain hear of it. A
    /// notification may be skipped (a later one covers it); an error fails the subtask.
    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        let _ = checkpoint;
        Ok(())
    }
}
