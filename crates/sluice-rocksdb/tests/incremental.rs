//! Incremental checkpoints of keyed state in RocksDB: a checkpoint uploads only the table
//! files checkpoint storage does not hold yet (most are uploaded ahead of it while the job
//! runs), later checkpoints refer to the files already there, and a shared file is deleted
//! once no retained checkpoint lists it.

use futures::future::BoxFuture;
use sluice_core::CheckpointId;
use sluice_rocksdb::RocksDbStateBackend;
use sluice_runtime::JobHandle;
use sluice_runtime::prelude::*;
use sluice_runtime::process::{Context, KeyedProcessFunction};
use sluice_runtime::storage::{
    CheckpointMetadata, CheckpointStorage, CoordinatorStateHandle, LocalCheckpointStorage,
    RestoreOutcome, RestoredCheckpoint, StateFileHandle, StorageError,
};
use std::collections::BTreeSet;
use std::num::NonZeroUsize;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// Local checkpoint storage that records every shared file written.
#[derive(Debug)]
struct Recording {
    inner: LocalCheckpointStorage,
    shared_writes: Mutex<Vec<String>>,
}

impl CheckpointStorage for Recording {
    fn location(&self) -> String {
        self.inner.location()
    }
    fn initialize(&self) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        self.inner.initialize()
    }
    fn write_state(
        &self,
        id: CheckpointId,
        node: sluice_core::NodeId,
        subtask: usize,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<StateFileHandle, StorageError>> {
        self.inner.write_state(id, node, subtask, payload)
    }
    fn write_coordinator_state(
        &self,
        id: CheckpointId,
        node: sluice_core::NodeId,
        payload: Vec<u8>,
    ) -> BoxFuture<'_, Result<CoordinatorStateHandle, StorageError>> {
        self.inner.write_coordinator_state(id, node, payload)
    }
    fn complete(
        &self,
        metadata: CheckpointMetadata,
    ) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        self.inner.complete(metadata)
    }
    fn discard(&self, id: CheckpointId) -> BoxFuture<'_, Result<(), StorageError>> {
        self.inner.discard(id)
    }
    fn completed(&self) -> BoxFuture<'_, Result<Vec<CheckpointId>, StorageError>> {
        self.inner.completed()
    }
    fn latest_valid<'a>(
        &'a self,
        job_fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<RestoreOutcome, StorageError>> {
        self.inner.latest_valid(job_fingerprint)
    }
    fn read_state<'a>(
        &'a self,
        id: CheckpointId,
        handle: &'a StateFileHandle,
    ) -> BoxFuture<'a, Result<Vec<u8>, StorageError>> {
        self.inner.read_state(id, handle)
    }
    fn load<'a>(
        &'a self,
        id: CheckpointId,
        job_fingerprint: &'a str,
    ) -> BoxFuture<'a, Result<RestoredCheckpoint, StorageError>> {
        self.inner.load(id, job_fingerprint)
    }
    fn write_shared<'a>(
        &'a self,
        key: &'a str,
        path: &'a Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        self.shared_writes.lock().unwrap().push(key.to_string());
        self.inner.write_shared(key, path)
    }
    fn delete_shared<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
        self.inner.delete_shared(key)
    }
    fn fetch_shared<'a>(
        &'a self,
        key: &'a str,
        path: &'a Path,
    ) -> BoxFuture<'a, Result<(), StorageError>> {
        self.inner.fetch_shared(key, path)
    }
    fn shared_present<'a>(
        &'a self,
        keys: &'a [String],
    ) -> BoxFuture<'a, Result<BTreeSet<String>, StorageError>> {
        self.inner.shared_present(keys)
    }
}

/// Keeps a 200-byte value per key, rewritten by every record of the key; counts the records
/// and signals when the count reaches `mark`; fails once when `fail` is set.
#[derive(Clone)]
struct Keep {
    seen: Arc<AtomicU64>,
    mark: Arc<AtomicU64>,
    reached: Arc<Notify>,
    fail: Arc<AtomicBool>,
}

