//! `TriggerWindowOperator`: Flink's `WindowOperator` and `EvictingWindowOperator` with any
//! [`Trigger`](super::Trigger), for windows that set a trigger other than their assigner's
//! default, set an evictor, or are [`GlobalWindows`](super::GlobalWindows). Windows with their
//! default trigger and no evictor run in the faster `WindowOperator` (`operator.rs`), which
//! implements the default triggers without calling one.
//!
//! The rules are Flink's, record by record: for each window of a record that is not late, the
//! record is added to the window's contents, the trigger's `on_element` decides (fire, purge,
//! both, neither), and a cleanup timer is registered at the window's cleanup time
//! (`max_timestamp + allowed_lateness` in event time, `max_timestamp` in processing time, never
//! for the global window). A timer of a window calls the trigger's `on_event_time` or
//! `on_processing_time`; at the cleanup time the window's contents, the trigger's state
//! (`clear`) and the window go. Session windows merge as in `operator.rs`, the trigger's
//! `on_merge` merging its state into the new window, then `clear` for each merged one.
//!
//! What a window keeps is a `WindowStore`: an accumulator (`Incremental`, for reduce,
//! aggregate and process without an evictor) or all its records with their timestamps
//! (`Evicting`: the evictor runs before and after the window function, which is folded over
//! the records left at each firing; what is left is kept).
//!
//! Checkpoints hold, per key group: the windows' contents, the trigger's partitioned state of
//! each (key, window), the session windows of each key, and the timers; so all of them restore
//! at another parallelism. The three tables are keyed states (a [`KeyWindow`] is a key of the
//! first two, hashed by its key alone so that it stays in its key's key group): on the heap by
//! default, in the job's keyed store when it has one, with the timers (Flink keeps window and
//! trigger state in RocksDB likewise).

use super::assigner::{TimeWindow, session_lookups};
use super::evictor::{AnyEvictor, Evictor, EvictorContext, TimestampedValue};
use super::function::WindowContents;
use super::operator::WindowSpec;
use super::stored::kept;
use super::trigger::{OnMergeContext, TimerRequest, Trigger, TriggerContext, TriggerState};
use super::triggers::AnyTrigger;
use crate::operator::{Collector, Operator, OperatorContext};
use crate::process::{StateKey, Tagged, TimedOperator};
use crate::state::{OperatorState, ValueState};
use crate::timer::{InternalTimers, ProcessingClock, TimeDomain, Timer};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use sluice_core::{AttemptNumber, CheckpointId, Data, NO_TIMESTAMP, UserError, Watermark};
use std::fmt::Debug;
use std::hash::Hash;
use std::marker::PhantomData;
use std::task::Poll;

pub(super) const CONTENTS_STATE: &str = "_window/triggered/contents";
pub(super) const TRIGGER_STATE: &str = "_window/triggered/trigger-state";
pub(super) const SESSIONS_STATE: &str = "_window/triggered/sessions";

/// A key's window as a key of keyed state: encoded key first, then the window (so a
/// checkpoint holds `(key, window, value)`s per key group), in its key's key group
/// ([`key_window_group`]); its hash covers both, so that a key's windows spread in a hash
/// table.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(super) struct KeyWindow<K> {
    pub(super) key: K,
    pub(super) window: TimeWindow,
}

/// The key group of a key's window: the key's. Every state keyed by [`KeyWindow`] is made
/// `grouped_by` it.
fn key_window_group<K: Hash>(w: &KeyWindow<K>, max_parallelism: usize) -> usize {
    crate::key_groups::key_group(&w.key, max_parallelism)
}

impl<K: Clone> KeyWindow<K> {
    fn of(key: &K, window: TimeWindow) -> Self {
        KeyWindow {
            key: key.clone(),
            window,
        }
    }
}

