//! `shuffle-cost`: see the [parent module](super).

use super::{WeightedKeys, long_tail};
use crate::measure::{Side, interleaved, machine, median, runtime, timed};
use crate::report::{Report, Row};
use crate::scenarios::CommonArgs;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rustc_hash::FxHashMap;
use sluice::core::codec;
use sluice::key_groups::{key_group, subtask_for_key_group};
use sluice::prelude::*;
use sluice::shuffle::aggregation::{StatisticsTracker, TrackerSettings, Update};
use sluice::shuffle::partitioner::RouteCells;
use sluice::shuffle::{
    CompletedData, CompletedStatistics, GlobalStatistics, LocalStatistics, RangePartitioner,
    ReservoirSizing, RouteTable, ShuffleKey, ShuffleMetrics, StatisticsType,
};
use sluice::{OperatorContext, Partitioner};
use std::hint::black_box;
use std::sync::Arc;

const SCENARIO: &str = "shuffle-cost";
const N: usize = 32;
const MAX_PARALLELISM: usize = 128;
/// Records per batch routed, the engine's default batch size (`JobConfig::batch_size`).
const BATCH: usize = 1024;

/// Flags of `shuffle-cost`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Records per partitioner run (default 10,000,000, 2,000,000 with --quick).
    #[arg(long)]
    records: Option<u64>,
    /// Keys per subtask map in the aggregation case (default 100,000).
    #[arg(long)]
    keys: Option<u64>,
    /// Runs only the cases whose name contains this (`map`, `sketch`, `job`, `aggregate`), for
    /// example to profile one of them.
    #[arg(long)]
    case: Option<String>,
}

/// Runs the scenario and prints its report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let records = args
        .records
        .unwrap_or(if quick { 2_000_000 } else { 10_000_000 });
    let keys = args.keys.unwrap_or(100_000);
    let reps = args.common.reps_or(3, 7);
    let wanted = |case: &str| args.case.as_deref().is_none_or(|c| case.contains(c));
    let mut report = Report::new(args.common.json);
    report.progress(&format!(
        "{SCENARIO} on {}: {records} records per partitioner run, {N} subtasks × {keys}-key \
         maps, {reps} timed runs per side",
        machine()
    ));
    // Map: long-tail keys. Sketch: random 128-bit ids.
    let weights = long_tail(1);
    let sampler = WeightedKeys::new(&weights);
    let mut rng = StdRng::seed_from_u64(2);
    let map_keys: Vec<u64> = (0..1_000_000).map(|_| sampler.draw(&mut rng)).collect();
    let map_stats = CompletedStatistics {
        checkpoint: 1,
        downstream_parallelism: N,
        data: CompletedData::Map(weights.iter().map(|(k, w)| (*k, *w)).collect()),
    };
    if wanted("map-long-tail") {
        partitioner_case(
            &mut report,
            "map-long-tail",
            &map_keys,
            &map_stats,
            records,
            reps,
        )?;
    }
    let ids: Vec<u128> = (0..1_000_000).map(|_| rng.random()).collect();
    let mut samples: Vec<u128> = (0..100_000).map(|_| rng.random()).collect();
    samples.sort_unstable();
    let sketch_stats = CompletedStatistics {
        checkpoint: 1,
        downstream_parallelism: N,
        data: CompletedData::Sketch(samples),
    };
    if wanted("sketch-ids") {
        partitioner_case(
            &mut report,
            "sketch-ids",
            &ids,
            &sketch_stats,
            records,
            reps,
        )?;
    }
    if wanted("job-long-tail") {
        job_case(&mut report, Arc::new(map_keys), records, reps)?;
    }
    if wanted("aggregate") {
        aggregation_case(&mut report, keys, reps)?;
    }
    report.finish()
}

/// Routes `records` records cycling over `keys`, through the range partitioner (statistics
/// published) and through key-group hashing.
fn partitioner_case<K: ShuffleKey + Copy>(
    report: &mut Report,
    name: &str,
    keys: &[K],
    statistics: &CompletedStatistics<K>,
    records: u64,
    reps: usize,
) -> anyhow::Result<()> {
    report.progress(&format!("{name}: partitioner records/s at {N} subtasks"));
    let global = GlobalStatistics::compute(statistics, N, 0.0)?;
    let cells = Arc::new(RouteCells::<K>::default());
    let mut partitioner =
        RangePartitioner::new(|k: &K| *k, cells.clone(), ShuffleMetrics::default());
    Partitioner::<K>::open(
        &mut partitioner,
        &OperatorContext::for_test("shuffle", 0, 1),
        N,
    );
    cells.cell(0, 0).publish(Arc::new(RouteTable::new(&global)));
    let mut partitioner = Some(partitioner);
    // Both sides route batches of the engine's default size into a vector of targets, as the
    // network writer does: the range partitioner through `partition_batch` (what the writer
    // calls), the hash side with `key_by`'s key-group arithmetic per record.
    let batches = || {
        keys.chunks(BATCH)
            .cycle()
            .scan(records as usize, |left, chunk| {
                let take = chunk.len().min(*left);
                *left -= take;
                (take > 0).then(|| &chunk[..take])
            })
    };
    let hash = Side::new("hash partitioner", || {
        timed(|| {
            let (mut sum, mut targets) = (0usize, Vec::with_capacity(BATCH));
            for batch in batches() {
                targets.clear();
                targets.extend(black_box(batch).iter().map(|k| {
                    let g = key_group(k, MAX_PARALLELISM);
                    subtask_for_key_group(g, MAX_PARALLELISM, N)
                }));
                sum += targets.iter().sum::<usize>();
            }
            black_box(sum);
            Ok(records)
        })
    });
    let range = Side::new("range partitioner", || {
        timed(|| {
            let p = partitioner
                .as_mut()
                .ok_or_else(|| anyhow::anyhow!("no partitioner"))?;
            let (mut sum, mut targets) = (0usize, Vec::with_capacity(BATCH));
            for batch in batches() {
                targets.clear();
                p.partition_batch(black_box(batch), N, &mut targets);
                sum += targets.iter().sum::<usize>();
            }
            black_box(sum);
            Ok(records)
        })
    });
    let t = interleaved(reps, vec![hash], range)?;
    report.add(
        Row::throughput(
            SCENARIO,
            format!("{name}-p{N}"),
            records,
            &t.sluice,
            Some(("hash partitioner (key groups)", &t.baselines[0])),
        )
        .target(0.5)
        .parallelism(N),
    )
}

