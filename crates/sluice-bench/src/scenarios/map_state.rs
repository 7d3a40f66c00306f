//! Scenario `map-state`: a keyed operator of your own counting per (key, user key) in a
//! `MapState` whose entries are RocksDB values of their own (how Flink's RocksDB backend keeps a
//! map state, and sluice's since it followed), against the same operator keeping each key's
//! map as one `ValueState<K, BTreeMap>` value (how a `MapState` was kept before), each run in a
//! fresh process (`map-state-probe`), the layouts alternated:
//!
//! - `large-maps`: 1,024 keys of 2,048 entries each (2 M entries, about 24 KB per encoded map)
//!   behind a 16 MiB budget, so that the decoded maps do not fit in a state's cache (4 MiB);
//! - `small-maps`: 262,144 keys of 8 entries each (the same 2 M entries) behind the same budget:
//!   what the per-entry layout costs where whole maps are small.
//!
//! A run loads every entry once, map by map, then updates random entries; each batch first reads
//! its missing entries (or maps) in one `MultiGet` (`prefetch`), then each record reads its
//! entry and writes it back incremented, and emits the new count (a sink digests the outputs,
//! which both layouts must agree on). Reported: updates per second after the load (the ratio
//! entries/whole), the load's rate, and the process's peak RSS. Parallelism 1, incremental
//! checkpoints every 200 ms (each write-back measures the cached values and holds the cache to
//! its bytes, so the updates run within the budget), a fresh directory per run.

use super::CommonArgs;
use crate::measure::{machine, median_f64, peak_rss_kib, runtime};
use crate::report::{Report, Row};
use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};
use sluice::core::CheckpointId;
use sluice::prelude::*;
use sluice::state::{MapState, ValueState};
use sluice_rocksdb::RocksDbStateBackend;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const SCENARIO: &str = "map-state";

/// Flags of `map-state`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
}

/// Flags of the hidden `map-state-probe`: one run in this process.
#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// `entries` or `whole`.
    #[arg(long)]
    layout: String,
    /// Keys, each with a map.
    #[arg(long)]
    keys: u64,
    /// Entries per map, loaded once each.
    #[arg(long)]
    entries: u64,
    /// Random updates after the load.
    #[arg(long)]
    updates: u64,
    /// RocksDB's memory budget, MiB.
    #[arg(long)]
    budget_mib: usize,
    /// Where the state and checkpoints go.
    #[arg(long)]
    dir: PathBuf,
}

/// One case: the shape of the maps, the updates after the load and the budget.
#[derive(Clone, Copy, Debug)]
struct Shape {
    keys: u64,
    entries: u64,
    updates: u64,
    budget_mib: usize,
}

impl Shape {
    fn load(&self) -> u64 {
        self.keys * self.entries
    }
}

/// Record `i`: first every (key, user key) once, map by map; then random ones.
fn record(i: u64, shape: Shape) -> (u64, u64) {
    if i < shape.load() {
        return (i / shape.entries, i % shape.entries);
    }
    let h = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    ((h >> 11) % shape.keys, (h >> 37) % shape.entries)
}

/// Where each key's map lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// `MapState`: an entry per stored value.
    Entries,
    /// `ValueState<K, BTreeMap>`: a map per stored value.
    Whole,
}

/// Counts per (key, user key) and emits each new count.
#[derive(Clone)]
struct Counter {
    layout: Layout,
    entries: MapState<u64, u64, u64>,
    whole: ValueState<u64, BTreeMap<u64, u64>>,
    max_parallelism: usize,
}

impl Counter {
    fn new(layout: Layout) -> Self {
        Counter {
            layout,
            entries: MapState::new("counts"),
            whole: ValueState::new("counts-whole"),
            max_parallelism: 128,
        }
    }
}

