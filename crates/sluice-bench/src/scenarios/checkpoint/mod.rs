//! Scenario `checkpoint` (issue 3): what checkpoints cost.
//!
//! - `throughput-p1`, `throughput-p2`: the pipeline's keyed job (generator -> map -> filter ->
//!   key_by -> sum per key, the sums in a `ValueState`) with a checkpoint every 100 ms against the
//!   same job without checkpoints, interleaved (target 0.9). Beside each: how many checkpoints
//!   completed per run, and how long they took from the source task's barrier to completion.
//! - `small-p1`, `small-p2`, `<N>mib-bytes-p1`, `<N>mib-keyed-p1`: checkpoint duration p50/p99,
//!   trigger to completion, with the sums only (small state) and with N MiB more operator state
//!   (an opaque byte buffer, or a `ValueState` of many keys). The job runs unbounded at full
//!   speed; the driver asks for each checkpoint with `JobHandle::trigger_checkpoint` after a
//!   pause and waits for the operator's `notify_checkpoint_complete`.
//!
//! Checkpoints go to a temporary directory per run, removed afterwards.

mod jobs;
mod timeline;

use super::CommonArgs;
use crate::measure::{Side, interleaved, machine, runtime, timed};
use crate::report::{Report, Row};
use anyhow::Context;
use jobs::{Ballast, Checkpoints, drive, keyed_job, run_bounded};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use timeline::{DurationStats, Marks};
use tokio::runtime::Runtime;

const SCENARIO: &str = "checkpoint";

/// Flags of `checkpoint`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Records per throughput run (default 1 billion, 150 million with --quick).
    #[arg(long)]
    records: Option<u64>,
    /// Checkpoint interval of the throughput cases, in ms.
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    /// Size of the large operator state, in MiB (default 100, 20 with --quick).
    #[arg(long)]
    state_mib: Option<usize>,
    /// Measured checkpoints per small-state case (default 100, 20 with --quick).
    #[arg(long)]
    small_checkpoints: Option<usize>,
    /// Measured checkpoints per large-state case (default 20, 5 with --quick).
    #[arg(long)]
    large_checkpoints: Option<usize>,
    /// Pause between two driven checkpoints, in ms.
    #[arg(long, default_value_t = 100)]
    pause_ms: u64,
    /// Where the checkpoint directories go (each run gets a fresh temporary one, removed
    /// afterwards); default: the system's temporary directory. A tmpfs such as /dev/shm takes
    /// the disk out of the figures.
    #[arg(long)]
    storage_dir: Option<PathBuf>,
    /// Run only these cases (repeatable; default all).
    #[arg(long = "case", value_enum)]
    cases: Vec<Case>,
}

/// The groups of cases that `--case` selects.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    /// `throughput-p1`.
    ThroughputP1,
    /// `throughput-p2`.
    ThroughputP2,
    /// `small-p1` and `small-p2`.
    Small,
    /// `<N>mib-bytes-p1`.
    LargeBytes,
    /// `<N>mib-keyed-p1`.
    LargeKeyed,
}

/// Runs the scenario and prints its report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let records = args
        .records
        .unwrap_or(if quick { 150_000_000 } else { 1_000_000_000 });
    let reps = args.common.reps_or(3, 7);
    let interval = Duration::from_millis(args.interval_ms);
    let state_mib = args.state_mib.unwrap_or(if quick { 20 } else { 100 });
    let small = args
        .small_checkpoints
        .unwrap_or(if quick { 20 } else { 100 });
    let large = args.large_checkpoints.unwrap_or(if quick { 5 } else { 20 });
    let pause = Duration::from_millis(args.pause_ms);
    let storage = Storage(args.storage_dir.clone().unwrap_or_else(std::env::temp_dir));
    let rt = runtime()?;
    let mut report = Report::new(args.common.json);
    let selected = |c: Case| args.cases.is_empty() || args.cases.contains(&c);

    report.progress(&format!(
        "checkpoint on {}: {records} records per throughput run, {reps} timed runs per side, \
         checkpoints every {interval:?}; durations over {small} (small) and {large} ({state_mib} \
         MiB) driven checkpoints, {pause:?} apart; storage under {}",
        machine(),
        storage.0.display()
    ));

    for (case, p) in [(Case::ThroughputP1, 1), (Case::ThroughputP2, 2)] {
        if selected(case) {
            throughput(&mut report, &rt, &storage, records, reps, p, interval)?;
        }
    }
    let driven = Driven {
        storage: &storage,
        pause,
        timeout: Duration::from_secs(120),
    };
    if selected(Case::Small) {
        for p in [1, 2] {
            let name = format!("small-p{p}");
            driven.measure(&mut report, &rt, &name, p, small, Arc::new(Ballast::None))?;
        }
    }
    let bytes = state_mib << 20;
    if selected(Case::LargeBytes) {
        let name = format!("{state_mib}mib-bytes-p1");
        let ballast = Arc::new(Ballast::bytes(bytes));
        driven.measure(&mut report, &rt, &name, 1, large, ballast)?;
    }
    if selected(Case::LargeKeyed) {
        let name = format!("{state_mib}mib-keyed-p1");
        let ballast = Arc::new(Ballast::keyed(bytes));
        driven.measure(&mut report, &rt, &name, 1, large, ballast)?;
    }
    report.finish()
}

