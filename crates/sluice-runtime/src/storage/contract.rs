//! The contract of a [`BlobStore`] and of the checkpoint layout over it, as one test suite that
//! every backend runs (compiled with the `testing` feature): the in-memory store in this crate's
//! tests, the local disk, and `sluice-object-store`'s stores. It checks the blob operations
//! themselves (local files put and got whole among them: a backend runs under tokio), then the
//! layout over them: round trip, metadata put last, deletion metadata first,
//! retention, garbage of incomplete checkpoints, damaged and missing files found and skipped
//! newest first, and refusals that name the file.
//!
//! ```
//! use sluice_runtime::storage::{MemoryBlobStore, contract};
//!
//! let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! rt.block_on(contract::check_blob_store(MemoryBlobStore::new));
//! ```

use super::format::{self, HEADER_LEN, METADATA_FILE};
use super::{
    BlobCheckpointStorage, BlobStore, CheckpointMetadata, CheckpointStorage, Corruption,
    OperatorInfo, StorageError,
};
use futures::future::BoxFuture;
use sluice_core::{CheckpointId, NodeId};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Mutex;

const JOB: &str = "contract-job-v1";

/// Runs every case of the contract, each against a fresh, empty store from `fresh`; panics on
/// the first violation, naming it.
pub async fn check_blob_store<B: BlobStore>(mut fresh: impl FnMut() -> B) {
    blobs_are_put_got_listed_and_deleted(fresh()).await;
    files_are_put_and_got_whole(fresh()).await;
    checkpoints_round_trip_with_the_metadata_put_last(fresh()).await;
    retention_keeps_the_newest_and_ignores_one_in_progress(fresh()).await;
    incomplete_checkpoints_are_garbage(fresh()).await;
    damaged_and_missing_files_are_named_and_skipped_newest_first(fresh()).await;
    a_checkpoint_without_metadata_names_the_missing_metadata(fresh()).await;
    refusals_name_what_is_wrong(fresh()).await;
    state_files_are_read_back_by_handle(fresh()).await;
}

/// A blob store that records the puts and deletes made through it, in order.
#[derive(Debug)]
struct Recording<B> {
    inner: B,
    log: Mutex<Vec<String>>,
}

impl<B> Recording<B> {
    fn taken(&self) -> Vec<String> {
        std::mem::take(&mut *sluice_core::sync::lock(&self.log))
    }
}

impl<B: BlobStore> BlobStore for Recording<B> {
    fn location(&self) -> String {
        self.inner.location()
    }
    fn path_of(&self, key: &str) -> PathBuf {
        self.inner.path_of(key)
    }
    fn put<'a>(&'a self, key: &'a str, bytes: Vec<u8>) -> BoxFuture<'a, Result<(), StorageError>> {
        sluice_core::sync::lock(&self.log).push(format!("put {key}"));
        self.inner.put(key, bytes)
    }
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<u8>, StorageError>> {
        self.inner.get(key)
    }
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>, StorageError>> {
        self.inner.list(prefix)
    }
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
        sluice_core::sync::lock(&self.log).push(format!("delete {key}"));
        self.inner.delete(key)
    }
    fn put_file<'a>(
        &'a self,
        key: &'a str,
        path: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        sluice_core::sync::lock(&self.log).push(format!("put {key}"));
        self.inner.put_file(key, path)
    }
    fn get_to_file<'a>(
        &'a self,
        key: &'a str,
        path: &'a std::path::Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        self.inner.get_to_file(key, path)
    }
}

fn storage<B: BlobStore>(blobs: B, retained: usize) -> BlobCheckpointStorage<Recording<B>> {
    let recording = Recording {
        inner: blobs,
        log: Mutex::new(Vec::new()),
    };
    let retained = NonZeroUsize::new(retained).unwrap_or(NonZeroUsize::MIN);
    BlobCheckpointStorage::over(recording, retained)
}

async fn sorted<B: BlobStore>(blobs: &B, prefix: &str) -> Vec<String> {
    let mut keys = blobs.list(prefix).await.unwrap();
    keys.sort();
    keys
}

fn payload(id: u64, subtask: usize) -> Vec<u8> {
    format!("checkpoint {id} subtask {subtask};")
        .repeat(20)
        .into_bytes()
}

