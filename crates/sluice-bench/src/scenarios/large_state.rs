//! Scenario `large-state`: keyed state on the heap and in RocksDB (`sluice-rocksdb`, incremental
//! checkpoints), each case in a fresh process so that its peak memory is its own:
//!
//! - `fits`: state that fits in memory (1M keys, about 120 MB, with a budget of 1 GiB, whose
//!   quarter for decoded values holds them all): the records/s of writing every key once and
//!   then of three random updates per key, RocksDB against the heap (goal ≥ 0.5). Each phase
//!   takes a second or two, so the two backends run [`FITS_PAIRS`] times in turn and the
//!   ratios are the medians of the pairs';
//! - `large` and `large-x2`: state about 10× (and 20×) the budget: peak RSS against the budget;
//!   after a first checkpoint, sixteen intervals each update as many keys as 1 % of `large` holds
//!   and end in a checkpoint: the bytes each wrote against the whole state (goal ≤ 5 %), and
//!   their mean duration at twice the state with the same change (goal ≤ 1.2×); and the time a
//!   new process takes to restore the state from the local checkpoint directory; universal
//!   compaction (the backend's default), `large-leveled` the large case again with leveled
//!   compaction beside it, and `large-p4` at parallelism 4 (four stores and four states share
//!   the budget: its peak RSS against the budget);
//! - `large-s3` (with `--s3-endpoint` or `SLUICE_S3_ENDPOINT`, which `source .ci/s3` sets): the
//!   large case with its checkpoints in a bucket of that S3-compatible store, for the restore
//!   time from object storage beside the local one;
//! - `flink` (with `--flink`): the large case's job in Apache Flink 2.3.0
//!   (`flink/LargeStateFlink.java`, a MiniCluster in a fresh JVM) with its RocksDB state backend,
//!   incremental checkpoints and the same memory budget as its managed memory: throughput and
//!   checkpoint duration, sluice against Flink (goal ≥ 5× throughput, shorter checkpoints).
//!   Flink and sluice's large case run in turn, [`FLINK_PAIRS`] times, and the ratios are the
//!   medians of the pairs'.
//!
//! Each engine's RocksDB allocates through a faster allocator than glibc's, as in production:
//! sluice's probes through mimalloc 2, which this binary builds with its `override` feature so
//! that it serves `malloc` too (the rows' `allocator`), with `MIMALLOC_ALLOW_THP=0
//! MIMALLOC_PURGE_DELAY=10` (`MIMALLOC`), as the guide advises; Flink's JVM through jemalloc,
//! preloaded when Debian's `libjemalloc2` is installed, as Flink's Docker images do (its row's
//! `allocator` says which). Every process also runs with glibc's `MALLOC_ARENA_MAX=2`
//! (`MALLOC_ARENA_MAX` below), for whatever still allocates through glibc.
//!
//! The job: a generator → `key_by` → a `KeyedProcessFunction` whose state per key is a value of
//! `--value-bytes` bytes (100 by default). Record `i < keys` writes key `i`; later records
//! update pseudo-random keys.

use super::CommonArgs;
use crate::measure::{machine, median_f64, peak_rss_kib, process_cpu_time};
use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};
use sluice::prelude::*;
use sluice::process::{Context, KeyedProcessFunction};
use sluice_rocksdb::{Compaction, RocksDbStateBackend};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

const MIB: u64 = 1 << 20;
/// Runs of the `fits` case, the heap then RocksDB each time. One pair's ratios moved between
/// 0.57 and 0.97 from run to run on our 2-core machine; the median of three is steadier.
const FITS_PAIRS: usize = 3;
/// glibc's malloc arenas in every process of the scenario, sluice's probes and Flink's JVM
/// alike, unless `MALLOC_ARENA_MAX` is set already. RocksDB allocates its blocks with the C
/// library's malloc from many threads; with glibc's default of up to eight arenas per core the
/// freed blocks fragment them, and at full size that alone added about 95 MiB to the peak RSS
/// (docs/state-backends.md, "The memory budget").
const MALLOC_ARENA_MAX: &str = "2";

/// mimalloc's settings in sluice's probes (this binary's Rust allocator), unless set already:
/// no transparent huge pages, and freed memory returned after 10 ms (mimalloc 2's default;
/// mimalloc 3 backs its arenas with 2 MiB pages and keeps freed memory for a second, and on
/// the quick case these two halved its peak RSS over the budget at the same throughput,
/// BENCHMARKS.md, "The allocators' share"). They stay so that a build with mimalloc 3 is
/// measured as the guide advises too.
const MIMALLOC: [(&str, &str); 2] = [("MIMALLOC_ALLOW_THP", "0"), ("MIMALLOC_PURGE_DELAY", "10")];

/// `MALLOC_ARENA_MAX` for the scenario's processes: the caller's, or [`MALLOC_ARENA_MAX`].
fn malloc_arenas() -> String {
    std::env::var("MALLOC_ARENA_MAX").unwrap_or_else(|_| MALLOC_ARENA_MAX.to_string())
}

/// The allocators' settings of sluice's probes: the caller's, or the defaults above.
pub(super) fn allocator_env() -> Vec<(&'static str, String)> {
    let mut env = vec![("MALLOC_ARENA_MAX", malloc_arenas())];
    for (name, default) in MIMALLOC {
        env.push((
            name,
            std::env::var(name).unwrap_or_else(|_| default.to_string()),
        ));
    }
    env
}

