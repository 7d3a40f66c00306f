//! Scenario `nexmark`: the Nexmark benchmark's queries in sluice beside the same queries in
//! Apache Flink 2.3 SQL, over the very same event files, one fresh process per run.
//!
//! - [`model`]: the Person / Auction / Bid events and their JSON-lines layout (the Nexmark
//!   project's Kafka table);
//! - [`generator`]: the reference generator's rules, seeded; the events are written once to
//!   `target/nexmark/events-<n>-seed<s>-rate<r>[-files<p>]/`, one file per source reader (a run
//!   at parallelism `p` reads `p` files), and both engines read the same files;
//! - [`queries`]: one function per query in sluice's DataStream API;
//! - [`sink`]: the sluice side's rows-to-files sink;
//! - [`flink`]: installing Flink, compiling and running `flink/NexmarkFlink.java`;
//! - [`compare`]: the two engines' final results row for row.
//!
//! The events are generated in event-time order (the reference's timestamps never decrease, and
//! the generator checks it as it writes), event `i` goes to file `i % p`, and each of an
//! engine's `p` readers reads one file, so no record is ever behind its reader's watermark (4 s
//! behind the highest time that reader read) nor behind the minimum over the readers that the
//! operators downstream see: no record is late in either engine, whatever the watermark
//! schedule. The sluice probe reports its window operators' late-record counts, which must be
//! zero; a record Flink dropped as late would show as a disagreement.
//!
//! Each (query, parallelism) runs in child processes, alternating sluice (this binary's hidden
//! `nexmark-probe`) and Flink (a JVM). Each child reports its own figures when its job is done:
//! the job's time (sluice: `execute` until it returns; Flink: the job's net runtime, submission
//! to end, excluding the JVM's and the MiniCluster's start-up), the rows it wrote, its peak RSS
//! (`VmHWM` of `/proc/self/status`) and CPU time (user + system, `/proc/self/stat`).
//! records/s is the events in the file over the job's time.

pub mod compare;
pub mod flink;
pub mod generator;
pub mod model;
pub mod queries;
pub mod sink;

use super::CommonArgs;
use crate::measure::{machine, peak_rss_kib, process_cpu_time, runtime};
use anyhow::{Context, bail};
use compare::Agreement;
use flink::Flink;
use generator::{Generator, GeneratorConfig};
use model::Event;
use queries::Lateness;
use serde::{Deserialize, Serialize};
use sink::RowFiles;
use sluice::prelude::*;
use sluice_source::{FileSource, FromSource};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Every query, in the report's order.
pub const ALL_QUERIES: [&str; 11] = [
    "q0", "q1", "q2", "q3", "q4", "q5", "q7", "q8", "q9", "q11", "q12",
];

/// The watermark's bound, as the Nexmark SQL's `dateTime - INTERVAL '4' SECOND`.
pub const OUT_OF_ORDERNESS: Duration = Duration::from_secs(4);

/// Flags of `nexmark`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    common: CommonArgs,
    /// Queries to run (comma-separated; default all: q0,q1,q2,q3,q4,q5,q7,q8,q9,q11,q12).
    #[arg(long = "query", value_delimiter = ',')]
    queries: Vec<String>,
    /// Parallelisms (comma-separated; default 1,2).
    #[arg(long = "parallelism", value_delimiter = ',')]
    parallelisms: Vec<usize>,
    /// Events in the file (default 1,000,000 with --quick, 4,000,000 otherwise).
    #[arg(long)]
    events: Option<u64>,
    /// Seed of the generator.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Events per second of event time (the reference's default `firstEventRate`).
    #[arg(long, default_value_t = 10_000)]
    rate: u64,
    /// Run sluice alone.
    #[arg(long)]
    no_flink: bool,
}

/// Flags of the hidden `nexmark-probe`: one query in this process.
#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// The query (q0, q1, q2, q5, q7, q11, q12).
    #[arg(long)]
    query: String,
    /// Parallelism of every operator.
    #[arg(long)]
    parallelism: usize,
    /// The directory holding the events file.
    #[arg(long)]
    events: PathBuf,
    /// The directory the rows are written into.
    #[arg(long)]
    out: PathBuf,
}

