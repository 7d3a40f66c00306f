//! The broadcast state pattern (Flink's `BroadcastStream`, `BroadcastProcessFunction`,
//! `KeyedBroadcastProcessFunction`): a low-volume stream (rules, configuration) is broadcast to
//! every subtask of an operator, which keeps what it says in **broadcast state**, a map per
//! [`MapStateDescriptor`], and reads it when processing the other, high-volume input.
//!
//! - The broadcast side may write the state ([`BroadcastContext`],
//!   [`KeyedBroadcastContext`]); the other side only reads it ([`ReadOnlyBroadcastContext`],
//!   [`KeyedReadOnlyContext`]). Every subtask sees the same broadcast records in the same order,
//!   so a function that updates the state only from them, deterministically, keeps the copies
//!   equal, as Flink requires.
//! - Each subtask checkpoints its copy as broadcast entries of its [`OperatorState`]; at another
//!   parallelism new subtask `i` restores the copy of old subtask `i % old_parallelism`.
//! - The keyed variant also has per-key state and timers for the keyed input, and
//!   [`KeyedBroadcastContext::apply_to_keyed_state`] to visit every key's state from a broadcast
//!   record.
//!
//! The operators are two-input operators over [`Either`]: the non-broadcast input first
//! (`Left`), the broadcast input second (`Right`).

use super::co::timestamp_at;
use super::function::{Context, StateKey};
use super::operator::store_failure;
use super::output::Tagged;
use super::output::output_methods;
use super::timed::TimedOperator;
use crate::operator::{Collector, Operator, OperatorContext};
use crate::state::{BroadcastEntry, OperatorState, ValueState};
use crate::timer::{InternalTimers, ProcessingClock, TimeDomain, Timer};
use rustc_hash::FxHashMap;
use serde::{Serialize, de::DeserializeOwned};
use sluice_core::codec::{self, CodecError};
use sluice_core::{CheckpointId, Data, Either, UserError, Watermark};
use std::any::Any;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::task::Poll;

/// Names a broadcast state of keys `K` and values `V` (Flink's `MapStateDescriptor`). Pass it
/// to `DataStream::broadcast_with` to declare the state, and to a context's
/// `broadcast_state` to reach it.
pub struct MapStateDescriptor<K, V> {
    name: Arc<str>,
    _kv: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Clone for MapStateDescriptor<K, V> {
    fn clone(&self) -> Self {
        MapStateDescriptor {
            name: self.name.clone(),
            _kv: PhantomData,
        }
    }
}

impl<K, V> MapStateDescriptor<K, V> {
    /// A descriptor named `name` (unique within its operator).
    pub fn new(name: &str) -> Self {
        MapStateDescriptor {
            name: Arc::from(name),
            _kv: PhantomData,
        }
    }

