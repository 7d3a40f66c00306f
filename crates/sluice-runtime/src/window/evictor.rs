//! [`Evictor`]: removes records from a window before and after its function runs (Flink's
//! `Evictor`), over the window's records with their timestamps ([`TimestampedValue`]); the
//! built-ins [`CountEvictor`] and [`TimeEvictor`]; and the crate's `AnyEvictor`, which the
//! window operator runs (the built-ins as variants, a user evictor boxed).

use super::assigner::TimeWindow;
use serde::{Deserialize, Serialize};
use sluice_core::UserError;
use std::any::Any;
use std::time::Duration;

/// A record of a window with its event time, if it has one (Flink's `TimestampedValue`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimestampedValue<T> {
    /// The record.
    pub value: T,
    /// Its event time, `None` when it has none.
    pub timestamp: Option<i64>,
}

impl<T> TimestampedValue<T> {
    /// `value` at `timestamp`.
    pub const fn new(value: T, timestamp: Option<i64>) -> Self {
        TimestampedValue { value, timestamp }
    }

    /// Whether the record has an event time.
    pub const fn has_timestamp(&self) -> bool {
        self.timestamp.is_some()
    }
}

/// What an evictor can read besides the window (Flink's `Evictor.EvictorContext`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EvictorContext {
    pub(crate) watermark: i64,
    pub(crate) processing_time: i64,
}

impl EvictorContext {
    /// A context at `watermark` and `processing_time` (to call an evictor outside a job).
    pub const fn new(watermark: i64, processing_time: i64) -> Self {
        EvictorContext {
            watermark,
            processing_time,
        }
    }

    /// The current watermark (`i64::MIN` before the first).
    pub const fn current_watermark(&self) -> i64 {
        self.watermark
    }

    /// Processing time now, in epoch milliseconds.
    pub const fn current_processing_time(&self) -> i64 {
        self.processing_time
    }
}

/// Removes records from a window when it fires (Flink's `Evictor`):
/// [`evict_before`](Self::evict_before) runs before the window function, which then sees only
/// the records left, and [`evict_after`](Self::evict_after) after it. What is left is kept for
/// the window's next firing. With an evictor the window keeps all its records (in arrival order,
/// and in checkpoints) instead of an accumulator, even for `reduce` and `aggregate`, which run
/// over the records left at each firing (Flink's `EvictingWindowOperator`). An error fails the
/// job. The built-ins are [`CountEvictor`] and [`TimeEvictor`].
///
/// The three largest amounts of each count of ten, by a user evictor:
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::window::{Evictor, EvictorContext, TimeWindow, TimestampedValue};
/// use sluice_core::UserError;
///
/// #[derive(Clone)]
/// struct KeepLargest(usize);
///
/// impl Evictor<(u32, u64)> for KeepLargest {
///     fn evict_before(
///         &self,
///         elements: &mut Vec<TimestampedValue<(u32, u64)>>,
///         _window: &TimeWindow,
///         _ctx: &EvictorContext,
///     ) -> Result<(), UserError> {
///         elements.sort_by_key(|e| std::cmp::Reverse(e.value.1));
///         elements.truncate(self.0);
///         Ok(())
///     }
///     fn evict_after(
///         &self,
///         _elements: &mut Vec<TimestampedValue<(u32, u64)>>,
///         _window: &TimeWindow,
///         _ctx: &EvictorContext,
///     ) -> Result<(), UserError> {
///         Ok(())
///     }
/// }
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(1);
/// let top = env
///     .from_iter((1..=10u64).map(|n| (7u32, n)))
///     .key_by(|r| r.0)
///     .count_window(10)
///     .evictor(KeepLargest(3))
///     .reduce(|a, b| (a.0, a.1 + b.1))
///     .collect();
/// env.execute_blocking("top three").unwrap();
/// assert_eq!(top.take(), vec![(7, 10 + 9 + 8)]);
/// ```
pub trait Evictor<T>: Send + 'static {
    /// Before the window function runs on `window`: remove records from `elements`.
    fn evict_before(
        &self,
        elements: &mut Vec<TimestampedValue<T>>,
        window: &TimeWindow,
        ctx: &EvictorContext,
    ) -> Result<(), UserError>;

    /// After the window function ran on `window`: remove records from `elements`.
    fn evict_after(
        &self,
        elements: &mut Vec<TimestampedValue<T>>,
        window: &TimeWindow,
        ctx: &EvictorContext,
    ) -> Result<(), UserError>;
}

/// Keeps at most `max_count` records of a window, the newest (Flink's `CountEvictor`): before
/// the window function runs, or after it with [`do_evict_after`](Self::do_evict_after).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountEvictor {
    max_count: usize,
    do_evict_after: bool,
}

impl CountEvictor {
    /// Keeps `max_count` records, evicting before the window function (Flink's
    /// `CountEvictor.of(maxCount)`).
    pub const fn of(max_count: usize) -> Self {
        CountEvictor {
            max_count,
            do_evict_after: false,
        }
    }

    /// Evicts after the window function instead of before when `after` (Flink's
    /// `CountEvictor.of(maxCount, doEvictAfter)`).
    pub const fn do_evict_after(mut self, after: bool) -> Self {
        self.do_evict_after = after;
        self
    }

    fn evict<T>(&self, elements: &mut Vec<TimestampedValue<T>>) {
        if elements.len() > self.max_count {
            let excess = elements.len() - self.max_count;
            elements.drain(..excess);
        }
    }
}

