//! The source operator in each subtask: a [`SourceHead`] around the source's
//! [`SourceReader`](crate::SourceReader).
//!
//! It registers its reader with the coordinator when it opens, asks for a split whenever the
//! reader holds none (one request at a time), hands assigned splits to the reader, generates
//! watermarks per split with the job's [`WatermarkStrategy`] and combines them per subtask
//! (`watermarks.rs`), stores its splits with their positions in every checkpoint (one list entry
//! per split, so a restore at another parallelism deals them out), passes completed checkpoints
//! on to the reader, and ends when the reader holds no split and the
//! enumerator said no more will come.

mod watermarks;

use crate::api::{ReaderContext, ReaderPoll, Source, SourceReader};
use crate::event::{EnumeratorEvent, ReaderEvent};
use sluice_core::codec;
use sluice_core::{Batch, CheckpointId, OperatorEvent, UserError, WatermarkStatus};
use sluice_runtime::{
    OperatorContext, OperatorState, SourceHead, SourceHeadPoll, WatermarkStrategy,
};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::time::{Instant, Sleep};
use watermarks::{Emit, SplitWatermarks};

/// Event time of a split source: the strategy and the per-split state.
struct EventTime<T> {
    strategy: WatermarkStrategy<T>,
    splits: SplitWatermarks,
    idle_timer: Option<Pin<Box<Sleep>>>,
}

/// The head of a split source's task (see the module docs).
pub(crate) struct SourceOperator<Src: Source> {
    reader: Src::Reader,
    ctx: OperatorContext,
    event_time: Option<EventTime<Src::Out>>,
    pending: VecDeque<SourceHeadPoll<Src::Out>>,
    no_more_splits: bool,
    awaiting_split: bool,
}

impl<Src: Source> SourceOperator<Src> {
    /// The operator of one subtask, with the splits of `restored` given back to its reader.
    pub(crate) fn create(
        source: &Src,
        ctx: &OperatorContext,
        restored: Option<OperatorState>,
        strategy: Option<WatermarkStrategy<Src::Out>>,
    ) -> Result<Self, UserError> {
        let reader = source.create_reader(ReaderContext::new(ctx.clone()))?;
        let mut op = SourceOperator {
            reader,
            ctx: ctx.clone(),
            event_time: strategy.map(|strategy| EventTime {
                splits: SplitWatermarks::new(strategy.idleness(), Instant::now()),
                strategy,
                idle_timer: None,
            }),
            pending: VecDeque::new(),
            no_more_splits: false,
            awaiting_split: false,
        };
        if let Some(state) = restored {
            let splits = state
                .entries()
                .iter()
                .map(|e| codec::decode::<Src::Split>(e))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("cannot decode a restored split: {e}"))?;
            op.add_splits(splits)?;
        }
        Ok(op)
    }

    fn add_splits(&mut self, splits: Vec<Src::Split>) -> Result<(), UserError> {
        if let Some(et) = &mut self.event_time {
            let now = Instant::now();
            for s in &splits {
                et.splits
                    .add_split(crate::api::SourceSplit::split_id(s), now);
            }
        }
        self.reader.add_splits(splits)
    }

    fn queue(&mut self, emit: Emit) {
        queue(&mut self.pending, emit);
    }

    /// Marks idle the splits whose timeout passed, and re-arms the timer for the next one.
    fn poll_idleness(&mut self, cx: &mut Context<'_>) {
        let Some(et) = &mut self.event_time else {
            return;
        };
        while let Some(deadline) = et.splits.next_idle_deadline() {
            let timer = et
                .idle_timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
            if timer.deadline() != deadline {
                timer.as_mut().reset(deadline);
            }
            if timer.as_mut().poll(cx).is_pending() {
                return;
            }
            // At least the split due at `deadline` turns idle, so the next deadline is later.
            queue(&mut self.pending, et.splits.on_time(Instant::now()));
        }
        et.idle_timer = None;
    }
}

