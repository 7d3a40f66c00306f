//! `shuffle-skew`: see the [parent module](super).

use super::{WeightedKeys, long_tail, skew};
use crate::measure::machine;
use crate::report::{Report, Row};
use crate::scenarios::CommonArgs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice::key_groups::{key_group, subtask_for_key_group};
use sluice::shuffle::aggregation::{StatisticsTracker, TrackerSettings, Update};
use sluice::shuffle::statistics::Reservoir;
use sluice::shuffle::{
    CompletedData, CompletedStatistics, GlobalStatistics, LocalStatistics, RangeRouter,
    ReservoirSizing, RouteTable, Routing, StatisticsType,
};
use std::sync::Arc;

const SCENARIO: &str = "shuffle-skew";
const MAX_PARALLELISM: usize = 128;
/// Upstream (shuffle operator) subtasks feeding the Sketch statistics.
const OPERATORS: usize = 4;

/// Flags of `shuffle-skew`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Seeded runs per case (default 100, 10 with --quick).
    #[arg(long)]
    runs: Option<u64>,
    /// Records per Sketch run (default 1,000,000).
    #[arg(long)]
    records: Option<u64>,
}

/// Iceberg's reported mean skews (`TestRangePartitionerSkew`, 100 iterations).
fn iceberg_reported(sketch: bool, n: usize) -> f64 {
    match (sketch, n) {
        (false, 8) => 0.0124,
        (false, _) => 0.0183,
        (true, 8) => 0.0192,
        (true, _) => 0.0426,
    }
}

fn hash_subtask(key: &impl std::hash::Hash, n: usize) -> usize {
    subtask_for_key_group(key_group(key, MAX_PARALLELISM), MAX_PARALLELISM, n)
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

fn pct(x: f64) -> f64 {
    (x * 1e4).round() / 1e2
}

/// Runs the scenario and prints its report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let runs = args
        .runs
        .unwrap_or(if args.common.quick { 10 } else { 100 });
    let records = args.records.unwrap_or(1_000_000);
    let mut report = Report::new(args.common.json);
    report.progress(&format!(
        "{SCENARIO} on {}: {runs} seeded runs per case; Map draws 100,000 (p8) or 400,000 (p32) \
         records like Iceberg's test, Sketch routes {records} fresh random 128-bit ids",
        machine()
    ));
    for n in [8, 32] {
        map_case(&mut report, n, runs)?;
    }
    for n in [8, 32] {
        sketch_case(&mut report, n, runs, records)?;
    }
    report.finish()
}

/// One case's identity: its name, downstream parallelism, records per run and Iceberg's
/// reported mean skew.
struct Case {
    name: String,
    n: usize,
    records: u64,
    reported: f64,
}

fn rows(
    report: &mut Report,
    c: Case,
    sluice: &[f64],
    hash: &[f64],
    iceberg_rule: (&str, &[f64]),
) -> anyhow::Result<()> {
    let Case {
        name: case,
        n,
        records,
        reported,
    } = c;
    let (s, h, i) = (mean(sluice), mean(hash), mean(iceberg_rule.1));
    let detail = serde_json::json!({
        "sluice_max": pct(sluice.iter().cloned().fold(0.0, f64::max)),
        "hash_mean_pct": pct(h),
        iceberg_rule.0: pct(i),
        "iceberg_reported_pct": pct(reported),
    });
    let mut vs_hash = Row::new(SCENARIO, case.clone(), "mean skew vs hash", "%", pct(s))
        .against("hash partitioning", pct(h), h / s)
        .records(records)
        .parallelism(n);
    if case.starts_with("map") {
        vs_hash = vs_hash.target(10.0);
    }
    vs_hash.detail = Some(detail);
    report.add(vs_hash)?;
    report.add(
        Row::new(SCENARIO, case.clone(), "mean skew vs Iceberg", "%", pct(s))
            .against("Iceberg's reported mean", pct(reported), reported / s)
            .target(1.0)
            .records(records)
            .parallelism(n),
    )?;
    report.add(
        Row::new(SCENARIO, case, "mean skew vs Iceberg rule", "%", pct(s))
            .against(iceberg_rule.0, pct(i), i / s)
            .records(records)
            .parallelism(n),
    )
}

