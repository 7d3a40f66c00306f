//! `resume_from_latest_checkpoint`: a job started again resumes from the newest valid
//! checkpoint of its own checkpoint storage (directory or backend), starts afresh when there is
//! none, and refuses to be combined with `restore_from` or to run without checkpointing.

use sluice_runtime::prelude::*;
use sluice_runtime::storage::LocalCheckpointStorage;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

fn job(env: &StreamEnvironment) -> CollectHandle<u64> {
    env.enable_checkpointing(Duration::from_secs(3600));
    env.from_iter(0u64..100).map(|x| x + 1).collect()
}

#[test]
fn a_second_run_resumes_from_the_newest_checkpoint_and_a_first_starts_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(LocalCheckpointStorage::new(
        dir.path(),
        NonZeroUsize::new(2).unwrap(),
    ));
    // Nothing stored yet: the first run starts afresh and ends with a final checkpoint.
    let env = StreamEnvironment::new();
    let out = job(&env);
    env.set_checkpoint_storage_backend(storage.clone());
    env.resume_from_latest_checkpoint();
    let first = env.execute_blocking("resume").unwrap();
    assert_eq!(first.restored_from, None);
    assert_eq!(out.len(), 100);
    let last = first
        .last_checkpoint
        .expect("a bounded job ends with a checkpoint");

    // The second run finds it: its source resumes at its end and emits nothing again.
    let env = StreamEnvironment::new();
    let out = job(&env);
    env.set_checkpoint_storage_backend(storage);
    env.resume_from_latest_checkpoint();
    let second = env.execute_blocking("resume").unwrap();
    assert_eq!(second.restored_from, Some(last));
    assert_eq!(out.len(), 0);
}

#[test]
fn resuming_needs_checkpointing_and_excludes_restore_from() {
    let env = StreamEnvironment::new();
    env.from_iter(0u64..3).discard();
    env.resume_from_latest_checkpoint();
    let err = env.execute_blocking("no checkpoints").unwrap_err();
    assert!(err.to_string().contains("needs checkpointing"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    job(&env);
    env.set_checkpoint_storage(dir.path());
    env.restore_from(dir.path());
    env.resume_from_latest_checkpoint();
    let err = env.execute_blocking("both").unwrap_err();
    assert!(err.to_string().contains("keep one"), "{err}");
}
