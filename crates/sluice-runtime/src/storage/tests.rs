//! Tests of the local checkpoint storage against real files in a temporary directory, the
//! shared contract (`contract.rs`) over memory and the local disk, and a property test of
//! retention and fallback over memory.

use super::format::{HEADER_LEN, METADATA_FILE, state_file_name};
use super::*;
use sluice_core::{CheckpointId, NodeId};
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

const FP: &str = "job-graph-v1";

fn storage(base: &Path, retained: usize) -> LocalCheckpointStorage {
    LocalCheckpointStorage::new(base, NonZeroUsize::new(retained).unwrap())
}

fn operators() -> Vec<OperatorInfo> {
    vec![
        OperatorInfo {
            node: NodeId(0),
            parallelism: 2,
            max_parallelism: 128,
        },
        OperatorInfo {
            node: NodeId(3),
            parallelism: 1,
            max_parallelism: 64,
        },
    ]
}

/// The (operator, subtask) pairs of [`operators`].
const SUBTASKS: [(usize, usize); 3] = [(0, 0), (0, 1), (3, 0)];

fn payload(id: u64, node: usize, subtask: usize) -> Vec<u8> {
    format!("checkpoint {id} operator {node} subtask {subtask};")
        .repeat(50)
        .into_bytes()
}

/// Writes and completes checkpoint `id` with the payloads of [`payload`].
async fn checkpoint(s: &LocalCheckpointStorage, id: u64) -> CheckpointMetadata {
    let mut files = Vec::new();
    for (node, subtask) in SUBTASKS {
        let f = s
            .write_state(
                CheckpointId(id),
                NodeId(node),
                subtask,
                payload(id, node, subtask),
            )
            .await
            .unwrap();
        files.push(f);
    }
    let metadata = CheckpointMetadata {
        job_fingerprint: FP.into(),
        checkpoint_id: CheckpointId(id),
        timestamp_ms: 1_000 + id,
        operators: operators(),
        state_files: files,
        coordinator_states: vec![],
        shared_files: vec![],
    };
    s.complete(metadata.clone()).await.unwrap();
    metadata
}

fn state_path(s: &LocalCheckpointStorage, id: u64, node: usize, subtask: usize) -> PathBuf {
    s.checkpoint_dir(CheckpointId(id))
        .join(state_file_name(NodeId(node), subtask))
}

fn flip_byte(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x20;
    std::fs::write(path, bytes).unwrap();
}

fn dirs_on_disk(base: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(base)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Restores and expects checkpoint `restored`, after skipping exactly one checkpoint, `skipped`;
/// returns the skip's error.
async fn expect_fallback(s: &LocalCheckpointStorage, restored: u64, skipped: u64) -> StorageError {
    let mut outcome = s.latest_valid(FP).await.unwrap();
    let r = outcome.restored.expect("an older checkpoint is intact");
    assert_eq!(r.id(), CheckpointId(restored));
    assert_eq!(outcome.skipped.len(), 1, "{:?}", outcome.skipped);
    let skip = outcome.skipped.remove(0);
    assert_eq!(skip.id, CheckpointId(skipped));
    skip.error
}

#[tokio::test]
async fn round_trip_returns_every_payload_and_the_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 3);
    assert!(s.initialize().await.unwrap().is_empty());
    let written = checkpoint(&s, 1).await;

    let outcome = s.latest_valid(FP).await.unwrap();
    assert!(outcome.skipped.is_empty());
    let r = outcome.restored.unwrap();
    assert_eq!(r.metadata(), &written);
    assert_eq!(r.location(), s.checkpoint_dir(CheckpointId(1)));
    for (node, subtask) in SUBTASKS {
        assert_eq!(
            r.state(NodeId(node), subtask),
            Some(&payload(1, node, subtask)[..])
        );
    }
    assert_eq!(r.state(NodeId(3), 1), None);
    assert_eq!(r.clone().into_states().0.len(), 3);

    // The same checkpoint by id and by directory.
    assert_eq!(s.load(CheckpointId(1), FP).await.unwrap(), r);
    let by_dir = LocalCheckpointStorage::load_dir(s.checkpoint_dir(CheckpointId(1)), FP)
        .await
        .unwrap();
    assert_eq!(by_dir, r);
    assert_eq!(s.completed().await.unwrap(), [CheckpointId(1)]);
}

