//! A job stopped with requests in flight resumes from its checkpoint at another parallelism of
//! the async operator: the stored requests are dealt to the new subtasks and re-issued, and the
//! committed output holds every result exactly once.

use sluice_async_io::{AsyncWait, async_fn};
use sluice_connectors::file::{JsonLinesSink, read_committed};
use sluice_runtime::prelude::*;
use sluice_runtime::testing::PassThrough;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

const N: u64 = 4_000;

/// The same graph every time; only the async operator's parallelism (the default) changes.
fn build(
    env: &StreamEnvironment,
    output: &Path,
    calls: Arc<watch::Sender<u64>>,
) -> watch::Receiver<u64> {
    let (tx, rx) = watch::channel(0);
    let lookup = async_fn(move |x: u64| {
        calls.send_modify(|c| *c += 1);
        async move {
            tokio::time::sleep(Duration::from_millis(2)).await;
            Ok(Some(x * 2))
        }
    });
    let source = env
        .from_generator(Generator::new(|i| i).take(N).rate_limit(40_000.0))
        .parallelism(2);
    AsyncWait::new(lookup)
        .capacity(32)
        .timeout(Duration::from_secs(30))
        .unordered()
        .name("lookup")
        .apply(&source.rebalance())
        .unwrap()
        // Reports completed checkpoints.
        .process(PassThrough::new().on_checkpoint_complete(move |_, c| {
            tx.send_replace(c.0);
        }))
        .sink_to_exactly_once(JsonLinesSink::new(output, "out"));
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_requests_restored_at_another_parallelism_complete_exactly_once() {
    for (before, after) in [(2, 3), (3, 1)] {
        let output = tempfile::tempdir().unwrap();
        let storage = tempfile::tempdir().unwrap();

        let env = StreamEnvironment::new();
        env.set_parallelism(before);
        env.enable_checkpointing(Duration::from_secs(3600));
        env.set_checkpoint_storage(storage.path());
        let (calls, mut seen) = watch::channel(0u64);
        let mut completed = build(&env, output.path(), Arc::new(calls));
        let job = env.submit("rescale").unwrap();
        // Checkpoint with requests in flight, a quarter of the way through.
        seen.wait_for(|c| *c >= N / 4).await.unwrap();
        let pending = job.trigger_checkpoint().await.unwrap();
        pending.completed().await.unwrap();
        completed.wait_for(|c| *c >= 1).await.unwrap();
        job.cancel();
        assert!(matches!(job.await, Err(JobError::Cancelled)));
        drop(env);

        let env = StreamEnvironment::new();
        env.set_parallelism(after);
        env.restore_from(storage.path());
        let (resumed_calls, resumed) = watch::channel(0u64);
        let _ = build(&env, output.path(), Arc::new(resumed_calls));
        let result = env.execute("rescale").await.unwrap();
        assert!(result.restored_from.is_some());
        let lookup = result.metrics.subtasks_of("lookup").count();
        assert_eq!(
            lookup, after,
            "the async operator runs at the new parallelism"
        );
        let reissued = *resumed.borrow();
        assert!(
            reissued < N,
            "the resumed job re-issued only what was not checkpointed as done ({reissued})"
        );

        let mut got: Vec<u64> = read_committed(output.path()).unwrap();
        got.sort_unstable();
        assert_eq!(
            got,
            (0..N).map(|x| x * 2).collect::<Vec<_>>(),
            "{before} -> {after}"
        );
    }
}
