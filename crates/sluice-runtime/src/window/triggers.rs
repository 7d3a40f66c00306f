//! Flink's built-in triggers, with Flink's names and rules: [`EventTimeTrigger`],
//! [`ProcessingTimeTrigger`], [`CountTrigger`], [`PurgingTrigger`],
//! [`ContinuousEventTimeTrigger`], [`ContinuousProcessingTimeTrigger`] and [`NeverTrigger`]
//! (the default of `GlobalWindows`); and the crate's `AnyTrigger`, which the window operator
//! runs: the built-ins as enum variants (no dynamic call per record), a user trigger boxed.

use super::assigner::{TimeWindow, WindowAssigner, WindowKind};
use super::trigger::{
    OnMergeContext, ReducingStateDescriptor, Trigger, TriggerContext, TriggerResult,
};
use sluice_core::UserError;
use std::any::Any;
use std::time::Duration;

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Fires a window once the watermark passes its end (Flink's `EventTimeTrigger`): the default
/// trigger of event-time windows. A record for a window the watermark already passed (within
/// the allowed lateness) fires it at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventTimeTrigger;

impl EventTimeTrigger {
    /// The trigger (Flink's `EventTimeTrigger.create()`).
    pub const fn create() -> Self {
        EventTimeTrigger
    }
}

impl<T> Trigger<T> for EventTimeTrigger {
    fn on_element(
        &self,
        _: &T,
        _: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        if window.max_timestamp() <= ctx.current_watermark() {
            return Ok(TriggerResult::Fire);
        }
        ctx.register_event_time_timer(window.max_timestamp());
        Ok(TriggerResult::Continue)
    }

    fn on_event_time(
        &self,
        time: i64,
        window: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        Ok(if time == window.max_timestamp() {
            TriggerResult::Fire
        } else {
            TriggerResult::Continue
        })
    }

    fn on_processing_time(
        &self,
        _: i64,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        Ok(TriggerResult::Continue)
    }

    fn can_merge(&self) -> bool {
        true
    }

    fn on_merge(&self, window: &TimeWindow, ctx: &mut OnMergeContext<'_>) -> Result<(), UserError> {
        // Only a timer still ahead: one at or before the watermark would fire at once and the
        // window would fire twice (once here, once at the merged window's cleanup).
        if window.max_timestamp() > ctx.current_watermark() {
            ctx.register_event_time_timer(window.max_timestamp());
        }
        Ok(())
    }

    fn clear(&self, window: &TimeWindow, ctx: &mut TriggerContext<'_>) -> Result<(), UserError> {
        ctx.delete_event_time_timer(window.max_timestamp());
        Ok(())
    }
}

/// Fires a window when processing time reaches its end (Flink's `ProcessingTimeTrigger`): the
/// default trigger of processing-time windows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessingTimeTrigger;

impl ProcessingTimeTrigger {
    /// The trigger (Flink's `ProcessingTimeTrigger.create()`).
    pub const fn create() -> Self {
        ProcessingTimeTrigger
    }
}

impl<T> Trigger<T> for ProcessingTimeTrigger {
    fn on_element(
        &self,
        _: &T,
        _: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        ctx.register_processing_time_timer(window.max_timestamp());
        Ok(TriggerResult::Continue)
    }

    fn on_event_time(
        &self,
        _: i64,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        Ok(TriggerResult::Continue)
    }

    fn on_processing_time(
        &self,
        _: i64,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        Ok(TriggerResult::Fire)
    }

    fn can_merge(&self) -> bool {
        true
    }

    fn on_merge(&self, window: &TimeWindow, ctx: &mut OnMergeContext<'_>) -> Result<(), UserError> {
        if window.max_timestamp() > ctx.current_processing_time() {
            ctx.register_processing_time_timer(window.max_timestamp());
        }
        Ok(())
    }

    fn clear(&self, window: &TimeWindow, ctx: &mut TriggerContext<'_>) -> Result<(), UserError> {
        ctx.delete_processing_time_timer(window.max_timestamp());
        Ok(())
    }
}

/// A trigger that never fires (Flink's `GlobalWindows.NeverTrigger`): the default trigger of
/// [`GlobalWindows`](super::GlobalWindows), which have no end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NeverTrigger;

impl<T> Trigger<T> for NeverTrigger {
    fn on_element(
        &self,
        _: &T,
        _: i64,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        Ok(TriggerResult::Continue)
    }

    fn on_event_time(
        &self,
        _: i64,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        Ok(TriggerResult::Continue)
    }

    fn on_processing_time(
        &self,
        _: i64,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        Ok(TriggerResult::Continue)
    }

    fn can_merge(&self) -> bool {
        true
    }

    fn on_merge(&self, _: &TimeWindow, _: &mut OnMergeContext<'_>) -> Result<(), UserError> {
        Ok(())
    }

    fn clear(&self, _: &TimeWindow, _: &mut TriggerContext<'_>) -> Result<(), UserError> {
        Ok(())
    }
}

/// The count of records of a window, per key (`CountTrigger`'s state).
const COUNT: ReducingStateDescriptor<u64> = ReducingStateDescriptor::new("count", |a, b| a + b);

/// Fires a window each time it has received `n` more records (Flink's `CountTrigger`): the
/// count is kept per window and key, restarts from zero at each firing, and adds up when
/// session windows merge. It never purges; with [`PurgingTrigger`] the window's contents go at
/// each firing (Flink's `countWindow`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountTrigger {
    max_count: u64,
}