#[tokio::test]
async fn empty_payloads_and_empty_checkpoints_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 1);
    let id = CheckpointId(1);
    let f = s.write_state(id, NodeId(0), 0, Vec::new()).await.unwrap();
    assert_eq!(f.length, 0);
    let ops = vec![OperatorInfo {
        node: NodeId(0),
        parallelism: 1,
        max_parallelism: 1,
    }];
    let meta = |id, state_files| CheckpointMetadata {
        job_fingerprint: FP.into(),
        checkpoint_id: id,
        timestamp_ms: 0,
        operators: ops.clone(),
        state_files,
        coordinator_states: vec![],
        shared_files: vec![],
    };
    s.complete(meta(id, vec![f])).await.unwrap();
    let r = s.load(id, FP).await.unwrap();
    assert_eq!(r.state(NodeId(0), 0), Some(&[][..]));
    // A checkpoint without any state file still has its metadata.
    s.complete(meta(CheckpointId(2), vec![])).await.unwrap();
    let r = s.latest_valid(FP).await.unwrap().restored.unwrap();
    assert_eq!(r.id(), CheckpointId(2));
    assert!(r.into_states().0.is_empty());
}

#[tokio::test]
async fn nothing_stored_restores_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(&tmp.path().join("never-created"), 1);
    let outcome = s.latest_valid(FP).await.unwrap();
    assert!(outcome.restored.is_none());
    assert!(outcome.skipped.is_empty());
    assert!(s.completed().await.unwrap().is_empty());
}

#[tokio::test]
async fn truncated_state_file_is_named_and_restore_falls_back() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 3);
    checkpoint(&s, 1).await;
    checkpoint(&s, 2).await;
    let bad = state_path(&s, 2, 0, 1);
    let len = std::fs::metadata(&bad).unwrap().len();
    std::fs::File::options()
        .write(true)
        .open(&bad)
        .unwrap()
        .set_len(len - 7)
        .unwrap();

    let err = s.load(CheckpointId(2), FP).await.unwrap_err();
    assert_eq!(err.path(), Some(bad.as_path()));
    assert!(
        matches!(
            err,
            StorageError::Corrupt {
                reason: Corruption::Truncated { .. },
                ..
            }
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("node-0.subtask-1.state") && msg.contains("truncated"),
        "{msg}"
    );

    let err = expect_fallback(&s, 1, 2).await;
    assert_eq!(err.path(), Some(bad.as_path()));
    // The damaged checkpoint stays for inspection.
    assert!(bad.exists());
}

#[tokio::test]
async fn state_file_cut_inside_its_header_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 3);
    checkpoint(&s, 1).await;
    let bad = state_path(&s, 1, 3, 0);
    std::fs::write(&bad, b"SLST").unwrap();
    let err = s.load(CheckpointId(1), FP).await.unwrap_err();
    assert_eq!(err.path(), Some(bad.as_path()));
    assert!(matches!(
        err,
        StorageError::Corrupt {
            reason: Corruption::TooShort { len: 4, .. },
            ..
        }
    ));
}

#[tokio::test]
async fn flipped_byte_in_a_state_file_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 3);
    checkpoint(&s, 1).await;
    checkpoint(&s, 2).await;
    let bad = state_path(&s, 2, 3, 0);
    flip_byte(&bad, HEADER_LEN + 100);

    let err = s.load(CheckpointId(2), FP).await.unwrap_err();
    assert_eq!(err.path(), Some(bad.as_path()));
    assert!(
        matches!(
            err,
            StorageError::Corrupt {
                reason: Corruption::ChecksumMismatch { .. },
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("checksum mismatch"), "{err}");
    let err = expect_fallback(&s, 1, 2).await;
    assert_eq!(err.path(), Some(bad.as_path()));
}

#[tokio::test]
async fn flipped_byte_in_the_metadata_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 3);
    checkpoint(&s, 1).await;
    checkpoint(&s, 2).await;
    let bad = s.checkpoint_dir(CheckpointId(2)).join(METADATA_FILE);
    flip_byte(&bad, HEADER_LEN + 2);

    let err = s.load(CheckpointId(2), FP).await.unwrap_err();
    assert_eq!(err.path(), Some(bad.as_path()));
    assert!(matches!(err, StorageError::Corrupt { .. }), "{err}");
    let err = expect_fallback(&s, 1, 2).await;
    assert!(err.to_string().contains("chk-2/_metadata"), "{err}");
}

