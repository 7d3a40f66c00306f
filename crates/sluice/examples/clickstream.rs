//! The clickstream job: click files read by the file source, each click enriched with its
//! user's profile from an HTTP service, counted per user and minute of event time, and committed
//! exactly once to an Iceberg table.
//!
//! ```text
//! Source: Click files (FileSource, CSV, one split per file)
//!     -> Fault injection -> Drop bots -> Parse -> Timestamps/Watermarks
//!     -> Enrich: profile lookup (async HTTP, unordered, retries, timeout)      (one chain per subtask)
//!     == key_by(user) ==>
//! Clicks per user per minute (1-minute tumbling event-time window)
//!     -> Range shuffle: hour(minute), user                                      (one chain per subtask)
//!     == range ==>
//! Iceberg writer (Parquet data files, handed on at each barrier)             (one per subtask)
//!     == rebalance ==>
//! Iceberg committer (one snapshot per completed checkpoint)                  (parallelism 1)
//!
//!   Enrich <-- HTTP/1, pooled connections --> lookup service on 127.0.0.1
//!   Iceberg committer --> SQLite catalog in the --warehouse directory, table files beside it
//! ```
//!
//! With `--kafka`, the clicks come from a Kafka topic and the counts go to another:
//!
//! ```text
//! Source: Kafka clicks (KafkaSource, one split per partition, per-partition watermarks)
//!     -> Fault injection -> Drop bots -> Parse -> Enrich: profile lookup        (one chain per subtask)
//!     == key_by(user) ==>
//! Clicks per user per minute -> Sink: Kafka (one transaction per checkpoint)  (one chain per subtask)
//! ```
//!
//! - **Clicks.** On first use the example generates `--events` clicks into `--files` CSV files
//!   in `--data-dir` (with Zipf-skewed users, bot traffic and broken urls; each file a
//!   contiguous stretch of event time, 250 clicks per second). Later runs read the same files;
//!   a run with another `--events` or `--files` generates them anew. `FileSource` hands the
//!   files out one at a time to the reader subtasks and stores each reader's file offset in the
//!   checkpoints. Crawler clicks and unparsable urls are dropped; timestamps come from the
//!   clicks, with watermarks 2 s behind (clicks are up to 2 s late).
//! - **Enrichment.** Every click that passed the filters asks the lookup service for its user's
//!   profile (country, tier): one HTTP request per click, through
//!   `unordered_wait_with_retry` (written with the `AsyncWait` builder, which also hands out the
//!   metrics): up to `--capacity` requests in flight per subtask, failed requests retried with
//!   exponential backoff, and a timeout over all attempts after which the click gets an
//!   "unknown" profile. There is deliberately no cache: the example shows what the operator does
//!   with real I/O on every record. By default the example starts the service itself, with
//!   `--lookup-latency-ms` and `--lookup-failure-rate`; `--lookup-url` points it at another one.
//!   The lookups set the pace (about 27,000 clicks/s on 2 cores with the defaults: 200 requests
//!   in flight at about 7 ms each), so the default of 1,600,000 clicks takes about a minute.
//! - **Clicks per user per minute.** The enriched clicks are keyed by user and counted in
//!   1-minute tumbling event-time windows (`window(..).aggregate_with(..)`: one counter per user
//!   and minute, never the clicks); a window fires when the watermark passes its end.
//! - **Iceberg.** The rows go to the table `--table` in an embedded SQLite catalog in
//!   `--warehouse` (created if missing), partitioned by the hour of the minute and sorted by
//!   user. The sink's range distribution puts the range shuffle in front of the writers: each
//!   writer gets a contiguous, balanced range of users (the heaviest users split over several),
//!   so few, clustered data files. Writers hand their files on at each checkpoint barrier; the
//!   committer commits each completed checkpoint as one snapshot.
//! - **Exactly once.** A checkpoint every `--checkpoint-interval-ms` stores the readers' file
//!   offsets, the clicks whose lookup is in flight, the open windows and the files written for
//!   it. `--fail-after N` makes the job fail once, after about N clicks; it restarts from its
//!   last checkpoint (fixed delay of 500 ms, at most 3 restarts). `--restore DIR` resumes an
//!   interrupted run (kill it, then pass its checkpoint directory, or one `chk-N` in it).
//!   Otherwise every run starts afresh: the table is dropped and created again.
//! - **The check.** At the end the example reads the table back with iceberg-rust's scan and
//!   compares it with the (user, minute) counts worked out from the generator alone: as many
//!   rows as (user, minute) pairs, none twice, each count right, and all of them adding up to
//!   the clicks that passed the filters. The exit status is non-zero when the check fails.
//! - **Lookups from a database.** `--lookup redis` or `--lookup postgres` (servers at
//!   `--redis-url` / `--postgres-url`, by default the usual ports on 127.0.0.1, as `.ci/services`
//!   starts them) loads the same profiles into the server, then enriches with `sluice-lookup`
//!   in batches of `--lookup-batch-size` (one `MGET`, or one prepared `= ANY($1)` query, per
//!   batch) through the same async wait operator, so checkpoints and the output are unchanged.
//! - **Kafka mode.** `--kafka 127.0.0.1:9092` (the bootstrap servers) reads the clicks from
//!   Kafka and writes the counts to Kafka instead of the click files and the Iceberg table. The
//!   generated clicks are first produced into `--kafka-clicks-topic` (created afresh with
//!   `--kafka-partitions` partitions unless `--restore` or `--resume`; a plain idempotent
//!   producer, keyed by user, each record's timestamp the click's event time, each value the
//!   CSV line a click file would hold). `KafkaSource` reads them back, bounded (from the
//!   earliest offsets to the latest), parsing each value as the file source parses a line, with
//!   the same watermark strategy per partition. `KafkaSink` writes the counts exactly once to
//!   `--kafka-counts-topic` (JSON values, key = user; one Kafka transaction per checkpoint and
//!   subtask, committed when the checkpoint completes, transactional ids prefixed
//!   `clickstream-<counts topic>`), and the check reads that topic back with
//!   `isolation.level=read_committed`. `--fail-after`, `--restore`, the progress line and the
//!   summary work as in the default mode:
//!
//!   ```text
//!   cargo run --release --example clickstream -- --kafka 127.0.0.1:9092 --events 200000
//!   ```
//!
//! While it runs, one progress line shows the clicks read per second, the lookups in flight,
//! the largest share of the last second a subtask spent backpressured and the busiest operator
//! (with every lookup slot taken, the lookup reads busy and the operators before it in its chain
//! backpressured: it holds them back), and the last completed checkpoint with its duration (a
//! plain line every 5 s when stdout is not a terminal), read from the job's live view
//! (`JobHandle::observer`). `--ui 127.0.0.1:8081` serves the web
//! dashboard of the running job (its graph with records/s and backpressure, the checkpoint
//! history, the last failure) and its REST API; `--metrics-addr 127.0.0.1:9249` serves its
//! Prometheus metrics. At the end a short table sums the run up.
//!
//! Run it with `cargo run --release --example clickstream -- --help` for the flags.