/// What a window of the triggered operator keeps, and how it fires.
pub(crate) trait WindowStore<K, In>: Clone + Send + 'static {
    /// One window's contents (stored in checkpoints).
    type State: Clone + Send + Debug + Serialize + DeserializeOwned + 'static;
    /// The output record type.
    type Out: Data;
    /// A window's first record.
    fn create(&self, value: In, timestamp: Option<i64>) -> Self::State;
    /// A further record.
    fn add(&self, state: &mut Self::State, value: In, timestamp: Option<i64>);
    /// Two windows merged (sessions): `a` is the older contents.
    fn merge(&self, a: Self::State, b: Self::State) -> Self::State;
    /// The window fires; returns whether anything of it is left.
    fn fire(
        &mut self,
        key: &K,
        window: &TimeWindow,
        state: &mut Self::State,
        ctx: &EvictorContext,
        out: &mut Vec<Self::Out>,
    ) -> Result<bool, UserError>;
}

/// An accumulator per window (no evictor).
#[derive(Clone)]
pub(crate) struct Incremental<C>(pub(crate) C);

impl<K, In, C: WindowContents<K, In>> WindowStore<K, In> for Incremental<C> {
    type State = C::Acc;
    type Out = C::Out;
    #[inline]
    fn create(&self, value: In, _: Option<i64>) -> C::Acc {
        self.0.create(value)
    }
    #[inline]
    fn add(&self, state: &mut C::Acc, value: In, _: Option<i64>) {
        self.0.add(state, value);
    }
    fn merge(&self, a: C::Acc, b: C::Acc) -> C::Acc {
        self.0.merge(a, b)
    }
    fn fire(
        &mut self,
        key: &K,
        window: &TimeWindow,
        state: &mut C::Acc,
        _: &EvictorContext,
        out: &mut Vec<C::Out>,
    ) -> Result<bool, UserError> {
        self.0.emit(key, window, state, out)?;
        Ok(true)
    }
}

/// All records of a window with their timestamps, and an evictor (Flink's
/// `EvictingWindowOperator`).
pub(crate) struct Evicting<C, In> {
    pub(crate) contents: C,
    pub(crate) evictor: AnyEvictor<In>,
}

impl<C: Clone, In: 'static> Clone for Evicting<C, In> {
    fn clone(&self) -> Self {
        Evicting {
            contents: self.contents.clone(),
            evictor: self.evictor.clone(),
        }
    }
}

impl<K, In: Data, C: WindowContents<K, In>> WindowStore<K, In> for Evicting<C, In> {
    type State = Vec<TimestampedValue<In>>;
    type Out = C::Out;
    fn create(&self, value: In, timestamp: Option<i64>) -> Self::State {
        vec![TimestampedValue::new(value, timestamp)]
    }
    fn add(&self, state: &mut Self::State, value: In, timestamp: Option<i64>) {
        state.push(TimestampedValue::new(value, timestamp));
    }
    fn merge(&self, mut a: Self::State, b: Self::State) -> Self::State {
        a.extend(b);
        a
    }
    fn fire(
        &mut self,
        key: &K,
        window: &TimeWindow,
        state: &mut Self::State,
        ctx: &EvictorContext,
        out: &mut Vec<C::Out>,
    ) -> Result<bool, UserError> {
        self.evictor
            .evict_before(state, window, ctx)
            .map_err(|e| evictor_failed("evict_before", window, e))?;
        let mut records = state.iter();
        if let Some(first) = records.next() {
            let mut acc = self.contents.create(first.value.clone());
            for r in records {
                self.contents.add(&mut acc, r.value.clone());
            }
            self.contents.emit(key, window, &acc, out)?;
        }
        self.evictor
            .evict_after(state, window, ctx)
            .map_err(|e| evictor_failed("evict_after", window, e))?;
        Ok(!state.is_empty())
    }
}

fn evictor_failed(call: &str, window: &TimeWindow, e: UserError) -> UserError {
    format!("the window's evictor failed in {call} for {window:?}: {e}").into()
}

fn trigger_failed(call: &str, window: &TimeWindow, e: UserError) -> UserError {
    format!("the window's trigger failed in {call} for {window:?}: {e}").into()
}