    /// The state's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// What a broadcast state's values must be: stored in checkpoints and sent between threads.
pub trait BroadcastValue: Serialize + DeserializeOwned + Send + 'static {}

impl<V: Serialize + DeserializeOwned + Send + 'static> BroadcastValue for V {}

/// One broadcast state: a map from keys to values, the same on every subtask (Flink's
/// `BroadcastState`).
pub struct BroadcastState<K, V> {
    map: FxHashMap<K, V>,
}

impl<K: StateKey, V: BroadcastValue> BroadcastState<K, V> {
    fn new() -> Self {
        BroadcastState {
            map: FxHashMap::default(),
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    /// Whether `key` has a value.
    pub fn contains_key(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    /// Sets the value of `key`, returning the old one.
    pub fn put(&mut self, key: K, value: V) -> Option<V> {
        self.map.insert(key, value)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        self.map.remove(key)
    }

    /// Every key and value, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.map.iter()
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the state holds no key.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Removes every key.
    pub fn clear(&mut self) {
        self.map.clear();
    }
}

/// One broadcast state with its types erased, so an operator can hold several.
trait ErasedState: Send {
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn encode(&self) -> Result<Vec<u8>, CodecError>;
    fn decode_into(&mut self, bytes: &[u8]) -> Result<(), CodecError>;
    fn fresh(&self) -> Box<dyn ErasedState>;
}

impl<K: StateKey, V: BroadcastValue> ErasedState for BroadcastState<K, V> {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn encode(&self) -> Result<Vec<u8>, CodecError> {
        let entries: Vec<(&K, &V)> = self.map.iter().collect();
        codec::encode(&entries)
    }
    fn decode_into(&mut self, bytes: &[u8]) -> Result<(), CodecError> {
        let entries: Vec<(K, V)> = codec::decode(bytes)?;
        self.map = entries.into_iter().collect();
        Ok(())
    }
    fn fresh(&self) -> Box<dyn ErasedState> {
        Box::new(BroadcastState::<K, V>::new())
    }
}

/// The broadcast states an operator declared, by name.
pub(crate) struct BroadcastStates {
    states: Vec<(Arc<str>, Box<dyn ErasedState>)>,
}

impl Clone for BroadcastStates {
    /// The same declarations, every state empty.
    fn clone(&self) -> Self {
        BroadcastStates {
            states: self
                .states
                .iter()
                .map(|(n, s)| (n.clone(), s.fresh()))
                .collect(),
        }
    }
}

impl BroadcastStates {
    /// One empty state for `descriptor`.
    pub(crate) fn declaring<K: StateKey, V: BroadcastValue>(
        descriptor: &MapStateDescriptor<K, V>,
    ) -> Self {
        BroadcastStates { states: Vec::new() }.and(descriptor)
    }

    /// These states and one more, for `descriptor` (a name declared twice keeps the first).
    pub(crate) fn and<K: StateKey, V: BroadcastValue>(
        mut self,
        descriptor: &MapStateDescriptor<K, V>,
    ) -> Self {
        if !self.states.iter().any(|(n, _)| **n == *descriptor.name) {
            self.states.push((
                descriptor.name.clone(),
                Box::new(BroadcastState::<K, V>::new()),
            ));
        }
        self
    }

    fn find(&self, name: &str) -> Result<&dyn ErasedState, UserError> {
        self.states
            .iter()
            .find(|(n, _)| **n == *name)
            .map(|(_, s)| s.as_ref())
            .ok_or_else(|| undeclared(name))
    }

    fn get<K: StateKey, V: BroadcastValue>(
        &self,
        descriptor: &MapStateDescriptor<K, V>,
    ) -> Result<&BroadcastState<K, V>, UserError> {
        self.find(&descriptor.name)?
            .as_any()
            .downcast_ref()
            .ok_or_else(|| mistyped(&descriptor.name))
    }

    fn get_mut<K: StateKey, V: BroadcastValue>(
        &mut self,
        descriptor: &MapStateDescriptor<K, V>,
    ) -> Result<&mut BroadcastState<K, V>, UserError> {
        let name = &descriptor.name;
        let (_, state) = self
            .states
            .iter_mut()
            .find(|(n, _)| **n == **name)
            .ok_or_else(|| undeclared(name))?;
        state
            .as_any_mut()
            .downcast_mut()
            .ok_or_else(|| mistyped(name))
    }

    /// Writes one broadcast entry per state.
    pub(crate) fn snapshot_into(&self, out: &mut OperatorState) -> Result<(), CodecError> {
        for (name, state) in &self.states {
            out.push_broadcast(BroadcastEntry {
                state: name.to_string(),
                data: state.encode()?,
            });
        }
        Ok(())
    }

    /// Restores the states named in `state`'s broadcast entries; an entry of a state this
    /// operator no longer declares is an error naming it.
    pub(crate) fn restore_from(&mut self, state: &OperatorState) -> Result<(), UserError> {
        for entry in state.broadcast_entries() {
            let Some((_, s)) = self.states.iter_mut().find(|(n, _)| **n == *entry.state) else {
                return Err(format!(
                    "the checkpoint holds broadcast state '{}', which this operator does not declare",
                    entry.state
                )
                .into());
            };
            s.decode_into(&entry.data).map_err(|e| {
                UserError::from(format!(
                    "broadcast state '{}' cannot be decoded: {e}",
                    entry.state
                ))
            })?;
        }
        Ok(())
    }
}

fn undeclared(name: &str) -> UserError {
    format!("broadcast state '{name}' was not declared: pass its descriptor to broadcast_with")
        .into()
}

fn mistyped(name: &str) -> UserError {
    format!("broadcast state '{name}' was declared with other key or value types").into()
}

/// A function over a stream connected with a broadcast stream (Flink's
/// `BroadcastProcessFunction`): [`process_element`](Self::process_element) for the other
/// input's records reads the broadcast state, and
/// [`process_broadcast_element`](Self::process_broadcast_element) for broadcast records may
/// change it.
///
/// Drop the words a broadcast rule stream bans, on every subtask:
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::process::{
///     BroadcastContext, BroadcastProcessFunction, MapStateDescriptor, ReadOnlyBroadcastContext,
/// };
///
/// #[derive(Clone)]
/// struct Censor(MapStateDescriptor<String, bool>);
///
/// impl BroadcastProcessFunction<String, String> for Censor {
///     type Out = String;
///     fn process_element(&mut self, word: String, ctx: &mut ReadOnlyBroadcastContext<'_, String>) -> Result<(), UserError> {
///         if !ctx.broadcast_state(&self.0)?.contains_key(&word) {
///             ctx.collect(word);
///         }
///         Ok(())
///     }
///     fn process_broadcast_element(&mut self, banned: String, ctx: &mut BroadcastContext<'_, String>) -> Result<(), UserError> {
///         ctx.broadcast_state(&self.0)?.put(banned, true);
///         Ok(())
///     }
/// }
///
/// let env = StreamEnvironment::new();
/// let banned = MapStateDescriptor::<String, bool>::new("banned");
/// let rules = env.from_iter(vec!["spam".to_string()]).broadcast_with(&banned);
/// // Words arrive after the rules here: a pipeline that must not miss a rule holds the
/// // words back until the rules have arrived (or keeps them in state).
/// let words = env.from_iter(Vec::<String>::new());
/// let kept = words.connect_broadcast(&rules).process(Censor(banned)).collect();
/// env.execute_blocking("censor").unwrap();
/// assert!(kept.take().is_empty());
/// ```
pub trait BroadcastProcessFunction<A, B>: Clone + Send + 'static {
    /// The main output's record type.
    type Out: Data;

    /// Called once per subtask before any record.
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let _ = ctx;
        Ok(())
    }

    /// Called for each record of the non-broadcast input.
    fn process_element(
        &mut self,
        value: A,
        ctx: &mut ReadOnlyBroadcastContext<'_, Self::Out>,
    ) -> Result<(), UserError>;

    /// Called for each broadcast record, on every subtask.
    fn process_broadcast_element(
        &mut self,
        value: B,
        ctx: &mut BroadcastContext<'_, Self::Out>,
    ) -> Result<(), UserError>;
}

/// What [`BroadcastProcessFunction::process_element`] sees: the broadcast state, read only.
pub struct ReadOnlyBroadcastContext<'a, Out> {
    timestamp: Option<i64>,
    watermark: i64,
    clock: &'a ProcessingClock,
    broadcast: &'a BroadcastStates,
    out: &'a mut Collector<Tagged<Out>>,
}

/// What [`BroadcastProcessFunction::process_broadcast_element`] sees: the broadcast state,
/// writable.
pub struct BroadcastContext<'a, Out> {
    timestamp: Option<i64>,
    watermark: i64,
    clock: &'a ProcessingClock,
    broadcast: &'a mut BroadcastStates,
    out: &'a mut Collector<Tagged<Out>>,
}

impl<Out: Data> ReadOnlyBroadcastContext<'_, Out> {
    output_methods!();