#[path = "clickstream/data.rs"]
mod data;
#[path = "clickstream/events.rs"]
mod events;
#[path = "clickstream/kafka.rs"]
mod kafka;
#[path = "clickstream/lookup.rs"]
mod lookup;
#[path = "clickstream/progress.rs"]
mod progress;
#[path = "clickstream/stores.rs"]
mod stores;
#[path = "clickstream/table.rs"]
mod table;
#[path = "clickstream/window.rs"]
mod window;

use anyhow::{Context as _, bail};
use clap::Parser;
use events::{Click, Expected, MINUTE_MS, RawClick, USERS, ZIPF_EXPONENT};
use lookup::{EnrichedClick, LookupError, ProfileLookup, ServiceBehaviour};
use progress::{Checkpoints, Progress, Reading};
use sluice::JobHandle;
use sluice::async_io::{AsyncMetricsSnapshot, MAX_CAPACITY};
use sluice::failover::RestartStrategy;
use sluice::prelude::*;
use sluice::testing::FailureInjector;
use sluice::window::{LateRecordsDropped, TumblingEventTimeWindows};
use sluice_kafka::KafkaSinkExt as _;
use sluice_source::{FileSource, FromSource};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use window::{ClicksPerMinute, CountClicks};

/// Clicks of a run when `--events` is not given: about a minute on 2 cores.
const DEFAULT_EVENTS: u64 = 1_600_000;
/// The name of the source, used to read its metrics.
const SOURCE: &str = "Source: Click files";
/// The name of the source in Kafka mode.
const KAFKA_SOURCE: &str = "Source: Kafka clicks";
/// The lookup operator's name: its figures are read from the job's metrics by this name, which
/// in cluster mode hold what the task managers report.
const LOOKUP: &str = "Enrich: profile lookup";
/// How often the in-flight gauge is sampled for its maximum.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// How often the progress line is updated.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Read generated click files, enrich every click over HTTP, count clicks per user and minute,
/// and commit the counts exactly once to an Iceberg table; then read the table back and check
/// it (the exit status says whether the check passed).
#[derive(Parser, Debug)]
#[command(name = "clickstream")]
struct Args {
    /// Number of clicks to generate into --data-dir [default: 1600000; with --restore: the
    /// number in --data-dir]
    #[arg(long, value_parser = at_least_one)]
    events: Option<u64>,
    /// Where the click files are: generated on first use, read again by later runs, generated
    /// anew when --events or --files differ from what is there
    #[arg(long, value_name = "DIR", default_value = "sluice-data/clickstream")]
    data_dir: PathBuf,
    /// Number of click files (the file source's splits) to generate
    #[arg(long, default_value_t = 8, value_parser = parse_files)]
    files: usize,
    /// The Iceberg warehouse: the SQLite catalog (catalog.db) and the tables' files
    #[arg(long, value_name = "DIR", default_value = "sluice-warehouse")]
    warehouse: PathBuf,
    /// The table (namespace.name); dropped and created again at every start but --restore
    #[arg(long, default_value = "clickstream.clicks_per_minute")]
    table: String,
    /// Parallelism of every operator but the committer [default: the number of CPU cores]
    #[arg(long, value_parser = parse_parallelism)]
    parallelism: Option<usize>,
    /// Milliseconds between two checkpoints (each commits one Iceberg snapshot)
    #[arg(long, default_value_t = 1000, value_parser = at_least_one)]
    checkpoint_interval_ms: u64,
    /// Where checkpoints are kept
    #[arg(
        long,
        value_name = "DIR",
        default_value = "sluice-checkpoints/clickstream"
    )]
    checkpoint_dir: PathBuf,
    /// Keep checkpoints in an object store instead of --checkpoint-dir (s3://bucket/path, with
    /// credentials and endpoint from the AWS_* variables; file:///path; memory:///path)
    #[arg(long, value_name = "URL")]
    checkpoint_url: Option<String>,
    /// Start from the newest complete checkpoint in the checkpoint storage, if there is one
    /// (what a job master started again after a crash does); keeps the table
    #[arg(long, conflicts_with = "restore")]
    resume: bool,
    /// Fail once, after about N clicks (then restart from the last checkpoint)
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    fail_after: Option<u64>,
    /// Resume an interrupted run from a retained checkpoint: a chk-N directory, or a checkpoint
    /// directory (its newest complete checkpoint); keeps the table and the click files
    #[arg(long, value_name = "DIR", value_parser = existing_path)]
    restore: Option<PathBuf>,
    /// Mean answer time of the in-process lookup service (each answer takes 0.5x to 1.5x this)
    #[arg(long, default_value_t = 5, conflicts_with = "lookup_url")]
    lookup_latency_ms: u64,
    /// Share of lookups the in-process service fails with 503 (they are retried)
    #[arg(long, default_value_t = 0.01, value_parser = parse_rate, conflicts_with = "lookup_url")]
    lookup_failure_rate: f64,
    /// Time a click's lookup may take over all its attempts before it gets an "unknown" profile
    #[arg(long, default_value_t = 1000, value_parser = at_least_one)]
    lookup_timeout_ms: u64,
    /// Lookups in flight per subtask at most
    #[arg(long, default_value_t = 100, value_parser = parse_capacity)]
    capacity: usize,
    /// Keep clicks in input order through the lookup (default: unordered, as lookups complete)
    #[arg(long)]
    ordered: bool,
    /// Use the lookup service at this url instead of starting one; it must answer
    /// `GET <url>/profile/<user>` with `{"country":"..","tier":".."}`
    #[arg(long, value_name = "URL", value_parser = parse_url)]
    lookup_url: Option<String>,
    /// Where profiles come from: the HTTP lookup service, one request per click; or Redis or
    /// PostgreSQL, in batches (the example loads the profiles into the server first)
    #[arg(long, value_enum, default_value_t = stores::Store::Http)]
    lookup: stores::Store,
    /// The Redis server of --lookup redis
    #[arg(long, value_name = "URL", default_value = "redis://127.0.0.1:6379/")]
    redis_url: String,
    /// The PostgreSQL server of --lookup postgres
    #[arg(
        long,
        value_name = "URL",
        default_value = "postgres://sluice:sluice@127.0.0.1:5432/sluice"
    )]
    postgres_url: String,
    /// Clicks per batch with --lookup redis or postgres (a batch also leaves after 2 ms)
    #[arg(long, default_value_t = 100, value_parser = parse_capacity)]
    lookup_batch_size: usize,
    /// Serve the web dashboard and REST API of the running job on this address (for example
    /// 127.0.0.1:8081)
    #[arg(long, value_name = "ADDR")]
    ui: Option<std::net::SocketAddr>,
    /// Serve the job's metrics for Prometheus at /metrics on this address (for example
    /// 127.0.0.1:9249)
    #[arg(long, value_name = "ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    /// Kafka mode: produce the clicks into a topic on these brokers (host:port[,host:port...]),
    /// read them with the Kafka source, and write the counts exactly once to a Kafka topic
    /// instead of the Iceberg table (--data-dir, --files, --warehouse and --table are unused)
    #[arg(long, value_name = "BOOTSTRAP", value_parser = parse_bootstrap)]
    kafka: Option<String>,
    /// The topic the clicks are produced into and read from (--kafka); deleted and created
    /// again at every start but --restore and --resume
    #[arg(
        long,
        value_name = "TOPIC",
        default_value = "clickstream-clicks",
        value_parser = parse_topic,
        requires = "kafka"
    )]
    kafka_clicks_topic: String,
    /// The topic the counts are written to exactly once (--kafka); deleted and created again
    /// at every start but --restore and --resume
    #[arg(
        long,
        value_name = "TOPIC",
        default_value = "clickstream-counts",
        value_parser = parse_topic,
        requires = "kafka"
    )]
    kafka_counts_topic: String,
    /// Partitions of both topics when they are created (--kafka)
    #[arg(
        long,
        value_name = "N",
        default_value_t = 4,
        value_parser = parse_partitions,
        requires = "kafka"
    )]
    kafka_partitions: i32,
}

