//! [`WindowedStream`]: a keyed stream cut into windows, before its window function is chosen.

use crate::api::keyed::KeyedStream;
use crate::api::processed::ProcessedStream;
use crate::process::{OutputTag, StateKey};
use crate::window::{
    Aggregate, AggregateFunction, AnyEvictor, AnyTrigger, Evicting, Evictor, Incremental,
    LateRecordsDropped, Process, ProcessWindowFunction, Reduce, TimeWindow, Trigger,
    TriggerWindowOperator, WindowAssigner, WindowContents, WindowOperator, WindowSpec,
};
use serde::{Serialize, de::DeserializeOwned};
use sluice_core::Data;
use std::marker::PhantomData;
use std::time::Duration;

/// A keyed stream with a window assigner (Flink's `WindowedStream`): set the allowed lateness
/// and where late records go, then compute each window with [`reduce`](Self::reduce),
/// [`aggregate`](Self::aggregate), [`aggregate_with`](Self::aggregate_with) or
/// [`process`](Self::process). Results carry the window's `max_timestamp` as their event time.
///
/// Clicks per user per minute of event time, late clicks to a side output:
///
/// ```
/// use sluice_runtime::prelude::*;
/// use sluice_runtime::process::OutputTag;
/// use sluice_runtime::window::{AggregateFunction, TumblingEventTimeWindows};
/// use std::time::Duration;
///
/// #[derive(Clone)]
/// struct Count;
/// impl AggregateFunction<(u32, i64)> for Count {
///     type Acc = u64;
///     type Out = u64;
///     fn create_accumulator(&self) -> u64 { 0 }
///     fn add(&self, _: (u32, i64), acc: &mut u64) { *acc += 1; }
///     fn get_result(&self, acc: &u64) -> u64 { *acc }
///     fn merge(&self, a: u64, b: u64) -> u64 { a + b }
/// }
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(1).set_batch_size(1); // a watermark after every click
/// // (user, event time): the last click is three minutes late.
/// let clicks = vec![(1u32, 1_000i64), (2, 2_000), (1, 61_000), (1, 185_000), (1, 3_000)];
/// let late = OutputTag::<(u32, i64)>::new("late clicks");
/// let counts = env
///     .from_iter(clicks)
///     .assign_timestamps_and_watermarks(WatermarkStrategy::for_monotonous_timestamps(|c: &(u32, i64)| c.1))
///     .key_by(|c| c.0)
///     .window(TumblingEventTimeWindows::of(Duration::from_secs(60)))
///     .side_output_late_data(&late)
///     .aggregate_with(Count, |user, window, n| (*user, window.start, n));
/// let late = counts.get_side_output(&late).collect();
/// let counts = counts.collect();
/// env.execute_blocking("clicks per minute").unwrap();
/// let mut counts = counts.take();
/// counts.sort();
/// assert_eq!(counts, vec![(1, 0, 1), (1, 60_000, 1), (1, 180_000, 1), (2, 0, 1)]);
/// assert_eq!(late.take(), vec![(1, 3_000)]);
/// ```
pub struct WindowedStream<T, K, F> {
    keyed: KeyedStream<T, K, F>,
    assigner: WindowAssigner,
    allowed_lateness: Duration,
    late_tag: Option<OutputTag<T>>,
    late_dropped: LateRecordsDropped,
    trigger: Option<AnyTrigger<T>>,
    evictor: Option<AnyEvictor<T>>,
}