/// (a) The keyed job with checkpoints every `interval` against the same job without.
fn throughput(
    report: &mut Report,
    rt: &Runtime,
    storage: &Storage,
    records: u64,
    reps: usize,
    p: usize,
    interval: Duration,
) -> anyhow::Result<()> {
    let case = format!("throughput-p{p}");
    report.progress(&format!(
        "{case}: keyed job with a checkpoint every {interval:?} vs no checkpoints"
    ));
    let none = Arc::new(Ballast::None);
    // Per checkpointed run (the warm-up included): completed checkpoints and their marks.
    let runs: RefCell<Vec<(u64, Vec<Marks>)>> = RefCell::new(Vec::new());
    let t = interleaved(
        reps,
        vec![Side::new("no checkpoints", || {
            let job = keyed_job(Some(records), p, Checkpoints::Off, none.clone());
            timed(|| Ok(rt.block_on(run_bounded(job))?.0))
        })],
        Side::new("checkpoints", || {
            let dir = storage.fresh()?;
            let job = keyed_job(
                Some(records),
                p,
                Checkpoints::Every(interval, dir.path()),
                none.clone(),
            );
            let timeline = job.timeline.clone();
            let mut completed = 0;
            let run = timed(|| {
                let (digest, n) = rt.block_on(run_bounded(job))?;
                completed = n;
                Ok(digest)
            })?;
            let marks = timeline.completed_marks().into_iter().map(|(_, m)| m);
            runs.borrow_mut().push((completed, marks.collect()));
            Ok(run)
        }),
    )?;
    let mut runs = runs.into_inner();
    runs.remove(0); // the warm-up
    let mut counts: Vec<u64> = runs.iter().map(|(n, _)| *n).collect();
    counts.sort_unstable();
    let marks: Vec<Marks> = runs.into_iter().flat_map(|(_, m)| m).collect();
    let stats = DurationStats::of(&marks);
    let mut row = Row::throughput(
        SCENARIO,
        &case,
        records,
        &t.sluice,
        Some(("no checkpoints", &t.baselines[0])),
    )
    .parallelism(p)
    .target(0.9);
    row.detail = Some(serde_json::json!({
        "interval_ms": interval.as_millis() as u64,
        "completed_checkpoints_per_run": counts,
        "barrier_to_complete": stats,
    }));
    report.add(row)?;
    let median = counts.get(counts.len() / 2).copied().unwrap_or(0);
    report.add(
        Row::new(
            SCENARIO,
            format!("completed-p{p}"),
            "completed_checkpoints",
            "per run",
            median as f64,
        )
        .parallelism(p),
    )?;
    if let Some(s) = stats {
        report.progress(&format!(
            "{case}: {} checkpoints over the timed runs, barrier at the source to completion \
             p50 {:.1} ms, p99 {:.1} ms",
            s.checkpoints, s.p50_ms, s.p99_ms
        ));
    }
    Ok(())
}

/// (b) Driven checkpoints of an unbounded job, timed from trigger to completion.
struct Driven<'a> {
    storage: &'a Storage,
    pause: Duration,
    timeout: Duration,
}

