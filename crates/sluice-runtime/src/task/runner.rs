//! The task loop.

use crate::error::TaskError;
use crate::metrics::OperatorMetrics;
use crate::task::chain::ChainStage;
use crate::task::input::{InputEvent, TaskInput};
use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

/// How many input events a task handles before it yields to the scheduler, so that one busy task
/// cannot starve others on its worker thread and a cancel takes effect promptly.
const EVENTS_PER_POLL: u32 = 64;

/// One subtask of one chain: an input, the chain, and the metrics it reports busy time into.
pub(crate) struct Task<T> {
    input: Box<dyn TaskInput<T>>,
    chain: Box<dyn ChainStage<T>>,
    metrics: Vec<Arc<OperatorMetrics>>,
    input_done: bool,
    backpressured_since: Option<Instant>,
}

impl<T: Send + 'static> Task<T> {
    pub(crate) fn new(
        input: Box<dyn TaskInput<T>>,
        chain: Box<dyn ChainStage<T>>,
        metrics: Vec<Arc<OperatorMetrics>>,
    ) -> Self {
        Task {
            input,
            chain,
            metrics,
            input_done: false,
            backpressured_since: None,
        }
    }

    /// Runs the task to the end of its input (or until it fails), then closes its operators.
    pub(crate) async fn run(mut self) -> Result<(), TaskError> {
        let opened = self.chain.open();
        let result = match opened {
            Ok(()) => poll_fn(|cx| self.poll_timed(cx)).await,
            Err(e) => Err(e),
        };
        let closed = self.chain.close();
        result.and(closed)
    }

    fn poll_timed(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        let start = Instant::now();
        let r = self.poll_loop(cx);
        let busy = start.elapsed();
        for m in &self.metrics {
            m.add_busy(busy);
        }
        r
    }

    fn note_backpressure(&mut self, blocked: bool) {
        match (blocked, self.backpressured_since) {
            (true, None) => self.backpressured_since = Some(Instant::now()),
            (false, Some(since)) => {
                let d = since.elapsed();
                for m in &self.metrics {
                    m.add_backpressured(d);
                }
                self.backpressured_since = None;
            }
            _ => {}
        }
    }

    fn poll_loop(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        let mut budget = EVENTS_PER_POLL;
        loop {
            let progressed = self.chain.poll_work(cx)?;
            match self.chain.poll_flush(cx) {
                Poll::Ready(Ok(())) => self.note_backpressure(false),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    self.note_backpressure(true);
                    return Poll::Pending;
                }
            }
            if progressed {
                continue;
            }
            if self.input_done {
                return self.chain.poll_finish(cx);
            }
            if self.chain.input_blocked() {
                return Poll::Pending;
            }
            if budget == 0 {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            budget -= 1;
            match self.input.poll_next(cx) {
                Poll::Ready(Ok(InputEvent::Records(batch))) => self.chain.process_batch(batch)?,
                Poll::Ready(Ok(InputEvent::Watermark(w))) => self.chain.process_watermark(w)?,
                Poll::Ready(Ok(InputEvent::Status(s))) => self.chain.process_status(s)?,
                Poll::Ready(Ok(InputEvent::End)) => self.input_done = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    // Nothing more is ready: send partial batches now rather than wait for more.
                    self.chain.flush_buffers();
                    return match self.chain.poll_flush(cx) {
                        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                        Poll::Ready(Ok(())) => Poll::Pending,
                        Poll::Pending => {
                            self.note_backpressure(true);
                            Poll::Pending
                        }
                    };
                }
            }
        }
    }
}
