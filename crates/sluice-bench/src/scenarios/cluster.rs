//! Scenario `cluster`: cluster mode (issue 15) beside one process, every role a separate OS
//! process on loopback.
//!
//! The bench starts itself (`std::env::current_exe`) with the hidden subcommand `cluster-node
//! <case>`, which builds the case's job and runs it with `sluice_node::execute` in the role its
//! `SLUICE_*` environment gives it. Two cases:
//!
//! - `exchange`: generator of N records → map to `(i % 10_000, 1)` → `key_by` → a count per key
//!   (`FxHashMap`) → discard, parallelism 2; run in one process (local mode) and on a job master
//!   and 2 task managers with 1 slot each, so the hash exchange between the two count subtasks
//!   crosses processes over TCP. Ratio cluster / local, target ≥ 0.5 (issue 15).
//! - `async`: generator → unordered async wait (capacity 100 per subtask) whose call sleeps
//!   10 ms on tokio's timer → discard; a job master + 1 task manager at parallelism 1 against a
//!   job master + 2 task managers at parallelism 2. Ratio 2 / 1, target ≥ 1.8.
//!
//! What is timed excludes process start-up and the job master's wait for task managers (which
//! `JobResult::duration` includes): the last operator of each subtask stamps the wall clock
//! (`SystemTime`, one clock for every process of this machine) at its first record and at the
//! end of its input and writes the stamps and its record count to a file; the rate is all
//! records over the span from the earliest first stamp to the latest end. The counts must add
//! up to N, or the run fails. Sides alternate, one round after another.

use super::CommonArgs;
use crate::measure::{machine, median_f64, runtime};
use crate::report::{Report, Row};
use anyhow::{Context, bail};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use sluice::prelude::*;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

const SCENARIO: &str = "cluster";
/// The secret every process of a run shares.
const SECRET: &str = "sluice-bench cluster scenario secret";
/// Distinct keys of the `exchange` case.
const KEYS: u64 = 10_000;
/// In-flight calls per async subtask.
const CAPACITY: usize = 100;
/// The simulated lookup latency of the `async` case.
const LATENCY: Duration = Duration::from_millis(10);
/// How long one run may take before its processes are killed and the scenario fails.
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// Flags of `cluster`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Records of the `exchange` case (default 50,000,000; 4,000,000 with --quick).
    #[arg(long)]
    records: Option<u64>,
    /// Records of the `async` case (default 40,000; 10,000 with --quick).
    #[arg(long)]
    async_records: Option<u64>,
    /// Run only this case (`exchange` or `async`); both by default.
    #[arg(long)]
    case: Option<Case>,
}

/// The jobs a node can run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Case {
    /// The keyed count behind a hash exchange.
    Exchange,
    /// The async wait over a 10 ms sleep.
    Async,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Exchange => "exchange",
            Case::Async => "async",
        }
    }
}

/// Flags of the hidden `cluster-node` subcommand: one process of a run.
#[derive(clap::Args, Debug)]
pub struct NodeArgs {
    /// Which job to build.
    #[arg(value_enum)]
    case: Case,
    /// Records the generator produces over all subtasks.
    #[arg(long)]
    records: u64,
    /// The job's parallelism.
    #[arg(long)]
    parallelism: usize,
    /// Where each subtask of the last operator writes its stamps.
    #[arg(long)]
    out: PathBuf,
}

/// What one subtask of the last operator measured.
#[derive(Serialize, Deserialize, Debug, Clone, Copy)]
struct Stamps {
    /// Wall clock at its first record, ns since the Unix epoch (`None`: it got no record).
    first_ns: Option<u128>,
    /// Wall clock at the end of its input.
    end_ns: u128,
    /// Records it received.
    records: u64,
}

/// Nanoseconds since the Unix epoch.
fn epoch_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// The stamping part of the last operator of both jobs.
#[derive(Clone)]
struct Stamper {
    out: PathBuf,
    subtask: usize,
    first_ns: Option<u128>,
    records: u64,
}

impl Stamper {
    fn new(out: &Path) -> Self {
        Stamper {
            out: out.to_path_buf(),
            subtask: 0,
            first_ns: None,
            records: 0,
        }
    }

