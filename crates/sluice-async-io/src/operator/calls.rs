//! How the operator makes its calls: [`Invoker`] is the one thing that differs between the
//! per-record operator ([`PerRecord`]: one user future per record) and the batched one
//! ([`Batches`]: records grouped into batches, one user future per batch). Everything else —
//! slots, capacity, queues, deadlines, retries, snapshots — is the same operator.
//!
//! Every record still gets its own future in its own slot. With batching that future is a
//! [`Reply`]: the receiving end of a one-shot channel whose sender waits in the batch being
//! filled, then in the batch sent. So a record waiting for its batch is held like any record in
//! flight: it counts against capacity, has a deadline, and is in every snapshot. When a batch
//! answers, each record's reply wakes its slot, and the operator polls it as it would poll any
//! finished call. A record that times out drops its reply: it is left out of the batch if that
//! was not sent yet, and its answer is ignored otherwise; a sent batch whose records all went is
//! dropped.
//!
//! When a batch is sent ([`send_now`], a pure rule) — say `max_batch_size = 3`, a 10 ms delay:
//!
//! ```text
//! pending      oldest waited  slots free  input ended  -> send?
//! [a b c]      0 ms           yes         no              yes: full
//! [a b]        4 ms           yes         no              no: wait for more, or for 10 ms
//! [a b]        10 ms          yes         no              yes: the oldest waited the delay
//! [a b]        4 ms           no          no              yes: nothing more can join
//! [a b]        4 ms           yes         yes             yes: nothing more will come
//! ```
//!
//! The delay is a deadline like the timeouts: [`Invoker::next_wakeup`] joins the operator's
//! single timer, which the task loop's pending-work polling drives (and tokio's paused clock
//! controls in tests).

use super::LazyNow;
use crate::batch::{AsyncBatchError, AsyncBatchFunction, BatchRetryScope, Batched};
use crate::error::{AsyncCallError, describe};
use crate::function::AsyncFunction;
use crate::retry::{AsyncRetryStrategy, retries_result};
use crate::slab::{FutureSlab, Polled};
use futures::channel::oneshot;
use sluice_core::UserError;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;

/// How the operator turns an attempt of a record into a future.
///
/// `Clone` gives a fresh instance with the same settings and nothing pending (one per subtask).
pub(crate) trait Invoker<In, F: AsyncFunction<In>>: Clone {
    /// The future of one attempt of one record.
    type Fut: Future<Output = Result<F::Results, UserError>>;

    /// Starts attempt `attempt` of `input` at `now`.
    fn invoke(&mut self, func: &F, input: In, attempt: u32, now: Instant) -> Self::Fut;

    /// Sends what is due and drives grouped calls; `more_can_join` says whether a record could
    /// still join a pending group (a slot is free). Returns whether anything happened.
    fn drive(
        &mut self,
        func: &F,
        cx: &mut Context<'_>,
        now: &mut LazyNow,
        more_can_join: bool,
    ) -> Result<bool, UserError> {
        let _ = (func, cx, now, more_can_join);
        Ok(false)
    }

    /// When [`drive`](Self::drive) must run next even if nothing wakes the task.
    fn next_wakeup(&self) -> Option<Instant> {
        None
    }

    /// The input ended: from now on, send whatever is pending without waiting.
    fn flush(&mut self) {}

    /// Drops everything in flight (the operator closes).
    fn cancel_all(&mut self) {}

    /// Batches sent since the last call (for the metrics).
    fn take_sent(&mut self) -> u64 {
        0
    }
}

/// One call per record: `call(func, input)`, usually `AsyncFunction::invoke`. Being a type
/// parameter, the closure names the user's future type, so it is never boxed.
pub(crate) struct PerRecord<C, Fut> {
    call: C,
    _fut: PhantomData<fn() -> Fut>,
}

impl<C, Fut> PerRecord<C, Fut> {
    pub(crate) fn new(call: C) -> Self {
        PerRecord {
            call,
            _fut: PhantomData,
        }
    }
}

