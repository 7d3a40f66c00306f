//! [`Trigger`]: when a window fires (Flink's `Trigger`), the [`TriggerContext`] a trigger works
//! through (timers of its window, the watermark and processing time, per-window per-key
//! partitioned state), [`OnMergeContext`] for session windows, and [`TriggerResult`].
//!
//! The built-in triggers live in `triggers.rs`; the operator that runs any trigger is
//! `triggered.rs`.

use super::assigner::TimeWindow;
use crate::timer::TimeDomain;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use sluice_core::{UserError, codec};
use std::borrow::Cow;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// What a trigger decides for its window (Flink's `TriggerResult`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TriggerResult {
    /// Nothing happens (Flink's `CONTINUE`).
    Continue,
    /// The window function runs on the window's contents, which are kept (`FIRE`).
    Fire,
    /// The window's contents are removed without firing (`PURGE`); the window's timers and the
    /// trigger's state stay until the window is cleaned up.
    Purge,
    /// The window fires, then its contents are removed (`FIRE_AND_PURGE`).
    FireAndPurge,
}

impl TriggerResult {
    /// Whether the window fires.
    pub const fn is_fire(self) -> bool {
        matches!(self, TriggerResult::Fire | TriggerResult::FireAndPurge)
    }

    /// Whether the window's contents are removed.
    pub const fn is_purge(self) -> bool {
        matches!(self, TriggerResult::Purge | TriggerResult::FireAndPurge)
    }
}

