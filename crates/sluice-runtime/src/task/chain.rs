//! Operator chains: operators of one task calling each other directly.
//!
//! A task runs a chain of [`ChainStage`]s. Each stage wraps one operator (or ends the chain by
//! writing to the network, fanning out, or dropping). A stage passes whole batches to the next
//! stage with one dynamic call per batch; inside, the operator's loop is monomorphised. Every call
//! into user code is guarded: an error or a panic becomes a [`TaskError`] naming the operator and
//! subtask.

use crate::error::{TaskError, TaskFailure};
use crate::metrics::OperatorMetrics;
use crate::operator::{Collector, Operator, OperatorContext};
use crate::state::OperatorState;
use crate::task::control::TaskSnapshot;
use sluice_core::{
    Batch, CheckpointBarrier, CheckpointId, Data, OperatorEvent, StreamElement, UserError,
    Watermark, WatermarkStatus, panic_message,
};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::{Context, Poll};

/// One link of an operator chain, typed on what it receives.
pub(crate) trait ChainStage<In>: Send {
    /// Opens this stage and the rest of the chain, head to tail.
    fn open(&mut self) -> Result<(), TaskError>;
    /// Pushes a batch (with its event times, if any) through this stage and everything it emits
    /// through the rest of the chain.
    fn process_batch(&mut self, batch: Batch<In>) -> Result<(), TaskError>;
    /// Pushes a watermark through.
    fn process_watermark(&mut self, watermark: Watermark) -> Result<(), TaskError>;
    /// Pushes an idle/active change through (operators do not see it).
    fn process_status(&mut self, status: WatermarkStatus) -> Result<(), TaskError>;
    /// Polls every stage's pending work; returns whether anything progressed.
    fn poll_work(&mut self, cx: &mut Context<'_>) -> Result<bool, TaskError>;
    /// Whether any stage refuses more input right now.
    fn input_blocked(&self) -> bool;
    /// The metrics of the first operator from this stage on that refuses input right now, if
    /// any. Only operators refuse input: other stages keep the default.
    fn input_blocker(&self) -> Option<&Arc<OperatorMetrics>> {
        None
    }
    /// Seals partially filled output batches (the producer has nothing more ready).
    fn flush_buffers(&mut self);
    /// Sends what is ready to the network; `Pending` while a channel is full.
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>>;
    /// Ends the input of this stage and then of the rest of the chain, draining pending work.
    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>>;
    /// Closes every stage, head to tail; every stage is closed even if one fails.
    fn close(&mut self) -> Result<(), TaskError>;
    /// Delivers an operator event to the operator `target` of the chain.
    fn handle_event(
        &mut self,
        target: sluice_core::NodeId,
        event: OperatorEvent,
    ) -> Result<(), TaskError>;
    /// Snapshots every operator of the chain, head to tail, appending to `out`, and forwards
    /// the barrier behind everything the operators emitted.
    fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        out: &mut TaskSnapshot,
    ) -> Result<(), TaskError>;
    /// Tells every operator that checkpoint `id` completed (`complete`) or was aborted.
    fn notify_checkpoint(&mut self, id: CheckpointId, complete: bool) -> Result<(), TaskError>;
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum FinishState {
    Running,
    Draining,
    Done,
}

/// A stage that runs one operator.
pub(crate) struct OperatorStage<In: Data, Op: Operator<In>> {
    op: Op,
    ctx: OperatorContext,
    out: Collector<Op::Out>,
    next: Box<dyn ChainStage<Op::Out>>,
    metrics: Arc<OperatorMetrics>,
    finish: FinishState,
    restored: Option<OperatorState>,
    _in: std::marker::PhantomData<fn(In)>,
}

impl<In: Data, Op: Operator<In>> OperatorStage<In, Op> {
    pub(crate) fn new(
        op: Op,
        ctx: OperatorContext,
        next: Box<dyn ChainStage<Op::Out>>,
        restored: Option<OperatorState>,
    ) -> Self {
        let metrics = ctx.metrics().clone();
        // Restored after it had ended its input: it does not end it again.
        let finish = if restored.as_ref().is_some_and(OperatorState::is_finished) {
            FinishState::Done
        } else {
            FinishState::Running
        };
        OperatorStage {
            op,
            ctx,
            out: Collector::new(),
            next,
            metrics,
            finish,
            restored,
            _in: std::marker::PhantomData,
        }
    }

