//! Scenario `kafka` (issue 27): `sluice-kafka`'s source and sink against a real
//! Kafka-compatible broker (`SLUICE_KAFKA_BOOTSTRAP`, default `127.0.0.1:19092`; the scenario
//! fails naming the servers when nothing answers there), each beside a plain rdkafka client
//! doing the same work in the same process, interleaved, medians:
//!
//! - `source-p1`: a 4-partition topic filled once per scenario run (1M records of about 100
//!   bytes, 5M full) with a plain producer; a bounded `KafkaSource` (earliest to latest, the
//!   values' bytes) at parallelism 1 into a counting sink, against one thread with a plain
//!   `BaseConsumer` assigned the 4 partitions from offset 0 and reading to the high watermarks,
//!   copying each value into a `Vec<u8>`; target ≥ 0.8;
//! - `sink-exactly-once`: a generator of N numbers mapped to 100-byte strings into a
//!   `KafkaSink` with exactly-once delivery (a transaction per checkpoint, checkpoints every
//!   second) at parallelism 1, against a plain producer sending the same records (librdkafka's
//!   defaults, `linger.ms` 5 as the sink leaves it) and flushing; target ≥ 0.7;
//! - `sink-at-least-once`: the same job with at-least-once delivery (a flush at each
//!   checkpoint) against the same producer; target ≥ 0.7 as for exactly-once;
//! - `eo-vs-alo`: exactly-once against at-least-once (what the transactions cost).
//!
//! Every sink run writes into a fresh topic (named after the process and the run, deleted after
//! it) and is checked by reading the topic back with `read_committed`: every side must leave the
//! same records (count and bytes) there. `detail` holds each side's process CPU time per run
//! and the broker's (noida-db's, read from `/proc` when it runs here), medians: on this machine
//! the broker shares the 2 cores with both sides, so what bounds a side is often the broker.

mod broker;
mod workload;

use super::CommonArgs;
use crate::measure::{Run, Side, interleaved, machine, median, per_second, timed};
use crate::report::{Report, Row};
use broker::{Broker, PARTITIONS, fresh_name};
use sluice_kafka::DeliveryGuarantee;
use std::cell::RefCell;
use std::time::Duration;
use workload::{Usage, consumer_loop, producer_loop, sink_job, source_job, value};

const SCENARIO: &str = "kafka";

/// Flags of `kafka`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// The brokers to run against.
    #[arg(
        long,
        env = "SLUICE_KAFKA_BOOTSTRAP",
        default_value = "127.0.0.1:19092"
    )]
    bootstrap: String,
    /// Records in the source case's topic (default 5 000 000, 1 000 000 with --quick).
    #[arg(long)]
    source_records: Option<u64>,
    /// Records per run of the sink cases (default 2 000 000, 300 000 with --quick).
    #[arg(long)]
    sink_records: Option<u64>,
    /// Run only the source case (`source`) or only the sink cases (`sink`).
    #[arg(long)]
    only: Option<Only>,
}

/// The cases `--only` selects.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Only {
    /// `source-p1`.
    Source,
    /// `sink-exactly-once`, `sink-at-least-once`, `eo-vs-alo`.
    Sink,
}

/// Runs the scenario and prints its report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let source_n = args
        .source_records
        .unwrap_or(if quick { 1_000_000 } else { 5_000_000 });
    let sink_n = args
        .sink_records
        .unwrap_or(if quick { 300_000 } else { 2_000_000 });
    let reps = args.common.reps_or(3, 5);
    let broker = Broker::connect(&args.bootstrap)?;
    let mut report = Report::new(args.common.json);
    report.progress(&format!(
        "{SCENARIO} on {} against the broker at {}{}: {reps} timed runs per side",
        machine(),
        broker.bootstrap,
        match broker.pid {
            Some(pid) => format!(" (noida-db, pid {pid})"),
            None => String::new(),
        }
    ));
    if args.only != Some(Only::Sink) {
        source_case(&mut report, &broker, source_n, reps)?;
    }
    if args.only != Some(Only::Source) {
        sink_cases(&mut report, &broker, sink_n, reps)?;
    }
    report.finish()
}

/// One side's usage per run, logged by its closure.
type UsageLog = RefCell<Vec<Usage>>;

/// Runs a side's `f`, logging its usage into `log`.
fn logged(log: &UsageLog, f: impl FnOnce() -> anyhow::Result<(Run, Usage)>) -> anyhow::Result<Run> {
    let (run, usage) = f()?;
    log.borrow_mut().push(usage);
    Ok(run)
}

