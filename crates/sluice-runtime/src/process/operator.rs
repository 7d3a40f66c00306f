//! [`KeyedProcessOperator`]: runs a [`KeyedProcessFunction`] after `key_by`, with its per-key
//! state and timers.

use super::co::timestamp_at;
use super::function::{Context, KeyedProcessFunction, StateKey};
use super::output::Tagged;
use super::timed::TimedOperator;
use crate::operator::{Collector, Operator, OperatorContext};
use crate::state::{OperatorState, ValueState};
use crate::timer::{InternalTimers, ProcessingClock, TimeDomain, Timer};
use sluice_core::{CheckpointId, Data, UserError, Watermark};
use std::marker::PhantomData;
use std::task::Poll;

/// The operator behind `KeyedStream::process_keyed`. For each record it extracts the key and
/// calls the function; on a watermark it first fires the event-time timers the watermark
/// passed (in timestamp order, each with its own key current), then forwards the watermark; its
/// `poll_pending` fires processing-time timers once tokio's clock has passed them. Per-key state and
/// timers are checkpointed as keyed state, by key group.
pub struct KeyedProcessOperator<In, K, KF, P: KeyedProcessFunction<K, In>> {
    func: P,
    key_fn: KF,
    state: ValueState<K, P::State>,
    timers: InternalTimers<K, ()>,
    max_parallelism: usize,
    _in: PhantomData<fn(In)>,
}

impl<In, K, KF, P> Clone for KeyedProcessOperator<In, K, KF, P>
where
    K: StateKey,
    KF: Clone,
    P: KeyedProcessFunction<K, In>,
{
    /// A fresh instance: the same function, no state, no timers.
    fn clone(&self) -> Self {
        Self::new(self.func.clone(), self.key_fn.clone())
    }
}

impl<In, K, KF, P> KeyedProcessOperator<In, K, KF, P>
where
    K: StateKey,
    P: KeyedProcessFunction<K, In>,
{
    /// Runs `func` on records keyed by `key_fn` (the same function as the `key_by` before it).
    pub fn new(func: P, key_fn: KF) -> Self {
        let state = match func.state_ttl() {
            Some(ttl) => ValueState::with_ttl("_process/state", ttl),
            None => ValueState::new("_process/state"),
        };
        KeyedProcessOperator {
            func,
            key_fn,
            state,
            timers: InternalTimers::new("process"),
            max_parallelism: crate::DEFAULT_MAX_PARALLELISM,
            _in: PhantomData,
        }
    }
}

impl<In, K, KF, P> TimedOperator<K, (), Tagged<P::Out>> for KeyedProcessOperator<In, K, KF, P>
where
    K: StateKey,
    P: KeyedProcessFunction<K, In>,
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
        let mut ctx = Context {
            key: &timer.key,
            timestamp,
            domain: Some(timer.domain),
            state: &mut self.state,
            timers: &mut self.timers,
            out,
        };
        self.func.on_timer(timer.timestamp, &mut ctx)?;
        store_failure(&mut self.state)
    }
}

impl<In, K, KF, P> KeyedProcessOperator<In, K, KF, P>
where
    In: Data,
    K: StateKey,
    KF: Fn(&In) -> K + Clone + Send + 'static,
    P: KeyedProcessFunction<K, In>,
{
    /// Calls the function for each record of a batch, after reading the batch's keys from the
    /// store (those not cached, in one go).
    fn process_records(
        &mut self,
        batch: Vec<In>,
        out: &mut Collector<Tagged<P::Out>>,
    ) -> Result<(), UserError> {
        let timestamps = out.take_input_timestamps();
        let keys: Vec<K> = batch.iter().map(|r| (self.key_fn)(r)).collect();
        self.state.prefetch(&keys);
        store_failure(&mut self.state)?;
        for (i, (record, key)) in batch.into_iter().zip(keys).enumerate() {
            let timestamp = timestamp_at(timestamps.as_deref(), i);
            let mut ctx = Context {
                key: &key,
                timestamp,
                domain: None,
                state: &mut self.state,
                timers: &mut self.timers,
                out,
            };
            self.func.process_element(record, &mut ctx)?;
            store_failure(&mut self.state)?;
            self.timers.check()?;
        }
        Ok(())
    }
}

impl<In, K, KF, P> Operator<In> for KeyedProcessOperator<In, K, KF, P>
where
    In: Data,
    K: StateKey,
    KF: Fn(&In) -> K + Clone + Send + 'static,
    P: KeyedProcessFunction<K, In>,
{
    type Out = Tagged<P::Out>;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.max_parallelism = ctx.max_parallelism();
        self.timers.set_clock(ProcessingClock::new());
        ctx.attach_keyed_state(&mut self.state)?;
        ctx.attach_timers(&mut self.timers)?;
        self.func.open(ctx)
    }

    fn process_batch(
        &mut self,
        batch: Vec<In>,
        out: &mut Collector<Self::Out>,
    ) -> Result<(), UserError> {
        // A state with a time-to-live reads processing time once for the batch.
        if self.state.ttl().is_some() {
            self.state
                .pin_time(Some(self.timers.current_processing_time()));
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
        Ok(state)
    }

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.state.restore_from(&state)?;
        self.timers.restore_from(&state)?;
        Ok(())
    }
}