    fn saw(&mut self, records: usize) {
        if self.first_ns.is_none() {
            self.first_ns = Some(epoch_ns());
        }
        self.records += records as u64;
    }

    fn write(&self) -> Result<(), UserError> {
        let stamps = Stamps {
            first_ns: self.first_ns,
            end_ns: epoch_ns(),
            records: self.records,
        };
        let path = self.out.join(format!("stamps-{}", self.subtask));
        let text = serde_json::to_string(&stamps).map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(())
    }
}

/// `exchange`'s keyed count: a count per key, stamped.
#[derive(Clone)]
struct KeyCount {
    stamper: Stamper,
    counts: FxHashMap<u64, u64>,
}

impl Operator<(u64, u64)> for KeyCount {
    type Out = u64;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.stamper.subtask = ctx.subtask_index();
        Ok(())
    }

    fn process_batch(
        &mut self,
        batch: Vec<(u64, u64)>,
        _: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        self.stamper.saw(batch.len());
        for (k, n) in batch {
            *self.counts.entry(k).or_insert(0) += n;
        }
        Ok(())
    }

    fn end_input(&mut self, _: &mut Collector<u64>) -> Result<(), UserError> {
        let total: u64 = self.counts.values().sum();
        if total != self.stamper.records {
            return Err(format!("counted {total} of {} records", self.stamper.records).into());
        }
        self.stamper.write()
    }
}

/// `async`'s last operator: stamps what the async wait emits.
#[derive(Clone)]
struct Stamp(Stamper);

impl Operator<u64> for Stamp {
    type Out = u64;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.0.subtask = ctx.subtask_index();
        Ok(())
    }

    fn process_batch(&mut self, batch: Vec<u64>, _: &mut Collector<u64>) -> Result<(), UserError> {
        self.0.saw(batch.len());
        Ok(())
    }

    fn end_input(&mut self, _: &mut Collector<u64>) -> Result<(), UserError> {
        self.0.write()
    }
}

/// What a job master (or a local process) prints on its stdout when the job ended.
#[derive(Serialize, Deserialize, Debug)]
struct NodeReport {
    /// `JobResult::duration`: on a job master, from submission (so including the wait for task
    /// managers) to the end.
    job_ms: f64,
    restarts: u32,
}

/// The hidden `cluster-node` subcommand: builds the case's job and runs it in the role the
/// environment gives.
pub fn node(args: &NodeArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.parallelism >= 1, "--parallelism must be at least 1");
    let env = StreamEnvironment::new();
    env.set_parallelism(args.parallelism);
    let source = env.from_generator(Generator::new(|i| i).take(args.records));
    match args.case {
        Case::Exchange => {
            source
                .map(|i| (i % KEYS, 1u64))
                .name("Key")
                .key_by(|r: &(u64, u64)| r.0)
                .process(KeyCount {
                    stamper: Stamper::new(&args.out),
                    counts: FxHashMap::default(),
                })
                .name("Count")
                .discard();
        }
        Case::Async => {
            let lookup = async_fn(|i: u64| async move {
                tokio::time::sleep(LATENCY).await;
                Ok::<_, UserError>(Some(i))
            });
            AsyncWait::new(lookup)
                .capacity(CAPACITY)
                .timeout(Duration::from_secs(60))
                .unordered()
                .apply(&source)?
                .process(Stamp(Stamper::new(&args.out)))
                .name("Stamp")
                .discard();
        }
    }
    let rt = runtime()?;
    if let Some(result) = rt.block_on(sluice_node::execute(&env, args.case.name()))? {
        let report = NodeReport {
            job_ms: result.duration.as_secs_f64() * 1e3,
            restarts: result.restarts,
        };
        println!("{}", serde_json::to_string(&report)?);
    }
    Ok(())
}

/// A child process with its output drained in the background (so it never blocks on a full
/// pipe); killed when dropped.
struct Proc {
    name: String,
    child: Child,
    output: JoinHandle<String>,
}

