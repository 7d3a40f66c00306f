//! What a task reads: either a source's batches or the input gate over upstream channels.

use crate::error::TaskError;
use crate::metrics::OperatorMetrics;
use crate::operator::{OperatorContext, SourceHead, SourceHeadPoll};
use crate::state::OperatorState;
use crate::task::chain::failure;
use sluice_core::{
    Batch, CheckpointBarrier, CheckpointId, NodeId, OperatorEvent, SubtaskIndex, UserError,
    Watermark, WatermarkStatus, panic_message,
};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::{Context, Poll};

/// The next thing a task's input delivers.
#[derive(Debug)]
pub(crate) enum InputEvent<T> {
    Records(Batch<T>),
    Watermark(Watermark),
    Status(WatermarkStatus),
    /// Barrier alignment finished: snapshot now.
    Barrier(CheckpointBarrier),
    /// A newer barrier overtook this checkpoint before it aligned: decline it.
    Abandoned(CheckpointId),
    End,
}

/// A task's input, polled by the task loop.
pub(crate) trait TaskInput<T>: Send {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<InputEvent<T>, TaskError>>;

    /// Whether this input is a source (checkpoints are triggered at it, not aligned).
    fn is_source(&self) -> bool {
        false
    }

    /// The source's own state at checkpoint `id` (inputs that are not sources have none).
    fn snapshot(
        &mut self,
        id: CheckpointId,
    ) -> Result<Option<(NodeId, SubtaskIndex, OperatorState)>, TaskError> {
        let _ = id;
        Ok(None)
    }

    /// The operator whose coordinator events this input takes itself (a source head), if any.
    fn event_target(&self) -> Option<NodeId> {
        None
    }

    /// An event for [`event_target`](Self::event_target).
    fn handle_event(&mut self, event: OperatorEvent) -> Result<(), TaskError> {
        let _ = event;
        Err(TaskError::Internal(
            "an operator event reached an input that takes none".into(),
        ))
    }

    /// A checkpoint was aborted: stop aligning it.
    fn abort_checkpoint(&mut self, id: CheckpointId) {
        let _ = id;
    }

    /// Checkpoint `id` completed (a source head hears of it).
    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), TaskError> {
        let _ = id;
        Ok(())
    }
}

/// The reading side of a source, one instance per subtask.
pub(crate) trait SourceReader<T>: Send + 'static {
    /// The next batch of at most `max` records, `None` at end of input.
    fn poll_next_batch(
        &mut self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<Result<Option<Vec<T>>, UserError>>;

    /// The reader's position, for a checkpoint.
    fn snapshot_state(&mut self) -> Result<OperatorState, UserError>;
}

/// Adapts a [`SourceReader`] to a task input: batches, then the maximum watermark, then the end.
pub(crate) struct SourceInput<T> {
    reader: Box<dyn SourceReader<T>>,
    ctx: OperatorContext,
    metrics: Arc<OperatorMetrics>,
    batch_size: usize,
    state: SourceState,
}

#[derive(PartialEq, Eq)]
enum SourceState {
    Reading,
    SendMaxWatermark,
    Ended,
}

impl<T> SourceInput<T> {
    pub(crate) fn new(
        reader: Box<dyn SourceReader<T>>,
        ctx: OperatorContext,
        batch_size: usize,
    ) -> Self {
        let metrics = ctx.metrics().clone();
        SourceInput {
            reader,
            ctx,
            metrics,
            batch_size,
            state: SourceState::Reading,
        }
    }
}

impl<T: Send + 'static> TaskInput<T> for SourceInput<T> {
    fn is_source(&self) -> bool {
        true
    }

    fn snapshot(
        &mut self,
        _id: CheckpointId,
    ) -> Result<Option<(NodeId, SubtaskIndex, OperatorState)>, TaskError> {
        let reader = &mut self.reader;
        match catch_unwind(AssertUnwindSafe(|| reader.snapshot_state())) {
            Ok(Ok(state)) => Ok(Some((
                self.ctx.operator_id(),
                self.ctx.subtask_index(),
                state,
            ))),
            Ok(Err(e)) => Err(failure(
                &self.ctx,
                format!("snapshotting the source returned an error: {e}"),
            )),
            Err(payload) => Err(failure(
                &self.ctx,
                format!(
                    "snapshotting the source panicked: {}",
                    panic_message(payload.as_ref())
                ),
            )),
        }
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<InputEvent<T>, TaskError>> {
        match self.state {
            SourceState::Reading => {
                let reader = &mut self.reader;
                let max = self.batch_size;
                let polled = catch_unwind(AssertUnwindSafe(|| reader.poll_next_batch(cx, max)));
                match polled {
                    Ok(Poll::Ready(Ok(Some(batch)))) => {
                        self.metrics.add_records_out(batch.len());
                        Poll::Ready(Ok(InputEvent::Records(Batch::new(batch))))
                    }
                    Ok(Poll::Ready(Ok(None))) => {
                        self.state = SourceState::SendMaxWatermark;
                        Poll::Ready(Ok(InputEvent::Watermark(Watermark::MAX)))
                    }
                    Ok(Poll::Ready(Err(e))) => Poll::Ready(Err(failure(
                        &self.ctx,
                        format!("reading the source returned an error: {e}"),
                    ))),
                    Ok(Poll::Pending) => Poll::Pending,
                    Err(payload) => Poll::Ready(Err(failure(
                        &self.ctx,
                        format!(
                            "reading the source panicked: {}",
                            panic_message(payload.as_ref())
                        ),
                    ))),
                }
            }
            SourceState::SendMaxWatermark | SourceState::Ended => {
                self.state = SourceState::Ended;
                Poll::Ready(Ok(InputEvent::End))
            }
        }
    }
}

