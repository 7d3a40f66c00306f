//! The clickstream job: every click enriched with its user's profile from an HTTP service, counted
//! per user, and written exactly once to JSON-lines files.
//!
//! ```text
//! Source: Clicks -> Fault injection -> Drop bots -> Parse -> Timestamps/Watermarks
//!     -> Enrich: profile lookup (async HTTP, unordered, retries, timeout)     (one chain per subtask)
//!     == key_by(user) ==>
//! Count per user (keyed state) -> Sink: JSON lines (exactly-once)            (one chain per subtask)
//!     == key_by(user) ==>
//! Clicks per user per minute (event-time window) -> Sink: per-minute JSON lines (exactly-once)
//!
//!                 Enrich <-- HTTP/1, pooled connections --> lookup service on 127.0.0.1
//! ```
//!
//! - **Clicks.** A generator derives each raw event (user, url, user agent, event time) from its
//!   index alone, with Zipf-skewed users, so every run with the same `--events` has the same
//!   clicks. Crawler clicks and unparsable urls are dropped.
//! - **Enrichment.** Every click that passed the filters asks the lookup service for its user's
//!   profile (country, tier): one HTTP request per click, through
//!   `unordered_wait_with_retry` (written with the `AsyncWait` builder, which also hands out the
//!   metrics): up to `--capacity` requests in flight per subtask, failed requests retried with
//!   exponential backoff, and a timeout over all attempts after which the click gets an
//!   "unknown" profile. There is deliberately no cache: the example shows what the operator does
//!   with real I/O on every record (the popular users would make a per-subtask cache hit most of
//!   the time and the latency figures would mostly measure the cache). By default the example
//!   starts the service itself, with `--lookup-latency-ms` and `--lookup-failure-rate`;
//!   `--lookup-url` points it at another one. The lookups set the pace (about 30,000 events/s on
//!   2 cores with the defaults: 200 requests in flight at about 7 ms each), so the default of
//!   2,000,000 events makes a run take about a minute.
//! - **Exactly once.** A checkpoint every `--checkpoint-interval-ms` stores the sources'
//!   positions, the clicks whose lookup is in flight, and the per-user counts (keyed state);
//!   the sink writes each checkpoint's records to a hidden file and renames it into the
//!   `--output` directory only when that checkpoint is complete. `--fail-after N` makes the job
//!   fail once, after about N events; it restarts from its last checkpoint (fixed delay of
//!   500 ms, at most 3 restarts). `--restore DIR`
//!   resumes an interrupted run (kill it, then pass its checkpoint directory, or one `chk-N` in
//!   it). Either way the summary reads the committed output back and checks it: no line twice,
//!   and per user exactly the clicks that passed the filters.
//!
//! - **Clicks per user per minute.** Beside the running counts, the enriched clicks go through a
//!   1-minute tumbling event-time window per user (`window(..).aggregate_with(..)`: one counter
//!   per user and minute, never the clicks); each window fires when the watermark passes its
//!   end and is committed exactly once to `--output`/`per-minute`. The clicks keep their event
//!   time through the async lookup. The summary checks that each user's minutes add up to the
//!   user's clicks.
//!
//! - **Lookups from a database.** `--lookup redis` or `--lookup postgres` (servers at
//!   `--redis-url` / `--postgres-url`, by default the usual ports on 127.0.0.1, as `.ci/services`
//!   starts them) loads the same profiles into the server, then enriches with `sluice-lookup`
//!   in batches of `--lookup-batch-size` (one `MGET`, or one prepared `= ANY($1)` query, per
//!   batch) through the same async wait operator, so checkpoints and exactly-once output are
//!   unchanged.
//!
//! Run it with `cargo run --release --example clickstream -- --help` for the flags.

#[path = "clickstream/count.rs"]
mod count;
#[path = "clickstream/events.rs"]
mod events;
#[path = "clickstream/lookup.rs"]
mod lookup;
#[path = "clickstream/output.rs"]
mod output;
#[path = "clickstream/stores.rs"]
mod stores;