/// What one run of one engine reports (one JSON line from the child).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Probe {
    /// `sluice` or `flink`.
    pub system: String,
    /// The query.
    pub query: String,
    /// The job's parallelism.
    pub parallelism: usize,
    /// The job's time, milliseconds (see the module documentation).
    pub job_ms: f64,
    /// Flink: `env.execute()` as the client saw it, MiniCluster start-up included.
    #[serde(default)]
    pub execute_ms: Option<f64>,
    /// Rows written (changes, for Flink's updating results).
    pub rows: u64,
    /// Peak resident set size of the process, KiB.
    pub peak_rss_kib: u64,
    /// User + system CPU time of the process, seconds.
    pub cpu_s: f64,
    /// sluice: records its windows dropped as late (must be 0).
    #[serde(default)]
    pub late_dropped: Option<u64>,
    /// Launch to exit, seconds, measured by the parent.
    #[serde(default)]
    pub wall_s: f64,
}

impl Probe {
    /// The last line of a child's stdout.
    pub fn parse(stdout: &[u8]) -> anyhow::Result<Probe> {
        let stdout = String::from_utf8_lossy(stdout);
        let line = stdout.lines().last().context("the child printed nothing")?;
        serde_json::from_str(line).with_context(|| format!("parsing the child's line {line:?}"))
    }
}

/// The events of `dir` with event time and watermarks 4 s behind (the Nexmark `WATERMARK`).
pub fn read_events(env: &StreamEnvironment, dir: &Path) -> DataStream<Event> {
    let watermarks =
        WatermarkStrategy::for_bounded_out_of_orderness(OUT_OF_ORDERNESS, Event::date_time);
    env.from_source(
        FileSource::<Event>::json_lines(dir),
        Some(watermarks),
        "nexmark events",
    )
}

/// The body of the probe process: runs one query, prints a [`Probe`] as one JSON line.
pub fn probe(args: &ProbeArgs) -> anyhow::Result<()> {
    let rt = runtime()?;
    let env = StreamEnvironment::new();
    env.set_parallelism(args.parallelism);
    let rows = Arc::new(AtomicU64::new(0));
    let late = Lateness::default();
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let events = read_events(&env, &args.events);
    let out = &args.out;
    match args.query.as_str() {
        "q0" => queries::q0(&events).sink_to(RowFiles::new(out, rows.clone())),
        "q1" => queries::q1(&events).sink_to(RowFiles::new(out, rows.clone())),
        "q2" => queries::q2(&events).sink_to(RowFiles::new(out, rows.clone())),
        "q5" => queries::q5(&events, &late).sink_to(RowFiles::new(out, rows.clone())),
        "q7" => queries::q7(&events, &late).sink_to(RowFiles::new(out, rows.clone())),
        "q11" => queries::q11(&events, &late).sink_to(RowFiles::new(out, rows.clone())),
        "q12" => queries::q12(&events).sink_to(RowFiles::new(out, rows.clone())),
        "q3" => queries::q3(&events).sink_to(RowFiles::new(out, rows.clone())),
        "q4" => queries::q4(&events).sink_to(RowFiles::new(out, rows.clone())),
        "q8" => queries::q8(&events).sink_to(RowFiles::new(out, rows.clone())),
        "q9" => queries::q9(&events).sink_to(RowFiles::new(out, rows.clone())),
        q => bail!("unknown query {q:?}"),
    };
    let start = Instant::now();
    rt.block_on(env.execute(&format!("nexmark {}", args.query)))?;
    let job = start.elapsed();
    let probe = Probe {
        system: "sluice".into(),
        query: args.query.clone(),
        parallelism: args.parallelism,
        job_ms: job.as_secs_f64() * 1e3,
        execute_ms: None,
        rows: rows.load(Ordering::Relaxed),
        peak_rss_kib: peak_rss_kib()?,
        cpu_s: process_cpu_time()?.as_secs_f64(),
        late_dropped: Some(late.dropped()),
        wall_s: 0.0,
    };
    println!("{}", serde_json::to_string(&probe)?);
    Ok(())
}