#[tokio::test]
async fn missing_metadata_is_named_and_the_incomplete_checkpoint_removed() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 3);
    checkpoint(&s, 1).await;
    checkpoint(&s, 2).await;
    let dir2 = s.checkpoint_dir(CheckpointId(2));
    std::fs::remove_file(dir2.join(METADATA_FILE)).unwrap();

    // Restoring that directory explicitly fails and names the metadata file.
    let err = LocalCheckpointStorage::load_dir(&dir2, FP)
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::Missing { .. }), "{err}");
    assert_eq!(err.path(), Some(dir2.join(METADATA_FILE).as_path()));
    assert!(
        err.to_string().contains("chk-2/_metadata is missing"),
        "{err}"
    );

    // The latest valid one is the previous checkpoint; the incomplete one is garbage.
    let err = expect_fallback(&s, 1, 2).await;
    assert!(matches!(err, StorageError::Missing { .. }), "{err}");
    assert_eq!(err.path(), Some(dir2.join(METADATA_FILE).as_path()));
    assert!(!dir2.exists());
    assert_eq!(dirs_on_disk(tmp.path()), ["chk-1"]);
}

#[tokio::test]
async fn missing_state_file_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 3);
    checkpoint(&s, 1).await;
    checkpoint(&s, 2).await;
    let bad = state_path(&s, 2, 0, 0);
    std::fs::remove_file(&bad).unwrap();

    let err = s.load(CheckpointId(2), FP).await.unwrap_err();
    assert!(matches!(err, StorageError::Missing { .. }), "{err}");
    assert_eq!(err.path(), Some(bad.as_path()));
    let err = expect_fallback(&s, 1, 2).await;
    assert!(
        err.to_string()
            .contains("node-0.subtask-0.state is missing"),
        "{err}"
    );
}

#[tokio::test]
async fn state_file_swapped_for_another_intact_one_contradicts_the_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 3);
    checkpoint(&s, 1).await;
    checkpoint(&s, 2).await;
    let bad = state_path(&s, 2, 0, 0);
    std::fs::copy(state_path(&s, 1, 0, 1), &bad).unwrap();
    let err = s.load(CheckpointId(2), FP).await.unwrap_err();
    assert_eq!(err.path(), Some(bad.as_path()));
    assert!(
        matches!(
            err,
            StorageError::Corrupt {
                reason: Corruption::MetadataMismatch { .. },
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn restore_skips_every_bad_checkpoint_newest_first() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 5);
    for id in 1..=4 {
        checkpoint(&s, id).await;
    }
    flip_byte(&state_path(&s, 4, 0, 0), HEADER_LEN);
    std::fs::remove_file(state_path(&s, 3, 3, 0)).unwrap();
    std::fs::remove_file(s.checkpoint_dir(CheckpointId(2)).join(METADATA_FILE)).unwrap();

    let outcome = s.latest_valid(FP).await.unwrap();
    assert_eq!(outcome.restored.unwrap().id(), CheckpointId(1));
    let skipped: Vec<(u64, Option<PathBuf>)> = outcome
        .skipped
        .iter()
        .map(|sk| (sk.id.0, sk.error.path().map(Path::to_path_buf)))
        .collect();
    assert_eq!(
        skipped,
        [
            (4, Some(state_path(&s, 4, 0, 0))),
            (3, Some(state_path(&s, 3, 3, 0))),
            (
                2,
                Some(s.checkpoint_dir(CheckpointId(2)).join(METADATA_FILE))
            ),
        ]
    );

    // With the last one damaged too, nothing is restored and everything is reported.
    flip_byte(&state_path(&s, 1, 0, 1), HEADER_LEN + 1);
    let outcome = s.latest_valid(FP).await.unwrap();
    assert!(outcome.restored.is_none());
    let ids: Vec<u64> = outcome.skipped.iter().map(|sk| sk.id.0).collect();
    assert_eq!(ids, [4, 3, 1]);
}

#[tokio::test]
async fn retention_keeps_exactly_k_completed_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 2);
    checkpoint(&s, 1).await;
    checkpoint(&s, 2).await;
    assert_eq!(dirs_on_disk(tmp.path()), ["chk-1", "chk-2"]);
    for id in 3..=6 {
        checkpoint(&s, id).await;
        assert_eq!(
            s.completed().await.unwrap(),
            [CheckpointId(id - 1), CheckpointId(id)]
        );
    }
    assert_eq!(dirs_on_disk(tmp.path()), ["chk-5", "chk-6"]);
    // Completing returns what retention removed.
    let f = s
        .write_state(CheckpointId(7), NodeId(0), 0, vec![1])
        .await
        .unwrap();
    let removed = s
        .complete(CheckpointMetadata {
            job_fingerprint: FP.into(),
            checkpoint_id: CheckpointId(7),
            timestamp_ms: 7,
            operators: operators(),
            state_files: vec![f],
            coordinator_states: vec![],
            shared_files: vec![],
        })
        .await
        .unwrap();
    assert_eq!(removed, [CheckpointId(5)]);
}