impl Operator<(u64, u64)> for Counter {
    type Out = (u64, u64, u64);

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.max_parallelism = ctx.max_parallelism();
        match self.layout {
            Layout::Entries => ctx.attach_keyed_state(&mut self.entries)?,
            Layout::Whole => ctx.attach_keyed_state(&mut self.whole)?,
        }
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Vec<(u64, u64)>,
        out: &mut Collector<(u64, u64, u64)>,
    ) -> Result<(), UserError> {
        // Both read the batch's missing entries (or maps) in one MultiGet first.
        match self.layout {
            Layout::Entries => self.entries.prefetch(batch.iter().map(|(k, u)| (k, u))),
            Layout::Whole => self.whole.prefetch(batch.iter().map(|(k, _)| k)),
        }
        for (k, u) in batch {
            let n = match self.layout {
                Layout::Entries => {
                    let n = self.entries.get(&k, &u).copied().unwrap_or(0) + 1;
                    self.entries.put(k, u, n);
                    n
                }
                Layout::Whole => {
                    let map = self.whole.get_or_default(k);
                    let n = map.get(&u).copied().unwrap_or(0) + 1;
                    map.insert(u, n);
                    n
                }
            };
            out.collect((k, u, n));
        }
        match self
            .entries
            .take_error()
            .or_else(|| self.whole.take_error())
        {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    fn snapshot_state(
        &mut self,
        _: CheckpointId,
        _: &mut Collector<(u64, u64, u64)>,
    ) -> Result<OperatorState, UserError> {
        let mut s = OperatorState::default();
        self.entries.snapshot_into(self.max_parallelism, &mut s)?;
        self.whole.snapshot_into(self.max_parallelism, &mut s)?;
        Ok(s)
    }

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.entries.restore_from(&state)?;
        self.whole.restore_from(&state)?;
        Ok(())
    }
}

/// Digests every (key, user key, count) it receives.
#[derive(Clone)]
struct DigestSink {
    sum: u64,
    total: Arc<AtomicU64>,
}