fn parse_bootstrap(s: &str) -> Result<String, String> {
    let bad = s.split(',').find(|server| {
        server
            .trim()
            .rsplit_once(':')
            .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
    });
    match bad {
        Some(server) => Err(format!("{server:?} is not host:port")),
        None => Ok(s.to_string()),
    }
}

fn parse_topic(s: &str) -> Result<String, String> {
    let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if s.is_empty() || s.len() > 249 || s == "." || s == ".." || !s.chars().all(legal) {
        Err("a Kafka topic name has 1 to 249 of a-z, A-Z, 0-9, '.', '_' and '-'".to_string())
    } else {
        Ok(s.to_string())
    }
}

fn parse_partitions(s: &str) -> Result<i32, String> {
    match s.parse::<i32>() {
        Ok(n @ 1..=10_000) => Ok(n),
        Ok(n) => Err(format!("must be between 1 and 10000, got {n}")),
        Err(e) => Err(format!("not a whole number: {e}")),
    }
}

fn parse_files(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n @ 1..=10_000) => Ok(n),
        Ok(n) => Err(format!("must be between 1 and 10000, got {n}")),
        Err(e) => Err(format!("not a whole number: {e}")),
    }
}

fn at_least_one(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a whole number: {e}")),
    }
}

fn parse_parallelism(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(p @ 1..=sluice::DEFAULT_MAX_PARALLELISM) => Ok(p),
        Ok(p) => Err(format!(
            "must be between 1 and {}, got {p}",
            sluice::DEFAULT_MAX_PARALLELISM
        )),
        Err(e) => Err(format!("not a whole number: {e}")),
    }
}

fn parse_capacity(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(c @ 1..=MAX_CAPACITY) => Ok(c),
        Ok(c) => Err(format!("must be between 1 and {MAX_CAPACITY}, got {c}")),
        Err(e) => Err(format!("not a whole number: {e}")),
    }
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        Ok(r) => Err(format!("must be between 0 and 1, got {r}")),
        Err(e) => Err(format!("not a number: {e}")),
    }
}

fn parse_url(s: &str) -> Result<String, String> {
    match s.parse::<hyper::Uri>() {
        Ok(uri) if uri.scheme_str() == Some("http") && uri.host().is_some() => Ok(s.to_string()),
        Ok(_) => Err("must be an http:// url with a host".to_string()),
        Err(e) => Err(format!("not a url: {e}")),
    }
}

fn existing_path(s: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(s);
    if path.is_dir() {
        Ok(path)
    } else {
        Err("no such directory".to_string())
    }
}

/// Handles on a built job, read while it runs and after.
struct Probes {
    late_clicks: LateRecordsDropped,
    failures: FailureInjector,
}

/// Where the clicks come from and where the counts go.
enum Mode {
    /// Click files into the Iceberg table (the default).
    Iceberg(sluice_iceberg::IcebergCatalog),
    /// `--kafka`: the clicks topic into the counts topic.
    Kafka(kafka::Topics),
}