#[tokio::test]
async fn retention_does_not_count_an_in_progress_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 1);
    checkpoint(&s, 1).await;
    // Checkpoint 3 is being written while 2 completes.
    s.write_state(CheckpointId(3), NodeId(0), 0, vec![3])
        .await
        .unwrap();
    checkpoint(&s, 2).await;
    assert_eq!(dirs_on_disk(tmp.path()), ["chk-2", "chk-3"]);
}

#[tokio::test]
async fn fingerprint_mismatch_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 2);
    checkpoint(&s, 1).await;
    let err = s.latest_valid("another-graph").await.unwrap_err();
    let StorageError::FingerprintMismatch {
        path,
        expected,
        found,
    } = &err
    else {
        panic!("expected a fingerprint mismatch, got {err}");
    };
    assert_eq!(expected, "another-graph");
    assert_eq!(found, FP);
    assert_eq!(path, &s.checkpoint_dir(CheckpointId(1)).join(METADATA_FILE));
    let msg = err.to_string();
    assert!(
        msg.contains("different job graph") && msg.contains(FP) && msg.contains("another-graph"),
        "{msg}"
    );
    assert!(matches!(
        s.load(CheckpointId(1), "another-graph").await,
        Err(StorageError::FingerprintMismatch { .. })
    ));
}

#[tokio::test]
async fn unwritable_directory_is_named() {
    // Works as root too: nothing can be created under a regular file.
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("plain-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let base = file.join("checkpoints");

    let err = validate_directory(&base).unwrap_err();
    assert!(matches!(err, StorageError::NotWritable { .. }), "{err}");
    assert_eq!(err.path(), Some(base.as_path()));
    assert!(
        err.to_string()
            .contains("plain-file/checkpoints is not writable"),
        "{err}"
    );

    let s = storage(&base, 1);
    let err = s.initialize().await.unwrap_err();
    assert_eq!(err.path(), Some(base.as_path()));
    let err = s
        .write_state(CheckpointId(1), NodeId(0), 0, vec![1])
        .await
        .unwrap_err();
    assert!(err.path().is_some_and(|p| p.starts_with(&base)), "{err}");

    // A usable directory passes and is created.
    let good = tmp.path().join("a/b/checkpoints");
    validate_directory(&good).unwrap();
    assert!(good.is_dir());
    assert!(dirs_on_disk(&good).is_empty(), "the probe file is removed");
}

#[tokio::test]
async fn initialize_removes_only_incomplete_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 3);
    checkpoint(&s, 1).await;
    s.write_state(CheckpointId(2), NodeId(0), 0, vec![2])
        .await
        .unwrap();
    std::fs::create_dir(tmp.path().join("not-a-checkpoint")).unwrap();
    assert_eq!(s.initialize().await.unwrap(), [CheckpointId(2)]);
    assert_eq!(dirs_on_disk(tmp.path()), ["chk-1", "not-a-checkpoint"]);
}

