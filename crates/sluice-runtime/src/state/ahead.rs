//! Uploads ahead: an incremental keyed store's new table files go to checkpoint storage while
//! the job runs, as RocksDB writes them (memtable flushes, compactions), instead of all at the
//! checkpoint that first refers to them. A checkpoint then uploads only what appeared since the
//! last round (mostly the memtable it flushes itself), so its duration follows the change since
//! the previous checkpoint and not the size of the compactions that happened to land in its
//! interval; Flink 2.0's disaggregated state goes further and writes every file to the remote
//! store directly.
//!
//! A checkpoint that lists a file whose upload ahead is still running joins that upload
//! instead of writing the file again (`storage/shared_uploads.rs`): a large compaction that
//! ends just before a checkpoint costs the checkpoint the wait, not the upload; and a file a
//! checkpoint in flight names is left to that checkpoint.
//!
//! One task per store, on a thread of the process's own (`runtime`, so that nothing busy on
//! the job's workers delays it), every [`EVERY`]: ask the store for the files nobody uploaded yet
//! ([`KeyedStore::files_to_upload_ahead`]) and start their uploads, then delete from the shared
//! area the files uploaded ahead that compaction removed before any checkpoint took them
//! ([`KeyedStore::take_orphans`]). Each upload is reported as it ends
//! ([`KeyedStore::uploaded_ahead`]); the next look does not wait for the uploads in flight, so
//! a file that appears while a large merge's output is still uploading starts within one
//! interval, not after it. The uploads in flight are bounded by the store's new files (those
//! still in flight are not offered again). The task ends when the store is dropped. What a
//! store uploaded ahead but no checkpoint took when it was dropped (a failover, the job's end)
//! stays until the storage's next `initialize`, which removes every shared file no complete
//! checkpoint lists.

use super::KeyedStore;
use crate::storage::CheckpointStorage;
use crate::storage::shared_uploads::write_shared_once;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::task::JoinSet;

/// How often a store's new files are looked for. A compaction installs its output at once;
/// what it wrote in the last round's interval before a checkpoint is uploaded by the
/// checkpoint itself, so the interval is short (listing the live files costs microseconds).
pub(crate) const EVERY: Duration = Duration::from_millis(25);

/// Starts uploading `store`'s new table files to `storage` ahead of its checkpoints, until the
/// store is dropped, on the process's uploads-ahead thread ([`runtime`]). Does nothing outside
/// a tokio runtime (a store opened outside a job).
pub(crate) fn spawn(store: &Arc<dyn KeyedStore>, storage: Arc<dyn CheckpointStorage>) {
    let Ok(current) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime()
        .unwrap_or(current)
        .spawn(run(Arc::downgrade(store), storage));
}

/// The runtime of the uploads ahead: one thread for the process, started on first use. The
/// looks run there and not on the job's workers, where they queued behind the tasks: with four
/// keyed subtasks on two workers, before those ran their store calls off the workers
/// (`task/runner.rs`), a look ran a median 132 ms and up to 442 ms after its tick, so merges'
/// outputs waited for their uploads ahead and checkpoints listed them first (BENCHMARKS.md,
/// "Uploads ahead that do not wait for each other"). A thread of their own keeps them on time
/// whatever else the workers run (a source or a sink of the user's that blocks). `None` if the
/// thread cannot start; the uploads ahead then run on the job's runtime.
fn runtime() -> Option<tokio::runtime::Handle> {
    static AHEAD: std::sync::OnceLock<Option<tokio::runtime::Handle>> = std::sync::OnceLock::new();
    AHEAD
        .get_or_init(|| {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name("sluice-uploads-ahead")
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the uploads-ahead runtime; they run on the job's");
                    return None;
                }
            };
            let handle = rt.handle().clone();
            let started = std::thread::Builder::new()
                .name("sluice-uploads-ahead".into())
                .spawn(move || rt.block_on(std::future::pending::<()>()));
            match started {
                Ok(_) => Some(handle),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the uploads-ahead thread; they run on the job's runtime");
                    None
                }
            }
        })
        .clone()
}

/// The uploads ahead in flight, each a task of its own (so that it goes on while the store's
/// task lists files or records another): each ends with its file's name and whether it arrived.
type Uploads = JoinSet<(String, bool)>;

async fn run(store: Weak<dyn KeyedStore>, storage: Arc<dyn CheckpointStorage>) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut uploads = Uploads::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let Some(s) = store.upgrade() else {
                    return;
                };
                // A failed look is logged and tried again: the checkpoint uploads what is
                // missing.
                if let Err(e) = look(s, &storage, &mut uploads).await {
                    tracing::warn!(error = %e, "uploading a keyed store's files ahead failed");
                }
            }
            Some(ended) = uploads.join_next(), if !uploads.is_empty() => {
                let Some(s) = store.upgrade() else {
                    return;
                };
                let (name, ok) = match ended {
                    Ok(ended) => ended,
                    Err(e) => {
                        tracing::warn!(error = %e, "an upload ahead panicked");
                        continue;
                    }
                };
                let (done, failed) = if ok { (vec![name], vec![]) } else { (vec![], vec![name]) };
                if let Err(e) = tokio::task::spawn_blocking(move || s.uploaded_ahead(&done, &failed)).await {
                    tracing::warn!(error = %e, "recording an upload ahead panicked");
                }
            }
        }
    }
}