    /// The broadcast state `descriptor` names, read only. An error when the descriptor was not
    /// declared with `broadcast_with` or was declared with other types.
    pub fn broadcast_state<K: StateKey, V: BroadcastValue>(
        &self,
        descriptor: &MapStateDescriptor<K, V>,
    ) -> Result<&BroadcastState<K, V>, UserError> {
        self.broadcast.get(descriptor)
    }
}

impl<Out: Data> BroadcastContext<'_, Out> {
    output_methods!();

    /// The broadcast state `descriptor` names, writable. An error when the descriptor was not
    /// declared with `broadcast_with` or was declared with other types.
    pub fn broadcast_state<K: StateKey, V: BroadcastValue>(
        &mut self,
        descriptor: &MapStateDescriptor<K, V>,
    ) -> Result<&mut BroadcastState<K, V>, UserError> {
        self.broadcast.get_mut(descriptor)
    }
}

/// The operator behind `BroadcastConnectedStream::process`.
pub struct BroadcastProcessOperator<A, B, P> {
    func: P,
    broadcast: BroadcastStates,
    watermark: i64,
    clock: ProcessingClock,
    _in: PhantomData<fn(A, B)>,
}

impl<A, B, P: Clone> Clone for BroadcastProcessOperator<A, B, P> {
    fn clone(&self) -> Self {
        BroadcastProcessOperator::new(self.func.clone(), self.broadcast.clone())
    }
}