impl Proc {
    fn spawn(mut cmd: Command, name: String) -> anyhow::Result<Proc> {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("starting the {name}"))?;
        let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
        let output = tokio::spawn(async move {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let read_out = async {
                if let Some(s) = stdout.as_mut() {
                    let _ = s.read_to_end(&mut out).await;
                }
            };
            let read_err = async {
                if let Some(s) = stderr.as_mut() {
                    let _ = s.read_to_end(&mut err).await;
                }
            };
            tokio::join!(read_out, read_err);
            format!(
                "--- stdout\n{}--- stderr\n{}",
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&err)
            )
        });
        Ok(Proc {
            name,
            child,
            output,
        })
    }

    /// Waits up to `limit` for the process to exit successfully; returns its stdout and stderr.
    /// On failure or timeout, the error shows them.
    async fn finish(mut self, limit: Duration) -> anyhow::Result<String> {
        let status = match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(status) => Some(status.with_context(|| format!("waiting for the {}", self.name))?),
            Err(_) => {
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                None
            }
        };
        let output = self.output.await.unwrap_or_default();
        match status {
            Some(s) if s.success() => Ok(output),
            Some(s) => bail!("the {} failed ({s}):\n{output}", self.name),
            None => bail!(
                "the {} did not finish within {limit:?}; killed:\n{output}",
                self.name
            ),
        }
    }
}

/// A free port on 127.0.0.1 (bound and released; nothing else races for it in practice).
fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// How one run is deployed.
#[derive(Clone, Copy, Debug)]
enum Deployment {
    /// One process in local mode.
    Local,
    /// A job master and this many task managers with one slot each.
    Cluster(usize),
}

/// One measured run.
struct Measured {
    records_per_s: f64,
    /// The job master's `JobResult::duration` (includes its wait for task managers).
    job_ms: f64,
    /// Between the first stamps of the earliest and the latest subtask: how far apart the
    /// subtasks started (part of the timed span).
    skew_ms: f64,
}

/// The command of one process of a run.
fn node_command(exe: &Path, case: Case, records: u64, parallelism: usize, out: &Path) -> Command {
    let mut cmd = Command::new(exe);
    cmd.arg("cluster-node")
        .arg(case.name())
        .arg("--records")
        .arg(records.to_string())
        .arg("--parallelism")
        .arg(parallelism.to_string())
        .arg("--out")
        .arg(out)
        .env_remove("SLUICE_MODE")
        .env_remove("SLUICE_SECRET_FILE")
        .env_remove("SLUICE_HEALTH_ADDR")
        .env("SLUICE_SECRET", SECRET);
    cmd
}

/// Runs the case once as `deployment` and reads the stamps.
async fn run_once(
    exe: &Path,
    case: Case,
    records: u64,
    parallelism: usize,
    deployment: Deployment,
) -> anyhow::Result<Measured> {
    let dir = tempfile::tempdir().context("creating a directory for the stamps")?;
    let out = dir.path();
    let what = format!(
        "{} run ({deployment:?}, parallelism {parallelism})",
        case.name()
    );
    let report = match deployment {
        Deployment::Local => {
            let mut cmd = node_command(exe, case, records, parallelism, out);
            cmd.env("SLUICE_MODE", "local");
            Proc::spawn(cmd, format!("local process of the {what}"))?
                .finish(RUN_LIMIT)
                .await?
        }
        Deployment::Cluster(task_managers) => {
            let port = free_port()?;
            let mut cmd = node_command(exe, case, records, parallelism, out);
            cmd.env("SLUICE_MODE", "jobmanager")
                .env("SLUICE_RPC_ADDR", format!("127.0.0.1:{port}"));
            let jm = Proc::spawn(cmd, format!("job master of the {what}"))?;
            let mut tms = Vec::new();
            for i in 0..task_managers {
                let mut cmd = node_command(exe, case, records, parallelism, out);
                cmd.env("SLUICE_MODE", "taskmanager")
                    .env("SLUICE_JOBMANAGER", format!("127.0.0.1:{port}"))
                    .env("SLUICE_TASK_MANAGER_ID", format!("tm-{i}"))
                    .env("SLUICE_SLOTS", "1");
                tms.push(Proc::spawn(cmd, format!("task manager {i} of the {what}"))?);
            }
            // All at once, so that the first process to fail ends the run (a task manager
            // that dies at start would otherwise leave the job master waiting for slots); the
            // others are killed when dropped.
            let (report, _) = tokio::try_join!(
                jm.finish(RUN_LIMIT),
                futures::future::try_join_all(tms.into_iter().map(|tm| tm.finish(RUN_LIMIT)))
            )?;
            report
        }
    };
    let node: NodeReport = report
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .with_context(|| format!("no report from the {what}:\n{report}"))?;
    if node.restarts > 0 {
        bail!(
            "the {what} restarted {} times; its rate would not be the exchange's:\n{report}",
            node.restarts
        );
    }
    let mut stamps = Vec::new();
    for s in 0..parallelism {
        let path = out.join(format!("stamps-{s}"));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {} after the {what}", path.display()))?;
        let st: Stamps = serde_json::from_str(&text)
            .with_context(|| format!("parsing {}: {text:?}", path.display()))?;
        stamps.push(st);
    }
    let (records_per_s, skew_ms) = rate(&stamps, records).with_context(|| format!("the {what}"))?;
    Ok(Measured {
        records_per_s,
        job_ms: node.job_ms,
        skew_ms,
    })
}

