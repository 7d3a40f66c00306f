//! Scenario `pipeline`: one job, u64 records through generator -> map -> filter -> key_by ->
//! sum-per-key sink, against hand-written baselines run interleaved in the same process:
//!
//! - `keyed-p1-fxhash`: the whole job at parallelism 1 (every operator, `key_by` included, is
//!   chained into one task) against a plain loop doing the same arithmetic with the same hasher
//!   (`FxHashMap`): issue 2's "chained pipeline at parallelism 1" (target 0.9);
//! - `keyed-p1`: the same job against a plain loop over `std::collections::HashMap` (target 1.0);
//! - `keyed-p2`: the job at parallelism 2 (a hash exchange between two source tasks and two sink
//!   tasks) against the same topology in plain threads and bounded crossbeam channels with the
//!   same batching (target 0.7);
//! - `chain-p1`: the chain without a key (generator -> map -> filter -> sum) at parallelism 1
//!   against one fused loop (issue 11: 0.8); it isolates what chaining costs when the
//!   per-record work is a few instructions;
//! - `chain-p1-fused-op`, `chain-p1-source-only` (only with `--case chain-bounds`): what bounds
//!   `chain-p1` from above: the same chain with map and filter fused by hand into one operator,
//!   and with no operator at all (the generator maps and filters, the sink sums);
//! - `peak-rss-p1`, `peak-rss-p2`: peak memory of the keyed job at 10x the records against 1x,
//!   each in a fresh process (the ratio is 1 when memory does not grow with the record count).
//!
//! `--case` selects some of them, e.g. for profiling one.

pub(crate) mod baselines;
mod jobs;
mod memory;
pub(crate) mod workload;

pub use memory::probe;

use super::CommonArgs;
use crate::measure::{Side, interleaved, machine, runtime, timed};
use crate::report::{Report, Row};
use tokio::runtime::Runtime;

const SCENARIO: &str = "pipeline";

/// Flags of `pipeline`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Records per timed run (default 20 million, 2 million with --quick).
    #[arg(long)]
    records: Option<u64>,
    /// Run only these cases (repeatable; default all).
    #[arg(long = "case", value_enum)]
    cases: Vec<Case>,
}

/// The groups of cases that `--case` selects.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    /// `keyed-p1-fxhash` and `keyed-p1`.
    KeyedP1,
    /// `keyed-p2`.
    KeyedP2,
    /// `chain-p1`.
    ChainP1,
    /// `chain-p1-fused-op` and `chain-p1-source-only` (informational; only when selected).
    ChainBounds,
    /// `peak-rss-p1` and `peak-rss-p2`.
    Memory,
}

/// Flags of the hidden memory probe.
#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// Records to generate.
    #[arg(long)]
    records: u64,
    /// Parallelism of the job.
    #[arg(long)]
    parallelism: usize,
}

/// Runs the scenario and prints its report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let records = args
        .records
        .unwrap_or(if quick { 2_000_000 } else { 20_000_000 });
    let reps = args.common.reps();
    let rt = runtime()?;
    let mut report = Report::new(args.common.json);
    let selected = |c: Case| args.cases.is_empty() || args.cases.contains(&c);

    report.progress(&format!(
        "pipeline on {}: {records} records per run, {reps} timed runs per side, medians",
        machine()
    ));

    if selected(Case::KeyedP1) {
        keyed_p1(&mut report, &rt, records, reps)?;
    }
    if selected(Case::KeyedP2) {
        keyed_p2(&mut report, &rt, records, reps)?;
    }
    if selected(Case::ChainP1) {
        chain_p1(&mut report, &rt, records, reps)?;
    }
    if args.cases.contains(&Case::ChainBounds) {
        chain_bounds(&mut report, &rt, records, reps)?;
    }
    if selected(Case::Memory) {
        peak_memory(&mut report, records)?;
    }
    report.finish()
}

fn chain_p1(report: &mut Report, rt: &Runtime, records: u64, reps: usize) -> anyhow::Result<()> {
    report.progress("chain-p1: sluice generator->map->filter->sum vs a plain loop");
    let t = interleaved(
        reps,
        vec![Side::new("plain loop", || {
            timed(|| Ok(baselines::chain_loop(records)))
        })],
        Side::new("sluice", || timed(|| rt.block_on(jobs::chain(records, 1)))),
    )?;
    // Issue 2's "chained pipeline" is the keyed job (`keyed-p1-fxhash`); issue 11 gave this
    // case, what chaining costs on its own, a target of 0.8 (see BENCHMARKS.md for why it is
    // out of reach of operator fusion: `--case chain-bounds`).
    report.add(
        Row::throughput(
            SCENARIO,
            "chain-p1",
            records,
            &t.sluice,
            Some(("plain loop", &t.baselines[0])),
        )
        .parallelism(1)
        .target(0.8),
    )
}