impl CountTrigger {
    /// Fires every `max_count` records (Flink's `CountTrigger.of`).
    pub const fn of(max_count: u64) -> Self {
        CountTrigger { max_count }
    }

    /// The count at which the trigger fires.
    pub const fn max_count(&self) -> u64 {
        self.max_count
    }
}

impl<T> Trigger<T> for CountTrigger {
    fn on_element(
        &self,
        _: &T,
        _: i64,
        _: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        let mut count = ctx.get_partitioned_state(&COUNT);
        count.add(1)?;
        if count.get()?.unwrap_or(0) >= self.max_count {
            count.clear();
            return Ok(TriggerResult::Fire);
        }
        Ok(TriggerResult::Continue)
    }

    fn on_event_time(
        &self,
        _: i64,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        Ok(TriggerResult::Continue)
    }

    fn on_processing_time(
        &self,
        _: i64,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        Ok(TriggerResult::Continue)
    }

    fn can_merge(&self) -> bool {
        true
    }

    fn on_merge(&self, _: &TimeWindow, ctx: &mut OnMergeContext<'_>) -> Result<(), UserError> {
        ctx.merge_partitioned_state(&COUNT)
    }

    fn clear(&self, _: &TimeWindow, ctx: &mut TriggerContext<'_>) -> Result<(), UserError> {
        ctx.get_partitioned_state(&COUNT).clear();
        Ok(())
    }
}

/// Turns every firing of the trigger it wraps into a firing and purge (Flink's
/// `PurgingTrigger`): the window's contents are removed each time it fires.
pub struct PurgingTrigger<T> {
    inner: Box<AnyTrigger<T>>,
}

impl<T: 'static> Clone for PurgingTrigger<T> {
    fn clone(&self) -> Self {
        PurgingTrigger {
            inner: self.inner.clone(),
        }
    }
}

impl<T> std::fmt::Debug for PurgingTrigger<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PurgingTrigger").field(&self.inner).finish()
    }
}

impl<T: 'static> PurgingTrigger<T> {
    /// Wraps `inner` (Flink's `PurgingTrigger.of`).
    pub fn of<Tr: Trigger<T> + Clone>(inner: Tr) -> Self {
        PurgingTrigger {
            inner: Box::new(AnyTrigger::from_trigger(inner)),
        }
    }
}

fn purging(r: TriggerResult) -> TriggerResult {
    if r.is_fire() {
        TriggerResult::FireAndPurge
    } else {
        r
    }
}

impl<T: 'static> Trigger<T> for PurgingTrigger<T> {
    fn on_element(
        &self,
        element: &T,
        timestamp: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        self.inner
            .on_element(element, timestamp, window, ctx)
            .map(purging)
    }

    fn on_event_time(
        &self,
        time: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        self.inner.on_event_time(time, window, ctx).map(purging)
    }

    fn on_processing_time(
        &self,
        time: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        self.inner
            .on_processing_time(time, window, ctx)
            .map(purging)
    }

    fn can_merge(&self) -> bool {
        self.inner.can_merge()
    }

    fn on_merge(&self, window: &TimeWindow, ctx: &mut OnMergeContext<'_>) -> Result<(), UserError> {
        self.inner.on_merge(window, ctx)
    }

    fn clear(&self, window: &TimeWindow, ctx: &mut TriggerContext<'_>) -> Result<(), UserError> {
        self.inner.clear(window, ctx)
    }
}

/// The next time a continuous trigger fires, per window and key: the lowest when sessions merge.
const FIRE_TIME: ReducingStateDescriptor<i64> =
    ReducingStateDescriptor::new("fire-time", |a: i64, b: i64| a.min(b));