fn queue<T>(pending: &mut VecDeque<SourceHeadPoll<T>>, emit: Emit) {
    if let Some(s) = emit.status {
        pending.push_back(SourceHeadPoll::Status(s));
    }
    if let Some(w) = emit.watermark {
        pending.push_back(SourceHeadPoll::Watermark(w));
    }
}

impl<Src: Source> SourceHead<Src::Out> for SourceOperator<Src> {
    fn open(&mut self) -> Result<(), UserError> {
        self.reader.start()?;
        self.ctx.send_to_coordinator(&ReaderEvent::Register)
    }

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<Result<SourceHeadPoll<Src::Out>, UserError>> {
        // A silent split turns idle while others are busy, too.
        self.poll_idleness(cx);
        loop {
            if let Some(next) = self.pending.pop_front() {
                return Poll::Ready(Ok(next));
            }
            let polled = match self.reader.poll_next(cx, max) {
                Poll::Ready(Ok(p)) => p,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            match polled {
                ReaderPoll::Records { split, records } => {
                    if records.is_empty() {
                        continue;
                    }
                    let Some(et) = &mut self.event_time else {
                        return Poll::Ready(Ok(SourceHeadPoll::Records(Batch::new(records))));
                    };
                    let strategy = &et.strategy;
                    // The records carry their event time from the source on, as in Flink.
                    let timestamps: Vec<i64> = records
                        .iter()
                        .map(|r| strategy.extract_timestamp(r))
                        .collect();
                    let max_ts = timestamps.iter().copied().max().unwrap_or(i64::MIN);
                    let records = Batch::with_timestamps(records, timestamps);
                    let emit = et.splits.on_records(
                        &split,
                        strategy.watermark_after(max_ts),
                        Instant::now(),
                    );
                    // An idle subtask turns active before its records.
                    if emit.status == Some(WatermarkStatus::Active) {
                        self.pending.push_back(SourceHeadPoll::Records(records));
                        if let Some(w) = emit.watermark {
                            self.pending.push_back(SourceHeadPoll::Watermark(w));
                        }
                        return Poll::Ready(Ok(SourceHeadPoll::Status(WatermarkStatus::Active)));
                    }
                    self.queue(emit);
                    return Poll::Ready(Ok(SourceHeadPoll::Records(records)));
                }
                ReaderPoll::SplitFinished(split) => {
                    if let Some(et) = &mut self.event_time {
                        let emit = et.splits.on_finished(&split);
                        self.queue(emit);
                    }
                }
                ReaderPoll::NeedsSplits => {
                    if self.no_more_splits {
                        return Poll::Ready(Ok(SourceHeadPoll::End));
                    }
                    if !self.awaiting_split {
                        self.awaiting_split = true;
                        if let Err(e) = self.ctx.send_to_coordinator(&ReaderEvent::RequestSplit) {
                            return Poll::Ready(Err(e));
                        }
                    }
                    // The assignment arrives as an operator event, and the task polls again.
                    return Poll::Pending;
                }
            }
        }
    }

    fn handle_operator_event(&mut self, event: OperatorEvent) -> Result<(), UserError> {
        let event: EnumeratorEvent<Src::Split> = codec::decode(event.payload())
            .map_err(|e| format!("unrecognised event from the source coordinator: {e}"))?;
        match event {
            EnumeratorEvent::AddSplits(splits) => {
                self.awaiting_split = false;
                self.add_splits(splits)
            }
            EnumeratorEvent::NoMoreSplits => {
                self.no_more_splits = true;
                self.reader.notify_no_more_splits()
            }
            EnumeratorEvent::Source(bytes) => self.reader.handle_source_event(bytes),
        }
    }

    fn snapshot_state(&mut self, checkpoint: CheckpointId) -> Result<OperatorState, UserError> {
        let splits = self.reader.snapshot_state(checkpoint)?;
        let entries = splits
            .iter()
            .map(codec::encode)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(OperatorState::from_entries(entries))
    }

    fn notify_checkpoint_complete(&mut self, checkpoint: CheckpointId) -> Result<(), UserError> {
        self.reader.notify_checkpoint_complete(checkpoint)
    }
}

#[cfg(test)]
mod tests;