impl<A, B, P> BroadcastProcessOperator<A, B, P> {
    pub(crate) fn new(func: P, broadcast: BroadcastStates) -> Self {
        BroadcastProcessOperator {
            func,
            broadcast,
            watermark: i64::MIN,
            clock: ProcessingClock::new(),
            _in: PhantomData,
        }
    }
}

impl<A: Data, B: Data, P: BroadcastProcessFunction<A, B>> Operator<Either<A, B>>
    for BroadcastProcessOperator<A, B, P>
{
    type Out = Tagged<P::Out>;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.clock = ProcessingClock::new();
        self.func.open(ctx)
    }

    fn process_batch(
        &mut self,
        batch: Vec<Either<A, B>>,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        let timestamps = out.take_input_timestamps();
        for (i, record) in batch.into_iter().enumerate() {
            let timestamp = timestamp_at(timestamps.as_deref(), i);
            match record {
                Either::Left(a) => {
                    let mut ctx = ReadOnlyBroadcastContext {
                        timestamp,
                        watermark: self.watermark,
                        clock: &self.clock,
                        broadcast: &self.broadcast,
                        out,
                    };
                    self.func.process_element(a, &mut ctx)?;
                }
                Either::Right(b) => {
                    let mut ctx = BroadcastContext {
                        timestamp,
                        watermark: self.watermark,
                        clock: &self.clock,
                        broadcast: &mut self.broadcast,
                        out,
                    };
                    self.func.process_broadcast_element(b, &mut ctx)?;
                }
            }
        }
        Ok(())
    }

    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        self.watermark = watermark.timestamp();
        out.emit_watermark(watermark);
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
        _out: &mut Collector<Self::Out>,
    ) -> Result<OperatorState, UserError> {
        let mut state = OperatorState::default();
        self.broadcast.snapshot_into(&mut state)?;
        Ok(state)
    }

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.broadcast.restore_from(&state)
    }
}