/// Decides when a window fires (Flink's `Trigger`). The window operator calls it for each
/// record added to a window ([`on_element`](Self::on_element)), for each timer the trigger
/// registered through its context ([`on_event_time`](Self::on_event_time),
/// [`on_processing_time`](Self::on_processing_time); also the operator's own cleanup timer of
/// the window, as in Flink), when session windows merge ([`on_merge`](Self::on_merge)) and when
/// the window is removed ([`clear`](Self::clear): delete the timers and state it keeps).
///
/// A trigger keeps nothing in itself: what it remembers per window and key goes into the
/// context's partitioned state, which is checkpointed with the window and follows its key group
/// when the job is restored at another parallelism. An error returned fails the job.
///
/// Every assigner has a default trigger (event-time windows [`EventTimeTrigger`], processing-time
/// windows [`ProcessingTimeTrigger`], [`GlobalWindows`] [`NeverTrigger`]);
/// `WindowedStream::trigger` replaces it. The built-ins are [`CountTrigger`],
/// [`PurgingTrigger`], [`ContinuousEventTimeTrigger`] and [`ContinuousProcessingTimeTrigger`].
///
/// [`EventTimeTrigger`]: super::EventTimeTrigger
/// [`ProcessingTimeTrigger`]: super::ProcessingTimeTrigger
/// [`GlobalWindows`]: super::GlobalWindows
/// [`NeverTrigger`]: super::NeverTrigger
/// [`CountTrigger`]: super::CountTrigger
/// [`PurgingTrigger`]: super::PurgingTrigger
/// [`ContinuousEventTimeTrigger`]: super::ContinuousEventTimeTrigger
/// [`ContinuousProcessingTimeTrigger`]: super::ContinuousProcessingTimeTrigger
///
/// A trigger that fires a window (and purges it) as soon as it holds a record above 100, and
/// otherwise at the end of the window:
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::window::{
///     TimeWindow, Trigger, TriggerContext, TriggerResult, TumblingEventTimeWindows,
/// };
/// use sluice_core::UserError;
/// use std::time::Duration;
///
/// #[derive(Clone)]
/// struct BigOrEnd;
///
/// impl Trigger<(u32, i64, u64)> for BigOrEnd {
///     fn on_element(
///         &self,
///         record: &(u32, i64, u64),
///         _timestamp: i64,
///         window: &TimeWindow,
///         ctx: &mut TriggerContext<'_>,
///     ) -> Result<TriggerResult, UserError> {
///         if record.2 > 100 {
///             return Ok(TriggerResult::FireAndPurge);
///         }
///         ctx.register_event_time_timer(window.max_timestamp());
///         Ok(TriggerResult::Continue)
///     }
///     fn on_event_time(
///         &self,
///         time: i64,
///         window: &TimeWindow,
///         _ctx: &mut TriggerContext<'_>,
///     ) -> Result<TriggerResult, UserError> {
///         Ok(if time == window.max_timestamp() { TriggerResult::Fire } else { TriggerResult::Continue })
///     }
///     fn on_processing_time(
///         &self,
///         _time: i64,
///         _window: &TimeWindow,
///         _ctx: &mut TriggerContext<'_>,
///     ) -> Result<TriggerResult, UserError> {
///         Ok(TriggerResult::Continue)
///     }
///     fn clear(&self, window: &TimeWindow, ctx: &mut TriggerContext<'_>) -> Result<(), UserError> {
///         ctx.delete_event_time_timer(window.max_timestamp());
///         Ok(())
///     }
/// }
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(1);
/// // (user, event time, amount)
/// let orders = vec![(1u32, 1_000i64, 5u64), (1, 2_000, 500), (1, 3_000, 7), (1, 4_000, 8)];
/// let sums = env
///     .from_iter(orders)
///     .assign_timestamps_and_watermarks(WatermarkStrategy::for_monotonous_timestamps(|o: &(u32, i64, u64)| o.1))
///     .key_by(|o| o.0)
///     .window(TumblingEventTimeWindows::of(Duration::from_secs(60)))
///     .trigger(BigOrEnd)
///     .reduce(|a, b| (a.0, a.1, a.2 + b.2))
///     .map(|o| o.2)
///     .collect();
/// env.execute_blocking("big orders early").unwrap();
/// assert_eq!(sums.take(), vec![505, 15], "fired early at 500, the rest at the window's end");
/// ```
pub trait Trigger<T>: Send + 'static {
    /// A record was added to `window` (`timestamp` is its event time, or
    /// [`NO_TIMESTAMP`](sluice_core::NO_TIMESTAMP) when it has none).
    fn on_element(
        &self,
        element: &T,
        timestamp: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError>;

    /// An event-time timer of `window` at `time` fired.
    fn on_event_time(
        &self,
        time: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError>;

    /// A processing-time timer of `window` at `time` fired.
    fn on_processing_time(
        &self,
        time: i64,
        window: &TimeWindow,
        ctx: &mut TriggerContext<'_>,
    ) -> Result<TriggerResult, UserError>;

    /// Whether the trigger supports merging windows (sessions): then
    /// [`on_merge`](Self::on_merge) must be implemented. A merging assigner with a trigger that
    /// cannot merge is refused when the job is submitted.
    fn can_merge(&self) -> bool {
        false
    }

    /// Windows were merged into `window`: merge their partitioned state into it
    /// ([`OnMergeContext::merge_partitioned_state`]) and register the timers `window` needs.
    /// After this, [`clear`](Self::clear) is called for each merged window.
    fn on_merge(&self, window: &TimeWindow, ctx: &mut OnMergeContext<'_>) -> Result<(), UserError> {
        let _ = (window, ctx);
        Err("this trigger does not support merging windows".into())
    }

    /// `window` is removed (its cleanup time passed, or it was merged into another): delete the
    /// timers and state the trigger keeps for it.
    fn clear(&self, window: &TimeWindow, ctx: &mut TriggerContext<'_>) -> Result<(), UserError>;
}

/// A timer a trigger registered or deleted, applied by the operator right after the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimerRequest {
    pub(crate) domain: TimeDomain,
    pub(crate) timestamp: i64,
    pub(crate) register: bool,
}

/// The partitioned state of one trigger for one window of one key: named values, encoded.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TriggerState {
    entries: Vec<(Cow<'static, str>, Vec<u8>)>,
}

impl TriggerState {
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn get(&self, name: &str) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    fn set<T: Serialize>(&mut self, name: &'static str, value: &T) -> Result<(), UserError> {
        if let Some((_, bytes)) = self.entries.iter_mut().find(|(n, _)| n == name) {
            bytes.clear();
            codec::encode_into(value, bytes)?;
        } else {
            self.entries
                .push((Cow::Borrowed(name), codec::encode(value)?));
        }
        Ok(())
    }

    fn remove(&mut self, name: &str) -> Option<Vec<u8>> {
        let i = self.entries.iter().position(|(n, _)| n == name)?;
        Some(self.entries.swap_remove(i).1)
    }
}

fn decode_state<T: DeserializeOwned>(name: &str, bytes: &[u8]) -> Result<T, UserError> {
    codec::decode(bytes).map_err(|e| -> UserError {
        format!("trigger state {name:?} does not hold the type its descriptor names: {e}").into()
    })
}

/// Names a trigger's partitioned state whose values are combined with a function as they are
/// added, and when session windows merge (Flink's `ReducingStateDescriptor`).
///
/// ```
/// use sluice_runtime::window::ReducingStateDescriptor;
/// const COUNT: ReducingStateDescriptor<u64> = ReducingStateDescriptor::new("count", |a, b| a + b);
/// assert_eq!(COUNT.name(), "count");
/// ```
pub struct ReducingStateDescriptor<T> {
    name: &'static str,
    reduce: fn(T, T) -> T,
}

impl<T> ReducingStateDescriptor<T> {
    /// State named `name` (unique within the trigger), combined with `reduce`.
    pub const fn new(name: &'static str, reduce: fn(T, T) -> T) -> Self {
        ReducingStateDescriptor { name, reduce }
    }

    /// The state's name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

/// Names a trigger's partitioned state holding one value (Flink's `ValueStateDescriptor`). It
/// does not merge: a trigger of session windows keeps what it needs in reducing state.
pub struct ValueStateDescriptor<T> {
    name: &'static str,
    _t: PhantomData<fn() -> T>,
}

impl<T> ValueStateDescriptor<T> {
    /// State named `name` (unique within the trigger).
    pub const fn new(name: &'static str) -> Self {
        ValueStateDescriptor {
            name,
            _t: PhantomData,
        }
    }
}

/// A trigger's reducing state of the current window and key (Flink's `ReducingState`).
pub struct ReducingState<'s, T> {
    slot: &'s mut TriggerState,
    desc: &'s ReducingStateDescriptor<T>,
}

impl<T: Serialize + DeserializeOwned> ReducingState<'_, T> {
    /// The combined value, `None` when nothing was added since the last clear.
    pub fn get(&self) -> Result<Option<T>, UserError> {
        self.slot
            .get(self.desc.name)
            .map(|b| decode_state(self.desc.name, b))
            .transpose()
    }

    /// Combines `value` into the state.
    pub fn add(&mut self, value: T) -> Result<(), UserError> {
        let next = match self.get()? {
            Some(v) => (self.desc.reduce)(v, value),
            None => value,
        };
        self.slot.set(self.desc.name, &next)
    }

    /// Removes the value.
    pub fn clear(&mut self) {
        self.slot.remove(self.desc.name);
    }
}

/// A trigger's value state of the current window and key (Flink's `ValueState`).
pub struct ValueState<'s, T> {
    slot: &'s mut TriggerState,
    desc: &'s ValueStateDescriptor<T>,
}

