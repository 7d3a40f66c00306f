//! The committer through the operator harness, with real writers and an embedded catalog:
//! checkpoints that completed while a commit was slow (or whose notification was missed) commit
//! in order, one snapshot each; a restored committer skips what the table already holds and
//! commits the rest; a run of checkpoints without files commits an empty snapshot at its
//! `max_continuous_empty_commits`-th.

use super::*;
use crate::sink::IcebergSink;
use crate::{IcebergCatalog, PartitionField};
use arrow_schema::{DataType, Field, Schema};
use sluice_core::StreamElement;
use sluice_runtime::api::TwoPhaseCommitOp;
use sluice_runtime::testing::OperatorTestHarness;

type Committer = OperatorTestHarness<WriteResult, TwoPhaseCommitOp<WriteResult, IcebergCommitter>>;

fn new_committer(config: &Arc<SinkConfig>) -> Committer {
    OperatorTestHarness::new(TwoPhaseCommitOp::new(IcebergCommitter::new(config.clone())))
}

#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
struct Row {
    id: i64,
    key: String,
}

fn setup(dir: &std::path::Path) -> (IcebergCatalog, Arc<SinkConfig>) {
    setup_with(dir, |b| b)
}

fn setup_with(
    dir: &std::path::Path,
    settings: impl FnOnce(crate::IcebergSinkBuilder) -> crate::IcebergSinkBuilder,
) -> (IcebergCatalog, Arc<SinkConfig>) {
    let catalog = IcebergCatalog::sqlite("unit", dir).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("key", DataType::Utf8, false),
    ]));
    let builder = IcebergSink::builder(catalog.clone(), "db.t")
        .create_if_missing(schema)
        .partition_by(PartitionField::identity("key"))
        .job_id("job-1");
    let (config, table, error) = settings(builder).config();
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
    let mut committer = new_committer(&config);
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
    let mut committer = new_committer(&config);
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
    let restored = new_committer(&config);
    let mut restored = restored.restore(vec![state.clone().unwrap()]).unwrap();
    restored.open().unwrap();
    assert_eq!(summaries(&config), vec![1, 2, 3]);

    // Restored again from the same checkpoint (a failure after those commits): nothing twice.
    let again = new_committer(&config);
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

#[test]
fn a_run_of_empty_checkpoints_commits_an_empty_snapshot_at_the_nth() {
    let dir = tempfile::tempdir().unwrap();
    let (_catalog, config) = setup_with(dir.path(), |b| b.max_continuous_empty_commits(3));
    let results = write_three(&config, 4);
    let mut committer = new_committer(&config);
    committer.open().unwrap();
    // Checkpoint 1 has files; 2..=7 have none; 8 has files; 9 and 10 have none.
    let mut results = results.into_iter();
    let mut after = Vec::new();
    for c in 1..=10u64 {
        if c == 1 || c == 8 {
            committer
                .process_batch(vec![results.next().unwrap()])
                .unwrap();
        }
        committer.snapshot(c).unwrap();
        committer.notify_checkpoint_complete(c).unwrap();
        after.push(summaries(&config));
    }
    assert_eq!(after[0], vec![1]);
    assert_eq!(
        after[2],
        vec![1],
        "the 2nd empty checkpoint in a row is not committed"
    );
    assert_eq!(after[3], vec![1, 4], "the 3rd is, as an empty snapshot");
    assert_eq!(after[6], vec![1, 4, 7], "and the count starts again");
    assert_eq!(
        after[9],
        vec![1, 4, 7, 8],
        "a commit with files starts it again too"
    );
    let table = config.load_table().unwrap();
    assert_eq!(max_committed_in(table.metadata(), "job-1"), Some(8));
    let current = table.metadata().current_snapshot().unwrap();
    assert_eq!(
        current.summary().additional_properties["total-records"],
        "8"
    );
}

#[test]
fn max_continuous_empty_commits_of_zero_is_refused_naming_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = IcebergCatalog::sqlite("unit", dir.path()).unwrap();
    let (_, table, error) = IcebergSink::builder(catalog, "db.t")
        .create_if_missing(Arc::new(Schema::new(vec![Field::new(
            "id",
            DataType::Int64,
            false,
        )])))
        .max_continuous_empty_commits(0)
        .config();
    let error = error.unwrap();
    assert!(table.is_none());
    assert!(
        error.contains("db.t")
            && error.contains("max_continuous_empty_commits")
            && error.contains("got 0"),
        "{error}"
    );
}
