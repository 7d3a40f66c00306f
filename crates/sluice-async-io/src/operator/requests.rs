//! The life of a request: admission into a slot, attempts, retries, timeouts, and emission once
//! the completion queue lets a record leave.

use super::*;

impl<In, F, I> AsyncWaitOperator<In, F, I>
where
    In: Data,
    F: AsyncFunction<In>,
    I: Invoker<In, F>,
{
    /// Admits a new (or restored) record into a free slot and makes its first call.
    #[inline]
    pub(super) fn admit<E: Emitter<F::Out>>(
        &mut self,
        input: In,
        timestamp: Option<i64>,
        attempt: u32,
        started: Instant,
        now: Instant,
        out: &mut E,
    ) -> Result<(), UserError> {
        let key = self.key_of(&input, attempt)?;
        let Some(slot) = self.slab.acquire() else {
            return Err("async wait operator admitted a record without a free slot".into());
        };
        let has_future = start_call(
            &self.func,
            &mut self.invoke,
            &mut self.slab,
            slot,
            &input,
            attempt,
            now,
        )?;
        if !has_future {
            // The invoker answers this slot itself (a batch): nothing to poll.
            self.hold(slot, input, timestamp, key, attempt, started);
            return Ok(());
        }
        match self.slab.poll(slot) {
            Polled::Ready(outcome) => {
                let decision = decide(&self.settings.retry, attempt, &outcome);
                if decision == RetryDecision::Complete && self.queue.emits_at_once(key) {
                    self.slab.release(slot);
                    return match outcome {
                        Ok(results) => {
                            if started == now {
                                self.local.completed_at_once();
                            } else {
                                self.local.completed(now.saturating_duration_since(started));
                            }
                            for r in results {
                                out.record(r, timestamp);
                            }
                            Ok(())
                        }
                        Err(e) => {
                            self.local.failed();
                            Err(fail(&input, attempt, e))
                        }
                    };
                }
                self.hold(slot, input, timestamp, key, attempt, started);
                self.end_attempt(slot, outcome, decision, now, out)
            }
            Polled::Pending => {
                self.hold(slot, input, timestamp, key, attempt, started);
                Ok(())
            }
            Polled::Panicked(message) => {
                self.local.failed();
                Err(Box::new(AsyncCallError::Panicked {
                    input: describe(&input),
                    attempt,
                    message,
                }))
            }
            Polled::Empty => Err("async wait operator lost a request it just started".into()),
        }
    }

    #[inline(always)]
    pub(super) fn key_of(&self, input: &In, attempt: u32) -> Result<u64, UserError> {
        match &self.settings.key_fn {
            None => Ok(0),
            Some(f) => catch_unwind(AssertUnwindSafe(|| f(input))).map_err(|p| {
                Box::new(AsyncCallError::Panicked {
                    input: describe(input),
                    attempt,
                    message: format!("key function: {}", panic_message(p.as_ref())),
                }) as UserError
            }),
        }
    }

    /// Puts a record whose first call is running (or just ended) into its slot, the queue and the
    /// deadlines.
    pub(super) fn hold(
        &mut self,
        slot: usize,
        input: In,
        timestamp: Option<i64>,
        key: u64,
        attempt: u32,
        started: Instant,
    ) {
        let seq = self.next_seq;
        self.next_seq += 1;
        if slot >= self.entries.len() {
            self.entries.resize_with(slot + 1, || None);
        }
        self.entries[slot] = Some(Entry {
            input,
            timestamp,
            seq,
            attempt,
            started,
            phase: Phase::Running,
        });
        self.queue.push_record(slot, key);
        if let Some(timeout) = self.settings.timeout {
            self.deadlines.set(slot, add(started, timeout));
        }
    }

    /// An attempt of the held record in `slot` ended with `outcome`.
    pub(super) fn end_attempt<E: Emitter<F::Out>>(
        &mut self,
        slot: usize,
        outcome: Result<F::Results, UserError>,
        decision: RetryDecision,
        now: Instant,
        out: &mut E,
    ) -> Result<(), UserError> {
        let Some(entry) = self.entries.get_mut(slot).and_then(Option::as_mut) else {
            return Err("async wait operator completed an unknown request".into());
        };
        match (decision, outcome) {
            (RetryDecision::RetryAfter(delay), _) => {
                entry.phase = Phase::Backoff;
                if self.finishing {
                    self.retry_now.push(slot);
                } else {
                    self.retries.set(slot, add(now, delay));
                }
                Ok(())
            }
            (RetryDecision::Complete, Ok(results)) => {
                entry.phase = Phase::Done(results);
                self.local
                    .completed(now.saturating_duration_since(entry.started));
                self.deadlines.clear(slot);
                self.queue.complete(slot);
                self.drain(out);
                Ok(())
            }
            (RetryDecision::Complete, Err(e)) => {
                self.local.failed();
                Err(fail(&entry.input, entry.attempt, e))
            }
        }
    }

    /// Starts the next attempt of the record in `slot` (its delay passed, or the input ended).
    pub(super) fn fire_retry<E: Emitter<F::Out>>(
        &mut self,
        slot: usize,
        now: Instant,
        out: &mut E,
    ) -> Result<(), UserError> {
        let Some(entry) = self.entries.get_mut(slot).and_then(Option::as_mut) else {
            return Ok(());
        };
        if !matches!(entry.phase, Phase::Backoff) {
            return Ok(());
        }
        entry.attempt += 1;
        entry.phase = Phase::Running;
        let attempt = entry.attempt;
        self.local.retried();
        start_call(
            &self.func,
            &mut self.invoke,
            &mut self.slab,
            slot,
            &entry.input,
            attempt,
            now,
        )?;
        self.poll_slot(slot, now, out)
    }

    /// Polls the running future of `slot` and handles its outcome.
    #[inline]
    pub(super) fn poll_slot<E: Emitter<F::Out>>(
        &mut self,
        slot: usize,
        now: Instant,
        out: &mut E,
    ) -> Result<(), UserError> {
        match self.slab.poll(slot) {
            Polled::Pending | Polled::Empty => Ok(()),
            Polled::Ready(outcome) => {
                let attempt = self.entries[slot].as_ref().map_or(1, |e| e.attempt);
                let decision = decide(&self.settings.retry, attempt, &outcome);
                self.end_attempt(slot, outcome, decision, now, out)
            }
            Polled::Panicked(message) => {
                self.local.failed();
                let (input, attempt) = match &self.entries[slot] {
                    Some(e) => (describe(&e.input), e.attempt),
                    None => ("<unknown>".to_string(), 0),
                };
                Err(Box::new(AsyncCallError::Panicked {
                    input,
                    attempt,
                    message,
                }))
            }
        }
    }

    /// Times out every record whose deadline passed: drops its call or cancels its retry, then
    /// asks the function's `timeout` handler, exactly once.
    pub(super) fn expire_timeouts<E: Emitter<F::Out>>(
        &mut self,
        now: Instant,
        out: &mut E,
    ) -> Result<(), UserError> {
        let mut expired = std::mem::take(&mut self.scratch);
        self.deadlines.expire(now, &mut expired);
        let mut result = Ok(());
        for slot in expired.drain(..) {
            if result.is_err() {
                break;
            }
            result = self.time_out(slot, now);
        }
        self.scratch = expired;
        self.drain(out);
        result
    }

    pub(super) fn time_out(&mut self, slot: usize, now: Instant) -> Result<(), UserError> {
        let Some(entry) = self.entries.get_mut(slot).and_then(Option::as_mut) else {
            return Ok(());
        };
        if matches!(entry.phase, Phase::Done(_)) {
            return Ok(());
        }
        self.slab.cancel(slot);
        self.invoke.cancel(slot);
        self.retries.clear(slot);
        self.local.timed_out();
        let func = &self.func;
        let input = &entry.input;
        match catch_unwind(AssertUnwindSafe(|| func.timeout(input))) {
            Ok(Ok(results)) => {
                entry.phase = Phase::Done(results);
                self.local
                    .completed(now.saturating_duration_since(entry.started));
                self.queue.complete(slot);
                Ok(())
            }
            Ok(Err(source)) => {
                self.local.failed();
                Err(Box::new(AsyncCallError::TimedOut {
                    input: describe(input),
                    timeout: self.settings.timeout.unwrap_or_default(),
                    source,
                }))
            }
            Err(p) => {
                self.local.failed();
                Err(Box::new(AsyncCallError::TimeoutPanicked {
                    input: describe(input),
                    message: panic_message(p.as_ref()),
                }))
            }
        }
    }

    pub(super) fn fire_due_retries<E: Emitter<F::Out>>(
        &mut self,
        now: Instant,
        out: &mut E,
    ) -> Result<(), UserError> {
        let mut due = std::mem::take(&mut self.scratch);
        self.retries.expire(now, &mut due);
        let result = due
            .drain(..)
            .try_for_each(|slot| self.fire_retry(slot, now, out));
        self.scratch = due;
        result
    }

    /// Whether the backlog's first element can be admitted now.
    pub(super) fn backlog_admissible(&self) -> bool {
        match self.backlog.front() {
            None => false,
            Some(Backlog::Watermark(_)) => true,
            Some(_) => self.slab.free_slots() > 0,
        }
    }

    /// Admits backlog elements while slots are free; returns whether any was admitted.
    pub(super) fn admit_backlog<E: Emitter<F::Out>>(
        &mut self,
        now: Instant,
        out: &mut E,
    ) -> Result<bool, UserError> {
        let mut any = false;
        loop {
            let is_watermark = matches!(self.backlog.front(), Some(Backlog::Watermark(_)));
            if self.backlog.is_empty() || (!is_watermark && self.slab.free_slots() == 0) {
                return Ok(any);
            }
            any = true;
            if let Some(Backlog::Batch(records)) = self.backlog.front_mut() {
                let mut records = std::mem::replace(records, Remaining::new(Vec::new(), None));
                let result = self.admit_from(&mut records, now, out);
                if records.len() == 0 {
                    self.backlog.pop_front();
                } else if let Some(Backlog::Batch(slot)) = self.backlog.front_mut() {
                    *slot = records;
                }
                result?;
                continue;
            }
            match self.backlog.pop_front() {
                Some(Backlog::Watermark(w)) => self.push_watermark(w, out),
                Some(Backlog::Restored {
                    input,
                    timestamp,
                    attempts_done,
                    elapsed,
                }) => self.admit_restored(input, timestamp, attempts_done, elapsed, now, out)?,
                Some(Backlog::Batch(_)) | None => {}
            }
        }
    }

    pub(super) fn admit_restored<E: Emitter<F::Out>>(
        &mut self,
        input: In,
        timestamp: Option<i64>,
        attempts_done: u32,
        elapsed: Duration,
        now: Instant,
        out: &mut E,
    ) -> Result<(), UserError> {
        let started = now.checked_sub(elapsed).unwrap_or(now);
        let attempt = attempts_done.saturating_add(1);
        let exhausted = self.settings.timeout.is_some_and(|t| elapsed >= t);
        if !exhausted {
            return self.admit(input, timestamp, attempt, started, now, out);
        }
        // No budget left: do not call again; the timeout fires at the next check.
        let key = self.key_of(&input, attempt)?;
        let Some(slot) = self.slab.acquire() else {
            return Err("async wait operator restored a record without a free slot".into());
        };
        self.hold(slot, input, timestamp, key, attempts_done, started);
        if let Some(Some(e)) = self.entries.get_mut(slot) {
            e.phase = Phase::Backoff;
        }
        self.deadlines.set(slot, now);
        Ok(())
    }

    /// Emits everything the queue lets leave and frees those slots.
    #[inline]
    pub(super) fn drain<E: Emitter<F::Out>>(&mut self, out: &mut E) {
        while let Some(e) = self.queue.pop() {
            match e {
                Emit::Record(slot) => {
                    if let Some(Entry {
                        phase: Phase::Done(results),
                        timestamp,
                        ..
                    }) = self.entries[slot].take()
                    {
                        for r in results {
                            out.record(r, timestamp);
                        }
                    }
                    self.slab.release(slot);
                }
                Emit::Watermark(w) => out.watermark(w),
            }
        }
    }
}