impl Mode {
    fn from_args(args: &Args) -> anyhow::Result<Self> {
        Ok(match &args.kafka {
            Some(bootstrap) => Mode::Kafka(kafka::Topics {
                bootstrap: bootstrap.clone(),
                clicks: args.kafka_clicks_topic.clone(),
                counts: args.kafka_counts_topic.clone(),
                partitions: args.kafka_partitions,
            }),
            None => Mode::Iceberg(table::catalog(&args.warehouse)?),
        })
    }

    /// The source's name, by which its metrics are read.
    fn source_name(&self) -> &'static str {
        match self {
            Mode::Iceberg(_) => SOURCE,
            Mode::Kafka(_) => KAFKA_SOURCE,
        }
    }
}

/// The clicks of the run, as prepared for it.
enum Input {
    Files(data::DataSet),
    Kafka(kafka::Clicks),
}

impl Input {
    fn events(&self) -> u64 {
        match self {
            Input::Files(data) => data.events,
            Input::Kafka(clicks) => clicks.events,
        }
    }
}

/// What the run committed, read back.
enum Output {
    Table(table::Committed),
    Kafka(kafka::Committed),
}

impl Output {
    fn rows(&self) -> &[(u64, i64, u64)] {
        match self {
            Output::Table(c) => &c.rows,
            Output::Kafka(c) => &c.rows,
        }
    }
}

/// How the run went, as seen from outside the job.
struct Watched {
    result: JobResult,
    elapsed: Duration,
    max_in_flight: u64,
    /// The last completed checkpoint and its duration.
    last_checkpoint: Option<(u64, Duration)>,
}

/// A sluice job keeps a batch of records alive across operators, which glibc's allocator serves
/// through its locked slow path; mimalloc's per-thread heaps do not (`BENCHMARKS.md`,
/// "Allocator"). A production sluice binary should declare it the same way.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            // One readable line with the whole chain of causes, whatever RUST_BACKTRACE says.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the job and reports; `Ok(false)` when the table read back is not exact.
async fn run(args: Args) -> anyhow::Result<bool> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(progress::LogWriter::default)
        // Colours only where a person reads them.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
        .init();

    // SLUICE_MODE=jobmanager or taskmanager make this process one of a cluster (see
    // sluice-node); local by default.
    let node = sluice_node::NodeConfig::from_env().context("cluster settings")?;
    let parallelism = args
        .parallelism
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if node.role == sluice_node::Role::TaskManager {
        return run_task_manager(&args, &node, parallelism).await;
    }
    let mode = Mode::from_args(&args)?;
    let fresh = args.restore.is_none() && !args.resume;
    let input = match &mode {
        Mode::Iceberg(catalog) => {
            let data = prepare_data(&args).await?;
            check_fail_after(args.fail_after, data.events)?;
            if fresh {
                table::start_fresh(catalog, &args.table)?;
            }
            Input::Files(data)
        }
        Mode::Kafka(topics) => Input::Kafka(prepare_topics(&args, topics, fresh).await?),
    };
    let (lookup_url, service) = lookup_service(&args).await?;
    let env = configure(&args, parallelism)?;
    let probes = build_job(&env, &args, parallelism, &args.data_dir, &lookup_url, &mode)?;
    print_header(&args, parallelism, &input, &lookup_url);

    let submitted = sluice_node::submit(&env, "clickstream", &node)
        .await
        .context("the clickstream job could not start")?;
    let sluice_node::Submitted::Job {
        handle: job,
        cluster,
    } = submitted
    else {
        bail!("a job master or a local run got a task manager's role");
    };
    if let Some(cluster) = &cluster {
        println!(
            "job master listening on {}: start task managers with SLUICE_MODE=taskmanager \
             SLUICE_JOBMANAGER={} and the same secret and arguments",
            cluster.local_addr(),
            cluster.local_addr()
        );
    }
    // The servers stop when these guards are dropped, after the summary.
    let _ui = match args.ui {
        Some(addr) => {
            let ui = sluice_web::serve_dashboard(addr, job.observer())
                .await
                .with_context(|| format!("cannot serve the dashboard on {addr}"))?;
            println!("dashboard  http://{}/", ui.local_addr());
            Some(ui)
        }
        None => None,
    };
    let _metrics = match args.metrics_addr {
        Some(addr) => {
            let metrics = sluice_web::serve_prometheus(addr, job.observer())
                .await
                .with_context(|| format!("cannot serve metrics on {addr}"))?;
            println!("metrics    http://{}/metrics", metrics.local_addr());
            Some(metrics)
        }
        None => None,
    };
    let watched = watch(job, &probes, &args, input.events(), mode.source_name()).await;
    if let Some(service) = service {
        service.abort();
    }
    if let Some(cluster) = cluster {
        cluster.finish().await;
    }
    let watched = watched?;

    // Reading the output back and working out what it should hold are blocking work.
    let (events, table_name) = (input.events(), args.table.clone());
    let (committed, expected, mode) = tokio::task::spawn_blocking(move || {
        let users = events::user_popularity().context("invalid user distribution")?;
        let expected = Expected::compute(events, &users);
        let committed = match &mode {
            Mode::Iceberg(catalog) => Output::Table(table::read_back(catalog, &table_name)?),
            Mode::Kafka(topics) => Output::Kafka(kafka::read_back(topics)?),
        };
        anyhow::Ok((committed, expected, mode))
    })
    .await
    .context("reading the output back failed")??;
    let check = table::check(committed.rows(), &expected);
    print_summary(&Summary {
        watched: &watched,
        probes: &probes,
        args: &args,
        parallelism,
        input: &input,
        mode: &mode,
        expected: &expected,
        committed: &committed,
        check: &check,
    });
    Ok(check.passed())
}

