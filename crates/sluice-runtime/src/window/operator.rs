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
//! Tumbling and sliding windows (every key has the same windows) keep their contents in
//! [`Panes`]: one table per window, keyed by key, in window order. In event time they need no
//! timers: the panes are the timers. When the watermark passes a pane's `max_timestamp`, every
//! window of the pane not fired yet fires (the trigger timer of each); when it passes the
//! pane's cleanup time, the pane goes (the cleanup timers). In processing time one timer per
//! pane, at its `max_timestamp`, fires and removes the whole pane. What fires in one step is
//! what the per-window timers would fire, in the same order of windows (within a window, keys
//! come in table order rather than in the order their timers were registered).
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
//!
//! With a keyed store (a state backend such as RocksDB), the contents of every window and the
//! timers live in the store, not on the heap (`stored.rs`): the panes keep only their windows,
//! and a firing scans each pane's entries in the store. The rules above do not change.

use super::assigner::{TimeWindow, WindowAssigner, session_lookups};
use super::function::WindowContents;
use super::panes::Panes;
use super::stored::{InWindow, Stored, in_window_group, kept, scan_window, stored_windows};
use crate::key_groups::key_group;
use crate::operator::{Collector, Operator, OperatorContext};
use crate::process::{OutputTag, StateKey, Tagged, TimedOperator};
use crate::state::{KeyGroupEntry, OperatorState, ValueState};
use crate::timer::{InternalTimers, ProcessingClock, TimeDomain, Timer};
use rustc_hash::FxHashMap;
use sluice_core::AttemptNumber;
use sluice_core::codec;
use sluice_core::sync::lock;
use sluice_core::{CheckpointId, Data, NO_TIMESTAMP, UserError, Watermark};
use std::collections::hash_map::Entry;
use std::marker::PhantomData;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::task::Poll;