use anyhow::{Context as _, bail};
use clap::Parser;
use count::{ClicksPerMinute, CountClicks, CountPerUser, CountedClick};
use events::{Click, Expected, RawClick, USERS, ZIPF_EXPONENT};
use lookup::{EnrichedClick, LookupError, ProfileLookup, ServiceBehaviour};
use output::{RunSettings, Verdict};
use sluice::JobHandle;
use sluice::async_io::{AsyncMetrics, AsyncMetricsSnapshot, MAX_CAPACITY};
use sluice::failover::RestartStrategy;
use sluice::prelude::*;
use sluice::testing::FailureInjector;
use sluice::window::{LateRecordsDropped, TumblingEventTimeWindows};
use sluice_connectors::file::JsonLinesSink;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Events of a run when `--events` is not given: about a minute on 2 cores.
const DEFAULT_EVENTS: u64 = 2_000_000;
/// The name of the source, used to read its metrics.
const SOURCE: &str = "Source: Clicks";
/// How often the in-flight gauge is sampled for its maximum.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// Enrich a generated, Zipf-skewed clickstream over HTTP, count clicks per user, and commit the
/// result exactly once.
#[derive(Parser, Debug)]
#[command(name = "clickstream")]
struct Args {
    /// Number of click events to generate [default: 2000000; with --restore: the restored run's]
    #[arg(long, value_parser = at_least_one)]
    events: Option<u64>,
    /// Parallelism of every operator [default: the number of CPU cores; with --restore: the
    /// restored run's]
    #[arg(long, value_parser = parse_parallelism)]
    parallelism: Option<usize>,
    /// Milliseconds between two checkpoints
    #[arg(long, default_value_t = 1000, value_parser = at_least_one)]
    checkpoint_interval_ms: u64,
    /// Where checkpoints are kept
    #[arg(long, default_value = "sluice-checkpoints/clickstream")]
    checkpoint_dir: PathBuf,
    /// Directory of the committed output (JSON lines); a fresh start removes the files of earlier
    /// runs from it, --restore continues them
    #[arg(long, default_value = "clickstream-out")]
    output: PathBuf,
    /// Fail once, after about N events (then restart from the last checkpoint)
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    fail_after: Option<u64>,
    /// Resume an interrupted run from a retained checkpoint: a chk-N directory, or a checkpoint
    /// directory (its newest complete checkpoint)
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
    lookups: AsyncMetrics,
    late_clicks: LateRecordsDropped,
    last_checkpoint: Arc<AtomicU64>,
    failures: FailureInjector,
}

/// How the run went, as seen from outside the job.
struct Watched {
    result: JobResult,
    elapsed: Duration,
    max_in_flight: u64,
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

/// Runs the job and reports; `Ok(false)` when the output is not exact.
async fn run(args: Args) -> anyhow::Result<bool> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    report_injected_failures_briefly();

    let (lookup_url, service) = lookup_service(&args).await?;
    let settings = prepare_output(&args)?;
    let env = configure(&args, settings)?;
    let probes = build_job(&env, &args, settings, &lookup_url)?;
    print_header(&args, settings, &lookup_url);

    let job = env
        .submit("clickstream")
        .context("the clickstream job could not start")?;
    let watched = watch(job, &probes, &args).await;
    if let Some(service) = service {
        service.abort();
    }
    let watched = watched?;

    let users = events::user_popularity().context("invalid user distribution")?;
    let expected = Expected::compute(settings.events, &users);
    let verdict = output::verify(&args.output, &expected)
        .context("reading the committed output back failed")?;
    let minutes = output::verify_minutes(&args.output, &expected)
        .context("reading the committed per-minute output back failed")?;
    print_summary(&watched, &probes, &expected, &verdict, &args, settings);
    print_minutes(&minutes, &probes, &args.output);
    Ok(verdict.exact() && minutes.exact())
}

/// Prints the failure `--fail-after` injects as one line instead of a panic report with a
/// backtrace; other panics are reported as usual.
fn report_injected_failures_briefly() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or_default();
        if message.starts_with("injected failure") {
            eprintln!("  ** {message}: the job restarts from its last completed checkpoint");
        } else {
            report(info);
        }
    }));
}

