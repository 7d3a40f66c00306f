//! Two-input operators in running jobs: the watermark is the minimum of both inputs, a keyed
//! co-process job is exactly once across an injected failure (barriers align across both
//! inputs), and broadcast records reach every subtask.

use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::prelude::*;
use sluice_runtime::process::{
    BroadcastContext, BroadcastProcessFunction, Context, KeyedCoProcessFunction,
    MapStateDescriptor, ReadOnlyBroadcastContext,
};
use sluice_runtime::testing::FailureInjector;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the two-input operator saw, in order.
#[derive(Clone, Debug, PartialEq)]
enum Seen {
    Left(i64),
    Right(i64),
    Watermark(i64),
}

/// Records every record's event time and every watermark it is given.
#[derive(Clone)]
struct Recorder(Arc<Mutex<Vec<Seen>>>);

impl Operator<Either<i64, i64>> for Recorder {
    type Out = i64;
    fn process_batch(
        &mut self,
        batch: Vec<Either<i64, i64>>,
        _out: &mut Collector<i64>,
    ) -> Result<(), UserError> {
        let mut seen = self.0.lock().map_err(|e| e.to_string())?;
        for r in batch {
            seen.push(match r {
                Either::Left(t) => Seen::Left(t),
                Either::Right(t) => Seen::Right(t),
            });
        }
        Ok(())
    }
    fn process_watermark(
        &mut self,
        watermark: Watermark,
        out: &mut Collector<i64>,
    ) -> Result<(), UserError> {
        let mut seen = self.0.lock().map_err(|e| e.to_string())?;
        seen.push(Seen::Watermark(watermark.timestamp()));
        out.emit_watermark(watermark);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watermark_of_a_two_input_operator_is_the_minimum_of_both_inputs() {
    let env = StreamEnvironment::new();
    env.set_parallelism(1).set_batch_size(1);
    let ts = |t: &i64| *t;
    // The first input runs far ahead of the second in event time.
    let fast = env
        .from_iter((0..200i64).map(|i| 1_000_000 + i * 1_000))
        .assign_timestamps_and_watermarks(WatermarkStrategy::for_monotonous_timestamps(ts));
    let slow = env
        .from_iter(0..200i64)
        .assign_timestamps_and_watermarks(WatermarkStrategy::for_monotonous_timestamps(ts));
    let seen = Arc::new(Mutex::new(Vec::new()));
    fast.connect(&slow)
        .transform("Recorder", Recorder(seen.clone()))
        .discard();
    env.execute("min watermark").await.unwrap();

    let seen = seen.lock().unwrap().clone();
    let (mut left, mut right) = (Vec::new(), Vec::new());
    let mut last = i64::MIN;
    let mut watermarks = 0;
    for s in &seen {
        match *s {
            Seen::Left(t) => left.push(t),
            Seen::Right(t) => right.push(t),
            Seen::Watermark(w) => {
                watermarks += 1;
                assert!(w > last, "watermarks only rise: {w} after {last}");
                last = w;
                // Until an input has delivered all its records, the watermark may not pass the
                // newest event time that input delivered.
                if w != i64::MAX {
                    if left.len() < 200 {
                        assert!(
                            left.last().is_some_and(|&l| w <= l),
                            "{w} passed the first input"
                        );
                    }
                    if right.len() < 200 {
                        assert!(
                            right.last().is_some_and(|&r| w <= r),
                            "{w} passed the second input"
                        );
                    }
                }
            }
        }
    }
    assert_eq!((left.len(), right.len()), (200, 200));
    assert!(watermarks > 10, "watermarks were forwarded: {watermarks}");
    assert_eq!(last, i64::MAX, "the end of both inputs ends event time");
}

/// Per key: records of each input counted in shared state; emits (key, from first, from second).
#[derive(Clone)]
struct CountBoth;

impl KeyedCoProcessFunction<u64, u64, u64> for CountBoth {
    type Out = (u64, u64, u64);
    type State = (u64, u64);
    fn process_element1(
        &mut self,
        k: u64,
        ctx: &mut Context<'_, u64, (u64, u64), Self::Out>,
    ) -> Result<(), UserError> {
        ctx.state().0 += 1;
        let (a, b) = *ctx.state();
        ctx.collect((k, a, b));
        Ok(())
    }
    fn process_element2(
        &mut self,
        k: u64,
        ctx: &mut Context<'_, u64, (u64, u64), Self::Out>,
    ) -> Result<(), UserError> {
        ctx.state().1 += 1;
        let (a, b) = *ctx.state();
        ctx.collect((k, a, b));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_co_process_job_is_exactly_once_across_an_injected_failure() {
    let (n, keys) = (60_000u64, 31u64);
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(64);
    env.enable_checkpointing(Duration::from_millis(5));
    let storage = tempfile::tempdir().unwrap();
    env.set_checkpoint_storage(storage.path());
    env.set_restart_strategy(RestartStrategy::fixed_delay(3, Duration::ZERO).unwrap());
    let fail = FailureInjector::at_record(1, n / 4);
    let first = env
        .from_generator(
            Generator::new(move |i| i % keys)
                .take(n)
                .rate_limit(400_000.0),
        )
        .transform("Injector", fail.clone())
        .key_by(|k: &u64| *k);
    let second = env
        .from_generator(
            Generator::new(move |i| (i * 7) % keys)
                .take(n / 2)
                .rate_limit(200_000.0),
        )
        .key_by(|k: &u64| *k);
    let out = first.connect(&second).process(CountBoth).collect();
    let result = env.execute("co-process failover").await.unwrap();
    assert_eq!(fail.injected(), 1);
    assert!(result.restarts >= 1);
    assert!(result.completed_checkpoints >= 1);

    // The last update per key holds its totals: nothing counted twice, nothing lost.
    let mut got: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for (k, a, b) in out.take() {
        let e = got.entry(k).or_default();
        *e = (e.0.max(a), e.1.max(b));
    }
    let mut want: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
    for i in 0..n {
        want.entry(i % keys).or_default().0 += 1;
    }
    for i in 0..n / 2 {
        want.entry((i * 7) % keys).or_default().1 += 1;
    }
    assert_eq!(got, want);
}

/// Emits (subtask, rule) for each rule on every subtask, and the first input's words that a
/// rule names.
#[derive(Clone)]
struct Rules {
    rules: MapStateDescriptor<String, ()>,
    subtask: usize,
}

impl BroadcastProcessFunction<String, String> for Rules {
    type Out = (usize, String);
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.subtask = ctx.subtask_index();
        Ok(())
    }
    fn process_element(
        &mut self,
        word: String,
        ctx: &mut ReadOnlyBroadcastContext<'_, Self::Out>,
    ) -> Result<(), UserError> {
        if ctx.broadcast_state(&self.rules)?.contains_key(&word) {
            ctx.collect((usize::MAX, word));
        }
        Ok(())
    }
    fn process_broadcast_element(
        &mut self,
        rule: String,
        ctx: &mut BroadcastContext<'_, Self::Out>,
    ) -> Result<(), UserError> {
        ctx.broadcast_state(&self.rules)?.put(rule.clone(), ());
        ctx.collect((self.subtask, rule));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_records_reach_every_subtask_of_the_connected_operator() {
    let env = StreamEnvironment::new();
    env.set_parallelism(3);
    let rules = MapStateDescriptor::<String, ()>::new("rules");
    let broadcast = env
        .from_iter(["a", "b"].map(String::from))
        .parallelism(1)
        .broadcast_with(&rules);
    let out = env
        .from_iter(Vec::<String>::new())
        .connect_broadcast(&broadcast)
        .process(Rules { rules, subtask: 0 })
        .collect();
    env.execute("broadcast").await.unwrap();
    let mut got = out.take();
    got.sort();
    let mut want = Vec::new();
    for s in 0..3 {
        for r in ["a", "b"] {
            want.push((s, r.to_string()));
        }
    }
    assert_eq!(got, want);
}
