//! Peak memory of the pipeline job, measured in fresh processes so that each figure is the job's
//! own high-water mark: the bench re-runs itself with the hidden `pipeline-memory-probe`
//! subcommand, which runs one keyed job and prints its `VmHWM`.

use super::ProbeArgs;
use super::jobs;
use crate::measure::{peak_rss_kib, runtime};
use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use std::process::Command;
use std::time::Instant;

/// What one probe process reports.
#[derive(Debug, Serialize, Deserialize)]
pub struct Probe {
    /// Records the job generated.
    pub records: u64,
    /// The job's parallelism.
    pub parallelism: usize,
    /// Peak resident set size of the process, in KiB.
    pub vm_hwm_kib: u64,
    /// Duration of the job, in seconds.
    pub seconds: f64,
    /// The job's result digest.
    pub checksum: u64,
}

/// The body of the probe process: runs the keyed job once and prints a [`Probe`] as JSON.
pub fn probe(args: &ProbeArgs) -> anyhow::Result<()> {
    let rt = runtime()?;
    let start = Instant::now();
    let checksum = rt.block_on(jobs::keyed(args.records, args.parallelism))?;
    let seconds = start.elapsed().as_secs_f64();
    let probe = Probe {
        records: args.records,
        parallelism: args.parallelism,
        vm_hwm_kib: peak_rss_kib()?,
        seconds,
        checksum,
    };
    println!("{}", serde_json::to_string(&probe)?);
    Ok(())
}

/// Runs a probe process for `records` at `parallelism` and returns its report.
pub fn run_probe(records: u64, parallelism: usize) -> anyhow::Result<Probe> {
    let exe = std::env::current_exe().context("locating the bench executable")?;
    let output = Command::new(exe)
        .args(["pipeline-memory-probe", "--records"])
        .arg(records.to_string())
        .arg("--parallelism")
        .arg(parallelism.to_string())
        .output()
        .context("starting the memory probe process")?;
    if !output.status.success() {
        bail!(
            "the memory probe ({records} records, parallelism {parallelism}) failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .last()
        .context("the memory probe printed nothing")?;
    serde_json::from_str(line).with_context(|| format!("parsing the memory probe's line {line:?}"))
}