impl<T> Evictor<T> for CountEvictor {
    fn evict_before(
        &self,
        elements: &mut Vec<TimestampedValue<T>>,
        _: &TimeWindow,
        _: &EvictorContext,
    ) -> Result<(), UserError> {
        if !self.do_evict_after {
            self.evict(elements);
        }
        Ok(())
    }

    fn evict_after(
        &self,
        elements: &mut Vec<TimestampedValue<T>>,
        _: &TimeWindow,
        _: &EvictorContext,
    ) -> Result<(), UserError> {
        if self.do_evict_after {
            self.evict(elements);
        }
        Ok(())
    }
}

/// Keeps the records of the last `window_size` of event time in a window (Flink's
/// `TimeEvictor`): those whose timestamp is above the newest record's timestamp minus the size.
/// Records without timestamps are not evicted (Flink looks at the first record). Before the
/// window function runs, or after it with [`do_evict_after`](Self::do_evict_after).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimeEvictor {
    window_size: i64,
    do_evict_after: bool,
}

impl TimeEvictor {
    /// Keeps `window_size` of event time, evicting before the window function (Flink's
    /// `TimeEvictor.of(windowSize)`).
    pub fn of(window_size: Duration) -> Self {
        TimeEvictor {
            window_size: i64::try_from(window_size.as_millis()).unwrap_or(i64::MAX),
            do_evict_after: false,
        }
    }

    /// Evicts after the window function instead of before when `after` (Flink's
    /// `TimeEvictor.of(windowSize, doEvictAfter)`).
    pub const fn do_evict_after(mut self, after: bool) -> Self {
        self.do_evict_after = after;
        self
    }

    fn evict<T>(&self, elements: &mut Vec<TimestampedValue<T>>) {
        if !elements
            .first()
            .is_some_and(TimestampedValue::has_timestamp)
        {
            return;
        }
        let Some(newest) = elements.iter().filter_map(|e| e.timestamp).max() else {
            return;
        };
        let cutoff = newest.saturating_sub(self.window_size);
        elements.retain(|e| e.timestamp.is_none_or(|t| t > cutoff));
    }
}

impl<T> Evictor<T> for TimeEvictor {
    fn evict_before(
        &self,
        elements: &mut Vec<TimestampedValue<T>>,
        _: &TimeWindow,
        _: &EvictorContext,
    ) -> Result<(), UserError> {
        if !self.do_evict_after {
            self.evict(elements);
        }
        Ok(())
    }

    fn evict_after(
        &self,
        elements: &mut Vec<TimestampedValue<T>>,
        _: &TimeWindow,
        _: &EvictorContext,
    ) -> Result<(), UserError> {
        if self.do_evict_after {
            self.evict(elements);
        }
        Ok(())
    }
}

/// A user evictor behind a box, cloneable.
pub(crate) trait DynEvictor<T>: Evictor<T> {
    fn clone_box(&self) -> Box<dyn DynEvictor<T>>;
}

impl<T, E: Evictor<T> + Clone> DynEvictor<T> for E {
    fn clone_box(&self) -> Box<dyn DynEvictor<T>> {
        Box::new(self.clone())
    }
}

/// The evictor a window operator runs: a built-in, or a user evictor (boxed).
pub(crate) enum AnyEvictor<T> {
    Count(CountEvictor),
    Time(TimeEvictor),
    User(Box<dyn DynEvictor<T>>),
}

impl<T: 'static> Clone for AnyEvictor<T> {
    fn clone(&self) -> Self {
        match self {
            AnyEvictor::Count(e) => AnyEvictor::Count(*e),
            AnyEvictor::Time(e) => AnyEvictor::Time(*e),
            AnyEvictor::User(e) => AnyEvictor::User(e.clone_box()),
        }
    }
}

impl<T: 'static> AnyEvictor<T> {
    /// `evictor` as a variant: a built-in is recognised by its type.
    pub(crate) fn from_evictor<E: Evictor<T> + Clone>(evictor: E) -> Self {
        let any: &dyn Any = &evictor;
        if let Some(e) = any.downcast_ref::<AnyEvictor<T>>() {
            e.clone()
        } else if let Some(e) = any.downcast_ref::<CountEvictor>() {
            AnyEvictor::Count(*e)
        } else if let Some(e) = any.downcast_ref::<TimeEvictor>() {
            AnyEvictor::Time(*e)
        } else {
            AnyEvictor::User(Box::new(evictor))
        }
    }
}

impl<T: 'static> Evictor<T> for AnyEvictor<T> {
    fn evict_before(
        &self,
        elements: &mut Vec<TimestampedValue<T>>,
        window: &TimeWindow,
        ctx: &EvictorContext,
    ) -> Result<(), UserError> {
        match self {
            AnyEvictor::Count(e) => e.evict_before(elements, window, ctx),
            AnyEvictor::Time(e) => e.evict_before(elements, window, ctx),
            AnyEvictor::User(e) => e.evict_before(elements, window, ctx),
        }
    }

    fn evict_after(
        &self,
        elements: &mut Vec<TimestampedValue<T>>,
        window: &TimeWindow,
        ctx: &EvictorContext,
    ) -> Result<(), UserError> {
        match self {
            AnyEvictor::Count(e) => e.evict_after(elements, window, ctx),
            AnyEvictor::Time(e) => e.evict_after(elements, window, ctx),
            AnyEvictor::User(e) => e.evict_after(elements, window, ctx),
        }
    }
}
