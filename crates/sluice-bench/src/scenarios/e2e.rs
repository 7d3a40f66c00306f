//! Scenario `e2e`: the end-to-end job of issue 14 run as a user would run it, one fresh process
//! per run, so that peak memory and start-up time are the job's own. The same job runs in Apache
//! Flink through `flink/run_async_flink.sh --only e2e` (`E2EBench.java`), which interleaves the
//! two engines' processes and prints the ratios; this subcommand prints sluice's figures alone.
//!
//! The job: a number sequence (`0..records`) -> an unordered async wait (capacity 100) over a
//! function that completes at once -> timestamps and watermarks (1 s out of orderness) ->
//! `key_by` (10,000 keys) -> 1-minute tumbling event-time windows counting per key -> a sink
//! that digests (key, window start, count) and discards it, checkpoints every second, at
//! parallelism 1 and 2. The records are those of the `window` scenario.
//!
//! Per run it reports, all measured the same way on the Flink side:
//!
//! - **records/s**: records over the time from the first call of the async function to the
//!   last sink subtask's end of input;
//! - **start-up**: the time from the launcher's clock just before it starts the process to the
//!   first call of the async function (wall-clock epoch times in both processes);
//! - **peak RSS**: the process's `VmHWM` from `/proc/self/status` at the end of the job;
//! - **CPU**: user + system time of the process (`/proc/self/stat`);
//! - **wall**: launch to exit, measured by the launcher.

use super::CommonArgs;
use super::window::{Count, digest_entry, record};
use crate::measure::{machine, median_f64, peak_rss_kib, process_cpu_time, runtime};
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use sluice::prelude::*;
use sluice::window::TumblingEventTimeWindows;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const CAPACITY: usize = 100;
const BOUND_MS: u64 = 1_000;
const MINUTE_MS: u64 = 60_000;

/// Flags of `e2e`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Records per run (default 10 million, 1 million with --quick).
    #[arg(long)]
    records: Option<u64>,
    /// Parallelisms to run (repeatable; default 1 and 2).
    #[arg(long = "parallelism")]
    parallelisms: Vec<usize>,
}

/// Flags of the hidden `e2e-probe`: one run of the job in this process.
#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// Records to generate.
    #[arg(long)]
    records: u64,
    /// Parallelism of every operator.
    #[arg(long)]
    parallelism: usize,
    /// Wall-clock time (nanoseconds since the Unix epoch) at which the launcher started this
    /// process; start-up is measured from it. Default: when `main` began.
    #[arg(long)]
    launched_at_ns: Option<u64>,
}

/// What one run reports: one JSON line, the same fields as `E2EBench.java` prints.
#[derive(Debug, Serialize, Deserialize)]
pub struct Probe {
    /// `sluice` or `flink`.
    pub system: String,
    /// Records the job generated.
    pub records: u64,
    /// The job's parallelism.
    pub parallelism: usize,
    /// Records over first async call -> last sink end of input.
    pub records_per_s: f64,
    /// Launch -> first async call, in milliseconds.
    pub startup_ms: f64,
    /// Peak resident set size of the process, KiB.
    pub peak_rss_kib: u64,
    /// User + system CPU time of the process, seconds.
    pub cpu_s: f64,
    /// Completed checkpoints.
    pub checkpoints: u64,
    /// Digest of the windows the sink received (must agree between engines).
    pub digest: u64,
}

/// Nanoseconds since the Unix epoch, now.
fn epoch_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[derive(Default)]
struct Clock {
    first_call_ns: AtomicU64,
    last_end_ns: AtomicU64,
}

#[derive(Clone)]
struct DigestSink {
    sum: u64,
    total: Arc<AtomicU64>,
    clock: Arc<Clock>,
}

impl Sink<(u64, i64, u64)> for DigestSink {
    fn write_batch(&mut self, batch: Vec<(u64, i64, u64)>) -> Result<(), UserError> {
        for (k, s, n) in batch {
            self.sum = self.sum.wrapping_add(digest_entry(k, s, n));
        }
        Ok(())
    }
    fn finish(&mut self) -> Result<(), UserError> {
        self.total.fetch_add(self.sum, Ordering::Relaxed);
        self.clock
            .last_end_ns
            .fetch_max(epoch_ns(), Ordering::Relaxed);
        Ok(())
    }
}