impl Sink<(u64, u64, u64)> for DigestSink {
    fn write_batch(&mut self, batch: Vec<(u64, u64, u64)>) -> Result<(), UserError> {
        for (k, u, n) in batch {
            let h = k.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ u.wrapping_mul(0x9E37_79B9);
            self.sum = self.sum.wrapping_add(h.wrapping_add(n));
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<(), UserError> {
        self.total.fetch_add(self.sum, Ordering::Relaxed);
        Ok(())
    }
}

/// A reported figure: its name, unit, how a probe gives it, and whether more is better.
type Metric = (&'static str, &'static str, fn(&Probe) -> f64, bool);

/// What one probe reports, as one JSON line.
#[derive(Debug, Serialize, Deserialize)]
struct Probe {
    load_per_s: f64,
    update_per_s: f64,
    peak_rss_mib: f64,
    checkpoints: u64,
    checksum: u64,
}

/// One run of the job: the load, then the updates.
async fn job(shape: Shape, layout: Layout, dir: &std::path::Path) -> anyhow::Result<Probe> {
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    env.set_state_backend(
        RocksDbStateBackend::new(dir.join("state"))
            .memory_budget(shape.budget_mib << 20)
            .incremental(true),
    );
    env.enable_checkpointing(Duration::from_millis(200));
    env.set_checkpoint_storage(dir.join("checkpoints"));
    let total = Arc::new(AtomicU64::new(0));
    // When the source made the first update: the end of the load, give or take a batch.
    let loaded: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let mark = loaded.clone();
    let load = shape.load();
    env.from_generator(
        Generator::new(move |i| {
            if i == load
                && let Ok(mut at) = mark.lock()
            {
                *at = Some(Instant::now());
            }
            record(i, shape)
        })
        .take(load + shape.updates),
    )
    .key_by(|r: &(u64, u64)| r.0)
    .process(Counter::new(layout))
    .sink_to(DigestSink {
        sum: 0,
        total: total.clone(),
    });
    let start = Instant::now();
    let result = env.execute("map-state").await?;
    let end = Instant::now();
    let loaded = loaded
        .lock()
        .ok()
        .and_then(|at| *at)
        .context("the load never ended")?;
    Ok(Probe {
        load_per_s: load as f64 / (loaded - start).as_secs_f64(),
        update_per_s: shape.updates as f64 / (end - loaded).as_secs_f64(),
        peak_rss_mib: peak_rss_kib()? as f64 / 1024.0,
        checkpoints: result.completed_checkpoints,
        checksum: total.load(Ordering::Relaxed),
    })
}

/// Runs one probe in this process and prints its figures.
pub fn probe(args: &ProbeArgs) -> anyhow::Result<()> {
    let layout = match args.layout.as_str() {
        "entries" => Layout::Entries,
        "whole" => Layout::Whole,
        other => bail!("unknown layout {other:?}: entries or whole"),
    };
    let shape = Shape {
        keys: args.keys,
        entries: args.entries,
        updates: args.updates,
        budget_mib: args.budget_mib,
    };
    let probe = runtime()?.block_on(job(shape, layout, &args.dir))?;
    println!("{}", serde_json::to_string(&probe)?);
    Ok(())
}

/// Runs a probe in a fresh process.
fn run_probe(shape: Shape, layout: &str) -> anyhow::Result<Probe> {
    let dir = tempfile::tempdir()?;
    let exe = std::env::current_exe().context("locating the bench executable")?;
    let args: Vec<String> = vec![
        "map-state-probe".into(),
        format!("--layout={layout}"),
        format!("--keys={}", shape.keys),
        format!("--entries={}", shape.entries),
        format!("--updates={}", shape.updates),
        format!("--budget-mib={}", shape.budget_mib),
        format!("--dir={}", dir.path().display()),
    ];
    let output = std::process::Command::new(exe)
        .args(&args)
        .envs(super::large_state::allocator_env())
        .output()
        .context("starting the map-state probe")?;
    if !output.status.success() {
        bail!(
            "the map-state probe {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().context("the probe printed nothing")?;
    serde_json::from_str(line).with_context(|| format!("parsing the probe's line {line:?}"))
}

/// Runs the scenario and prints its report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let reps = args.common.reps_or(1, 3);
    let mut report = Report::new(args.common.json);
    report.progress(&format!(
        "map-state on {}: MapState (an entry per RocksDB value) vs a whole map per value, {reps} runs per side, alternated, medians",
        machine()
    ));
    // Checkpoints every 200 ms, from the load on: each write-back sizes the caches from what
    // they hold, so the figures are those of a state kept within its budget.
    let updates = if quick { 100_000 } else { 300_000 };
    let cases = [
        (
            "large-maps",
            Shape {
                keys: 1_024,
                entries: 2_048,
                updates,
                budget_mib: 16,
            },
        ),
        (
            "small-maps",
            Shape {
                keys: 262_144,
                entries: 8,
                updates: updates * 10,
                budget_mib: 16,
            },
        ),
    ];
    for (case, shape) in cases {
        report.progress(&format!(
            "{case}: {} keys x {} entries loaded, then {} updates, {} MiB budget",
            shape.keys, shape.entries, shape.updates, shape.budget_mib
        ));
        let (mut entries, mut whole) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            let w = run_probe(shape, "whole")?;
            let e = run_probe(shape, "entries")?;
            if w.checksum != e.checksum {
                bail!("{case}: the layouts counted differently");
            }
            report.progress(&format!(
                "  whole: {:.0} updates/s, load {:.0}/s, {:.0} MiB; entries: {:.0} updates/s, load {:.0}/s, {:.0} MiB",
                w.update_per_s, w.load_per_s, w.peak_rss_mib, e.update_per_s, e.load_per_s, e.peak_rss_mib
            ));
            whole.push(w);
            entries.push(e);
        }
        let med =
            |v: &[Probe], f: fn(&Probe) -> f64| median_f64(&v.iter().map(f).collect::<Vec<_>>());
        let metrics: [Metric; 3] = [
            ("updates", "records/s", |p| p.update_per_s, true),
            ("load", "records/s", |p| p.load_per_s, true),
            ("peak RSS", "MiB", |p| p.peak_rss_mib, false),
        ];
        for (metric, unit, figure, more_is_better) in metrics {
            let (e, w) = (med(&entries, figure), med(&whole, figure));
            let ratio = if more_is_better { e / w } else { w / e };
            report.add(
                Row::new(SCENARIO, case, metric, unit, e.round())
                    .against("whole map per value", w.round(), ratio)
                    .parallelism(1),
            )?;
        }
    }
    report.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The comparison is only honest if both layouts count the same.
    #[test]
    fn both_layouts_agree() {
        let rt = runtime().unwrap();
        let shape = Shape {
            keys: 8,
            entries: 64,
            updates: 3_000,
            budget_mib: 16,
        };
        let run = |shape, layout| {
            let dir = tempfile::tempdir().unwrap();
            rt.block_on(job(shape, layout, dir.path()))
                .unwrap()
                .checksum
        };
        let entries = run(shape, Layout::Entries);
        assert_eq!(entries, run(shape, Layout::Whole));
        let fewer = Shape {
            updates: 2_999,
            ..shape
        };
        assert_ne!(entries, run(fewer, Layout::Whole));
    }
}