/// Intervals of the large cases: enough for the larger merges to come due.
const INTERVALS: u32 = 16;

/// Flags of `large-state`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Bytes of each key's value.
    #[arg(long, default_value_t = 100)]
    value_bytes: usize,
    /// An S3-compatible endpoint (`source .ci/s3` sets it): the large case runs once more with
    /// its checkpoints in a bucket there, for the restore time from object storage.
    #[arg(long, env = "SLUICE_S3_ENDPOINT")]
    s3_endpoint: Option<String>,
    /// Run the same job in Apache Flink as well (installed from PyPI into `target/flink-venv`
    /// on first use, ~350 MB; each run a JVM of about 500 MB): the large case's job with
    /// RocksDB, partitioned index and filter blocks and bloom filters (see
    /// `flink/LargeStateFlink.java` and BENCHMARKS.md).
    #[arg(long)]
    flink: bool,
    /// With `--flink`: the parallelisms to compare at, each in pairs of runs (Flink's keyed
    /// function at P subtasks in P slots that split the budget; sluice's large case at P,
    /// whose stores share it). `1,2,4` compares at each.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    flink_parallelism: Vec<usize>,
    /// With `--flink`: only the comparisons beside Flink, none of the other cases.
    #[arg(long, requires = "flink")]
    only_flink: bool,
}

/// Flags of the hidden `large-state-probe`: one case in this process.
#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// `heap` or `rocksdb`.
    #[arg(long)]
    backend: String,
    /// Keys written once, then updated.
    #[arg(long)]
    keys: u64,
    /// Random updates after the load (per interval, with `--checkpoints`).
    #[arg(long)]
    updates: u64,
    /// With `--checkpoints`: intervals of `--updates` updates, each ending in a checkpoint.
    #[arg(long, default_value_t = 8)]
    intervals: u32,
    /// RocksDB's compaction: `universal` (the backend's default) or `leveled`.
    #[arg(long, default_value = "universal")]
    compaction: String,
    /// Threads that read a batch's keys (`RocksDbStateBackend::read_threads`).
    #[arg(long, default_value_t = sluice_rocksdb::DEFAULT_READ_THREADS)]
    read_threads: usize,
    /// Parallelism of the job (1 in every case of the scenario).
    #[arg(long, default_value_t = 1)]
    parallelism: usize,
    /// Bytes per value.
    #[arg(long)]
    value_bytes: usize,
    /// RocksDB's memory budget, MiB.
    #[arg(long)]
    budget_mib: u64,
    /// Take a checkpoint after the load and another after the updates, then restore.
    #[arg(long)]
    checkpoints: bool,
    /// Where the state and checkpoints go.
    #[arg(long)]
    dir: PathBuf,
    /// Checkpoint storage elsewhere than `<dir>/checkpoints` (an `s3://` URL; the bytes per
    /// checkpoint are then not counted).
    #[arg(long)]
    storage: Option<String>,
    /// With `--checkpoints`: fail the job once after this interval's checkpoint (1 is the
    /// first interval), so that it restarts from that checkpoint in memory; the next
    /// interval's figures are those of the first checkpoint after a failover.
    #[arg(long)]
    fail_after_interval: Option<u32>,
    /// Gives the keyed state a time-to-live of this many seconds (`state_ttl`), to measure
    /// what stamping and checking every value costs; none by default.
    #[arg(long)]
    ttl_secs: Option<u64>,
}

/// What one probe reports, as one JSON line.
#[derive(Debug, Serialize, Deserialize)]
struct Probe {
    load_per_s: f64,
    update_per_s: f64,
    peak_rss_mib: f64,
    /// CPU seconds of the process (user and system) up to the job's end, before the restore.
    cpu_s: f64,
    /// Bytes of the state: the table files the last checkpoint refers to.
    state_bytes: u64,
    first_checkpoint_ms: f64,
    /// Per interval after the first checkpoint: what its checkpoint took and wrote.
    intervals: Vec<Interval>,
    restore_ms: f64,
    /// Times the job restarted (once with `--fail-after-interval`).
    #[serde(default)]
    restarts: u32,
}

/// One interval of updates and the checkpoint that ends it.
#[derive(Debug, Serialize, Deserialize)]
struct Interval {
    checkpoint_ms: f64,
    /// Bytes the checkpoint refers to that the previous one did not: its new shared files,
    /// state and metadata files (written in the interval, ahead of it or by it).
    written_bytes: u64,
    /// Bytes the checkpoint itself wrote (its `size_bytes`): state files and the shared files
    /// that were not uploaded ahead of it.
    #[serde(default)]
    uploaded_bytes: u64,
    /// Of `checkpoint_ms`, the time until every task acknowledged (barriers and snapshots);
    /// the rest is writing the checkpoint.
    #[serde(default)]
    acknowledged_ms: f64,
    /// Bytes of the table files it refers to.
    state_bytes: u64,
}

impl Probe {
    fn mean_checkpoint_ms(&self) -> f64 {
        let n = self.intervals.len().max(1) as f64;
        self.intervals.iter().map(|i| i.checkpoint_ms).sum::<f64>() / n
    }

    fn shares(&self) -> Vec<f64> {
        self.intervals
            .iter()
            .map(|i| i.written_bytes as f64 / i.state_bytes.max(1) as f64)
            .collect()
    }

