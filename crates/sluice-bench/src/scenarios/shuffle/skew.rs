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
    let advancing_runs = args.runs.unwrap_or(if args.common.quick { 3 } else { 20 });
    let advancing_records = args.records.map_or(4_000_000, |r| r.max(400_000));
    for users in [Users::Ids, Users::Zipf] {
        for n in [2, 8] {
            advancing_case(&mut report, n, users, advancing_runs, advancing_records)?;
        }
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

/// How the users of the advancing cases are drawn within a time bucket.
#[derive(Clone, Copy)]
enum Users {
    /// Fresh random 64-bit ids (high cardinality: Sketch from the first checkpoint on).
    Ids,
    /// The main example's users: Zipf over 100,000 users with exponent 1.1, ids scrambled so
    /// that popularity does not follow the key order.
    Zipf,
}

/// The shape of an advancing run: records, records per checkpoint interval, records per time
/// bucket.
struct Advancing {
    records: u64,
    interval: u64,
    bucket: u64,
}

/// Which subtask each rule picks, over a whole advancing run.
struct AdvancingCounts {
    sluice: Vec<u64>,
    iceberg: Vec<u64>,
    hash: Vec<u64>,
    /// The first checkpoint whose global statistics were a Sketch.
    switched_at: Option<u64>,
}

/// One advancing run: `OPERATORS` shuffle subtasks see the stream in turn, each with Auto
/// statistics (Map, switching to Sketch as the operator does); at every barrier the statistics
/// received since the last one are applied (as the operator applies a broadcast), then each
/// subtask's local statistics go to the tracker, whose completed aggregation becomes the global
/// statistics applied at the next barrier: records are routed by statistics two intervals old,
/// as in Iceberg. Keys are (time bucket, user).
fn advancing_run(
    n: usize,
    users: Users,
    shape: &Advancing,
    seed: u64,
) -> anyhow::Result<AdvancingCounts> {
    use sluice::shuffle::sizing::{
        COORDINATOR_SKETCH_SWITCH_THRESHOLD, OPERATOR_SKETCH_SWITCH_THRESHOLD,
    };
    type Key = (u64, u64);
    let sizing = ReservoirSizing::Iceberg;
    let settings = TrackerSettings {
        parallelism: OPERATORS,
        statistics_type: StatisticsType::Auto,
        switch_threshold: COORDINATOR_SKETCH_SWITCH_THRESHOLD,
        sizing,
    };
    let mut tracker = StatisticsTracker::<Key>::new(settings, None).with_seed(seed);
    let reservoir = sizing.operator(OPERATORS, n);
    let fresh = |kind: StatisticsType, op: usize, cp: u64| match kind {
        StatisticsType::Sketch => LocalStatistics::Sketch(Reservoir::with_seed(
            reservoir,
            seed ^ (cp << 8) ^ op as u64,
        )),
        _ => LocalStatistics::new(StatisticsType::Map, 0),
    };
    let mut locals: Vec<LocalStatistics<Key>> = (0..OPERATORS)
        .map(|op| fresh(StatisticsType::Map, op, 0))
        .collect();
    let zipf = rand_distr::Zipf::new(100_000.0, 1.1)?;
    let mut rng = StdRng::seed_from_u64(seed);
    let scramble = |u: u64| u.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17);
    // Per rule (sluice, Iceberg): the statistics routed by, those received and applied at the
    // next barrier, and one router per producer subtask.
    let mut routed: [Option<GlobalStatistics<Key>>; 2] = [None, None];
    let mut received: [Option<GlobalStatistics<Key>>; 2] = [None, None];
    let mut routers: [Vec<Option<RangeRouter<Key>>>; 2] = [
        (0..OPERATORS).map(|_| None).collect(),
        (0..OPERATORS).map(|_| None).collect(),
    ];
    let mut previous: Option<CompletedStatistics<Key>> = None;
    // Round robin before the first statistics, per rule and producer subtask.
    let mut rr = [[0usize; OPERATORS]; 2];
    let mut counts = AdvancingCounts {
        sluice: vec![0; n],
        iceberg: vec![0; n],
        hash: vec![0; n],
        switched_at: None,
    };
    let mut checkpoint = 0u64;
    for i in 0..shape.records {
        let user = match users {
            Users::Ids => rng.random::<u64>(),
            Users::Zipf => scramble(rand_distr::Distribution::sample(&zipf, &mut rng) as u64),
        };
        let key: Key = (i / shape.bucket, user);
        let op = (i % OPERATORS as u64) as usize;
        locals[op].add(key);
        let global_sketch = routed[0]
            .as_ref()
            .is_some_and(|g| g.kind() == StatisticsType::Sketch);
        if locals[op].kind() == StatisticsType::Map
            && (locals[op].len() > OPERATOR_SKETCH_SWITCH_THRESHOLD || global_sketch)
        {
            let map = std::mem::replace(&mut locals[op], fresh(StatisticsType::Map, op, 0));
            locals[op] = LocalStatistics::Sketch(map.into_sketch(reservoir));
        }
        let mut pick = |rule: usize| match (&routed[rule], &mut routers[rule][op]) {
            (Some(g), Some(router)) => match (&g.routing, rule) {
                // Iceberg's rule for Sketch: the bounds alone.
                (Routing::Sketch(bounds), 1) => sluice::shuffle::bounds::partition(&key, bounds, n),
                // Iceberg's rule for Map: a known key as sluice routes it (the same assignment),
                // an unknown one round robin.
                (Routing::Map(assignment), 1) if assignment.get(&key).is_none() => {
                    rr[rule][op] += 1;
                    rr[rule][op] % n
                }
                _ => router.route(&key, n),
            },
            _ => {
                // No statistics yet: round robin.
                rr[rule][op] += 1;
                rr[rule][op] % n
            }
        };
        let s = pick(0);
        let b = pick(1);
        counts.sluice[s] += 1;
        counts.iceberg[b] += 1;
        counts.hash[hash_subtask(&key, n)] += 1;
        if (i + 1) % shape.interval == 0 {
            checkpoint += 1;
            for rule in 0..2 {
                if let Some(g) = received[rule].take() {
                    let table = Arc::new(RouteTable::new(&g));
                    for (op, router) in routers[rule].iter_mut().enumerate() {
                        *router = Some(RangeRouter::new(table.clone(), seed ^ op as u64));
                    }
                    if rule == 0
                        && g.kind() == StatisticsType::Sketch
                        && counts.switched_at.is_none()
                    {
                        counts.switched_at = Some(g.checkpoint);
                    }
                    routed[rule] = Some(g);
                }
            }
            for (op, local) in locals.iter_mut().enumerate() {
                let kind = local.kind();
                let statistics = std::mem::replace(local, fresh(kind, op, checkpoint));
                if let Update::Complete(c) = tracker.update(op, checkpoint, n, statistics)
                    && !c.is_empty()
                {
                    received[1] = Some(GlobalStatistics::compute(&c, n, 0.0)?);
                    // As the coordinator keeps them.
                    let kept = c.advanced_from(previous.as_ref(), n);
                    received[0] = Some(GlobalStatistics::compute(&kept, n, 0.0)?);
                    previous = Some(kept);
                }
            }
        }
    }
    Ok(counts)
}

