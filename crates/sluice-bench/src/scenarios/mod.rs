//! The scenarios, one module per subcommand. A scenario builds its sluice job and its baseline,
//! runs them interleaved with [`crate::measure`], and hands rows to [`crate::report`].

pub mod pipeline;

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
    /// Timed repetitions of each side (default: 7 quick, 15 full); medians are reported.
    #[arg(long)]
    pub reps: Option<usize>,
}

impl CommonArgs {
    /// The number of timed repetitions per side.
    pub fn reps(&self) -> usize {
        self.reps.unwrap_or(if self.quick { 7 } else { 15 }).max(1)
    }
}
