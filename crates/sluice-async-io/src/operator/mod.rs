//! [`AsyncWaitOperator`]: the operator that keeps up to `capacity` user futures in flight per
//! subtask and emits their results in the configured order.
//!
//! How a record travels:
//! 1. `process_batch` takes records while a slot is free. Each gets a copy of its input kept in
//!    its slot (for retries, timeouts, error messages and snapshots), its future is created and
//!    polled once at once. A future that is ready on that first poll and may leave at once (the
//!    queue says so) is emitted directly, touching neither the queue nor the timers. Records that
//!    find no free slot stay in the backlog, and the operator reports its input blocked.
//! 2. `poll_pending` polls the futures whose wakers fired, admits backlog records into freed
//!    slots, handles expired timeouts and due retries (from one clock read), and pops what the
//!    completion queue lets leave.
//!
//! A record's event time (the batch's timestamp column, when it has one) stays with it in its
//! slot, the backlog and snapshots, and every result of the record is emitted with it, as
//! Flink's async operator keeps the input's `StreamRecord` timestamp.
//!
//! 3. Snapshots store every record still held (in flight, in backoff, completed but not yet
//!    emitted, or in the backlog) and the queued watermarks, in input order; a restore puts them
//!    in the backlog, so they are called again, in order, before any new input.
//!
//! The clock is read once per batch and once per `poll_pending`, never per record. Nothing is
//! allocated per record besides the user's future itself (which lives in a reused slot).

pub(crate) mod calls;
mod checkpoint;
mod poll;
mod requests;
mod state;

#[cfg(test)]
mod tests;

use crate::error::{AsyncCallError, describe};
use crate::function::AsyncFunction;
use crate::metrics::{AsyncMetrics, LocalCounters, SubtaskCounters};
use crate::queue::{AnyQueue, CompletionQueue, Emit, KeyedQueue, OrderedQueue, UnorderedQueue};
use crate::retry::{AsyncRetryStrategy, RetryDecision, decide};
use crate::slab::{FutureSlab, Polled};
use crate::timers::TimerSet;
pub(crate) use calls::{BatchSettings, Batches, Invoker, PerRecord};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sluice_core::{CheckpointId, Data, UserError, Watermark, panic_message};
use sluice_runtime::{Collector, Operator, OperatorContext, OperatorState};
use state::RestoredElement;
use std::collections::VecDeque;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Hashes a record's key for the key-ordered mode.
pub(crate) type KeyFn<In> = Arc<dyn Fn(&In) -> u64 + Send + Sync>;

/// The order in which results leave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Ordered,
    Unordered,
    KeyOrdered,
}

/// Everything fixed when the operator is built.
pub(crate) struct Settings<In, R> {
    pub(crate) capacity: usize,
    pub(crate) timeout: Option<Duration>,
    pub(crate) mode: Mode,
    pub(crate) retry: AsyncRetryStrategy<R>,
    pub(crate) key_fn: Option<KeyFn<In>>,
    pub(crate) metrics: AsyncMetrics,
}

