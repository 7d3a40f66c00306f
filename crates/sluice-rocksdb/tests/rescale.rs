//! Keyed state in RocksDB across savepoints and rescaling: a counting job runs at parallelism 2
//! with its state in RocksDB, is stopped with a savepoint, resumes at 3 (RocksDB again), is
//! stopped again and finishes at 1 with its state on the heap. Every record is committed once
//! and every key's final count is the number of its records over the three runs, so each key's
//! count followed its key group to the subtask that owns it at each parallelism, and the
//! checkpoints of either backend restore into the other.

use sluice_connectors::file::{JsonLinesSink, read_committed};
use sluice_core::CheckpointId;
use sluice_rocksdb::RocksDbStateBackend;
use sluice_runtime::prelude::*;
use sluice_runtime::state::{KeyedListState, MapState, StateTtlConfig};
use sluice_runtime::testing::CountingPassThrough;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::Notify;

/// Enough keys to spread over most of the 128 key groups.
const KEYS: u64 = 1_000;

/// The highest index the source emitted, and a signal once it passed a mark.
#[derive(Clone)]
struct Seen {
    max: Arc<AtomicU64>,
    mark: Arc<AtomicU64>,
    reached: Arc<Notify>,
}

/// Passes records through and keeps, per key, every value in a [`KeyedListState`] and how
/// many were even and odd in a [`MapState`]; at end of input emits `(key, u64::MAX - count)`
/// as [`CountingPassThrough`] does, after checking that the list and the map agree.
#[derive(Clone)]
struct Listed {
    values: KeyedListState<u64, u64>,
    parity: MapState<u64, bool, u64>,
    max_parallelism: usize,
}

impl Listed {
    /// With `ttl`, both states have a time-to-live no entry reaches in the test: each entry
    /// carries its time through every checkpoint, restore and rescale.
    fn new(ttl: bool) -> Self {
        let (values, parity) = if ttl {
            let day = StateTtlConfig::new(Duration::from_secs(86_400));
            (
                KeyedListState::with_ttl("values", day.clone()),
                MapState::with_ttl("parity", day),
            )
        } else {
            (KeyedListState::new("values"), MapState::new("parity"))
        };
        Listed {
            values,
            parity,
            max_parallelism: 128,
        }
    }
}

impl Operator<(u64, u64)> for Listed {
    type Out = (u64, u64);
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.max_parallelism = ctx.max_parallelism();
        ctx.attach_keyed_state(&mut self.values)?;
        ctx.attach_keyed_state(&mut self.parity)?;
        Ok(())
    }
    fn process_batch(
        &mut self,
        batch: Vec<(u64, u64)>,
        out: &mut Collector<(u64, u64)>,
    ) -> Result<(), UserError> {
        for (k, v) in batch {
            self.values.add(k, v);
            let even = v % 2 == 0;
            let n = self.parity.get(&k, &even).copied().unwrap_or(0);
            self.parity.put(k, even, n + 1);
            out.collect((k, v));
        }
        match self
            .values
            .take_error()
            .or_else(|| self.parity.take_error())
        {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
    fn end_input(&mut self, out: &mut Collector<(u64, u64)>) -> Result<(), UserError> {
        let mut finals = Vec::new();
        self.values.for_each(|k, values| {
            finals.push((*k, values.len() as u64));
            Ok::<(), UserError>(())
        })?;
        for (k, n) in finals {
            let by_parity: u64 = self.parity.entries(&k).map(|(_, n)| n).sum();
            if by_parity != n {
                return Err(format!("key {k}: {n} values listed, {by_parity} counted").into());
            }
            out.collect((k, u64::MAX - n));
        }
        Ok(())
    }
    fn snapshot_state(
        &mut self,
        _: CheckpointId,
        _: &mut Collector<(u64, u64)>,
    ) -> Result<OperatorState, UserError> {
        let mut s = OperatorState::default();
        self.values.snapshot_into(self.max_parallelism, &mut s)?;
        self.parity.snapshot_into(self.max_parallelism, &mut s)?;
        Ok(s)
    }
    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.values.restore_from(&state)?;
        self.parity.restore_from(&state)?;
        Ok(())
    }
}

