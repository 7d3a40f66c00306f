//! A job whose subtasks learn the job's global progress from their operator coordinator.
//!
//! `cargo run --release --example global_progress`
//!
//! ```text
//! Source: Generator --> Progress (4 subtasks, one coordinator on the job master) --> Sink
//! ```

mod progress;

use progress::{GlobalProgress, Progress};
use sluice::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn main() -> anyhow::Result<()> {
    let env = StreamEnvironment::new();
    env.set_parallelism(4);
    env.enable_checkpointing(Duration::from_millis(200));
    let dir = std::env::temp_dir().join(format!("sluice-global-progress-{}", std::process::id()));
    env.set_checkpoint_storage(&dir);
    let log = Arc::new(Mutex::new(Vec::new()));
    env.from_generator(
        Generator::new(|i| i)
            .take(2_000_000)
            .rate_limit(2_000_000.0),
    )
    .transform_with_coordinator(
        "Progress",
        Progress::default(),
        GlobalProgress::provider(log.clone()),
    )
    .discard();
    let result = env.execute_blocking("global-progress")?;
    let totals = log.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    for (checkpoint, total) in &totals {
        println!("checkpoint {checkpoint:>3}: {total:>9} records processed by all subtasks");
    }
    let gauges: Vec<i64> = result
        .metrics
        .subtasks_of("Progress")
        .filter_map(|s| s.gauges.get("global_progress").copied())
        .collect();
    println!(
        "{} checkpoints; the subtasks' last known global progress: {gauges:?}",
        result.completed_checkpoints
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
