//! [`WindowOperator`]: keyed windows with Flink's `WindowOperator` semantics and its default
//! triggers.
//!
//! For each record (its key, and its event time or processing time now): the assigner gives its
//! windows. A window is *late* when its cleanup time (`max_timestamp + allowed_lateness`, event
//! time only) is at or below the watermark; the record skips late windows. In each other window
//! it is added to the window's contents, then the trigger decides: in event time the window
//! fires at once if the watermark already passed its `max_timestamp` (a late firing, within the
//! allowed lateness), otherwise a timer at `max_timestamp` is registered; in processing time a
//! processing-time timer at `max_timestamp` is. A cleanup timer at the cleanup time is
//! registered too (the same timer when there is no lateness). A record that went into no window
//! and is later than the allowed lateness goes to the late side output, or is dropped and
//! counted.
//!
//! When a timer fires: the window fires if the timer is its trigger time (`max_timestamp`),
//! emitting its results with event time `max_timestamp`; at the cleanup time the window's
//! contents and timers are removed: nothing of a window outlives the time it can fire.
//!
//! At end of input the watermark's maximum fires every event-time window. Processing-time
//! windows still open then never fire: like Flink's streaming execution (which quiesces an
//! operator's processing-time service before `finish`; only its BATCH mode fires every
//! processing-time timer at the end), the task stops polling the operator's processing-time
//! timers once its input ended, and their windows go with the job.
//!
//! Session windows merge (Flink's `MergingWindowSet`, without its indirection to a separate
//! state window: merged contents are merged at once): a record's window `[t, t + gap)` joins
//! every window of its key it touches; the merged windows' timers are deleted, their contents
//! merged, and the trigger registers the new window's timer if it is still ahead.

use super::assigner::{TimeWindow, WindowAssigner, WindowKind};
use super::function::WindowContents;
use crate::key_groups::key_group;
use crate::operator::{Collector, Operator, OperatorContext};
use crate::process::{OutputTag, StateKey, Tagged, TimedOperator};
use crate::state::{KeyGroupEntry, OperatorState};
use crate::timer::{InternalTimers, ProcessingClock, TimeDomain, Timer};
use rustc_hash::FxHashMap;
use sluice_core::AttemptNumber;
use sluice_core::codec;
use sluice_core::sync::lock;
use sluice_core::{CheckpointId, Data, NO_TIMESTAMP, UserError, Watermark};
use std::collections::hash_map::Entry;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex};
use std::task::Poll;

pub(super) const CONTENTS_STATE: &str = "_window/contents";

/// How many late records the window operator's subtasks dropped (no late side output was set),
/// summed over the subtasks of the job's current attempt: Flink's `numLateRecordsDropped`.
///
/// Like Flink's metrics, which live with a task attempt and start from zero when the job
/// restarts, the count starts again at zero when a new attempt opens the operator. Records
/// replayed after a restore are therefore counted once, by the attempt that drops them; what
/// the failed attempt counted is gone with it. A drop reported by an older attempt after a
/// newer one opened is ignored.
///
/// ```
/// use sluice_runtime::window::LateRecordsDropped;
///
/// let dropped = LateRecordsDropped::default();
/// assert_eq!(dropped.get(), 0);
/// ```
#[derive(Clone, Debug, Default)]
pub struct LateRecordsDropped(Arc<Mutex<AttemptCount>>);

/// The count of one attempt.
#[derive(Debug, Default)]
struct AttemptCount {
    attempt: AttemptNumber,
    count: u64,
}

impl LateRecordsDropped {
    /// The count so far, in the current attempt.
    pub fn get(&self) -> u64 {
        lock(&self.0).count
    }

    /// Attempt `attempt` opened an operator: a newer attempt than the counted one starts again
    /// from zero.
    fn open(&self, attempt: AttemptNumber) {
        let mut c = lock(&self.0);
        if attempt > c.attempt {
            *c = AttemptCount { attempt, count: 0 };
        }
    }

