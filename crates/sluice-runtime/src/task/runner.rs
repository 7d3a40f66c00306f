//! The task loop: one async loop per subtask of a chain, Flink's mailbox.
//!
//! Each turn it handles, in this order: messages from the job master (checkpoint triggers and
//! notifications, operator events), the operators' pending work, room in the output channels,
//! and finally one input event, if every operator can take more. Input is the only thing that
//! waits for output room: a backpressured task still takes checkpoints and operator events.
//!
//! Time accounting, per operator of the chain (Flink's busy and backpressured time per second):
//! the time spent polling is busy; the time waiting for room in a full output channel is
//! backpressured. The time the input waits because an operator of the chain refuses more (an
//! async operator with every request slot taken) is busy for that operator and the ones after
//! it, as Flink counts a task blocked in its async operator's full queue as busy, and
//! backpressured for the operators before it: they are held back by it as a task is held back
//! by a busy one downstream. So the bottleneck reads busy and what feeds it backpressured, also
//! inside one chain ([`charge_input_wait`]).
//!
//! Keyed stores: a chain whose operators call a keyed store (RocksDB) may wait on disk in a
//! batch, a watermark (timers firing), a checkpoint (the store's flush), its opening (a restore)
//! or its closing. Such a task runs on a thread of its own ([`crate::task::thread`]), as Flink
//! runs each task. Where it runs on a worker after all (its thread could not start), it runs
//! those calls inside [`tokio::task::block_in_place`], so that the worker's other tasks (the job
//! master, timers, other subtasks, the uploads) move to another thread meanwhile
//! ([`off_worker`]); on its own thread that is a no-op.
//!
//! Lifecycle: running → finishing (input ended; operators drain) → lingering (with checkpointing:
//! waits for the final checkpoint, still answering triggers) → done.

use crate::error::TaskError;
use crate::metrics::OperatorMetrics;
use crate::task::chain::ChainStage;
use crate::task::control::{AttemptReport, DeclineReason, TaskControl, TaskMailbox, TaskReport};
use crate::task::input::{InputEvent, TaskInput};
use sluice_core::{CheckpointBarrier, CheckpointId};
use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How many input events or mailbox messages a task handles before it yields to the scheduler,
/// so that one busy task cannot starve others on its worker thread and a cancel takes effect
/// promptly.
const EVENTS_PER_POLL: u32 = 64;

/// How long a task works before it yields, whatever the number of events: 64 batches through
/// an operator that reads a keyed store for each record take most of a second, and whatever
/// the task woke meanwhile waits for the worker thread that long (tokio runs a task woken from
/// another in that thread's next slot, which no other thread steals).
const SLICE: Duration = Duration::from_millis(5);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Running,
    Finishing,
    Lingering,
}

/// One subtask of one chain: an input, the chain, its mailbox, and the metrics it reports busy
/// time into.
pub(crate) struct Task<T> {
    input: Box<dyn TaskInput<T>>,
    chain: Box<dyn ChainStage<T>>,
    metrics: Vec<Arc<OperatorMetrics>>,
    mailbox: TaskMailbox,
    phase: Phase,
    last_checkpoint: CheckpointId,
    deferred_trigger: Option<CheckpointBarrier>,
    backpressured_since: Option<Instant>,
    input_wait: Option<InputWait>,
    /// The task reported to the job master: it yields before it goes on, so that the master,
    /// woken on this worker thread, handles the report now and not after the next slice (a
    /// checkpoint completes only once the master has every acknowledgement).
    reported: bool,
    /// The chain calls a keyed store: its batches, watermarks and checkpoints run off the
    /// worker ([`off_worker`]).
    store_calls: bool,
}

/// Runs `work`, when `store_calls`, through [`crate::operator::blocking`], so that it may
/// block: the worker's other tasks move to another thread while it runs.
fn off_worker<R>(store_calls: bool, work: impl FnOnce() -> R) -> R {
    if store_calls {
        crate::operator::blocking(work)
    } else {
        work()
    }
}

/// The input waiting on an operator of the chain that refuses more: since when (tokio's clock,
/// so that a test with a paused clock sees the wait it advanced through), and the operator's
/// place in the chain (the index into the task's metrics, head first).
#[derive(Clone, Copy, Debug)]
struct InputWait {
    since: tokio::time::Instant,
    blocker: usize,
}

/// Charges `waited`, a wait of the input on the chain's operator at `blocker`, to the metrics of
/// the chain's operators (head first): backpressured for those before it, busy for it and those
/// after it.
fn charge_input_wait(metrics: &[Arc<OperatorMetrics>], blocker: usize, waited: Duration) {
    for (i, m) in metrics.iter().enumerate() {
        if i < blocker {
            m.add_backpressured(waited);
        } else {
            m.add_busy(waited);
        }
    }
}