/// A task manager: builds the same job (the job master reads the click files' listing and
/// checks the table; this process runs the subtasks deployed to it) and runs until the job
/// master says the job ended.
async fn run_task_manager(
    args: &Args,
    node: &sluice_node::NodeConfig,
    parallelism: usize,
) -> anyhow::Result<bool> {
    let mode = Mode::from_args(args)?;
    let (lookup_url, service) = lookup_service(args).await?;
    let env = configure(args, parallelism)?;
    build_job(&env, args, parallelism, &args.data_dir, &lookup_url, &mode)?;
    let submitted = sluice_node::submit(&env, "clickstream", node)
        .await
        .context("the task manager could not start")?;
    let sluice_node::Submitted::TaskManager(run) = submitted else {
        bail!("a task manager got another role");
    };
    println!(
        "task manager {} running; waiting for the job master",
        node.task_manager_id
    );
    let ended = run.wait().await;
    if let Some(service) = service {
        service.abort();
    }
    ended.context("the task manager failed")?;
    println!("task manager {}: the job ended", node.task_manager_id);
    Ok(true)
}

/// The click files: the ones in --data-dir when they fit, generated otherwise; with --restore
/// they must be there already (the checkpoint's file offsets point into them).
async fn prepare_data(args: &Args) -> anyhow::Result<data::DataSet> {
    let dir = args.data_dir.clone();
    let wanted = match &args.restore {
        None => data::Manifest {
            events: args.events.unwrap_or(DEFAULT_EVENTS),
            files: args.files,
        },
        Some(restore) => {
            let Some(there) = data::manifest(&dir)? else {
                bail!(
                    "--restore {} needs the click files of the run it resumes, but {} holds none",
                    restore.display(),
                    dir.display()
                );
            };
            if let Some(n) = args.events
                && n != there.events
            {
                bail!(
                    "--events {n} differs from the {} clicks in {} that --restore {} continues \
                     to read",
                    there.events,
                    dir.display(),
                    restore.display()
                );
            }
            there
        }
    };
    if args.restore.is_none() && data::manifest(&dir)? != Some(wanted) {
        println!(
            "generating {} clicks into {} files in {} ...",
            grouped(wanted.events),
            wanted.files,
            dir.display()
        );
    }
    tokio::task::spawn_blocking(move || data::prepare(&dir, wanted))
        .await
        .context("generating the click files failed")?
}

/// Kafka mode's clicks: on a fresh start both topics are created afresh and the clicks produced
/// into the clicks topic; a restored run reads the clicks topic of the run it resumes as it is.
async fn prepare_topics(
    args: &Args,
    topics: &kafka::Topics,
    fresh: bool,
) -> anyhow::Result<kafka::Clicks> {
    let owned = topics.clone();
    if !fresh {
        let clicks = tokio::task::spawn_blocking(move || kafka::existing_clicks(&owned))
            .await
            .context("reading the clicks topic failed")??;
        if let Some(n) = args.events
            && n != clicks.events
        {
            bail!(
                "--events {n} differs from the {} clicks in the topic {} at {} that the resumed \
                 run continues to read",
                clicks.events,
                topics.clicks,
                topics.bootstrap
            );
        }
        check_fail_after(args.fail_after, clicks.events)?;
        return Ok(clicks);
    }
    let events = args.events.unwrap_or(DEFAULT_EVENTS);
    check_fail_after(args.fail_after, events)?;
    kafka::start_fresh(topics).await?;
    println!(
        "producing {} clicks into the Kafka topic {} ({} partitions) at {} ...",
        grouped(events),
        topics.clicks,
        topics.partitions,
        topics.bootstrap
    );
    let took = tokio::task::spawn_blocking(move || kafka::produce(&owned, events))
        .await
        .context("producing the clicks failed")??;
    Ok(kafka::Clicks {
        events,
        partitions: topics.partitions as usize,
        produced: Some(took),
    })
}

fn check_fail_after(fail_after: Option<u64>, events: u64) -> anyhow::Result<()> {
    match fail_after {
        Some(n) if n >= events => bail!(
            "--fail-after {n} must be below the {events} clicks of the run, or no failure happens"
        ),
        _ => Ok(()),
    }
}

/// The environment: parallelism, checkpoints, restart strategy, restore.
fn configure(args: &Args, parallelism: usize) -> anyhow::Result<StreamEnvironment> {
    let env = StreamEnvironment::new();
    env.set_parallelism(parallelism);
    env.enable_checkpointing(Duration::from_millis(args.checkpoint_interval_ms));
    match &args.checkpoint_url {
        Some(url) => {
            let storage = sluice_object_store::ObjectStoreCheckpointStorage::from_url(
                url,
                sluice_object_store::ObjectStoreCheckpointStorage::aws_options_from_env(),
                std::num::NonZeroUsize::MIN.saturating_add(2),
            )
            .with_context(|| format!("--checkpoint-url {url}"))?;
            env.set_checkpoint_storage_backend(std::sync::Arc::new(storage));
        }
        None => {
            env.set_checkpoint_storage(&args.checkpoint_dir);
        }
    }
    if args.resume {
        env.resume_from_latest_checkpoint();
    }
    env.set_restart_strategy(
        RestartStrategy::fixed_delay(3, Duration::from_millis(500))
            .context("invalid restart strategy")?,
    );
    if let Some(dir) = &args.restore {
        env.restore_from(dir);
    }
    Ok(env)
}

