//! [`InternalTimers`]: both time domains of one keyed operator subtask, their checkpointed form,
//! and the tokio timer behind processing time.

use super::stored::StoredTimers;
use super::{ProcessingClock, TimerQueue};
use crate::key_groups::key_group;
use crate::state::{KeyGroupEntry, KeyedStore, OperatorState, StateError, StoreError, state_id};
use rustc_hash::FxHashMap;
use serde::{Serialize, de::DeserializeOwned};
use sluice_core::Watermark;
use sluice_core::codec;
use std::future::Future;
use std::hash::Hash;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Context;
use tokio::time::Sleep;

/// Which clock a timer follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum TimeDomain {
    /// Fires when the watermark reaches the timer's timestamp.
    EventTime,
    /// Fires when the processing clock reaches the timer's timestamp.
    ProcessingTime,
}

/// A timer that fired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Timer<K, N> {
    /// The key it was registered for.
    pub key: K,
    /// Its namespace (the window, for window operators).
    pub namespace: N,
    /// Its timestamp, in milliseconds.
    pub timestamp: i64,
    /// Its time domain.
    pub domain: TimeDomain,
}

/// The event-time and processing-time timers of one keyed operator subtask, with the current
/// watermark and processing clock.
///
/// The operator calls [`advance_watermark`](Self::advance_watermark) and then pops due timers
/// one at a time with [`pop_event_timer`](Self::pop_event_timer), so a timer registered by a
/// callback for a time already passed fires in the same round, as Flink's does. For processing
/// time, [`poll_processing`](Self::poll_processing) arms one tokio timer for the earliest
/// processing-time timer and reports when it is due; then
/// [`pop_processing_timer`](Self::pop_processing_timer) hands out the due ones.
///
/// ```text
/// use sluice_core::Watermark;
/// use sluice_runtime::timer::{InternalTimers, TimeDomain};
///
/// let mut timers: InternalTimers<String, ()> = InternalTimers::new("t");
/// timers.register_event_time_timer("a".into(), (), 10);
/// timers.register_event_time_timer("a".into(), (), 10);
/// timers.advance_watermark(Watermark::new(10));
/// let t = timers.pop_event_timer().unwrap();
/// assert_eq!((t.key.as_str(), t.timestamp, t.domain), ("a", 10, TimeDomain::EventTime));
/// assert!(timers.pop_event_timer().is_none());
/// ```
pub(crate) struct InternalTimers<K, N> {
    name: String,
    event: TimerQueue<K, N>,
    processing: TimerQueue<K, N>,
    /// Once [`attach`](Self::attach)ed: both domains in the keyed store instead (the heap
    /// queues above stay empty).
    stored: Option<Box<Stored<K, N>>>,
    watermark: i64,
    clock: ProcessingClock,
    sleep: Option<Pin<Box<Sleep>>>,
    armed_for: Option<i64>,
}

impl<K, N> std::fmt::Debug for InternalTimers<K, N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InternalTimers")
            .field("name", &self.name)
            .field("event_timers", &self.event.len())
            .field("processing_timers", &self.processing.len())
            .field("stored", &self.stored.is_some())
            .field("watermark", &self.watermark)
            .finish()
    }
}

/// Both domains' timers in a keyed store, and the first store failure not yet taken.
struct Stored<K, N> {
    event: StoredTimers<K, N>,
    processing: StoredTimers<K, N>,
    /// Whether snapshots are the store's files (nothing to write as keyed entries).
    incremental: bool,
    error: Option<StoreError>,
}

impl<K, N> Stored<K, N> {
    fn domain(&mut self, domain: TimeDomain) -> &mut StoredTimers<K, N> {
        match domain {
            TimeDomain::EventTime => &mut self.event,
            TimeDomain::ProcessingTime => &mut self.processing,
        }
    }