    /// Attempt `attempt` dropped `n` records.
    fn add(&self, attempt: AttemptNumber, n: u64) {
        let mut c = lock(&self.0);
        if attempt > c.attempt {
            *c = AttemptCount { attempt, count: 0 };
        }
        if attempt == c.attempt {
            c.count += n;
        }
    }
}

/// Everything about a window operator that is fixed when the job is built.
pub(crate) struct WindowSpec<In> {
    pub(crate) assigner: WindowAssigner,
    pub(crate) allowed_lateness: i64,
    pub(crate) late_tag: Option<OutputTag<In>>,
    pub(crate) late_dropped: LateRecordsDropped,
}

impl<In> Clone for WindowSpec<In> {
    fn clone(&self) -> Self {
        WindowSpec {
            assigner: self.assigner,
            allowed_lateness: self.allowed_lateness,
            late_tag: self.late_tag.clone(),
            late_dropped: self.late_dropped.clone(),
        }
    }
}

/// The operator behind `WindowedStream::reduce`, `aggregate` and `process` (see the module
/// documentation for its rules). Its output is [`Tagged`]: window results on the main output,
/// late records on the late side output.
pub struct WindowOperator<In, K, KF, C: WindowContents<K, In>> {
    spec: WindowSpec<In>,
    contents: C,
    key_fn: KF,
    /// The contents of every window, by key and window start (a key's windows never share a
    /// start: sessions of a key are disjoint, and the other assigners' windows of one start have
    /// one size). The end is the assigner's size, or for sessions in `sessions`; a smaller
    /// entry keeps the table in cache.
    pub(super) windows: FxHashMap<(K, i64), C::Acc>,
    /// Session windows only: each key's windows.
    sessions: FxHashMap<K, Vec<TimeWindow>>,
    pub(super) timers: InternalTimers<K, TimeWindow>,
    assigned: Vec<TimeWindow>,
    results: Vec<C::Out>,
    max_parallelism: usize,
    /// This subtask's attempt (for the late-drop count).
    attempt: AttemptNumber,
    _in: PhantomData<fn(In)>,
}

impl<In, K: StateKey, KF: Clone, C: WindowContents<K, In>> Clone for WindowOperator<In, K, KF, C> {
    /// A fresh instance: the same functions, no windows, no timers.
    fn clone(&self) -> Self {
        Self::new(
            self.spec.clone(),
            self.contents.clone(),
            self.key_fn.clone(),
        )
    }
}