/// The store failure `state` kept while user code ran, as the operator's error.
pub(crate) fn store_failure<K, V>(state: &mut ValueState<K, V>) -> Result<(), UserError>
where
    K: StateKey,
    V: serde::Serialize + serde::de::DeserializeOwned,
{
    match state.take_error() {
        None => Ok(()),
        Some(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::OperatorTestHarness;

    /// Sums per key.
    #[derive(Clone)]
    struct Sum;

    impl KeyedProcessFunction<u32, u32> for Sum {
        type Out = u64;
        type State = u64;
        fn process_element(
            &mut self,
            _: u32,
            ctx: &mut Context<'_, u32, u64, u64>,
        ) -> Result<(), UserError> {
            *ctx.state() += 1;
            let n = *ctx.state();
            ctx.collect(n);
            Ok(())
        }
    }

    #[test]
    fn a_batch_reads_its_missing_keys_from_a_store_in_one_read() {
        let backend = std::sync::Arc::new(crate::state::CountingBackend::default());
        let ctx = crate::operator::OperatorContext::for_test("sum", 0, 1)
            .with_state_backend(backend.clone());
        let op = KeyedProcessOperator::new(Sum, |k: &u32| *k);
        let mut h = OperatorTestHarness::with_context(op, ctx);
        h.process_batch((0..64).collect()).unwrap();
        h.snapshot(1).unwrap();
        // Half the keys cached, half new; a key twice in the batch is read once.
        h.process_batch((32..96).chain([40, 90]).collect()).unwrap();
        assert_eq!(
            backend.reads(),
            (0, 1),
            "(single reads, reads of many keys)"
        );
        let out: Vec<u64> = h
            .records()
            .into_iter()
            .filter_map(Tagged::into_main)
            .collect();
        assert_eq!(out[64..].iter().filter(|n| **n == 2).count(), 32 + 1);
    }

    /// Sums per key, forgetting a key a minute after its last record.
    #[derive(Clone)]
    struct IdleSum;

    impl KeyedProcessFunction<u32, u32> for IdleSum {
        type Out = u64;
        type State = u64;
        fn state_ttl(&self) -> Option<crate::state::StateTtlConfig> {
            Some(crate::state::StateTtlConfig::new(
                std::time::Duration::from_secs(60),
            ))
        }
        fn process_element(
            &mut self,
            v: u32,
            ctx: &mut Context<'_, u32, u64, u64>,
        ) -> Result<(), UserError> {
            Sum.process_element(v, ctx)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_idle_for_its_time_to_live_starts_again_also_after_a_restore() {
        use std::time::Duration;
        fn counts<Op: Operator<u32, Out = Tagged<u64>>>(
            h: &OperatorTestHarness<u32, Op>,
        ) -> Vec<u64> {
            h.records()
                .into_iter()
                .filter_map(Tagged::into_main)
                .collect()
        }
        for stored in [false, true] {
            let ctx = crate::operator::OperatorContext::for_test("sum", 0, 1);
            let ctx = if stored {
                ctx.with_state_backend(
                    std::sync::Arc::new(crate::state::CountingBackend::default()),
                )
            } else {
                ctx
            };
            let mut h = OperatorTestHarness::with_context(
                KeyedProcessOperator::new(IdleSum, |k: &u32| *k),
                ctx,
            );
            h.process_batch(vec![1, 2, 1]).unwrap();
            tokio::time::advance(Duration::from_secs(40)).await;
            h.process_batch(vec![2]).unwrap();
            let snapshot = h.snapshot(1).unwrap();
            tokio::time::advance(Duration::from_secs(20)).await;
            h.process_batch(vec![1, 2]).unwrap();
            assert_eq!(
                counts(&h),
                vec![1, 1, 2, 2, 1, 3],
                "key 1 idle a minute: from 1 again"
            );

            let mut back =
                OperatorTestHarness::new(KeyedProcessOperator::new(IdleSum, |k: &u32| *k))
                    .restore(vec![snapshot])
                    .unwrap();
            back.process_batch(vec![2, 1]).unwrap();
            assert_eq!(
                counts(&back),
                vec![3, 1],
                "restored with its times of last write"
            );
        }
    }

    #[test]
    fn turning_the_time_to_live_on_over_a_checkpoint_without_it_fails_the_restore() {
        let mut h = OperatorTestHarness::new(KeyedProcessOperator::new(Sum, |k: &u32| *k));
        h.process_batch(vec![1, 2]).unwrap();
        let snapshot = h.snapshot(1).unwrap();
        let refused = OperatorTestHarness::new(KeyedProcessOperator::new(IdleSum, |k: &u32| *k))
            .restore(vec![snapshot.clone()]);
        let Err(e) = refused else {
            panic!("restored a state without a time-to-live into one with it")
        };
        assert!(
            e.to_string().contains(
                "state \"_process/state\" was checkpointed without a time-to-live and is declared with one"
            ),
            "{e}"
        );
        let back = OperatorTestHarness::new(KeyedProcessOperator::new(Sum, |k: &u32| *k))
            .restore(vec![snapshot]);
        assert!(back.is_ok(), "the same choice restores");
    }
}
