//! Windows and timers with their state in RocksDB and incremental checkpoints: tumbling and
//! session windows (also with an evictor, which runs the triggered window operator) and a keyed
//! process function with event-time timers run at parallelism 2
//! with failures injected, are stopped with a savepoint, and finish at parallelism 3. Each
//! window's count and each timer is committed exactly once: the window contents and the timers,
//! which live in RocksDB and reach checkpoints only as the stores' files, came back from those
//! files after every failover and followed their key groups when the job was rescaled.

use sluice_connectors::file::{JsonLinesSink, read_committed};
use sluice_rocksdb::RocksDbStateBackend;
use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::prelude::*;
use sluice_runtime::process::{Context, KeyedProcessFunction};
use sluice_runtime::testing::FailureInjector;
use sluice_runtime::window::{CountEvictor, EventTimeSessionWindows, TumblingEventTimeWindows};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

const KEYS: u64 = 50;
/// Records per burst of event time; bursts are a second apart, so each key has one session
/// per burst.
const BURST: u64 = 2_000;

/// A record: (key, its burst, its event time).
type Rec = (u64, u64, i64);

fn record(i: u64) -> Rec {
    let burst = i / BURST;
    (i % KEYS, burst, (i + burst * 1_000) as i64)
}

/// Registers an event-time timer at the end of each record's 100 ms and emits (key, timer) when
/// it fires.
#[derive(Clone)]
struct TimerPerTenth;

impl KeyedProcessFunction<u64, Rec> for TimerPerTenth {
    type Out = (u64, i64);
    type State = ();

    fn process_element(
        &mut self,
        r: Rec,
        ctx: &mut Context<'_, u64, (), (u64, i64)>,
    ) -> Result<(), UserError> {
        ctx.timer_service()
            .register_event_time_timer(r.2 / 100 * 100 + 99);
        Ok(())
    }

    fn on_timer(
        &mut self,
        timestamp: i64,
        ctx: &mut Context<'_, u64, (), (u64, i64)>,
    ) -> Result<(), UserError> {
        let key = *ctx.current_key();
        ctx.collect((key, timestamp));
        Ok(())
    }
}

#[derive(Clone)]
struct Seen {
    max: Arc<AtomicU64>,
    mark: Arc<AtomicU64>,
    reached: Arc<Notify>,
}

fn build(env: &StreamEnvironment, n: Option<u64>, seen: Seen, out: &Path, fail: FailureInjector) {
    let source = Generator::new(record).rate_limit(100_000.0);
    let source = match n {
        Some(n) => env.from_generator(source.take(n)),
        None => env.from_generator(source),
    };
    let timed = source
        .parallelism(1)
        .map(move |r: Rec| {
            let i = r.2 as u64 - r.1 * 1_000;
            seen.max.fetch_max(i, Ordering::SeqCst);
            if i == seen.mark.load(Ordering::SeqCst) {
                seen.reached.notify_one();
            }
            r
        })
        .parallelism(1)
        .assign_timestamps_and_watermarks(WatermarkStrategy::for_monotonous_timestamps(
            |r: &Rec| r.2,
        ))
        .process(fail);
    // (key, burst or window, count)
    let counted = |r: Rec| (r.0, r.2 / 100, 1u64);
    timed
        .map(counted)
        .key_by(|r: &(u64, i64, u64)| r.0)
        .window(TumblingEventTimeWindows::of(Duration::from_millis(100)))
        .reduce(|a, b| (a.0, a.1, a.2 + b.2))
        .sink_to_exactly_once(JsonLinesSink::new(out.join("tumbling"), "w"));
    timed
        .map(|r: Rec| (r.0, r.1 as i64, 1u64))
        .key_by(|r: &(u64, i64, u64)| r.0)
        .window(EventTimeSessionWindows::with_gap(Duration::from_millis(
            300,
        )))
        .reduce(|a, b| (a.0, a.1, a.2 + b.2))
        .sink_to_exactly_once(JsonLinesSink::new(out.join("sessions"), "s"));
    // The same windows with an evictor that keeps every record: the triggered (evicting)
    // operator, its window contents, sessions and cleanup timers in RocksDB.
    let keep_all = || CountEvictor::of(usize::MAX);
    timed
        .map(counted)
        .key_by(|r: &(u64, i64, u64)| r.0)
        .window(TumblingEventTimeWindows::of(Duration::from_millis(100)))
        .evictor(keep_all())
        .reduce(|a, b| (a.0, a.1, a.2 + b.2))
        .sink_to_exactly_once(JsonLinesSink::new(out.join("evicting-tumbling"), "w"));
    timed
        .map(|r: Rec| (r.0, r.1 as i64, 1u64))
        .key_by(|r: &(u64, i64, u64)| r.0)
        .window(EventTimeSessionWindows::with_gap(Duration::from_millis(
            300,
        )))
        .evictor(keep_all())
        .reduce(|a, b| (a.0, a.1, a.2 + b.2))
        .sink_to_exactly_once(JsonLinesSink::new(out.join("evicting-sessions"), "s"));
    timed
        .key_by(|r: &Rec| r.0)
        .process_keyed(TimerPerTenth)
        .sink_to_exactly_once(JsonLinesSink::new(out.join("timers"), "t"));
}