/// A function over a keyed stream connected with a broadcast stream (Flink's
/// `KeyedBroadcastProcessFunction`): the keyed input's records see their key's state and
/// timers and read the broadcast state; broadcast records may change the broadcast state and
/// visit every key's state with [`KeyedBroadcastContext::apply_to_keyed_state`].
///
/// A threshold per sensor kind, broadcast; readings above their kind's threshold alert:
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::process::{
///     KeyedBroadcastContext, KeyedBroadcastProcessFunction, KeyedReadOnlyContext, MapStateDescriptor,
/// };
///
/// #[derive(Clone)]
/// struct Alert(MapStateDescriptor<u8, u32>);
///
/// // Readings are (sensor, kind, value); thresholds are (kind, limit). The state per sensor
/// // counts its alerts.
/// impl KeyedBroadcastProcessFunction<u32, (u32, u8, u32), (u8, u32)> for Alert {
///     type Out = (u32, u32, u64);
///     type State = u64;
///     fn process_element(&mut self, r: (u32, u8, u32), ctx: &mut KeyedReadOnlyContext<'_, u32, u64, Self::Out>) -> Result<(), UserError> {
///         let limit = ctx.broadcast_state(&self.0)?.get(&r.1).copied();
///         if limit.is_some_and(|l| r.2 > l) {
///             *ctx.state() += 1;
///             let n = *ctx.state();
///             ctx.collect((r.0, r.2, n));
///         }
///         Ok(())
///     }
///     fn process_broadcast_element(&mut self, t: (u8, u32), ctx: &mut KeyedBroadcastContext<'_, u32, u64, Self::Out>) -> Result<(), UserError> {
///         ctx.broadcast_state(&self.0)?.put(t.0, t.1);
///         Ok(())
///     }
/// }
///
/// let env = StreamEnvironment::new();
/// let limits = MapStateDescriptor::<u8, u32>::new("limits");
/// let thresholds = env.from_iter(vec![(1u8, 50u32)]).broadcast_with(&limits);
/// let readings = env.from_iter(Vec::<(u32, u8, u32)>::new()).key_by(|r| r.0);
/// let alerts = readings.connect_broadcast(&thresholds).process(Alert(limits)).collect();
/// env.execute_blocking("alerts").unwrap();
/// assert!(alerts.take().is_empty());
/// ```
pub trait KeyedBroadcastProcessFunction<K, A, B>: Clone + Send + 'static {
    /// The main output's record type.
    type Out: Data;
    /// The state kept per key of the keyed input (`()` for none).
    type State: Default + Serialize + DeserializeOwned + Send + 'static;

    /// How long a key's state lives after its last write; see
    /// [`KeyedProcessFunction::state_ttl`](super::KeyedProcessFunction::state_ttl). `None` by
    /// default. A visit of every key (`apply_to_keyed_state`) renews nothing and skips expired
    /// states.
    fn state_ttl(&self) -> Option<crate::state::StateTtlConfig> {
        None
    }

    /// Called once per subtask before any record.
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let _ = ctx;
        Ok(())
    }

    /// Called for each record of the keyed input, with its key current.
    fn process_element(
        &mut self,
        value: A,
        ctx: &mut KeyedReadOnlyContext<'_, K, Self::State, Self::Out>,
    ) -> Result<(), UserError>;

    /// Called for each broadcast record, on every subtask; no key is current.
    fn process_broadcast_element(
        &mut self,
        value: B,
        ctx: &mut KeyedBroadcastContext<'_, K, Self::State, Self::Out>,
    ) -> Result<(), UserError>;

    /// Called when a timer registered for `timestamp` fires, with the timer's key current.
    fn on_timer(
        &mut self,
        timestamp: i64,
        ctx: &mut KeyedReadOnlyContext<'_, K, Self::State, Self::Out>,
    ) -> Result<(), UserError> {
        let _ = (timestamp, ctx);
        Ok(())
    }
}

/// What [`KeyedBroadcastProcessFunction::process_element`] and `on_timer` see: everything a
/// keyed process function's [`Context`] offers (it dereferences to one: key, state, timers,
/// outputs), and the broadcast state, read only.
pub struct KeyedReadOnlyContext<'a, K, S, Out> {
    ctx: Context<'a, K, S, Out>,
    broadcast: &'a BroadcastStates,
}

impl<'a, K, S, Out> Deref for KeyedReadOnlyContext<'a, K, S, Out> {
    type Target = Context<'a, K, S, Out>;
    fn deref(&self) -> &Self::Target {
        &self.ctx
    }
}

impl<K, S, Out> DerefMut for KeyedReadOnlyContext<'_, K, S, Out> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.ctx
    }
}

impl<K, S, Out> KeyedReadOnlyContext<'_, K, S, Out> {
    /// The broadcast state `descriptor` names, read only. An error when the descriptor was not
    /// declared with `broadcast_with` or was declared with other types.
    pub fn broadcast_state<BK: StateKey, BV: BroadcastValue>(
        &self,
        descriptor: &MapStateDescriptor<BK, BV>,
    ) -> Result<&BroadcastState<BK, BV>, UserError> {
        self.broadcast.get(descriptor)
    }
}