/// Starts `input`'s attempt in `slot`, catching a panic of `invoke`; returns whether the
/// attempt has a future in the slab (otherwise the invoker answers the slot itself).
#[inline]
pub(super) fn start_call<In: Data, F, I>(
    func: &F,
    invoke: &mut I,
    slab: &mut FutureSlab<I::Fut>,
    slot: usize,
    input: &In,
    attempt: u32,
    now: Instant,
) -> Result<bool, UserError>
where
    F: AsyncFunction<In>,
    I: Invoker<In, F>,
{
    match catch_unwind(AssertUnwindSafe(|| {
        invoke.invoke(func, slot, input.clone(), attempt, now)
    })) {
        Ok(Some(fut)) => {
            slab.start(slot, fut);
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(p) => Err(Box::new(AsyncCallError::Panicked {
            input: describe(input),
            attempt,
            message: panic_message(p.as_ref()),
        })),
    }
}

/// The error for a final failed attempt.
pub(super) fn fail<In: Data>(input: &In, attempt: u32, source: UserError) -> UserError {
    Box::new(AsyncCallError::failed(input, attempt, source))
}

/// `at + d`, saturating far in the future instead of overflowing.
#[inline]
pub(super) fn add(at: Instant, d: Duration) -> Instant {
    at.checked_add(d)
        .or_else(|| at.checked_add(Duration::from_secs(86_400 * 365)))
        .unwrap_or(at)
}