    /// `result`'s value, or `fallback` with its failure kept for the operator.
    fn keep<T>(&mut self, result: Result<T, StoreError>, fallback: T) -> T {
        match result {
            Ok(v) => v,
            Err(e) => {
                if self.error.is_none() {
                    self.error = Some(e);
                }
                fallback
            }
        }
    }
}

impl<K, N> InternalTimers<K, N>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    N: Hash + Eq + Clone + Serialize + DeserializeOwned,
{
    /// An empty timer service named `name` (unique within its operator).
    pub(crate) fn new(name: &str) -> Self {
        InternalTimers {
            name: name.to_string(),
            event: TimerQueue::default(),
            processing: TimerQueue::default(),
            stored: None,
            watermark: i64::MIN,
            clock: ProcessingClock::new(),
            sleep: None,
            armed_for: None,
        }
    }

    /// Replaces the processing clock (at `open`, or a fixed clock in tests).
    pub(crate) fn set_clock(&mut self, clock: ProcessingClock) {
        self.clock = clock;
        self.sleep = None;
        self.armed_for = None;
    }

    /// The current watermark (`i64::MIN` before the first).
    pub(crate) fn current_watermark(&self) -> i64 {
        self.watermark
    }

    /// Processing time now, in milliseconds.
    pub(crate) fn current_processing_time(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Registers an event-time timer (a no-op if it exists).
    pub(crate) fn register_event_time_timer(
        &mut self,
        key: K,
        namespace: N,
        timestamp: i64,
    ) -> bool {
        self.register(TimeDomain::EventTime, key, namespace, timestamp)
    }

    /// Deletes an event-time timer (a no-op if it does not exist).
    pub(crate) fn delete_event_time_timer(
        &mut self,
        key: &K,
        namespace: &N,
        timestamp: i64,
    ) -> bool {
        self.delete(TimeDomain::EventTime, key, namespace, timestamp)
    }

    /// Registers a processing-time timer (a no-op if it exists).
    pub(crate) fn register_processing_time_timer(
        &mut self,
        key: K,
        namespace: N,
        timestamp: i64,
    ) -> bool {
        self.register(TimeDomain::ProcessingTime, key, namespace, timestamp)
    }

    /// Deletes a processing-time timer (a no-op if it does not exist).
    pub(crate) fn delete_processing_time_timer(
        &mut self,
        key: &K,
        namespace: &N,
        timestamp: i64,
    ) -> bool {
        self.delete(TimeDomain::ProcessingTime, key, namespace, timestamp)
    }

    fn register(&mut self, domain: TimeDomain, key: K, namespace: N, timestamp: i64) -> bool {
        match &mut self.stored {
            Some(s) => {
                let r = s.domain(domain).register(&key, &namespace, timestamp);
                s.keep(r.map(|()| true), false)
            }
            None => match domain {
                TimeDomain::EventTime => self.event.register(key, namespace, timestamp),
                TimeDomain::ProcessingTime => self.processing.register(key, namespace, timestamp),
            },
        }
    }

    fn delete(&mut self, domain: TimeDomain, key: &K, namespace: &N, timestamp: i64) -> bool {
        match &mut self.stored {
            Some(s) => {
                let r = s.domain(domain).delete(key, namespace, timestamp);
                s.keep(r.map(|()| true), false)
            }
            None => match domain {
                TimeDomain::EventTime => self.event.delete(key, namespace, timestamp),
                TimeDomain::ProcessingTime => self.processing.delete(key, namespace, timestamp),
            },
        }
    }

    fn pop_due(&mut self, domain: TimeDomain, time: i64) -> Option<(K, N, i64)> {
        match &mut self.stored {
            Some(s) => {
                let r = s.domain(domain).pop_due(time);
                s.keep(r, None)
            }
            None => match domain {
                TimeDomain::EventTime => self.event.pop_due(time),
                TimeDomain::ProcessingTime => self.processing.pop_due(time),
            },
        }
    }

    /// Moves every timer into `store` (the job's keyed store of this subtask, which owns key
    /// groups `groups`; `operator` names it in errors): from now on the timers live there, with
    /// only a bound per key group in memory. Timers restored from the store's own files are
    /// there already. Attaching twice keeps the first store.
    pub(crate) fn attach(
        &mut self,
        store: Arc<dyn KeyedStore>,
        max_parallelism: usize,
        groups: Range<usize>,
        operator: &str,
    ) -> Result<(), StoreError> {
        if self.stored.is_some() {
            return Ok(());
        }
        let open = |domain: &str| {
            StoredTimers::open(
                store.clone(),
                state_id(&format!("{}/{domain}", self.state_name())),
                max_parallelism,
                groups.clone(),
                operator,
            )
        };
        let mut stored = Stored {
            event: open("event"),
            processing: open("processing"),
            incremental: store.incremental(),
            error: None,
        };
        for (domain, queue) in [
            (TimeDomain::EventTime, std::mem::take(&mut self.event)),
            (
                TimeDomain::ProcessingTime,
                std::mem::take(&mut self.processing),
            ),
        ] {
            let target = stored.domain(domain);
            for (k, n, t) in queue.iter() {
                target.register(k, n, t)?;
            }
            target.flush()?;
        }
        self.stored = Some(Box::new(stored));
        self.armed_for = None;
        Ok(())
    }

    /// The first store failure since the last call (an attached service cannot return one
    /// from registering or popping: it keeps it here for the operator to fail with).
    pub(crate) fn take_error(&mut self) -> Option<StoreError> {
        self.stored.as_mut().and_then(|s| s.error.take())
    }

    /// The failure [`take_error`](Self::take_error) would return, as an error.
    pub(crate) fn check(&mut self) -> Result<(), StoreError> {
        self.take_error().map_or(Ok(()), Err)
    }

    /// Before a snapshot of an attached service: writes what is buffered to the store.
    fn flush(&mut self) -> Result<(), StoreError> {
        if let Some(s) = &mut self.stored {
            s.event.flush()?;
            s.processing.flush()?;
        }
        Ok(())
    }

    /// The event-time timers, in firing order.
    #[cfg(test)]
    pub(crate) fn event_timers(&self) -> &TimerQueue<K, N> {
        &self.event
    }

    /// The processing-time timers, in firing order.
    #[cfg(test)]
    pub(crate) fn processing_timers(&self) -> &TimerQueue<K, N> {
        &self.processing
    }

    /// Event time advanced to `watermark` (an older one is ignored).
    pub(crate) fn advance_watermark(&mut self, watermark: Watermark) {
        self.watermark = self.watermark.max(watermark.timestamp());
    }

    /// The earliest event-time timer the watermark passed, removed.
    pub(crate) fn pop_event_timer(&mut self) -> Option<Timer<K, N>> {
        let (key, namespace, timestamp) = self.pop_due(TimeDomain::EventTime, self.watermark)?;
        Some(Timer {
            key,
            namespace,
            timestamp,
            domain: TimeDomain::EventTime,
        })
    }

    /// The earliest processing-time timer at or before `due`, removed (`due` as
    /// [`poll_processing`](Self::poll_processing) returned it).
    pub(crate) fn pop_processing_timer(&mut self, due: i64) -> Option<Timer<K, N>> {
        let (key, namespace, timestamp) = self.pop_due(TimeDomain::ProcessingTime, due)?;
        Some(Timer {
            key,
            namespace,
            timestamp,
            domain: TimeDomain::ProcessingTime,
        })
    }

    /// Arms the tokio timer for the earliest processing-time timer and, once that timer is due,
    /// returns the latest timestamp that is (processing time now, less a millisecond); otherwise
    /// `None`, with `cx`'s waker registered for when it will be.
    ///
    /// A timer for `T` is due once processing time has passed `T`, as in Flink
    /// (`ProcessingTimeServiceUtil.getProcessingTimeDelay` adds a millisecond): a record processed
    /// later within millisecond `T` is still processed before the timer for `T`, the way a
    /// watermark `T` promises no record at or before `T` follows it. So a processing-time window
    /// ending at `E` (its timer at `E - 1`) fires only once processing time reached `E`, never
    /// while records of the millisecond before are still being assigned to it.
    pub(crate) fn poll_processing(&mut self, cx: &mut Context<'_>) -> Option<i64> {
        let earliest = match &mut self.stored {
            Some(s) => {
                let r = s.processing.peek_time();
                s.keep(r, None)?
            }
            None => self.processing.peek_time()?,
        };
        let now = self.clock.now_ms();
        if earliest < now {
            return Some(now - 1);
        }
        if self.armed_for != Some(earliest) {
            let at = self.clock.instant_at(earliest.saturating_add(1));
            match &mut self.sleep {
                Some(s) => s.as_mut().reset(at),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(at))),
            }
            self.armed_for = Some(earliest);
        }
        let sleep = self.sleep.as_mut()?;
        if sleep.as_mut().poll(cx).is_ready() {
            self.armed_for = None;
            // tokio's timer has millisecond granularity: read the clock again.
            let now = self.clock.now_ms().max(earliest.saturating_add(1));
            return Some(now - 1);
        }
        None
    }

    /// Whether any timer is registered.
    #[cfg(test)]
    pub(crate) fn is_empty(&mut self) -> bool {
        match &mut self.stored {
            Some(s) => {
                s.event.is_empty().unwrap_or(false) && s.processing.is_empty().unwrap_or(false)
            }
            None => self.event.is_empty() && self.processing.is_empty(),
        }
    }

    fn state_name(&self) -> String {
        format!("_timers/{}", self.name)
    }
}