/// Adds the clickstream job to `env`.
///
/// The fault-injection operator is always there (with no failure to inject unless
/// `--fail-after` is given), so that every run has the same job graph and any checkpoint can be
/// restored into any run.
fn build_job(
    env: &StreamEnvironment,
    args: &Args,
    parallelism: usize,
    data_dir: &Path,
    lookup_url: &str,
    mode: &Mode,
) -> anyhow::Result<Probes> {
    let failures = match args.fail_after {
        // Each reader subtask reads about 1/p of the clicks.
        Some(n) => FailureInjector::at_record(0, (n / parallelism as u64).max(1)),
        None => FailureInjector::at_record(0, u64::MAX).times(0),
    };
    let lateness = Duration::from_millis(events::MAX_LATENESS_MS);
    let raw = match mode {
        Mode::Iceberg(_) => env.from_source(FileSource::<RawClick>::csv(data_dir), None, SOURCE),
        // The same strategy as the files' below, run by the source for each partition: a
        // reader's watermark is the least of its partitions'.
        Mode::Kafka(topics) => env.from_source(
            kafka::source(topics)?,
            Some(WatermarkStrategy::for_bounded_out_of_orderness(
                lateness,
                |c: &RawClick| c.time_ms,
            )),
            KAFKA_SOURCE,
        ),
    };
    let parsed = raw
        .process(failures.clone())
        .name("Fault injection")
        .filter(|c: &RawClick| !events::is_bot(c))
        .name("Drop bots")
        .flat_map(events::parse)
        .name("Parse");
    let clicks = match mode {
        Mode::Iceberg(_) => parsed.assign_timestamps_and_watermarks(
            WatermarkStrategy::for_bounded_out_of_orderness(lateness, |c: &Click| c.timestamp_ms),
        ),
        // The records carry the event times the source gave them, through the filters.
        Mode::Kafka(_) => parsed,
    };

    let enriched = enrich(&clicks, args, lookup_url)?;
    let minutes =
        enriched
            .key_by(|c: &EnrichedClick| c.click.user)
            .window(TumblingEventTimeWindows::of(Duration::from_millis(
                MINUTE_MS as u64,
            )));
    let late_clicks = minutes.late_records_dropped();
    let rows = minutes
        .aggregate_with(
            CountClicks,
            |user: &u64, minute, (clicks, profile): (u64, lookup::Profile)| ClicksPerMinute {
                user: *user as i64,
                minute: minute.start * 1_000,
                clicks: clicks as i64,
                country: profile.country,
                tier: profile.tier,
            },
        )
        .name("Clicks per user per minute");
    match mode {
        Mode::Iceberg(catalog) => {
            table::sink(catalog.clone(), &args.table).sink(&rows);
        }
        Mode::Kafka(topics) => {
            rows.sink_to_kafka(kafka::sink(topics)?);
        }
    }
    Ok(Probes {
        late_clicks,
        failures,
    })
}

/// Starts the in-process lookup service, or checks that the one at `--lookup-url` answers.
async fn lookup_service(
    args: &Args,
) -> anyhow::Result<(String, Option<tokio::task::JoinHandle<()>>)> {
    match args.lookup {
        stores::Store::Http => {}
        stores::Store::Redis => {
            stores::load_redis(&args.redis_url).await?;
            return Ok((args.redis_url.clone(), None));
        }
        stores::Store::Postgres => {
            stores::load_postgres(&args.postgres_url).await?;
            return Ok((args.postgres_url.clone(), None));
        }
    }
    if let Some(url) = &args.lookup_url {
        // Any answer, even an error status, shows that the service is there.
        let patience = Duration::from_millis(args.lookup_timeout_ms);
        let answer = tokio::time::timeout(patience, ProfileLookup::new(url).fetch(0)).await;
        match answer {
            Ok(Ok(_) | Err(LookupError::Status { .. })) => return Ok((url.clone(), None)),
            Ok(Err(e)) => {
                return Err(anyhow::Error::new(e).context("the lookup service does not answer"));
            }
            Err(_) => bail!("the lookup service at {url} did not answer within {patience:?}"),
        }
    }
    let behaviour = ServiceBehaviour {
        latency: Duration::from_millis(args.lookup_latency_ms),
        failure_rate: args.lookup_failure_rate,
    };
    let (url, task) = lookup::start_service(behaviour)
        .await
        .context("cannot start the lookup service on 127.0.0.1")?;
    Ok((url, Some(task)))
}

