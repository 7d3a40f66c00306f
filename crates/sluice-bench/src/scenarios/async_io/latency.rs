//! Scenario `async-latency`: does the async wait operator keep its capacity busy when the I/O is
//! slow? Every request waits 10 ms on the tokio timer; capacity 100 per subtask; parallelism 1,
//! 2 and 4 (unordered, 60 s timeout).
//!
//! Little's law bounds the throughput at `parallelism × capacity / W`, where `W` is the mean
//! request latency. tokio rounds a 10 ms sleep up to its next 1 ms tick and wakes it a little
//! later still, so `W` is measured on every call rather than assumed (see
//! [`LatencySource`]). Per parallelism two rows:
//!
//! - `throughput_vs_limit`: sluice's throughput against the limit computed from the latency its
//!   own requests had (target 0.95);
//! - `throughput`: sluice against `buffer_unordered(100)` streams (one tokio task per "subtask")
//!   driving the same latency source in the same run, with the baseline's own fraction of its
//!   limit in `detail`.
//!
//! Throughput is records over the whole run's wall-clock time (job start-up and the last,
//! partly filled wave included), so a run lasts about 2 s (1 s with `--quick`) to keep those
//! edges small.

use super::workload::LatencySource;
use super::{CAPACITY, baselines, jobs};
use crate::measure::{Side, interleaved, machine, median, per_second, runtime, timed};
use crate::report::{Report, Row};
use crate::scenarios::CommonArgs;
use std::cell::RefCell;
use std::time::Duration;
use tokio::runtime::Runtime;

const SCENARIO: &str = "async-latency";

/// Issue 5's target: the fraction of the Little's-law limit reached.
const TARGET: f64 = 0.95;

/// What every request waits.
const DELAY: Duration = Duration::from_millis(10);

/// Flags of `async-latency`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Records per subtask and run (default 18 000, about 2 s; 9 000 with --quick).
    #[arg(long)]
    per_subtask: Option<u64>,
    /// Parallelisms to run (repeatable; default 1, 2 and 4).
    #[arg(long = "parallelism")]
    parallelisms: Vec<usize>,
}

/// One run of one side: its wall-clock time and the latency its requests really had.
#[derive(Clone, Copy, Debug)]
struct Measured {
    elapsed: Duration,
    mean_latency: Duration,
}

impl Measured {
    fn rate(&self, records: u64) -> f64 {
        per_second(records, self.elapsed)
    }

    /// Little's law: the most records per second `parallelism × CAPACITY` slots can complete
    /// when each request takes `mean_latency`.
    fn limit(&self, parallelism: usize) -> f64 {
        (parallelism * CAPACITY) as f64 / self.mean_latency.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    fn fraction(&self, records: u64, parallelism: usize) -> f64 {
        self.rate(records) / self.limit(parallelism)
    }
}

/// Runs the scenario and prints its report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let per_subtask = args
        .per_subtask
        .unwrap_or(if quick { 9_000 } else { 18_000 });
    let parallelisms = if args.parallelisms.is_empty() {
        vec![1, 2, 4]
    } else {
        args.parallelisms.clone()
    };
    let reps = args.common.reps_or(2, 3);
    let rt = runtime()?;
    let mut report = Report::new(args.common.json);
    report.progress(&format!(
        "{SCENARIO} on {}: {DELAY:?} per request, capacity {CAPACITY}, {per_subtask} records \
         per subtask and run, {reps} timed runs per side, medians",
        machine()
    ));
    for p in parallelisms {
        anyhow::ensure!(p >= 1, "parallelism must be at least 1");
        one_parallelism(&mut report, &rt, per_subtask * p as u64, p, reps)?;
    }
    report.finish()
}

/// Runs one side once with a fresh latency source and records what it measured.
fn run_with_source(
    log: &RefCell<Vec<Measured>>,
    records: u64,
    f: impl FnOnce(LatencySource) -> anyhow::Result<u64>,
) -> anyhow::Result<crate::measure::Run> {
    let source = LatencySource::new(DELAY);
    let run = timed(|| f(source.clone()))?;
    let (calls, mean_latency) = source.measured();
    anyhow::ensure!(
        calls == records,
        "{calls} requests completed, expected {records}"
    );
    log.borrow_mut().push(Measured {
        elapsed: run.elapsed,
        mean_latency,
    });
    Ok(run)
}

fn one_parallelism(
    report: &mut Report,
    rt: &Runtime,
    records: u64,
    p: usize,
    reps: usize,
) -> anyhow::Result<()> {
    let baseline = format!("{p} x futures buffer_unordered(100)");
    report.progress(&format!(
        "latency-p{p}: sluice async wait at parallelism {p} vs {baseline}, {records} records"
    ));
    let (sluice_log, base_log) = (RefCell::new(Vec::new()), RefCell::new(Vec::new()));
    interleaved(
        reps,
        vec![Side::new(baseline.clone(), || {
            run_with_source(&base_log, records, |source| {
                baselines::latency_buffer_unordered(rt, records, p, &source)
            })
        })],
        Side::new("sluice", || {
            run_with_source(&sluice_log, records, |source| {
                rt.block_on(jobs::latency_job(records, p, source))
            })
        }),
    )?;
    // The first run of each side was the untimed warm-up.
    let sluice: Vec<Measured> = sluice_log.into_inner().into_iter().skip(1).collect();
    let base: Vec<Measured> = base_log.into_inner().into_iter().skip(1).collect();

    let rates = |runs: &[Measured]| -> Vec<f64> { runs.iter().map(|m| m.rate(records)).collect() };
    let elapsed = |runs: &[Measured]| -> Vec<Duration> { runs.iter().map(|m| m.elapsed).collect() };
    let latency =
        |runs: &[Measured]| median(&runs.iter().map(|m| m.mean_latency).collect::<Vec<_>>());
    let fractions =
        |runs: &[Measured]| -> Vec<f64> { runs.iter().map(|m| m.fraction(records, p)).collect() };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;

    let value = per_second(records, median(&elapsed(&sluice))).round();
    let w = latency(&sluice);
    let limit = Measured {
        elapsed: Duration::ZERO,
        mean_latency: w,
    }
    .limit(p)
    .round();
    let case = format!("latency-p{p}");
    let mut row = Row::new(SCENARIO, &case, "throughput_vs_limit", "records/s", value)
        .against(
            &format!(
                "Little's law: {p} x {CAPACITY} / W, W = {:.2} ms measured",
                ms(w)
            ),
            limit,
            value / limit,
        )
        .records(records)
        .parallelism(p)
        .target(TARGET);
    row.values = rates(&sluice);
    row.detail = Some(serde_json::json!({
        "mean_latency_ms": sluice.iter().map(|m| ms(m.mean_latency)).collect::<Vec<_>>(),
        "limit_fraction": fractions(&sluice),
    }));
    report.add(row)?;

    let mut row = Row::throughput(
        SCENARIO,
        &case,
        records,
        &elapsed(&sluice),
        Some((&baseline, &elapsed(&base))),
    )
    .parallelism(p);
    let base_w = latency(&base);
    row.detail = Some(serde_json::json!({
        "baseline_mean_latency_ms": ms(base_w),
        "baseline_limit_fraction": fractions(&base),
        "baseline_limit_fraction_median": per_second(records, median(&elapsed(&base)))
            / Measured { elapsed: Duration::ZERO, mean_latency: base_w }.limit(p),
    }));
    report.add(row)
}