/// What [`KeyedBroadcastProcessFunction::process_broadcast_element`] sees: the broadcast state,
/// writable, and every key's state through
/// [`apply_to_keyed_state`](Self::apply_to_keyed_state).
pub struct KeyedBroadcastContext<'a, K, S, Out> {
    timestamp: Option<i64>,
    watermark: i64,
    clock: &'a ProcessingClock,
    broadcast: &'a mut BroadcastStates,
    state: &'a mut ValueState<K, S>,
    out: &'a mut Collector<Tagged<Out>>,
}

impl<K: StateKey, S: Default + Serialize + DeserializeOwned, Out: Data>
    KeyedBroadcastContext<'_, K, S, Out>
{
    output_methods!();

    /// The broadcast state `descriptor` names, writable. An error when the descriptor was not
    /// declared with `broadcast_with` or was declared with other types.
    pub fn broadcast_state<BK: StateKey, BV: BroadcastValue>(
        &mut self,
        descriptor: &MapStateDescriptor<BK, BV>,
    ) -> Result<&mut BroadcastState<BK, BV>, UserError> {
        self.broadcast.get_mut(descriptor)
    }

    /// Calls `f` with every key of this subtask that has state, and its state (Flink's
    /// `applyToKeyedState`). The first error stops the visit and is returned.
    pub fn apply_to_keyed_state(
        &mut self,
        f: impl FnMut(&K, &mut S) -> Result<(), UserError>,
    ) -> Result<(), UserError> {
        self.state.for_each_mut(f)
    }
}

/// The operator behind `KeyedBroadcastConnectedStream::process`.
pub struct KeyedBroadcastProcessOperator<A, B, K, KF, P: KeyedBroadcastProcessFunction<K, A, B>> {
    func: P,
    key_fn: KF,
    broadcast: BroadcastStates,
    state: ValueState<K, P::State>,
    timers: InternalTimers<K, ()>,
    clock: ProcessingClock,
    max_parallelism: usize,
    _in: PhantomData<fn(A, B)>,
}

impl<A, B, K, KF, P> Clone for KeyedBroadcastProcessOperator<A, B, K, KF, P>
where
    K: StateKey,
    KF: Clone,
    P: KeyedBroadcastProcessFunction<K, A, B>,
{
    fn clone(&self) -> Self {
        Self::new(
            self.func.clone(),
            self.key_fn.clone(),
            self.broadcast.clone(),
        )
    }
}

impl<A, B, K, KF, P> KeyedBroadcastProcessOperator<A, B, K, KF, P>
where
    K: StateKey,
    P: KeyedBroadcastProcessFunction<K, A, B>,
{
    pub(crate) fn new(func: P, key_fn: KF, broadcast: BroadcastStates) -> Self {
        let state = match func.state_ttl() {
            Some(ttl) => ValueState::with_ttl("_broadcast/state", ttl),
            None => ValueState::new("_broadcast/state"),
        };
        KeyedBroadcastProcessOperator {
            func,
            key_fn,
            broadcast,
            state,
            timers: InternalTimers::new("broadcast"),
            clock: ProcessingClock::new(),
            max_parallelism: crate::DEFAULT_MAX_PARALLELISM,
            _in: PhantomData,
        }
    }
}

impl<A, B, K, KF, P> TimedOperator<K, (), Tagged<P::Out>>
    for KeyedBroadcastProcessOperator<A, B, K, KF, P>
where
    K: StateKey,
    P: KeyedBroadcastProcessFunction<K, A, B>,
{
    fn timers(&mut self) -> &mut InternalTimers<K, ()> {
        &mut self.timers
    }

    fn on_timer(
        &mut self,
        timer: Timer<K, ()>,
        out: &mut Collector<Tagged<P::Out>>,
    ) -> Result<(), UserError> {
        let timestamp = match timer.domain {
            TimeDomain::EventTime => Some(timer.timestamp),
            TimeDomain::ProcessingTime => None,
        };
        let mut ctx = KeyedReadOnlyContext {
            ctx: Context {
                key: &timer.key,
                timestamp,
                domain: Some(timer.domain),
                state: &mut self.state,
                timers: &mut self.timers,
                out,
            },
            broadcast: &self.broadcast,
        };
        self.func.on_timer(timer.timestamp, &mut ctx)?;
        store_failure(&mut self.state)
    }
}