/// Whole jobs at parallelism 2 over the long-tail keys: generator → range shuffle → map →
/// discard against generator → `key_by` → map → discard, both checkpointing every 100 ms (the
/// shuffle learns its statistics at checkpoints). The shuffle side also counts every key.
fn job_case(
    report: &mut Report,
    keys: Arc<Vec<u64>>,
    records: u64,
    reps: usize,
) -> anyhow::Result<()> {
    report.progress("job: range shuffle against key_by, parallelism 2, Map statistics");
    let rt = runtime()?;
    let job = |shuffle: bool| {
        let keys = keys.clone();
        let rt = &rt;
        move || {
            timed(|| {
                let dir = tempfile::tempdir()?;
                let env = StreamEnvironment::new();
                env.set_parallelism(2);
                env.enable_checkpointing(std::time::Duration::from_millis(100));
                env.set_checkpoint_storage(dir.path());
                let keys = keys.clone();
                let source = env.from_generator(
                    Generator::new(move |i| keys[i as usize % keys.len()]).take(records),
                );
                if shuffle {
                    let config = RangeShuffleConfig::default().statistics_type(StatisticsType::Map);
                    source
                        .range_shuffle(|k: &u64| *k, config)
                        .map(|k| k)
                        .discard();
                } else {
                    source.key_by(|k: &u64| *k).map(|k| k).discard();
                }
                rt.block_on(env.execute("shuffle-cost job"))?;
                Ok(records)
            })
        }
    };
    let t = interleaved(
        reps,
        vec![Side::new("key_by job", job(false))],
        Side::new("range shuffle job", job(true)),
    )?;
    report.add(
        Row::throughput(
            SCENARIO,
            "job-long-tail-p2",
            records,
            &t.sluice,
            Some(("key_by job", &t.baselines[0])),
        )
        .target(0.5)
        .parallelism(2),
    )
}

/// 32 subtasks' maps of `keys` keys each, encoded as they travel: the coordinator decodes and
/// merges them and computes the assignment; the baseline decodes, merges and sorts them.
fn aggregation_case(report: &mut Report, keys: u64, reps: usize) -> anyhow::Result<()> {
    report.progress(&format!(
        "aggregate: {N} subtasks × {keys}-key maps, merged and assigned over {N}"
    ));
    let mut rng = StdRng::seed_from_u64(3);
    let events: Vec<Vec<u8>> = (0..N)
        .map(|_| {
            let m: FxHashMap<u64, u64> = (0..keys).map(|k| (k, rng.random_range(1..100))).collect();
            codec::encode(&LocalStatistics::Map(m)).map_err(anyhow::Error::from)
        })
        .collect::<anyhow::Result<_>>()?;
    let baseline = Side::new("decode, merge and sort", || {
        timed(|| {
            let mut merged: FxHashMap<u64, u64> = FxHashMap::default();
            for e in &events {
                let LocalStatistics::Map(m) = codec::decode::<LocalStatistics<u64>>(e)? else {
                    anyhow::bail!("expected a map");
                };
                for (k, c) in m {
                    *merged.entry(k).or_insert(0) += c;
                }
            }
            let mut sorted: Vec<(u64, u64)> = merged.into_iter().collect();
            sorted.sort_unstable();
            Ok(black_box(sorted).len() as u64)
        })
    });
    let sluice = Side::new("tracker and assignment", || {
        timed(|| {
            let settings = TrackerSettings {
                parallelism: N,
                statistics_type: StatisticsType::Map,
                switch_threshold: usize::MAX,
                sizing: ReservoirSizing::KeepAll,
            };
            let mut tracker = StatisticsTracker::<u64>::new(settings, None);
            let mut assigned = 0;
            for (s, e) in events.iter().enumerate() {
                let statistics = codec::decode::<LocalStatistics<u64>>(e)?;
                if let Update::Complete(c) = tracker.update(s, 1, N, statistics) {
                    assigned = GlobalStatistics::compute(&c, N, 0.0)?.len();
                }
            }
            Ok(assigned as u64)
        })
    });
    let t = interleaved(reps, vec![baseline], sluice)?;
    let ms = |d: &[std::time::Duration]| median(d).as_secs_f64() * 1e3;
    let (value, base) = (ms(&t.sluice), ms(&t.baselines[0]));
    report.add(
        Row::new(
            SCENARIO,
            format!("aggregate-{N}x{keys}"),
            "time",
            "ms",
            (value * 10.0).round() / 10.0,
        )
        .against(
            "decode, merge and sort",
            (base * 10.0).round() / 10.0,
            base / value,
        )
        .parallelism(N),
    )
}