/// Empties the output directory for a fresh run, or checks it for a restore; returns the run's
/// settings.
fn prepare_output(args: &Args) -> anyhow::Result<RunSettings> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let Some(restore) = &args.restore else {
        let settings = RunSettings {
            events: args.events.unwrap_or(DEFAULT_EVENTS),
            parallelism: args.parallelism.unwrap_or(cores),
        };
        check_fail_after(args, settings)?;
        output::start_fresh(&args.output, settings)?;
        return Ok(settings);
    };
    let noted = output::noted_settings(&args.output)?;
    let keep = |flag: &str, given: Option<u64>, noted: u64| match given {
        Some(g) if g != noted => bail!(
            "--{flag} {g} differs from the {noted} of the run in {} that --restore {} continues",
            args.output.display(),
            restore.display()
        ),
        _ => Ok(()),
    };
    keep("events", args.events, noted.events)?;
    keep(
        "parallelism",
        args.parallelism.map(|p| p as u64),
        noted.parallelism as u64,
    )?;
    check_fail_after(args, noted)?;
    Ok(noted)
}

fn check_fail_after(args: &Args, settings: RunSettings) -> anyhow::Result<()> {
    match args.fail_after {
        Some(n) if n >= settings.events => bail!(
            "--fail-after {n} must be below the {} events of the run, or no failure happens",
            settings.events
        ),
        _ => Ok(()),
    }
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

/// The environment: parallelism, checkpoints, restart strategy, restore.
fn configure(args: &Args, settings: RunSettings) -> anyhow::Result<StreamEnvironment> {
    let env = StreamEnvironment::new();
    env.set_parallelism(settings.parallelism);
    env.enable_checkpointing(Duration::from_millis(args.checkpoint_interval_ms));
    env.set_checkpoint_storage(&args.checkpoint_dir);
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
    settings: RunSettings,
    lookup_url: &str,
) -> anyhow::Result<Probes> {
    let users = events::user_popularity().context("invalid user distribution")?;
    let failures = match args.fail_after {
        // The generator deals events round-robin, so subtask 0 has seen about N/p of them
        // when N were generated.
        Some(n) => FailureInjector::at_record(0, (n / settings.parallelism as u64).max(1)),
        None => FailureInjector::at_record(0, u64::MAX).times(0),
    };
    let clicks = env
        .from_generator(Generator::new(move |i| events::raw_click(i, &users)).take(settings.events))
        .name(SOURCE)
        .process(failures.clone())
        .name("Fault injection")
        .filter(|c: &RawClick| !events::is_bot(c))
        .name("Drop bots")
        .flat_map(events::parse)
        .name("Parse")
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_bounded_out_of_orderness(
                Duration::from_millis(events::MAX_LATENESS_MS),
                |c: &Click| c.timestamp_ms,
            )
            .with_idleness(Duration::from_secs(5)),
        );

    let (enriched, lookups) = enrich(&clicks, args, lookup_url)?;
    let last_checkpoint = Arc::new(AtomicU64::new(0));
    let by_user = enriched.key_by(|c: &EnrichedClick| c.click.user);
    let minutes = by_user.window(TumblingEventTimeWindows::of(Duration::from_secs(60)));
    let late_clicks = minutes.late_records_dropped();
    minutes
        .aggregate_with(CountClicks, |user: &u64, minute, clicks| ClicksPerMinute {
            user: *user,
            minute_ms: minute.start,
            clicks,
        })
        .name("Clicks per user per minute")
        .sink_to_exactly_once(JsonLinesSink::<ClicksPerMinute>::new(
            output::minutes_dir(&args.output),
            output::MINUTES_PREFIX,
        ))
        .name("Sink: per-minute JSON lines");
    by_user
        .process(CountPerUser::new(last_checkpoint.clone()))
        .name("Count per user")
        .sink_to_exactly_once(JsonLinesSink::<CountedClick>::new(
            &args.output,
            output::FILE_PREFIX,
        ))
        .name("Sink: JSON lines");
    Ok(Probes {
        lookups,
        late_clicks,
        last_checkpoint,
        failures,
    })
}

