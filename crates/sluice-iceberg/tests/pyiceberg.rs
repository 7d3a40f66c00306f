//! Read by an independent client: PyIceberg (over the same SQLite catalog) reads the table a
//! job committed, and its row count and row checksum match the input.
//!
//! The Python interpreter with `pyiceberg[sql-sqlite,pyarrow]` comes from `SLUICE_PYICEBERG_PYTHON`
//! (`.ci/pyiceberg` installs it in a virtual environment under `target/` and sets it). Without the
//! variable the test is skipped with a notice, except under CI (`CI` set), where it fails.

mod common;

use common::*;
use sluice_iceberg::{DistributionMode, IcebergSink, PartitionField};
use sluice_runtime::prelude::*;
use sluice_runtime::testing::required_env;
use std::process::Command;
use std::time::Duration;

#[test]
fn pyiceberg_reads_the_committed_table() {
    let Some(python) = required_env(
        "SLUICE_PYICEBERG_PYTHON",
        ".ci/pyiceberg installs a Python with pyiceberg[sql-sqlite,pyarrow]",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let catalog = catalog(dir.path());
    let n = 20_000u64;
    let env = StreamEnvironment::new();
    env.set_parallelism(2)
        .enable_checkpointing(Duration::from_millis(30));
    env.set_checkpoint_storage(checkpoints.path());
    let stream = env.from_generator(
        Generator::new(|i| event(i, 12))
            .take(n)
            .rate_limit(100_000.0),
    );
    IcebergSink::builder(catalog.clone(), "db.events")
        .create_if_missing(schema())
        .partition_by(PartitionField::hour("ts"))
        .distribution_mode(DistributionMode::Hash)
        .sink(&stream);
    env.execute_blocking("for pyiceberg").unwrap();

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/read_with_pyiceberg.py");
    let warehouse = std::path::absolute(dir.path()).unwrap();
    let out = Command::new(&python)
        .arg(script)
        .arg(&warehouse)
        .arg("test")
        .arg("db.events")
        .output()
        .unwrap_or_else(|e| panic!("running {python}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "PyIceberg failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = format!(
        "{} {}",
        n,
        pyiceberg_checksum((0..n).map(|i| (i as i64, format!("k{:03}", i % 12))))
    );
    assert_eq!(stdout.trim(), expected);
    // The same as iceberg-rust's own scan.
    assert_eq!(
        pyiceberg_checksum(read_rows(&catalog, "db.events")),
        pyiceberg_checksum((0..n).map(|i| (i as i64, format!("k{:03}", i % 12))))
    );
}
