//! [`KeyedProcessFunction`]: per-record and per-timer callbacks of a keyed stream, and the
//! [`Context`] and [`TimerService`] they see.

use super::output::{OutputTag, Tagged};
use crate::operator::{Collector, OperatorContext};
use crate::state::ValueState;
use crate::timer::{InternalTimers, TimeDomain};
use serde::{Serialize, de::DeserializeOwned};
use sluice_core::{Data, UserError};
use std::fmt::Debug;
use std::hash::Hash;

/// What a key of keyed state and timers must be: hashed into key groups, compared, and stored
/// in checkpoints.
pub trait StateKey:
    Hash + Eq + Clone + Send + Debug + Serialize + DeserializeOwned + 'static
{
}

impl<K: Hash + Eq + Clone + Send + Debug + Serialize + DeserializeOwned + 'static> StateKey for K {}

/// A function over a keyed stream with per-key state and timers (Flink's
/// `KeyedProcessFunction`).
///
/// [`process_element`](Self::process_element) is called for each record,
/// [`on_timer`](Self::on_timer) for each timer that fires; both see the key's own state
/// ([`Context::state`], of type [`State`](Self::State), checkpointed by the runtime) and can
/// register and delete timers for that key. Outputs carry the record's event time (in
/// `on_timer`, an event-time timer's timestamp) unless set with [`Context::collect_at`].
///
/// "Alert when a user is silent for 10 seconds of event time":
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::process::{Context, KeyedProcessFunction};
/// use std::time::Duration;
///
/// #[derive(Clone)]
/// struct Silence;
///
/// impl KeyedProcessFunction<u32, (u32, i64)> for Silence {
///     type Out = (u32, i64);
///     type State = i64; // the deadline registered last
///
///     fn process_element(&mut self, _click: (u32, i64), ctx: &mut Context<'_, u32, i64, (u32, i64)>) -> Result<(), UserError> {
///         let deadline = ctx.timestamp().unwrap_or(0) + 10_000;
///         let old = std::mem::replace(ctx.state(), deadline);
///         ctx.timer_service().delete_event_time_timer(old);
///         ctx.timer_service().register_event_time_timer(deadline);
///         Ok(())
///     }
///
///     fn on_timer(&mut self, timestamp: i64, ctx: &mut Context<'_, u32, i64, (u32, i64)>) -> Result<(), UserError> {
///         let user = *ctx.current_key();
///         ctx.collect((user, timestamp));
///         ctx.clear_state();
///         Ok(())
///     }
/// }
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(1).set_batch_size(1); // one source, a watermark after every click
/// let clicks = vec![(1u32, 0i64), (2, 1_000), (1, 5_000), (3, 20_000), (2, 30_000)];
/// let alerts = env
///     .from_iter(clicks)
///     .assign_timestamps_and_watermarks(WatermarkStrategy::for_monotonous_timestamps(|c: &(u32, i64)| c.1))
///     .key_by(|c| c.0)
///     .process_keyed(Silence)
///     .collect();
/// env.execute_blocking("silence").unwrap();
/// let mut alerts = alerts.take();
/// alerts.sort();
/// // The watermark 19_999 fires users 1 and 2; at end of input the maximum watermark fires
/// // every timer left.
/// assert_eq!(alerts, vec![(1, 15_000), (2, 11_000), (2, 40_000), (3, 30_000)]);
/// ```
pub trait KeyedProcessFunction<K, In>: Clone + Send + 'static {
    /// The main output's record type.
    type Out: Data;
    /// The state kept per key (`()` for none).
    type State: Default + Serialize + DeserializeOwned + Send + 'static;

    /// How long a key's state lives after its last write (Flink's `StateTtlConfig` on the
    /// state's descriptor), in processing time; `None` (the default) keeps it until
    /// [`Context::clear_state`]. Taking the state with [`Context::state`] counts as a write;
    /// [`Context::state_if_present`] is a read. An expired state reads as absent, so
    /// `state()` starts again from the default. Asked once, when the operator is made.
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_runtime::process::{Context, KeyedProcessFunction};
    /// use sluice_runtime::state::StateTtlConfig;
    /// use std::time::Duration;
    ///
    /// /// Counts each user's clicks, forgetting a user idle for a day.
    /// #[derive(Clone)]
    /// struct Clicks;
    ///
    /// impl KeyedProcessFunction<u32, u32> for Clicks {
    ///     type Out = (u32, u64);
    ///     type State = u64;
    ///
    ///     fn state_ttl(&self) -> Option<StateTtlConfig> {
    ///         Some(StateTtlConfig::new(Duration::from_secs(86_400)))
    ///     }
    ///
    ///     fn process_element(&mut self, user: u32, ctx: &mut Context<'_, u32, u64, (u32, u64)>) -> Result<(), UserError> {
    ///         *ctx.state() += 1;
    ///         let clicks = *ctx.state();
    ///         ctx.collect((user, clicks));
    ///         Ok(())
    ///     }
    /// }
    ///
    /// let env = StreamEnvironment::new();
    /// let counts = env.from_iter(vec![1u32, 2, 1]).key_by(|u| *u).process_keyed(Clicks).collect();
    /// env.execute_blocking("clicks").unwrap();
    /// let mut counts = counts.take();
    /// counts.sort();
    /// assert_eq!(counts, vec![(1, 1), (1, 2), (2, 1)]);
    /// ```
    fn state_ttl(&self) -> Option<crate::state::StateTtlConfig> {
        None
    }

    /// Called once per subtask before any record.
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let _ = ctx;
        Ok(())
    }

    /// Called for each record, with the record's key current.
    fn process_element(
        &mut self,
        value: In,
        ctx: &mut Context<'_, K, Self::State, Self::Out>,
    ) -> Result<(), UserError>;

    /// Called when a timer registered for `timestamp` fires, with the timer's key current.
    fn on_timer(
        &mut self,
        timestamp: i64,
        ctx: &mut Context<'_, K, Self::State, Self::Out>,
    ) -> Result<(), UserError> {
        let _ = (timestamp, ctx);
        Ok(())
    }
}