impl<A, B, K, KF, P> KeyedBroadcastProcessOperator<A, B, K, KF, P>
where
    A: Data,
    B: Data,
    K: StateKey,
    KF: Fn(&A) -> K + Clone + Send + 'static,
    P: KeyedBroadcastProcessFunction<K, A, B>,
{
    /// Calls the function for each record of a batch, reading each run of keyed records'
    /// keys from the store first.
    fn process_records(
        &mut self,
        batch: Vec<Either<A, B>>,
        out: &mut Collector<Tagged<P::Out>>,
    ) -> Result<(), UserError> {
        let timestamps = out.take_input_timestamps();
        // In a store, the keys of each run of keyed records are read in one go before the run
        // (a broadcast record between runs may visit every key, and the cache with it); on the
        // heap there is nothing to read.
        let mut runs: Vec<(usize, Vec<K>)> = Vec::new();
        if self.state.is_attached() {
            let mut i = 0;
            while i < batch.len() {
                let keys: Vec<K> = batch[i..]
                    .iter()
                    .map_while(|r| match r {
                        Either::Left(a) => Some((self.key_fn)(a)),
                        Either::Right(_) => None,
                    })
                    .collect();
                let len = keys.len();
                if len > 0 {
                    runs.push((i, keys));
                }
                // Past the run and the broadcast record that ends it.
                i += len + 1;
            }
        }
        let mut runs = runs.into_iter().peekable();
        for (i, record) in batch.into_iter().enumerate() {
            let timestamp = timestamp_at(timestamps.as_deref(), i);
            if let Some((_, keys)) = runs.next_if(|(start, _)| *start == i) {
                self.state.prefetch(&keys);
                store_failure(&mut self.state)?;
            }
            match record {
                Either::Left(a) => {
                    let key = (self.key_fn)(&a);
                    let mut ctx = KeyedReadOnlyContext {
                        ctx: Context {
                            key: &key,
                            timestamp,
                            domain: None,
                            state: &mut self.state,
                            timers: &mut self.timers,
                            out,
                        },
                        broadcast: &self.broadcast,
                    };
                    self.func.process_element(a, &mut ctx)?;
                }
                Either::Right(b) => {
                    let mut ctx = KeyedBroadcastContext {
                        timestamp,
                        watermark: self.timers.current_watermark(),
                        clock: &self.clock,
                        broadcast: &mut self.broadcast,
                        state: &mut self.state,
                        out,
                    };
                    self.func.process_broadcast_element(b, &mut ctx)?;
                }
            }
            store_failure(&mut self.state)?;
        }
        Ok(())
    }
}

impl<A, B, K, KF, P> Operator<Either<A, B>> for KeyedBroadcastProcessOperator<A, B, K, KF, P>
where
    A: Data,
    B: Data,
    K: StateKey,
    KF: Fn(&A) -> K + Clone + Send + 'static,
    P: KeyedBroadcastProcessFunction<K, A, B>,
{
    type Out = Tagged<P::Out>;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.max_parallelism = ctx.max_parallelism();
        self.timers.set_clock(ProcessingClock::new());
        self.clock = ProcessingClock::new();
        ctx.attach_keyed_state(&mut self.state)?;
        ctx.attach_timers(&mut self.timers)?;
        self.func.open(ctx)
    }

    fn process_batch(
        &mut self,
        batch: Vec<Either<A, B>>,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        // A state with a time-to-live reads processing time once for the batch.
        if self.state.ttl().is_some() {
            self.state.pin_time(Some(self.clock.now_ms()));
        }
        let processed = self.process_records(batch, out);
        self.state.pin_time(None);
        processed
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
        self.state.snapshot_into(self.max_parallelism, &mut state)?;
        self.timers
            .snapshot_into(self.max_parallelism, &mut state)?;
        self.broadcast.snapshot_into(&mut state)?;
        Ok(state)
    }

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.state.restore_from(&state)?;
        self.timers.restore_from(&state)?;
        self.broadcast.restore_from(&state)
    }
}