/// The start of the interval holding `time`, as Flink computes it (`time - time % interval`,
/// Java's remainder: towards zero).
fn interval_start(time: i64, interval: i64) -> Result<i64, UserError> {
    match time.checked_rem(interval) {
        Some(r) => Ok(time - r),
        None => Err(format!(
            "a continuous trigger needs an interval above 0 ms, not {interval} ms"
        )
        .into()),
    }
}

/// Fires a window every `interval` of event time and at its end (Flink's
/// `ContinuousEventTimeTrigger`): the first record of a window registers a timer at the end of
/// the interval it falls in (never past the window's `max_timestamp`), and each firing the
/// next; a record for a window the watermark passed fires it at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContinuousEventTimeTrigger {
    interval: i64,
}

impl ContinuousEventTimeTrigger {
    /// Fires every `interval` (Flink's `ContinuousEventTimeTrigger.of`).
    pub fn of(interval: Duration) -> Self {
        ContinuousEventTimeTrigger {
            interval: millis(interval),
        }
    }

    /// The interval, in milliseconds.
    pub const fn interval(&self) -> i64 {
        self.interval
    }

    fn register_next(
        &self,
        time: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<(), UserError> {
        let next = time
            .saturating_add(self.interval)
            .min(window.max_timestamp());
        ctx.get_partitioned_state(&FIRE_TIME).add(next)?;
        ctx.register_event_time_timer(next);
        Ok(())
    }
}

impl<T> Trigger<T> for ContinuousEventTimeTrigger {
    fn on_element(
        &self,
        _: &T,
        timestamp: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        if window.max_timestamp() <= ctx.current_watermark() {
            return Ok(TriggerResult::Fire);
        }
        ctx.register_event_time_timer(window.max_timestamp());
        if ctx.get_partitioned_state(&FIRE_TIME).get()?.is_none() {
            let start = interval_start(timestamp, self.interval)?;
            self.register_next(start, window, ctx)?;
        }
        Ok(TriggerResult::Continue)
    }

    fn on_event_time(
        &self,
        time: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        if time == window.max_timestamp() {
            return Ok(TriggerResult::Fire);
        }
        let mut fire_time = ctx.get_partitioned_state(&FIRE_TIME);
        if fire_time.get()? == Some(time) {
            fire_time.clear();
            self.register_next(time, window, ctx)?;
            return Ok(TriggerResult::Fire);
        }
        Ok(TriggerResult::Continue)
    }

    fn on_processing_time(
        &self,
        _: i64,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        Ok(TriggerResult::Continue)
    }

    fn can_merge(&self) -> bool {
        true
    }

    fn on_merge(&self, _: &TimeWindow, ctx: &mut OnMergeContext<'_>) -> Result<(), UserError> {
        ctx.merge_partitioned_state(&FIRE_TIME)?;
        if let Some(next) = ctx.get_partitioned_state(&FIRE_TIME).get()? {
            ctx.register_event_time_timer(next);
        }
        Ok(())
    }

    fn clear(&self, _: &TimeWindow, ctx: &mut TriggerContext<'_>) -> Result<(), UserError> {
        let mut fire_time = ctx.get_partitioned_state(&FIRE_TIME);
        if let Some(t) = fire_time.get()? {
            fire_time.clear();
            ctx.delete_event_time_timer(t);
        }
        Ok(())
    }
}

/// Fires a window every `interval` of processing time (Flink's
/// `ContinuousProcessingTimeTrigger`): the first record of a window registers a timer at the
/// end of the interval processing time is in (never past the window's `max_timestamp`), and
/// each firing the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContinuousProcessingTimeTrigger {
    interval: i64,
}

impl ContinuousProcessingTimeTrigger {
    /// Fires every `interval` (Flink's `ContinuousProcessingTimeTrigger.of`).
    pub fn of(interval: Duration) -> Self {
        ContinuousProcessingTimeTrigger {
            interval: millis(interval),
        }
    }

    /// The interval, in milliseconds.
    pub const fn interval(&self) -> i64 {
        self.interval
    }

    fn register_next(
        &self,
        time: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<(), UserError> {
        let next = time
            .saturating_add(self.interval)
            .min(window.max_timestamp());
        ctx.get_partitioned_state(&FIRE_TIME).add(next)?;
        ctx.register_processing_time_timer(next);
        Ok(())
    }
}

impl<T> Trigger<T> for ContinuousProcessingTimeTrigger {
    fn on_element(
        &self,
        _: &T,
        _: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        let now = ctx.current_processing_time();
        if ctx.get_partitioned_state(&FIRE_TIME).get()?.is_none() {
            let start = interval_start(now, self.interval)?;
            self.register_next(start, window, ctx)?;
        }
        Ok(TriggerResult::Continue)
    }

