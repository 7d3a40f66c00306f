//! The scenarios, one module per subcommand. A scenario builds its sluice job and its baseline,
//! runs them interleaved with [`crate::measure`], and hands rows to [`crate::report`].

pub mod async_io;
pub mod checkpoint;
pub mod cluster;
pub mod coordinator;
pub mod e2e;
pub mod failover;
pub mod iceberg;
pub mod kafka;
pub mod large_state;
pub mod lookup;
pub mod map_state;
pub mod nexmark;
pub mod pipeline;
pub mod shuffle;
pub mod source;
pub mod window;

use clap::Args;

/// Flags every scenario accepts (flattened into each subcommand).
#[derive(Args, Clone, Debug)]
pub struct CommonArgs {
    /// A smaller run that finishes in under 30 seconds on 2 cores.
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object per line and per case on stdout (the table then goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Timed repetitions of each side (default: 7 quick, 15 full for `pipeline`; 3 quick, 7 full
    /// for `checkpoint`); medians are reported.
    #[arg(long)]
    pub reps: Option<usize>,
}

impl CommonArgs {
    /// The number of timed repetitions per side.
    pub fn reps(&self) -> usize {
        self.reps_or(7, 15)
    }

    /// The number of timed repetitions per side, with the scenario's own defaults.
    pub fn reps_or(&self, quick: usize, full: usize) -> usize {
        self.reps
            .unwrap_or(if self.quick { quick } else { full })
            .max(1)
    }
}