/// Runs the job once; returns (digest, completed checkpoints).
async fn job(records: u64, parallelism: usize, clock: Arc<Clock>) -> anyhow::Result<(u64, u64)> {
    let checkpoints = tempfile::tempdir().context("creating the checkpoint directory")?;
    let env = StreamEnvironment::new();
    env.set_parallelism(parallelism);
    env.enable_checkpointing(Duration::from_secs(1));
    env.set_checkpoint_storage(checkpoints.path());
    let total = Arc::new(AtomicU64::new(0));
    let first = clock.clone();
    let immediate = async_fn(move |i: u64| {
        if first.first_call_ns.load(Ordering::Relaxed) == 0 {
            let _ = first.first_call_ns.compare_exchange(
                0,
                epoch_ns(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        async move { Ok::<_, UserError>(Some(record(i))) }
    });
    let wait = AsyncWait::new(immediate)
        .capacity(CAPACITY)
        .timeout(Duration::from_secs(60))
        .unordered();
    wait.apply(&env.from_generator(Generator::new(|i| i).take(records)))?
        .assign_timestamps_and_watermarks(WatermarkStrategy::for_bounded_out_of_orderness(
            Duration::from_millis(BOUND_MS),
            |r: &(u64, i64)| r.1,
        ))
        .key_by(|r: &(u64, i64)| r.0)
        .window(TumblingEventTimeWindows::of(Duration::from_millis(
            MINUTE_MS,
        )))
        .aggregate_with(Count, |k: &u64, w, n| (*k, w.start, n))
        .sink_to(DigestSink {
            sum: 0,
            total: total.clone(),
            clock,
        });
    let result = env.execute("e2e").await?;
    Ok((total.load(Ordering::Relaxed), result.completed_checkpoints))
}

/// The body of the probe process: runs the job once and prints a [`Probe`] as one JSON line.
pub fn probe(args: &ProbeArgs) -> anyhow::Result<()> {
    let launched = args.launched_at_ns.unwrap_or_else(epoch_ns);
    let rt = runtime()?;
    let clock = Arc::new(Clock::default());
    let (digest, checkpoints) = rt.block_on(job(args.records, args.parallelism, clock.clone()))?;
    let first = clock.first_call_ns.load(Ordering::Relaxed);
    let last = clock.last_end_ns.load(Ordering::Relaxed);
    if first == 0 || last <= first {
        bail!("the job did not record its first call and end ({first}, {last})");
    }
    let probe = Probe {
        system: "sluice".into(),
        records: args.records,
        parallelism: args.parallelism,
        records_per_s: args.records as f64 / ((last - first) as f64 / 1e9),
        startup_ms: first.saturating_sub(launched) as f64 / 1e6,
        peak_rss_kib: peak_rss_kib()?,
        cpu_s: process_cpu_time()?.as_secs_f64(),
        checkpoints,
        digest,
    };
    println!("{}", serde_json::to_string(&probe)?);
    Ok(())
}

/// Starts a probe process and returns its report and its wall time (launch to exit).
fn run_probe(records: u64, parallelism: usize) -> anyhow::Result<(Probe, Duration)> {
    let exe = std::env::current_exe().context("locating the bench executable")?;
    let start = Instant::now();
    let output = Command::new(exe)
        .args(["e2e-probe", "--records"])
        .arg(records.to_string())
        .arg("--parallelism")
        .arg(parallelism.to_string())
        .arg("--launched-at-ns")
        .arg(epoch_ns().to_string())
        .output()
        .context("starting the e2e probe process")?;
    let wall = start.elapsed();
    if !output.status.success() {
        bail!(
            "the e2e probe ({records} records, parallelism {parallelism}) failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .last()
        .context("the e2e probe printed nothing")?;
    let probe = serde_json::from_str(line)
        .with_context(|| format!("parsing the e2e probe's line {line:?}"))?;
    Ok((probe, wall))
}

/// Runs the scenario: `reps` probe processes per parallelism, medians of each figure.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let records = args.records.unwrap_or(if args.common.quick {
        1_000_000
    } else {
        10_000_000
    });
    let reps = args.common.reps_or(1, 3);
    let parallelisms = if args.parallelisms.is_empty() {
        vec![1, 2]
    } else {
        args.parallelisms.clone()
    };
    eprintln!(
        "e2e on {}: {records} records, {reps} process(es) per parallelism, medians",
        machine()
    );
    if !args.common.json {
        println!(
            "{:<6} {:>14} {:>12} {:>14} {:>9} {:>9} {:>6}",
            "p", "records/s", "start-up ms", "peak RSS MiB", "CPU s", "wall s", "chk"
        );
    }
    for p in parallelisms {
        let mut runs = Vec::with_capacity(reps);
        for _ in 0..reps {
            runs.push(run_probe(records, p)?);
        }
        let digests: Vec<u64> = runs.iter().map(|(r, _)| r.digest).collect();
        if digests.windows(2).any(|w| w[0] != w[1]) {
            bail!("the runs at parallelism {p} computed different digests: {digests:?}");
        }
        let med = |f: &dyn Fn(&(Probe, Duration)) -> f64| {
            median_f64(&runs.iter().map(f).collect::<Vec<_>>())
        };
        let rate = med(&|(r, _)| r.records_per_s);
        let startup = med(&|(r, _)| r.startup_ms);
        let rss = med(&|(r, _)| r.peak_rss_kib as f64) / 1024.0;
        let cpu = med(&|(r, _)| r.cpu_s);
        let wall = med(&|(_, w)| w.as_secs_f64());
        let chk = med(&|(r, _)| r.checkpoints as f64);
        if args.common.json {
            println!(
                "{}",
                serde_json::json!({
                    "system": "sluice", "scenario": "e2e", "case": format!("p{p}"),
                    "records": records, "parallelism": p, "records_per_s": rate,
                    "startup_ms": startup, "peak_rss_mib": rss, "cpu_s": cpu,
                    "wall_s": wall, "checkpoints": chk, "digest": digests[0],
                })
            );
        } else {
            println!(
                "{:<6} {:>14.0} {:>12.1} {:>14.1} {:>9.2} {:>9.2} {:>6.0}",
                format!("p{p}"),
                rate,
                startup,
                rss,
                cpu,
                wall,
                chk
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The job counts every record once, whatever the parallelism.
    #[test]
    fn the_job_counts_every_record_at_both_parallelisms() {
        let rt = runtime().unwrap();
        let n = 200_003;
        let mut want = None;
        for p in [1, 2] {
            let clock = Arc::new(Clock::default());
            let (digest, _) = rt.block_on(job(n, p, clock.clone())).unwrap();
            assert_ne!(clock.first_call_ns.load(Ordering::Relaxed), 0);
            assert!(
                clock.last_end_ns.load(Ordering::Relaxed)
                    >= clock.first_call_ns.load(Ordering::Relaxed)
            );
            assert_eq!(*want.get_or_insert(digest), digest, "parallelism {p}");
        }
    }
}
