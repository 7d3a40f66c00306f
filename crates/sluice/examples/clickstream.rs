//! The clickstream job: how many clicks each user made.
//!
//! A generator produces raw click events (user, url, user agent, event time). Users are drawn with
//! Zipf-skewed popularity, so a few users make most clicks, as on a real site. Each event is
//! derived only from its index, so every run with the same `--events` gives the same answer.
//!
//! ```text
//! Source: Clicks -> Drop bots -> Parse -> Timestamps/Watermarks   (one chain per subtask)
//!     == key_by(user) ==>
//! Count per user -> Sink: Collect                                  (one chain per subtask)
//! ```
//!
//! The count operator keeps a hash map per subtask and emits each user's final count at end of
//! input, so the collected output stays small however many events run through the job.
//!
//! Run it with `cargo run --release --example clickstream -- --help` for the flags.

use anyhow::{Context as _, bail};
use clap::Parser;
use rand::RngCore;
use rand_distr::{Distribution, Zipf};
use rustc_hash::FxHashMap;
use sluice::prelude::*;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The name of the source, used to read its metrics.
const SOURCE: &str = "Source: Clicks";
/// The name of the counting operator, used to read its metrics.
const COUNT_OPERATOR: &str = "Count per user";

/// Number of distinct users the generator draws from.
const USERS: u64 = 100_000;
/// Zipf exponent of user popularity: the higher, the more skewed.
const ZIPF_EXPONENT: f64 = 1.1;
/// Event time of event 0, in milliseconds since the Unix epoch (2024-01-01T00:00:00Z).
const START_MS: i64 = 1_704_067_200_000;
/// Events per millisecond of event time.
const EVENTS_PER_MS: u64 = 1_000;
/// Events arrive up to this late relative to their place in the stream.
const MAX_LATENESS_MS: u64 = 2_000;
/// One event in this many comes from a crawler.
const BOT_ONE_IN: u64 = 50;

/// Urls as they appear in the raw log; the last two do not parse.
const URLS: [&str; 10] = [
    "/",
    "/search?q=rust+streaming",
    "/product/42",
    "/product/7",
    "/cart",
    "/checkout",
    "/blog/exactly-once",
    "/about",
    "javascript:void(0)",
    "",
];

/// User agents of human visitors.
const BROWSERS: [&str; 3] = [
    "Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) Safari/605.1.15",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/126.0",
];

/// User agents of crawlers.
const BOTS: [&str; 2] = [
    "Googlebot/2.1 (+http://www.google.com/bot.html)",
    "Mozilla/5.0 (compatible; bingbot/2.0)",
];

/// Count clicks per user over a generated, Zipf-skewed clickstream.
#[derive(Parser, Debug)]
#[command(name = "clickstream")]
struct Args {
    /// Number of click events to generate.
    #[arg(long, default_value_t = 600_000_000)]
    events: u64,
    /// Parallelism of every operator [default: the number of CPU cores]
    #[arg(long, value_parser = parse_parallelism)]
    parallelism: Option<usize>,
}

fn parse_parallelism(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("the parallelism must be at least 1".to_string()),
        Ok(p) => Ok(p),
        Err(e) => Err(format!("not a whole number: {e}")),
    }
}

/// A click as it comes out of the log, before validation.
#[derive(Clone, Debug)]
struct RawClick {
    user: u64,
    url: &'static str,
    user_agent: &'static str,
    timestamp_ms: i64,
}

/// A validated click of a human visitor.
#[derive(Clone, Debug)]
struct Click {
    user: u64,
    timestamp_ms: i64,
}

/// The per-index random stream: SplitMix64, so that event `i` is the same on every machine and
/// with every version of `rand`.
struct SplitMix64(u64);

impl RngCore for SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// Event `index` of the clickstream.
fn raw_click(index: u64, users: &Zipf<f64>) -> RawClick {
    let mut rng = SplitMix64(index);
    // Zipf samples are whole numbers from 1 up; user 0 is the most popular.
    let user = (users.sample(&mut rng) as u64).clamp(1, USERS) - 1;
    let r = rng.next_u64();
    let url = URLS[(r % URLS.len() as u64) as usize];
    let user_agent = if (r >> 8).is_multiple_of(BOT_ONE_IN) {
        BOTS[((r >> 16) % BOTS.len() as u64) as usize]
    } else {
        BROWSERS[((r >> 16) % BROWSERS.len() as u64) as usize]
    };
    let lateness = (r >> 32) % MAX_LATENESS_MS;
    let timestamp_ms = START_MS + (index / EVENTS_PER_MS) as i64 - lateness as i64;
    RawClick {
        user,
        url,
        user_agent,
        timestamp_ms,
    }
}

fn is_bot(click: &RawClick) -> bool {
    let agent = click.user_agent.as_bytes();
    agent.windows(3).any(|w| w.eq_ignore_ascii_case(b"bot"))
}

/// The click, if its url is a site path; `None` for anything else (scripts, empty urls).
fn parse(click: RawClick) -> Option<Click> {
    let valid = click.url.starts_with('/') && !click.url.contains(char::is_whitespace);
    valid.then_some(Click {
        user: click.user,
        timestamp_ms: click.timestamp_ms,
    })
}

/// Counts clicks per user; emits `(user, clicks)` for every user it saw at end of input.
#[derive(Clone, Default)]
struct CountPerUser {
    counts: FxHashMap<u64, u64>,
}