impl<In, K: StateKey, KF, C: WindowContents<K, In>> WindowOperator<In, K, KF, C> {
    pub(crate) fn new(spec: WindowSpec<In>, contents: C, key_fn: KF) -> Self {
        WindowOperator {
            spec,
            contents,
            key_fn,
            windows: FxHashMap::default(),
            sessions: FxHashMap::default(),
            timers: InternalTimers::new("window"),
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

    /// When a window's contents are removed: `max_timestamp + allowed_lateness` in event time
    /// (`i64::MAX` on overflow: never), `max_timestamp` in processing time.
    fn cleanup_time(&self, w: &TimeWindow) -> i64 {
        if self.event_time() {
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

    /// The default trigger on a record: whether the window fires now.
    fn trigger_on_element(&mut self, key: &K, w: TimeWindow) -> bool {
        let max = w.max_timestamp();
        if self.event_time() {
            if max <= self.timers.current_watermark() {
                return true;
            }
            self.timers.register_event_time_timer(key.clone(), w, max);
        } else {
            self.timers
                .register_processing_time_timer(key.clone(), w, max);
        }
        false
    }

    /// The default trigger on a merge: the merged window's timer, if still ahead.
    fn trigger_on_merge(&mut self, key: &K, w: TimeWindow) {
        let max = w.max_timestamp();
        if self.event_time() {
            if max > self.timers.current_watermark() {
                self.timers.register_event_time_timer(key.clone(), w, max);
            }
        } else if max > self.timers.current_processing_time() {
            self.timers
                .register_processing_time_timer(key.clone(), w, max);
        }
    }

    fn trigger_clear(&mut self, key: &K, w: &TimeWindow) {
        let max = w.max_timestamp();
        if self.event_time() {
            self.timers.delete_event_time_timer(key, w, max);
        } else {
            self.timers.delete_processing_time_timer(key, w, max);
        }
    }

    fn emit(
        &mut self,
        key: &K,
        w: TimeWindow,
        out: &mut Collector<Tagged<C::Out>>,
    ) -> Result<(), UserError> {
        let Some(acc) = self.windows.get(&(key.clone(), w.start)) else {
            return Ok(());
        };
        emit_results(&mut self.contents, &mut self.results, key, w, acc, out)
    }

    fn late(&mut self, record: In, timestamp: i64, out: &mut Collector<Tagged<C::Out>>)
    where
        In: Data,
    {
        match &self.spec.late_tag {
            Some(tag) => out.collect_at(Tagged::side(tag, record), timestamp),
            None => self.spec.late_dropped.add(self.attempt, 1),
        }
    }

    /// The window of `key` that starts at `start`.
    fn window_of(&self, key: &K, start: i64) -> Option<TimeWindow> {
        match self.spec.assigner.kind {
            WindowKind::Tumbling { size, .. } | WindowKind::Sliding { size, .. } => {
                Some(TimeWindow::new(start, start.saturating_add(size)))
            }
            WindowKind::Session { .. } => self
                .sessions
                .get(key)?
                .iter()
                .find(|w| w.start == start)
                .copied(),
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

    #[inline(always)]
    fn add_one(
        &mut self,
        key: &K,
        w: TimeWindow,
        value: In,
        out: &mut Collector<Tagged<C::Out>>,
    ) -> Result<(), UserError> {
        let fire = match self.windows.entry((key.clone(), w.start)) {
            Entry::Occupied(mut e) => {
                self.contents.add(e.get_mut(), value);
                // Its timers were registered with its first record; in processing time a
                // window fires only from its timer.
                self.event_time() && w.max_timestamp() <= self.timers.current_watermark()
            }
            Entry::Vacant(e) => {
                e.insert(self.contents.create(value));
                self.register_new_window(key, w)
            }
        };
        if fire {
            self.emit(key, w, out)?;
        }
        Ok(())
    }

    /// The default trigger and the cleanup timer for a window of a non-merging assigner that
    /// was just created; returns whether it fires now. Such a window's timers are registered
    /// once, here, and never deleted (they fire, and the one at the cleanup time removes the
    /// window, after which the window is late and never created again), so they skip the
    /// timer index (`register_unique`). Without lateness the trigger timer is the cleanup
    /// timer.
    #[inline]
    fn register_new_window(&mut self, key: &K, w: TimeWindow) -> bool {
        let max = w.max_timestamp();
        let cleanup = self.cleanup_time(&w);
        let event_time = self.event_time();
        let fire = event_time && max <= self.timers.current_watermark();
        if !fire {
            if event_time {
                self.timers
                    .register_unique_event_time_timer(key.clone(), w, max);
            } else {
                self.timers
                    .register_unique_processing_time_timer(key.clone(), w, max);
            }
        }
        if (fire || cleanup != max) && cleanup != i64::MAX {
            // Only event time has lateness: a processing-time cleanup is its trigger.
            self.timers
                .register_unique_event_time_timer(key.clone(), w, cleanup);
        }
        fire
    }

    /// A record of a session assigner.
    fn add_to_session(
        &mut self,
        key: K,
        record: In,
        time: i64,
        out: &mut Collector<Tagged<C::Out>>,
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
                self.sessions.entry(key.clone()).or_default().push(w);
                w
            }
            [one] if one.start <= w.start && one.end >= w.end => *one,
            _ => {
                let cover = touching.iter().fold(w, |c, x| c.cover(x));
                if self.is_window_late(&cover) {
                    return Err(format!(
                        "merging session windows into {cover:?} would end it before the current watermark {}",
                        self.timers.current_watermark()
                    )
                    .into());
                }
                let existing = self.sessions.entry(key.clone()).or_default();
                existing.retain(|x| !touching.contains(x));
                existing.push(cover);
                self.trigger_on_merge(&key, cover);
                let mut merged: Option<C::Acc> = None;
                for m in &touching {
                    self.trigger_clear(&key, m);
                    self.delete_cleanup_timer(&key, m);
                    if let Some(acc) = self.windows.remove(&(key.clone(), m.start)) {
                        merged = Some(match merged {
                            Some(a) => self.contents.merge(a, acc),
                            None => acc,
                        });
                    }
                }
                if let Some(acc) = merged {
                    self.windows.insert((key.clone(), cover.start), acc);
                }
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
        match self.windows.entry((key.clone(), actual.start)) {
            Entry::Occupied(mut e) => self.contents.add(e.get_mut(), record),
            Entry::Vacant(e) => {
                e.insert(self.contents.create(record));
            }
        }
        if self.trigger_on_element(&key, actual) {
            self.emit(&key, actual, out)?;
        }
        self.register_cleanup_timer(&key, actual);
        Ok(())
    }
}

impl<In, K: StateKey, KF, C: WindowContents<K, In>> TimedOperator<K, TimeWindow, Tagged<C::Out>>
    for WindowOperator<In, K, KF, C>
{
    fn timers(&mut self) -> &mut InternalTimers<K, TimeWindow> {
        &mut self.timers
    }

    fn on_timer(
        &mut self,
        timer: Timer<K, TimeWindow>,
        out: &mut Collector<Tagged<C::Out>>,
    ) -> Result<(), UserError> {
        let Timer {
            key,
            namespace: w,
            timestamp,
            domain,
        } = timer;
        if self.spec.assigner.is_merging()
            && !self.sessions.get(&key).is_some_and(|ws| ws.contains(&w))
        {
            // The window was merged into another or purged.
            return Ok(());
        }
        let own_domain = if self.event_time() {
            TimeDomain::EventTime
        } else {
            TimeDomain::ProcessingTime
        };
        if domain != own_domain {
            return Ok(());
        }
        // EventTimeTrigger fires at the window's max timestamp; ProcessingTimeTrigger on any of
        // its timers (the only one is at the max timestamp).
        let fire = domain == TimeDomain::ProcessingTime || timestamp == w.max_timestamp();
        if timestamp != self.cleanup_time(&w) {
            if fire {
                self.emit(&key, w, out)?;
            }
            return Ok(());
        }
        // The cleanup time: the window's last firing, if this is also its trigger time, then
        // nothing of it is kept. Its trigger timer (at or before this one) already fired.
        let Some(acc) = self.windows.remove(&(key.clone(), w.start)) else {
            return Ok(());
        };
        if self.spec.assigner.is_merging() {
            self.forget_session(&key, &w);
        }
        if fire {
            emit_results(&mut self.contents, &mut self.results, &key, w, &acc, out)?;
        }
        Ok(())
    }
}

impl<In, K, KF, C> Operator<In> for WindowOperator<In, K, KF, C>
where
    In: Data,
    K: StateKey,
    KF: Fn(&In) -> K + Clone + Send + 'static,
    C: WindowContents<K, In>,
{
    type Out = Tagged<C::Out>;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.max_parallelism = ctx.max_parallelism();
        self.attempt = ctx.attempt_number();
        self.spec.late_dropped.open(self.attempt);
        self.timers.set_clock(ProcessingClock::new());
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Vec<In>,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        let timestamps = out.take_input_timestamps();
        let event_time = self.event_time();
        let times = match (&timestamps, event_time) {
            (Some(ts), true) => RecordTimes::Event(ts),
            (None, true) => return Err(no_timestamp()),
            (_, false) => RecordTimes::Now(self.timers.current_processing_time()),
        };
        if self.spec.assigner.is_merging() {
            for (i, record) in batch.into_iter().enumerate() {
                let time = times.at(i)?;
                let key = (self.key_fn)(&record);
                self.add_to_session(key, record, time, out)?;
            }
            return Ok(());
        }
        // Nearby records share their windows: they are assigned (and checked for lateness,
        // which only the watermark changes, never during a batch) once per range of times.
        let mut windows = std::mem::take(&mut self.assigned);
        let result = (|| {
            let (mut lo, mut hi) = (0, 0);
            for (i, record) in batch.into_iter().enumerate() {
                let time = times.at(i)?;
                if !(lo <= time && time < hi) {
                    windows.clear();
                    (lo, hi) = self.spec.assigner.assign_with_range(time, &mut windows);
                    windows.retain(|w| !self.is_window_late(w));
                }
                let Some((&last, rest)) = windows.split_last() else {
                    if self.is_element_late(time) {
                        self.late(record, time, out);
                    }
                    continue;
                };
                let key = (self.key_fn)(&record);
                for &w in rest {
                    self.add_one(&key, w, record.clone(), out)?;
                }
                self.add_one(&key, last, record, out)?;
            }
            Ok(())
        })();
        self.assigned = windows;
        result
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
        type Stored<'a, K, A> = (&'a K, TimeWindow, &'a A);
        let mut groups: FxHashMap<usize, Vec<Stored<'_, K, C::Acc>>> = FxHashMap::default();
        for ((k, start), acc) in &self.windows {
            let Some(w) = self.window_of(k, *start) else {
                continue;
            };
            groups
                .entry(key_group(k, self.max_parallelism))
                .or_default()
                .push((k, w, acc));
        }
        let mut groups: Vec<_> = groups.into_iter().collect();
        groups.sort_unstable_by_key(|(g, _)| *g);
        for (g, entries) in groups {
            state.push_keyed(KeyGroupEntry {
                state: CONTENTS_STATE.to_string(),
                key_group: g as u32,
                data: codec::encode(&entries)?,
            });
        }
        self.timers
            .snapshot_into(self.max_parallelism, &mut state)?;
        Ok(state)
    }

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        for e in state
            .keyed_entries()
            .iter()
            .filter(|e| e.state == CONTENTS_STATE)
        {
            let entries: Vec<(K, TimeWindow, C::Acc)> = codec::decode(&e.data)?;
            for (k, w, acc) in entries {
                if self.spec.assigner.is_merging() {
                    self.sessions.entry(k.clone()).or_default().push(w);
                }
                self.windows.insert((k, w.start), acc);
            }
        }
        self.timers.restore_from(&state)?;
        Ok(())
    }
}

/// Emits what `contents` makes of window `w`'s `acc`, each result with the window's
/// `max_timestamp` as its event time.
fn emit_results<K, In, C: WindowContents<K, In>>(
    contents: &mut C,
    results: &mut Vec<C::Out>,
    key: &K,
    w: TimeWindow,
    acc: &C::Acc,
    out: &mut Collector<Tagged<C::Out>>,
) -> Result<(), UserError> {
    results.clear();
    contents.emit(key, &w, acc, results)?;
    for r in results.drain(..) {
        out.collect_at(Tagged::Main(r), w.max_timestamp());
    }
    Ok(())
}

/// Where each record of a batch gets its time: its event time, or processing time now.
enum RecordTimes<'a> {
    Event(&'a [i64]),
    Now(i64),
}

impl RecordTimes<'_> {
    #[inline(always)]
    fn at(&self, i: usize) -> Result<i64, UserError> {
        match self {
            RecordTimes::Event(ts) => match ts.get(i) {
                Some(&t) if t != NO_TIMESTAMP => Ok(t),
                _ => Err(no_timestamp()),
            },
            RecordTimes::Now(now) => Ok(*now),
        }
    }
}

fn no_timestamp() -> UserError {
    "an event-time window received a record without a timestamp: call \
     assign_timestamps_and_watermarks before the window, or use a processing-time window"
        .into()
}