/// Flink's `WindowOperator` with any trigger, and with an evictor its
/// `EvictingWindowOperator` (see the module documentation).
pub(crate) struct TriggerWindowOperator<In, K, KF, S: WindowStore<K, In>> {
    spec: WindowSpec<In>,
    trigger: AnyTrigger<In>,
    /// Whether the trigger keeps partitioned state (else its slots are never looked up).
    trigger_uses_state: bool,
    store: S,
    key_fn: KF,
    /// The contents of each (key, window) that holds any.
    pub(super) windows: ValueState<KeyWindow<K>, S::State>,
    /// The trigger's partitioned state of each (key, window) that has any.
    pub(super) trigger_state: ValueState<KeyWindow<K>, TriggerState>,
    /// Session windows only: each key's windows (a window stays until its cleanup, also when
    /// its contents were purged).
    pub(super) sessions: ValueState<K, Vec<TimeWindow>>,
    pub(super) timers: InternalTimers<K, TimeWindow>,
    requests: Vec<TimerRequest>,
    assigned: Vec<TimeWindow>,
    results: Vec<S::Out>,
    max_parallelism: usize,
    attempt: AttemptNumber,
    _in: PhantomData<fn(In)>,
}

impl<In: 'static, K: StateKey, KF: Clone, S: WindowStore<K, In>> Clone
    for TriggerWindowOperator<In, K, KF, S>
{
    /// A fresh instance: the same functions, no windows, no timers.
    fn clone(&self) -> Self {
        Self::new(
            self.spec.clone(),
            self.trigger.clone(),
            self.store.clone(),
            self.key_fn.clone(),
        )
    }
}