enum Step {
    Continue,
    Exit,
}

impl<T: Send + 'static> Task<T> {
    pub(crate) fn new(
        input: Box<dyn TaskInput<T>>,
        chain: Box<dyn ChainStage<T>>,
        metrics: Vec<Arc<OperatorMetrics>>,
        mailbox: TaskMailbox,
    ) -> Self {
        Task {
            input,
            chain,
            metrics,
            mailbox,
            phase: Phase::Running,
            last_checkpoint: CheckpointId(0),
            deferred_trigger: None,
            backpressured_since: None,
            input_wait: None,
            reported: false,
            store_calls: false,
        }
    }

    /// Marks the task's chain as one that calls a keyed store ([`off_worker`]).
    pub(crate) fn with_store_calls(mut self, store_calls: bool) -> Self {
        self.store_calls = store_calls;
        self
    }

    /// Whether the task's chain calls a keyed store: it then runs on a thread of its own
    /// ([`crate::task::thread`]).
    pub(crate) fn calls_a_store(&self) -> bool {
        self.store_calls
    }

    /// Runs the task to the end (or until it fails), then closes its operators.
    pub(crate) async fn run(mut self) -> Result<(), TaskError> {
        let store_calls = self.store_calls;
        let opened = off_worker(store_calls, || self.chain.open());
        let result = match opened {
            Ok(()) => poll_fn(|cx| self.poll_timed(cx)).await,
            Err(e) => Err(e),
        };
        let closed = off_worker(store_calls, || self.chain.close());
        result.and(closed)
    }

    fn poll_timed(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        if let Some(wait) = self.input_wait.take() {
            charge_input_wait(&self.metrics, wait.blocker, wait.since.elapsed());
        }
        let start = Instant::now();
        let r = self.poll_loop(cx);
        let busy = start.elapsed();
        for m in &self.metrics {
            m.add_busy(busy);
        }
        r
    }

    /// Notes that the input waits on the first operator of the chain that refuses more.
    fn note_input_wait(&mut self) {
        if self.input_wait.is_some() {
            return;
        }
        let Some(blocker) = self.chain.input_blocker() else {
            return;
        };
        if let Some(blocker) = self.metrics.iter().position(|m| Arc::ptr_eq(m, blocker)) {
            self.input_wait = Some(InputWait {
                since: tokio::time::Instant::now(),
                blocker,
            });
        }
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

    fn report(&mut self, report: TaskReport) -> Result<(), TaskError> {
        let tagged = AttemptReport {
            attempt: self.mailbox.attempt,
            report,
        };
        self.reported = true;
        self.mailbox.reports.try_send(tagged).map_err(|e| {
            TaskError::PeerGone(format!(
                "task {} could not report to the job master: {e}",
                self.mailbox.task
            ))
        })
    }

    /// Snapshots the source (if any) and every operator, forwards the barrier, acknowledges.
    fn take_checkpoint(&mut self, barrier: CheckpointBarrier) -> Result<(), TaskError> {
        let id = barrier.id;
        if id <= self.last_checkpoint {
            return Ok(());
        }
        let mut states = Vec::new();
        if let Some(s) = self.input.snapshot(id)? {
            states.push(s);
        }
        let chain = &mut self.chain;
        off_worker(self.store_calls, || chain.checkpoint(barrier, &mut states))?;
        self.last_checkpoint = id;
        self.report(TaskReport::Ack {
            task: self.mailbox.task,
            checkpoint: id,
            states,
        })
    }

    fn handle_control(&mut self, msg: TaskControl) -> Result<Step, TaskError> {
        match msg {
            TaskControl::TriggerCheckpoint(b) => match self.phase {
                Phase::Running if self.input.is_source() => self.take_checkpoint(b)?,
                Phase::Lingering => self.take_checkpoint(b)?,
                Phase::Finishing => self.deferred_trigger = Some(b),
                // Barriers reach tasks that are not sources through their inputs.
                Phase::Running => {}
            },
            TaskControl::NotifyComplete(id) => {
                self.input.notify_checkpoint_complete(id)?;
                self.chain.notify_checkpoint(id, true)?
            }
            TaskControl::NotifyAborted(id) => {
                self.input.abort_checkpoint(id);
                self.chain.notify_checkpoint(id, false)?;
            }
            TaskControl::OperatorEvent { target, event } => {
                if self.input.event_target() == Some(target) {
                    self.input.handle_event(event)?
                } else {
                    self.chain.handle_event(target, event)?
                }
            }
            TaskControl::Finish => return Ok(Step::Exit),
        }
        Ok(Step::Continue)
    }

    fn poll_loop(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), TaskError>> {
        let mut budget = EVENTS_PER_POLL;
        let started = Instant::now();
        loop {
            if budget == 0 || self.reported || started.elapsed() >= SLICE {
                self.reported = false;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            match self.mailbox.control.poll_recv(cx) {
                Poll::Ready(Some(msg)) => {
                    budget -= 1;
                    match self.handle_control(msg)? {
                        Step::Continue => continue,
                        Step::Exit => return Poll::Ready(Ok(())),
                    }
                }
                Poll::Ready(None) => {
                    return Poll::Ready(Err(TaskError::PeerGone(format!(
                        "task {}: the job master went away",
                        self.mailbox.task
                    ))));
                }
                Poll::Pending => {}
            }
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
            match self.phase {
                Phase::Lingering => return Poll::Pending,
                Phase::Finishing => match self.chain.poll_finish(cx)? {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(()) => {
                        if !self.mailbox.checkpointing {
                            return Poll::Ready(Ok(()));
                        }
                        self.phase = Phase::Lingering;
                        self.report(TaskReport::FinishedInput {
                            task: self.mailbox.task,
                        })?;
                        if let Some(b) = self.deferred_trigger.take() {
                            self.take_checkpoint(b)?;
                        }
                        continue;
                    }
                },
                Phase::Running => {}
            }
            if self.chain.input_blocked() {
                self.note_input_wait();
                return Poll::Pending;
            }
            budget -= 1;
            match self.input.poll_next(cx) {
                Poll::Ready(Ok(InputEvent::Records(batch))) => {
                    let chain = &mut self.chain;
                    off_worker(self.store_calls, || chain.process_batch(batch))?
                }
                Poll::Ready(Ok(InputEvent::Watermark(w))) => {
                    let chain = &mut self.chain;
                    off_worker(self.store_calls, || chain.process_watermark(w))?
                }
                Poll::Ready(Ok(InputEvent::Status(s))) => self.chain.process_status(s)?,
                Poll::Ready(Ok(InputEvent::Barrier(b))) => self.take_checkpoint(b)?,
                Poll::Ready(Ok(InputEvent::Abandoned(id))) => self.report(TaskReport::Decline {
                    task: self.mailbox.task,
                    checkpoint: id,
                    reason: DeclineReason::Subsumed,
                })?,
                Poll::Ready(Ok(InputEvent::End)) => self.phase = Phase::Finishing,
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

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::Batch;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::mpsc;

    /// A source that always has one more batch, counting the batches it gave.
    struct Endless(Arc<AtomicUsize>);

    impl TaskInput<u64> for Endless {
        fn poll_next(&mut self, _: &mut Context<'_>) -> Poll<Result<InputEvent<u64>, TaskError>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Poll::Ready(Ok(InputEvent::Records(Batch::new(vec![1]))))
        }
        fn is_source(&self) -> bool {
            true
        }
    }

    /// A busy task that acknowledges a checkpoint yields at once, so that the job master, woken
    /// by the acknowledgement on the same worker thread, runs before the task's next slice.
    #[test]
    fn a_task_yields_right_after_it_acknowledges_a_checkpoint() {
        let batches = Arc::new(AtomicUsize::new(0));
        let (control_tx, control) = mpsc::channel(4);
        let (reports, mut acks) = mpsc::channel(4);
        let mailbox = TaskMailbox {
            task: 0,
            attempt: 0,
            control,
            reports,
            checkpointing: true,
        };
        // Each batch the source gives goes through the chain at once.
        let mut task = Task::new(
            Box::new(Endless(batches.clone())),
            Box::new(crate::task::chain::NullStage),
            Vec::new(),
            mailbox,
        );
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(task.poll_loop(&mut cx).is_pending());
        let busy = batches.load(Ordering::Relaxed);
        assert!(busy > 1, "a slice takes batches until its budget: {busy}");

        let barrier = CheckpointBarrier {
            id: CheckpointId(1),
            timestamp_ms: 0,
        };
        control_tx
            .try_send(TaskControl::TriggerCheckpoint(barrier))
            .unwrap();
        assert!(task.poll_loop(&mut cx).is_pending());
        assert!(
            matches!(
                acks.try_recv(),
                Ok(AttemptReport {
                    report: TaskReport::Ack { .. },
                    ..
                })
            ),
            "the checkpoint was acknowledged"
        );
        assert_eq!(
            batches.load(Ordering::Relaxed),
            busy,
            "no batch after the acknowledgement in the same slice"
        );
        // The next slice works again.
        assert!(task.poll_loop(&mut cx).is_pending());
        assert!(batches.load(Ordering::Relaxed) > busy);
    }
}