impl Operator<Click> for CountPerUser {
    type Out = (u64, u64);

    fn process_batch(
        &mut self,
        batch: Vec<Click>,
        _out: &mut Collector<(u64, u64)>,
    ) -> Result<(), UserError> {
        for click in batch {
            *self.counts.entry(click.user).or_insert(0) += 1;
        }
        Ok(())
    }

    fn end_input(&mut self, out: &mut Collector<(u64, u64)>) -> Result<(), UserError> {
        for (user, clicks) in self.counts.drain() {
            out.collect((user, clicks));
        }
        Ok(())
    }
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

fn millions_per_second(records: u64, elapsed: Duration) -> f64 {
    records as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6
}

fn percent(part: Duration, whole: Duration) -> f64 {
    100.0 * part.as_secs_f64() / whole.as_secs_f64().max(1e-9)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One readable line with the whole chain of causes, whatever RUST_BACKTRACE says.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();

    let env = StreamEnvironment::new();
    if let Some(p) = args.parallelism {
        env.set_parallelism(p);
    }
    let parallelism = env.config().parallelism;

    let users = Zipf::new(USERS as f64, ZIPF_EXPONENT)
        .with_context(|| format!("invalid Zipf parameters n={USERS}, s={ZIPF_EXPONENT}"))?;
    let counts = env
        .from_generator(Generator::new(move |i| raw_click(i, &users)).take(args.events))
        .name(SOURCE)
        .filter(|c: &RawClick| !is_bot(c))
        .name("Drop bots")
        .flat_map(parse)
        .name("Parse")
        .assign_timestamps_and_watermarks(
            WatermarkStrategy::for_bounded_out_of_orderness(
                Duration::from_millis(MAX_LATENESS_MS),
                |c: &Click| c.timestamp_ms,
            )
            .with_idleness(Duration::from_secs(5)),
        )
        .key_by(|c: &Click| c.user)
        .process(CountPerUser::default())
        .name(COUNT_OPERATOR)
        .collect();

    println!(
        "clickstream: {} events, {USERS} users (Zipf s={ZIPF_EXPONENT}), parallelism {parallelism}",
        grouped(args.events)
    );
    let started = Instant::now();
    let mut job = env
        .submit("clickstream")
        .context("the clickstream job could not start")?;

    let mut ticks = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = (Duration::ZERO, 0u64);
    let result = loop {
        tokio::select! {
            result = &mut job => break result.context("the clickstream job failed")?,
            _ = ticks.tick() => {
                let metrics = job.metrics();
                let generated = metrics.operator(SOURCE).records_out;
                let counted = metrics.operator(COUNT_OPERATOR).records_in;
                let now = started.elapsed();
                let rate = millions_per_second(generated.saturating_sub(last.1), now - last.0);
                last = (now, generated);
                println!(
                    "  {:>6.1} s  {:>15} events  {:>6.1} M events/s  {:>15} counted",
                    now.as_secs_f64(),
                    grouped(generated),
                    rate,
                    grouped(counted),
                );
            }
        }
    };
    let elapsed = started.elapsed();

    let metrics = &result.metrics;
    let generated = metrics.operator(SOURCE).records_out;
    let bots = generated - metrics.operator("Drop bots").records_out;
    let invalid = metrics.operator("Parse").records_in - metrics.operator("Parse").records_out;
    let counted = metrics.operator(COUNT_OPERATOR).records_in;
    let mut per_user = counts.take();
    let total: u64 = per_user.iter().map(|&(_, n)| n).sum();
    if generated != args.events || total != counted {
        bail!(
            "inconsistent result: generated {generated} of {} events; the counts add up to \
             {total} but the count operator received {counted} clicks",
            args.events
        );
    }

    println!();
    println!("records    {} events generated", grouped(generated));
    println!("           {} bot clicks dropped", grouped(bots));
    println!("           {} invalid urls dropped", grouped(invalid));
    println!(
        "           {} clicks counted for {} users",
        grouped(counted),
        grouped(per_user.len() as u64)
    );
    println!("elapsed    {:.2} s", elapsed.as_secs_f64());
    println!(
        "throughput {:.1} M events/s",
        millions_per_second(generated, elapsed)
    );
    println!("per subtask:");
    for s in metrics.subtasks_of(SOURCE) {
        println!(
            "  {SOURCE:<15} {}: {:>15} events generated  busy {:>5.1} %  backpressured {:>5.1} %",
            s.subtask,
            grouped(s.records_out),
            percent(s.busy, result.duration),
            percent(s.backpressured, result.duration),
        );
    }
    for s in metrics.subtasks_of(COUNT_OPERATOR) {
        println!(
            "  {COUNT_OPERATOR:<15} {}: {:>15} clicks ({:>4.1} %)   busy {:>5.1} %  backpressured {:>5.1} %",
            s.subtask,
            grouped(s.records_in),
            100.0 * s.records_in as f64 / counted.max(1) as f64,
            percent(s.busy, result.duration),
            percent(s.backpressured, result.duration),
        );
    }
    per_user.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    println!("top 5 users:");
    for (user, clicks) in per_user.iter().take(5) {
        println!(
            "  user {user:>6}: {:>13} clicks ({:>4.1} %)",
            grouped(*clicks),
            100.0 * *clicks as f64 / counted.max(1) as f64
        );
    }
    Ok(())
}
