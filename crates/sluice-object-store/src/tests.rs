//! The storage contract over object stores: the runtime's shared suite against the in-memory
//! and local-file stores (and S3 when `SLUICE_S3_ENDPOINT` names a server), then this crate's
//! own cases over an in-memory store: round trip, retention, garbage of incomplete checkpoints,
//! damage skipped on restore, and refusals that name the object.

use super::*;
use object_store::memory::InMemory;
use sluice_runtime::storage::state_file_name;
use sluice_runtime::storage::{OperatorInfo, contract};
use std::sync::atomic::{AtomicU64, Ordering};

fn blobs_in(store: Arc<dyn ObjectStore>, prefix: &str, location: &str) -> ObjectStoreBlobs {
    ObjectStoreBlobs::new(store, prefix, location)
}

#[test]
fn the_layout_keeps_its_contract_in_memory() {
    block_on(contract::check_blob_store(|| {
        blobs_in(
            Arc::new(InMemory::new()),
            "checkpoints/job",
            "memory:///checkpoints/job",
        )
    }));
}

#[test]
fn the_layout_keeps_its_contract_in_local_files() {
    let tmp = tempfile::tempdir().unwrap();
    let n = AtomicU64::new(0);
    block_on(contract::check_blob_store(|| {
        let dir = tmp
            .path()
            .join(format!("store-{}", n.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir_all(&dir).unwrap();
        let url = format!("file://{}/checkpoints", dir.display());
        let (store, prefix) = object_store::parse_url(&url::Url::parse(&url).unwrap()).unwrap();
        blobs_in(Arc::from(store), prefix.as_ref(), &url)
    }));
}

#[test]
fn the_layout_keeps_its_contract_in_s3() {
    use sluice_runtime::testing::{create_s3_bucket, required_env};
    let Some(endpoint) = required_env("SLUICE_S3_ENDPOINT", "source .ci/s3") else {
        return;
    };
    let bucket = format!("sluice-contract-{}", std::process::id());
    create_s3_bucket(&endpoint, &bucket).unwrap();
    let options = [
        ("aws_endpoint", endpoint.as_str()),
        ("aws_allow_http", "true"),
        ("aws_access_key_id", "test"),
        ("aws_secret_access_key", "test"),
        ("aws_region", "us-east-1"),
    ];
    let n = AtomicU64::new(0);
    block_on(contract::check_blob_store(|| {
        let url = format!(
            "s3://{bucket}/contract-{}",
            n.fetch_add(1, Ordering::Relaxed)
        );
        let (store, prefix) =
            object_store::parse_url_opts(&url::Url::parse(&url).unwrap(), options).unwrap();
        blobs_in(Arc::from(store), prefix.as_ref(), &url)
    }));
}

const JOB: &str = "job-v1";

fn storage(retained: usize) -> (ObjectStoreCheckpointStorage, Arc<InMemory>) {
    let store = Arc::new(InMemory::new());
    let storage = ObjectStoreCheckpointStorage::new(
        store.clone(),
        "checkpoints/job",
        "s3://bucket/checkpoints/job",
        NonZeroUsize::new(retained).unwrap(),
    );
    (storage, store)
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Writes checkpoint `id` of one operator with two subtasks and a coordinator, and completes it.
async fn checkpoint(s: &ObjectStoreCheckpointStorage, id: u64) -> Vec<CheckpointId> {
    let id = CheckpointId(id);
    let mut files = Vec::new();
    for subtask in 0..2 {
        let payload = format!("state {id} {subtask}").into_bytes();
        files.push(
            s.write_state(id, NodeId(0), subtask, payload)
                .await
                .unwrap(),
        );
    }
    let coordinator = s
        .write_coordinator_state(id, NodeId(0), b"enumerator".to_vec())
        .await
        .unwrap();
    s.complete(CheckpointMetadata {
        job_fingerprint: JOB.into(),
        checkpoint_id: id,
        timestamp_ms: 1,
        operators: vec![OperatorInfo {
            node: NodeId(0),
            parallelism: 2,
            max_parallelism: 128,
        }],
        state_files: files,
        coordinator_states: vec![coordinator],
        shared_files: vec![],
    })
    .await
    .unwrap()
}

#[test]
fn checkpoints_round_trip_and_only_the_newest_are_retained() {
    let (s, _) = storage(2);
    block_on(async {
        assert_eq!(s.initialize().await.unwrap(), vec![]);
        assert_eq!(checkpoint(&s, 1).await, vec![]);
        assert_eq!(checkpoint(&s, 2).await, vec![]);
        assert_eq!(checkpoint(&s, 3).await, vec![CheckpointId(1)]);
        assert_eq!(
            s.completed().await.unwrap(),
            vec![CheckpointId(2), CheckpointId(3)]
        );
        let restored = s.load(CheckpointId(2), JOB).await.unwrap();
        assert_eq!(restored.state(NodeId(0), 1), Some(&b"state 2 1"[..]));
        assert_eq!(
            restored.coordinator_state(NodeId(0)),
            Some(&b"enumerator"[..])
        );
        assert_eq!(
            restored.location(),
            std::path::Path::new("s3://bucket/checkpoints/job/chk-2")
        );
        let latest = s.latest_valid(JOB).await.unwrap();
        assert_eq!(latest.restored.map(|r| r.id()), Some(CheckpointId(3)));
        assert!(latest.skipped.is_empty());
    });
}

#[test]
fn incomplete_checkpoints_are_garbage() {
    let (s, store) = storage(3);
    block_on(async {
        checkpoint(&s, 1).await;
        s.write_state(CheckpointId(2), NodeId(0), 0, b"half".to_vec())
            .await
            .unwrap();
        // An object that is not a checkpoint's is left alone.
        store
            .put(
                &"checkpoints/job/notes.txt".into(),
                PutPayload::from("mine"),
            )
            .await
            .unwrap();
        assert_eq!(s.completed().await.unwrap(), vec![CheckpointId(1)]);
        assert_eq!(s.initialize().await.unwrap(), vec![CheckpointId(2)]);
        assert!(s.blobs().list("chk-2").await.unwrap().is_empty());
        assert!(
            store
                .head(&"checkpoints/job/notes.txt".into())
                .await
                .is_ok()
        );
        // Restoring also removes them, reporting each.
        s.write_state(CheckpointId(3), NodeId(0), 0, b"half".to_vec())
            .await
            .unwrap();
        let latest = s.latest_valid(JOB).await.unwrap();
        assert_eq!(latest.restored.map(|r| r.id()), Some(CheckpointId(1)));
        assert_eq!(latest.skipped.len(), 1);
        assert_eq!(latest.skipped[0].id, CheckpointId(3));
    });
}

#[test]
fn a_damaged_checkpoint_is_skipped_on_restore_naming_the_object() {
    let (s, store) = storage(3);
    block_on(async {
        checkpoint(&s, 1).await;
        checkpoint(&s, 2).await;
        let object: ObjectPath = "checkpoints/job/chk-2/node-0.subtask-1.state".into();
        let mut bytes = store
            .get(&object)
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap()
            .to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        store.put(&object, PutPayload::from(bytes)).await.unwrap();

        let latest = s.latest_valid(JOB).await.unwrap();
        assert_eq!(latest.restored.map(|r| r.id()), Some(CheckpointId(1)));
        let error = latest.skipped[0].error.to_string();
        assert!(
            error.contains("s3://bucket/checkpoints/job/chk-2/node-0.subtask-1.state"),
            "{error}"
        );
        // Loading that one checkpoint fails instead of falling back.
        let err = s.load(CheckpointId(2), JOB).await.unwrap_err();
        assert!(matches!(err, StorageError::Corrupt { .. }), "{err}");
        // Another job's checkpoint is an error, not a reason to fall back.
        let err = s.latest_valid("job-v2").await.unwrap_err();
        assert!(
            matches!(err, StorageError::FingerprintMismatch { .. }),
            "{err}"
        );
    });
}

#[test]
fn a_complete_checkpoint_is_not_written_again_and_a_missing_file_blocks_completion() {
    let (s, _) = storage(3);
    block_on(async {
        checkpoint(&s, 1).await;
        let err = s
            .write_state(CheckpointId(1), NodeId(0), 0, b"late".to_vec())
            .await
            .unwrap_err();
        assert!(matches!(err, StorageError::AlreadyComplete { .. }), "{err}");

        let written = s
            .write_state(CheckpointId(2), NodeId(0), 0, b"a".to_vec())
            .await
            .unwrap();
        let mut missing = written.clone();
        missing.subtask = 1;
        missing.file_name = state_file_name(NodeId(0), 1);
        let err = s
            .complete(CheckpointMetadata {
                job_fingerprint: JOB.into(),
                checkpoint_id: CheckpointId(2),
                timestamp_ms: 1,
                operators: vec![OperatorInfo {
                    node: NodeId(0),
                    parallelism: 2,
                    max_parallelism: 128,
                }],
                state_files: vec![written, missing],
                coordinator_states: vec![],
                shared_files: vec![],
            })
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("s3://bucket/checkpoints/job/chk-2/node-0.subtask-1.state"),
            "{err}"
        );
        assert_eq!(s.completed().await.unwrap(), vec![CheckpointId(1)]);
        s.discard(CheckpointId(2)).await.unwrap();
        s.discard(CheckpointId(9)).await.unwrap();
        assert!(s.blobs().list("chk-2").await.unwrap().is_empty());
    });
}

#[test]
fn urls_that_name_no_store_are_refused_naming_them() {
    let one = NonZeroUsize::MIN;
    let err = ObjectStoreCheckpointStorage::from_url("not a url", Vec::<(&str, &str)>::new(), one)
        .unwrap_err();
    assert!(err.to_string().contains("\"not a url\""), "{err}");
    let err = ObjectStoreCheckpointStorage::from_url(
        "ftp://host/checkpoints",
        Vec::<(&str, &str)>::new(),
        one,
    )
    .unwrap_err();
    assert!(err.to_string().contains("ftp://host/checkpoints"), "{err}");
    let s = ObjectStoreCheckpointStorage::from_url(
        "s3://bucket/a/b/",
        [("aws_region", "us-east-1")],
        one,
    )
    .unwrap();
    assert_eq!(s.location(), "s3://bucket/a/b");
}

#[test]
fn a_checkpoint_prefix_without_metadata_names_the_missing_object() {
    let (s, store) = storage(3);
    block_on(async {
        checkpoint(&s, 1).await;
        store
            .delete(&"checkpoints/job/chk-1/_metadata".into())
            .await
            .unwrap();
        let named = "s3://bucket/checkpoints/job/chk-1/_metadata is missing";
        let err = s.load(CheckpointId(1), JOB).await.unwrap_err();
        assert!(err.to_string().contains(named), "{err}");
        let err = s.load_at("chk-1", JOB).await.unwrap_err();
        assert!(err.to_string().contains(named), "{err}");
    });
}