/// The profile lookup: `unordered_wait_with_retry` (or ordered with `--ordered`), spelt with the
/// builder for its metrics handle and a name.
fn enrich(
    clicks: &DataStream<Click>,
    args: &Args,
    lookup_url: &str,
) -> anyhow::Result<DataStream<EnrichedClick>> {
    if args.lookup != stores::Store::Http {
        let settings = stores::Settings {
            capacity: args.capacity,
            timeout: Duration::from_millis(args.lookup_timeout_ms),
            ordered: args.ordered,
            max_batch_size: args.lookup_batch_size,
        };
        return stores::enrich(clicks, args.lookup, lookup_url, &settings, LOOKUP);
    }
    // Retry every failed attempt, 10 ms after the first, doubling up to 200 ms; the timeout
    // (over all attempts) normally ends the retries long before the 1,000 attempts run out.
    let retry = AsyncRetryStrategy::exponential_backoff(
        1_000,
        Duration::from_millis(10),
        2.0,
        Duration::from_millis(200),
    )
    .if_error(|_| true)
    .build()
    .context("invalid retry strategy")?;
    let wait = AsyncWait::new(ProfileLookup::new(lookup_url))
        .capacity(args.capacity)
        .timeout(Duration::from_millis(args.lookup_timeout_ms))
        .retry(retry)
        .name(LOOKUP);
    let wait = if args.ordered {
        wait.ordered()
    } else {
        wait.unordered()
    };
    wait.apply(clicks).context("invalid lookup settings")
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

fn print_header(args: &Args, parallelism: usize, input: &Input, lookup_url: &str) {
    match input {
        Input::Files(data) => {
            let files = match data.generated {
                Some(took) => format!("generated in {:.1} s", took.as_secs_f64()),
                None => "generated by an earlier run".to_string(),
            };
            println!(
                "clickstream: {} clicks of {USERS} users (Zipf s={ZIPF_EXPONENT}) in {} CSV files ({:.1} MB, {files}) in {}, parallelism {parallelism}",
                grouped(data.events),
                data.files.len(),
                data.bytes as f64 / 1e6,
                absolute(&data.dir).display(),
            );
        }
        Input::Kafka(clicks) => {
            let produced = match clicks.produced {
                Some(took) => format!("produced in {:.1} s", took.as_secs_f64()),
                None => "produced by an earlier run".to_string(),
            };
            println!(
                "clickstream: {} clicks of {USERS} users (Zipf s={ZIPF_EXPONENT}) in the Kafka topic {} ({}, keyed by user, {produced}) at {}, parallelism {parallelism}",
                grouped(clicks.events),
                args.kafka_clicks_topic,
                counted(clicks.partitions as u64, "partition"),
                args.kafka.as_deref().unwrap_or_default(),
            );
        }
    }
    let service = match (args.lookup, &args.lookup_url) {
        (stores::Store::Redis, _) => {
            format!("Redis server (MGET, batches of {})", args.lookup_batch_size)
        }
        (stores::Store::Postgres, _) => format!(
            "PostgreSQL server (= ANY($1), batches of {})",
            args.lookup_batch_size
        ),
        (stores::Store::Http, Some(_)) => "external lookup service".to_string(),
        (stores::Store::Http, None) => format!(
            "in-process lookup service ({} ms +-50 %, {} % failures)",
            args.lookup_latency_ms,
            args.lookup_failure_rate * 100.0
        ),
    };
    println!(
        "profiles from the {service} at {lookup_url}: {}, capacity {} per subtask, timeout {} ms",
        if args.ordered { "ordered" } else { "unordered" },
        args.capacity,
        args.lookup_timeout_ms
    );
    let start = match (&args.restore, &args.kafka) {
        (Some(dir), _) => format!("restoring from {}", dir.display()),
        (None, Some(_)) if args.resume => {
            "resuming from the newest checkpoint, if any; the topics kept".to_string()
        }
        (None, Some(_)) => "topics created afresh".to_string(),
        (None, None) => "table created afresh".to_string(),
    };
    match &args.kafka {
        Some(bootstrap) => println!(
            "clicks per user per minute exactly once into the Kafka topic {} at {bootstrap} \
             (JSON, keyed by user; one transaction per checkpoint and subtask, transactional \
             ids {}-*), over {parallelism} writers",
            args.kafka_counts_topic,
            kafka::transactional_id_prefix(&args.kafka_counts_topic),
        ),
        None => println!(
            "clicks per user per minute into the Iceberg table {} (warehouse {}), range-distributed over {parallelism} writers",
            args.table,
            absolute(&args.warehouse).display(),
        ),
    }
    println!(
        "checkpoints every {} ms in {}; {start}",
        args.checkpoint_interval_ms,
        absolute(&args.checkpoint_dir).display(),
    );
    if let Some(n) = args.fail_after {
        println!(
            "one failure will be injected after about {} clicks",
            grouped(n)
        );
    }
}

/// Waits for the job, updating the progress line every second and sampling the lookups in
/// flight; reports restarts as they happen. Ctrl-C stops the job and says how to resume it.
async fn watch(
    mut job: JobHandle,
    probes: &Probes,
    args: &Args,
    events: u64,
    source: &'static str,
) -> anyhow::Result<Watched> {
    let started = Instant::now();
    let mut progress = Progress::new(events, source);
    let mut checkpoints = Checkpoints::new(job.observer());
    let mut samples = tokio::time::interval(SAMPLE_EVERY);
    samples.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ticks_per_update = (PROGRESS_EVERY.as_millis() / SAMPLE_EVERY.as_millis()) as u64;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let (mut tick, mut max_in_flight, mut failures) = (0u64, 0u64, 0u32);
    let result = loop {
        tokio::select! {
            result = &mut job => break result,
            _ = &mut ctrl_c => {
                job.cancel();
                let _ = (&mut job).await;
                progress.finish();
                bail!(
                    "interrupted; checkpoints are kept in {}: resume with --restore {}",
                    args.checkpoint_dir.display(),
                    args.checkpoint_dir.display()
                );
            }
            _ = samples.tick() => {
                let metrics = job.metrics();
                let in_flight = AsyncMetricsSnapshot::from_job(&metrics, LOOKUP).in_flight;
                max_in_flight = max_in_flight.max(in_flight);
                if probes.failures.injected() > failures {
                    failures = probes.failures.injected();
                    let last = checkpoints.last().map_or("none yet".to_string(), |(id, _)| format!("chk-{id}"));
                    progress.println(&format!(
                        "  ** injected failure #{failures}: the job fails and restarts from its \
                         last completed checkpoint ({last})"
                    ));
                }
                report_restores(checkpoints.refresh(), &progress, source);
                tick += 1;
                if tick.is_multiple_of(ticks_per_update) {
                    progress.update(Reading {
                        metrics: &metrics,
                        in_flight,
                        checkpoint: checkpoints.last(),
                    });
                }
            }
        }
    };
    report_restores(checkpoints.refresh(), &progress, source);
    progress.finish();
    Ok(Watched {
        result: result.context("the clickstream job failed")?,
        elapsed: started.elapsed(),
        max_in_flight,
        last_checkpoint: checkpoints.last(),
    })
}

/// Prints `restores`: (attempt, the checkpoint it restored).
fn report_restores(restores: Vec<(u32, Option<u64>)>, progress: &Progress, source: &str) {
    let offsets = if source == KAFKA_SOURCE {
        "partition"
    } else {
        "file"
    };
    for (attempt, restored) in restores {
        let who = match attempt {
            0 => "the job".to_string(),
            n => format!("attempt {n}"),
        };
        progress.println(&match restored {
            Some(id) => format!(
                "  ** {who} restored chk-{id}: readers resume at their {offsets} \
                 offsets, windows and lookups in flight as they were"
            ),
            None => format!(
                "  ** attempt {attempt} starts from the beginning (no checkpoint \
                 had completed)"
            ),
        });
    }
}

/// Everything the summary reports.
struct Summary<'a> {
    watched: &'a Watched,
    probes: &'a Probes,
    args: &'a Args,
    parallelism: usize,
    input: &'a Input,
    mode: &'a Mode,
    expected: &'a Expected,
    committed: &'a Output,
    check: &'a table::Check,
}

