//! Scenario `async-overhead`: what the async wait operator costs per record when the I/O costs
//! nothing. A function whose future is ready at once, capacity 100, parallelism 1, a 60 s
//! timeout on every request; cases `ordered` and `unordered`, each against `futures`
//! `buffered` / `buffer_unordered` over the same records, interleaved (target 1.4: faster than
//! bare futures buffering while doing more).

use super::{baselines, jobs};
use crate::measure::{Side, interleaved, machine, runtime, timed};
use crate::report::{Report, Row};
use crate::scenarios::CommonArgs;
use tokio::runtime::Runtime;

const SCENARIO: &str = "async-overhead";

/// Issue 5's target: sluice's throughput over the baseline's.
const TARGET: f64 = 1.4;

/// Flags of `async-overhead`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Records per timed run (default 20 million, 2 million with --quick).
    #[arg(long)]
    records: Option<u64>,
    /// Run only this case (default both).
    #[arg(long = "case", value_enum)]
    case: Option<Case>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Case {
    /// Results in input order, against `buffered`.
    Ordered,
    /// Results as they complete, against `buffer_unordered`.
    Unordered,
}

/// Runs the scenario and prints its report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let records = args
        .records
        .unwrap_or(if quick { 2_000_000 } else { 20_000_000 });
    let reps = args.common.reps_or(7, 11);
    let rt = runtime()?;
    let mut report = Report::new(args.common.json);
    report.progress(&format!(
        "{SCENARIO} on {}: {records} records per run, {reps} timed runs per side, medians",
        machine()
    ));
    for (case, ordered) in [(Case::Ordered, true), (Case::Unordered, false)] {
        if args.case.is_none_or(|c| c == case) {
            one_case(&mut report, &rt, records, reps, ordered)?;
        }
    }
    report.finish()
}

fn one_case(
    report: &mut Report,
    rt: &Runtime,
    records: u64,
    reps: usize,
    ordered: bool,
) -> anyhow::Result<()> {
    let (case, baseline) = if ordered {
        ("ordered", "futures buffered(100)")
    } else {
        ("unordered", "futures buffer_unordered(100)")
    };
    report.progress(&format!(
        "{case}: sluice async wait (immediate function) vs {baseline}"
    ));
    let t = interleaved(
        reps,
        vec![Side::new(baseline, || {
            timed(|| baselines::immediate_buffered(rt, records, ordered))
        })],
        Side::new("sluice", || {
            timed(|| rt.block_on(jobs::immediate_job(records, ordered)))
        }),
    )?;
    report.add(
        Row::throughput(
            SCENARIO,
            case,
            records,
            &t.sluice,
            Some((baseline, &t.baselines[0])),
        )
        .parallelism(1)
        .target(TARGET),
    )
}