#[tokio::test]
async fn complete_checkpoint_is_never_written_again() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 3);
    let meta = checkpoint(&s, 1).await;
    let err = s
        .write_state(CheckpointId(1), NodeId(0), 0, vec![9])
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::AlreadyComplete { .. }), "{err}");
    assert!(matches!(
        s.complete(meta).await,
        Err(StorageError::AlreadyComplete { .. })
    ));
    assert_eq!(
        s.load(CheckpointId(1), FP)
            .await
            .unwrap()
            .state(NodeId(0), 0),
        Some(&payload(1, 0, 0)[..])
    );
}

#[tokio::test]
async fn discard_removes_an_aborted_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 3);
    checkpoint(&s, 1).await;
    s.write_state(CheckpointId(2), NodeId(0), 0, vec![2])
        .await
        .unwrap();
    s.discard(CheckpointId(2)).await.unwrap();
    s.discard(CheckpointId(99)).await.unwrap();
    assert_eq!(dirs_on_disk(tmp.path()), ["chk-1"]);
}

#[tokio::test]
async fn complete_rejects_metadata_that_contradicts_itself_or_the_files() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 3);
    let id = CheckpointId(1);
    let f = s.write_state(id, NodeId(0), 5, vec![1]).await.unwrap();
    let meta = CheckpointMetadata {
        job_fingerprint: FP.into(),
        checkpoint_id: id,
        timestamp_ms: 0,
        operators: operators(),
        state_files: vec![f.clone()],
        coordinator_states: vec![],
        shared_files: vec![],
    };
    // Subtask 5 of an operator with parallelism 2.
    let err = s.complete(meta.clone()).await.unwrap_err();
    assert!(matches!(err, StorageError::InvalidMetadata(_)), "{err}");
    assert!(err.to_string().contains("parallelism 2"), "{err}");

    // A handle for a file that was never written.
    let ghost = StateFileHandle {
        subtask: 1,
        file_name: state_file_name(NodeId(0), 1),
        ..f
    };
    let err = s
        .complete(CheckpointMetadata {
            state_files: vec![ghost],
            coordinator_states: vec![],
            shared_files: vec![],
            ..meta
        })
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::Missing { .. }), "{err}");
    assert!(s.completed().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_moved_checkpoint_directory_loads_from_its_new_place() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(&tmp.path().join("run-1"), 3);
    checkpoint(&s, 4).await;
    let moved = tmp.path().join("kept-chk-4");
    std::fs::rename(s.checkpoint_dir(CheckpointId(4)), &moved).unwrap();
    let r = LocalCheckpointStorage::load_dir(&moved, FP).await.unwrap();
    assert_eq!(r.id(), CheckpointId(4));
    assert_eq!(r.location(), moved);
    assert_eq!(r.state(NodeId(3), 0), Some(&payload(4, 3, 0)[..]));
}

#[tokio::test]
async fn storage_is_usable_as_a_trait_object() {
    let tmp = tempfile::tempdir().unwrap();
    let s: std::sync::Arc<dyn CheckpointStorage> = std::sync::Arc::new(storage(tmp.path(), 1));
    assert_eq!(s.location(), tmp.path().display().to_string());
    assert!(s.initialize().await.unwrap().is_empty());
}