impl<K, N> InternalTimers<K, N>
where
    K: Hash + Eq + Clone + Serialize + DeserializeOwned,
    N: Hash + Eq + Clone + Serialize + DeserializeOwned,
{
    /// Writes every timer as keyed state: one entry per key group, holding (domain, key,
    /// namespace, timestamp) in firing order.
    /// Attached to an incremental store, it writes nothing: the timers are in the store's
    /// files.
    pub(crate) fn snapshot_into(
        &mut self,
        max_parallelism: usize,
        state: &mut OperatorState,
    ) -> Result<(), StateError> {
        self.check()?;
        self.flush()?;
        let mut owned: Vec<(TimeDomain, K, N, i64)> = Vec::new();
        if let Some(s) = &mut self.stored {
            if s.incremental {
                return Ok(());
            }
            for domain in [TimeDomain::EventTime, TimeDomain::ProcessingTime] {
                s.domain(domain)
                    .for_each(&mut |k, n, t| owned.push((domain, k, n, t)))?;
            }
        }
        type Entry<'a, K, N> = (TimeDomain, &'a K, &'a N, i64);
        let mut groups: FxHashMap<usize, Vec<Entry<'_, K, N>>> = FxHashMap::default();
        let heap = [
            (TimeDomain::EventTime, &self.event),
            (TimeDomain::ProcessingTime, &self.processing),
        ]
        .into_iter()
        .flat_map(|(domain, queue)| queue.iter().map(move |(k, n, t)| (domain, k, n, t)));
        let stored = owned.iter().map(|(d, k, n, t)| (*d, k, n, *t));
        for (domain, k, n, t) in heap.chain(stored) {
            groups
                .entry(key_group(k, max_parallelism))
                .or_default()
                .push((domain, k, n, t));
        }
        let name = self.state_name();
        let mut groups: Vec<_> = groups.into_iter().collect();
        groups.sort_unstable_by_key(|(g, _)| *g);
        for (g, timers) in groups {
            state.push_keyed(KeyGroupEntry {
                state: name.clone(),
                key_group: g as u32,
                data: codec::encode(&timers)?,
            });
        }
        Ok(())
    }

    /// Adds the timers of this service's entries in `state` (the key groups dealt to this
    /// subtask).
    pub(crate) fn restore_from(&mut self, state: &OperatorState) -> Result<(), StateError> {
        let name = self.state_name();
        for e in state.keyed_entries().iter().filter(|e| e.state == name) {
            let timers: Vec<(TimeDomain, K, N, i64)> = codec::decode(&e.data)?;
            for (domain, k, n, t) in timers {
                self.register(domain, k, n, t);
            }
        }
        match self.take_error() {
            None => Ok(()),
            Some(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_groups::subtask_for_key_group;
    use crate::state::redistribute;

    #[test]
    fn timers_follow_their_keys_when_rescaled_from_2_to_3() {
        let maxp = 128;
        let mut old = Vec::new();
        for s in 0..2 {
            let mut timers: InternalTimers<u64, u8> = InternalTimers::new("w");
            for k in 0..300u64 {
                if subtask_for_key_group(key_group(&k, maxp), maxp, 2) == s {
                    timers.register_event_time_timer(k, 1, k as i64);
                    timers.register_processing_time_timer(k, 2, 1_000 + k as i64);
                }
            }
            let mut snap = OperatorState::default();
            timers.snapshot_into(maxp, &mut snap).unwrap();
            old.push(snap);
        }
        let mut seen = 0;
        for (s, snap) in redistribute(old, 3, maxp).iter().enumerate() {
            let mut timers: InternalTimers<u64, u8> = InternalTimers::new("w");
            timers.restore_from(snap).unwrap();
            for (k, n, t) in timers.event_timers().iter() {
                assert_eq!((*n, t), (1, *k as i64));
                assert_eq!(subtask_for_key_group(key_group(k, maxp), maxp, 3), s);
                assert!(
                    timers
                        .processing_timers()
                        .contains(k, &2, 1_000 + *k as i64)
                );
                seen += 1;
            }
        }
        assert_eq!(seen, 300);
    }

    #[tokio::test(start_paused = true)]
    async fn a_processing_time_timer_is_due_once_the_paused_clock_passed_it() {
        let mut timers: InternalTimers<u8, ()> = InternalTimers::new("p");
        timers.set_clock(ProcessingClock::starting_at(0));
        timers.register_processing_time_timer(1, (), 50);
        timers.register_processing_time_timer(2, (), 51);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert_eq!(timers.poll_processing(&mut cx), None);
        tokio::time::advance(std::time::Duration::from_millis(50)).await;
        assert_eq!(
            timers.poll_processing(&mut cx),
            None,
            "not within its own millisecond"
        );
        tokio::time::advance(std::time::Duration::from_millis(1)).await;
        let due = timers.poll_processing(&mut cx).unwrap();
        assert_eq!(due, 50);
        assert_eq!(timers.pop_processing_timer(due).map(|t| t.key), Some(1));
        assert_eq!(
            timers.pop_processing_timer(due),
            None,
            "51 is not due at 51"
        );
        assert_eq!(timers.poll_processing(&mut cx), None);
    }

    /// The timer a processing-time window registers for its last millisecond, from a record in
    /// that millisecond, waits for the next one (with the clock stopped, forever): a record
    /// arriving later in the same millisecond still joins the window.
    #[tokio::test(start_paused = true)]
    async fn a_timer_for_the_current_millisecond_waits_for_the_next() {
        let mut timers: InternalTimers<u8, ()> = InternalTimers::new("p");
        timers.set_clock(ProcessingClock::starting_at(99));
        timers.register_processing_time_timer(1, (), 99);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert_eq!(timers.poll_processing(&mut cx), None);
        tokio::time::advance(std::time::Duration::from_millis(1)).await;
        assert_eq!(timers.poll_processing(&mut cx), Some(99));
    }
}
