//! The committer through the operator harness, with real writers and an embedded catalog:
//! checkpoints that completed while a commit was slow (or whose notification was missed) commit
//! in order, one snapshot each; a restored committer skips what the table already holds and
//! commits the rest.

use super::*;
use crate::sink::IcebergSink;
use crate::{IcebergCatalog, PartitionField};
use arrow_schema::{DataType, Field, Schema};
use sluice_core::StreamElement;
use sluice_runtime::testing::OperatorTestHarness;

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Row {
    id: i64,
    key: String,
}

fn setup(dir: &std::path::Path) -> (IcebergCatalog, Arc<SinkConfig>) {
    let catalog = IcebergCatalog::sqlite("unit", dir).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("key", DataType::Utf8, false),
    ]));
    let (config, table, error) = IcebergSink::builder(catalog.clone(), "db.t")
        .create_if_missing(schema)
        .partition_by(PartitionField::identity("key"))
        .job_id("job-1")
        .config();
    assert!(error.is_none(), "{error:?}");
    assert!(table.is_some());
    (catalog, config)
}

/// The writer's results for three checkpoints of `per` rows each.
fn write_three(config: &Arc<SinkConfig>, per: i64) -> Vec<WriteResult> {
    let mut writer =
        OperatorTestHarness::new(crate::writer::IcebergWriterOp::<Row>::new(config.clone()));
    writer.open().unwrap();
    let mut results = Vec::new();
    for c in 1..=3u64 {
        let rows = (0..per)
            .map(|i| Row {
                id: (c as i64) * 1000 + i,
                key: format!("k{}", i % 2),
            })
            .collect();
        writer.process_batch(rows).unwrap();
        writer.snapshot(c).unwrap();
        for e in writer.take_output() {
            if let StreamElement::Records(b) = e {
                results.extend(b.into_records());
            }
        }
    }
    assert_eq!(results.len(), 3);
    results
}

fn summaries(config: &SinkConfig) -> Vec<u64> {
    let table = config.load_table().unwrap();
    let mut snaps: Vec<_> = table.metadata().snapshots().cloned().collect();
    snaps.sort_by_key(|s| s.sequence_number());
    snaps
        .iter()
        .map(|s| {
            s.summary().additional_properties[MAX_COMMITTED_CHECKPOINT_KEY]
                .parse()
                .unwrap()
        })
        .collect()
}

#[test]
fn checkpoints_completed_during_a_slow_commit_are_committed_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (_catalog, config) = setup(dir.path());
    let results = write_three(&config, 10);
    let mut committer = OperatorTestHarness::new(IcebergCommitterOp::new(config.clone()));
    committer.open().unwrap();
    for (c, r) in (1..=3u64).zip(results) {
        committer.process_batch(vec![r]).unwrap();
        committer.snapshot(c).unwrap();
    }
    // Only the newest notification arrives (the earlier ones came while a commit was busy).
    committer.notify_checkpoint_complete(3).unwrap();
    assert_eq!(summaries(&config), vec![1, 2, 3]);
    let table = config.load_table().unwrap();
    let current = table.metadata().current_snapshot().unwrap();
    assert_eq!(
        current.summary().additional_properties["total-records"],
        "30"
    );
}

#[test]
fn a_restored_committer_skips_what_the_table_holds_and_commits_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (_catalog, config) = setup(dir.path());
    let results = write_three(&config, 5);
    let mut committer = OperatorTestHarness::new(IcebergCommitterOp::new(config.clone()));
    committer.open().unwrap();
    let mut state = None;
    for (c, r) in (1..=3u64).zip(results) {
        committer.process_batch(vec![r]).unwrap();
        state = Some(committer.snapshot(c).unwrap());
    }
    // Checkpoint 1 committed; then the job failed before 2 and 3 were.
    committer.notify_checkpoint_complete(1).unwrap();
    assert_eq!(summaries(&config), vec![1]);

    // Restored from checkpoint 3: 1 is in the table, 2 and 3 are committed now.
    let restored = OperatorTestHarness::new(IcebergCommitterOp::new(config.clone()));
    let mut restored = restored.restore(vec![state.clone().unwrap()]).unwrap();
    restored.open().unwrap();
    assert_eq!(summaries(&config), vec![1, 2, 3]);

    // Restored again from the same checkpoint (a failure after those commits): nothing twice.
    let again = OperatorTestHarness::new(IcebergCommitterOp::new(config.clone()));
    let mut again = again.restore(vec![state.unwrap()]).unwrap();
    again.open().unwrap();
    again.notify_checkpoint_complete(3).unwrap();
    assert_eq!(summaries(&config), vec![1, 2, 3]);
    let table = config.load_table().unwrap();
    let current = table.metadata().current_snapshot().unwrap();
    assert_eq!(
        current.summary().additional_properties["total-records"],
        "15"
    );
}