/// Map statistics on the long tail: the exact weights are the statistics (as in Iceberg's
/// test), the records are drawn from them afterwards.
fn map_case(report: &mut Report, n: usize, runs: u64) -> anyhow::Result<()> {
    let records: u64 = if n == 8 { 100_000 } else { 400_000 };
    report.progress(&format!(
        "map-long-tail-p{n}: {runs} runs of {records} records"
    ));
    let (mut sluice, mut random, mut hash) = (Vec::new(), Vec::new(), Vec::new());
    for seed in 0..runs {
        let weights = long_tail(seed);
        let completed = CompletedStatistics {
            checkpoint: 1,
            downstream_parallelism: n,
            data: CompletedData::Map(weights.iter().map(|(k, w)| (*k, *w)).collect()),
        };
        let global = GlobalStatistics::compute(&completed, n, 0.0)?;
        let Routing::Map(assignment) = &global.routing else {
            anyhow::bail!("expected a map assignment");
        };
        let mut router = RangeRouter::new(Arc::new(RouteTable::new(&global)), seed);
        let keys = WeightedKeys::new(&weights);
        let mut rng = StdRng::seed_from_u64(seed ^ 0xABCD);
        let mut choice = StdRng::seed_from_u64(seed ^ 0x1234);
        let (mut a, mut b, mut c) = (vec![0u64; n], vec![0u64; n], vec![0u64; n]);
        for _ in 0..records {
            let key = keys.draw(&mut rng);
            a[router.route(&key, n)] += 1;
            let k = assignment
                .get(&key)
                .ok_or_else(|| anyhow::anyhow!("key {key} not assigned"))?;
            b[k.select_random(&mut |bound| choice.random_range(0..bound))] += 1;
            c[hash_subtask(&key, n)] += 1;
        }
        sluice.push(skew(&a));
        random.push(skew(&b));
        hash.push(skew(&c));
    }
    let case = Case {
        name: format!("map-long-tail-p{n}"),
        n,
        records,
        reported: iceberg_reported(false, n),
    };
    rows(
        report,
        case,
        &sluice,
        &hash,
        ("iceberg_random_choice_pct", &random),
    )
}

/// The statistics a Sketch run produces with `sizing`: 4 operator subtasks sample their share
/// of the ids with Iceberg's operator reservoir, the tracker merges them.
fn sketch_bounds(
    ids: &[u128],
    n: usize,
    sizing: ReservoirSizing,
    seed: u64,
) -> anyhow::Result<GlobalStatistics<u128>> {
    let settings = TrackerSettings {
        parallelism: OPERATORS,
        statistics_type: StatisticsType::Sketch,
        switch_threshold: usize::MAX,
        sizing,
    };
    let mut tracker = StatisticsTracker::new(settings, None).with_seed(seed);
    let share = ids.len().div_ceil(OPERATORS);
    let mut completed = None;
    for (s, chunk) in ids.chunks(share).enumerate() {
        let mut r = Reservoir::with_seed(sizing.operator(OPERATORS, n), seed ^ s as u64);
        chunk.iter().for_each(|id| r.update(*id));
        if let Update::Complete(c) = tracker.update(s, 1, n, LocalStatistics::Sketch(r)) {
            completed = Some(c);
        }
    }
    let completed = completed.ok_or_else(|| anyhow::anyhow!("the aggregation did not complete"))?;
    Ok(GlobalStatistics::compute(&completed, n, 0.0)?)
}

fn sketch_case(report: &mut Report, n: usize, runs: u64, records: u64) -> anyhow::Result<()> {
    report.progress(&format!(
        "sketch-ids-p{n}: {runs} runs of {records} random 128-bit ids"
    ));
    let (mut sluice, mut iceberg, mut hash) = (Vec::new(), Vec::new(), Vec::new());
    for seed in 0..runs {
        let mut rng = StdRng::seed_from_u64(seed);
        let sampled: Vec<u128> = (0..records).map(|_| rng.random()).collect();
        let keep_all = sketch_bounds(&sampled, n, ReservoirSizing::KeepAll, seed)?;
        let iceberg_sized = sketch_bounds(&sampled, n, ReservoirSizing::Iceberg, seed)?;
        let mut a = RangeRouter::new(Arc::new(RouteTable::new(&keep_all)), seed);
        let mut b = RangeRouter::new(Arc::new(RouteTable::new(&iceberg_sized)), seed);
        let (mut ca, mut cb, mut ch) = (vec![0u64; n], vec![0u64; n], vec![0u64; n]);
        // Fresh ids from the same distribution, as Iceberg's test routes fresh UUIDs.
        for _ in 0..records {
            let id: u128 = rng.random();
            ca[a.route(&id, n)] += 1;
            cb[b.route(&id, n)] += 1;
            ch[hash_subtask(&id, n)] += 1;
        }
        sluice.push(skew(&ca));
        iceberg.push(skew(&cb));
        hash.push(skew(&ch));
    }
    let case = Case {
        name: format!("sketch-ids-p{n}"),
        n,
        records,
        reported: iceberg_reported(true, n),
    };
    rows(
        report,
        case,
        &sluice,
        &hash,
        ("iceberg_reservoir_size_pct", &iceberg),
    )
}