/// Which keyed operator counts.
#[derive(Clone, Copy)]
enum Counter {
    /// `CountingPassThrough`: a `ValueState` count per key.
    Value,
    /// [`Listed`]: a `KeyedListState` and a `MapState` per key.
    ListAndMap,
    /// [`Listed`] with a time-to-live on both states.
    ListAndMapWithTtl,
}

fn build(env: &StreamEnvironment, n: Option<u64>, seen: Seen, out: &Path, counter: Counter) {
    let source = Generator::new(|i| (i % KEYS, i)).rate_limit(100_000.0);
    let source = match n {
        Some(n) => env.from_generator(source.take(n)),
        None => env.from_generator(source),
    };
    let source = source
        // One source subtask in every run, so that only the keyed state is rescaled.
        .parallelism(1)
        .map(move |r: (u64, u64)| {
            seen.max.fetch_max(r.1, Ordering::SeqCst);
            if r.1 == seen.mark.load(Ordering::SeqCst) {
                seen.reached.notify_one();
            }
            r
        })
        .parallelism(1)
        .key_by(|r: &(u64, u64)| r.0);
    let counted = match counter {
        Counter::Value => source.process(CountingPassThrough::new()),
        Counter::ListAndMap => source.process(Listed::new(false)),
        Counter::ListAndMapWithTtl => source.process(Listed::new(true)),
    };
    counted.sink_to_exactly_once(JsonLinesSink::new(out, "counted"));
}

fn env_at(p: usize, checkpoints: &Path, restore: bool) -> StreamEnvironment {
    let env = StreamEnvironment::new();
    env.set_parallelism(p).set_batch_size(64);
    env.enable_checkpointing(Duration::from_millis(20));
    env.set_checkpoint_storage(checkpoints);
    if restore {
        env.restore_from(checkpoints);
    }
    env
}

/// Runs until the source passed `mark`, then stops with a savepoint.
async fn run_and_stop(
    env: StreamEnvironment,
    seen: &Seen,
    mark: u64,
    out: &Path,
    counter: Counter,
) {
    seen.mark.store(mark, Ordering::SeqCst);
    build(&env, None, seen.clone(), out, counter);
    let job = env.submit("counting").unwrap();
    seen.reached.notified().await;
    let savepoint = job.stop_with_savepoint().await.unwrap();
    let result = job.await.unwrap();
    assert_eq!(result.stopped_with_savepoint, Some(savepoint));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_in_rocksdb_survive_rescaling_from_2_to_3_to_1_and_a_switch_to_the_heap() {
    rescale(false, Counter::Value).await;
}

/// Keyed list and map state in RocksDB, likewise (full checkpoints, then the heap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_maps_in_rocksdb_survive_rescaling_from_2_to_3_to_1() {
    rescale(false, Counter::ListAndMap).await;
}

/// The same with incremental checkpoints: each restore opens the stores from the checkpoint's
/// shared files (the last run too, in RocksDB: the heap cannot read store files).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_checkpoints_survive_rescaling_from_2_to_3_to_1() {
    rescale(true, Counter::Value).await;
}

/// Keyed list and map state with incremental checkpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_lists_and_maps_survive_rescaling_from_2_to_3_to_1() {
    rescale(true, Counter::ListAndMap).await;
}

/// Keyed list and map state with a time-to-live, full checkpoints (the last run on the heap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_maps_with_a_time_to_live_survive_rescaling_from_2_to_3_to_1() {
    rescale(false, Counter::ListAndMapWithTtl).await;
}

