//! Scenario `iceberg-sink` (issue 12): the exactly-once Iceberg sink.
//!
//! - `throughput-p1`: records/s of a job ending in the sink (parallelism 1, unpartitioned
//!   table, a checkpoint every second, zstd Parquet files rolled at the target size), beside a
//!   plain loop that turns the same records into the same Arrow record batches and writes them
//!   with the `parquet` crate's `ArrowWriter` (zstd) into files rolled at the same size; target
//!   ≥ 0.8 of the loop. Both sides start from the same owned serde records (the job's source
//!   clones each record into its batch, the loop clones each batch) and encode them with the
//!   same serde → Arrow encoder (arrow-json's), in batches of 1024. The sink side times the job
//!   from submission to its end (last commit included); opening the catalog and creating the
//!   table happen before, untimed, as the loop's directory does. Both sides report the rows
//!   written (the sink's from the table's snapshot summary);
//! - `files-{none,hash,range}-p8`: on Zipf-skewed keys (a table partitioned by key) at 8 writers
//!   over about 10 checkpoints, the data files committed and their mean size per distribution
//!   mode, beside each other (ratio: `none`'s file count over the mode's, higher is fewer files).

use super::CommonArgs;
use crate::measure::{Run, Side, interleaved, machine, runtime, timed};
use crate::report::{Report, Row};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use rand::SeedableRng;
use rand::distr::Distribution;
use sluice::prelude::*;
use sluice_iceberg::{DistributionMode, IcebergCatalog, IcebergSink, PartitionField};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const SCENARIO: &str = "iceberg-sink";

/// Flags of `iceberg-sink`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Records of the throughput case (default 2 000 000, 400 000 with --quick).
    #[arg(long)]
    records: Option<u64>,
    /// Target data file size in MiB (default 8).
    #[arg(long, default_value_t = 8)]
    file_mib: usize,
    /// Run only the throughput case (`throughput`) or only the file-count cases (`files`).
    #[arg(long)]
    only: Option<Only>,
}

/// The cases `--only` selects.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Only {
    /// `throughput-p1`.
    Throughput,
    /// `files-{none,hash,range}-p8`.
    Files,
}

/// One record.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Event {
    id: i64,
    user: String,
    page: String,
    amount: f64,
    ts: i64,
}

fn event(i: u64) -> Event {
    Event {
        id: i as i64,
        user: format!("user-{}", i % 9_973),
        page: format!("/products/{}", i % 613),
        amount: (i % 10_000) as f64 / 100.0,
        ts: 1_700_000_000_000_000 + i as i64 * 1_000,
    }
}

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("user", DataType::Utf8, false),
        Field::new("page", DataType::Utf8, false),
        Field::new("amount", DataType::Float64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            false,
        ),
    ]))
}

fn properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build()
}

/// The baseline: records in batches of `batch`, each batch owned as the sink's source hands it
/// on (a clone of each record, dropped after encoding) → Arrow (arrow-json's serde encoder, as
/// the sink) → `ArrowWriter` files rolled at `target` bytes. Returns the rows written.
pub fn baseline_loop(
    dir: &Path,
    records: &[Event],
    batch: usize,
    target: usize,
) -> anyhow::Result<u64> {
    let schema = schema();
    let mut decoder = arrow_json::ReaderBuilder::new(schema.clone()).build_decoder()?;
    let mut files = 0;
    let mut open: Option<ArrowWriter<std::fs::File>> = None;
    let mut rows = 0u64;
    for chunk in records.chunks(batch) {
        let owned: Vec<Event> = chunk.to_vec();
        decoder.serialize(&owned)?;
        drop(owned);
        let Some(b) = decoder.flush()? else { continue };
        let writer = match open.as_mut() {
            Some(w) => w,
            None => {
                files += 1;
                let file = std::fs::File::create(dir.join(format!("part-{files:05}.parquet")))?;
                open.insert(ArrowWriter::try_new(
                    file,
                    schema.clone(),
                    Some(properties()),
                )?)
            }
        };
        writer.write(&b)?;
        rows += b.num_rows() as u64;
        if writer.bytes_written() + writer.in_progress_size() >= target
            && let Some(w) = open.take()
        {
            w.close()?;
        }
    }
    if let Some(w) = open.take() {
        w.close()?;
    }
    Ok(rows)
}

/// Rows in the table's current snapshot (its summary's `total-records`).
fn table_rows(catalog: &IcebergCatalog, table: &str) -> anyhow::Result<u64> {
    let catalog = catalog.catalog().clone();
    let ident = iceberg::TableIdent::from_strs(table.split('.'))?;
    let rt = runtime()?;
    rt.block_on(async move {
        let t = catalog.load_table(&ident).await?;
        let rows = t
            .metadata()
            .current_snapshot()
            .and_then(|s| {
                s.summary()
                    .additional_properties
                    .get("total-records")
                    .cloned()
            })
            .unwrap_or_default();
        Ok(rows.parse().unwrap_or(0))
    })
}

/// The sink side: a job writing `records` into a fresh table. The catalog, the table and the job
/// graph are set up first, untimed (the loop's counterpart is creating a directory); the run
/// times the job, from submission to its end after the last commit. Its checksum is the rows
/// the table's snapshot says were committed.
pub fn sink_job(dir: &Path, records: Arc<Vec<Event>>, target: usize) -> anyhow::Result<Run> {
    let catalog = IcebergCatalog::sqlite("bench", dir)?;
    let checkpoints = dir.join("checkpoints");
    let env = StreamEnvironment::new();
    env.set_parallelism(1)
        .enable_checkpointing(Duration::from_secs(1));
    env.set_checkpoint_storage(&checkpoints);
    let n = records.len() as u64;
    let stream = env.from_generator(Generator::new(move |i| records[i as usize].clone()).take(n));
    IcebergSink::builder(catalog.clone(), "bench.events")
        .create_if_missing(schema())
        .target_file_size(target)
        .sink(&stream);
    let mut run = timed(|| {
        env.execute_blocking("iceberg-sink throughput")?;
        Ok(0)
    })?;
    run.checksum = table_rows(&catalog, "bench.events")?;
    Ok(run)
}