/// One look: start the uploads of what is new, then delete the orphans.
async fn look(
    store: Arc<dyn KeyedStore>,
    storage: &Arc<dyn CheckpointStorage>,
    uploads: &mut Uploads,
) -> Result<(), String> {
    let s = store.clone();
    let found = tokio::task::spawn_blocking(move || s.files_to_upload_ahead())
        .await
        .map_err(|e| format!("listing the files to upload panicked: {e}"))?
        .map_err(|e| e.to_string())?;
    for u in found {
        let storage = storage.clone();
        uploads.spawn(async move {
            // A checkpoint that lists the file meanwhile joins this upload.
            let ok = match write_shared_once(&storage, &u.key, &u.path, false).await {
                Ok(_) => true,
                Err(e) => {
                    tracing::debug!(file = %u.name, error = %e, "an upload ahead failed");
                    false
                }
            };
            (u.name, ok)
        });
    }
    let orphans = tokio::task::spawn_blocking(move || store.take_orphans())
        .await
        .map_err(|e| format!("finding orphans panicked: {e}"))?
        .map_err(|e| e.to_string())?;
    for key in orphans {
        if let Err(e) = storage.delete_shared(&key).await {
            tracing::warn!(%key, error = %e, "cannot remove a file uploaded ahead that no checkpoint took");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{StoreError, StoreWrite, UploadAhead};
    use crate::storage::shared_uploads::testing::Gated;
    use crate::storage::{BlobCheckpointStorage, MemoryBlobStore};
    use sluice_core::sync::lock;
    use std::num::NonZeroUsize;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;
    use tokio::sync::{Notify, Semaphore};

    /// A store whose new files the test hands it, and which records the uploads reported.
    #[derive(Debug, Default)]
    struct Files {
        new: Mutex<Vec<UploadAhead>>,
        recorded: Mutex<Vec<String>>,
        recording: Notify,
    }

    impl KeyedStore for Files {
        fn get(&self, _: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
            Ok(None)
        }
        fn write(&self, _: Vec<StoreWrite>) -> Result<(), StoreError> {
            Ok(())
        }
        fn scan(
            &self,
            _: &[u8],
            _: &[u8],
            _: &mut dyn FnMut(&[u8], &[u8]) -> bool,
        ) -> Result<(), StoreError> {
            Ok(())
        }
        fn files_to_upload_ahead(&self) -> Result<Vec<UploadAhead>, StoreError> {
            Ok(std::mem::take(&mut *lock(&self.new)))
        }
        fn uploaded_ahead(&self, done: &[String], _failed: &[String]) {
            lock(&self.recorded).extend(done.iter().cloned());
            self.recording.notify_one();
        }
    }

    /// A file that appears while another's upload is in flight starts within a few looks,
    /// not once that upload ends (before, a look waited for every upload it had started).
    #[tokio::test(start_paused = true)]
    async fn a_new_file_does_not_wait_behind_an_upload_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, name).unwrap();
            UploadAhead {
                name: name.into(),
                key: format!("s1-{name}"),
                path,
            }
        };
        let (permits, entered) = (Arc::new(Semaphore::new(0)), Arc::new(Notify::new()));
        let blobs = Gated {
            inner: MemoryBlobStore::new(),
            location: "ahead-tests".into(),
            permits: permits.clone(),
            puts: Arc::new(AtomicUsize::new(0)),
            entered: entered.clone(),
            fail_first: false,
        };
        let storage: Arc<dyn CheckpointStorage> =
            Arc::new(BlobCheckpointStorage::over(blobs, NonZeroUsize::MIN));
        let files = Arc::new(Files::default());
        lock(&files.new).push(file("000010.sst"));
        let store: Arc<dyn KeyedStore> = files.clone();
        // On the test's runtime, for its paused clock.
        tokio::spawn(run(Arc::downgrade(&store), storage.clone()));

        // The first file's upload waits for its permit, as a large merge's output takes long.
        entered.notified().await;
        lock(&files.new).push(file("000011.sst"));
        tokio::time::timeout(EVERY * 4, entered.notified())
            .await
            .expect("the new file's upload started while the first was in flight");

        permits.add_permits(2);
        while lock(&files.recorded).len() < 2 {
            files.recording.notified().await;
        }
        let mut recorded = lock(&files.recorded).clone();
        recorded.sort();
        assert_eq!(recorded, ["000010.sst", "000011.sst"]);
    }
}