/// The profile lookup: `unordered_wait_with_retry` (or ordered with `--ordered`), spelt with the
/// builder for its metrics handle and a name.
fn enrich(
    clicks: &DataStream<Click>,
    args: &Args,
    lookup_url: &str,
) -> anyhow::Result<(DataStream<EnrichedClick>, AsyncMetrics)> {
    if args.lookup != stores::Store::Http {
        let settings = stores::Settings {
            capacity: args.capacity,
            timeout: Duration::from_millis(args.lookup_timeout_ms),
            ordered: args.ordered,
            max_batch_size: args.lookup_batch_size,
        };
        return stores::enrich(
            clicks,
            args.lookup,
            lookup_url,
            &settings,
            "Enrich: profile lookup",
        );
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
        .name("Enrich: profile lookup");
    let wait = if args.ordered {
        wait.ordered()
    } else {
        wait.unordered()
    };
    let metrics = wait.metrics();
    let enriched = wait.apply(clicks).context("invalid lookup settings")?;
    Ok((enriched, metrics))
}

fn print_header(args: &Args, settings: RunSettings, lookup_url: &str) {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    println!(
        "clickstream: {} events, {USERS} users (Zipf s={ZIPF_EXPONENT}), parallelism {}",
        grouped(settings.events),
        settings.parallelism
    );
    println!(
        "checkpoints every {} ms in {}",
        args.checkpoint_interval_ms,
        absolute(&args.checkpoint_dir).display()
    );
    match &args.restore {
        Some(dir) => println!(
            "restoring from {}; continuing the output in {}",
            dir.display(),
            absolute(&args.output).display()
        ),
        None => println!(
            "output (exactly-once JSON lines) in {}",
            absolute(&args.output).display()
        ),
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
    if let Some(n) = args.fail_after {
        println!(
            "one failure will be injected after about {} events",
            grouped(n)
        );
    }
}

/// Waits for the job, printing progress every second and sampling the lookups in flight; Ctrl-C
/// stops the job and says how to resume it.
async fn watch(mut job: JobHandle, probes: &Probes, args: &Args) -> anyhow::Result<Watched> {
    let started = Instant::now();
    let mut samples = tokio::time::interval(SAMPLE_EVERY);
    samples.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let ticks_per_line = (Duration::from_secs(1).as_millis() / SAMPLE_EVERY.as_millis()) as u64;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let (mut tick, mut max_in_flight, mut last) = (0u64, 0u64, (Duration::ZERO, 0u64));
    let result = loop {
        tokio::select! {
            result = &mut job => break result.context("the clickstream job failed")?,
            _ = &mut ctrl_c => {
                job.cancel();
                let _ = job.await;
                bail!(
                    "interrupted; checkpoints are kept in {}: resume with --restore {}",
                    args.checkpoint_dir.display(),
                    args.checkpoint_dir.display()
                );
            }
            _ = samples.tick() => {
                let lookups = probes.lookups.total();
                max_in_flight = max_in_flight.max(lookups.in_flight);
                tick += 1;
                if tick.is_multiple_of(ticks_per_line) {
                    last = print_progress(&job, &lookups, probes, started.elapsed(), last);
                }
            }
        }
    };
    Ok(Watched {
        result,
        elapsed: started.elapsed(),
        max_in_flight,
    })
}

/// One progress line; returns the time and event count it showed.
fn print_progress(
    job: &JobHandle,
    lookups: &AsyncMetricsSnapshot,
    probes: &Probes,
    now: Duration,
    (then, events_then): (Duration, u64),
) -> (Duration, u64) {
    let events = job.metrics().operator(SOURCE).records_out;
    // A restarted source counts its records from zero again.
    let since = if events < events_then { 0 } else { events_then };
    let rate = (events - since) as f64 / (now - then).as_secs_f64().max(1e-9);
    let checkpoint = match probes.last_checkpoint.load(Ordering::Relaxed) {
        0 => "none yet".to_string(),
        id => format!("chk-{id}"),
    };
    println!(
        "  {:>5.1} s  {:>11} events {:>6.1} k/s | lookups {:>4} in flight, p99 {:>6.1} ms, {:>7} retries, {:>4} timeouts | last checkpoint {checkpoint}",
        now.as_secs_f64(),
        grouped(events),
        rate / 1e3,
        lookups.in_flight,
        millis(lookups.latency.quantile(0.99)),
        grouped(lookups.retries),
        grouped(lookups.timeouts),
    );
    (now, events)
}

fn print_summary(
    watched: &Watched,
    probes: &Probes,
    expected: &Expected,
    verdict: &Verdict,
    args: &Args,
    settings: RunSettings,
) {
    let result = &watched.result;
    let restored = result
        .restored_from
        .map(|id| format!(", resumed from checkpoint {id}"))
        .unwrap_or_default();
    println!();
    println!(
        "job        finished in {:.1} s{restored}: {} completed, {} ({} injected)",
        watched.elapsed.as_secs_f64(),
        counted(result.completed_checkpoints, "checkpoint"),
        counted(result.restarts.into(), "restart"),
        counted(probes.failures.injected().into(), "failure"),
    );
    println!(
        "events     {}: {} bot clicks and {} invalid urls dropped, {} passed the filters",
        grouped(settings.events),
        grouped(expected.bots),
        grouped(expected.invalid),
        grouped(expected.passed()),
    );
    if result.restarts == 0 && result.restored_from.is_none() {
        println!(
            "throughput {:.1} k events/s",
            settings.events as f64 / watched.elapsed.as_secs_f64().max(1e-9) / 1e3
        );
    }
    let lookups = probes.lookups.total();
    println!(
        "lookups    {} completed{}: in flight max {} (capacity {} x {}), latency p50 {:.1} ms, p99 {:.1} ms, {} retries, {} timeouts",
        grouped(lookups.completed),
        if result.restarts > 0 {
            " over every attempt (requests of a failed attempt are sent again)"
        } else {
            ""
        },
        watched.max_in_flight,
        settings.parallelism,
        args.capacity,
        millis(lookups.latency.quantile(0.5)),
        millis(lookups.latency.quantile(0.99)),
        grouped(lookups.retries),
        grouped(lookups.timeouts),
    );
    println!(
        "output     {} committed in {} in {}",
        counted(verdict.records, "record"),
        counted(verdict.files as u64, "file"),
        args.output.display()
    );
    print_verdict(verdict);
}

fn print_minutes(minutes: &output::MinutesVerdict, probes: &Probes, dir: &Path) {
    let late = probes.late_clicks.get();
    let late = if late == 0 {
        String::new()
    } else {
        format!(", {} late clicks dropped", grouped(late))
    };
    if minutes.exact() {
        println!(
            "windows    {} (user, minute) counts committed in {}{late}: no window twice, and \
             each user's minutes add up to the user's clicks: exactly once",
            grouped(minutes.windows),
            output::minutes_dir(dir).display()
        );
    } else {
        println!(
            "NOT EXACT  per-minute counts: {} windows, {} committed twice, {} users whose \
             minutes do not add up{late}",
            grouped(minutes.windows),
            grouped(minutes.duplicates),
            grouped(minutes.wrong_users as u64)
        );
    }
}

fn print_verdict(verdict: &Verdict) {
    if verdict.exact() {
        println!(
            "verified   read back: no duplicates, and the committed counts of {} add up to the {} \
             events that passed the filters: exactly once",
            counted(verdict.users as u64, "user"),
            grouped(verdict.expected)
        );
    } else {
        println!(
            "NOT EXACT  read back: {}, {} with wrong counts, {} for the {} events that passed \
             the filters",
            counted(verdict.duplicates, "duplicate record"),
            counted(verdict.wrong_users as u64, "user"),
            counted(verdict.records, "record"),
            grouped(verdict.expected)
        );
    }
    let top: Vec<String> = verdict
        .top
        .iter()
        .map(|(user, clicks)| format!("user {user} ({})", grouped(*clicks)))
        .collect();
    println!("top users  {}", top.join(", "));
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
