//! A processing-time window still open at end of input, in a test binary of its own.
//!
//! Processing time is one clock per process, whose base the first reader takes. Beside the
//! other window tests (which run at once on the real clock), this test's paused clock now and
//! then started before another test read that base, and its windows fired although their
//! input had ended (about one run in twenty, before and after session 34's clock change). Alone
//! in its process it did not fail in forty runs.

use sluice_runtime::prelude::*;
use sluice_runtime::window::TumblingProcessingTimeWindows;
use std::time::Duration;

/// Flink's streaming execution quiesces processing time at end of input
/// (`StreamOperatorWrapper` stops pending processing-time timers before `finish`; only its
/// BATCH mode fires them all at the end): a processing-time window still open when the input
/// ends never fires, and its contents go with the job. sluice runs bounded jobs the streaming
/// way, so it does the same, also while a finished task lingers for the final checkpoint: here a
/// slow second pipeline keeps the job running for half a second after the window's input
/// ended, well past the window's end.
#[tokio::test(start_paused = true)]
async fn processing_time_windows_still_open_at_end_of_input_do_not_fire() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    env.enable_checkpointing(Duration::from_secs(3600));
    env.set_checkpoint_storage(dir.path());
    let out = env
        .from_iter(vec![(1u32, 1i64), (2, 2), (1, 3)])
        .key_by(|r| r.0)
        .window(TumblingProcessingTimeWindows::of(Duration::from_millis(
            100,
        )))
        .reduce(|a, b| (a.0, a.1 + b.1))
        .collect();
    env.from_generator(Generator::new(|i| i).take(5).rate_limit(10.0))
        .discard();
    env.execute("processing-time window at end of input")
        .await
        .unwrap();
    assert_eq!(out.take(), Vec::<(u32, i64)>::new());
}