/// What bounds `chain-p1`: map and filter fused by hand into one operator, and no operator.
fn chain_bounds(
    report: &mut Report,
    rt: &Runtime,
    records: u64,
    reps: usize,
) -> anyhow::Result<()> {
    type Job = fn(u64) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<u64>>>>;
    let cases: [(&str, &str, Job); 2] = [
        (
            "chain-p1-fused-op",
            "chain-p1-fused-op: sluice generator->(map+filter as one operator)->sum vs a plain loop",
            |n| Box::pin(jobs::chain_fused_operator(n)),
        ),
        (
            "chain-p1-source-only",
            "chain-p1-source-only: sluice generator (mapping and filtering)->sum vs a plain loop",
            |n| Box::pin(jobs::chain_source_only(n)),
        ),
    ];
    for (case, progress, job) in cases {
        report.progress(progress);
        let t = interleaved(
            reps,
            vec![Side::new("plain loop", || {
                timed(|| Ok(baselines::chain_loop(records)))
            })],
            Side::new("sluice", || timed(|| rt.block_on(job(records)))),
        )?;
        report.add(
            Row::throughput(
                SCENARIO,
                case,
                records,
                &t.sluice,
                Some(("plain loop", &t.baselines[0])),
            )
            .parallelism(1),
        )?;
    }
    Ok(())
}

fn keyed_p1(report: &mut Report, rt: &Runtime, records: u64, reps: usize) -> anyhow::Result<()> {
    report.progress(
        "keyed-p1: the whole keyed job at parallelism 1 vs plain loops over FxHashMap and HashMap",
    );
    let t = interleaved(
        reps,
        vec![
            Side::new("loop std HashMap", || {
                timed(|| Ok(baselines::keyed_loop_std(records)))
            }),
            Side::new("loop FxHashMap", || {
                timed(|| Ok(baselines::keyed_loop_fx(records)))
            }),
        ],
        Side::new("sluice", || timed(|| rt.block_on(jobs::keyed(records, 1)))),
    )?;
    // The chained pipeline at parallelism 1 against a loop with the same hasher (issue 2: 0.9),
    // then the keyed sum against a loop over the standard HashMap (issue 2: 1.0).
    report.add(
        Row::throughput(
            SCENARIO,
            "keyed-p1-fxhash",
            records,
            &t.sluice,
            Some(("loop FxHashMap", &t.baselines[1])),
        )
        .parallelism(1)
        .target(0.9),
    )?;
    report.add(
        Row::throughput(
            SCENARIO,
            "keyed-p1",
            records,
            &t.sluice,
            Some(("loop std HashMap", &t.baselines[0])),
        )
        .parallelism(1)
        .target(1.0),
    )
}

fn keyed_p2(report: &mut Report, rt: &Runtime, records: u64, reps: usize) -> anyhow::Result<()> {
    report.progress("keyed-p2: sluice keyed sum at parallelism 2 vs 2+2 threads over crossbeam");
    // The baseline batches and buffers like the sluice job, which runs with the defaults.
    let config = sluice::JobConfig::default();
    let (batch, capacity) = (config.batch_size, config.channel_capacity);
    let t = interleaved(
        reps,
        vec![Side::new("crossbeam 2+2 threads", || {
            timed(|| Ok(baselines::keyed_crossbeam(records, 2, batch, capacity)))
        })],
        Side::new("sluice", || timed(|| rt.block_on(jobs::keyed(records, 2)))),
    )?;
    report.add(
        Row::throughput(
            SCENARIO,
            "keyed-p2",
            records,
            &t.sluice,
            Some(("crossbeam 2+2 threads", &t.baselines[0])),
        )
        .parallelism(2)
        .target(0.7),
    )
}

/// Peak memory of the keyed job at 10x `records` against 1x, each in a fresh process.
fn peak_memory(report: &mut Report, records: u64) -> anyhow::Result<()> {
    let big = records * 10;
    for p in [1, 2] {
        report.progress(&format!(
            "peak-rss-p{p}: keyed job with {records} then {big} records, each in a fresh process"
        ));
        let small = memory::run_probe(records, p)?;
        let large = memory::run_probe(big, p)?;
        let mib = |kib: u64| kib as f64 / 1024.0;
        let name = format!("same job, {records} records");
        report.add(
            Row::new(
                SCENARIO,
                format!("peak-rss-p{p}"),
                "peak_rss",
                "MiB",
                mib(large.vm_hwm_kib),
            )
            .against(
                &name,
                mib(small.vm_hwm_kib),
                small.vm_hwm_kib as f64 / large.vm_hwm_kib.max(1) as f64,
            )
            .records(big)
            .parallelism(p),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The benchmark is only honest if sluice and the baselines compute the same thing.
    #[test]
    fn sluice_jobs_and_baselines_agree() {
        let rt = runtime().unwrap();
        let n = 100_003;
        let chain = baselines::chain_loop(n);
        assert_eq!(rt.block_on(jobs::chain(n, 1)).unwrap(), chain);
        assert_eq!(rt.block_on(jobs::chain(n, 2)).unwrap(), chain);
        assert_eq!(rt.block_on(jobs::chain_fused_operator(n)).unwrap(), chain);
        assert_eq!(rt.block_on(jobs::chain_source_only(n)).unwrap(), chain);

        let keyed = baselines::keyed_loop_std(n);
        assert_eq!(baselines::keyed_loop_fx(n), keyed);
        assert_eq!(baselines::keyed_crossbeam(n, 2, 1024, 4), keyed);
        assert_eq!(baselines::keyed_crossbeam(n, 3, 7, 1), keyed);
        assert_eq!(rt.block_on(jobs::keyed(n, 1)).unwrap(), keyed);
        assert_eq!(rt.block_on(jobs::keyed(n, 2)).unwrap(), keyed);
        assert_ne!(baselines::keyed_loop_std(n - 1), keyed);
    }
}