impl Keep {
    fn new() -> Self {
        Keep {
            seen: Arc::new(AtomicU64::new(0)),
            mark: Arc::new(AtomicU64::new(u64::MAX)),
            reached: Arc::new(Notify::new()),
            fail: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Waits until `n` more records than now went through.
    async fn more(&self, n: u64) {
        let seen = self.seen.load(Ordering::SeqCst);
        self.mark.store(seen + n, Ordering::SeqCst);
        self.reached.notified().await;
    }
}

impl KeyedProcessFunction<u64, u64> for Keep {
    type Out = ();
    type State = Vec<u8>;
    fn process_element(
        &mut self,
        i: u64,
        ctx: &mut Context<'_, u64, Vec<u8>, ()>,
    ) -> Result<(), UserError> {
        if self.fail.swap(false, Ordering::SeqCst) {
            return Err("failing once, for a failover".into());
        }
        *ctx.state() = vec![(i % 251) as u8; 200];
        let n = self.seen.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.mark.load(Ordering::SeqCst) {
            self.reached.notify_one();
        }
        Ok(())
    }
}

/// Starts the tests' job, parallelism 1, its keyed state incremental in RocksDB below `state`
/// and checkpointed into a recording storage below `dir`, only when asked (so that each
/// checkpoint follows a known amount of new data): 40,000 keys written once in the first
/// stretch, then a few hot keys again and again. With `restart`, it restarts once after a
/// failure.
fn start(dir: &Path, state: &Path, restart: bool) -> (Arc<Recording>, Keep, JobHandle) {
    let storage = Arc::new(Recording {
        inner: LocalCheckpointStorage::new(dir.join("chk"), NonZeroUsize::new(2).unwrap()),
        shared_writes: Mutex::new(Vec::new()),
    });
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    env.enable_checkpointing(Duration::from_secs(3600));
    env.set_checkpoint_storage_backend(storage.clone());
    if restart {
        env.set_restart_strategy(
            sluice_runtime::failover::RestartStrategy::fixed_delay(1, Duration::ZERO).unwrap(),
        );
    }
    env.set_state_backend(
        RocksDbStateBackend::new(state)
            .memory_budget(8 << 20)
            .incremental(true),
    );
    let keep = Keep::new();
    env.from_generator(
        Generator::new(|i: u64| if i < 40_000 { i } else { i % 100 }).rate_limit(200_000.0),
    )
    .key_by(|k: &u64| *k)
    .process_keyed(keep.clone())
    .discard();
    let job = env.submit("incremental").unwrap();
    (storage, keep, job)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_upload_each_table_file_once_and_retention_removes_what_none_needs() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let (storage, keep, job) = start(dir.path(), state.path(), false);

    let mut referenced: Vec<BTreeSet<String>> = Vec::new();
    let mut written_before = 0;
    let mut uploads_per_checkpoint = Vec::new();
    for _ in 0..6 {
        // 20,000 more records before each checkpoint.
        keep.more(20_000).await;
        let pending = job.trigger_checkpoint().await.unwrap();
        let id = pending.id();
        assert_eq!(pending.completed().await, Ok(id));
        referenced.push(metadata(&storage, id).shared_files.into_iter().collect());
        let written = storage.shared_writes.lock().unwrap().len();
        uploads_per_checkpoint.push(written - written_before);
        written_before = written;
    }
    job.cancel();
    let _ = job.await;

    let sizes: Vec<usize> = referenced.iter().map(BTreeSet::len).collect();
    println!(
        "table files uploaded per checkpoint {uploads_per_checkpoint:?}, referenced {sizes:?}"
    );
    let writes = storage.shared_writes.lock().unwrap().clone();
    let unique: BTreeSet<&String> = writes.iter().collect();
    // A file is uploaded twice only when its upload ahead was still in flight as a checkpoint
    // took it (the checkpoint uploads it too): at most twice.
    for f in &unique {
        let n = writes.iter().filter(|w| w == f).count();
        assert!(n <= 2, "{f} uploaded {n} times: {writes:?}");
    }
    let references: usize = referenced.iter().map(BTreeSet::len).sum();
    assert!(
        references > unique.len(),
        "later checkpoints refer to files uploaded before: {references} references, {} files \
         uploaded ({uploads_per_checkpoint:?})",
        unique.len()
    );
    // Only the last two checkpoints are retained: the shared area holds their files, and
    // besides them only files uploaded ahead of a checkpoint that never came (the job was
    // cancelled; the storage's next initialize removes them), never one a retired checkpoint
    // listed.
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir.path().join("chk/shared"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let needed: BTreeSet<String> = referenced[referenced.len() - 2..]
        .iter()
        .flatten()
        .cloned()
        .collect();
    let retired: BTreeSet<String> = referenced[..referenced.len() - 2]
        .iter()
        .flatten()
        .filter(|f| !needed.contains(*f))
        .cloned()
        .collect();
    assert!(
        needed.is_subset(&on_disk),
        "retained checkpoints lack files: {:?}",
        needed.difference(&on_disk).collect::<Vec<_>>()
    );
    let extra: BTreeSet<&String> = on_disk.difference(&needed).collect();
    assert!(
        extra.iter().all(|f| !retired.contains(*f)),
        "files only retired checkpoints listed are still there: {extra:?}"
    );
    // Those extras go when the storage is initialized for the next run.
    assert!(storage.inner.initialize().await.unwrap().is_empty());
    let after: BTreeSet<String> = std::fs::read_dir(dir.path().join("chk/shared"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(after, needed, "shared files no retained checkpoint lists");
}

/// After a failover, the store restored from the checkpoint in memory refers to that
/// checkpoint's table files where checkpoint storage holds them: the first checkpoint after it
/// lists them under their keys and writes none of them again (before, it uploaded the whole
/// state under new keys).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_failover_checkpoints_refer_to_the_table_files_storage_holds() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let (storage, keep, job) = start(dir.path(), state.path(), true);

    keep.more(50_000).await;
    let pending = job.trigger_checkpoint().await.unwrap();
    let before = pending.id();
    assert_eq!(pending.completed().await, Ok(before));
    let referenced: BTreeSet<String> = metadata(&storage, before)
        .shared_files
        .into_iter()
        .collect();
    let written_before = storage.shared_writes.lock().unwrap().len();

    // The next record fails; the job restarts from the checkpoint in memory.
    keep.fail.store(true, Ordering::SeqCst);
    keep.more(20_000).await;
    assert!(!keep.fail.load(Ordering::SeqCst), "the failure happened");
    let pending = job.trigger_checkpoint().await.unwrap();
    let after = pending.id();
    assert_eq!(pending.completed().await, Ok(after));
    job.cancel();
    let _ = job.await;

    let listed: BTreeSet<String> = metadata(&storage, after).shared_files.into_iter().collect();
    let kept: BTreeSet<&String> = listed.intersection(&referenced).collect();
    assert!(
        !kept.is_empty(),
        "the checkpoint after the failover refers to none of the {} files of checkpoint \
         {before}: {listed:?}",
        referenced.len()
    );
    let writes = storage.shared_writes.lock().unwrap()[written_before..].to_vec();
    let again: Vec<&String> = writes.iter().filter(|w| referenced.contains(*w)).collect();
    assert!(
        again.is_empty(),
        "written again after the failover: {again:?}"
    );
    println!(
        "after the failover: {} of {} files kept, {} files written",
        kept.len(),
        listed.len(),
        writes.len()
    );
}

/// The metadata of checkpoint `id`, read from its file (after the 20-byte frame header).
fn metadata(storage: &Recording, id: CheckpointId) -> CheckpointMetadata {
    let path = Path::new(&storage.location()).join(format!("chk-{}/_metadata", id.0));
    let bytes = std::fs::read(path).unwrap();
    sluice_core::codec::decode(&bytes[20..]).unwrap()
}