/// Advancing keys: (time bucket, user), the bucket moving on every `shape.bucket` records
/// (10.5 checkpoint intervals, so that a bucket begins mid-interval), over a run that crosses the Map-to-Sketch switch and many
/// buckets. Beside sluice: Iceberg's rule on the same statistics (a key beyond the bounds goes
/// to the first or last range) and hash partitioning.
fn advancing_case(
    report: &mut Report,
    n: usize,
    users: Users,
    runs: u64,
    records: u64,
) -> anyhow::Result<()> {
    let shape = Advancing {
        records,
        interval: records / 80,
        bucket: records / 8 + records / 160,
    };
    let name = match users {
        Users::Ids => format!("advancing-ids-p{n}"),
        Users::Zipf => format!("advancing-zipf-users-p{n}"),
    };
    report.progress(&format!(
        "{name}: {runs} runs of {records} records, keys (bucket, user), a checkpoint every {} \
         records, a new bucket every {} records",
        shape.interval, shape.bucket
    ));
    let (mut sluice, mut iceberg, mut hash, mut switched) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for seed in 0..runs {
        let c = advancing_run(n, users, &shape, seed)?;
        sluice.push(skew(&c.sluice));
        iceberg.push(skew(&c.iceberg));
        hash.push(skew(&c.hash));
        switched.push(c.switched_at.unwrap_or(0) as f64);
    }
    let case = Case {
        name,
        n,
        records,
        reported: iceberg_reported(true, n.max(8)),
    };
    let never = switched.iter().filter(|s| **s == 0.0).count();
    let switched: Vec<f64> = switched.into_iter().filter(|s| *s > 0.0).collect();
    report.progress(&format!(
        "  Sketch statistics from checkpoint {:.1} of 80 on (mean over runs that switched; {never} \
         of {runs} stayed Map)",
        mean(&switched)
    ));
    rows(report, case, &sluice, &hash, ("iceberg_rule_pct", &iceberg))
}