impl<In: 'static, K: StateKey, KF, S: WindowStore<K, In>> TriggerWindowOperator<In, K, KF, S> {
    pub(crate) fn new(spec: WindowSpec<In>, trigger: AnyTrigger<In>, store: S, key_fn: KF) -> Self {
        TriggerWindowOperator {
            spec,
            trigger_uses_state: trigger.uses_state(),
            trigger,
            store,
            key_fn,
            windows: ValueState::new(CONTENTS_STATE).grouped_by(key_window_group),
            trigger_state: ValueState::new(TRIGGER_STATE).grouped_by(key_window_group),
            sessions: ValueState::new(SESSIONS_STATE),
            timers: InternalTimers::new("window"),
            requests: Vec::new(),
            assigned: Vec::new(),
            results: Vec::new(),
            max_parallelism: crate::DEFAULT_MAX_PARALLELISM,
            attempt: 0,
            _in: PhantomData,
        }
    }

    fn event_time(&self) -> bool {
        self.spec.assigner.is_event_time()
    }

    /// The first failure of the keyed store behind the operator's states since the last check
    /// (none on the heap).
    fn store_failure(&mut self) -> Result<(), UserError> {
        kept(&mut self.windows)?;
        kept(&mut self.trigger_state)?;
        kept(&mut self.sessions)?;
        Ok(())
    }

    fn merging(&self) -> bool {
        self.spec.assigner.is_merging()
    }

    /// Flink's `cleanupTime`: `max_timestamp + allowed_lateness` in event time (`i64::MAX` on
    /// overflow: never), `max_timestamp` in processing time; never for the global window.
    fn cleanup_time(&self, w: &TimeWindow) -> i64 {
        if self.spec.assigner.is_global() {
            i64::MAX
        } else if self.event_time() {
            w.max_timestamp()
                .checked_add(self.spec.allowed_lateness)
                .unwrap_or(i64::MAX)
        } else {
            w.max_timestamp()
        }
    }

    fn is_window_late(&self, w: &TimeWindow) -> bool {
        self.event_time() && self.cleanup_time(w) <= self.timers.current_watermark()
    }

    fn is_element_late(&self, timestamp: i64) -> bool {
        self.event_time()
            && timestamp.saturating_add(self.spec.allowed_lateness)
                <= self.timers.current_watermark()
    }

    fn register_cleanup_timer(&mut self, key: &K, w: TimeWindow) {
        let at = self.cleanup_time(&w);
        if at == i64::MAX {
            return;
        }
        if self.event_time() {
            self.timers.register_event_time_timer(key.clone(), w, at);
        } else {
            self.timers
                .register_processing_time_timer(key.clone(), w, at);
        }
    }

    fn delete_cleanup_timer(&mut self, key: &K, w: &TimeWindow) {
        let at = self.cleanup_time(w);
        if self.event_time() {
            self.timers.delete_event_time_timer(key, w, at);
        } else {
            self.timers.delete_processing_time_timer(key, w, at);
        }
    }

    /// Applies the timer requests of the last trigger call, for `key`'s window `w`.
    fn apply_requests(&mut self, key: &K, w: TimeWindow) {
        for r in self.requests.drain(..) {
            match (r.domain, r.register) {
                (TimeDomain::EventTime, true) => {
                    self.timers
                        .register_event_time_timer(key.clone(), w, r.timestamp);
                }
                (TimeDomain::EventTime, false) => {
                    self.timers.delete_event_time_timer(key, &w, r.timestamp);
                }
                (TimeDomain::ProcessingTime, true) => {
                    self.timers
                        .register_processing_time_timer(key.clone(), w, r.timestamp);
                }
                (TimeDomain::ProcessingTime, false) => {
                    self.timers
                        .delete_processing_time_timer(key, &w, r.timestamp);
                }
            }
        }
    }

    /// Runs `f` on the trigger with a context of `key`'s window `w` (its partitioned state
    /// taken out of the table and put back if any is left), then applies its timers.
    #[inline]
    fn call_trigger<R>(
        &mut self,
        key: &K,
        w: TimeWindow,
        now: i64,
        f: impl FnOnce(&AnyTrigger<In>, &mut TriggerContext<'_>) -> Result<R, UserError>,
    ) -> Result<R, UserError> {
        let mut slot = if self.trigger_uses_state {
            self.trigger_state
                .remove(&KeyWindow::of(key, w))
                .unwrap_or_default()
        } else {
            TriggerState::default()
        };
        self.requests.clear();
        let mut ctx = TriggerContext::new(
            self.timers.current_watermark(),
            now,
            &mut slot,
            &mut self.requests,
        );
        let result = f(&self.trigger, &mut ctx);
        if !slot.is_empty() {
            self.trigger_state.update(KeyWindow::of(key, w), slot);
        }
        self.apply_requests(key, w);
        result
    }

    /// The trigger's `clear` for `key`'s window `w`; whatever state it leaves goes too (the
    /// window is gone).
    fn clear_trigger(&mut self, key: &K, w: TimeWindow, now: i64) -> Result<(), UserError> {
        self.call_trigger(key, w, now, |t, ctx| t.clear(&w, ctx))
            .map_err(|e| trigger_failed("clear", &w, e))?;
        if self.trigger_uses_state {
            self.trigger_state.remove(&KeyWindow::of(key, w));
        }
        Ok(())
    }

    /// Acts on what the trigger decided for `key`'s window `w`.
    fn apply_result(
        &mut self,
        key: &K,
        w: TimeWindow,
        result: super::TriggerResult,
        out: &mut Collector<Tagged<S::Out>>,
    ) -> Result<(), UserError> {
        if result.is_fire() {
            self.fire(key, w, out)?;
        }
        if result.is_purge() {
            self.windows.remove(&KeyWindow::of(key, w));
        }
        Ok(())
    }

    /// `key`'s window `w` fires: its results, with event time `max_timestamp`.
    fn fire(
        &mut self,
        key: &K,
        w: TimeWindow,
        out: &mut Collector<Tagged<S::Out>>,
    ) -> Result<(), UserError> {
        let ctx = EvictorContext::new(
            self.timers.current_watermark(),
            self.timers.current_processing_time(),
        );
        let Self {
            windows,
            store,
            results,
            ..
        } = self;
        let kw = KeyWindow::of(key, w);
        let Some(state) = windows.get_mut(&kw) else {
            return Ok(());
        };
        results.clear();
        let left = store.fire(key, &w, state, &ctx, results)?;
        if !left {
            windows.remove(&kw);
        }
        for r in results.drain(..) {
            out.collect_at(Tagged::Main(r), w.max_timestamp());
        }
        Ok(())
    }

    fn late(&mut self, record: In, timestamp: i64, out: &mut Collector<Tagged<S::Out>>)
    where
        In: Data,
    {
        match &self.spec.late_tag {
            Some(tag) => out.collect_at(Tagged::side(tag, record), timestamp),
            None => self.spec.late_dropped.add(self.attempt, 1),
        }
    }

    /// Removes `w` from `key`'s session windows.
    fn forget_session(&mut self, key: &K, w: &TimeWindow) {
        if let Some(ws) = self.sessions.get_mut(key) {
            ws.retain(|x| x != w);
            if ws.is_empty() {
                self.sessions.remove(key);
            }
        }
    }

    /// Adds `record` to `key`'s window `w`, asks the trigger, acts on its answer and registers
    /// the cleanup timer.
    #[inline]
    fn add_to_window(
        &mut self,
        key: &K,
        w: TimeWindow,
        record: In,
        timestamp: Option<i64>,
        now: i64,
        out: &mut Collector<Tagged<S::Out>>,
    ) -> Result<(), UserError> {
        // The trigger cannot see the contents, so it may decide before the record is added.
        let ts = timestamp.unwrap_or(NO_TIMESTAMP);
        let result = self
            .call_trigger(key, w, now, |t, ctx| t.on_element(&record, ts, &w, ctx))
            .map_err(|e| trigger_failed("on_element", &w, e))?;
        let kw = KeyWindow::of(key, w);
        match self.windows.get_mut(&kw) {
            Some(state) => self.store.add(state, record, timestamp),
            None => {
                self.windows
                    .update(kw, self.store.create(record, timestamp));
            }
        }
        self.apply_result(key, w, result, out)?;
        self.register_cleanup_timer(key, w);
        Ok(())
    }

    /// With the windows in a store: reads what the records of `batch` will look up, one read
    /// of many keys per state: the sessions of their keys (session windows), then the contents
    /// and, when the trigger keeps state, the trigger's state of the windows they add to (for
    /// sessions, those they touch and the one they land in, as `add_to_session` finds them).
    fn prefetch(
        &mut self,
        batch: &[In],
        timestamps: Option<&[i64]>,
        now: i64,
    ) -> Result<(), UserError>
    where
        KF: Fn(&In) -> K,
    {
        let (event_time, merging) = (self.event_time(), self.merging());
        let keys: Vec<K> = batch.iter().map(&self.key_fn).collect();
        if merging {
            self.sessions.prefetch(&keys);
        }
        let mut at = Vec::new();
        let mut windows = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let (time, _) = record_time(event_time, timestamps, i, now)?;
            windows.clear();
            self.spec.assigner.assign(time, &mut windows);
            if merging {
                let Some(&w) = windows.first() else {
                    continue;
                };
                session_lookups(self.sessions.get(key), w, |x| {
                    at.push(KeyWindow::of(key, x))
                });
            } else {
                for &w in &windows {
                    if !self.is_window_late(&w) {
                        at.push(KeyWindow::of(key, w));
                    }
                }
            }
        }
        self.windows.prefetch(&at);
        if self.trigger_uses_state {
            self.trigger_state.prefetch(&at);
        }
        Ok(())
    }

    /// A record of a non-merging assigner.
    fn add_to_windows(
        &mut self,
        key: K,
        record: In,
        time: i64,
        timestamp: Option<i64>,
        now: i64,
        out: &mut Collector<Tagged<S::Out>>,
    ) -> Result<(), UserError>
    where
        In: Data,
    {
        let mut windows = std::mem::take(&mut self.assigned);
        windows.clear();
        self.spec.assigner.assign(time, &mut windows);
        windows.retain(|w| !self.is_window_late(w));
        let result = (|| {
            let Some((&last, rest)) = windows.split_last() else {
                if self.is_element_late(time) {
                    self.late(record, time, out);
                }
                return Ok(());
            };
            for &w in rest {
                self.add_to_window(&key, w, record.clone(), timestamp, now, out)?;
            }
            self.add_to_window(&key, last, record, timestamp, now, out)
        })();
        self.assigned = windows;
        result
    }

    /// A record of a session assigner: Flink's `MergingWindowSet.addWindow` with the
    /// operator's merge function.
    fn add_to_session(
        &mut self,
        key: K,
        record: In,
        time: i64,
        timestamp: Option<i64>,
        now: i64,
        out: &mut Collector<Tagged<S::Out>>,
    ) -> Result<(), UserError>
    where
        In: Data,
    {
        self.assigned.clear();
        self.spec.assigner.assign(time, &mut self.assigned);
        let Some(&w) = self.assigned.first() else {
            return Ok(());
        };
        let touching: Vec<TimeWindow> = self
            .sessions
            .get(&key)
            .map(|ws| ws.iter().copied().filter(|x| x.intersects(&w)).collect())
            .unwrap_or_default();
        let actual = match touching.as_slice() {
            [] => {
                self.sessions.get_or_default(key.clone()).push(w);
                w
            }
            [one] if one.start <= w.start && one.end >= w.end => *one,
            _ => {
                let cover = touching.iter().fold(w, |c, x| c.cover(x));
                self.merge(&key, cover, &touching, now)?;
                cover
            }
        };
        if self.is_window_late(&actual) {
            // Only a new window can be late here (a merge never moves a window back).
            self.forget_session(&key, &actual);
            if self.is_element_late(time) {
                self.late(record, time, out);
            }
            return Ok(());
        }
        self.add_to_window(&key, actual, record, timestamp, now, out)
    }

    /// `key`'s windows `merged` become `cover`: the trigger merges its state (`on_merge`), each
    /// merged window is cleared (`clear`, its cleanup timer), and their contents merge.
    fn merge(
        &mut self,
        key: &K,
        cover: TimeWindow,
        merged: &[TimeWindow],
        now: i64,
    ) -> Result<(), UserError> {
        if self.event_time() {
            if self.is_window_late(&cover) {
                return Err(format!(
                    "merging session windows into {cover:?} would end it before the current watermark {}",
                    self.timers.current_watermark()
                )
                .into());
            }
        } else if cover.max_timestamp() <= now {
            return Err(format!(
                "merging session windows into {cover:?} would end it before the current processing time {now}"
            )
            .into());
        }
        let existing = self.sessions.get_or_default(key.clone());
        existing.retain(|x| !merged.contains(x));
        existing.push(cover);
        // The trigger's on_merge, with the merged windows' state beside the new window's.
        let mut merged_slots: Vec<TriggerState> = merged
            .iter()
            .map(|m| {
                self.trigger_state
                    .remove(&KeyWindow::of(key, *m))
                    .unwrap_or_default()
            })
            .collect();
        let mut target = self
            .trigger_state
            .remove(&KeyWindow::of(key, cover))
            .unwrap_or_default();
        self.requests.clear();
        let ctx = TriggerContext::new(
            self.timers.current_watermark(),
            now,
            &mut target,
            &mut self.requests,
        );
        let merged_result = self
            .trigger
            .on_merge(&cover, &mut OnMergeContext::new(ctx, &mut merged_slots));
        if !target.is_empty() {
            self.trigger_state.update(KeyWindow::of(key, cover), target);
        }
        self.apply_requests(key, cover);
        merged_result.map_err(|e| trigger_failed("on_merge", &cover, e))?;
        let mut contents: Option<S::State> = None;
        for (m, slot) in merged.iter().zip(merged_slots) {
            if !slot.is_empty() {
                self.trigger_state.update(KeyWindow::of(key, *m), slot);
            }
            self.clear_trigger(key, *m, now)?;
            self.delete_cleanup_timer(key, m);
            if let Some(state) = self.windows.remove(&KeyWindow::of(key, *m)) {
                contents = Some(match contents {
                    Some(a) => self.store.merge(a, state),
                    None => state,
                });
            }
        }
        if let Some(state) = contents {
            let state = match self.windows.remove(&KeyWindow::of(key, cover)) {
                Some(own) => self.store.merge(own, state),
                None => state,
            };
            self.windows.update(KeyWindow::of(key, cover), state);
        }
        Ok(())
    }
}