    /// What each checkpoint uploaded itself, against the state.
    fn upload_shares(&self) -> Vec<f64> {
        self.intervals
            .iter()
            .map(|i| i.uploaded_bytes as f64 / i.state_bytes.max(1) as f64)
            .collect()
    }
}

/// What `LargeStateFlink` reports, as one JSON line (the fields used here).
#[derive(Debug, Deserialize)]
struct FlinkProbe {
    load_per_s: f64,
    update_per_s: f64,
    first_checkpoint_ms: f64,
    /// Per interval: trigger to completion, as sluice's are timed.
    checkpoint_ms: Vec<f64>,
    /// Per interval: Flink's own `checkpointed_size` (what the checkpoint uploaded).
    checkpointed_bytes: Vec<u64>,
    /// Per interval: Flink's `state_size` (the whole state the checkpoint refers to).
    state_bytes: Vec<u64>,
    /// Per interval, the keyed subtask's part: trigger to its barrier's arrival (behind the
    /// records in flight).
    start_delay_ms: Vec<f64>,
    /// Per interval, the keyed subtask's synchronous part (RocksDB's flush, hard links).
    sync_ms: Vec<f64>,
    /// Per interval, the keyed subtask's asynchronous part (the upload).
    async_ms: Vec<f64>,
    peak_rss_kib: u64,
    cpu_s: f64,
    /// What the JVM allocated native memory (RocksDB's) with; set here, not by Flink's side.
    #[serde(default)]
    allocator: String,
}

/// Debian's jemalloc (package `libjemalloc2`), which Flink's Docker images load into its JVMs
/// (`LD_PRELOAD`, unless `DISABLE_JEMALLOC=true`) for RocksDB's sake: the Flink side of the
/// scenario does the same when the library is there, as sluice's probes route RocksDB's
/// allocations to mimalloc.
fn jemalloc() -> Option<PathBuf> {
    if std::env::var("DISABLE_JEMALLOC").is_ok_and(|v| v == "true") {
        return None;
    }
    [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib",
    ]
    .iter()
    .map(|dir| Path::new(dir).join("libjemalloc.so.2"))
    .find(|p| p.exists())
}