pub(super) const CONTENTS_STATE: &str = "_window/contents";
/// Beside each key group's contents of tumbling and sliding event-time windows: the watermark of
/// the subtask that took the snapshot. Its windows up to that watermark had fired (the trigger
/// timers that keep this for session windows are not used for panes).
pub(super) const FIRED_UP_TO_STATE: &str = "_window/fired-up-to";
/// With a store: each key's session windows (on the heap they are rebuilt from the contents).
const SESSIONS_STATE: &str = "_window/sessions";
/// With a store: the contents of tumbling and sliding windows.
const PANES_STATE: &str = "_window/panes";

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
    pub(super) fn open(&self, attempt: AttemptNumber) {
        let mut c = lock(&self.0);
        if attempt > c.attempt {
            *c = AttemptCount { attempt, count: 0 };
        }
    }

    /// Attempt `attempt` dropped `n` records.
    pub(super) fn add(&self, attempt: AttemptNumber, n: u64) {
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
    /// Session windows only: the contents of every window, by key and window.
    pub(super) windows: ValueState<InWindow<K>, C::Acc>,
    /// Tumbling and sliding windows: their contents, one table per window. With a store, only
    /// the windows: their contents are in `stored`.
    pub(super) panes: Panes<K, C::Acc>,
    /// With a store: the contents of tumbling and sliding windows, and whether each fired.
    pub(super) stored: Option<ValueState<InWindow<K>, Stored<C::Acc>>>,
    /// This subtask's key groups (the ranges a firing scans in the store).
    groups: Range<usize>,
    /// The panes of the current range of times: (index in `panes`, fires at once).
    targets: Vec<(usize, bool)>,
    /// Session windows only: each key's windows.
    pub(super) sessions: ValueState<K, Vec<TimeWindow>>,
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
            windows: ValueState::new(CONTENTS_STATE).grouped_by(in_window_group),
            panes: Panes::default(),
            stored: None,
            groups: 0..0,
            targets: Vec::new(),
            sessions: ValueState::new(SESSIONS_STATE),
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
        let at = InWindow {
            window: w,
            key: key.clone(),
        };
        let Some(acc) = self.windows.get(&at) else {
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

    /// Removes `w` from `key`'s session windows.
    fn forget_session(&mut self, key: &K, w: &TimeWindow) {
        let emptied = self.sessions.get_mut(key).map(|ws| {
            ws.retain(|x| x != w);
            ws.is_empty()
        });
        if emptied == Some(true) {
            self.sessions.remove(key);
        }
    }

    /// Adds `value` to `key`'s window in the pane at `index`; `fire` says the watermark already
    /// passed the window's end (event time), so the window fires at once (a late firing).
    #[inline(always)]
    fn add_to_pane(
        &mut self,
        index: usize,
        fire: bool,
        key: K,
        value: In,
        out: &mut Collector<Tagged<C::Out>>,
    ) -> Result<(), UserError> {
        let Self {
            panes,
            contents,
            results,
            stored,
            ..
        } = self;
        let Some(pane) = panes.get_mut(index) else {
            return Err(format!("window operator: no window table at index {index}").into());
        };
        if let Some(stored) = stored {
            let w = pane.window;
            let at = InWindow { window: w, key };
            if let Some((fired, acc)) = stored.get_mut(&at) {
                contents.add(acc, value);
                if fire {
                    *fired = true;
                    return emit_results(contents, results, &at.key, w, acc, out);
                }
                // Fired before a restore, and the watermark has not caught up with it again:
                // it fires again, whole, when the watermark passes its end.
                *fired = false;
                pane.stored_pending = true;
                return Ok(());
            }
            let acc = contents.create(value);
            if fire {
                emit_results(contents, results, &at.key, w, &acc, out)?;
            } else {
                pane.stored_pending = true;
            }
            stored.update(at, (fire, acc));
            return Ok(());
        }
        if !fire {
            if !pane.fired.is_empty()
                && let Some(mut acc) = pane.fired.remove(&key)
            {
                // Fired before a restore, and the watermark has not caught up with the
                // window again: it fires again, whole, when the watermark passes its end (as
                // Flink's trigger registers its timer again for such a record).
                contents.add(&mut acc, value);
                pane.pending.insert(key, acc);
                return Ok(());
            }
            match pane.pending.entry(key) {
                Entry::Occupied(mut e) => contents.add(e.get_mut(), value),
                Entry::Vacant(e) => {
                    e.insert(contents.create(value));
                }
            }
            return Ok(());
        }
        let w = pane.window;
        match pane.fired.entry(key) {
            Entry::Occupied(mut e) => {
                contents.add(e.get_mut(), value);
                emit_results(contents, results, e.key(), w, e.get(), out)
            }
            Entry::Vacant(e) => {
                let key = e.key().clone();
                let acc = e.insert(contents.create(value));
                emit_results(contents, results, &key, w, acc, out)
            }
        }
    }

    /// With the windows in a store: reads the (window, key)s the records of `batch` will add to
    /// in one go (RocksDB's `MultiGet`), so that adding finds them cached.
    fn prefetch_stored(&mut self, batch: &[In], times: &RecordTimes<'_>) -> Result<(), UserError>
    where
        KF: Fn(&In) -> K,
    {
        let mut at = Vec::with_capacity(batch.len());
        let mut windows = Vec::new();
        let (mut lo, mut hi) = (0, 0);
        for (i, record) in batch.iter().enumerate() {
            let time = times.at(i)?;
            if !(lo <= time && time < hi) {
                windows.clear();
                (lo, hi) = self.spec.assigner.assign_with_range(time, &mut windows);
                windows.retain(|w| !self.is_window_late(w));
            }
            let key = (self.key_fn)(record);
            at.extend(windows.iter().map(|&window| InWindow {
                window,
                key: key.clone(),
            }));
        }
        if let Some(stored) = &mut self.stored {
            stored.prefetch(&at);
        }
        Ok(())
    }

    /// Session windows in a store: reads the sessions of the batch's keys in one go, then, in
    /// another, the contents of the sessions the records touch and of those they land in, so
    /// that adding finds both cached. (What the batch itself creates or merges is cached by
    /// then.)
    fn prefetch_sessions(&mut self, batch: &[In], times: &RecordTimes<'_>) -> Result<(), UserError>
    where
        KF: Fn(&In) -> K,
    {
        let keys: Vec<K> = batch.iter().map(&self.key_fn).collect();
        self.sessions.prefetch(&keys);
        let mut at = Vec::new();
        let mut assigned = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            assigned.clear();
            self.spec.assigner.assign(times.at(i)?, &mut assigned);
            let Some(&w) = assigned.first() else {
                continue;
            };
            session_lookups(self.sessions.get(key), w, |window| {
                at.push(InWindow {
                    window,
                    key: key.clone(),
                })
            });
        }
        self.windows.prefetch(&at);
        Ok(())
    }

    /// Resolves the panes of `windows` (creating the missing ones) into `targets`. In processing
    /// time a new pane gets its timer, registered under `key`.
    fn resolve_panes(&mut self, windows: &[TimeWindow], key: &K) -> Result<(), UserError> {
        let event_time = self.event_time();
        let watermark = self.timers.current_watermark();
        for &w in windows {
            let (_, created) = self.panes.ensure(w);
            if created && !event_time {
                self.timers
                    .register_processing_time_timer(key.clone(), w, w.max_timestamp());
            }
        }
        // Creating a pane moves the ones after it: look them up once all exist.
        self.targets.clear();
        for w in windows {
            let Ok(index) = self.panes.position(w.start) else {
                return Err(format!("window operator: the table of {w:?} is missing").into());
            };
            self.targets
                .push((index, event_time && w.max_timestamp() <= watermark));
        }
        Ok(())
    }

    /// Event time reached the current watermark: every pane it passed fires the windows not
    /// fired yet, in window order, and the panes whose cleanup time it passed are removed.
    fn fire_panes(&mut self, out: &mut Collector<Tagged<C::Out>>) -> Result<(), UserError> {
        let watermark = self.timers.current_watermark();
        let lateness = self.spec.allowed_lateness;
        let cleanup =
            move |w: &TimeWindow| w.max_timestamp().checked_add(lateness).unwrap_or(i64::MAX);
        if self.stored.is_some() {
            return self.fire_stored_panes(watermark, cleanup, out);
        }
        let Self {
            panes,
            contents,
            results,
            ..
        } = self;
        let mut passed_cleanup = false;
        for pane in panes.iter_mut() {
            let w = pane.window;
            if w.max_timestamp() > watermark {
                break;
            }
            let gone = cleanup(&w) <= watermark;
            passed_cleanup |= gone;
            if pane.pending.is_empty() {
                continue;
            }
            for (key, acc) in &pane.pending {
                emit_results(contents, results, key, w, acc, out)?;
            }
            if gone {
                pane.pending.clear();
            } else if pane.fired.is_empty() {
                std::mem::swap(&mut pane.pending, &mut pane.fired);
            } else {
                pane.fired.extend(pane.pending.drain());
            }
        }
        if passed_cleanup {
            panes.remove_where(|p| cleanup(&p.window) <= watermark);
        }
        Ok(())
    }

    /// [`fire_panes`](Self::fire_panes) with a store: each pane the watermark passed that may
    /// hold windows not fired yet is scanned, key group by key group; its windows not fired
    /// fire, then all its entries go (cleanup time passed) or are marked fired.
    fn fire_stored_panes(
        &mut self,
        watermark: i64,
        cleanup: impl Fn(&TimeWindow) -> i64,
        out: &mut Collector<Tagged<C::Out>>,
    ) -> Result<(), UserError> {
        let Self {
            panes,
            contents,
            results,
            stored: Some(stored),
            groups,
            ..
        } = self
        else {
            return Ok(());
        };
        let mut passed_cleanup = false;
        for pane in panes.iter_mut() {
            let w = pane.window;
            if w.max_timestamp() > watermark {
                break;
            }
            let gone = cleanup(&w) <= watermark;
            passed_cleanup |= gone;
            if !pane.stored_pending && !gone {
                continue;
            }
            for group in groups.clone() {
                let mut entries = Vec::new();
                scan_window(stored, group, w, &mut |k, v: Stored<C::Acc>| {
                    entries.push((k, v))
                })?;
                let mut writes = Vec::with_capacity(entries.len());
                for (key, (fired, acc)) in entries {
                    if !fired {
                        emit_results(contents, results, &key, w, &acc, out)?;
                    }
                    let at = InWindow { window: w, key };
                    if gone {
                        writes.push((at, None));
                    } else if !fired {
                        writes.push((at, Some((true, acc))));
                    }
                }
                stored.write_through(writes)?;
            }
            pane.stored_pending = false;
        }
        if passed_cleanup {
            panes.remove_where(|p| cleanup(&p.window) <= watermark);
        }
        Ok(())
    }

    /// With a store: emits every window of pane `w` and removes them (a processing-time pane at
    /// its end).
    fn drain_stored_pane(
        &mut self,
        w: TimeWindow,
        out: &mut Collector<Tagged<C::Out>>,
    ) -> Result<(), UserError> {
        let Self {
            contents,
            results,
            stored: Some(stored),
            groups,
            ..
        } = self
        else {
            return Ok(());
        };
        for group in groups.clone() {
            let mut entries = Vec::new();
            scan_window(stored, group, w, &mut |k, v: Stored<C::Acc>| {
                entries.push((k, v))
            })?;
            let mut writes = Vec::with_capacity(entries.len());
            for (key, (_, acc)) in entries {
                emit_results(contents, results, &key, w, &acc, out)?;
                writes.push((InWindow { window: w, key }, None));
            }
            stored.write_through(writes)?;
        }
        Ok(())
    }

    /// With a keyed store: moves the windows into it (those `initialize_state` restored onto
    /// the heap), and finds the panes of those restored from the store's own files.
    fn attach_store(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        if ctx.keyed_store()?.is_none() {
            return Ok(());
        }
        ctx.attach_keyed_state(&mut self.windows)?;
        ctx.attach_keyed_state(&mut self.sessions)?;
        if self.spec.assigner.is_merging() {
            return Ok(());
        }
        let mut stored: ValueState<InWindow<K>, Stored<C::Acc>> =
            ValueState::new(PANES_STATE).grouped_by(in_window_group);
        ctx.attach_keyed_state(&mut stored)?;
        let mut writes = Vec::new();
        for pane in self.panes.iter_mut() {
            let window = pane.window;
            pane.stored_pending = !pane.pending.is_empty();
            for (key, acc) in pane.pending.drain() {
                writes.push((InWindow { window, key }, Some((false, acc))));
            }
            for (key, acc) in pane.fired.drain() {
                writes.push((InWindow { window, key }, Some((true, acc))));
            }
        }
        stored.write_through(writes)?;
        let event_time = self.event_time();
        for (w, key) in stored_windows(&mut stored, self.groups.clone())? {
            let (index, created) = self.panes.ensure(w);
            if let Some(pane) = self.panes.get_mut(index) {
                pane.stored_pending = true;
            }
            if created && !event_time {
                self.timers
                    .register_processing_time_timer(key, w, w.max_timestamp());
            }
        }
        self.stored = Some(stored);
        Ok(())
    }

    /// The first failure of the keyed store that a state kept while the operator ran.
    fn store_failures(&mut self) -> Result<(), UserError> {
        kept(&mut self.windows)?;
        kept(&mut self.sessions)?;
        if let Some(s) = &mut self.stored {
            kept(s)?;
        }
        self.timers.check()?;
        Ok(())
    }

    /// The keyed entries of the windows in the store (`state`, whose values start with
    /// `skip` bytes that are not the accumulator) as encoded `(key, window, accumulator)`s, per
    /// key group, without decoding them.
    fn encode_stored<V>(
        groups: Range<usize>,
        state: &mut ValueState<InWindow<K>, V>,
        skip: usize,
        into: &mut FxHashMap<usize, (u64, Vec<u8>)>,
    ) -> Result<(), UserError>
    where
        V: serde::Serialize + serde::de::DeserializeOwned,
    {
        for group in groups {
            let mut bad = None;
            state.scan_stored(group, &[], &mut |k, v| {
                let Ok((_, key)) = codec::decode_first::<TimeWindow>(k) else {
                    bad = Some("a stored window key does not decode");
                    return false;
                };
                let Some(acc) = v.get(skip..) else {
                    bad = Some("a stored window value is too short");
                    return false;
                };
                let (n, buf) = into.entry(group).or_default();
                buf.extend_from_slice(key);
                buf.extend_from_slice(&k[..k.len() - key.len()]);
                buf.extend_from_slice(acc);
                *n += 1;
                true
            })?;
            if let Some(bad) = bad {
                return Err(bad.into());
            }
        }
        Ok(())
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
                self.sessions.get_or_default(key.clone()).push(w);
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
                let existing = self.sessions.get_or_default(key.clone());
                existing.retain(|x| !touching.contains(x));
                existing.push(cover);
                self.trigger_on_merge(&key, cover);
                let mut merged: Option<C::Acc> = None;
                for m in &touching {
                    self.trigger_clear(&key, m);
                    self.delete_cleanup_timer(&key, m);
                    let at = InWindow {
                        window: *m,
                        key: key.clone(),
                    };
                    if let Some(acc) = self.windows.remove(&at) {
                        merged = Some(match merged {
                            Some(a) => self.contents.merge(a, acc),
                            None => acc,
                        });
                    }
                }
                if let Some(acc) = merged {
                    let at = InWindow {
                        window: cover,
                        key: key.clone(),
                    };
                    self.windows.update(at, acc);
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
        let at = InWindow {
            window: actual,
            key: key.clone(),
        };
        match self.windows.get_mut(&at) {
            Some(acc) => self.contents.add(acc, record),
            None => {
                let acc = self.contents.create(record);
                self.windows.update(at, acc);
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
        if !self.spec.assigner.is_merging() {
            // Panes: in event time the watermark fires them (a timer here was restored from a
            // checkpoint of an older version and is due with the pane anyway); in processing
            // time this is the pane's timer at its end, which is also its cleanup time.
            if domain == TimeDomain::ProcessingTime
                && !self.event_time()
                && let Some(pane) = self.panes.remove(w.start)
            {
                for (key, acc) in pane.pending.iter().chain(&pane.fired) {
                    emit_results(&mut self.contents, &mut self.results, key, w, acc, out)?;
                }
                self.panes.recycle(pane);
                self.drain_stored_pane(w, out)?;
            }
            return Ok(());
        }
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
        let at = InWindow {
            window: w,
            key: key.clone(),
        };
        let Some(acc) = self.windows.remove(&at) else {
            return Ok(());
        };
        if self.spec.assigner.is_merging() {
            self.forget_session(&key, &w);
        }
        if fire {
            emit_results(&mut self.contents, &mut self.results, &key, w, &acc, out)?;
        }
        self.store_failures()
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
        ctx.attach_timers(&mut self.timers)?;
        self.groups = crate::key_groups::key_group_range(
            ctx.subtask_index(),
            self.max_parallelism,
            ctx.parallelism(),
        );
        self.attach_store(ctx)
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
            if self.sessions.is_attached() {
                self.prefetch_sessions(&batch, &times)?;
            }
            for (i, record) in batch.into_iter().enumerate() {
                let time = times.at(i)?;
                let key = (self.key_fn)(&record);
                self.add_to_session(key, record, time, out)?;
            }
            return self.store_failures();
        }
        if self.stored.is_some() {
            self.prefetch_stored(&batch, &times)?;
        }
        // Nearby records share their windows: they are assigned (and checked for lateness,
        // which only the watermark changes, never during a batch) once per range of times, and
        // their panes looked up then too.
        let mut windows = std::mem::take(&mut self.assigned);
        let mut targets = std::mem::take(&mut self.targets);
        let result: Result<(), UserError> = (|| {
            let (mut lo, mut hi) = (0, 0);
            for (i, record) in batch.into_iter().enumerate() {
                let time = times.at(i)?;
                let key = (self.key_fn)(&record);
                if !(lo <= time && time < hi) {
                    windows.clear();
                    (lo, hi) = self.spec.assigner.assign_with_range(time, &mut windows);
                    windows.retain(|w| !self.is_window_late(w));
                    self.targets = std::mem::take(&mut targets);
                    let resolved = self.resolve_panes(&windows, &key);
                    targets = std::mem::take(&mut self.targets);
                    resolved?;
                }
                let Some((&(last, last_fires), rest)) = targets.split_last() else {
                    if self.is_element_late(time) {
                        self.late(record, time, out);
                    }
                    continue;
                };
                for &(index, fires) in rest {
                    self.add_to_pane(index, fires, key.clone(), record.clone(), out)?;
                }
                self.add_to_pane(last, last_fires, key, record, out)?;
            }
            Ok(())
        })();
        self.assigned = windows;
        self.targets = targets;
        result?;
        self.store_failures()
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        if self.event_time() && !self.spec.assigner.is_merging() {
            self.timers.advance_watermark(watermark);
            self.fire_panes(out)?;
            self.store_failures()?;
        }
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
        self.store_failures()?;
        let mut state = OperatorState::default();
        self.timers
            .snapshot_into(self.max_parallelism, &mut state)?;
        if self.windows.incremental() {
            // The windows are in the store's files, which the task adds.
            self.windows.flush()?;
            self.sessions.flush()?;
            if let Some(s) = &mut self.stored {
                s.flush()?;
            }
            return Ok(state);
        }
        // Per key group: how many (key, window, accumulator)s, and their encodings.
        let mut groups: FxHashMap<usize, (u64, Vec<u8>)> = FxHashMap::default();
        let maxp = self.max_parallelism;
        if self.windows.is_attached() {
            Self::encode_stored(self.groups.clone(), &mut self.windows, 0, &mut groups)?;
        } else {
            self.windows.for_each_mut(|at, acc| {
                let (n, buf) = groups.entry(key_group(&at.key, maxp)).or_default();
                *n += 1;
                codec::encode_into(&(&at.key, at.window, &*acc), buf)
                    .map_err(crate::state::StateError::from)
            })?;
        }
        if let Some(s) = &mut self.stored {
            // Each value starts with the fired flag, one byte.
            Self::encode_stored(self.groups.clone(), s, 1, &mut groups)?;
        }
        for pane in self.panes.iter() {
            for (k, acc) in pane.pending.iter().chain(&pane.fired) {
                let (n, buf) = groups.entry(key_group(k, maxp)).or_default();
                *n += 1;
                codec::encode_into(&(k, pane.window, acc), buf)?;
            }
        }
        let mut groups: Vec<_> = groups.into_iter().collect();
        groups.sort_unstable_by_key(|(g, _)| *g);
        let panes_fire_on_watermarks = self.event_time() && !self.spec.assigner.is_merging();
        let watermark = self.timers.current_watermark();
        for (g, (n, entries)) in groups {
            // The encoding of a `Vec<(K, TimeWindow, Acc)>`: its length, then the entries.
            let mut data = Vec::with_capacity(entries.len() + 10);
            codec::encode_into(&n, &mut data)?;
            data.extend_from_slice(&entries);
            state.push_keyed(KeyGroupEntry {
                state: CONTENTS_STATE.to_string(),
                key_group: g as u32,
                data,
            });
            if panes_fire_on_watermarks {
                state.push_keyed(KeyGroupEntry {
                    state: FIRED_UP_TO_STATE.to_string(),
                    key_group: g as u32,
                    data: codec::encode(&watermark)?,
                });
            }
        }
        Ok(state)
    }

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        let merging = self.spec.assigner.is_merging();
        let event_time = self.event_time();
        // Per key group, the watermark up to which its panes' windows had fired.
        let mut fired_up_to: FxHashMap<u32, i64> = FxHashMap::default();
        for e in state
            .keyed_entries()
            .iter()
            .filter(|e| e.state == FIRED_UP_TO_STATE)
        {
            fired_up_to.insert(e.key_group, codec::decode(&e.data)?);
        }
        for e in state
            .keyed_entries()
            .iter()
            .filter(|e| e.state == CONTENTS_STATE)
        {
            let entries: Vec<(K, TimeWindow, C::Acc)> = codec::decode(&e.data)?;
            let fired_up_to = fired_up_to.get(&e.key_group).copied().unwrap_or(i64::MIN);
            for (k, w, acc) in entries {
                if merging {
                    self.sessions.get_or_default(k.clone()).push(w);
                    self.windows.update(InWindow { window: w, key: k }, acc);
                    continue;
                }
                let (index, _) = self.panes.ensure(w);
                let Some(pane) = self.panes.get_mut(index) else {
                    continue;
                };
                if event_time && w.max_timestamp() <= fired_up_to {
                    pane.fired.insert(k, acc);
                } else {
                    pane.pending.insert(k, acc);
                }
            }
        }
        self.timers.restore_from(&state)?;
        if !merging && !event_time {
            // Each pane needs its timer here, whichever subtask's key it was registered under
            // (a duplicate finds its pane gone and does nothing).
            let due: Vec<(K, TimeWindow)> = self
                .panes
                .iter()
                .filter_map(|p| Some((p.pending.keys().next()?.clone(), p.window)))
                .collect();
            for (k, w) in due {
                self.timers
                    .register_processing_time_timer(k, w, w.max_timestamp());
            }
        }
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