/// Files committed and their mean size, for one distribution mode on skewed keys.
fn distribution_job(
    mode: DistributionMode,
    records: u64,
    writers: usize,
) -> anyhow::Result<(u64, f64, u64)> {
    let dir = tempfile::tempdir()?;
    let catalog = IcebergCatalog::sqlite("bench", dir.path())?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    let zipf = rand_distr::Zipf::new(200.0, 1.2)?;
    let keys: Arc<Vec<u64>> =
        Arc::new((0..records).map(|_| zipf.sample(&mut rng) as u64).collect());
    let interval = Duration::from_millis(300);
    let env = StreamEnvironment::new();
    env.set_parallelism(writers).enable_checkpointing(interval);
    env.set_checkpoint_storage(dir.path().join("checkpoints"));
    let stream = env.from_generator(
        Generator::new(move |i| {
            let mut e = event(i);
            e.user = format!("key-{:04}", keys[i as usize]);
            e
        })
        .take(records)
        // About 10 checkpoints.
        .rate_limit(records as f64 / (10.0 * interval.as_secs_f64())),
    );
    IcebergSink::builder(catalog.clone(), "bench.skewed")
        .create_if_missing(schema())
        .partition_by(PartitionField::identity("user"))
        .distribution_mode(mode)
        .sink(&stream);
    let result = env.execute_blocking("iceberg-sink distribution")?;
    let catalog_ = catalog.catalog().clone();
    let rt = runtime()?;
    let (files, bytes) = rt.block_on(async move {
        let t = catalog_
            .load_table(&iceberg::TableIdent::from_strs(["bench", "skewed"])?)
            .await?;
        let s = t
            .metadata()
            .current_snapshot()
            .map(|s| s.summary().additional_properties.clone())
            .unwrap_or_default();
        let get = |k: &str| s.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        anyhow::Ok((get("total-data-files"), get("total-files-size")))
    })?;
    let mean = if files == 0 {
        0.0
    } else {
        bytes as f64 / files as f64
    };
    Ok((files, mean, result.completed_checkpoints))
}

/// Runs the scenario and prints its report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let n = args
        .records
        .unwrap_or(if quick { 400_000 } else { 2_000_000 });
    let target = args.file_mib * 1024 * 1024;
    let reps = args.common.reps_or(3, 5);
    let mut report = Report::new(args.common.json);
    report.progress(&format!(
        "{SCENARIO} on {}: {n} records, files of {} MiB, {reps} timed runs per side",
        machine(),
        args.file_mib
    ));
    if args.only != Some(Only::Files) {
        throughput(&mut report, n, target, reps)?;
    }
    if args.only != Some(Only::Throughput) {
        files(quick, &mut report)?;
    }
    report.finish()
}

/// `throughput-p1`: the sink beside the plain loop.
fn throughput(report: &mut Report, n: u64, target: usize, reps: usize) -> anyhow::Result<()> {
    let records: Arc<Vec<Event>> = Arc::new((0..n).map(event).collect());
    let loop_name = "arrow-json encoder + parquet ArrowWriter loop";
    let fresh = || -> anyhow::Result<tempfile::TempDir> { Ok(tempfile::tempdir()?) };
    let t = interleaved(
        reps,
        vec![Side::new(loop_name, || {
            let dir = fresh()?;
            timed(|| baseline_loop(dir.path(), &records, 1024, target))
        })],
        Side::new("sluice IcebergSink p1", || -> anyhow::Result<Run> {
            let dir = fresh()?;
            sink_job(dir.path(), records.clone(), target)
        }),
    )?;
    let row = Row::throughput(
        SCENARIO,
        "throughput-p1",
        n,
        &t.sluice,
        Some((loop_name, &t.baselines[0])),
    )
    .parallelism(1)
    .target(0.8);
    report.add(row)
}

/// `files-{none,hash,range}-p8`: data files per distribution mode on skewed keys.
fn files(quick: bool, report: &mut Report) -> anyhow::Result<()> {
    let skewed = if quick { 200_000 } else { 1_000_000 };
    let writers = 8;
    let mut none_files = 0.0;
    for mode in [
        DistributionMode::None,
        DistributionMode::Hash,
        DistributionMode::Range,
    ] {
        report.progress(&format!(
            "{SCENARIO}: {} on {skewed} skewed records at {writers} writers",
            mode.as_str()
        ));
        let (files, mean, checkpoints) = distribution_job(mode, skewed, writers)?;
        if mode == DistributionMode::None {
            none_files = files as f64;
        }
        let mut row = Row::new(
            SCENARIO,
            format!("files-{}-p{writers}", mode.as_str()),
            "data files",
            "files",
            files as f64,
        )
        .records(skewed)
        .parallelism(writers)
        .against("none", none_files, none_files / (files as f64).max(1.0));
        row.detail = Some(serde_json::json!({
            "mean_file_bytes": mean.round(),
            "checkpoints": checkpoints,
        }));
        report.add(row)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both sides write every record.
    #[test]
    fn the_sink_and_the_loop_agree() {
        let records: Arc<Vec<Event>> = Arc::new((0..3_000).map(event).collect());
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            baseline_loop(dir.path(), &records, 500, 64 * 1024).unwrap(),
            3_000
        );
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            sink_job(dir.path(), records, 64 * 1024).unwrap().checksum,
            3_000
        );
    }
}