/// Runs one sluice probe in a fresh process.
fn run_sluice(query: &str, parallelism: usize, events: &Path, out: &Path) -> anyhow::Result<Probe> {
    let exe = std::env::current_exe().context("locating the bench executable")?;
    let start = Instant::now();
    let output = Command::new(exe)
        .arg("nexmark-probe")
        .args(["--query", query, "--parallelism"])
        .arg(parallelism.to_string())
        .arg("--events")
        .arg(events)
        .arg("--out")
        .arg(out)
        .output()
        .context("starting the nexmark probe")?;
    let wall = start.elapsed();
    if !output.status.success() {
        bail!(
            "sluice {query} at parallelism {parallelism} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let mut probe = Probe::parse(&output.stdout)?;
    probe.wall_s = wall.as_secs_f64();
    Ok(probe)
}

/// Counts of what the generator wrote.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Written {
    persons: u64,
    auctions: u64,
    bids: u64,
    first_ms: i64,
    last_ms: i64,
}

/// Writes the events once into `files` files (a `.done` file beside the directory records that
/// they are complete), event `i` into file `i % files`, checking that event times never
/// decrease; returns the directory.
///
/// One file per source reader: a run at parallelism `p` reads the directory of `p` files, so
/// each of either engine's `p` readers reads one file from start to end (a topic of `p`
/// partitions, as the Nexmark project feeds Flink from Kafka). Each file is in event-time
/// order, so no reader ever reads a record behind its own watermark, and the operators
/// downstream take the minimum over the readers: nothing is late.
fn ensure_events(
    work: &Path,
    config: GeneratorConfig,
    files: usize,
) -> anyhow::Result<(PathBuf, Written)> {
    let files = files.max(1);
    let mut name = format!(
        "events-{}-seed{}-rate{}",
        config.events, config.seed, config.rate
    );
    if files > 1 {
        name.push_str(&format!("-files{files}"));
    }
    let dir = work.join(&name);
    let done = work.join(format!("{name}.done"));
    if let Ok(text) = std::fs::read_to_string(&done)
        && let Ok(written) = serde_json::from_str::<Written>(&text)
    {
        return Ok((dir, written));
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let paths: Vec<PathBuf> = if files == 1 {
        vec![dir.join("events.jsonl")]
    } else {
        (0..files)
            .map(|i| dir.join(format!("events-{i}.jsonl")))
            .collect()
    };
    let mut writers = Vec::with_capacity(files);
    for path in &paths {
        let file =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        writers.push(BufWriter::with_capacity(1 << 20, file));
    }
    let mut written = Written::default();
    let mut last = i64::MIN;
    let tenth = (config.events / 10).max(1);
    let start = Instant::now();
    for (i, event) in Generator::new(config).enumerate() {
        let ts = event.date_time();
        if ts < last {
            bail!("event {i} has time {ts}, before the previous event's {last}");
        }
        if i == 0 {
            written.first_ms = ts;
        }
        last = ts;
        match event.event_type {
            0 => written.persons += 1,
            1 => written.auctions += 1,
            _ => written.bids += 1,
        }
        let (w, path) = (&mut writers[i % files], &paths[i % files]);
        serde_json::to_writer(&mut *w, &event)?;
        w.write_all(b"\n")
            .with_context(|| format!("writing {}", path.display()))?;
        if (i as u64 + 1).is_multiple_of(tenth) {
            eprint!(
                "\r... generating {name}: {}%",
                (i as u64 + 1) * 100 / config.events
            );
        }
    }
    let mut bytes = 0;
    for (w, path) in writers.iter_mut().zip(&paths) {
        w.flush()
            .with_context(|| format!("writing {}", path.display()))?;
        bytes += std::fs::metadata(path).map_or(0, |m| m.len());
    }
    written.last_ms = last;
    eprintln!(
        "\r... generated {} events ({} persons, {} auctions, {} bids; {:.0} MB in {files} \
         file(s), {:.1} s of event time, in event-time order) in {:.1} s",
        config.events,
        written.persons,
        written.auctions,
        written.bids,
        bytes as f64 / 1e6,
        (written.last_ms - written.first_ms) as f64 / 1e3,
        start.elapsed().as_secs_f64()
    );
    std::fs::write(&done, serde_json::to_string(&written)?)
        .with_context(|| format!("writing {}", done.display()))?;
    Ok((dir, written))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The medians of one engine's runs of one case.
#[derive(Clone, Debug, Serialize)]
struct Figures {
    events_per_s: f64,
    job_s: f64,
    peak_rss_mib: f64,
    cpu_s: f64,
    wall_s: f64,
    rows: u64,
    runs: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    late_dropped: Option<u64>,
}

impl Figures {
    fn of(events: u64, runs: &[Probe]) -> Option<Figures> {
        if runs.is_empty() {
            return None;
        }
        let med = |f: &dyn Fn(&Probe) -> f64| median(runs.iter().map(f).collect());
        Some(Figures {
            events_per_s: med(&|p| events as f64 / (p.job_ms / 1e3).max(1e-9)),
            job_s: med(&|p| p.job_ms / 1e3),
            peak_rss_mib: med(&|p| p.peak_rss_kib as f64 / 1024.0),
            cpu_s: med(&|p| p.cpu_s),
            wall_s: med(&|p| p.wall_s),
            rows: runs[0].rows,
            runs: runs.len(),
            late_dropped: runs.iter().filter_map(|p| p.late_dropped).max(),
        })
    }
}

/// One line of the report.
struct Case {
    query: String,
    parallelism: usize,
    sluice: Option<Figures>,
    flink: Option<Figures>,
    agreement: Agreement,
}

fn agree_json(a: &Agreement) -> (serde_json::Value, Option<String>) {
    match a {
        Agreement::Agree => (true.into(), None),
        Agreement::Disagree(why) => (false.into(), Some(why.clone())),
        Agreement::NotApplicable(why) => ("n/a".into(), Some(why.clone())),
    }
}

fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2} M", r / 1e6)
    } else {
        format!("{:.0} k", r / 1e3)
    }
}