    /// Runs `f` against the operator, turning an error or panic into a failure naming it.
    #[inline]
    fn guarded<R>(
        &mut self,
        what: &str,
        f: impl FnOnce(&mut Op, &mut Collector<Op::Out>) -> Result<R, UserError>,
    ) -> Result<R, TaskError> {
        let op = &mut self.op;
        let out = &mut self.out;
        match catch_unwind(AssertUnwindSafe(|| f(op, out))) {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(failure(&self.ctx, format!("{what} returned an error: {e}"))),
            Err(payload) => Err(failure(
                &self.ctx,
                format!("{what} panicked: {}", panic_message(payload.as_ref())),
            )),
        }
    }

    /// Hands everything the operator emitted to the next stage, in order.
    #[inline]
    fn forward(&mut self) -> Result<(), TaskError> {
        let mut elements = self.out.take_elements();
        if self.finish == FinishState::Done {
            // The rest of the chain has ended (or is ending) its input: records passed on now
            // would be lost, or reach an operator after its `end_input`. As in Flink, where an
            // operator may not emit after `finish`, this fails the job instead of losing them.
            let emitted: usize = elements
                .iter()
                .map(|e| match e {
                    StreamElement::Records(batch) => batch.len(),
                    _ => 0,
                })
                .sum();
            if emitted > 0 {
                self.out.return_buffer(elements);
                return Err(failure(
                    &self.ctx,
                    format!(
                        "emitted {emitted} record(s) after its input had ended and its pending \
                         work had drained (from a snapshot, a checkpoint notification or an \
                         operator event); emit final results from `end_input` or while \
                         `has_pending` is true, or they would be lost"
                    ),
                ));
            }
        }
        let mut result = Ok(());
        for element in elements.drain(..) {
            if result.is_err() {
                break;
            }
            result = match element {
                StreamElement::Records(batch) => {
                    self.metrics.add_records_out(batch.len());
                    self.next.process_batch(batch)
                }
                StreamElement::Watermark(w) => self.next.process_watermark(w),
                StreamElement::Status(s) => self.next.process_status(s),
                StreamElement::Barrier(_) | StreamElement::EndOfInput => Err(TaskError::Internal(
                    "an operator emitted a barrier or end-of-input".into(),
                )),
            };
        }
        self.out.return_buffer(elements);
        result
    }
}

pub(crate) fn failure(ctx: &OperatorContext, message: String) -> TaskError {
    TaskError::Failed(TaskFailure {
        operator_id: ctx.operator_id(),
        operator_name: ctx.operator_name().to_string(),
        subtask: ctx.subtask_index(),
        parallelism: ctx.parallelism(),
        message,
    })
}

impl<In: Data, Op: Operator<In>> ChainStage<In> for OperatorStage<In, Op> {
    fn open(&mut self) -> Result<(), TaskError> {
        if let Some(state) = self.restored.take() {
            self.ctx
                .restore_stores(&state)
                .map_err(|m| failure(&self.ctx, m))?;
            self.guarded("restoring state", |op, _| op.initialize_state(state))?;
        }
        let ctx = self.ctx.clone();
        self.guarded("open", |op, _| op.open(&ctx))?;
        self.next.open()
    }

    #[inline]
    fn process_batch(&mut self, batch: Batch<In>) -> Result<(), TaskError> {
        self.metrics.add_records_in(batch.len());
        let (records, timestamps) = batch.into_parts();
        self.guarded("processing a record", |op, out| {
            out.set_input_timestamps(timestamps);
            let result = op.process_batch(records, out);
            out.set_input_timestamps(None);
            result
        })?;
        self.forward()
    }

    fn process_watermark(&mut self, watermark: Watermark) -> Result<(), TaskError> {
        self.guarded("processing a watermark", |op, out| {
            op.process_watermark(watermark, out)
        })?;
        self.forward()
    }

    fn process_status(&mut self, status: WatermarkStatus) -> Result<(), TaskError> {
        self.next.process_status(status)
    }