/// Writes checkpoint `id` of operator 0 (two subtasks) and operator 3's coordinator, and
/// completes it; returns what retention removed.
async fn checkpoint<B: BlobStore>(s: &BlobCheckpointStorage<B>, id: u64) -> Vec<CheckpointId> {
    let id_ = CheckpointId(id);
    let mut files = Vec::new();
    for subtask in 0..2 {
        let f = s.write_state(id_, NodeId(0), subtask, payload(id, subtask));
        files.push(f.await.unwrap());
    }
    let coordinator = s
        .write_coordinator_state(id_, NodeId(3), format!("splits {id}").into_bytes())
        .await
        .unwrap();
    s.complete(metadata(id_, files, vec![coordinator]))
        .await
        .unwrap()
}

fn metadata(
    id: CheckpointId,
    state_files: Vec<super::StateFileHandle>,
    coordinator_states: Vec<super::CoordinatorStateHandle>,
) -> CheckpointMetadata {
    CheckpointMetadata {
        job_fingerprint: JOB.into(),
        checkpoint_id: id,
        timestamp_ms: 1_000 + id.0,
        operators: vec![
            OperatorInfo {
                node: NodeId(0),
                parallelism: 2,
                max_parallelism: 128,
            },
            OperatorInfo {
                node: NodeId(3),
                parallelism: 1,
                max_parallelism: 128,
            },
        ],
        state_files,
        coordinator_states,
        shared_files: vec![],
    }
}

fn state_key(id: u64, subtask: usize) -> String {
    format!("chk-{id}/{}", format::state_file_name(NodeId(0), subtask))
}

fn metadata_key(id: u64) -> String {
    format!("chk-{id}/{METADATA_FILE}")
}

/// Replaces the blob at `key` with `damage` of it.
async fn damage<B: BlobStore>(blobs: &B, key: &str, damage: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = blobs.get(key).await.unwrap();
    damage(&mut bytes);
    blobs.put(key, bytes).await.unwrap();
}