/// What a [`KeyedProcessFunction`] callback sees: the current key and its state, the event
/// time, the timers, and the outputs.
pub struct Context<'a, K, S, Out> {
    pub(crate) key: &'a K,
    pub(crate) timestamp: Option<i64>,
    pub(crate) domain: Option<TimeDomain>,
    pub(crate) state: &'a mut ValueState<K, S>,
    pub(crate) timers: &'a mut InternalTimers<K, ()>,
    pub(crate) out: &'a mut Collector<Tagged<Out>>,
}

impl<K: StateKey, S: Default + Serialize + DeserializeOwned, Out: Data> Context<'_, K, S, Out> {
    /// The key of the record (or timer) being processed.
    pub fn current_key(&self) -> &K {
        self.key
    }

    /// The event time of the record being processed, or the timestamp of the event-time timer
    /// firing; `None` for a record without one and for processing-time timers.
    pub fn timestamp(&self) -> Option<i64> {
        self.timestamp
    }

    /// In `on_timer`, which clock fired the timer; `None` in `process_element`.
    pub fn time_domain(&self) -> Option<TimeDomain> {
        self.domain
    }

    /// The current key's state, created with its default when absent.
    pub fn state(&mut self) -> &mut S {
        self.state.get_or_default(self.key.clone())
    }

    /// The current key's state, if it has any.
    pub fn state_if_present(&mut self) -> Option<&S> {
        self.state.get(self.key)
    }

    /// Removes the current key's state.
    pub fn clear_state(&mut self) {
        self.state.remove(self.key);
    }

    /// The timers of the current key.
    pub fn timer_service(&mut self) -> TimerService<'_, K> {
        TimerService {
            key: self.key,
            timers: self.timers,
        }
    }

    /// Emits `value` on the main output with the current event time.
    pub fn collect(&mut self, value: Out) {
        self.out.collect_timed(Tagged::Main(value), self.timestamp);
    }

    /// Emits `value` on the main output with event time `timestamp`.
    pub fn collect_at(&mut self, value: Out, timestamp: i64) {
        self.out.collect_at(Tagged::Main(value), timestamp);
    }

    /// Emits `value` on side output `tag` with the current event time.
    pub fn output<X: Data>(&mut self, tag: &OutputTag<X>, value: X) {
        self.out
            .collect_timed(Tagged::side(tag, value), self.timestamp);
    }
}

/// The timers of one key (Flink's `TimerService`): registering the same timestamp twice keeps
/// one timer; deleting one that does not exist does nothing.
pub struct TimerService<'a, K> {
    key: &'a K,
    timers: &'a mut InternalTimers<K, ()>,
}

impl<K: StateKey> TimerService<'_, K> {
    /// Processing time now, in epoch milliseconds.
    pub fn current_processing_time(&self) -> i64 {
        self.timers.current_processing_time()
    }

    /// The current watermark (`i64::MIN` before the first).
    pub fn current_watermark(&self) -> i64 {
        self.timers.current_watermark()
    }

    /// Calls `on_timer` when the watermark reaches `timestamp`.
    pub fn register_event_time_timer(&mut self, timestamp: i64) {
        self.timers
            .register_event_time_timer(self.key.clone(), (), timestamp);
    }

    /// Calls `on_timer` once processing time has passed `timestamp` (as in Flink, not within
    /// millisecond `timestamp` itself, so that a record of that millisecond still comes first).
    pub fn register_processing_time_timer(&mut self, timestamp: i64) {
        self.timers
            .register_processing_time_timer(self.key.clone(), (), timestamp);
    }

    /// Deletes the event-time timer at `timestamp`.
    pub fn delete_event_time_timer(&mut self, timestamp: i64) {
        self.timers
            .delete_event_time_timer(self.key, &(), timestamp);
    }

    /// Deletes the processing-time timer at `timestamp`.
    pub fn delete_processing_time_timer(&mut self, timestamp: i64) {
        self.timers
            .delete_processing_time_timer(self.key, &(), timestamp);
    }
}