    fn poll_work(&mut self, cx: &mut Context<'_>) -> Result<bool, TaskError> {
        let mut progressed = false;
        // Once its input ended and its pending work drained, the operator is quiesced, as Flink
        // quiesces an operator's processing-time service before `finish`: a processing-time
        // timer still pending then never fires (also while the task lingers for its final
        // checkpoint), so nothing reaches the next stage after its input ended.
        if self.finish != FinishState::Done {
            loop {
                match self.guarded("completing pending work", |op, out| {
                    Ok(op.poll_pending(cx, out))
                })? {
                    Poll::Ready(Ok(())) => {
                        progressed = true;
                        self.forward()?;
                    }
                    Poll::Ready(Err(e)) => {
                        return Err(failure(
                            &self.ctx,
                            format!("completing pending work returned an error: {e}"),
                        ));
                    }
                    Poll::Pending => break,
                }
            }
        }
        Ok(self.next.poll_work(cx)? || progressed)
    }

    fn input_blocked(&self) -> bool {
        self.op.is_input_blocked() || self.next.input_blocked()
    }

    fn input_blocker(&self) -> Option<&Arc<OperatorMetrics>> {
        if self.op.is_input_blocked() {
            Some(&self.metrics)
        } else {
            self.next.input_blocker()
        }
    }

    fn flush_buffers(&mut self) {
        self.next.flush_buffers()
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        self.next.poll_flush(cx)
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        loop {
            match self.finish {
                FinishState::Running => {
                    self.guarded("end of input", |op, out| op.end_input(out))?;
                    self.forward()?;
                    self.finish = FinishState::Draining;
                    if self.op.has_pending() {
                        // Let the task loop poll the pending work once more (it may have changed
                        // at end of input) before waiting on it.
                        cx.waker().wake_by_ref();
                        return Poll::Pending;
                    }
                }
                FinishState::Draining => {
                    if self.op.has_pending() {
                        // The task loop just polled `poll_work`, which registered the waker.
                        return Poll::Pending;
                    }
                    self.finish = FinishState::Done;
                }
                FinishState::Done => return self.next.poll_finish(cx),
            }
        }
    }

    fn close(&mut self) -> Result<(), TaskError> {
        let mine = self.guarded("close", |op, _| op.close());
        let rest = self.next.close();
        mine.and(rest)
    }

    fn handle_event(
        &mut self,
        target: sluice_core::NodeId,
        event: OperatorEvent,
    ) -> Result<(), TaskError> {
        if target == self.ctx.operator_id() {
            self.ctx.metrics().add_event_from_coordinator();
            self.guarded("handling an operator event", |op, out| {
                op.handle_operator_event(event, out)
            })?;
            self.forward()
        } else {
            self.next.handle_event(target, event)
        }
    }

    fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        out: &mut TaskSnapshot,
    ) -> Result<(), TaskError> {
        let id = barrier.id;
        let mut state = self.guarded("snapshotting state", |op, o| op.snapshot_state(id, o))?;
        self.ctx
            .snapshot_store(id, &mut state)
            .map_err(|e| failure(&self.ctx, format!("snapshotting its keyed store: {e}")))?;
        self.forward()?;
        if self.finish == FinishState::Done {
            state.mark_finished();
        }
        out.push((self.ctx.operator_id(), self.ctx.subtask_index(), state));
        self.next.checkpoint(barrier, out)
    }

    fn notify_checkpoint(&mut self, id: CheckpointId, complete: bool) -> Result<(), TaskError> {
        let cid = id;
        if complete {
            self.ctx.store_checkpoint_complete(cid);
            self.guarded("notify_checkpoint_complete", |op, _| {
                op.notify_checkpoint_complete(cid)
            })?;
        } else {
            self.guarded("notify_checkpoint_aborted", |op, _| {
                op.notify_checkpoint_aborted(cid)
            })?;
        }
        self.next.notify_checkpoint(id, complete)
    }
}

/// Ends a chain whose output nobody reads (a sink's `()` output).
pub(crate) struct NullStage;