impl<In, R> Clone for Settings<In, R> {
    fn clone(&self) -> Self {
        Settings {
            capacity: self.capacity,
            timeout: self.timeout,
            mode: self.mode,
            retry: self.retry.clone(),
            key_fn: self.key_fn.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

/// Where the operator puts what it emits: the runtime's [`Collector`], or a plain vector in
/// tests.
pub(crate) trait Emitter<T> {
    fn record(&mut self, record: T, timestamp: Option<i64>);
    fn watermark(&mut self, watermark: Watermark);
}

impl<T> Emitter<T> for Collector<T> {
    #[inline]
    fn record(&mut self, record: T, timestamp: Option<i64>) {
        self.collect_timed(record, timestamp);
    }
    fn watermark(&mut self, watermark: Watermark) {
        self.emit_watermark(watermark);
    }
}

/// What a held record is doing.
enum Phase<R> {
    /// Its future is in the slab.
    Running,
    /// Waiting for its retry time (or, restored with no budget left, for its timeout).
    Backoff,
    /// Final results, waiting for their turn to leave.
    Done(R),
}

/// A record held in a slot.
struct Entry<In, R> {
    input: In,
    /// The input's event time, given to each of its results.
    timestamp: Option<i64>,
    seq: u64,
    /// The attempt running now, or the last one that ended (1-based).
    attempt: u32,
    /// When its first attempt started (restored records: shifted back by the time already used).
    started: Instant,
    phase: Phase<R>,
}

/// Input accepted but not yet admitted into a slot.
enum Backlog<In> {
    /// The rest of a batch that did not fit.
    Batch(Remaining<In>),
    /// A restored record.
    Restored {
        input: In,
        timestamp: Option<i64>,
        attempts_done: u32,
        elapsed: Duration,
    },
    /// A watermark that arrived (or was restored) behind backlog records.
    Watermark(Watermark),
}

/// The records of a batch not admitted yet, with their event times when the batch had them.
pub(crate) struct Remaining<In> {
    records: std::vec::IntoIter<In>,
    timestamps: Option<std::vec::IntoIter<i64>>,
}

impl<In> Remaining<In> {
    fn new(records: Vec<In>, timestamps: Option<Vec<i64>>) -> Self {
        Remaining {
            records: records.into_iter(),
            timestamps: timestamps.map(Vec::into_iter),
        }
    }

    #[inline]
    fn next(&mut self) -> Option<(In, Option<i64>)> {
        let r = self.records.next()?;
        let t = self.timestamps.as_mut().and_then(Iterator::next);
        Some((r, t.filter(|t| *t != sluice_core::NO_TIMESTAMP)))
    }

    #[inline]
    fn len(&self) -> usize {
        self.records.len()
    }

    /// The remaining records with their event times.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&In, Option<i64>)> {
        let ts = self.timestamps.as_ref().map(|t| t.as_slice());
        self.records
            .as_slice()
            .iter()
            .enumerate()
            .map(move |(i, r)| {
                let t = ts
                    .map(|ts| ts[i])
                    .filter(|t| *t != sluice_core::NO_TIMESTAMP);
                (r, t)
            })
    }
}

/// Reads the clock at most once.
#[derive(Default)]
pub(crate) struct LazyNow(Option<Instant>);

impl LazyNow {
    #[inline]
    pub(crate) fn get(&mut self) -> Instant {
        *self.0.get_or_insert_with(Instant::now)
    }
}

/// The async wait operator. Built by [`AsyncWait`](crate::AsyncWait); see the module docs.
///
/// `I` is how calls are made ([`calls::Invoker`]): one future per record, or records grouped
/// into batches. Being a type parameter, it lets the operator name the user's future type
/// without boxing it.
pub(crate) struct AsyncWaitOperator<In, F: AsyncFunction<In>, I: Invoker<In, F>> {
    func: F,
    invoke: I,
    settings: Settings<In, F::Results>,
    slab: FutureSlab<I::Fut>,
    entries: Vec<Option<Entry<In, F::Results>>>,
    queue: AnyQueue,
    deadlines: TimerSet<Instant>,
    retries: TimerSet<Instant>,
    backlog: VecDeque<Backlog<In>>,
    next_seq: u64,
    input_ended: bool,
    finishing: bool,
    timer: Option<Pin<Box<Sleep>>>,
    timer_at: Option<Instant>,
    /// Retries due now, without delay (after end of input).
    retry_now: Vec<usize>,
    scratch: Vec<usize>,
    /// Outcomes the invoker handed back by slot (batched records), reused between polls.
    answers: Vec<calls::Answer<F::Results>>,
    local: LocalCounters,
    counters: Option<Arc<SubtaskCounters>>,
    _in: PhantomData<fn(In)>,
}

impl<In, F, I> Clone for AsyncWaitOperator<In, F, I>
where
    In: Data,
    F: AsyncFunction<In>,
    I: Invoker<In, F>,
{
    /// A fresh instance with the same function and settings and nothing in flight.
    fn clone(&self) -> Self {
        Self::new(
            self.func.clone(),
            self.invoke.clone(),
            self.settings.clone(),
        )
    }
}

impl<In, F, I> AsyncWaitOperator<In, F, I>
where
    In: Data,
    F: AsyncFunction<In>,
    I: Invoker<In, F>,
{
    pub(crate) fn new(func: F, invoke: I, settings: Settings<In, F::Results>) -> Self {
        let capacity = settings.capacity;
        let queue = match settings.mode {
            Mode::Ordered => AnyQueue::Ordered(OrderedQueue::new(capacity)),
            Mode::Unordered => AnyQueue::Unordered(UnorderedQueue::new(capacity)),
            Mode::KeyOrdered => AnyQueue::Keyed(KeyedQueue::new(capacity)),
        };
        AsyncWaitOperator {
            func,
            invoke,
            slab: FutureSlab::new(capacity),
            entries: Vec::new(),
            queue,
            deadlines: TimerSet::default(),
            retries: TimerSet::default(),
            backlog: VecDeque::new(),
            next_seq: 0,
            input_ended: false,
            finishing: false,
            timer: None,
            timer_at: None,
            retry_now: Vec::new(),
            scratch: Vec::new(),
            answers: Vec::new(),
            local: LocalCounters::default(),
            counters: None,
            settings,
            _in: PhantomData,
        }
    }

    fn open_impl(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.func.open(ctx)?;
        let counters = self.settings.metrics.register(ctx.subtask_index());
        // The job's live view reads the same counters, when it reads them.
        ctx.metrics().register_source("async", counters.clone());
        self.counters = Some(counters);
        Ok(())
    }

    fn close_impl(&mut self) -> Result<(), UserError> {
        self.slab.cancel_all();
        self.invoke.cancel_all();
        self.publish();
        self.func.close()
    }

    /// Whether the operator takes no more input now.
    #[inline]
    fn blocked(&self) -> bool {
        !self.backlog.is_empty() || self.slab.free_slots() == 0
    }

    /// Whether anything is still held.
    fn pending(&self) -> bool {
        self.slab.occupied() > 0 || !self.backlog.is_empty() || !self.queue.is_empty()
    }

    fn publish(&mut self) {
        self.local.batches_sent(self.invoke.take_sent());
        if let Some(c) = &self.counters {
            self.local.publish(c, self.slab.occupied());
        }
    }

    // ---- input ------------------------------------------------------------------------------

    fn on_batch<E: Emitter<F::Out>>(
        &mut self,
        batch: Vec<In>,
        timestamps: Option<Vec<i64>>,
        out: &mut E,
    ) -> Result<(), UserError> {
        let mut records = Remaining::new(batch, timestamps);
        let result = if self.backlog.is_empty() {
            let now = Instant::now();
            self.admit_from(&mut records, now, out).map(drop)
        } else {
            Ok(())
        };
        if records.len() > 0 {
            self.backlog.push_back(Backlog::Batch(records));
        }
        self.publish();
        result
    }

    fn admit_from<E: Emitter<F::Out>>(
        &mut self,
        records: &mut Remaining<In>,
        now: Instant,
        out: &mut E,
    ) -> Result<usize, UserError> {
        let mut admitted = 0;
        while self.slab.free_slots() > 0 {
            let Some((input, timestamp)) = records.next() else {
                break;
            };
            self.admit(input, timestamp, 1, now, now, out)?;
            admitted += 1;
        }
        Ok(admitted)
    }

    fn on_watermark<E: Emitter<F::Out>>(
        &mut self,
        watermark: Watermark,
        out: &mut E,
    ) -> Result<(), UserError> {
        if self.backlog.is_empty() {
            self.push_watermark(watermark, out);
        } else {
            self.backlog.push_back(Backlog::Watermark(watermark));
        }
        Ok(())
    }

    fn push_watermark<E: Emitter<F::Out>>(&mut self, watermark: Watermark, out: &mut E) {
        if self.queue.is_empty() {
            out.watermark(watermark);
        } else {
            let seq = self.next_seq;
            self.next_seq += 1;
            self.queue.push_watermark(watermark, seq);
            self.drain(out);
        }
    }

    fn on_end_input(&mut self) -> Result<(), UserError> {
        self.input_ended = true;
        self.start_finishing();
        Ok(())
    }

    /// Once the input ended and the backlog is admitted: every delayed retry fires at once, and
    /// later retries skip their delay.
    fn start_finishing(&mut self) {
        if !self.input_ended || self.finishing || !self.backlog.is_empty() {
            return;
        }
        self.finishing = true;
        self.invoke.flush();
        self.retries.take_all(&mut self.retry_now);
    }

    /// Fires the retries that wait for no delay (after end of input), including those their own
    /// attempts schedule.
    fn fire_immediate_retries<E: Emitter<F::Out>>(
        &mut self,
        now: Instant,
        out: &mut E,
    ) -> Result<(), UserError> {
        while !self.retry_now.is_empty() {
            let mut due = std::mem::take(&mut self.retry_now);
            let result = due
                .drain(..)
                .try_for_each(|slot| self.fire_retry(slot, now, out));
            if self.retry_now.is_empty() {
                self.retry_now = due;
            }
            result?;
        }
        Ok(())
    }
}

impl<In, F, I> Operator<In> for AsyncWaitOperator<In, F, I>
where
    In: Data + Serialize + DeserializeOwned,
    F: AsyncFunction<In>,
    I: Invoker<In, F> + Send + 'static,
    I::Fut: Send + 'static,
{
    type Out = F::Out;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.open_impl(ctx)
    }

    #[inline]
    fn process_batch(
        &mut self,
        batch: Vec<In>,
        out: &mut Collector<F::Out>,
    ) -> Result<(), UserError> {
        let timestamps = out.take_input_timestamps();
        self.on_batch(batch, timestamps, out)
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut Collector<F::Out>,
    ) -> Result<(), UserError> {
        self.on_watermark(watermark, out)
    }

    fn end_input(&mut self, _out: &mut Collector<F::Out>) -> Result<(), UserError> {
        self.on_end_input()
    }

    fn close(&mut self) -> Result<(), UserError> {
        self.close_impl()
    }

    fn poll_pending(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Collector<F::Out>,
    ) -> Poll<Result<(), UserError>> {
        self.on_poll(cx, out)
    }

    fn has_pending(&self) -> bool {
        self.pending()
    }

    fn is_input_blocked(&self) -> bool {
        self.blocked()
    }

    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
        _out: &mut Collector<F::Out>,
    ) -> Result<OperatorState, UserError> {
        self.snapshot()
    }

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.restore(state)
    }
}
