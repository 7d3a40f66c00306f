//! What a task reads: either a source's batches or the input gate over upstream channels.

use crate::error::TaskError;
use crate::metrics::OperatorMetrics;
use crate::operator::OperatorContext;
use crate::state::OperatorState;
use crate::task::chain::failure;
use sluice_core::{
    Batch, CheckpointBarrier, CheckpointId, NodeId, SubtaskIndex, UserError, Watermark,
    WatermarkStatus, panic_message,
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

    /// The source's own state at a checkpoint (inputs that are not sources have none).
    fn snapshot(&mut self) -> Result<Option<(NodeId, SubtaskIndex, OperatorState)>, TaskError> {
        Ok(None)
    }

    /// A checkpoint was aborted: stop aligning it.
    fn abort_checkpoint(&mut self, id: CheckpointId) {
        let _ = id;
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

    fn snapshot(&mut self) -> Result<Option<(NodeId, SubtaskIndex, OperatorState)>, TaskError> {
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
