//! Scenario `source` (issue 9): `FileSource` reading JSON lines, beside a plain buffered
//! read-and-parse loop over the same files with the same serde decoder, in the same run.
//!
//! - `p1`: the job at parallelism 1 against the loop (records/s, and MB/s of input in
//!   `detail`); target ≥ 0.8 of the loop;
//! - `p2`: the job at parallelism 2 against its own parallelism-1 rate; target ≥ 1.6;
//! - `loop-x2`: the loop on 2 threads (each over every other file) against the loop on one:
//!   what this machine gives the same work on its second core, the ceiling `p2` is judged by.
//!
//! `detail` also holds each side's process CPU time per run (median): on a shared machine the
//! wall-clock rate of `p2` depends on how much of the second core is free, its CPU time does
//! not. Both sides sum the decoded ids, and every run must agree on the sum. The files are written
//! once into a temporary directory before the timed runs (and are in the page cache by then:
//! this measures reading and decoding, not the disk).

mod workload;

use super::CommonArgs;
use crate::measure::{Run, Side, interleaved, machine, median, process_cpu_time, runtime, timed};
use crate::report::{Report, Row};
use std::cell::RefCell;
use std::time::Duration;
use workload::{baseline_loop, baseline_loop_threads, job, write_files};

const SCENARIO: &str = "source";

/// Flags of `source`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Input files (default 32, 16 with --quick).
    #[arg(long)]
    files: Option<u64>,
    /// Lines per file (default 100 000, 25 000 with --quick).
    #[arg(long)]
    lines: Option<u64>,
}

/// Runs the scenario and prints its report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let files = args.files.unwrap_or(if quick { 16 } else { 32 });
    let lines = args.lines.unwrap_or(if quick { 25_000 } else { 100_000 });
    let reps = args.common.reps_or(5, 9);
    let rt = runtime()?;
    let dir = tempfile::tempdir()?;
    let bytes = write_files(dir.path(), files, lines)?;
    let records = files * lines;
    let mut report = Report::new(args.common.json);
    report.progress(&format!(
        "{SCENARIO} on {}: {files} files of {lines} JSON lines ({:.1} MB), {reps} timed runs per side",
        machine(),
        bytes as f64 / 1e6
    ));
    let loop_name = "BufReader + serde_json loop";
    // CPU time per run of each side: beside the wall clock, it shows what a run costs whatever
    // share of the 2 cores the machine's other work left it.
    let cpu: [RefCell<Vec<Duration>>; 4] = Default::default();
    let t = interleaved(
        reps,
        vec![
            Side::new(loop_name, || {
                cpu_timed(&cpu[0], || timed(|| baseline_loop(dir.path())))
            }),
            Side::new("sluice p1", || {
                cpu_timed(&cpu[1], || timed(|| rt.block_on(job(dir.path(), 1))))
            }),
            Side::new("loop on 2 threads", || {
                cpu_timed(&cpu[3], || timed(|| baseline_loop_threads(dir.path(), 2)))
            }),
        ],
        Side::new("sluice p2", || {
            cpu_timed(&cpu[2], || timed(|| rt.block_on(job(dir.path(), 2))))
        }),
    )?;
    let (loop_runs, p1, loop2, p2) = (&t.baselines[0], &t.baselines[1], &t.baselines[2], &t.sluice);
    let mb = |d: Duration| bytes as f64 / d.as_secs_f64().max(f64::MIN_POSITIVE) / 1e6;
    let cpu_s = |i: usize| {
        let runs: Vec<Duration> = cpu[i].borrow().iter().skip(1).copied().collect();
        median(&runs).as_secs_f64()
    };
    let detail = |runs: &[Duration], side: usize| {
        serde_json::json!({
            "mb_per_s": mb(median(runs)),
            "baseline_mb_per_s": mb(median(loop_runs)),
            "input_mb": bytes as f64 / 1e6,
            "cpu_s_per_run": cpu_s(side),
            "loop_cpu_s_per_run": cpu_s(0),
        })
    };
    let mut row = Row::throughput(SCENARIO, "p1", records, p1, Some((loop_name, loop_runs)))
        .parallelism(1)
        .target(0.8);
    row.detail = Some(detail(p1, 1));
    report.add(row)?;
    let mut row = Row::throughput(SCENARIO, "p2", records, p2, Some(("sluice p1", p1)))
        .parallelism(2)
        .target(1.6);
    row.detail = Some(detail(p2, 2));
    report.add(row)?;
    // Not sluice: the machine's own scaling of the loop, for reading `p2`.
    let mut row = Row::throughput(
        SCENARIO,
        "loop-x2",
        records,
        loop2,
        Some((loop_name, loop_runs)),
    )
    .parallelism(2);
    row.detail = Some(detail(loop2, 3));
    report.add(row)?;
    report.finish()
}

/// Runs `f`, logging the process CPU time it took into `log`.
fn cpu_timed(
    log: &RefCell<Vec<Duration>>,
    f: impl FnOnce() -> anyhow::Result<Run>,
) -> anyhow::Result<Run> {
    let before = process_cpu_time()?;
    let run = f()?;
    log.borrow_mut()
        .push(process_cpu_time()?.saturating_sub(before));
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both sides decode every line and agree on the sum of the ids.
    #[test]
    fn the_job_and_the_loop_agree() {
        let dir = tempfile::tempdir().unwrap();
        write_files(dir.path(), 3, 500).unwrap();
        let expected = (0..1500u64).sum::<u64>();
        assert_eq!(baseline_loop(dir.path()).unwrap(), expected);
        assert_eq!(baseline_loop_threads(dir.path(), 2).unwrap(), expected);
        let rt = runtime().unwrap();
        assert_eq!(rt.block_on(job(dir.path(), 1)).unwrap(), expected);
        assert_eq!(rt.block_on(job(dir.path(), 2)).unwrap(), expected);
    }
}
