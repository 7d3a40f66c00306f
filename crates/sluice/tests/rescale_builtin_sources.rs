//! The built-in collection and generator sources keep their splits in checkpoints, so a job
//! stopped with a savepoint at parallelism 2 resumes at 3 or at 1 with every record exactly once.

use sluice::prelude::*;
use sluice::testing::InputGate;
use std::time::Duration;

const N: u64 = 30_000;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Collection,
    Generator,
}

/// The same graph for both runs: source (at `p`) -> watch -> exactly-once sink.
fn job(env: &StreamEnvironment, kind: Kind, p: usize, out: &std::path::Path, gate: InputGate<u64>) {
    env.set_parallelism(p).set_batch_size(32);
    let source = match kind {
        Kind::Collection => env.from_iter(0..N),
        Kind::Generator => env.from_generator(Generator::new(|i| i).take(N)),
    };
    source
        .process(gate)
        .sink_to_exactly_once(JsonLinesSink::new(out, "out"));
}

async fn stop_at_2_and_resume_at(kind: Kind, p: usize) {
    let out = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    env.enable_checkpointing(Duration::from_millis(20));
    env.set_checkpoint_storage(checkpoints.path());
    // Each subtask stops taking records a quarter of the way through its split.
    let gate = InputGate::new(N / 8, 2);
    let closed = gate.all_closed();
    job(&env, kind, 2, out.path(), gate);
    let handle = env.submit("first run at 2").unwrap();
    closed.notified().await;
    let savepoint = handle.stop_with_savepoint().await.unwrap();
    let first = handle.await.unwrap();
    assert_eq!(first.stopped_with_savepoint, Some(savepoint));
    let committed = read_committed::<u64>(out.path()).unwrap().len() as u64;
    assert!(
        (N / 4..N).contains(&committed),
        "{kind:?}: the first run committed {committed} of {N}"
    );

    let env = StreamEnvironment::new();
    env.enable_checkpointing(Duration::from_millis(20));
    env.set_checkpoint_storage(checkpoints.path());
    env.restore_from(checkpoints.path());
    job(&env, kind, p, out.path(), InputGate::new(u64::MAX, p));
    let second = env.execute("second run").await.unwrap();
    assert_eq!(second.restored_from, Some(savepoint));
    let mut ids = read_committed::<u64>(out.path()).unwrap();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (0..N).collect::<Vec<_>>(),
        "{kind:?} stopped at 2, resumed at {p}: every record exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collection_source_stopped_at_2_resumes_at_3_and_at_1() {
    stop_at_2_and_resume_at(Kind::Collection, 3).await;
    stop_at_2_and_resume_at(Kind::Collection, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generator_stopped_at_2_resumes_at_3_and_at_1() {
    stop_at_2_and_resume_at(Kind::Generator, 3).await;
    stop_at_2_and_resume_at(Kind::Generator, 1).await;
}