/// Adapts a [`SourceHead`] to a task input: it opens the head on the first poll, passes its
/// events and snapshots through, and after its end emits the maximum watermark, then the end.
pub(crate) struct SourceHeadInput<T> {
    head: Box<dyn SourceHead<T>>,
    ctx: OperatorContext,
    metrics: Arc<OperatorMetrics>,
    batch_size: usize,
    opened: bool,
    state: SourceState,
}

impl<T> SourceHeadInput<T> {
    pub(crate) fn new(
        head: Box<dyn SourceHead<T>>,
        ctx: OperatorContext,
        batch_size: usize,
    ) -> Self {
        let metrics = ctx.metrics().clone();
        SourceHeadInput {
            head,
            ctx,
            metrics,
            batch_size,
            opened: false,
            state: SourceState::Reading,
        }
    }

    /// Runs `f` on the head, turning an error or a panic into a task failure naming `what`.
    fn guarded<R>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut dyn SourceHead<T>) -> Result<R, UserError>,
    ) -> Result<R, TaskError> {
        let head = self.head.as_mut();
        match catch_unwind(AssertUnwindSafe(|| f(head))) {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(failure(&self.ctx, format!("{what} returned an error: {e}"))),
            Err(payload) => Err(failure(
                &self.ctx,
                format!("{what} panicked: {}", panic_message(payload.as_ref())),
            )),
        }
    }
}

impl<T: Send + 'static> TaskInput<T> for SourceHeadInput<T> {
    fn is_source(&self) -> bool {
        true
    }

    fn snapshot(
        &mut self,
        id: CheckpointId,
    ) -> Result<Option<(NodeId, SubtaskIndex, OperatorState)>, TaskError> {
        let state = self.guarded("snapshotting the source", |h| h.snapshot_state(id))?;
        Ok(Some((
            self.ctx.operator_id(),
            self.ctx.subtask_index(),
            state,
        )))
    }

    fn event_target(&self) -> Option<NodeId> {
        Some(self.ctx.operator_id())
    }

    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> Result<(), TaskError> {
        self.guarded("notifying the source of a completed checkpoint", |h| {
            h.notify_checkpoint_complete(id)
        })
    }

    fn handle_event(&mut self, event: OperatorEvent) -> Result<(), TaskError> {
        self.ctx.metrics().add_event_from_coordinator();
        self.guarded("handling an operator event in the source", |h| {
            h.handle_operator_event(event)
        })
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<InputEvent<T>, TaskError>> {
        if self.state != SourceState::Reading {
            self.state = SourceState::Ended;
            return Poll::Ready(Ok(InputEvent::End));
        }
        if !self.opened {
            self.opened = true;
            if let Err(e) = self.guarded("opening the source", |h| h.open()) {
                return Poll::Ready(Err(e));
            }
        }
        let max = self.batch_size;
        let polled = self.guarded("reading the source", |h| match h.poll_next(cx, max) {
            Poll::Ready(r) => r.map(Some),
            Poll::Pending => Ok(None),
        });
        match polled {
            Err(e) => Poll::Ready(Err(e)),
            Ok(None) => Poll::Pending,
            Ok(Some(SourceHeadPoll::Records(batch))) => {
                self.metrics.add_records_out(batch.len());
                Poll::Ready(Ok(InputEvent::Records(batch)))
            }
            Ok(Some(SourceHeadPoll::Watermark(w))) => Poll::Ready(Ok(InputEvent::Watermark(w))),
            Ok(Some(SourceHeadPoll::Status(s))) => Poll::Ready(Ok(InputEvent::Status(s))),
            Ok(Some(SourceHeadPoll::End)) => {
                self.state = SourceState::SendMaxWatermark;
                Poll::Ready(Ok(InputEvent::Watermark(Watermark::MAX)))
            }
        }
    }
}