/// The rate of a run from its subtasks' stamps: `records` over the span from the earliest first
/// record to the latest end of input; and how far apart the subtasks' first records were, in
/// ms. Fails when the subtasks did not see `records` records in all.
fn rate(stamps: &[Stamps], records: u64) -> anyhow::Result<(f64, f64)> {
    let total: u64 = stamps.iter().map(|s| s.records).sum();
    if total != records {
        bail!("saw {total} records of {records}");
    }
    let firsts = stamps.iter().filter_map(|s| s.first_ns);
    let first = firsts.clone().min().context("no subtask saw a record")?;
    let last_first = firsts.max().unwrap_or(first);
    let end = stamps.iter().map(|s| s.end_ns).max().unwrap_or(first);
    let span = Duration::from_nanos(u64::try_from(end.saturating_sub(first)).unwrap_or(u64::MAX));
    if span.is_zero() {
        bail!("took no measurable time");
    }
    Ok((
        records as f64 / span.as_secs_f64(),
        last_first.saturating_sub(first) as f64 / 1e6,
    ))
}

/// One side of a case.
struct Side {
    name: &'static str,
    parallelism: usize,
    deployment: Deployment,
    rates: Vec<f64>,
    job_ms: Vec<f64>,
    skew_ms: Vec<f64>,
}

impl Side {
    fn new(name: &'static str, parallelism: usize, deployment: Deployment) -> Side {
        Side {
            name,
            parallelism,
            deployment,
            rates: Vec::new(),
            job_ms: Vec::new(),
            skew_ms: Vec::new(),
        }
    }
}

/// Runs `baseline` and `measured` alternately for `rounds` rounds (after one untimed warm-up of
/// each) and returns the row: measured's median rate against baseline's.
#[allow(clippy::too_many_arguments)]
fn compare(
    report: &Report,
    rt: &tokio::runtime::Runtime,
    exe: &Path,
    case: Case,
    records: u64,
    rounds: usize,
    mut baseline: Side,
    mut measured: Side,
    target: f64,
) -> anyhow::Result<Row> {
    for round in 0..=rounds {
        for side in [&mut baseline, &mut measured] {
            let m = rt.block_on(run_once(
                exe,
                case,
                records,
                side.parallelism,
                side.deployment,
            ))?;
            let label = if round == 0 {
                "warm-up".to_string()
            } else {
                format!("round {round}/{rounds}")
            };
            report.progress(&format!(
                "{} {label} {}: {:.0} records/s (subtasks' first records {:.1} ms apart; \
                 job master's duration {:.0} ms)",
                case.name(),
                side.name,
                m.records_per_s,
                m.skew_ms,
                m.job_ms
            ));
            if round > 0 {
                side.rates.push(m.records_per_s.round());
                side.job_ms.push(m.job_ms);
                side.skew_ms.push(m.skew_ms);
            }
        }
    }
    let (value, base) = (median_f64(&measured.rates), median_f64(&baseline.rates));
    let mut row = Row::new(SCENARIO, case.name(), "throughput", "records/s", value)
        .against(baseline.name, base, value / base)
        .target(target)
        .records(records)
        .parallelism(measured.parallelism);
    row.values = measured.rates;
    row.baseline_values = baseline.rates;
    row.detail = Some(serde_json::json!({
        "side": measured.name,
        "job_ms": measured.job_ms,
        "baseline_job_ms": baseline.job_ms,
        "start_skew_ms": measured.skew_ms,
        "baseline_start_skew_ms": baseline.skew_ms,
    }));
    Ok(row)
}

