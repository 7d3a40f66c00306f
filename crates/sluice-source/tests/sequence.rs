//! `NumberSequenceSource` and `DataGeneratorSource` end to end: every number exactly once
//! through random failures (splits resume at their next number), an unbounded generator
//! stopped with a savepoint and resumed at another parallelism, and watermarks that reach the
//! maximum at the end, and records that reach an event-time window with the times the
//! source's watermark strategy gave them.

use sluice_connectors::file::{JsonLinesSink, read_committed};
use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::prelude::*;
use sluice_runtime::testing::{FailureInjector, SplitMix64};
use sluice_source::{DataGeneratorSource, FromSource, NumberSequenceSource};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Flink refuses `from > to` in `NumberSequenceSource`'s constructor; sluice refuses it when the
/// job is submitted, naming both numbers and the source, instead of running an empty source.
#[tokio::test]
async fn a_descending_number_sequence_is_refused_at_submit_time() {
    let env = StreamEnvironment::new();
    env.from_source(NumberSequenceSource::new(10, 5), None, "numbers")
        .discard();
    let err = env
        .submit("descending")
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(err.contains("source 'numbers'"), "{err}");
    assert!(
        err.contains("the sequence from 10 to 5 is descending"),
        "{err}"
    );
    // A one-number range is fine.
    let env = StreamEnvironment::new();
    let out = env
        .from_source(NumberSequenceSource::new(7, 7), None, "one")
        .collect();
    env.execute("one").await.unwrap();
    assert_eq!(out.take(), vec![7]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_number_sequence_is_exactly_once_under_random_failures() {
    let mut restarts = 0;
    for seed in 0..4 {
        let mut rng = SplitMix64(seed);
        let p = rng.range(1, 3) as usize;
        let n = rng.range(2_000, 8_000);
        let out = tempfile::tempdir().unwrap();
        let checkpoints = tempfile::tempdir().unwrap();
        let env = StreamEnvironment::new();
        env.set_parallelism(p)
            .set_batch_size(rng.range(8, 64) as usize);
        env.enable_checkpointing(Duration::from_millis(2));
        env.set_checkpoint_storage(checkpoints.path());
        env.set_restart_strategy(RestartStrategy::fixed_delay(20, Duration::ZERO).unwrap());
        env.from_source(NumberSequenceSource::new(1, n), None, "numbers")
            .process(FailureInjector::seeded(0.05, seed).times(2))
            .sink_to_exactly_once(JsonLinesSink::new(out.path(), "out"));
        let result = env.execute("sequence").await.unwrap();
        restarts += result.restarts;
        let mut got: Vec<u64> = read_committed(out.path()).unwrap();
        got.sort_unstable();
        assert_eq!(
            got,
            (1..=n).collect::<Vec<_>>(),
            "seed {seed}, {} restarts",
            result.restarts
        );
    }
    assert!(restarts > 0, "no trial failed: the test tested nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unbounded_generator_stopped_at_2_resumes_at_3_where_it_stopped() {
    let checkpoints = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let enough = Arc::new(tokio::sync::Notify::new());

    let run = |p: usize| {
        let env = StreamEnvironment::new();
        env.set_parallelism(p).set_batch_size(16);
        env.enable_checkpointing(Duration::from_millis(5));
        env.set_checkpoint_storage(checkpoints.path());
        let (s, e) = (seen.clone(), enough.clone());
        env.from_source(
            DataGeneratorSource::from_generator(Generator::new(|i| i).rate_limit(20_000.0)),
            None,
            "generated",
        )
        .map(move |i: u64| {
            let mut v = s.lock().unwrap();
            v.push(i);
            if v.len() == 2_000 {
                e.notify_one();
            }
            i
        })
        .discard();
        env
    };

    let job = run(2).submit("generator: run 1").unwrap();
    enough.notified().await;
    job.stop_with_savepoint().await.unwrap();
    job.await.unwrap();
    let first: Vec<u64> = std::mem::take(&mut *seen.lock().unwrap());

    let env = run(3);
    env.restore_from(checkpoints.path());
    let job = env.submit("generator: run 2").unwrap();
    enough.notified().await;
    job.cancel();
    let _ = job.await;
    let second = seen.lock().unwrap().clone();

    // The generator's two splits are the lower and the upper half of the indices. In the
    // second run each resumes where the savepoint left it: after its start (not from scratch)
    // and no later than just after the last index the first run read (no gap).
    const HALF: u64 = 1 << 63;
    for (name, in_split) in [
        ("lower", (|i: &u64| *i < HALF) as fn(&u64) -> bool),
        ("upper", |i: &u64| *i >= HALF),
    ] {
        let start = if name == "lower" { 0 } else { HALF };
        let first_max = first.iter().copied().filter(in_split).max().unwrap();
        let second_min = second.iter().copied().filter(in_split).min().unwrap();
        assert!(
            second_min > start && second_min <= first_max + 1,
            "{name} split: run 1 read up to {first_max}, run 2 resumed at {second_min}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watermarks_follow_the_generated_timestamps_and_end_at_the_maximum() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(10);
    let watermarks = Arc::new(Mutex::new(Vec::new()));
    let strategy = WatermarkStrategy::for_monotonous_timestamps(|t: &i64| *t);
    env.from_source(
        DataGeneratorSource::from_generator(Generator::new(|i| i as i64 * 10).take(200)),
        Some(strategy),
        "timed",
    )
    .transform("Watch", Watch(watermarks.clone(), 0))
    .parallelism(2)
    .discard();
    env.execute("watermarks").await.unwrap();
    let seen = watermarks.lock().unwrap().clone();
    for subtask in 0..2 {
        let mine: Vec<i64> = seen
            .iter()
            .filter(|(s, _)| *s == subtask)
            .map(|(_, w)| *w)
            .collect();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "watermarks only grow: {mine:?}"
        );
        assert_eq!(mine.last(), Some(&i64::MAX), "subtask {subtask}: {mine:?}");
    }
    // Timestamps are 10 × index: a watermark trails the highest by 1 ms.
    assert!(seen.iter().any(|(_, w)| *w > 0 && w % 10 == 9), "{seen:?}");
}

/// Records the watermarks each subtask receives.
#[derive(Clone)]
struct Watch(Arc<Mutex<Vec<(usize, i64)>>>, usize);

impl Operator<i64> for Watch {
    type Out = i64;
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.1 = ctx.subtask_index();
        Ok(())
    }
    fn process_batch(
        &mut self,
        batch: Vec<i64>,
        out: &mut Collector<i64>,
    ) -> Result<(), UserError> {
        out.emit_batch(batch);
        Ok(())
    }
    fn process_watermark(
        &mut self,
        w: Watermark,
        out: &mut Collector<i64>,
    ) -> Result<(), UserError> {
        self.0.lock().unwrap().push((self.1, w.timestamp()));
        out.emit_watermark(w);
        Ok(())
    }
}

/// Counts the elements of a window.
#[derive(Clone)]
struct Count;

impl sluice_runtime::window::AggregateFunction<u64> for Count {
    type Acc = u64;
    type Out = u64;
    fn create_accumulator(&self) -> u64 {
        0
    }
    fn add(&self, _: u64, acc: &mut u64) {
        *acc += 1;
    }
    fn get_result(&self, acc: &u64) -> u64 {
        *acc
    }
    fn merge(&self, a: u64, b: u64) -> u64 {
        a + b
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_carry_the_event_time_the_source_assigned_into_a_window() {
    use sluice_runtime::window::TumblingEventTimeWindows;
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(7);
    // Record i happens at i seconds; 10-second windows hold 10 records each, keyed by parity.
    let strategy = WatermarkStrategy::for_monotonous_timestamps(|t: &u64| *t as i64 * 1000);
    let counts = env
        .from_source(NumberSequenceSource::new(0, 99), Some(strategy), "seconds")
        .key_by(|t| t % 2)
        .window(TumblingEventTimeWindows::of(Duration::from_secs(10)))
        .aggregate_with(Count, |parity, window, n| (*parity, window.start, n))
        .collect();
    env.execute("source into a window").await.unwrap();
    let mut counts = counts.take();
    counts.sort();
    let want: Vec<(u64, i64, u64)> = (0..2)
        .flat_map(|parity| (0..10).map(move |w| (parity, w * 10_000, 5)))
        .collect();
    assert_eq!(counts, want);
}