impl<T: Serialize + DeserializeOwned> ValueState<'_, T> {
    /// The value, `None` when unset.
    pub fn value(&self) -> Result<Option<T>, UserError> {
        self.slot
            .get(self.desc.name)
            .map(|b| decode_state(self.desc.name, b))
            .transpose()
    }

    /// Sets the value.
    pub fn update(&mut self, value: T) -> Result<(), UserError> {
        self.slot.set(self.desc.name, &value)
    }

    /// Removes the value.
    pub fn clear(&mut self) {
        self.slot.remove(self.desc.name);
    }
}

/// What a trigger works through (Flink's `Trigger.TriggerContext`): the timers of the current
/// window and key, the current watermark and processing time, and partitioned state of the
/// current window and key.
///
/// Timers registered here fire [`Trigger::on_event_time`] / [`Trigger::on_processing_time`]
/// for this window; registering one that exists, or deleting one that does not, does nothing.
pub struct TriggerContext<'a> {
    watermark: i64,
    processing_time: i64,
    state: &'a mut TriggerState,
    timers: &'a mut Vec<TimerRequest>,
}

impl<'a> TriggerContext<'a> {
    pub(crate) fn new(
        watermark: i64,
        processing_time: i64,
        state: &'a mut TriggerState,
        timers: &'a mut Vec<TimerRequest>,
    ) -> Self {
        TriggerContext {
            watermark,
            processing_time,
            state,
            timers,
        }
    }