/// Runs the large case's job in Flink: `LargeStateFlink` in a fresh JVM.
fn run_flink(
    keys: u64,
    updates: u64,
    value_bytes: usize,
    budget_mib: u64,
    parallelism: usize,
    dir: &Path,
) -> anyhow::Result<FlinkProbe> {
    use super::nexmark::flink::Flink;
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    let work = target.join("large-state-flink");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let flink = Flink::prepare_class(&target, &work, "LargeStateFlink")?;
    let log = flink.logs().join("flink-large-state.log");
    let stderr =
        std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
    eprintln!(
        "... the large case in Flink 2.3.0 on {} (log: {})",
        Flink::java_version(),
        log.display()
    );
    let mut java = flink.java("LargeStateFlink");
    java.env("MALLOC_ARENA_MAX", malloc_arenas());
    let allocator = match jemalloc() {
        Some(lib) => {
            java.env("LD_PRELOAD", &lib);
            format!("jemalloc ({})", lib.display())
        }
        None => "the C library's malloc (no libjemalloc.so.2 found)".to_string(),
    };
    eprintln!("... Flink's JVM allocates with {allocator}");
    let output = java
        .args(["--keys", &keys.to_string()])
        .args(["--updates", &updates.to_string()])
        .args(["--intervals", &INTERVALS.to_string()])
        .args(["--value-bytes", &value_bytes.to_string()])
        .args(["--budget-mib", &budget_mib.to_string()])
        .args(["--parallelism", &parallelism.to_string()])
        // As sluice's generator: records flow on while a checkpoint runs.
        .args(["--pause", "false"])
        // Partitioned index and filter blocks and bloom filters, as sluice's backend has.
        .args(["--tuned", "true"])
        .arg("--dir")
        .arg(dir)
        .stderr(stderr)
        .output()
        .context("starting java")?;
    if !output.status.success() {
        bail!(
            "Flink's large-state job failed ({}); see {}",
            output.status,
            log.display()
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .last()
        .with_context(|| format!("Flink printed nothing; see {}", log.display()))?;
    let mut probe: FlinkProbe =
        serde_json::from_str(line).with_context(|| format!("parsing Flink's line {line:?}"))?;
    probe.allocator = allocator;
    Ok(probe)
}

/// Keeps a value of `bytes` bytes per key; counts what it processed and signals marks; fails
/// once when `fail` is set.
#[derive(Clone)]
struct Keep {
    bytes: usize,
    seen: Arc<AtomicU64>,
    mark: Arc<AtomicU64>,
    reached: Arc<Notify>,
    fail: Arc<AtomicBool>,
    ttl: Option<Duration>,
}

impl KeyedProcessFunction<u64, u64> for Keep {
    type Out = ();
    type State = Vec<u8>;
    fn state_ttl(&self) -> Option<sluice::state::StateTtlConfig> {
        self.ttl.map(sluice::state::StateTtlConfig::new)
    }
    fn process_element(
        &mut self,
        i: u64,
        ctx: &mut Context<'_, u64, Vec<u8>, ()>,
    ) -> Result<(), UserError> {
        if self.fail.swap(false, Ordering::Relaxed) {
            return Err("failing once, for a failover (--fail-after-interval)".into());
        }
        let v = ctx.state();
        v.clear();
        v.resize(self.bytes, (i % 251) as u8);
        let n = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
        if n == self.mark.load(Ordering::Relaxed) {
            self.reached.notify_one();
        }
        Ok(())
    }
}

/// Record `i`'s key: `i` for the load, then a scrambled key.
fn key_of(i: u64, keys: u64) -> u64 {
    if i < keys {
        i
    } else {
        i.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) % keys
    }
}

fn backend(args: &ProbeArgs) -> anyhow::Result<Option<RocksDbStateBackend>> {
    match args.backend.as_str() {
        "heap" => Ok(None),
        "rocksdb" => {
            let compaction = match args.compaction.as_str() {
                "universal" => Compaction::Universal,
                "leveled" => Compaction::Leveled,
                other => bail!("--compaction {other:?}: expected universal or leveled"),
            };
            Ok(Some(
                RocksDbStateBackend::new(args.dir.join("state"))
                    .memory_budget((args.budget_mib * MIB) as usize)
                    .incremental(true)
                    .compaction(compaction)
                    .read_threads(args.read_threads),
            ))
        }
        other => bail!("--backend {other:?}: expected heap or rocksdb"),
    }
}

/// The body of the probe process.
pub fn probe(args: &ProbeArgs) -> anyhow::Result<()> {
    let rt = crate::measure::runtime()?;
    let probe = rt.block_on(run_case(args))?;
    println!("{}", serde_json::to_string(&probe)?);
    Ok(())
}

async fn run_case(args: &ProbeArgs) -> anyhow::Result<Probe> {
    let keys = args.keys;
    let checkpoints = args.dir.join("checkpoints");
    let seen = Arc::new(AtomicU64::new(0));
    let mark = Arc::new(AtomicU64::new(keys));
    let reached = Arc::new(Notify::new());
    let env = StreamEnvironment::new();
    env.set_parallelism(args.parallelism);
    env.set_checkpoint_settings(
        CheckpointSettings::every(Duration::from_secs(3600)).with_retained(2),
    );
    set_storage(&env, args, &checkpoints)?;
    if let Some(b) = backend(args)? {
        env.set_state_backend(b);
    }
    let fail = Arc::new(AtomicBool::new(false));
    if args.fail_after_interval.is_some() {
        env.set_restart_strategy(sluice_runtime::failover::RestartStrategy::fixed_delay(
            1,
            Duration::ZERO,
        )?);
    }
    let f = Keep {
        bytes: args.value_bytes,
        seen: seen.clone(),
        mark: mark.clone(),
        reached: reached.clone(),
        fail: fail.clone(),
        ttl: args.ttl_secs.map(Duration::from_secs),
    };
    env.from_generator(Generator::new(move |i| key_of(i, keys)))
        .key_by(|k: &u64| *k)
        .process_keyed(f)
        .discard();
    let job = env.submit("large-state")?;
    let start = Instant::now();
    reached.notified().await;
    let load = start.elapsed();

    let mut probe = Probe {
        load_per_s: keys as f64 / load.as_secs_f64(),
        update_per_s: 0.0,
        peak_rss_mib: 0.0,
        cpu_s: 0.0,
        state_bytes: 0,
        first_checkpoint_ms: 0.0,
        intervals: Vec::new(),
        restore_ms: 0.0,
        restarts: 0,
    };
    let checkpoint = || async {
        let t = Instant::now();
        let pending = job.trigger_checkpoint().await?;
        let id = pending.id();
        pending
            .completed()
            .await
            .map_err(|e| anyhow::anyhow!("checkpoint {id:?}: {e:?}"))?;
        anyhow::Ok((id, t.elapsed().as_secs_f64() * 1e3))
    };
    let mut previous = None;
    if args.checkpoints {
        let (id, ms) = checkpoint().await?;
        probe.first_checkpoint_ms = ms;
        previous = Some(id);
    }
    let rounds = if args.checkpoints { args.intervals } else { 1 };
    let mut updating = Duration::ZERO;
    for round in 1..=rounds {
        let start = Instant::now();
        mark.store(
            seen.load(Ordering::Relaxed) + args.updates,
            Ordering::Relaxed,
        );
        reached.notified().await;
        updating += start.elapsed();
        if let Some(before) = previous {
            let (id, checkpoint_ms) = checkpoint().await?;
            let (state_bytes, written_bytes) = match args.storage {
                Some(_) => (0, 0),
                None => checkpoint_bytes(&checkpoints, before, id)?,
            };
            let record = job
                .observer()
                .snapshot()
                .checkpoints
                .history
                .into_iter()
                .find(|c| c.id == id.0);
            let uploaded_bytes = record.as_ref().and_then(|c| c.size_bytes).unwrap_or(0);
            let acknowledged_ms = record.and_then(|c| c.acknowledged_ms).unwrap_or(0) as f64;
            probe.intervals.push(Interval {
                checkpoint_ms,
                written_bytes,
                uploaded_bytes,
                acknowledged_ms,
                state_bytes,
            });
            probe.state_bytes = state_bytes;
            previous = Some(id);
            if args.fail_after_interval == Some(round) {
                fail.store(true, Ordering::Relaxed);
            }
        }
    }
    probe.update_per_s = (args.updates * u64::from(rounds)) as f64 / updating.as_secs_f64();
    probe.restarts = job.observer().snapshot().restarts;
    job.cancel();
    let _ = job.await;
    probe.peak_rss_mib = peak_rss_kib()? as f64 / 1024.0;
    probe.cpu_s = process_cpu_time()?.as_secs_f64();

    if args.checkpoints {
        // A new job restores the state and ends at once (its generator's position is past the
        // bound): its run time is the restore.
        // Without checkpointing: a final checkpoint would wait for the next interval.
        let env = StreamEnvironment::new();
        env.set_parallelism(args.parallelism);
        if args.storage.is_some() {
            env.set_checkpoint_settings(CheckpointSettings::every(Duration::from_secs(3600)));
            set_storage(&env, args, &checkpoints)?;
            env.resume_from_latest_checkpoint();
        } else {
            env.restore_from(&checkpoints);
        }
        if let Some(b) = backend(args)? {
            env.set_state_backend(b);
        }
        let f = Keep {
            bytes: args.value_bytes,
            seen: Arc::new(AtomicU64::new(0)),
            mark: Arc::new(AtomicU64::new(u64::MAX)),
            reached: Arc::new(Notify::new()),
            fail: Arc::new(AtomicBool::new(false)),
            ttl: args.ttl_secs.map(Duration::from_secs),
        };
        env.from_generator(Generator::new(move |i| key_of(i, keys)).take(1))
            .key_by(|k: &u64| *k)
            .process_keyed(f)
            .discard();
        let t = Instant::now();
        env.execute("large-state: restore").await?;
        probe.restore_ms = t.elapsed().as_secs_f64() * 1e3;
    }
    Ok(probe)
}

/// Checkpoints to `args.storage` (an object store URL, its S3 options from the `AWS_*`
/// variables) or else to the local `dir`.
fn set_storage(env: &StreamEnvironment, args: &ProbeArgs, dir: &Path) -> anyhow::Result<()> {
    match &args.storage {
        Some(url) => {
            let storage = sluice_object_store::ObjectStoreCheckpointStorage::from_url(
                url,
                sluice_object_store::ObjectStoreCheckpointStorage::aws_options_from_env(),
                // Two, as `with_retained(2)` above.
                std::num::NonZeroUsize::MIN.saturating_add(1),
            )
            .with_context(|| format!("checkpoint storage {url}"))?;
            env.set_checkpoint_storage_backend(Arc::new(storage));
        }
        None => {
            env.set_checkpoint_storage(dir);
        }
    }
    Ok(())
}

/// The bytes of the state at checkpoint `second` (the table files it refers to) and the bytes
/// it wrote: its state and metadata files and the shared files checkpoint `first` did not
/// refer to.
fn checkpoint_bytes(
    dir: &Path,
    first: sluice::core::CheckpointId,
    second: sluice::core::CheckpointId,
) -> anyhow::Result<(u64, u64)> {
    let shared_of = |id: sluice::core::CheckpointId| -> anyhow::Result<Vec<String>> {
        let bytes = std::fs::read(dir.join(format!("chk-{}/_metadata", id.0)))?;
        // After the 20-byte frame header.
        let meta: sluice_runtime::storage::CheckpointMetadata =
            sluice::core::codec::decode(&bytes[20..]).context("decoding checkpoint metadata")?;
        Ok(meta.shared_files)
    };
    let before: std::collections::BTreeSet<String> = shared_of(first)?.into_iter().collect();
    let size = |p: PathBuf| std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
    let (mut state, mut written) = (0, 0);
    for key in shared_of(second)? {
        let len = size(dir.join("shared").join(&key));
        state += len;
        if !before.contains(&key) {
            written += len;
        }
    }
    for e in std::fs::read_dir(dir.join(format!("chk-{}", second.0)))? {
        written += e?.metadata()?.len();
    }
    Ok((state, written))
}

/// Starts a probe process for one case, with `env` set.
fn run_probe(args: &[String]) -> anyhow::Result<Probe> {
    run_probe_with(args, &[])
}

fn run_probe_with(args: &[String], env: &[(&str, String)]) -> anyhow::Result<Probe> {
    let exe = std::env::current_exe().context("locating the bench executable")?;
    let output = Command::new(exe)
        .arg("large-state-probe")
        .args(args)
        .envs(allocator_env())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .context("starting the large-state probe")?;
    if !output.status.success() {
        bail!(
            "the large-state probe {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().context("the probe printed nothing")?;
    serde_json::from_str(line).with_context(|| format!("parsing the probe's line {line:?}"))
}

/// One case's probe arguments.
fn case_args(
    backend: &str,
    keys: u64,
    updates: u64,
    value_bytes: usize,
    budget_mib: u64,
    checkpoints: bool,
    dir: &Path,
) -> Vec<String> {
    let mut a = vec![
        "--backend".into(),
        backend.into(),
        "--keys".into(),
        keys.to_string(),
        "--updates".into(),
        updates.to_string(),
        "--value-bytes".into(),
        value_bytes.to_string(),
        "--budget-mib".into(),
        budget_mib.to_string(),
        "--dir".into(),
        dir.display().to_string(),
    ];
    if checkpoints {
        a.push("--checkpoints".into());
    }
    a
}

/// Flink's runs of the large case's job, each followed at once by a run of sluice's `large`
/// case: one pair of rows of figures per run of each. The machine's speed moves between runs
/// (one pass of each engine gave 1.8× to 3.7× on updates from one full run to the next), so the
/// ratios are the medians of the pairs', each pair measured within a few minutes.
const FLINK_PAIRS: usize = 3;

/// The `flink` row (`flink-p<P>` above parallelism 1): [`FLINK_PAIRS`] pairs of a Flink run
/// and a sluice run of the large case, both at `parallelism`, alternated, and the medians of
/// their ratios; `leveled` (sluice's leveled case, run once earlier, if it ran) is set beside
/// Flink's medians.
#[allow(clippy::too_many_arguments)]
fn beside_flink(
    keys: u64,
    updates: u64,
    vb: usize,
    budget_mib: u64,
    parallelism: usize,
    leveled: Option<&Probe>,
    fresh: &dyn Fn(&str) -> anyhow::Result<PathBuf>,
) -> anyhow::Result<serde_json::Value> {
    let case = match parallelism {
        1 => "flink".to_string(),
        p => format!("flink-p{p}"),
    };
    let mut pairs = Vec::new();
    for i in 0..FLINK_PAIRS {
        eprintln!(
            "... beside Flink at parallelism {parallelism}, pair {} of {FLINK_PAIRS}",
            i + 1
        );
        let f = run_flink(
            keys,
            updates,
            vb,
            budget_mib,
            parallelism,
            &fresh(&format!("{case}-{i}"))?,
        )?;
        let mut a = case_args(
            "rocksdb",
            keys,
            updates,
            vb,
            budget_mib,
            true,
            &fresh(&format!("{case}-sluice-{i}"))?,
        );
        a.extend([
            "--intervals".into(),
            INTERVALS.to_string(),
            "--parallelism".into(),
            parallelism.to_string(),
        ]);
        let s = run_probe(&a)?;
        eprintln!(
            "    Flink: load {:.0} k/s, updates {:.1} k/s; sluice: load {:.0} k/s, updates \
             {:.0} k/s ({:.2}x the updates)",
            f.load_per_s / 1e3,
            f.update_per_s / 1e3,
            s.load_per_s / 1e3,
            s.update_per_s / 1e3,
            s.update_per_s / f.update_per_s.max(1e-9)
        );
        pairs.push((f, s));
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let flink = |g: &dyn Fn(&FlinkProbe) -> f64| -> f64 {
        median_f64(&pairs.iter().map(|(f, _)| g(f)).collect::<Vec<_>>())
    };
    let ratios = |g: &dyn Fn(&FlinkProbe, &Probe) -> f64| -> Vec<f64> {
        pairs.iter().map(|(f, s)| g(f, s)).collect()
    };
    let load = ratios(&|f, s| s.load_per_s / f.load_per_s.max(1e-9));
    let update = ratios(&|f, s| s.update_per_s / f.update_per_s.max(1e-9));
    let checkpoint = ratios(&|f, s| mean(&f.checkpoint_ms) / s.mean_checkpoint_ms().max(1e-9));
    let (f_load, f_update) = (flink(&|f| f.load_per_s), flink(&|f| f.update_per_s));
    let f_checkpoint = flink(&|f| mean(&f.checkpoint_ms));
    let runs: Vec<_> = pairs
        .iter()
        .map(|(f, s)| {
            let shares: Vec<f64> = f
                .checkpointed_bytes
                .iter()
                .zip(&f.state_bytes)
                .map(|(w, st)| *w as f64 / (*st).max(1) as f64)
                .collect();
            serde_json::json!({
                "flink_load_per_s": f.load_per_s, "flink_update_per_s": f.update_per_s,
                "flink_cpu_s": f.cpu_s, "flink_peak_rss_mib": f.peak_rss_kib as f64 / 1024.0,
                "flink_state_mib":
                    f.state_bytes.last().copied().unwrap_or(0) as f64 / MIB as f64,
                "flink_first_checkpoint_ms": f.first_checkpoint_ms,
                "flink_checkpoint_ms": f.checkpoint_ms,
                "flink_mean_checkpoint_ms": mean(&f.checkpoint_ms),
                "flink_mean_start_delay_ms": mean(&f.start_delay_ms),
                "flink_mean_sync_ms": mean(&f.sync_ms),
                "flink_mean_async_ms": mean(&f.async_ms),
                "flink_checkpoint_share": shares,
                "sluice_load_per_s": s.load_per_s, "sluice_update_per_s": s.update_per_s,
                "sluice_cpu_s": s.cpu_s, "sluice_peak_rss_mib": s.peak_rss_mib,
                "sluice_mean_checkpoint_ms": s.mean_checkpoint_ms(),
            })
        })
        .collect();
    let mut row = serde_json::json!({
        "scenario": "large-state", "case": case, "keys": keys, "parallelism": parallelism,
        "budget_mib": budget_mib, "updates_per_interval": updates,
        "allocator": pairs.first().map(|(f, _)| f.allocator.clone()).unwrap_or_default(),
        "pairs": FLINK_PAIRS, "runs": runs,
        "load_per_s": f_load, "update_per_s": f_update,
        "cpu_s": flink(&|f| f.cpu_s),
        "mean_checkpoint_ms": f_checkpoint,
        "sluice_over_flink_load": median_f64(&load), "sluice_over_flink_loads": load,
        "sluice_over_flink_update": median_f64(&update), "sluice_over_flink_updates": update,
        "flink_over_sluice_checkpoint_ms": median_f64(&checkpoint),
        "flink_over_sluice_checkpoint_ms_pairs": checkpoint,
    });
    if let (Some(leveled), Some(fields)) = (leveled, row.as_object_mut()) {
        fields.insert(
            "sluice_leveled_over_flink_load".into(),
            (leveled.load_per_s / f_load.max(1e-9)).into(),
        );
        fields.insert(
            "sluice_leveled_over_flink_update".into(),
            (leveled.update_per_s / f_update.max(1e-9)).into(),
        );
        fields.insert(
            "flink_over_sluice_leveled_checkpoint_ms".into(),
            (f_checkpoint / leveled.mean_checkpoint_ms().max(1e-9)).into(),
        );
    }
    Ok(row)
}

/// The `fits` row: [`FITS_PAIRS`] pairs of the heap and RocksDB on `keys` keys that fit in
/// `budget_mib`, and the medians of their ratios.
fn fits(
    vb: usize,
    fits_keys: u64,
    fits_budget: u64,
    fresh: &dyn Fn(&str) -> anyhow::Result<PathBuf>,
) -> anyhow::Result<serde_json::Value> {
    // Three updates per key, so that the measure is of a warm cache rather than of first reads.
    eprintln!("... fits: the heap, then RocksDB, {fits_keys} keys, {FITS_PAIRS} times");
    let mut pairs = Vec::new();
    for i in 0..FITS_PAIRS {
        let probe = |backend: &str| {
            run_probe(&case_args(
                backend,
                fits_keys,
                3 * fits_keys,
                vb,
                fits_budget,
                false,
                &fresh(&format!("fits-{backend}-{i}"))?,
            ))
        };
        let heap = probe("heap")?;
        let rocks = probe("rocksdb")?;
        pairs.push((heap, rocks));
    }
    let ratios =
        |f: fn(&Probe) -> f64| -> Vec<f64> { pairs.iter().map(|(h, r)| f(r) / f(h)).collect() };
    let (load_ratios, update_ratios) = (ratios(|p| p.load_per_s), ratios(|p| p.update_per_s));
    let (load_ratio, update_ratio) = (median_f64(&load_ratios), median_f64(&update_ratios));
    let of = |f: fn(&Probe) -> f64, rocks: bool| -> Vec<f64> {
        pairs
            .iter()
            .map(|(h, r)| f(if rocks { r } else { h }))
            .collect()
    };
    let peak = |rocks: bool| {
        of(|p| p.peak_rss_mib, rocks)
            .into_iter()
            .fold(0.0, f64::max)
    };
    let row = serde_json::json!({
        "scenario": "large-state", "case": "fits", "keys": fits_keys, "budget_mib": fits_budget,
        "rocksdb_library": sluice_rocksdb::LIBRARY, "malloc_arena_max": malloc_arenas(),
        "allocator": crate::ALLOCATOR_NAME,
        "allocator_env": allocator_env().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        "pairs": FITS_PAIRS,
        "heap_load_per_s": median_f64(&of(|p| p.load_per_s, false)),
        "rocksdb_load_per_s": median_f64(&of(|p| p.load_per_s, true)),
        "load_ratio": load_ratio, "load_ratios": load_ratios,
        "heap_update_per_s": median_f64(&of(|p| p.update_per_s, false)),
        "rocksdb_update_per_s": median_f64(&of(|p| p.update_per_s, true)),
        "update_ratio": update_ratio, "update_ratios": update_ratios,
        "heap_peak_rss_mib": peak(false), "rocksdb_peak_rss_mib": peak(true),
    });
    eprintln!(
        "    RocksDB / heap: load {load_ratio:.2}, updates {update_ratio:.2} (medians of \
         {FITS_PAIRS})"
    );
    Ok(row)
}

/// Runs the scenario.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let vb = args.value_bytes;
    // Bytes per key in memory or on disk are about the value plus 20 bytes of key and overhead.
    let per_key = vb as u64 + 20;
    let (fits_budget, large_budget) = if quick { (1024, 32) } else { (1024, 256) };
    let fits_keys = 1_000_000;
    let large_keys = 10 * large_budget * MIB / per_key;
    eprintln!(
        "large-state on {}: {vb}-byte values; fits: {fits_keys} keys, budget {fits_budget} MiB; \
         large: {large_keys} keys (~{} MiB), budget {large_budget} MiB; RocksDB: {} library; \
         allocator: {}; {}",
        machine(),
        large_keys * per_key / MIB,
        sluice_rocksdb::LIBRARY,
        crate::ALLOCATOR_NAME,
        allocator_env()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
    );
    let tmp = tempfile::tempdir()?;
    let fresh = |name: &str| -> anyhow::Result<PathBuf> {
        let d = tmp.path().join(name);
        std::fs::create_dir_all(&d)?;
        Ok(d)
    };
    let mut rows = Vec::new();
    if !args.only_flink {
        rows.push(fits(vb, fits_keys, fits_budget, &fresh)?);
    }
    // Each interval updates 1 % of the large case's keys: the same number of changed keys at
    // twice the state, so that the doubling measures what the size of the state adds.
    let updates = (large_keys / 100).max(1);
    let mut large = Vec::new();
    // `large-leveled` is the first with leveled compaction, beside the default universal;
    // `large-p4` the large case at parallelism 4: four stores and four states share the budget.
    let cases = [
        ("large", large_keys, "universal", 1),
        ("large-x2", 2 * large_keys, "universal", 1),
        ("large-leveled", large_keys, "leveled", 1),
        ("large-p4", large_keys, "universal", 4),
    ];
    for &(name, keys, compaction, parallelism) in if args.only_flink { &[][..] } else { &cases } {
        let mut a = case_args(
            "rocksdb",
            keys,
            updates,
            vb,
            large_budget,
            true,
            &fresh(name)?,
        );
        a.extend([
            "--compaction".into(),
            compaction.into(),
            "--intervals".into(),
            INTERVALS.to_string(),
            "--parallelism".into(),
            parallelism.to_string(),
        ]);
        eprintln!("... {name}: {keys} keys, {compaction} compaction, parallelism {parallelism}");
        let p = run_probe(&a)?;
        eprintln!(
            "    load {:.0} k/s, updates {:.0} k/s, mean checkpoint {:.0} ms, peak RSS {:.0} MiB",
            p.load_per_s / 1e3,
            p.update_per_s / 1e3,
            p.mean_checkpoint_ms(),
            p.peak_rss_mib
        );
        let shares = p.shares();
        let uploads = p.upload_shares();
        rows.push(serde_json::json!({
            "scenario": "large-state", "case": name, "keys": keys, "budget_mib": large_budget,
            "compaction": compaction, "parallelism": parallelism,
            "updates_per_interval": updates,
            "state_mib": p.state_bytes as f64 / MIB as f64,
            "load_per_s": p.load_per_s, "update_per_s": p.update_per_s,
            "peak_rss_mib": p.peak_rss_mib, "cpu_s": p.cpu_s,
            "rss_over_budget_mib": p.peak_rss_mib - large_budget as f64,
            "first_checkpoint_ms": p.first_checkpoint_ms,
            "checkpoint_ms": p.intervals.iter().map(|i| i.checkpoint_ms).collect::<Vec<_>>(),
            "mean_checkpoint_ms": p.mean_checkpoint_ms(),
            "checkpoint_share": shares,
            "max_checkpoint_share": shares.iter().copied().fold(0.0, f64::max),
            "mean_checkpoint_share": shares.iter().sum::<f64>() / shares.len().max(1) as f64,
            "checkpoint_acknowledged_ms": p.intervals.iter().map(|i| i.acknowledged_ms).collect::<Vec<_>>(),
            "checkpoint_upload_share": uploads,
            "max_checkpoint_upload_share": uploads.iter().copied().fold(0.0, f64::max),
            "mean_checkpoint_upload_share": uploads.iter().sum::<f64>() / uploads.len().max(1) as f64,
            "restore_ms": p.restore_ms,
        }));
        large.push(p);
    }
    if let (Some(endpoint), Some(local)) = (&args.s3_endpoint, large.first()) {
        // The large case again, its checkpoints in a bucket: the restore fetches every table
        // file from the object store.
        let bucket = format!("large-state-{}", std::process::id());
        sluice_runtime::testing::create_s3_bucket(endpoint, &bucket)
            .with_context(|| format!("creating bucket {bucket} at {endpoint}"))?;
        let mut a = case_args(
            "rocksdb",
            large_keys,
            updates,
            vb,
            large_budget,
            true,
            &fresh("large-s3")?,
        );
        a.extend(["--storage".into(), format!("s3://{bucket}/large")]);
        let s3 = [
            ("AWS_ENDPOINT", endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
            ("AWS_ACCESS_KEY_ID", "test".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
            ("AWS_REGION", "us-east-1".to_string()),
        ];
        eprintln!("... large-s3: the large case, its checkpoints in {endpoint}");
        let p = run_probe_with(&a, &s3)?;
        rows.push(serde_json::json!({
            "scenario": "large-state", "case": "large-s3", "keys": large_keys,
            "budget_mib": large_budget, "endpoint": endpoint,
            "first_checkpoint_ms": p.first_checkpoint_ms,
            "checkpoint_ms": p.intervals.iter().map(|i| i.checkpoint_ms).collect::<Vec<_>>(),
            "mean_checkpoint_ms": p.mean_checkpoint_ms(),
            "peak_rss_mib": p.peak_rss_mib,
            "restore_ms": p.restore_ms,
            "restore_vs_local": p.restore_ms / local.restore_ms.max(1e-9),
        }));
    }
    if args.flink {
        for &parallelism in &args.flink_parallelism {
            rows.push(beside_flink(
                large_keys,
                updates,
                vb,
                large_budget,
                parallelism.max(1),
                large.get(2),
                &fresh,
            )?);
        }
    }
    if let [large, x2, ..] = &large[..] {
        rows.push(serde_json::json!({
            "scenario": "large-state", "case": "doubling",
            "mean_checkpoint_growth": x2.mean_checkpoint_ms() / large.mean_checkpoint_ms().max(1e-9),
        }));
    }
    for r in &rows {
        if args.common.json {
            println!("{r}");
        } else {
            println!("{}", serde_json::to_string_pretty(r)?);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn flink_comparisons_take_a_list_of_parallelisms_and_only_flink_needs_flink() {
        use clap::Parser;
        let cli = Cli::try_parse_from([
            "large-state",
            "--flink",
            "--only-flink",
            "--flink-parallelism",
            "1,2,4",
        ])
        .unwrap();
        assert_eq!(cli.args.flink_parallelism, [1, 2, 4]);
        assert!(cli.args.only_flink);
        let default = Cli::try_parse_from(["large-state"]).unwrap();
        assert_eq!(default.args.flink_parallelism, [1]);
        assert!(Cli::try_parse_from(["large-state", "--only-flink"]).is_err());
    }

    #[test]
    fn keys_are_loaded_in_order_then_updated_within_range() {
        assert_eq!(key_of(5, 10), 5);
        assert!((10..1_000).all(|i| key_of(i, 10) < 10));
    }
}