fn print_summary(s: &Summary<'_>) {
    let (result, check) = (&s.watched.result, s.check);
    let row = |name: &str, text: String| println!("  {name:<12} {text}");
    println!();
    println!(
        "clickstream finished in {:.1} s",
        s.watched.elapsed.as_secs_f64()
    );
    let read = result.metrics.operator(s.mode.source_name()).records_out;
    let events = s.input.events();
    let reread = if read > events {
        format!(
            ", {} read in all (clicks after the restored checkpoint are read again)",
            grouped(read)
        )
    } else {
        String::new()
    };
    let from = match s.input {
        Input::Files(data) => format!("{} files", data.files.len()),
        Input::Kafka(clicks) => format!(
            "the topic {} ({})",
            s.args.kafka_clicks_topic,
            counted(clicks.partitions as u64, "partition")
        ),
    };
    row(
        "clicks in",
        format!(
            "{} from {from}{reread}; {} bots and {} invalid urls dropped, {} passed",
            grouped(events),
            grouped(s.expected.bots),
            grouped(s.expected.invalid),
            grouped(s.expected.passed()),
        ),
    );
    let what = format!(
        "{} ({}, {})",
        counted(check.rows, "row"),
        counted(check.users, "user"),
        counted(check.minutes, "minute"),
    );
    let overview = match s.committed {
        Output::Table(committed) => &committed.overview,
        Output::Kafka(committed) => {
            row(
                "committed",
                format!(
                    "{what} in the topic {}, read back with read_committed",
                    s.args.kafka_counts_topic,
                ),
            );
            let partitions: Vec<String> = committed
                .per_partition
                .iter()
                .map(|(p, records)| format!("#{p}: {}", counted(*records, "record")))
                .collect();
            row("per partition", partitions.join(", "));
            print_rest_of_summary(s, read);
            return;
        }
    };
    let bytes: u64 = overview.files.iter().map(|f| f.bytes).sum();
    row(
        "committed",
        format!(
            "{what} in {} ({:.1} MB), {}",
            counted(overview.files.len() as u64, "data file"),
            bytes as f64 / 1e6,
            counted(overview.snapshots as u64, "snapshot"),
        ),
    );
    // Rows and files per writer subtask (a restored run may have had other writers).
    let count = overview.files.iter().filter_map(|f| f.writer).max();
    let mut writers: Vec<(u64, u64)> =
        vec![(0, 0); count.map_or(s.parallelism, |w| (w + 1).max(s.parallelism))];
    for f in &overview.files {
        if let Some(w) = f.writer.and_then(|w| writers.get_mut(w)) {
            w.0 += f.records;
            w.1 += 1;
        }
    }
    let writers: Vec<String> = writers
        .iter()
        .enumerate()
        .map(|(i, (rows, files))| {
            format!(
                "#{i}: {} in {}",
                counted(*rows, "row"),
                counted(*files, "file")
            )
        })
        .collect();
    row("per writer", writers.join(", "));
    print_rest_of_summary(s, read);
}

/// The summary from its throughput on, the same in both modes.
fn print_rest_of_summary(s: &Summary<'_>, read: u64) {
    let (result, check) = (&s.watched.result, s.check);
    let row = |name: &str, text: String| println!("  {name:<12} {text}");
    row(
        "throughput",
        format!(
            "{:.1} k clicks/s ({} read in {:.1} s)",
            read as f64 / s.watched.elapsed.as_secs_f64().max(1e-9) / 1e3,
            grouped(read),
            s.watched.elapsed.as_secs_f64(),
        ),
    );
    let restored = result
        .restored_from
        .map(|id| format!(", resumed from checkpoint {id}"))
        .unwrap_or_default();
    let last = match s.watched.last_checkpoint {
        Some((id, took)) => format!(", the last (chk-{id}) in {} ms", took.as_millis()),
        None => String::new(),
    };
    row(
        "checkpoints",
        format!(
            "{} completed{last}{restored}; {} ({} injected)",
            result.completed_checkpoints,
            counted(result.restarts.into(), "restart"),
            counted(s.probes.failures.injected().into(), "failure"),
        ),
    );
    let lookups = AsyncMetricsSnapshot::from_job(&result.metrics, LOOKUP);
    row(
        "lookups",
        format!(
            "{} completed{}, in flight max {} ({} x {}), latency p50 {:.1} ms, p99 {:.1} ms, {} retries, {} timeouts",
            grouped(lookups.completed),
            if result.restarts > 0 {
                " over every attempt"
            } else {
                ""
            },
            s.watched.max_in_flight,
            s.parallelism,
            s.args.capacity,
            millis(lookups.latency.quantile(0.5)),
            millis(lookups.latency.quantile(0.99)),
            grouped(lookups.retries),
            grouped(lookups.timeouts),
        ),
    );
    let top: Vec<String> = check
        .top
        .iter()
        .map(|(user, clicks)| format!("user {user} ({})", grouped(*clicks)))
        .collect();
    row("top users", top.join(", "));
    let late = s.probes.late_clicks.get();
    let output = match s.mode {
        Mode::Iceberg(_) => s.args.table.clone(),
        Mode::Kafka(topics) => format!("the Kafka topic {} (read_committed)", topics.counts),
    };
    if check.passed() {
        println!(
            "output check: PASSED: read back from {}: {} rows, one per (user, minute) the clicks \
             give, none twice, every count right, adding up to the {} clicks that passed the \
             filters",
            output,
            grouped(check.rows),
            grouped(check.passed),
        );
    } else {
        println!(
            "output check: FAILED: read back from {}: {} rows for {} (user, minute) pairs, {} \
             twice, {} missing or with a wrong count, {} unexpected; {} clicks counted for {} \
             that passed the filters; {} late clicks dropped by the window",
            output,
            grouped(check.rows),
            grouped(check.expected_keys),
            grouped(check.duplicates),
            grouped(check.wrong),
            grouped(check.unexpected),
            grouped(check.clicks),
            grouped(check.passed),
            grouped(late),
        );
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `n` and `noun`, plural unless `n` is 1: "1 file", "1,024 files".
fn counted(n: u64, noun: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{} {noun}{s}", grouped(n))
}

/// Thousands separators, for readable counts.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