impl Driven<'_> {
    fn measure(
        &self,
        report: &mut Report,
        rt: &Runtime,
        case: &str,
        p: usize,
        count: usize,
        ballast: Arc<Ballast>,
    ) -> anyhow::Result<()> {
        report.progress(&format!(
            "{case}: {count} checkpoints (after 1 warm-up) of the unbounded keyed job at \
             parallelism {p}, each {:?} after the previous one completed",
            self.pause
        ));
        let dir = self.storage.fresh()?;
        let job = keyed_job(None, p, Checkpoints::Driven(dir.path()), ballast);
        let ids = rt.block_on(drive(&job, 1, count, self.pause, self.timeout))?;
        let on_disk = dir_size(dir.path())?;
        let marks: Vec<Marks> = job
            .timeline
            .completed_marks()
            .into_iter()
            .filter(|(id, _)| ids.contains(id))
            .map(|(_, m)| m)
            .collect();
        let stats = DurationStats::of(&marks).context("no checkpoint completed")?;
        let phases = |ph: &timeline::Phases| {
            format!(
                "trigger->barrier {:.1}, barrier->snapshot {:.1}, snapshot {:.1}, \
                 snapshot->complete {:.1}",
                ph.trigger_to_barrier.unwrap_or(0.0),
                ph.barrier_to_snapshot,
                ph.snapshot,
                ph.snapshot_to_complete
            )
        };
        report.progress(&format!(
            "{case}: {} checkpoints of {:.1} MiB operator state ({:.1} MiB on disk): p50 {:.1} ms \
             ({}), p99 {:.1} ms ({}), ms",
            stats.checkpoints,
            stats.state_bytes as f64 / (1 << 20) as f64,
            on_disk as f64 / (1 << 20) as f64,
            stats.p50_ms,
            phases(&stats.phases_p50_ms),
            stats.p99_ms,
            phases(&stats.phases_p99_ms),
        ));
        let detail = serde_json::json!({
            "stats": stats,
            "on_disk_bytes_last_checkpoint": on_disk,
            "pause_ms": self.pause.as_millis() as u64,
        });
        for (metric, value) in [
            ("duration_p50", stats.p50_ms),
            ("duration_p99", stats.p99_ms),
        ] {
            let mut row = Row::new(SCENARIO, case, metric, "ms", value).parallelism(p);
            row.detail = Some(detail.clone());
            report.add(row)?;
        }
        Ok(())
    }
}

/// Where checkpoint directories are created.
struct Storage(PathBuf);

impl Storage {
    /// A fresh, empty directory, removed when dropped.
    fn fresh(&self) -> anyhow::Result<tempfile::TempDir> {
        std::fs::create_dir_all(&self.0)
            .and_then(|()| {
                tempfile::Builder::new()
                    .prefix("sluice-bench-")
                    .tempdir_in(&self.0)
            })
            .with_context(|| format!("creating a checkpoint directory in {}", self.0.display()))
    }
}

/// Total size of the files under `dir`.
fn dir_size(dir: &Path) -> anyhow::Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            dir_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenarios::pipeline::baselines::keyed_loop_fx;

    /// Checkpointing must not change the result, and the job must compute the pipeline's sums.
    #[test]
    fn checkpointed_and_plain_jobs_compute_the_pipelines_sums() {
        let rt = runtime().unwrap();
        let n = 300_007;
        let expected = keyed_loop_fx(n);
        let none = Arc::new(Ballast::None);
        for p in [1, 2] {
            let plain = keyed_job(Some(n), p, Checkpoints::Off, none.clone());
            assert_eq!(rt.block_on(run_bounded(plain)).unwrap(), (expected, 0));
            let dir = tempfile::tempdir().unwrap();
            let every = Checkpoints::Every(Duration::from_millis(1), dir.path());
            let job = keyed_job(Some(n), p, every, none.clone());
            let timeline = job.timeline.clone();
            let (digest, completed) = rt.block_on(run_bounded(job)).unwrap();
            assert_eq!(digest, expected);
            // At least the final checkpoint, with the sums in it.
            assert!(completed >= 1);
            let marks = timeline.completed_marks();
            assert!(marks.iter().any(|(_, m)| m.state_bytes > 0), "{marks:?}");
        }
    }

    #[test]
    fn driven_checkpoints_are_timed_from_trigger_to_completion_with_the_ballast() {
        let rt = runtime().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ballast = Arc::new(Ballast::bytes(1 << 16));
        let job = keyed_job(None, 1, Checkpoints::Driven(dir.path()), ballast);
        let ids = rt
            .block_on(drive(&job, 1, 3, Duration::ZERO, Duration::from_secs(60)))
            .unwrap();
        assert_eq!(ids.len(), 3);
        let marks: Vec<Marks> = job
            .timeline
            .completed_marks()
            .into_iter()
            .filter(|(id, _)| ids.contains(id))
            .map(|(_, m)| m)
            .collect();
        assert_eq!(marks.len(), 3);
        for m in &marks {
            assert!(m.trigger.is_some() && m.source.is_some());
            assert!(m.state_bytes >= 1 << 16, "{m:?}");
        }
        assert!(dir_size(dir.path()).unwrap() >= 1 << 16);
    }

    #[test]
    fn keyed_ballast_encodes_to_about_the_requested_size() {
        let Ballast::Keyed(state) = Ballast::keyed(1 << 20) else {
            panic!("not keyed");
        };
        let mut snapshot = sluice::OperatorState::default();
        state
            .into_inner()
            .unwrap()
            .snapshot_into(128, &mut snapshot)
            .unwrap();
        let bytes: usize = snapshot.keyed_entries().iter().map(|e| e.data.len()).sum();
        assert!((800_000..1_300_000).contains(&bytes), "{bytes}");
    }
}