/// Medians over the timed runs (the warm-up, logged first, left out) of what `log` holds.
fn usage_detail(log: &UsageLog) -> serde_json::Value {
    let runs: Vec<Usage> = log.borrow().iter().skip(1).copied().collect();
    let secs = |d: Vec<Duration>| median(&d).as_secs_f64();
    let broker: Option<Vec<Duration>> = runs.iter().map(|u| u.broker_cpu).collect();
    let mut checkpoints: Vec<u64> = runs.iter().map(|u| u.checkpoints).collect();
    checkpoints.sort_unstable();
    serde_json::json!({
        "cpu_s_per_run": secs(runs.iter().map(|u| u.cpu).collect()),
        "broker_cpu_s_per_run": broker.map(secs),
        "checkpoints_per_run": checkpoints.get(checkpoints.len() / 2),
    })
}

/// `source-p1`: the topic filled once, then the source job beside the consumer loop.
fn source_case(report: &mut Report, broker: &Broker, n: u64, reps: usize) -> anyhow::Result<()> {
    let topic = fresh_name("source");
    broker.create_topic(&topic)?;
    let result = (|| {
        report.progress(&format!(
            "{SCENARIO}: filling {topic} ({PARTITIONS} partitions) with {n} records"
        ));
        let fill = timed(|| broker.produce(&topic, n, true, value))?;
        let bytes = (0..n).map(|i| value(i).len() as u64).sum::<u64>();
        let loop_name = "rdkafka BaseConsumer loop";
        let logs: [UsageLog; 2] = Default::default();
        let t = interleaved(
            reps,
            vec![Side::new(loop_name, || {
                logged(&logs[0], || consumer_loop(broker, &topic))
            })],
            Side::new("sluice KafkaSource p1", || {
                logged(&logs[1], || source_job(broker, &topic))
            }),
        )?;
        let mut row = Row::throughput(
            SCENARIO,
            "source-p1",
            n,
            &t.sluice,
            Some((loop_name, &t.baselines[0])),
        )
        .parallelism(1)
        .target(0.8);
        let mb = |d: Duration| bytes as f64 / d.as_secs_f64().max(f64::MIN_POSITIVE) / 1e6;
        row.detail = Some(serde_json::json!({
            "mb_per_s": mb(median(&t.sluice)),
            "baseline_mb_per_s": mb(median(&t.baselines[0])),
            "input_mb": bytes as f64 / 1e6,
            "partitions": PARTITIONS,
            "fill_records_per_s": per_second(n, fill.elapsed).round(),
            "sluice": usage_detail(&logs[1]),
            "baseline": usage_detail(&logs[0]),
        }));
        report.add(row)
    })();
    broker.delete_topic(&topic);
    result
}

/// `sink-exactly-once`, `sink-at-least-once` and `eo-vs-alo`: the two jobs beside the plain
/// producer, all three interleaved.
fn sink_cases(report: &mut Report, broker: &Broker, n: u64, reps: usize) -> anyhow::Result<()> {
    report.progress(&format!(
        "{SCENARIO}: {n} records per sink run into fresh {PARTITIONS}-partition topics"
    ));
    let loop_name = "rdkafka producer loop";
    let logs: [UsageLog; 3] = Default::default();
    let t = interleaved(
        reps,
        vec![
            Side::new(loop_name, || logged(&logs[0], || producer_loop(broker, n))),
            Side::new("sluice KafkaSink at-least-once", || {
                logged(&logs[1], || {
                    sink_job(broker, DeliveryGuarantee::AtLeastOnce, n)
                })
            }),
        ],
        Side::new("sluice KafkaSink exactly-once", || {
            logged(&logs[2], || {
                sink_job(broker, DeliveryGuarantee::ExactlyOnce, n)
            })
        }),
    )?;
    let (plain, alo, eo) = (&t.baselines[0], &t.baselines[1], &t.sluice);
    let detail = |side: usize, base: usize| {
        serde_json::json!({
            "sluice": usage_detail(&logs[side]),
            "baseline": usage_detail(&logs[base]),
        })
    };
    let mut row = Row::throughput(
        SCENARIO,
        "sink-exactly-once",
        n,
        eo,
        Some((loop_name, plain)),
    )
    .parallelism(1)
    .target(0.7);
    row.detail = Some(detail(2, 0));
    report.add(row)?;
    let mut row = Row::throughput(
        SCENARIO,
        "sink-at-least-once",
        n,
        alo,
        Some((loop_name, plain)),
    )
    .parallelism(1)
    .target(0.7);
    row.detail = Some(detail(1, 0));
    report.add(row)?;
    let mut row = Row::throughput(
        SCENARIO,
        "eo-vs-alo",
        n,
        eo,
        Some(("sluice KafkaSink at-least-once", alo)),
    )
    .parallelism(1);
    row.detail = Some(detail(2, 1));
    report.add(row)
}
