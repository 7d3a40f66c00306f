//! What the task loop's `poll_pending` does: poll the woken futures, admit the backlog, fire due
//! timers, all from one clock reading, and arm the single timer for the next deadline or retry.

use super::*;

impl<In, F, I> AsyncWaitOperator<In, F, I>
where
    In: Data,
    F: AsyncFunction<In>,
    I: Invoker<In, F>,
{
    pub(super) fn on_poll<E: Emitter<F::Out>>(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut E,
    ) -> Poll<Result<(), UserError>> {
        let result = self.poll_inner(cx, out);
        self.publish();
        match result {
            Ok(true) => Poll::Ready(Ok(())),
            Ok(false) => Poll::Pending,
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    pub(super) fn poll_inner<E: Emitter<F::Out>>(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut E,
    ) -> Result<bool, UserError> {
        self.slab.register(cx.waker());
        let mut now = LazyNow::default();
        let more_can_join = self.slab.free_slots() > 0;
        let mut answers = std::mem::take(&mut self.answers);
        let driven = self
            .invoke
            .drive(&self.func, cx, &mut now, more_can_join, &mut answers);
        let mut progressed = match driven {
            Ok(p) => p,
            Err(e) => {
                self.answers = answers;
                return Err(e);
            }
        };
        let answered = self.take_answers(&mut answers, &mut now, out);
        self.answers = answers;
        answered?;

        let mut woken = std::mem::take(&mut self.scratch);
        self.slab.take_woken(&mut woken);
        let mut result = Ok(());
        for &slot in &woken {
            let running = matches!(
                self.entries.get(slot),
                Some(Some(Entry {
                    phase: Phase::Running,
                    ..
                }))
            );
            if running {
                let t = now.get();
                result = self.poll_slot(slot, t, out);
                progressed = true;
                if result.is_err() {
                    break;
                }
            }
        }
        woken.clear();
        self.scratch = woken;
        result?;

        if self.backlog_admissible() && self.admit_backlog(now.get(), out)? {
            progressed = true;
        }
        self.start_finishing();
        if !self.retry_now.is_empty() {
            self.fire_immediate_retries(now.get(), out)?;
            progressed = true;
        }

        if self.timer_due(cx) {
            let t = now.get();
            self.expire_timeouts(t, out)?;
            self.fire_due_retries(t, out)?;
            progressed = true;
            // The timer is re-armed for the next time; if that passed already, come back with a
            // fresh clock reading rather than looping on a stale one.
            if self.timer_due(cx) {
                cx.waker().wake_by_ref();
            }
        }
        Ok(progressed)
    }

    /// Completes the attempts the invoker answered (batched records), in the order given.
    fn take_answers<E: Emitter<F::Out>>(
        &mut self,
        answers: &mut Vec<calls::Answer<F::Results>>,
        now: &mut LazyNow,
        out: &mut E,
    ) -> Result<(), UserError> {
        let mut result = Ok(());
        for (slot, outcome) in answers.drain(..) {
            if result.is_err() {
                continue;
            }
            let attempt = match self.entries.get(slot) {
                Some(Some(Entry {
                    phase: Phase::Running,
                    attempt,
                    ..
                })) => *attempt,
                _ => continue,
            };
            let decision = decide(&self.settings.retry, attempt, &outcome);
            result = self.end_attempt(slot, outcome, decision, now.get(), out);
        }
        result
    }

    /// Arms the single timer at the earliest deadline or retry time and reports whether it
    /// passed.
    pub(super) fn timer_due(&mut self, cx: &mut Context<'_>) -> bool {
        let next = [
            self.deadlines.next_check(),
            self.retries.next_check(),
            self.invoke.next_wakeup(),
        ];
        let Some(target) = next.into_iter().flatten().min() else {
            self.timer_at = None;
            return false;
        };
        if self.timer_at != Some(target) {
            match &mut self.timer {
                Some(t) => t.as_mut().reset(target),
                None => self.timer = Some(Box::pin(tokio::time::sleep_until(target))),
            }
            self.timer_at = Some(target);
        }
        self.timer
            .as_mut()
            .is_some_and(|t| t.as_mut().poll(cx).is_ready())
    }
}
