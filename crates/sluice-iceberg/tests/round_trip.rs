//! Round trip: records written by a job are read back by iceberg-rust's scan, in content and
//! count, with and without checkpoints, partitioned by day and identity; files roll by size.

mod common;

use common::*;
use sluice_iceberg::{IcebergSink, PartitionField};
use sluice_runtime::prelude::*;
use std::time::Duration;

#[test]
fn records_are_read_back_in_content_and_count() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path());
    let n = 5_000u64;
    let env = StreamEnvironment::new();
    env.set_parallelism(2)
        .enable_checkpointing(Duration::from_millis(20));
    env.set_checkpoint_storage(checkpoints.path());
    let stream = env.from_iter((0..n).map(|i| event(i, 10)));
    IcebergSink::builder(catalog.clone(), "db.events")
        .create_if_missing(schema())
        .partition_by(PartitionField::day("ts"))
        .partition_by(PartitionField::identity("key"))
        .sink(&stream);
    env.execute_blocking("round trip").unwrap();

    let mut rows = read_rows(&catalog, "db.events");
    rows.sort();
    let expected: Vec<(i64, String)> = (0..n)
        .map(|i| (i as i64, format!("k{:03}", i % 10)))
        .collect();
    assert_eq!(rows.len(), expected.len());
    assert_eq!(rows, expected);
    // Every snapshot names the job and its checkpoint.
    let snaps = snapshots(&catalog, "db.events");
    assert!(!snaps.is_empty());
    for s in &snaps {
        assert!(s.contains_key("sluice.job-id"), "{s:?}");
        assert!(
            s.contains_key("sluice.max-committed-checkpoint-id"),
            "{s:?}"
        );
    }
}

#[test]
fn without_checkpoints_the_end_of_input_commits() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path());
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    let stream = env.from_iter((0..1_000u64).map(|i| event(i, 3)));
    IcebergSink::builder(catalog.clone(), "db.plain")
        .create_if_missing(schema())
        .sink(&stream);
    env.execute_blocking("no checkpoints").unwrap();
    assert_eq!(read_rows(&catalog, "db.plain").len(), 1_000);
    assert_eq!(snapshots(&catalog, "db.plain").len(), 1);
}

#[test]
fn files_roll_at_the_target_size() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path());
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    let stream = env.from_iter((0..50_000u64).map(|i| event(i, 1)));
    IcebergSink::builder(catalog.clone(), "db.rolled")
        .create_if_missing(schema())
        .target_file_size(64 * 1024)
        .sink(&stream);
    env.execute_blocking("rolling").unwrap();
    let files = data_files(&catalog, "db.rolled");
    assert!(files.len() >= 3, "{} files", files.len());
    assert_eq!(files.iter().map(|f| f.1).sum::<u64>(), 50_000);
    assert_eq!(read_rows(&catalog, "db.rolled").len(), 50_000);
}

#[test]
fn a_job_on_a_current_thread_runtime_writes_the_table() {
    // The writers' data-file writes run on the sink's own I/O runtime and are polled from the
    // task, so a single-threaded runtime runs the whole job (barriers and commits wait for the
    // I/O runtime, which needs none of this thread).
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path());
    let env = StreamEnvironment::new();
    env.set_parallelism(2)
        .enable_checkpointing(Duration::from_millis(20));
    env.set_checkpoint_storage(checkpoints.path());
    let stream = env.from_iter((0..20_000u64).map(|i| event(i, 5)));
    IcebergSink::builder(catalog.clone(), "db.single")
        .create_if_missing(schema())
        .partition_by(PartitionField::identity("key"))
        .sink(&stream);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(env.execute("current thread")).unwrap();
    assert_eq!(read_rows(&catalog, "db.single").len(), 20_000);
}
