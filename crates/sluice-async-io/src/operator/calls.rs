//! How the operator makes its calls: [`Invoker`] is the one thing that differs between the
//! per-record operator ([`PerRecord`]: one user future per record) and the batched one
//! ([`Batches`]: records grouped into batches, one user future per batch). Everything else —
//! slots, capacity, queues, deadlines, retries, snapshots — is the same operator.
//!
//! A batched record holds its slot like any record in flight: it counts against capacity, has
//! a deadline, and is in every snapshot; but it has no future of its own. [`Batches`] keeps, for
//! each record waiting in the batch being filled or in a batch sent, its slot and a *ticket*:
//! the slot's generation when the attempt started. When a batch answers, each record's outcome
//! is handed back to the operator by slot ([`Invoker::drive`]'s `answers`), which completes it
//! exactly as it completes a finished future (retry decision, completion queue). A record that
//! times out has its slot's ticket moved on ([`Invoker::cancel`]): it is left out of the batch
//! if that was not sent yet, and its answer is ignored otherwise; a sent batch whose records
//! all went is dropped. So a batch costs a few vectors, and a record costs no allocation, no
//! channel and no wake-up of its own.
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
use sluice_core::UserError;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;
use tokio::time::Instant;

/// The outcome of one attempt of the record in a slot, handed back by [`Invoker::drive`].
pub(crate) type Answer<R> = (usize, Result<R, UserError>);

/// How the operator turns an attempt of a record into a call.
///
/// `Clone` gives a fresh instance with the same settings and nothing pending (one per subtask).
pub(crate) trait Invoker<In, F: AsyncFunction<In>>: Clone {
    /// The future of one attempt of one record, for invokers that make one per record.
    type Fut: Future<Output = Result<F::Results, UserError>>;

    /// Starts attempt `attempt` of `input`, held in `slot`, at `now`. Returns the attempt's
    /// future, or `None` when the invoker answers the slot itself, through
    /// [`drive`](Self::drive)'s `answers`.
    fn invoke(
        &mut self,
        func: &F,
        slot: usize,
        input: In,
        attempt: u32,
        now: Instant,
    ) -> Option<Self::Fut>;

    /// Sends what is due and drives grouped calls; `more_can_join` says whether a record could
    /// still join a pending group (a slot is free). Appends to `answers` the outcome of every
    /// attempt answered (only attempts still live: not cancelled, slot not reused). Returns
    /// whether anything happened.
    fn drive(
        &mut self,
        func: &F,
        cx: &mut Context<'_>,
        now: &mut LazyNow,
        more_can_join: bool,
        answers: &mut Vec<Answer<F::Results>>,
    ) -> Result<bool, UserError> {
        let _ = (func, cx, now, more_can_join, answers);
        Ok(false)
    }

    /// The attempt running in `slot` is abandoned (its record timed out): never answer it.
    fn cancel(&mut self, slot: usize) {
        let _ = slot;
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
    fn invoke(
        &mut self,
        func: &F,
        _slot: usize,
        input: In,
        _attempt: u32,
        _now: Instant,
    ) -> Option<Fut> {
        Some((self.call)(func, input))
    }
}

/// A record in a batch: its slot, the ticket of its attempt, and which attempt it is.
#[derive(Clone, Copy, Debug)]
struct Member {
    slot: usize,
    ticket: u64,
    attempt: u32,
}

/// A record waiting for its batch to be sent.
struct Waiting<In> {
    input: In,
    arrived: Instant,
    member: Member,
}

/// The generation of each slot's attempt: a member is live while its ticket is its slot's.
#[derive(Debug, Default)]
struct Tickets(Vec<u64>);

impl Tickets {
    /// A new ticket for `slot`, invalidating the one before.
    #[inline]
    fn next(&mut self, slot: usize) -> u64 {
        if slot >= self.0.len() {
            self.0.resize(slot + 1, 0);
        }
        self.0[slot] = self.0[slot].wrapping_add(1);
        self.0[slot]
    }

    /// Moves `slot` on, so that its current member is no longer live.
    #[inline]
    fn revoke(&mut self, slot: usize) {
        if let Some(t) = self.0.get_mut(slot) {
            *t = t.wrapping_add(1);
        }
    }

