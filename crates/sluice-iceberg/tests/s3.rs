//! A table in an S3-compatible object store: a job writes to a table whose warehouse is an
//! `s3://` location (SQLite catalog, files through iceberg-rust's S3 file IO), and iceberg-rust's
//! scan reads every record back from the bucket; so does PyIceberg when `SLUICE_PYICEBERG_PYTHON`
//! is set.
//!
//! Needs an S3-compatible server at `SLUICE_S3_ENDPOINT` (`.ci/s3` starts moto's on 127.0.0.1 and
//! sets it). Without the variable the test is skipped with a notice, except under CI (`CI` set),
//! where it fails.

#![cfg(feature = "s3")]

mod common;

use common::*;
use sluice_iceberg::{IcebergCatalog, IcebergSink, PartitionField, S3Storage};
use sluice_runtime::prelude::*;
use sluice_runtime::testing::{create_s3_bucket, required_env};
use std::time::Duration;

#[test]
fn a_job_writes_a_table_in_s3_and_a_scan_reads_it_back() {
    let Some(endpoint) = required_env("SLUICE_S3_ENDPOINT", "source .ci/s3") else {
        return;
    };
    let bucket = format!("sluice-{}", uuid::Uuid::new_v4().simple());
    create_s3_bucket(&endpoint, &bucket).unwrap();
    let s3 = S3Storage::new("us-east-1")
        .endpoint(&endpoint)
        .credentials("testing", "testing")
        .path_style_access(true);
    let catalog_dir = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let warehouse = format!("s3://{bucket}/warehouse");
    let catalog = IcebergCatalog::sqlite_s3("test", catalog_dir.path(), &warehouse, &s3).unwrap();

    let n = 3_000u64;
    let env = StreamEnvironment::new();
    env.set_parallelism(2)
        .enable_checkpointing(Duration::from_millis(50));
    env.set_checkpoint_storage(checkpoints.path());
    let stream = env.from_iter((0..n).map(|i| event(i, 4)));
    IcebergSink::builder(catalog.clone(), "db.events")
        .create_if_missing(schema())
        .partition_by(PartitionField::identity("key"))
        .target_file_size(16 * 1024)
        .sink(&stream);
    env.execute_blocking("to s3").unwrap();

    let mut rows = read_rows(&catalog, "db.events");
    rows.sort();
    let expected: Vec<(i64, String)> = (0..n)
        .map(|i| (i as i64, format!("k{:03}", i % 4)))
        .collect();
    assert_eq!(rows, expected);
    let files = data_files(&catalog, "db.events");
    assert!(files.len() >= 4, "{} files", files.len());
    for (_, _, _, path) in &files {
        assert!(path.starts_with(&format!("{warehouse}/")), "{path}");
    }

    // An independent client reads the same objects, when PyIceberg is at hand (.ci/pyiceberg).
    if let Ok(python) = std::env::var("SLUICE_PYICEBERG_PYTHON") {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/read_with_pyiceberg.py");
        let out = std::process::Command::new(&python)
            .arg(script)
            .arg(std::path::absolute(catalog_dir.path()).unwrap())
            .arg("test")
            .arg("db.events")
            .arg(&warehouse)
            .arg(&endpoint)
            .output()
            .unwrap_or_else(|e| panic!("running {python}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "PyIceberg failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        let expected = format!("{} {}", n, pyiceberg_checksum(expected));
        assert_eq!(stdout.trim(), expected);
    }
}

#[test]
fn a_warehouse_that_is_not_in_s3_is_refused_naming_it() {
    let s3 = S3Storage::new("us-east-1");
    let dir = tempfile::tempdir().unwrap();
    let err = IcebergCatalog::sqlite_s3("test", dir.path(), "/tmp/warehouse", &s3)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("/tmp/warehouse") && err.contains("s3://"),
        "{err}"
    );
}