fn env_at(p: usize, checkpoints: &Path, state: &Path, restore: bool) -> StreamEnvironment {
    let env = StreamEnvironment::new();
    env.set_parallelism(p).set_batch_size(64);
    env.enable_checkpointing(Duration::from_millis(20));
    env.set_checkpoint_storage(checkpoints);
    env.set_restart_strategy(RestartStrategy::fixed_delay(20, Duration::ZERO).unwrap());
    // A value cache of 16 entries: windows are written to RocksDB and read back all the time.
    env.set_state_backend(
        RocksDbStateBackend::new(state)
            .memory_budget(8 << 20)
            .value_cache_bytes(0)
            .incremental(true),
    );
    if restore {
        env.restore_from(checkpoints);
    }
    env
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_and_timers_in_rocksdb_are_exactly_once_across_failures_and_a_rescale() {
    let checkpoints = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let seen = Seen {
        max: Arc::new(AtomicU64::new(0)),
        mark: Arc::new(AtomicU64::new(u64::MAX)),
        reached: Arc::new(Notify::new()),
    };

    // Parallelism 2, two failures, then a savepoint.
    let env = env_at(2, checkpoints.path(), state.path(), false);
    seen.mark.store(9_000, Ordering::SeqCst);
    let fail = FailureInjector::seeded(0.002, 7).times(2);
    build(&env, None, seen.clone(), out.path(), fail.clone());
    let job = env.submit("windows").unwrap();
    seen.reached.notified().await;
    let savepoint = job.stop_with_savepoint().await.unwrap();
    let result = job.await.unwrap();
    assert_eq!(result.stopped_with_savepoint, Some(savepoint));

    // Parallelism 3 to the end of a bounded input past every restored position.
    let n = (seen.max.load(Ordering::SeqCst) / BURST + 3) * BURST;
    let env = env_at(3, checkpoints.path(), state.path(), true);
    build(
        &env,
        Some(n),
        seen.clone(),
        out.path(),
        FailureInjector::seeded(0.0, 1),
    );
    env.execute("windows: rescaled").await.unwrap();

    let records: Vec<Rec> = (0..n).map(record).collect();
    let mut tumbling = BTreeMap::new();
    let mut sessions = BTreeMap::new();
    let mut timers = BTreeMap::new();
    for r in &records {
        *tumbling.entry((r.0, r.2 / 100)).or_insert(0u64) += 1;
        *sessions.entry((r.0, r.1 as i64)).or_insert(0u64) += 1;
        timers.insert((r.0, r.2 / 100 * 100 + 99), 1u64);
    }
    let committed = |sink: &str| -> BTreeMap<(u64, i64), u64> {
        let rows: Vec<(u64, i64, u64)> = read_committed(&out.path().join(sink)).unwrap();
        let mut got = BTreeMap::new();
        for (k, w, c) in rows {
            assert!(
                got.insert((k, w), c).is_none(),
                "{sink}: key {k}, window {w} committed twice"
            );
        }
        got
    };
    assert_eq!(
        committed("tumbling"),
        tumbling,
        "every tumbling window once, whole"
    );
    assert_eq!(committed("sessions"), sessions, "every session once, whole");
    assert_eq!(
        committed("evicting-tumbling"),
        tumbling,
        "with an evictor, every tumbling window once, whole"
    );
    assert_eq!(
        committed("evicting-sessions"),
        sessions,
        "with an evictor, every session once, whole"
    );
    let fired: Vec<(u64, i64)> = read_committed(&out.path().join("timers")).unwrap();
    let mut once = BTreeMap::new();
    for t in fired {
        *once.entry(t).or_insert(0u64) += 1;
    }
    assert_eq!(once, timers, "every timer fired once");
    assert!(fail.injected() >= 1, "failures were injected");
}