impl<T, K, F> WindowedStream<T, K, F>
where
    T: Data,
    K: StateKey,
    F: Fn(&T) -> K + Clone + Send + 'static,
{
    pub(crate) fn new(keyed: KeyedStream<T, K, F>, assigner: WindowAssigner) -> Self {
        WindowedStream {
            keyed,
            assigner,
            allowed_lateness: Duration::ZERO,
            late_tag: None,
            late_dropped: LateRecordsDropped::default(),
            trigger: None,
            evictor: None,
        }
    }

    /// Replaces the assigner's default trigger (Flink's `WindowedStream.trigger`): `trigger`
    /// decides when each window fires and whether its contents are purged. A built-in trigger
    /// ([`CountTrigger`](crate::window::CountTrigger), [`PurgingTrigger`](crate::window::PurgingTrigger),
    /// ...) runs without a dynamic call per record; a session assigner needs a trigger that
    /// can merge, or the job is refused at submit.
    ///
    /// Sums per key every three records, within one-minute windows:
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_runtime::window::{CountTrigger, PurgingTrigger, TumblingEventTimeWindows};
    /// use std::time::Duration;
    ///
    /// let env = StreamEnvironment::new();
    /// env.set_parallelism(1);
    /// let sums = env
    ///     .from_iter((0..7i64).map(|t| (1u8, t * 1_000)))
    ///     .assign_timestamps_and_watermarks(WatermarkStrategy::for_monotonous_timestamps(|r: &(u8, i64)| r.1))
    ///     .key_by(|r| r.0)
    ///     .window(TumblingEventTimeWindows::of(Duration::from_secs(60)))
    ///     .trigger(PurgingTrigger::of(CountTrigger::of(3)))
    ///     .reduce(|a, b| (a.0, a.1 + b.1))
    ///     .map(|r| r.1)
    ///     .collect();
    /// env.execute_blocking("every three").unwrap();
    /// // 0+1000+2000, 3000+4000+5000; the seventh record never makes three.
    /// assert_eq!(sums.take(), vec![3_000, 12_000]);
    /// ```
    pub fn trigger<Tr: Trigger<T> + Clone>(mut self, trigger: Tr) -> Self {
        self.trigger = Some(AnyTrigger::from_trigger(trigger));
        self
    }

    /// Removes records from each window when it fires, before and after the window function
    /// (Flink's `WindowedStream.evictor`). The operator then keeps every record of a window
    /// (Flink's `EvictingWindowOperator`), also for `reduce` and `aggregate`, which run over
    /// the records left at each firing; what is left stays for the next firing.
    ///
    /// The sum of the last two records, every time a window of a key has three more:
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_runtime::window::{CountEvictor, CountTrigger, GlobalWindows};
    ///
    /// let env = StreamEnvironment::new();
    /// env.set_parallelism(1);
    /// let sums = env
    ///     .from_iter((1..=6u64).map(|n| (1u8, n)))
    ///     .key_by(|r| r.0)
    ///     .window(GlobalWindows::create())
    ///     .trigger(CountTrigger::of(3))
    ///     .evictor(CountEvictor::of(2))
    ///     .reduce(|a, b| (a.0, a.1 + b.1))
    ///     .map(|r| r.1)
    ///     .collect();
    /// env.execute_blocking("last two").unwrap();
    /// // At 3 records: 2 + 3. Then 2, 3, 4, 5, 6 are held and 5 + 6 is the sum.
    /// assert_eq!(sums.take(), vec![5, 11]);
    /// ```
    pub fn evictor<E: Evictor<T> + Clone>(mut self, evictor: E) -> Self {
        self.evictor = Some(AnyEvictor::from_evictor(evictor));
        self
    }

    /// Keeps each window's contents `lateness` past its end (event time): a record arriving
    /// in that time fires the window again with the record added (a late firing).
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.allowed_lateness = lateness;
        self
    }

    /// Sends records later than the allowed lateness to side output `tag` instead of dropping
    /// them.
    pub fn side_output_late_data(mut self, tag: &OutputTag<T>) -> Self {
        self.late_tag = Some(tag.clone());
        self
    }

    /// The count of late records dropped (when no late side output is set).
    pub fn late_records_dropped(&self) -> LateRecordsDropped {
        self.late_dropped.clone()
    }

    fn build<C>(self, name: &str, contents: C) -> ProcessedStream<C::Out>
    where
        C: WindowContents<K, T>,
    {
        let lateness = i64::try_from(self.allowed_lateness.as_millis()).unwrap_or(i64::MAX);
        let mut invalid = self.assigner.validate().err();
        let spec = WindowSpec {
            assigner: self.assigner,
            allowed_lateness: if self.assigner.is_event_time() {
                lateness
            } else {
                0
            },
            late_tag: self.late_tag,
            late_dropped: self.late_dropped,
        };
        let key_fn = self.keyed.key_fn().clone();
        let default_trigger = self
            .trigger
            .as_ref()
            .is_none_or(|t| t.is_default_for(&self.assigner));
        let raw = match (self.evictor, self.trigger) {
            // The fast path: the default trigger, built into the operator.
            (None, _) if default_trigger && !self.assigner.is_global() => self
                .keyed
                .transform(name, WindowOperator::new(spec, contents, key_fn)),
            (evictor, trigger) => {
                let trigger = trigger.unwrap_or_else(|| AnyTrigger::default_for(&self.assigner));
                invalid = invalid.or_else(|| trigger.validate().err());
                if self.assigner.is_merging() && !Trigger::<T>::can_merge(&trigger) {
                    invalid = invalid.or_else(|| {
                        Some(format!(
                            "a merging window assigner (sessions) needs a trigger that can merge; {trigger:?} cannot"
                        ))
                    });
                }
                match evictor {
                    Some(evictor) => self.keyed.transform(
                        name,
                        TriggerWindowOperator::new(
                            spec,
                            trigger,
                            Evicting { contents, evictor },
                            key_fn,
                        ),
                    ),
                    None => self.keyed.transform(
                        name,
                        TriggerWindowOperator::new(spec, trigger, Incremental(contents), key_fn),
                    ),
                }
            }
        };
        if let Some(message) = invalid {
            raw.refuse(message);
        }
        ProcessedStream::new(raw, name)
    }

    /// Combines each window's records pairwise with `f`; emits the combined record.
    pub fn reduce<G>(self, f: G) -> ProcessedStream<T>
    where
        T: Serialize + DeserializeOwned,
        G: Fn(T, T) -> T + Clone + Send + 'static,
    {
        self.build("Window Reduce", Reduce(f))
    }

    /// Aggregates each window incrementally with `agg` (one accumulator per window, never the
    /// records); emits the result.
    pub fn aggregate<A>(self, agg: A) -> ProcessedStream<A::Out>
    where
        A: AggregateFunction<T>,
    {
        fn result<K, O>(_: &K, _: &TimeWindow, out: O) -> O {
            out
        }
        self.build(
            "Window Aggregate",
            Aggregate {
                agg,
                with_window: result::<K, A::Out>,
                _r: PhantomData,
            },
        )
    }

    /// Aggregates each window incrementally with `agg`, and emits `f(key, window, result)`
    /// (Flink's `aggregate(aggregateFunction, windowFunction)`).
    pub fn aggregate_with<A, R, G>(self, agg: A, f: G) -> ProcessedStream<R>
    where
        A: AggregateFunction<T>,
        R: Data,
        G: FnMut(&K, &TimeWindow, A::Out) -> R + Clone + Send + 'static,
    {
        self.build(
            "Window Aggregate",
            Aggregate {
                agg,
                with_window: f,
                _r: PhantomData,
            },
        )
    }

    /// Keeps each window's records and hands them all to `func` when the window fires.
    pub fn process<P>(self, func: P) -> ProcessedStream<P::Out>
    where
        T: Serialize + DeserializeOwned,
        P: ProcessWindowFunction<K, T>,
    {
        self.build("Window Process", Process(func))
    }
}
