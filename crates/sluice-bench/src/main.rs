//! Benchmarks of sluice against hand-written baselines, run side by side in the same process.
//!
//! One subcommand per scenario: `cargo run --release -p sluice-bench -- <scenario> [--quick]
//! [--json]`. Each scenario lives in its own module under [`scenarios`] and reports through
//! [`report`]; timing, medians and peak memory come from [`measure`]. BENCHMARKS.md quotes the
//! figures.

mod measure;
mod report;
mod scenarios;

use clap::{Parser, Subcommand};

/// sluice benchmarks: each scenario runs sluice and its baseline in the same run and prints the
/// ratio sluice/baseline (higher is better).
#[derive(Parser)]
#[command(name = "sluice-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// generator -> map -> filter -> key_by -> sum-per-key sink, against plain loops and a
    /// crossbeam-channel exchange.
    Pipeline(scenarios::pipeline::Args),
    /// Internal: one pipeline job in a fresh process, printing its peak memory (used by
    /// `pipeline` to show that memory does not grow with the record count).
    #[command(hide = true)]
    PipelineMemoryProbe(scenarios::pipeline::ProbeArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Pipeline(args) => scenarios::pipeline::run(&args),
        Command::PipelineMemoryProbe(args) => scenarios::pipeline::probe(&args),
    }
}