    fn on_event_time(
        &self,
        _: i64,
        _: &TimeWindow,
        _: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        Ok(TriggerResult::Continue)
    }

    fn on_processing_time(
        &self,
        time: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        let mut fire_time = ctx.get_partitioned_state(&FIRE_TIME);
        if fire_time.get()? == Some(time) {
            fire_time.clear();
            self.register_next(time, window, ctx)?;
            return Ok(TriggerResult::Fire);
        }
        Ok(TriggerResult::Continue)
    }

    fn can_merge(&self) -> bool {
        true
    }

    fn on_merge(&self, _: &TimeWindow, ctx: &mut OnMergeContext<'_>) -> Result<(), UserError> {
        ctx.merge_partitioned_state(&FIRE_TIME)?;
        if let Some(next) = ctx.get_partitioned_state(&FIRE_TIME).get()? {
            ctx.register_processing_time_timer(next);
        }
        Ok(())
    }

    fn clear(&self, _: &TimeWindow, ctx: &mut TriggerContext<'_>) -> Result<(), UserError> {
        let mut fire_time = ctx.get_partitioned_state(&FIRE_TIME);
        if let Some(t) = fire_time.get()? {
            fire_time.clear();
            ctx.delete_processing_time_timer(t);
        }
        Ok(())
    }
}

/// A user trigger behind a box, cloneable.
pub(crate) trait DynTrigger<T>: Trigger<T> {
    fn clone_box(&self) -> Box<dyn DynTrigger<T>>;
}

impl<T, Tr: Trigger<T> + Clone> DynTrigger<T> for Tr {
    fn clone_box(&self) -> Box<dyn DynTrigger<T>> {
        Box::new(self.clone())
    }
}

/// The trigger a window operator runs: a built-in (dispatched by `match`, no dynamic call) or a
/// user trigger (boxed).
pub(crate) enum AnyTrigger<T> {
    EventTime(EventTimeTrigger),
    ProcessingTime(ProcessingTimeTrigger),
    Never(NeverTrigger),
    Count(CountTrigger),
    Purging(PurgingTrigger<T>),
    ContinuousEventTime(ContinuousEventTimeTrigger),
    ContinuousProcessingTime(ContinuousProcessingTimeTrigger),
    User(Box<dyn DynTrigger<T>>),
}

impl<T: 'static> Clone for AnyTrigger<T> {
    fn clone(&self) -> Self {
        match self {
            AnyTrigger::EventTime(t) => AnyTrigger::EventTime(*t),
            AnyTrigger::ProcessingTime(t) => AnyTrigger::ProcessingTime(*t),
            AnyTrigger::Never(t) => AnyTrigger::Never(*t),
            AnyTrigger::Count(t) => AnyTrigger::Count(*t),
            AnyTrigger::Purging(t) => AnyTrigger::Purging(t.clone()),
            AnyTrigger::ContinuousEventTime(t) => AnyTrigger::ContinuousEventTime(*t),
            AnyTrigger::ContinuousProcessingTime(t) => AnyTrigger::ContinuousProcessingTime(*t),
            AnyTrigger::User(t) => AnyTrigger::User(t.clone_box()),
        }
    }
}

impl<T> std::fmt::Debug for AnyTrigger<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AnyTrigger::EventTime(t) => t.fmt(f),
            AnyTrigger::ProcessingTime(t) => t.fmt(f),
            AnyTrigger::Never(t) => t.fmt(f),
            AnyTrigger::Count(t) => t.fmt(f),
            AnyTrigger::Purging(t) => t.fmt(f),
            AnyTrigger::ContinuousEventTime(t) => t.fmt(f),
            AnyTrigger::ContinuousProcessingTime(t) => t.fmt(f),
            AnyTrigger::User(_) => f.write_str("user trigger"),
        }
    }
}