    #[inline]
    fn live(&self, m: &Member) -> bool {
        self.0.get(m.slot) == Some(&m.ticket)
    }
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
    pending: Vec<Waiting<In>>,
    flushing: bool,
    sent: FutureSlab<BFut>,
    /// The members of each sent batch, by its slot in `sent`.
    members: Vec<Option<Vec<Member>>>,
    /// Member lists of answered batches, kept for the next ones.
    spare: Vec<Vec<Member>>,
    tickets: Tickets,
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
            spare: Vec::new(),
            tickets: Tickets::default(),
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
    fn send_batch<B>(&mut self, func: &B, answers: &mut Vec<Answer<R>>) -> Result<(), UserError>
    where
        S: Fn(&B, Vec<In>) -> BFut,
    {
        let take = self.pending.len().min(self.settings.max_size);
        let mut inputs = Vec::with_capacity(take);
        let mut members = self.spare.pop().unwrap_or_default();
        members.clear();
        members.reserve(take);
        for w in self.pending.drain(..take) {
            if self.tickets.live(&w.member) {
                inputs.push(w.input);
                members.push(w.member);
            }
        }
        if members.is_empty() {
            self.spare.push(members);
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
        self.poll_sent(slot, answers)
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
                .is_some_and(|m| !m.iter().any(|m| self.tickets.live(m)));
            if abandoned {
                *members = None;
                self.sent.cancel(slot);
                self.sent.release(slot);
            }
        }
        self.sent.acquire()
    }

    /// Polls the batch in `slot`; when it answered, appends each live record's outcome.
    fn poll_sent(&mut self, slot: usize, answers: &mut Vec<Answer<R>>) -> Result<(), UserError> {
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
        let mut members = self.members[slot].take().unwrap_or_default();
        self.sent.release(slot);
        self.answer(&members, outcome, answers);
        members.clear();
        self.spare.push(members);
        Ok(())
    }

    /// Appends every live member's outcome to `answers` (members whose record timed out meanwhile
    /// are skipped).
    fn answer(
        &self,
        members: &[Member],
        outcome: Result<Vec<R>, UserError>,
        answers: &mut Vec<Answer<R>>,
    ) {
        let live = |m: &&Member| self.tickets.live(m);
        let results = match outcome {
            Ok(results) if results.len() == members.len() => results,
            Ok(results) => {
                let e = AsyncBatchError::WrongCount {
                    expected: members.len(),
                    got: results.len(),
                };
                answers.extend(
                    members
                        .iter()
                        .filter(live)
                        .map(|m| (m.slot, Err(Box::new(e.clone()) as UserError))),
                );
                return;
            }
            Err(e) => {
                let shared: Arc<dyn std::error::Error + Send + Sync> = Arc::from(e);
                answers.extend(members.iter().filter(live).map(|m| {
                    let e = AsyncBatchError::Batch(shared.clone());
                    (m.slot, Err(Box::new(e) as UserError))
                }));
                return;
            }
        };
        // As when each record answered on its own: every member's result counts for the
        // decision, also one whose record timed out since.
        let whole = self.settings.scope == BatchRetryScope::WholeBatch
            && members
                .iter()
                .zip(&results)
                .any(|(m, r)| retries_result(&self.retry, m.attempt, r));
        answers.reserve(members.len());
        for (m, r) in members.iter().zip(results) {
            if !self.tickets.live(m) {
                continue;
            }
            let outcome = if whole && self.retry.delay_after(m.attempt).is_some() {
                Err(Box::new(AsyncBatchError::RetriedWithBatch) as UserError)
            } else {
                Ok(r)
            };
            answers.push((m.slot, outcome));
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
    /// Never made: every record is answered through `drive`.
    type Fut = std::future::Pending<Result<B::Results, UserError>>;

    #[inline]
    fn invoke(
        &mut self,
        _func: &Batched<B>,
        slot: usize,
        input: In,
        attempt: u32,
        now: Instant,
    ) -> Option<Self::Fut> {
        let ticket = self.tickets.next(slot);
        self.pending.push(Waiting {
            input,
            arrived: now,
            member: Member {
                slot,
                ticket,
                attempt,
            },
        });
        None
    }

    fn drive(
        &mut self,
        func: &Batched<B>,
        cx: &mut Context<'_>,
        now: &mut LazyNow,
        more_can_join: bool,
        answers: &mut Vec<Answer<B::Results>>,
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
            self.send_batch(&func.0, answers)?;
            progressed = true;
        }
        let mut woken = std::mem::take(&mut self.scratch);
        self.sent.take_woken(&mut woken);
        let mut result = Ok(());
        for &slot in &woken {
            if self.members.get(slot).is_some_and(Option::is_some) {
                progressed = true;
                result = self.poll_sent(slot, answers);
                if result.is_err() {
                    break;
                }
            }
        }
        woken.clear();
        self.scratch = woken;
        result.map(|()| progressed)
    }

    #[inline]
    fn cancel(&mut self, slot: usize) {
        self.tickets.revoke(slot);
    }

    fn next_wakeup(&self) -> Option<Instant> {
        let first = self.pending.first()?;
        Some(super::requests::add(first.arrived, self.settings.max_delay))
    }

    fn flush(&mut self) {
        self.flushing = true;
    }

    fn cancel_all(&mut self) {
        for w in &self.pending {
            self.tickets.revoke(w.member.slot);
        }
        self.pending.clear();
        self.sent.cancel_all();
        for m in self.members.iter().flatten() {
            for m in m {
                self.tickets.revoke(m.slot);
            }
        }
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