impl<In: Data, K: StateKey, KF, S: WindowStore<K, In>> TimedOperator<K, TimeWindow, Tagged<S::Out>>
    for TriggerWindowOperator<In, K, KF, S>
{
    fn timers(&mut self) -> &mut InternalTimers<K, TimeWindow> {
        &mut self.timers
    }

    fn on_timer(
        &mut self,
        timer: Timer<K, TimeWindow>,
        out: &mut Collector<Tagged<S::Out>>,
    ) -> Result<(), UserError> {
        let Timer {
            key,
            namespace: w,
            timestamp,
            domain,
        } = timer;
        if self.merging() && !self.sessions.get(&key).is_some_and(|ws| ws.contains(&w)) {
            // A timer the trigger left behind for a window merged into another or gone.
            return Ok(());
        }
        let now = self.timers.current_processing_time();
        let result = match domain {
            TimeDomain::EventTime => self
                .call_trigger(&key, w, now, |t, ctx| t.on_event_time(timestamp, &w, ctx))
                .map_err(|e| trigger_failed("on_event_time", &w, e))?,
            TimeDomain::ProcessingTime => self
                .call_trigger(&key, w, now, |t, ctx| {
                    t.on_processing_time(timestamp, &w, ctx)
                })
                .map_err(|e| trigger_failed("on_processing_time", &w, e))?,
        };
        self.apply_result(&key, w, result, out)?;
        let own_domain = if self.event_time() {
            TimeDomain::EventTime
        } else {
            TimeDomain::ProcessingTime
        };
        if domain == own_domain && timestamp == self.cleanup_time(&w) {
            // Flink's clearAllState: contents, trigger state, the window.
            self.windows.remove(&KeyWindow::of(&key, w));
            self.clear_trigger(&key, w, now)?;
            if self.merging() {
                self.forget_session(&key, &w);
            }
        }
        self.store_failure()
    }
}