#[tokio::test]
async fn coordinator_states_have_their_own_section_and_a_missing_one_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let s = storage(tmp.path(), 2);
    s.initialize().await.unwrap();
    let id = CheckpointId(1);
    let file = s
        .write_state(id, NodeId(0), 0, b"op".to_vec())
        .await
        .unwrap();
    let coordinator = s
        .write_coordinator_state(id, NodeId(3), b"splits".to_vec())
        .await
        .unwrap();
    let mut metadata = CheckpointMetadata {
        job_fingerprint: FP.into(),
        checkpoint_id: id,
        timestamp_ms: 1,
        operators: operators(),
        state_files: vec![file],
        coordinator_states: vec![coordinator.clone()],
        shared_files: vec![],
    };
    s.complete(metadata.clone()).await.unwrap();
    let restored = s.load(id, FP).await.unwrap();
    assert_eq!(restored.coordinator_state(NodeId(3)), Some(&b"splits"[..]));
    assert_eq!(restored.state(NodeId(0), 0), Some(&b"op"[..]));
    let (operators_states, coordinators) = restored.into_states();
    assert_eq!(
        operators_states.len(),
        1,
        "no pseudo operator for the coordinator"
    );
    assert_eq!(coordinators.len(), 1);

    // A coordinator of an operator the checkpoint does not list is inconsistent metadata.
    metadata.coordinator_states[0].node = NodeId(9);
    assert!(metadata.check().unwrap_err().contains("unknown operator"));

    // A missing coordinator file is named when the checkpoint is loaded.
    std::fs::remove_file(s.checkpoint_dir(id).join(&coordinator.file_name)).unwrap();
    let err = s.load(id, FP).await.unwrap_err().to_string();
    assert!(err.contains(&coordinator.file_name), "{err}");
}

#[tokio::test]
async fn the_layout_keeps_its_contract_in_memory() {
    contract::check_blob_store(MemoryBlobStore::new).await;
}

#[tokio::test]
async fn the_layout_keeps_its_contract_on_the_local_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let mut n = 0;
    contract::check_blob_store(|| {
        n += 1;
        LocalBlobStore::new(tmp.path().join(format!("store-{n}")))
    })
    .await;
}

proptest::proptest! {
    /// Whatever checkpoints complete and whichever of them are damaged afterwards: retention
    /// keeps exactly the newest K, and a restore returns the newest intact one of those,
    /// skipping exactly the damaged ones newer than it, newest first.
    #[test]
    fn retention_and_fallback_hold_for_any_history(
        retained in 1usize..5,
        count in 1u64..10,
        damaged in proptest::collection::btree_set(1u64..10, 0..6),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let s = BlobCheckpointStorage::over(
                MemoryBlobStore::new(),
                NonZeroUsize::new(retained).unwrap(),
            );
            for id in 1..=count {
                let id = CheckpointId(id);
                let f = s.write_state(id, NodeId(0), 0, payload(id.0, 0, 0)).await.unwrap();
                let ops = vec![OperatorInfo { node: NodeId(0), parallelism: 1, max_parallelism: 8 }];
                let meta = CheckpointMetadata {
                    job_fingerprint: FP.into(),
                    checkpoint_id: id,
                    timestamp_ms: 0,
                    operators: ops,
                    state_files: vec![f],
                    coordinator_states: vec![],
                    shared_files: vec![],
                };
                s.complete(meta).await.unwrap();
            }
            let kept: Vec<u64> = (count.saturating_sub(retained as u64) + 1..=count).collect();
            let completed: Vec<u64> = s.completed().await.unwrap().iter().map(|c| c.0).collect();
            assert_eq!(completed, kept);
            for &id in damaged.iter().filter(|id| kept.contains(id)) {
                s.blobs().put(&format!("chk-{id}/{}", state_file_name(NodeId(0), 0)), b"junk".to_vec())
                    .await
                    .unwrap();
            }
            let outcome = s.latest_valid(FP).await.unwrap();
            let intact = kept.iter().rev().copied().find(|id| !damaged.contains(id));
            assert_eq!(outcome.restored.map(|r| r.id().0), intact);
            let skipped: Vec<u64> = outcome.skipped.iter().map(|sk| sk.id.0).collect();
            let expected: Vec<u64> = kept
                .iter()
                .rev()
                .copied()
                .take_while(|id| Some(*id) != intact)
                .collect();
            assert_eq!(skipped, expected);
        });
    }
}

/// The same local file put twice (an upload ahead and a checkpoint's both hard-link the same
/// table file) leaves only the shared file: the second rename between two links to one file
/// does nothing, and its temporary link must not stay behind.
#[tokio::test]
async fn a_file_put_twice_leaves_no_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = storage(&dir.path().join("chk"), 1);
    let source = dir.path().join("000012.sst");
    std::fs::write(&source, b"table").unwrap();
    s.write_shared("op-000012.sst", &source).await.unwrap();
    s.write_shared("op-000012.sst", &source).await.unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path().join("chk/shared"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["op-000012.sst"]);
}