/// Bytes of a file larger than a multipart upload's part (16 MiB in `sluice-object-store`):
/// a pattern that a misplaced or repeated chunk would break.
fn large_file_bytes() -> Vec<u8> {
    (0..(40u32 << 20) + 123)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

async fn files_are_put_and_got_whole<B: BlobStore>(blobs: B) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("sluice-contract-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (small, large) = (b"a small file".to_vec(), large_file_bytes());
    for (name, bytes) in [("small", &small), ("large", &large), ("empty", &Vec::new())] {
        let source = dir.join(name);
        std::fs::write(&source, bytes).unwrap();
        let key = format!("shared/{name}");
        blobs.put_file(&key, &source).await.unwrap();
        assert!(
            blobs.get(&key).await.unwrap() == *bytes,
            "put_file of the {name} file, then get"
        );
        let back = dir.join(format!("{name}.back"));
        blobs.get_to_file(&key, &back).await.unwrap();
        assert!(
            std::fs::read(&back).unwrap() == *bytes,
            "get_to_file of the {name} file"
        );
    }
    // A put blob comes back to a file; put_file replaces.
    blobs.put("shared/put", b"bytes".to_vec()).await.unwrap();
    let back = dir.join("put.back");
    blobs.get_to_file("shared/put", &back).await.unwrap();
    assert_eq!(std::fs::read(&back).unwrap(), b"bytes");
    blobs
        .put_file("shared/put", &dir.join("small"))
        .await
        .unwrap();
    assert_eq!(
        blobs.get("shared/put").await.unwrap(),
        small,
        "put_file replaces"
    );
    assert_eq!(
        sorted(&blobs, "shared").await,
        ["shared/empty", "shared/large", "shared/put", "shared/small"]
    );
    let err = blobs
        .get_to_file("shared/never", &dir.join("never"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StorageError::Missing { path } if *path == blobs.path_of("shared/never")),
        "get_to_file of an absent key: {err}"
    );
    for key in ["shared/empty", "shared/large", "shared/put", "shared/small"] {
        blobs.delete(key).await.unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

async fn blobs_are_put_got_listed_and_deleted<B: BlobStore>(blobs: B) {
    assert!(blobs.list("").await.unwrap().is_empty(), "a fresh store");
    let err = blobs.get("chk-1/a").await.unwrap_err();
    assert!(
        matches!(&err, StorageError::Missing { path } if *path == blobs.path_of("chk-1/a")),
        "get of an absent key: {err}"
    );
    blobs.put("chk-1/a", b"one".to_vec()).await.unwrap();
    blobs.put("chk-1/a", b"two".to_vec()).await.unwrap();
    blobs.put("chk-10/b", Vec::new()).await.unwrap();
    blobs.put("top", b"t".to_vec()).await.unwrap();
    assert_eq!(blobs.get("chk-1/a").await.unwrap(), b"two", "put replaces");
    assert_eq!(blobs.get("chk-10/b").await.unwrap(), b"", "an empty blob");
    assert_eq!(
        sorted(&blobs, "").await,
        ["chk-1/a", "chk-10/b", "top"],
        "list of the root"
    );
    assert_eq!(
        sorted(&blobs, "chk-1").await,
        ["chk-1/a"],
        "list by segment"
    );
    assert!(blobs.list("chk-2").await.unwrap().is_empty());
    blobs.delete("chk-1/a").await.unwrap();
    blobs.delete("chk-1/a").await.unwrap();
    blobs.delete("never/there").await.unwrap();
    assert!(matches!(
        blobs.get("chk-1/a").await,
        Err(StorageError::Missing { .. })
    ));
    assert_eq!(sorted(&blobs, "").await, ["chk-10/b", "top"]);
}

async fn checkpoints_round_trip_with_the_metadata_put_last<B: BlobStore>(blobs: B) {
    let s = storage(blobs, 3);
    assert!(s.initialize().await.unwrap().is_empty());
    assert_eq!(checkpoint(&s, 1).await, []);
    let log = s.blobs().taken();
    let puts: Vec<&String> = log.iter().filter(|l| l.starts_with("put ")).collect();
    assert_eq!(puts.len(), 4, "{log:?}");
    assert_eq!(
        puts.last().map(|p| p.as_str()),
        Some(format!("put {}", metadata_key(1)).as_str()),
        "the metadata is put last: {log:?}"
    );

    let restored = s.load(CheckpointId(1), JOB).await.unwrap();
    assert_eq!(restored.id(), CheckpointId(1));
    assert_eq!(restored.location(), s.blobs().path_of("chk-1"));
    for subtask in 0..2 {
        assert_eq!(
            restored.state(NodeId(0), subtask),
            Some(&payload(1, subtask)[..])
        );
    }
    assert_eq!(
        restored.coordinator_state(NodeId(3)),
        Some(&b"splits 1"[..])
    );
    assert_eq!(restored.metadata().timestamp_ms, 1_001);
    assert_eq!(s.load_at("chk-1", JOB).await.unwrap(), restored);
    let latest = s.latest_valid(JOB).await.unwrap();
    assert!(latest.skipped.is_empty());
    assert_eq!(latest.restored, Some(restored));
    assert_eq!(s.completed().await.unwrap(), [CheckpointId(1)]);
}

/// What a task manager restoring by handle does: one state file read back by the handle
/// `write_state` returned, checked against it.
async fn state_files_are_read_back_by_handle<B: BlobStore>(blobs: B) {
    let s = storage(blobs, 3);
    let handle = s
        .write_state(CheckpointId(4), NodeId(0), 1, payload(4, 1))
        .await
        .unwrap();
    assert_eq!(
        s.read_state(CheckpointId(4), &handle).await.unwrap(),
        payload(4, 1)
    );
    // A handle that does not describe the file (another length or checksum) is refused,
    // naming the file.
    let mut wrong = handle.clone();
    wrong.crc32 ^= 1;
    match s.read_state(CheckpointId(4), &wrong).await {
        Err(StorageError::Corrupt {
            path,
            reason: Corruption::MetadataMismatch { .. },
        }) => assert_eq!(path, s.blobs().path_of(&state_key(4, 1))),
        other => panic!("expected a mismatch, got {other:?}"),
    }
    // A file that is gone is named.
    s.blobs().delete(&state_key(4, 1)).await.unwrap();
    match s.read_state(CheckpointId(4), &handle).await {
        Err(StorageError::Missing { path }) => {
            assert_eq!(path, s.blobs().path_of(&state_key(4, 1)))
        }
        other => panic!("expected a missing file, got {other:?}"),
    }
}

async fn retention_keeps_the_newest_and_ignores_one_in_progress<B: BlobStore>(blobs: B) {
    let s = storage(blobs, 2);
    assert_eq!(checkpoint(&s, 1).await, []);
    assert_eq!(checkpoint(&s, 2).await, []);
    s.blobs().taken();
    assert_eq!(checkpoint(&s, 3).await, [CheckpointId(1)]);
    let deletes: Vec<String> = s
        .blobs()
        .taken()
        .into_iter()
        .filter(|l| l.starts_with("delete "))
        .collect();
    assert_eq!(deletes.len(), 4, "{deletes:?}");
    assert_eq!(
        deletes[0],
        format!("delete {}", metadata_key(1)),
        "a checkpoint is deleted metadata first: {deletes:?}"
    );
    assert!(s.blobs().list("chk-1").await.unwrap().is_empty());
    // Checkpoint 5 is being written while 4 completes: it does not count.
    s.write_state(CheckpointId(5), NodeId(0), 0, vec![5])
        .await
        .unwrap();
    assert_eq!(checkpoint(&s, 4).await, [CheckpointId(2)]);
    assert_eq!(
        s.completed().await.unwrap(),
        [CheckpointId(3), CheckpointId(4)]
    );
    assert_eq!(sorted(s.blobs(), "chk-5").await, [state_key(5, 0)]);
}

async fn incomplete_checkpoints_are_garbage<B: BlobStore>(blobs: B) {
    let s = storage(blobs, 3);
    checkpoint(&s, 1).await;
    s.write_state(CheckpointId(2), NodeId(0), 0, b"half".to_vec())
        .await
        .unwrap();
    // Blobs that are not a checkpoint's are left alone.
    s.blobs().put("notes.txt", b"mine".to_vec()).await.unwrap();
    assert_eq!(s.completed().await.unwrap(), [CheckpointId(1)]);
    assert_eq!(s.initialize().await.unwrap(), [CheckpointId(2)]);
    assert!(s.blobs().list("chk-2").await.unwrap().is_empty());
    assert_eq!(s.blobs().get("notes.txt").await.unwrap(), b"mine");

    // Restoring skips them, naming the missing metadata; `latest_valid` removes them,
    // `find_latest_valid` leaves them in place.
    s.write_state(CheckpointId(3), NodeId(0), 0, b"half".to_vec())
        .await
        .unwrap();
    let found = s.find_latest_valid(JOB).await.unwrap();
    assert_eq!(found.restored.map(|r| r.id()), Some(CheckpointId(1)));
    assert_eq!(found.skipped.len(), 1);
    assert_eq!(found.skipped[0].id, CheckpointId(3));
    assert_eq!(
        found.skipped[0].error.path(),
        Some(s.blobs().path_of(&metadata_key(3)).as_path())
    );
    assert_eq!(sorted(s.blobs(), "chk-3").await, [state_key(3, 0)]);
    let latest = s.latest_valid(JOB).await.unwrap();
    assert_eq!(latest.restored.map(|r| r.id()), Some(CheckpointId(1)));
    assert_eq!(latest.skipped.len(), 1);
    assert!(s.blobs().list("chk-3").await.unwrap().is_empty());
}

async fn damaged_and_missing_files_are_named_and_skipped_newest_first<B: BlobStore>(blobs: B) {
    let s = storage(blobs, 6);
    for id in 1..=5 {
        checkpoint(&s, id).await;
    }
    let path = |key: &str| s.blobs().path_of(key);
    // 5: one flipped payload byte; 4: cut short; 3: flipped metadata; 2: a state file gone.
    damage(s.blobs(), &state_key(5, 1), |b| {
        let last = b.len() - 1;
        b[last] ^= 1;
    })
    .await;
    damage(s.blobs(), &state_key(4, 0), |b| b.truncate(b.len() - 7)).await;
    damage(s.blobs(), &metadata_key(3), |b| b[HEADER_LEN + 2] ^= 0x20).await;
    s.blobs().delete(&state_key(2, 1)).await.unwrap();

    let err = s.load(CheckpointId(5), JOB).await.unwrap_err();
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
    assert_eq!(err.path(), Some(path(&state_key(5, 1)).as_path()));
    let err = s.load(CheckpointId(4), JOB).await.unwrap_err();
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
    let err = s.load(CheckpointId(2), JOB).await.unwrap_err();
    assert!(matches!(err, StorageError::Missing { .. }), "{err}");
    assert!(err.to_string().contains("is missing"), "{err}");

    let outcome = s.latest_valid(JOB).await.unwrap();
    assert_eq!(outcome.restored.map(|r| r.id()), Some(CheckpointId(1)));
    let skipped: Vec<(u64, Option<PathBuf>)> = outcome
        .skipped
        .iter()
        .map(|sk| (sk.id.0, sk.error.path().map(|p| p.to_path_buf())))
        .collect();
    assert_eq!(
        skipped,
        [
            (5, Some(path(&state_key(5, 1)))),
            (4, Some(path(&state_key(4, 0)))),
            (3, Some(path(&metadata_key(3)))),
            (2, Some(path(&state_key(2, 1)))),
        ]
    );
    // Damaged checkpoints stay for inspection.
    assert_eq!(s.completed().await.unwrap().len(), 5);

    // An intact file swapped for another intact one contradicts the metadata.
    let other = s.blobs().get(&state_key(1, 0)).await.unwrap();
    s.blobs().put(&state_key(1, 1), other).await.unwrap();
    let err = s.load(CheckpointId(1), JOB).await.unwrap_err();
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
    let outcome = s.latest_valid(JOB).await.unwrap();
    assert!(outcome.restored.is_none());
    assert_eq!(outcome.skipped.len(), 5);
}

async fn a_checkpoint_without_metadata_names_the_missing_metadata<B: BlobStore>(blobs: B) {
    let s = storage(blobs, 3);
    checkpoint(&s, 1).await;
    checkpoint(&s, 2).await;
    s.blobs().delete(&metadata_key(2)).await.unwrap();
    let expected = s.blobs().path_of(&metadata_key(2));
    for err in [
        s.load(CheckpointId(2), JOB).await.unwrap_err(),
        s.load_at("chk-2", JOB).await.unwrap_err(),
    ] {
        assert!(matches!(err, StorageError::Missing { .. }), "{err}");
        assert_eq!(err.path(), Some(expected.as_path()), "{err}");
        assert!(
            err.to_string()
                .contains(&format!("{} is missing", expected.display())),
            "{err}"
        );
    }
}

async fn refusals_name_what_is_wrong<B: BlobStore>(blobs: B) {
    let s = storage(blobs, 3);
    checkpoint(&s, 1).await;
    let err = s
        .write_state(CheckpointId(1), NodeId(0), 0, b"late".to_vec())
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::AlreadyComplete { .. }), "{err}");
    assert_eq!(err.path(), Some(s.blobs().path_of("chk-1").as_path()));

    // Another job's checkpoint is an error, not a reason to fall back.
    let err = s.latest_valid("another-job").await.unwrap_err();
    assert!(
        matches!(err, StorageError::FingerprintMismatch { .. }),
        "{err}"
    );
    assert_eq!(
        err.path(),
        Some(s.blobs().path_of(&metadata_key(1)).as_path())
    );

    // A listed file that was never written blocks completion, named.
    let written = s
        .write_state(CheckpointId(2), NodeId(0), 0, b"a".to_vec())
        .await
        .unwrap();
    let mut ghost = written.clone();
    ghost.subtask = 1;
    ghost.file_name = format::state_file_name(NodeId(0), 1);
    let err = s
        .complete(metadata(
            CheckpointId(2),
            vec![written.clone(), ghost],
            vec![],
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, StorageError::Missing { .. }), "{err}");
    assert_eq!(
        err.path(),
        Some(s.blobs().path_of(&state_key(2, 1)).as_path())
    );
    // Metadata that contradicts itself is refused before anything is checked.
    let mut twice = metadata(CheckpointId(2), vec![written.clone(), written], vec![]);
    twice.state_files[1].file_name = "other".into();
    let err = s.complete(twice).await.unwrap_err();
    assert!(matches!(err, StorageError::InvalidMetadata(_)), "{err}");
    assert_eq!(s.completed().await.unwrap(), [CheckpointId(1)]);

    s.discard(CheckpointId(2)).await.unwrap();
    s.discard(CheckpointId(9)).await.unwrap();
    assert!(s.blobs().list("chk-2").await.unwrap().is_empty());
    assert_eq!(s.completed().await.unwrap(), [CheckpointId(1)]);
}
