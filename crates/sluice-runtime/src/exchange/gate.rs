//! The input gate: a task's input channels, read fairly, with their watermarks merged.
//!
//! A two-input task has one gate over the channels of both inputs: each channel of the first
//! input hands its records on as `Either::Left`, each of the second as `Either::Right`
//! ([`GateChannel::converted`]), so the watermark is the minimum over both inputs and a barrier
//! aligns across both, exactly as across the channels of one input.

use super::ChannelReceiver;
use crate::checkpoint::{AlignEvent, BarrierAligner};
use crate::error::TaskError;
use crate::task::input::{InputEvent, TaskInput};
use crate::watermark::{ValveOutput, WatermarkValve};
use sluice_core::{CheckpointBarrier, CheckpointId, Data, StreamElement};
use std::collections::VecDeque;
use std::task::{Context, Poll};

/// One input channel of a gate: read as it is, or with its records converted (the channels of
/// a two-input operator's inputs).
pub(crate) enum GateChannel<T> {
    Direct(ChannelReceiver<T>),
    Converted(Box<dyn ConvertedChannel<T>>),
}

impl<T: Send + 'static> GateChannel<T> {
    /// A channel of records of type `U`, each handed on as `f(record)`.
    pub(crate) fn converted<U: Send + 'static>(rx: ChannelReceiver<U>, f: fn(U) -> T) -> Self {
        GateChannel::Converted(Box::new(Convert { rx, f }))
    }

    #[inline]
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<StreamElement<T>>> {
        match self {
            GateChannel::Direct(rx) => rx.poll_recv(cx),
            GateChannel::Converted(c) => c.poll_recv(cx),
        }
    }
}

/// A channel whose elements are converted as they are read.
pub(crate) trait ConvertedChannel<T>: Send {
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<StreamElement<T>>>;
}

struct Convert<U, T> {
    rx: ChannelReceiver<U>,
    f: fn(U) -> T,
}

impl<U: Send, T> ConvertedChannel<T> for Convert<U, T> {
    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<StreamElement<T>>> {
        self.rx
            .poll_recv(cx)
            .map(|e| e.map(|e| e.map_records(self.f)))
    }
}

struct Channel<T> {
    rx: GateChannel<T>,
    ended: bool,
}

/// Reads all input channels of one subtask, round robin, and turns their control elements into
/// the task's own: the minimum watermark, idleness of all, end of all.
pub(crate) struct InputGate<T> {
    channels: Vec<Channel<T>>,
    next: usize,
    live: usize,
    valve: WatermarkValve,
    aligner: BarrierAligner,
    barrier: Option<CheckpointBarrier>,
    pending: VecDeque<InputEvent<T>>,
    description: String,
}

impl<T: Data> InputGate<T> {
    pub(crate) fn new(receivers: Vec<ChannelReceiver<T>>, description: String) -> Self {
        Self::from_channels(
            receivers.into_iter().map(GateChannel::Direct).collect(),
            description,
        )
    }

    /// A gate over channels some of which convert their records (a two-input task's).
    pub(crate) fn from_channels(channels: Vec<GateChannel<T>>, description: String) -> Self {
        let n = channels.len();
        InputGate {
            channels: channels
                .into_iter()
                .map(|rx| Channel { rx, ended: false })
                .collect(),
            next: 0,
            live: n,
            valve: WatermarkValve::new(n),
            aligner: BarrierAligner::new(n),
            barrier: None,
            pending: VecDeque::new(),
            description,
        }
    }

    /// Queues what barrier alignment decided.
    fn queue_alignment(&mut self, events: Vec<AlignEvent>, barrier: CheckpointBarrier) {
        for e in events {
            match e {
                AlignEvent::Abandoned(id) => self.pending.push_back(InputEvent::Abandoned(id)),
                AlignEvent::Aligned(id) => self
                    .pending
                    .push_back(InputEvent::Barrier(CheckpointBarrier { id, ..barrier })),
            }
        }
    }

    /// Queues a valve update as events: the status change first, then the watermark.
    fn queue_valve(&mut self, out: ValveOutput) {
        if let Some(s) = out.status {
            self.pending.push_back(InputEvent::Status(s));
        }
        if let Some(w) = out.watermark {
            self.pending.push_back(InputEvent::Watermark(w));
        }
    }
}

impl<T: Data> TaskInput<T> for InputGate<T> {
    fn abort_checkpoint(&mut self, id: CheckpointId) {
        self.aligner.abandon(id);
    }

    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Result<InputEvent<T>, TaskError>> {
        if let Some(e) = self.pending.pop_front() {
            return Poll::Ready(Ok(e));
        }
        if self.live == 0 {
            return Poll::Ready(Ok(InputEvent::End));
        }
        let n = self.channels.len();
        let mut tried = 0;
        while tried < n {
            let i = self.next;
            if self.channels[i].ended || self.aligner.is_blocked(i) {
                self.next = (i + 1) % n;
                tried += 1;
                continue;
            }
            match self.channels[i].rx.poll_recv(cx) {
                Poll::Ready(Some(StreamElement::Records(batch))) => {
                    self.next = (i + 1) % n;
                    return Poll::Ready(Ok(InputEvent::Records(batch)));
                }
                Poll::Ready(Some(StreamElement::Watermark(w))) => {
                    let out = self.valve.on_watermark(i, w);
                    self.queue_valve(out);
                }
                Poll::Ready(Some(StreamElement::Status(s))) => {
                    let out = self.valve.on_status(i, s);
                    self.queue_valve(out);
                }
                Poll::Ready(Some(StreamElement::Barrier(b))) => {
                    let events = self.aligner.on_barrier(i, b.id);
                    self.barrier = Some(b);
                    self.queue_alignment(events, b);
                }
                Poll::Ready(Some(StreamElement::EndOfInput)) => {
                    self.channels[i].ended = true;
                    self.live -= 1;
                    let out = self.valve.on_end(i);
                    self.queue_valve(out);
                    let events = self.aligner.on_end(i);
                    if let Some(b) = self.barrier {
                        self.queue_alignment(events, b);
                    }
                    if self.live == 0 {
                        self.pending.push_back(InputEvent::End);
                    }
                }
                Poll::Ready(None) => {
                    return Poll::Ready(Err(TaskError::PeerGone(format!(
                        "{}: upstream channel {i} closed before end of input",
                        self.description
                    ))));
                }
                Poll::Pending => {
                    self.next = (i + 1) % n;
                    tried += 1;
                }
            }
            if let Some(e) = self.pending.pop_front() {
                return Poll::Ready(Ok(e));
            }
        }
        Poll::Pending
    }
}