/// Runs the scenario.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.common.quick;
    let events = args
        .events
        .unwrap_or(if quick { 1_000_000 } else { 4_000_000 });
    let reps = args.common.reps_or(1, 1);
    let parallelisms = if args.parallelisms.is_empty() {
        vec![1, 2]
    } else {
        args.parallelisms.clone()
    };
    let selected: Vec<String> = if args.queries.is_empty() {
        ALL_QUERIES.iter().map(|q| q.to_string()).collect()
    } else {
        args.queries.clone()
    };
    if let Some(q) = selected.iter().find(|q| !ALL_QUERIES.contains(&q.as_str())) {
        bail!(
            "unknown query {q:?}; the queries are {}",
            ALL_QUERIES.join(",")
        );
    }
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target");
    let work = target.join("nexmark");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let config = GeneratorConfig {
        events,
        rate: args.rate,
        seed: args.seed,
    };
    let mut events_dirs = std::collections::BTreeMap::new();
    for &p in &parallelisms {
        events_dirs.insert(p, ensure_events(&work, config, p)?);
    }
    let written = &events_dirs
        .values()
        .next()
        .context("no parallelism to run")?
        .1;
    let flink = if args.no_flink {
        None
    } else {
        Some(Flink::prepare(&target, &work)?)
    };
    eprintln!(
        "nexmark on {}: {events} events ({} persons, {} auctions, {} bids; {:.0} s of event \
         time, seed {}), {reps} run(s) per engine and case, one process each, sluice and Flink \
         alternating; {}; load average {}",
        machine(),
        written.persons,
        written.auctions,
        written.bids,
        (written.last_ms - written.first_ms) as f64 / 1e3,
        args.seed,
        if flink.is_some() {
            format!("Flink 2.3.0 on {}", Flink::java_version())
        } else {
            "sluice alone".into()
        },
        std::fs::read_to_string("/proc/loadavg")
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    );

    let total = selected.len() * parallelisms.len();
    let mut cases = Vec::with_capacity(total);
    let started = Instant::now();
    for query in &selected {
        for &p in &parallelisms {
            let events_dir = &events_dirs[&p].0;
            let in_sluice = queries::QUERIES.contains(&query.as_str());
            let out_dir = |engine: &str| work.join(format!("out/{query}-p{p}-{engine}"));
            let fresh = |dir: &Path| -> anyhow::Result<()> {
                if dir.exists() {
                    std::fs::remove_dir_all(dir)
                        .with_context(|| format!("removing {}", dir.display()))?;
                }
                std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
            };
            let (mut sluice_runs, mut flink_runs) = (Vec::new(), Vec::new());
            for rep in 0..reps {
                eprintln!(
                    "... [{}/{total}, {:.0} s] {query} p{p} run {}/{reps}",
                    cases.len() + 1,
                    started.elapsed().as_secs_f64(),
                    rep + 1
                );
                if in_sluice {
                    let dir = out_dir("sluice");
                    fresh(&dir)?;
                    sluice_runs.push(run_sluice(query, p, events_dir, &dir)?);
                }
                if let Some(flink) = &flink {
                    let dir = out_dir("flink");
                    fresh(&dir)?;
                    flink_runs.push(flink.run(query, p, events_dir, &dir)?);
                }
            }
            let agreement = if query == "q12" {
                Agreement::NotApplicable(
                    "processing-time windows: which bids share a window depends on when each \
                     engine reads them"
                        .into(),
                )
            } else if !in_sluice {
                Agreement::NotApplicable(
                    "sluice: not yet (needs the runtime's two-input operators)".into(),
                )
            } else if flink.is_none() {
                Agreement::NotApplicable("Flink not run (--no-flink)".into())
            } else {
                let upsert = queries::UPSERTS.contains(&query.as_str());
                compare::compare_dirs(&out_dir("sluice"), upsert, &out_dir("flink"))?
            };
            if let Some(late) = sluice_runs.iter().filter_map(|r| r.late_dropped).max()
                && late > 0
            {
                bail!(
                    "sluice {query} p{p} dropped {late} records as late; the events are in order"
                );
            }
            cases.push(Case {
                query: query.clone(),
                parallelism: p,
                sluice: Figures::of(events, &sluice_runs),
                flink: Figures::of(events, &flink_runs),
                agreement,
            });
            let case = cases.last().context("no case")?;
            if args.common.json {
                print_json(case, events);
            }
        }
    }
    print_table(&cases, args.common.json);
    Ok(())
}

