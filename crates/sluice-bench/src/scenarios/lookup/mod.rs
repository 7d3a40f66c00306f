//! Scenario `lookup` (issue 13): enriching records from the real Redis and PostgreSQL of this
//! machine through `sluice-lookup`, one request per record, in batches of 100, and in batches
//! behind a cache, beside a hand-written loop of pipelined `MGET` / `= ANY($1)` calls with the
//! same batch size, all in the same run.
//!
//! - [`workload`]: the 100,000 profiles, the Zipf-distributed keys, the digest every side
//!   computes (the runs must agree);
//! - [`servers`]: loading the profiles (once; later runs find them);
//! - [`jobs`] and [`baselines`]: the sluice sides and the loops.
//!
//! Servers: `--redis-url` and `--postgres-url`, by default `SLUICE_REDIS_URL` and
//! `SLUICE_POSTGRES_URL` (what `.ci/services` starts), else the usual ports on 127.0.0.1.

pub mod baselines;
pub mod jobs;
pub mod servers;
pub mod workload;

use crate::measure::{Side, interleaved, machine, runtime, timed};
use crate::report::{Report, Row};
use crate::scenarios::CommonArgs;
use jobs::Calls;
use tokio::runtime::Runtime;

const SCENARIO: &str = "lookup";

/// Issue 13: "batched >= 5x per-record".
const TARGET_VS_PER_RECORD: f64 = 5.0;

/// Issue 13: "batched >= 0.8 of the hand-written loop".
const TARGET_VS_LOOP: f64 = 0.8;

/// Flags of `lookup`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Lookups per timed run (default 200,000; 50,000 with --quick).
    #[arg(long)]
    records: Option<u64>,
    /// Only this server (default both).
    #[arg(long = "case", value_enum)]
    case: Option<Backend>,
    /// The Redis server.
    #[arg(
        long,
        env = "SLUICE_REDIS_URL",
        default_value = "redis://127.0.0.1:6379/"
    )]
    redis_url: String,
    /// The PostgreSQL server.
    #[arg(
        long,
        env = "SLUICE_POSTGRES_URL",
        default_value = "postgres://sluice:sluice@127.0.0.1:5432/sluice"
    )]
    postgres_url: String,
    /// Runs only this side, `--reps` times, and reports nothing: for a profiler
    /// (`perf record -g -- sluice-bench lookup --case redis --profile-side batched`).
    #[arg(long, value_enum)]
    profile_side: Option<ProfileSide>,
}

/// One side of a case, run alone under a profiler.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ProfileSide {
    /// The hand-written loop.
    Loop,
    /// sluice, one request per record.
    PerRecord,
    /// sluice, batched.
    Batched,
    /// sluice, batched behind the cache.
    Cached,
}

/// A server of the scenario.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    /// Redis, `MGET` per batch.
    Redis,
    /// PostgreSQL, `= ANY($1)` per batch.
    Postgres,
}

/// Runs the scenario and prints its report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let records = args.records.unwrap_or(if quick { 50_000 } else { 200_000 });
    let reps = args.common.reps_or(3, 7);
    let rt = runtime()?;
    let mut report = Report::new(args.common.json);
    report.progress(&format!(
        "{SCENARIO} on {}: {records} Zipf({}) lookups of {} keys per run, {reps} timed runs per side, medians",
        machine(),
        workload::ZIPF_EXPONENT,
        workload::KEYS,
    ));
    let keys = workload::keys(records, 13);
    for backend in [Backend::Redis, Backend::Postgres] {
        if args.case.is_none_or(|c| c == backend) {
            one_backend(&mut report, &rt, args, backend, &keys, reps)?;
        }
    }
    report.finish()
}

fn one_backend(
    report: &mut Report,
    rt: &Runtime,
    args: &Args,
    backend: Backend,
    keys: &[u64],
    reps: usize,
) -> anyhow::Result<()> {
    let (name, url, baseline) = match backend {
        Backend::Redis => ("redis", &args.redis_url, "pipelined MGET loop"),
        Backend::Postgres => ("postgres", &args.postgres_url, "pipelined = ANY($1) loop"),
    };
    report.progress(&format!("{name}: loading the profiles into {url}"));
    match backend {
        Backend::Redis => rt.block_on(servers::load_redis(url))?,
        Backend::Postgres => rt.block_on(servers::load_postgres(url))?,
    }
    let sluice = |calls: Calls| {
        move || {
            timed(|| {
                rt.block_on(async {
                    match backend {
                        Backend::Redis => jobs::redis(url, keys, calls).await,
                        Backend::Postgres => jobs::postgres(url, keys, calls).await,
                    }
                })
            })
        }
    };
    let hand_loop = || {
        timed(|| {
            rt.block_on(async {
                match backend {
                    Backend::Redis => baselines::redis(url, keys).await,
                    Backend::Postgres => baselines::postgres(url, keys).await,
                }
            })
        })
    };
    if let Some(side) = args.profile_side {
        report.progress(&format!(
            "{name}: {side:?} alone, {reps} runs, nothing reported"
        ));
        for _ in 0..reps {
            let run = match side {
                ProfileSide::Loop => hand_loop()?,
                ProfileSide::PerRecord => sluice(Calls::PerRecord)()?,
                ProfileSide::Batched => sluice(Calls::Batched)()?,
                ProfileSide::Cached => sluice(Calls::Cached)()?,
            };
            report.progress(&format!("{side:?}: {:.3} s", run.elapsed.as_secs_f64()));
        }
        return Ok(());
    }
    report.progress(&format!(
        "{name}: sluice batched vs {baseline}, sluice per record, sluice batched + cache"
    ));
    let t = interleaved(
        reps,
        vec![
            Side::new(baseline, hand_loop),
            Side::new("sluice per record", sluice(Calls::PerRecord)),
            Side::new("sluice batched + cache", sluice(Calls::Cached)),
        ],
        Side::new("sluice batched", sluice(Calls::Batched)),
    )?;
    let records = keys.len() as u64;
    let (hand, per_record, cached) = (&t.baselines[0], &t.baselines[1], &t.baselines[2]);
    report.add(
        Row::throughput(
            SCENARIO,
            format!("{name}-batched"),
            records,
            &t.sluice,
            Some((baseline, hand)),
        )
        .parallelism(1)
        .target(TARGET_VS_LOOP),
    )?;
    report.add(
        Row::throughput(
            SCENARIO,
            format!("{name}-batched-vs-per-record"),
            records,
            &t.sluice,
            Some(("sluice per record", per_record)),
        )
        .parallelism(1)
        .target(TARGET_VS_PER_RECORD),
    )?;
    report.add(
        Row::throughput(
            SCENARIO,
            format!("{name}-batched-cached"),
            records,
            cached,
            Some((baseline, hand)),
        )
        .parallelism(1),
    )?;
    report.add(
        Row::throughput(
            SCENARIO,
            format!("{name}-per-record"),
            records,
            per_record,
            Some((baseline, hand)),
        )
        .parallelism(1),
    )
}