impl<C: Clone, Fut> Clone for PerRecord<C, Fut> {
    fn clone(&self) -> Self {
        PerRecord::new(self.call.clone())
    }
}

impl<In, F, C, Fut> Invoker<In, F> for PerRecord<C, Fut>
where
    F: AsyncFunction<In>,
    C: Fn(&F, In) -> Fut + Clone,
    Fut: Future<Output = Result<F::Results, UserError>>,
{
    type Fut = Fut;

    #[inline(always)]
    fn invoke(&mut self, func: &F, input: In, _attempt: u32, _now: Instant) -> Fut {
        (self.call)(func, input)
    }
}

/// A record's answer from its batch.
///
/// The channel is `futures`' one-shot, not tokio's: tokio's channels take part in tokio's
/// cooperative budget, and a task that spent its budget would see every reply as pending (with
/// its wake-up deferred) however many times the operator polled it. The operator bounds its own
/// work per poll, so its internal hand-over must not be budgeted.
pub(crate) struct Reply<R>(oneshot::Receiver<Result<R, UserError>>);

impl<R> Future for Reply<R> {
    type Output = Result<R, UserError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match Pin::new(&mut self.0).poll(cx) {
            Poll::Ready(Ok(outcome)) => Poll::Ready(outcome),
            Poll::Ready(Err(_)) => Poll::Ready(Err(Box::new(AsyncBatchError::Dropped))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// A record in a batch: where its answer goes, and which attempt it is.
struct Member<R> {
    attempt: u32,
    reply: oneshot::Sender<Result<R, UserError>>,
}

/// A record waiting for its batch to be sent.
struct Waiting<In, R> {
    input: In,
    arrived: Instant,
    member: Member<R>,
}

/// How records are grouped into batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BatchSettings {
    pub(crate) max_size: usize,
    pub(crate) max_delay: Duration,
    pub(crate) scope: BatchRetryScope,
}

/// Whether a batch of `pending` records whose oldest arrived `waited` ago is sent now.
#[inline]
pub(crate) fn send_now(
    settings: &BatchSettings,
    pending: usize,
    waited: Duration,
    more_can_join: bool,
    flushing: bool,
) -> bool {
    pending > 0
        && (pending >= settings.max_size
            || waited >= settings.max_delay
            || !more_can_join
            || flushing)
}

/// Records grouped into batches: one call of `send(batch_function, inputs)` per batch, at most
/// `capacity` batches in flight (each holds at least one live record, and at most `capacity`
/// records are held).
pub(crate) struct Batches<In, R, S, BFut> {
    send: S,
    settings: BatchSettings,
    retry: AsyncRetryStrategy<R>,
    capacity: usize,
    pending: Vec<Waiting<In, R>>,
    flushing: bool,
    sent: FutureSlab<BFut>,
    /// The members of each sent batch, by its slot in `sent`.
    members: Vec<Option<Vec<Member<R>>>>,
    sent_count: u64,
    scratch: Vec<usize>,
}

impl<In, R, S, BFut: Future> Batches<In, R, S, BFut> {
    pub(crate) fn new(
        send: S,
        settings: BatchSettings,
        retry: AsyncRetryStrategy<R>,
        capacity: usize,
    ) -> Self {
        Batches {
            send,
            settings,
            retry,
            capacity,
            pending: Vec::new(),
            flushing: false,
            sent: FutureSlab::new(capacity),
            members: Vec::new(),
            sent_count: 0,
            scratch: Vec::new(),
        }
    }
}

impl<In, R, S: Clone, BFut: Future> Clone for Batches<In, R, S, BFut> {
    fn clone(&self) -> Self {
        Batches::new(
            self.send.clone(),
            self.settings,
            self.retry.clone(),
            self.capacity,
        )
    }
}

impl<In, R, S, BFut> Batches<In, R, S, BFut>
where
    In: std::fmt::Debug + Clone,
    BFut: Future<Output = Result<Vec<R>, UserError>>,
{
    /// Sends the first `max_size` pending records (those still waiting for an answer).
    fn send_batch<B>(&mut self, func: &B, cx: &mut Context<'_>) -> Result<(), UserError>
    where
        S: Fn(&B, Vec<In>) -> BFut,
    {
        let take = self.pending.len().min(self.settings.max_size);
        let mut inputs = Vec::with_capacity(take);
        let mut members = Vec::with_capacity(take);
        for w in self.pending.drain(..take) {
            if !w.member.reply.is_canceled() {
                inputs.push(w.input);
                members.push(w.member);
            }
        }
        if members.is_empty() {
            return Ok(());
        }
        let Some(slot) = self.free_slot() else {
            return Err("async batch calls exceed the operator's capacity".into());
        };
        let attempt = members[0].attempt;
        // Only the first input is kept for a panic message: describing the whole batch up
        // front would cost a formatting pass over every batch sent.
        let (count, first) = (inputs.len(), inputs[0].clone());
        let send = &self.send;
        let fut = catch_unwind(AssertUnwindSafe(|| send(func, inputs))).map_err(|p| {
            Box::new(AsyncCallError::Panicked {
                input: format!("{} (first of a batch of {count})", describe(&first)),
                attempt,
                message: sluice_core::panic_message(p.as_ref()),
            }) as UserError
        })?;
        self.sent_count += 1;
        self.sent.start(slot, fut);
        if slot >= self.members.len() {
            self.members.resize_with(slot + 1, || None);
        }
        self.members[slot] = Some(members);
        self.poll_sent(slot, cx)
    }

    /// A free slot for a batch; batches whose records all went (timed out) are dropped first
    /// if none is free.
    fn free_slot(&mut self) -> Option<usize> {
        if let Some(slot) = self.sent.acquire() {
            return Some(slot);
        }
        for (slot, members) in self.members.iter_mut().enumerate() {
            let abandoned = members
                .as_ref()
                .is_some_and(|m| m.iter().all(|m| m.reply.is_canceled()));
            if abandoned {
                *members = None;
                self.sent.cancel(slot);
                self.sent.release(slot);
            }
        }
        self.sent.acquire()
    }

    /// Polls the batch in `slot`; when it answered, hands each record its result.
    fn poll_sent(&mut self, slot: usize, _cx: &mut Context<'_>) -> Result<(), UserError> {
        let outcome = match self.sent.poll(slot) {
            Polled::Pending | Polled::Empty => return Ok(()),
            Polled::Ready(outcome) => outcome,
            Polled::Panicked(message) => {
                let attempt = self.members[slot]
                    .as_ref()
                    .and_then(|m| m.first())
                    .map_or(1, |m| m.attempt);
                self.members[slot] = None;
                self.sent.release(slot);
                return Err(Box::new(AsyncCallError::Panicked {
                    input: "a batch".to_string(),
                    attempt,
                    message,
                }));
            }
        };
        let members = self.members[slot].take().unwrap_or_default();
        self.sent.release(slot);
        self.answer(members, outcome);
        Ok(())
    }

    /// Gives every member its outcome.
    fn answer(&self, members: Vec<Member<R>>, outcome: Result<Vec<R>, UserError>) {
        let results = match outcome {
            Ok(results) if results.len() == members.len() => results,
            Ok(results) => {
                let e = AsyncBatchError::WrongCount {
                    expected: members.len(),
                    got: results.len(),
                };
                for m in members {
                    let _ = m.reply.send(Err(Box::new(e.clone())));
                }
                return;
            }
            Err(e) => {
                let shared: Arc<dyn std::error::Error + Send + Sync> = Arc::from(e);
                for m in members {
                    let _ = m
                        .reply
                        .send(Err(Box::new(AsyncBatchError::Batch(shared.clone()))));
                }
                return;
            }
        };
        let whole = self.settings.scope == BatchRetryScope::WholeBatch
            && members
                .iter()
                .zip(&results)
                .any(|(m, r)| retries_result(&self.retry, m.attempt, r));
        for (m, r) in members.into_iter().zip(results) {
            let outcome = if whole && self.retry.delay_after(m.attempt).is_some() {
                Err(Box::new(AsyncBatchError::RetriedWithBatch) as UserError)
            } else {
                Ok(r)
            };
            let _ = m.reply.send(outcome);
        }
    }
}

impl<In, B, S, BFut> Invoker<In, Batched<B>> for Batches<In, B::Results, S, BFut>
where
    In: Send + Clone + std::fmt::Debug + 'static,
    B: AsyncBatchFunction<In>,
    S: Fn(&B, Vec<In>) -> BFut + Clone,
    BFut: Future<Output = Result<Vec<B::Results>, UserError>>,
{
    type Fut = Reply<B::Results>;

    fn invoke(&mut self, _func: &Batched<B>, input: In, attempt: u32, now: Instant) -> Self::Fut {
        let (reply, rx) = oneshot::channel();
        self.pending.push(Waiting {
            input,
            arrived: now,
            member: Member { attempt, reply },
        });
        Reply(rx)
    }

    fn drive(
        &mut self,
        func: &Batched<B>,
        cx: &mut Context<'_>,
        now: &mut LazyNow,
        more_can_join: bool,
    ) -> Result<bool, UserError> {
        self.sent.register(cx.waker());
        let mut progressed = false;
        while let Some(first) = self.pending.first() {
            let waited = if self.settings.max_delay.is_zero() {
                Duration::ZERO
            } else {
                now.get().saturating_duration_since(first.arrived)
            };
            let due = send_now(
                &self.settings,
                self.pending.len(),
                waited,
                more_can_join,
                self.flushing,
            );
            if !due {
                break;
            }
            self.send_batch(&func.0, cx)?;
            progressed = true;
        }
        let mut woken = std::mem::take(&mut self.scratch);
        self.sent.take_woken(&mut woken);
        let mut result = Ok(());
        for &slot in &woken {
            if self.members.get(slot).is_some_and(Option::is_some) {
                progressed = true;
                result = self.poll_sent(slot, cx);
                if result.is_err() {
                    break;
                }
            }
        }
        woken.clear();
        self.scratch = woken;
        result.map(|()| progressed)
    }

    fn next_wakeup(&self) -> Option<Instant> {
        let first = self.pending.first()?;
        Some(super::requests::add(first.arrived, self.settings.max_delay))
    }

    fn flush(&mut self) {
        self.flushing = true;
    }

    fn cancel_all(&mut self) {
        self.pending.clear();
        self.sent.cancel_all();
        self.members.clear();
    }

    fn take_sent(&mut self) -> u64 {
        std::mem::take(&mut self.sent_count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_sent_when_full_late_stuck_or_flushing() {
        let s = BatchSettings {
            max_size: 3,
            max_delay: Duration::from_millis(10),
            scope: BatchRetryScope::FailedElements,
        };
        let ms = Duration::from_millis;
        // The table of the module docs, row by row.
        assert!(send_now(&s, 3, ms(0), true, false));
        assert!(!send_now(&s, 2, ms(4), true, false));
        assert!(send_now(&s, 2, ms(10), true, false));
        assert!(send_now(&s, 2, ms(4), false, false));
        assert!(send_now(&s, 2, ms(4), true, true));
        // Nothing pending: nothing to send, whatever else holds.
        assert!(!send_now(&s, 0, ms(99), false, true));
        // A zero delay sends whatever is pending at once.
        let eager = BatchSettings {
            max_delay: Duration::ZERO,
            ..s
        };
        assert!(send_now(&eager, 1, Duration::ZERO, true, false));
    }
}
