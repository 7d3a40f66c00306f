//! [`TimedOperator`]: the part every keyed operator with timers shares: firing event-time
//! timers on a watermark and processing-time timers from `poll_pending`.

use crate::operator::Collector;
use crate::timer::{InternalTimers, Timer};
use serde::{Serialize, de::DeserializeOwned};
use sluice_core::{UserError, Watermark};
use std::hash::Hash;
use std::task::{Context, Poll};

/// A keyed operator whose timers fire through [`on_timer`](TimedOperator::on_timer); its
/// `Operator` implementation calls [`fire_event_timers`](TimedOperator::fire_event_timers)
/// from `process_watermark` and [`fire_processing_timers`](TimedOperator::fire_processing_timers)
/// from `poll_pending`.
pub(crate) trait TimedOperator<K, N, Out>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    N: Hash + Eq + Clone + Serialize + DeserializeOwned,
{
    /// The operator's timers.
    fn timers(&mut self) -> &mut InternalTimers<K, N>;

    /// One timer fired.
    fn on_timer(&mut self, timer: Timer<K, N>, out: &mut Collector<Out>) -> Result<(), UserError>;

    /// Event time advanced: fires the timers it passed, in order (a timer a callback registers
    /// for a passed time fires in the same round), then forwards the watermark.
    fn fire_event_timers(
        &mut self,
        watermark: Watermark,
        out: &mut Collector<Out>,
    ) -> Result<(), UserError> {
        self.timers().advance_watermark(watermark);
        while let Some(timer) = self.timers().pop_event_timer() {
            self.on_timer(timer, out)?;
        }
        if let Some(e) = self.timers().take_error() {
            return Err(e.into());
        }
        out.emit_watermark(watermark);
        Ok(())
    }

    /// Fires the processing-time timers that are due, or arranges to be woken when the next is.
    fn fire_processing_timers(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Collector<Out>,
    ) -> Poll<Result<(), UserError>> {
        let Some(due) = self.timers().poll_processing(cx) else {
            return Poll::Pending;
        };
        while let Some(timer) = self.timers().pop_processing_timer(due) {
            if let Err(e) = self.on_timer(timer, out) {
                return Poll::Ready(Err(e));
            }
        }
        if let Some(e) = self.timers().take_error() {
            return Poll::Ready(Err(e.into()));
        }
        Poll::Ready(Ok(()))
    }
}
