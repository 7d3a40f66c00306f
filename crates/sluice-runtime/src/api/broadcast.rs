//! The broadcast state pattern on the stream API: [`BroadcastStream`] (a stream broadcast to
//! every subtask, with the broadcast states it fills), [`BroadcastConnectedStream`] and
//! [`KeyedBroadcastConnectedStream`] (a stream, or a keyed stream, connected with it).
//!
//! See `process::broadcast` for the functions and how broadcast state is checkpointed.

use crate::api::keyed::KeyedStream;
use crate::api::processed::ProcessedStream;
use crate::api::stream::DataStream;
use crate::process::{
    BroadcastProcessFunction, BroadcastProcessOperator, BroadcastStates, BroadcastValue,
    KeyedBroadcastProcessFunction, KeyedBroadcastProcessOperator, MapStateDescriptor, StateKey,
};
use sluice_core::Data;

/// A stream whose every record reaches every subtask of the operator it is connected to, with
/// the broadcast states that operator keeps (Flink's `BroadcastStream`): made by
/// [`DataStream::broadcast_with`], used by [`DataStream::connect_broadcast`] and
/// [`KeyedStream::connect_broadcast`].
pub struct BroadcastStream<B> {
    stream: DataStream<B>,
    states: BroadcastStates,
}

impl<B> Clone for BroadcastStream<B> {
    fn clone(&self) -> Self {
        BroadcastStream {
            stream: self.stream.clone(),
            states: self.states.clone(),
        }
    }
}

impl<B: Data> BroadcastStream<B> {
    pub(crate) fn new<K: StateKey, V: BroadcastValue>(
        stream: DataStream<B>,
        descriptor: &MapStateDescriptor<K, V>,
    ) -> Self {
        BroadcastStream {
            stream: stream.broadcast(),
            states: BroadcastStates::declaring(descriptor),
        }
    }

    /// Declares one more broadcast state (Flink's `broadcast(descriptor1, descriptor2, ...)`).
    pub fn with_state<K: StateKey, V: BroadcastValue>(
        self,
        descriptor: &MapStateDescriptor<K, V>,
    ) -> Self {
        BroadcastStream {
            stream: self.stream,
            states: self.states.and(descriptor),
        }
    }
}

/// A stream connected with a [`BroadcastStream`] (Flink's `BroadcastConnectedStream`).
pub struct BroadcastConnectedStream<A, B> {
    first: DataStream<A>,
    broadcast: BroadcastStream<B>,
}

impl<A: Data, B: Data> BroadcastConnectedStream<A, B> {
    /// Runs a [`BroadcastProcessFunction`], named "Broadcast Process".
    pub fn process<P: BroadcastProcessFunction<A, B>>(&self, func: P) -> ProcessedStream<P::Out> {
        let op = BroadcastProcessOperator::new(func, self.broadcast.states.clone());
        let raw = self
            .first
            .add_two_input(&self.broadcast.stream, "Broadcast Process", op);
        ProcessedStream::new(raw, "Broadcast Process")
    }
}

/// A keyed stream connected with a [`BroadcastStream`].
pub struct KeyedBroadcastConnectedStream<A, B, K, F> {
    first: KeyedStream<A, K, F>,
    broadcast: BroadcastStream<B>,
}

impl<A, B, K, F> KeyedBroadcastConnectedStream<A, B, K, F>
where
    A: Data,
    B: Data,
    K: StateKey,
    F: Fn(&A) -> K + Clone + Send + 'static,
{
    /// Runs a [`KeyedBroadcastProcessFunction`], named "Keyed Broadcast Process".
    pub fn process<P: KeyedBroadcastProcessFunction<K, A, B>>(
        &self,
        func: P,
    ) -> ProcessedStream<P::Out> {
        let refused = crate::state::StateTtlConfig::refusal(func.state_ttl().as_ref());
        let op = KeyedBroadcastProcessOperator::new(
            func,
            self.first.key_fn().clone(),
            self.broadcast.states.clone(),
        );
        let raw = self.first.stream().add_two_input(
            &self.broadcast.stream,
            "Keyed Broadcast Process",
            op,
        );
        if let Some(message) = refused {
            raw.refuse(message);
        }
        ProcessedStream::new(raw, "Keyed Broadcast Process")
    }
}

impl<A: Data> DataStream<A> {
    /// Broadcasts this stream to every subtask of the operator it will be connected to, which
    /// keeps the broadcast state `descriptor` names (more with
    /// [`BroadcastStream::with_state`]). See
    /// [`BroadcastProcessFunction`] for an example.
    pub fn broadcast_with<K: StateKey, V: BroadcastValue>(
        &self,
        descriptor: &MapStateDescriptor<K, V>,
    ) -> BroadcastStream<A> {
        BroadcastStream::new(self.clone(), descriptor)
    }

    /// Connects this stream with a broadcast stream: see [`BroadcastProcessFunction`].
    pub fn connect_broadcast<B: Data>(
        &self,
        broadcast: &BroadcastStream<B>,
    ) -> BroadcastConnectedStream<A, B> {
        BroadcastConnectedStream {
            first: self.clone(),
            broadcast: broadcast.clone(),
        }
    }
}

impl<A, K, F> KeyedStream<A, K, F>
where
    A: Data,
    F: Fn(&A) -> K + Clone + Send + 'static,
{
    /// Connects this keyed stream with a broadcast stream: see
    /// [`KeyedBroadcastProcessFunction`].
    pub fn connect_broadcast<B: Data>(
        &self,
        broadcast: &BroadcastStream<B>,
    ) -> KeyedBroadcastConnectedStream<A, B, K, F> {
        KeyedBroadcastConnectedStream {
            first: self.clone(),
            broadcast: broadcast.clone(),
        }
    }
}