/// The time a record of a batch is assigned at (its timestamp in event time, `now` in
/// processing time) and its timestamp.
fn record_time(
    event_time: bool,
    timestamps: Option<&[i64]>,
    i: usize,
    now: i64,
) -> Result<(i64, Option<i64>), UserError> {
    let timestamp = timestamps
        .and_then(|ts| ts.get(i).copied())
        .filter(|&t| t != NO_TIMESTAMP);
    match (event_time, timestamp) {
        (true, Some(t)) => Ok((t, timestamp)),
        (true, None) => Err(no_timestamp()),
        (false, _) => Ok((now, timestamp)),
    }
}

impl<In, K, KF, S> Operator<In> for TriggerWindowOperator<In, K, KF, S>
where
    In: Data,
    K: StateKey,
    KF: Fn(&In) -> K + Clone + Send + 'static,
    S: WindowStore<K, In>,
{
    type Out = Tagged<S::Out>;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.max_parallelism = ctx.max_parallelism();
        self.attempt = ctx.attempt_number();
        self.spec.late_dropped.open(self.attempt);
        self.timers.set_clock(ProcessingClock::new());
        ctx.attach_keyed_state(&mut self.windows)?;
        ctx.attach_keyed_state(&mut self.trigger_state)?;
        ctx.attach_keyed_state(&mut self.sessions)?;
        ctx.attach_timers(&mut self.timers)?;
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Vec<In>,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        let timestamps = out.take_input_timestamps();
        let event_time = self.event_time();
        let merging = self.merging();
        let now = self.timers.current_processing_time();
        if self.windows.is_attached() {
            self.prefetch(&batch, timestamps.as_deref(), now)?;
        }
        for (i, record) in batch.into_iter().enumerate() {
            let (time, timestamp) = record_time(event_time, timestamps.as_deref(), i, now)?;
            let key = (self.key_fn)(&record);
            if merging {
                self.add_to_session(key, record, time, timestamp, now, out)?;
            } else {
                self.add_to_windows(key, record, time, timestamp, now, out)?;
            }
        }
        self.timers.check()?;
        self.store_failure()
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        self.fire_event_timers(watermark, out)
    }

    fn poll_pending(
        &mut self,
        cx: &mut std::task::Context<'_>,
        out: &mut Collector<Self::Out>,
    ) -> Poll<Result<(), UserError>> {
        self.fire_processing_timers(cx, out)
    }

    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
        _out: &mut Collector<Self::Out>,
    ) -> Result<OperatorState, UserError> {
        let mut state = OperatorState::default();
        let maxp = self.max_parallelism;
        self.windows.snapshot_into(maxp, &mut state)?;
        self.trigger_state.snapshot_into(maxp, &mut state)?;
        self.sessions.snapshot_into(maxp, &mut state)?;
        self.timers.snapshot_into(maxp, &mut state)?;
        Ok(state)
    }

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.windows.restore_from(&state)?;
        self.trigger_state.restore_from(&state)?;
        self.sessions.restore_from(&state)?;
        self.timers.restore_from(&state)?;
        Ok(())
    }
}

fn no_timestamp() -> UserError {
    "an event-time window received a record without a timestamp: call \
     assign_timestamps_and_watermarks before the window, or use a processing-time window"
        .into()
}