impl<T: 'static> AnyTrigger<T> {
    /// `trigger` as a variant: a built-in is recognised by its type.
    pub(crate) fn from_trigger<Tr: Trigger<T> + Clone>(trigger: Tr) -> Self {
        let any: &dyn Any = &trigger;
        if let Some(t) = any.downcast_ref::<AnyTrigger<T>>() {
            t.clone()
        } else if let Some(t) = any.downcast_ref::<EventTimeTrigger>() {
            AnyTrigger::EventTime(*t)
        } else if let Some(t) = any.downcast_ref::<ProcessingTimeTrigger>() {
            AnyTrigger::ProcessingTime(*t)
        } else if let Some(t) = any.downcast_ref::<NeverTrigger>() {
            AnyTrigger::Never(*t)
        } else if let Some(t) = any.downcast_ref::<CountTrigger>() {
            AnyTrigger::Count(*t)
        } else if let Some(t) = any.downcast_ref::<PurgingTrigger<T>>() {
            AnyTrigger::Purging(t.clone())
        } else if let Some(t) = any.downcast_ref::<ContinuousEventTimeTrigger>() {
            AnyTrigger::ContinuousEventTime(*t)
        } else if let Some(t) = any.downcast_ref::<ContinuousProcessingTimeTrigger>() {
            AnyTrigger::ContinuousProcessingTime(*t)
        } else {
            AnyTrigger::User(Box::new(trigger))
        }
    }

    /// The assigner's default trigger (Flink's `getDefaultTrigger`).
    pub(crate) fn default_for(assigner: &WindowAssigner) -> Self {
        if matches!(assigner.kind, WindowKind::Global) {
            AnyTrigger::Never(NeverTrigger)
        } else if assigner.is_event_time() {
            AnyTrigger::EventTime(EventTimeTrigger)
        } else {
            AnyTrigger::ProcessingTime(ProcessingTimeTrigger)
        }
    }

    /// Whether this is `assigner`'s default trigger, which the window operator's fast path
    /// implements without a trigger.
    pub(crate) fn is_default_for(&self, assigner: &WindowAssigner) -> bool {
        match self {
            AnyTrigger::EventTime(_) => {
                assigner.is_event_time() && !matches!(assigner.kind, WindowKind::Global)
            }
            AnyTrigger::ProcessingTime(_) => {
                !assigner.is_event_time() && !matches!(assigner.kind, WindowKind::Global)
            }
            _ => false,
        }
    }

    /// Whether the trigger keeps partitioned state (the operator skips looking it up if not).
    pub(crate) fn uses_state(&self) -> bool {
        match self {
            AnyTrigger::EventTime(_) | AnyTrigger::ProcessingTime(_) | AnyTrigger::Never(_) => {
                false
            }
            AnyTrigger::Purging(p) => p.inner.uses_state(),
            _ => true,
        }
    }

    /// Checks the settings: intervals above zero.
    pub(crate) fn validate(&self) -> Result<(), String> {
        match self {
            AnyTrigger::ContinuousEventTime(ContinuousEventTimeTrigger { interval })
            | AnyTrigger::ContinuousProcessingTime(ContinuousProcessingTimeTrigger { interval })
                if *interval <= 0 =>
            {
                Err(format!(
                    "a continuous trigger needs an interval above 0 (interval {interval} ms)"
                ))
            }
            AnyTrigger::Purging(p) => p.inner.validate(),
            _ => Ok(()),
        }
    }
}

macro_rules! dispatch {
    ($self:ident, $t:ident => $call:expr) => {
        match $self {
            AnyTrigger::EventTime($t) => $call,
            AnyTrigger::ProcessingTime($t) => $call,
            AnyTrigger::Never($t) => $call,
            AnyTrigger::Count($t) => $call,
            AnyTrigger::Purging($t) => $call,
            AnyTrigger::ContinuousEventTime($t) => $call,
            AnyTrigger::ContinuousProcessingTime($t) => $call,
            AnyTrigger::User(boxed) => {
                let $t: &dyn DynTrigger<T> = &**boxed;
                $call
            }
        }
    };
}

impl<T: 'static> Trigger<T> for AnyTrigger<T> {
    #[inline]
    fn on_element(
        &self,
        element: &T,
        timestamp: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        dispatch!(self, t => Trigger::<T>::on_element(t, element, timestamp, window, ctx))
    }

    fn on_event_time(
        &self,
        time: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        dispatch!(self, t => Trigger::<T>::on_event_time(t, time, window, ctx))
    }

    fn on_processing_time(
        &self,
        time: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError> {
        dispatch!(self, t => Trigger::<T>::on_processing_time(t, time, window, ctx))
    }

    fn can_merge(&self) -> bool {
        dispatch!(self, t => Trigger::<T>::can_merge(t))
    }

    fn on_merge(&self, window: &TimeWindow, ctx: &mut OnMergeContext<'_>) -> Result<(), UserError> {
        dispatch!(self, t => Trigger::<T>::on_merge(t, window, ctx))
    }

    fn clear(&self, window: &TimeWindow, ctx: &mut TriggerContext<'_>) -> Result<(), UserError> {
        dispatch!(self, t => Trigger::<T>::clear(t, window, ctx))
    }
}