fn print_json(case: &Case, events: u64) {
    let (agree, reason) = agree_json(&case.agreement);
    let ratio = |f: &dyn Fn(&Figures) -> f64| match (&case.sluice, &case.flink) {
        (Some(s), Some(fl)) => serde_json::json!(f(s) / f(fl)),
        _ => serde_json::Value::Null,
    };
    let line = serde_json::json!({
        "scenario": "nexmark",
        "case": format!("{}-p{}", case.query, case.parallelism),
        "query": case.query,
        "parallelism": case.parallelism,
        "events": events,
        "metric": "throughput",
        "unit": "events/s",
        "value": case.sluice.as_ref().map(|s| s.events_per_s),
        "baseline": case.flink.as_ref().map(|f| f.events_per_s),
        "ratio": ratio(&|f| f.events_per_s),
        "rss_ratio": ratio(&|f| f.peak_rss_mib),
        "cpu_ratio": ratio(&|f| f.cpu_s),
        "sluice": case.sluice,
        "flink": case.flink,
        "agree": agree,
        "agree_reason": reason,
    });
    println!("{line}");
}

fn print_table(cases: &[Case], to_stderr: bool) {
    let mut out = String::new();
    let _ = std::fmt::Write::write_fmt(
        &mut out,
        format_args!(
            "{:<8} {:>12} {:>12} {:>8} {:>9} {:>9} {:>8} {:>8} {:>19}  agree\n",
            "case",
            "sluice ev/s",
            "Flink ev/s",
            "ratio",
            "RSS s MiB",
            "RSS F MiB",
            "CPU s s",
            "CPU F s",
            "rows s / F"
        ),
    );
    let dash = || "-".to_string();
    let mut ratios = Vec::new();
    let (mut agreed, mut compared) = (0, 0);
    for c in cases {
        let (s, f) = (c.sluice.as_ref(), c.flink.as_ref());
        let ratio = match (s, f) {
            (Some(s), Some(f)) => {
                let r = s.events_per_s / f.events_per_s;
                ratios.push(r);
                format!("{r:.1}x")
            }
            _ => dash(),
        };
        let agree = match &c.agreement {
            Agreement::Agree => {
                compared += 1;
                agreed += 1;
                "yes".to_string()
            }
            Agreement::Disagree(why) => {
                compared += 1;
                format!("NO: {why}")
            }
            Agreement::NotApplicable(why) => format!("n/a: {why}"),
        };
        let _ = std::fmt::Write::write_fmt(
            &mut out,
            format_args!(
                "{:<8} {:>12} {:>12} {:>8} {:>9} {:>9} {:>8} {:>8} {:>19}  {agree}\n",
                format!("{}-p{}", c.query, c.parallelism),
                s.map_or_else(|| "not yet".into(), |s| fmt_rate(s.events_per_s)),
                f.map_or_else(dash, |f| fmt_rate(f.events_per_s)),
                ratio,
                s.map_or_else(dash, |s| format!("{:.0}", s.peak_rss_mib)),
                f.map_or_else(dash, |f| format!("{:.0}", f.peak_rss_mib)),
                s.map_or_else(dash, |s| format!("{:.2}", s.cpu_s)),
                f.map_or_else(dash, |f| format!("{:.2}", f.cpu_s)),
                format!(
                    "{} / {}",
                    s.map_or_else(dash, |s| s.rows.to_string()),
                    f.map_or_else(dash, |f| f.rows.to_string())
                ),
            ),
        );
    }
    let geo = if ratios.is_empty() {
        "no ratio (Flink not run)".to_string()
    } else {
        let g = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
        format!(
            "sluice/Flink events/s: geometric mean {g:.1}x over {} cases (min {:.1}x, max {:.1}x)",
            ratios.len(),
            ratios.iter().copied().fold(f64::INFINITY, f64::min),
            ratios.iter().copied().fold(0.0, f64::max)
        )
    };
    let _ = std::fmt::Write::write_fmt(
        &mut out,
        format_args!("{geo}; results agree in {agreed} of {compared} compared cases\n"),
    );
    if to_stderr {
        eprint!("{out}");
    } else {
        print!("{out}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The files of a run at parallelism 2 hold the events of the one-file run, event `i` in
    /// file `i % 2`, each file in event-time order.
    #[test]
    fn events_are_dealt_round_robin_into_one_file_per_reader() {
        let work = tempfile::tempdir().unwrap();
        let config = GeneratorConfig {
            events: 1000,
            rate: 10_000,
            seed: 7,
        };
        let (one, w1) = ensure_events(work.path(), config, 1).unwrap();
        let (two, w2) = ensure_events(work.path(), config, 2).unwrap();
        assert_eq!(
            (w1.bids, w1.first_ms, w1.last_ms),
            (w2.bids, w2.first_ms, w2.last_ms)
        );
        let lines = |p: PathBuf| -> Vec<String> {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(String::from)
                .collect()
        };
        let all = lines(one.join("events.jsonl"));
        let parts = [
            lines(two.join("events-0.jsonl")),
            lines(two.join("events-1.jsonl")),
        ];
        assert_eq!(all.len(), 1000);
        for (i, line) in all.iter().enumerate() {
            assert_eq!(&parts[i % 2][i / 2], line, "event {i}");
        }
        for part in &parts {
            let times: Vec<i64> = part
                .iter()
                .map(|l| serde_json::from_str::<Event>(l).unwrap().date_time())
                .collect();
            assert!(times.is_sorted());
        }
        // A second call finds the files written.
        let (again, _) = ensure_events(work.path(), config, 2).unwrap();
        assert_eq!(again, two);
    }
}