/// Runs the scenario and prints its report.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let records = args
        .records
        .unwrap_or(if quick { 4_000_000 } else { 50_000_000 });
    let async_records = args
        .async_records
        .unwrap_or(if quick { 10_000 } else { 40_000 });
    let rounds = args.common.reps_or(2, 5);
    let exe = std::env::current_exe().context("locating the bench executable")?;
    let rt = runtime()?;
    let mut report = Report::new(args.common.json);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    report.progress(&format!(
        "cluster on {}, load average {}: {rounds} rounds per case, sides alternating; every \
         role a process of this binary on 127.0.0.1",
        machine(),
        load.split(' ').take(3).collect::<Vec<_>>().join(" ")
    ));
    let mut verdicts = Vec::new();
    if args.case.is_none_or(|c| c == Case::Exchange) {
        let row = compare(
            &report,
            &rt,
            &exe,
            Case::Exchange,
            records,
            rounds,
            Side::new("local p2 (one process)", 2, Deployment::Local),
            Side::new("cluster p2 (JM + 2 TMs)", 2, Deployment::Cluster(2)),
            0.5,
        )?;
        verdicts.push(format!(
            "exchange: cluster/local {:.2} (target >= 0.5) {}",
            row.ratio.unwrap_or(0.0),
            if row.meets_target() { "met" } else { "MISSED" }
        ));
        report.add(row)?;
    }
    if args.case.is_none_or(|c| c == Case::Async) {
        let row = compare(
            &report,
            &rt,
            &exe,
            Case::Async,
            async_records,
            rounds,
            Side::new("1 TM, p1", 1, Deployment::Cluster(1)),
            Side::new("2 TMs, p2", 2, Deployment::Cluster(2)),
            1.8,
        )?;
        verdicts.push(format!(
            "async: 2 TMs / 1 TM {:.2} (target >= 1.8) {}",
            row.ratio.unwrap_or(0.0),
            if row.meets_target() { "met" } else { "MISSED" }
        ));
        report.add(row)?;
    }
    report.finish()?;
    let verdict = format!("verdict: {}", verdicts.join("; "));
    if args.common.json {
        eprintln!("{verdict}");
    } else {
        println!("{verdict}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamps(first_ms: Option<u128>, end_ms: u128, records: u64) -> Stamps {
        Stamps {
            first_ns: first_ms.map(|ms| ms * 1_000_000),
            end_ns: end_ms * 1_000_000,
            records,
        }
    }

    #[test]
    fn the_rate_spans_the_earliest_first_record_to_the_latest_end() {
        let s = [
            stamps(Some(1_000), 1_400, 600),
            stamps(Some(1_040), 1_500, 400),
        ];
        let (rate, skew) = rate(&s, 1_000).unwrap();
        assert!((rate - 2_000.0).abs() < 1e-6, "{rate}");
        assert!((skew - 40.0).abs() < 1e-9, "{skew}");
    }

    #[test]
    fn a_subtask_without_records_counts_only_its_end() {
        let s = [stamps(Some(1_000), 1_100, 100), stamps(None, 1_200, 0)];
        let (rate, skew) = rate(&s, 100).unwrap();
        assert!((rate - 500.0).abs() < 1e-6, "{rate}");
        assert_eq!(skew, 0.0);
    }

    #[test]
    fn missing_records_or_no_records_fail_the_run() {
        let s = [stamps(Some(1_000), 1_100, 99)];
        assert!(
            rate(&s, 100)
                .unwrap_err()
                .to_string()
                .contains("99 records of 100")
        );
        assert!(rate(&[stamps(None, 1_000, 0)], 0).is_err());
    }
}