/// The same with incremental checkpoints: the stamped entries travel in the stores' files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_lists_and_maps_with_a_time_to_live_survive_rescaling_from_2_to_3_to_1() {
    rescale(true, Counter::ListAndMapWithTtl).await;
}

async fn rescale(incremental: bool, counter: Counter) {
    let checkpoints = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let seen = Seen {
        max: Arc::new(AtomicU64::new(0)),
        mark: Arc::new(AtomicU64::new(u64::MAX)),
        reached: Arc::new(Notify::new()),
    };
    // A value cache of 16 counts: nearly every record reads its count from RocksDB.
    let rocksdb = || {
        RocksDbStateBackend::new(state.path())
            .memory_budget(8 << 20)
            .value_cache_bytes(0)
            .incremental(incremental)
    };

    let env = env_at(2, checkpoints.path(), false);
    env.set_state_backend(rocksdb());
    run_and_stop(env, &seen, 5_000, out.path(), counter).await;
    let instance = state.path().join(format!("p{}", std::process::id()));
    assert!(
        instance.is_dir(),
        "the counts were kept in RocksDB below {instance:?}"
    );

    let env = env_at(3, checkpoints.path(), true);
    env.set_state_backend(rocksdb());
    let mark = seen.max.load(Ordering::SeqCst) + 5_000;
    run_and_stop(env, &seen, mark, out.path(), counter).await;

    if incremental {
        let shared = checkpoints.path().join("shared");
        let files = std::fs::read_dir(&shared).map(|d| d.count()).unwrap_or(0);
        assert!(files > 0, "table files in {shared:?}");
    }

    // The last run, on the heap (or in RocksDB again), to a bound past every restored position.
    let n = seen.max.load(Ordering::SeqCst) + 1 + 5_000;
    let env = env_at(1, checkpoints.path(), true);
    if incremental {
        env.set_state_backend(rocksdb());
    }
    build(&env, Some(n), seen.clone(), out.path(), counter);
    env.execute("counting: last run").await.unwrap();

    let committed: Vec<(u64, u64)> = read_committed(out.path()).unwrap();
    let mut records = Vec::new();
    let mut finals = BTreeMap::new();
    for (k, v) in committed {
        if v > u64::MAX / 2 {
            assert!(
                finals.insert(k, u64::MAX - v).is_none(),
                "key {k}: two final counts"
            );
        } else {
            records.push(v);
        }
    }
    records.sort_unstable();
    assert_eq!(records, (0..n).collect::<Vec<_>>(), "every record once");
    let mut expected = BTreeMap::new();
    for i in 0..n {
        *expected.entry(i % KEYS).or_insert(0u64) += 1;
    }
    assert_eq!(
        finals, expected,
        "keyed counts carried across both rescales"
    );
    // Each store removed its directory when its job ended.
    let left: Vec<_> = walk(state.path());
    assert!(left.is_empty(), "store files left behind: {left:?}");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            files.extend(walk(&p));
        } else {
            files.push(p);
        }
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_checkpoint_restored_on_the_heap_is_refused_naming_the_backend() {
    let checkpoints = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let seen = Seen {
        max: Arc::new(AtomicU64::new(0)),
        mark: Arc::new(AtomicU64::new(u64::MAX)),
        reached: Arc::new(Notify::new()),
    };
    let env = env_at(2, checkpoints.path(), false);
    env.set_state_backend(RocksDbStateBackend::new(state.path()).incremental(true));
    run_and_stop(env, &seen, 2_000, out.path(), Counter::Value).await;

    let env = env_at(2, checkpoints.path(), true);
    env.set_restart_strategy(sluice_runtime::failover::RestartStrategy::none());
    build(&env, Some(10_000), seen.clone(), out.path(), Counter::Value);
    let e = env.execute("on the heap").await.unwrap_err().to_string();
    assert!(
        e.contains("rocksdb files") && e.contains("heap state backend"),
        "{e}"
    );
}