impl<T: Data> ChainStage<T> for NullStage {
    fn open(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
    fn process_batch(&mut self, _batch: Batch<T>) -> Result<(), TaskError> {
        Ok(())
    }
    fn process_watermark(&mut self, _w: Watermark) -> Result<(), TaskError> {
        Ok(())
    }
    fn process_status(&mut self, _s: WatermarkStatus) -> Result<(), TaskError> {
        Ok(())
    }
    fn poll_work(&mut self, _cx: &mut Context<'_>) -> Result<bool, TaskError> {
        Ok(false)
    }
    fn input_blocked(&self) -> bool {
        false
    }
    fn flush_buffers(&mut self) {}
    fn poll_flush(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        Poll::Ready(Ok(()))
    }
    fn poll_finish(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        Poll::Ready(Ok(()))
    }
    fn close(&mut self) -> Result<(), TaskError> {
        Ok(())
    }
    fn handle_event(
        &mut self,
        target: sluice_core::NodeId,
        _event: OperatorEvent,
    ) -> Result<(), TaskError> {
        Err(TaskError::Internal(format!(
            "an operator event for operator {target} reached a task that does not run it"
        )))
    }
    fn checkpoint(
        &mut self,
        _b: CheckpointBarrier,
        _out: &mut TaskSnapshot,
    ) -> Result<(), TaskError> {
        Ok(())
    }
    fn notify_checkpoint(&mut self, _id: CheckpointId, _complete: bool) -> Result<(), TaskError> {
        Ok(())
    }
}

/// Fans one output out to several consumers (one stream used by several operators).
pub(crate) struct TeeStage<T> {
    pub(crate) nexts: Vec<Box<dyn ChainStage<T>>>,
    pub(crate) finished: Vec<bool>,
}

impl<T: Data> TeeStage<T> {
    pub(crate) fn new(nexts: Vec<Box<dyn ChainStage<T>>>) -> Self {
        let finished = vec![false; nexts.len()];
        TeeStage { nexts, finished }
    }
}

impl<T: Data> ChainStage<T> for TeeStage<T> {
    fn open(&mut self) -> Result<(), TaskError> {
        self.nexts.iter_mut().try_for_each(|n| n.open())
    }
    fn process_batch(&mut self, batch: Batch<T>) -> Result<(), TaskError> {
        let (last, rest) = match self.nexts.split_last_mut() {
            Some(x) => x,
            None => return Ok(()),
        };
        for n in rest {
            n.process_batch(batch.clone())?;
        }
        last.process_batch(batch)
    }
    fn process_watermark(&mut self, w: Watermark) -> Result<(), TaskError> {
        self.nexts
            .iter_mut()
            .try_for_each(|n| n.process_watermark(w))
    }
    fn process_status(&mut self, s: WatermarkStatus) -> Result<(), TaskError> {
        self.nexts.iter_mut().try_for_each(|n| n.process_status(s))
    }
    fn poll_work(&mut self, cx: &mut Context<'_>) -> Result<bool, TaskError> {
        let mut any = false;
        for n in &mut self.nexts {
            any |= n.poll_work(cx)?;
        }
        Ok(any)
    }
    fn input_blocked(&self) -> bool {
        self.nexts.iter().any(|n| n.input_blocked())
    }
    fn input_blocker(&self) -> Option<&Arc<OperatorMetrics>> {
        self.nexts.iter().find_map(|n| n.input_blocker())
    }
    fn flush_buffers(&mut self) {
        self.nexts.iter_mut().for_each(|n| n.flush_buffers())
    }
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        let mut ready = true;
        for n in &mut self.nexts {
            match n.poll_flush(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => ready = false,
            }
        }
        if ready {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }
    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        let mut all = true;
        for (n, done) in self.nexts.iter_mut().zip(self.finished.iter_mut()) {
            if !*done {
                match n.poll_finish(cx) {
                    Poll::Ready(Ok(())) => *done = true,
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                    Poll::Pending => all = false,
                }
            }
        }
        if all {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }
    fn close(&mut self) -> Result<(), TaskError> {
        let mut result = Ok(());
        for n in &mut self.nexts {
            let r = n.close();
            if result.is_ok() {
                result = r;
            }
        }
        result
    }
    fn handle_event(
        &mut self,
        target: sluice_core::NodeId,
        event: OperatorEvent,
    ) -> Result<(), TaskError> {
        // Only one branch runs the target; try each until one accepts.
        let mut last_err = None;
        for n in &mut self.nexts {
            match n.handle_event(target, event.clone()) {
                Ok(()) => return Ok(()),
                Err(TaskError::Internal(m)) => last_err = Some(TaskError::Internal(m)),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| TaskError::Internal("empty fan-out".into())))
    }
    fn checkpoint(
        &mut self,
        barrier: CheckpointBarrier,
        out: &mut TaskSnapshot,
    ) -> Result<(), TaskError> {
        self.nexts
            .iter_mut()
            .try_for_each(|n| n.checkpoint(barrier, out))
    }
    fn notify_checkpoint(&mut self, id: CheckpointId, complete: bool) -> Result<(), TaskError> {
        self.nexts
            .iter_mut()
            .try_for_each(|n| n.notify_checkpoint(id, complete))
    }
}