    /// The current watermark (`i64::MIN` before the first).
    pub fn current_watermark(&self) -> i64 {
        self.watermark
    }

    /// Processing time now, in epoch milliseconds.
    pub fn current_processing_time(&self) -> i64 {
        self.processing_time
    }

    fn request(&mut self, domain: TimeDomain, timestamp: i64, register: bool) {
        self.timers.push(TimerRequest {
            domain,
            timestamp,
            register,
        });
    }

    /// Registers an event-time timer of this window at `time`.
    pub fn register_event_time_timer(&mut self, time: i64) {
        self.request(TimeDomain::EventTime, time, true);
    }

    /// Deletes this window's event-time timer at `time`.
    pub fn delete_event_time_timer(&mut self, time: i64) {
        self.request(TimeDomain::EventTime, time, false);
    }

    /// Registers a processing-time timer of this window at `time`.
    pub fn register_processing_time_timer(&mut self, time: i64) {
        self.request(TimeDomain::ProcessingTime, time, true);
    }

    /// Deletes this window's processing-time timer at `time`.
    pub fn delete_processing_time_timer(&mut self, time: i64) {
        self.request(TimeDomain::ProcessingTime, time, false);
    }

    /// The reducing state `desc` names, of this window and key (Flink's `getPartitionedState`
    /// with a `ReducingStateDescriptor`).
    pub fn get_partitioned_state<'s, T>(
        &'s mut self,
        desc: &'s ReducingStateDescriptor<T>,
    ) -> ReducingState<'s, T> {
        ReducingState {
            slot: self.state,
            desc,
        }
    }

    /// The value state `desc` names, of this window and key (Flink's `getPartitionedState`
    /// with a `ValueStateDescriptor`).
    pub fn get_value_state<'s, T>(
        &'s mut self,
        desc: &'s ValueStateDescriptor<T>,
    ) -> ValueState<'s, T> {
        ValueState {
            slot: self.state,
            desc,
        }
    }
}

/// The context of [`Trigger::on_merge`] (Flink's `OnMergeContext`): a [`TriggerContext`] of the
/// merged window, which can also merge the partitioned state of the windows merged into it.
pub struct OnMergeContext<'a> {
    ctx: TriggerContext<'a>,
    merged: &'a mut [TriggerState],
}

impl<'a> OnMergeContext<'a> {
    pub(crate) fn new(ctx: TriggerContext<'a>, merged: &'a mut [TriggerState]) -> Self {
        OnMergeContext { ctx, merged }
    }

    /// Combines the state `desc` names of every merged window into the merged window's (Flink's
    /// `mergePartitionedState`); the merged windows' values are removed.
    pub fn merge_partitioned_state<T: Serialize + DeserializeOwned>(
        &mut self,
        desc: &ReducingStateDescriptor<T>,
    ) -> Result<(), UserError> {
        let mut acc: Option<T> = self
            .ctx
            .state
            .get(desc.name)
            .map(|b| decode_state(desc.name, b))
            .transpose()?;
        for slot in self.merged.iter_mut() {
            if let Some(bytes) = slot.remove(desc.name) {
                let v: T = decode_state(desc.name, &bytes)?;
                acc = Some(match acc {
                    Some(a) => (desc.reduce)(a, v),
                    None => v,
                });
            }
        }
        if let Some(v) = acc {
            self.ctx.state.set(desc.name, &v)?;
        }
        Ok(())
    }
}

impl<'a> Deref for OnMergeContext<'a> {
    type Target = TriggerContext<'a>;
    fn deref(&self) -> &TriggerContext<'a> {
        &self.ctx
    }
}

impl<'a> DerefMut for OnMergeContext<'a> {
    fn deref_mut(&mut self) -> &mut TriggerContext<'a> {
        &mut self.ctx
    }
}
