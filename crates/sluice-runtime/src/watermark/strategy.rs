//! [`WatermarkStrategy`] and the operator that applies it to a stream.

use crate::operator::{Collector, Operator};
use sluice_core::{Data, UserError, Watermark, WatermarkStatus};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

type TimestampFn<T> = Arc<dyn Fn(&T) -> i64 + Send + Sync>;

/// How watermarks are generated for a stream.
///
/// The strategy's timestamp function gives each record its event time, which travels with the
/// record from the assigner on (timers, windows and process functions read it). The watermark
/// trails the highest timestamp seen so far by the out-of-orderness bound (minus one
/// millisecond, as in Flink: a record exactly `bound` late is still on time). It is emitted after
/// every batch in which it advanced. With an idleness timeout, a subtask that sees no record for
/// that long marks its output idle, so downstream tasks stop waiting for it; its next record makes
/// it active again.
///
/// ```
/// use sluice_runtime::WatermarkStrategy;
/// use std::time::Duration;
///
/// #[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
/// struct Click { ts: i64 }
///
/// let strategy = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(500), |c: &Click| c.ts)
///     .with_idleness(Duration::from_secs(5));
/// assert_eq!(strategy.out_of_orderness(), Duration::from_millis(500));
/// ```
pub struct WatermarkStrategy<T> {
    timestamp: TimestampFn<T>,
    bound: Duration,
    idleness: Option<Duration>,
}

impl<T> Clone for WatermarkStrategy<T> {
    fn clone(&self) -> Self {
        WatermarkStrategy {
            timestamp: self.timestamp.clone(),
            bound: self.bound,
            idleness: self.idleness,
        }
    }
}

impl<T: Data> WatermarkStrategy<T> {
    /// Watermarks that trail the highest timestamp by `bound`; `timestamp` reads a record's event
    /// time in milliseconds.
    pub fn for_bounded_out_of_orderness(
        bound: Duration,
        timestamp: impl Fn(&T) -> i64 + Send + Sync + 'static,
    ) -> Self {
        WatermarkStrategy {
            timestamp: Arc::new(timestamp),
            bound,
            idleness: None,
        }
    }

    /// Watermarks for timestamps that never decrease (a bound of zero).
    pub fn for_monotonous_timestamps(
        timestamp: impl Fn(&T) -> i64 + Send + Sync + 'static,
    ) -> Self {
        Self::for_bounded_out_of_orderness(Duration::ZERO, timestamp)
    }

    /// Marks a subtask's output idle after `timeout` without records.
    pub fn with_idleness(mut self, timeout: Duration) -> Self {
        self.idleness = Some(timeout);
        self
    }

    /// The out-of-orderness bound.
    pub fn out_of_orderness(&self) -> Duration {
        self.bound
    }

    /// The idleness timeout, if any.
    pub fn idleness(&self) -> Option<Duration> {
        self.idleness
    }

    /// The event time of `record`, in milliseconds, as the strategy reads it.
    pub fn extract_timestamp(&self, record: &T) -> i64 {
        (self.timestamp)(record)
    }

    /// The watermark that follows a highest timestamp `max_timestamp`: it trails it by the
    /// out-of-orderness bound and one millisecond (`Watermark::MIN` before any record).
    ///
    /// ```
    /// use sluice_runtime::WatermarkStrategy;
    /// use sluice_core::Watermark;
    /// use std::time::Duration;
    /// let s = WatermarkStrategy::for_bounded_out_of_orderness(Duration::from_millis(10), |t: &i64| *t);
    /// assert_eq!(s.watermark_after(100), Watermark::new(89));
    /// assert_eq!(s.watermark_after(i64::MIN), Watermark::MIN);
    /// ```
    pub fn watermark_after(&self, max_timestamp: i64) -> Watermark {
        if max_timestamp == i64::MIN {
            return Watermark::MIN;
        }
        let bound = i64::try_from(self.bound.as_millis()).unwrap_or(i64::MAX);
        Watermark::new(max_timestamp.saturating_sub(bound).saturating_sub(1))
    }

    pub(crate) fn assigner(&self) -> WatermarkAssigner<T> {
        WatermarkAssigner {
            strategy: self.clone(),
            max_timestamp: i64::MIN,
            emitted: Watermark::MIN,
            idle: false,
            idle_timer: None,
        }
    }
}

/// Applies a [`WatermarkStrategy`]: stamps each record with its event time (the batch's timestamp
/// column), passes the records on and emits watermarks after them.
pub(crate) struct WatermarkAssigner<T> {
    strategy: WatermarkStrategy<T>,
    max_timestamp: i64,
    emitted: Watermark,
    idle: bool,
    idle_timer: Option<Pin<Box<Sleep>>>,
}

impl<T> Clone for WatermarkAssigner<T> {
    fn clone(&self) -> Self {
        WatermarkAssigner {
            strategy: self.strategy.clone(),
            max_timestamp: self.max_timestamp,
            emitted: self.emitted,
            idle: self.idle,
            idle_timer: None,
        }
    }
}

impl<T: Data> WatermarkAssigner<T> {
    fn rearm_idle_timer(&mut self) {
        if let Some(timeout) = self.strategy.idleness {
            let deadline = Instant::now() + timeout;
            match &mut self.idle_timer {
                Some(t) => t.as_mut().reset(deadline),
                None => self.idle_timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
        }
    }
}

impl<T: Data> Operator<T> for WatermarkAssigner<T> {
    type Out = T;

    fn open(&mut self, _ctx: &crate::OperatorContext) -> Result<(), UserError> {
        self.rearm_idle_timer();
        Ok(())
    }

    fn process_batch(&mut self, batch: Vec<T>, out: &mut Collector<T>) -> Result<(), UserError> {
        if self.idle {
            self.idle = false;
            out.emit_status(WatermarkStatus::Active);
        }
        let assign = &self.strategy.timestamp;
        // One pass: each record's time into the column and the running maximum.
        let mut max = self.max_timestamp;
        let timestamps: Vec<i64> = batch
            .iter()
            .map(|r| {
                let t = assign(r);
                max = max.max(t);
                t
            })
            .collect();
        self.max_timestamp = max;
        // The records carry their event time from here on, as Flink's `StreamRecord`s do.
        out.emit_batch_at(batch, Some(timestamps));
        let candidate = self.strategy.watermark_after(self.max_timestamp);
        if candidate > self.emitted && self.max_timestamp != i64::MIN {
            self.emitted = candidate;
            out.emit_watermark(candidate);
        }
        self.rearm_idle_timer();
        Ok(())
    }

    fn process_watermark(&mut self, w: Watermark, out: &mut Collector<T>) -> Result<(), UserError> {
        // Only the end-of-input maximum passes from upstream; the strategy owns event time here.
        if w == Watermark::MAX && self.emitted < Watermark::MAX {
            self.emitted = Watermark::MAX;
            out.emit_watermark(w);
        }
        Ok(())
    }

    fn poll_pending(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Collector<T>,
    ) -> Poll<Result<(), UserError>> {
        if self.idle || self.emitted == Watermark::MAX {
            return Poll::Pending;
        }
        if let Some(timer) = &mut self.idle_timer
            && timer.as_mut().poll(cx).is_ready()
        {
            self.idle = true;
            self.idle_timer = None;
            out.emit_status(WatermarkStatus::Idle);
            return Poll::Ready(Ok(()));
        }
        Poll::Pending
    }
}
