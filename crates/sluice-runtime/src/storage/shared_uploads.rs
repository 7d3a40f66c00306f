//! One upload per shared file at a time: a keyed store's table file can be wanted by two
//! writers at once, the store's uploads ahead (`state/ahead.rs`) and the checkpoint that names
//! it (`checkpoint/persistence.rs`). A large compaction's output appears, its upload ahead
//! starts, and a checkpoint lists the file before that upload ends: the checkpoint joins the
//! upload in flight instead of writing the file a second time, so what the checkpoint writes
//! itself stays the change of its interval and not the compaction's size.
//!
//! The uploads in flight are kept by storage location and key, for the whole process (the
//! uploads ahead and the checkpoints of a job hold different handles to one storage). An entry
//! lives while its upload runs, and holds it weakly: an upload whose writers all went away
//! (a job cancelled mid-checkpoint) is dropped, not kept or finished by nobody. A writer that
//! joins an upload which then fails writes the file itself from its own copy.
//!
//! The keys of the last [`DONE_KEPT`] uploads that succeeded are kept too, for a checkpoint
//! that listed a file while its upload ahead was in flight and comes to write it after that
//! upload ended: it takes that result instead of writing the file a second time. Only such a
//! writer (`ahead`) looks there. While its checkpoint is in flight the file cannot be removed
//! (the store keeps a file a checkpoint in flight names from being given as an orphan), so the
//! record it finds is still true; one that fell out of the record only means a second write.

use super::CheckpointStorage;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared, WeakShared};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

/// An upload any number of writers await.
type Upload = Shared<BoxFuture<'static, Result<(), String>>>;

/// A shared file of one checkpoint storage: (storage location, key).
type Id = (String, String);

/// An upload as its entry in flight holds it: weakly, so that it ends when its writers go.
type WeakUpload = WeakShared<BoxFuture<'static, Result<(), String>>>;

/// How many succeeded uploads [`Registry::done`] keeps.
const DONE_KEPT: usize = 4096;

/// The uploads of the process, under one lock so that an upload leaves `in_flight` and enters
/// `done` at once.
#[derive(Default)]
struct Registry {
    /// The uploads in flight: a number telling one upload of a key from the next, and the
    /// upload, held by its writers.
    in_flight: HashMap<Id, (u64, WeakUpload)>,
    /// The last [`DONE_KEPT`] uploads that succeeded, oldest first, and the same as a set.
    done: VecDeque<Id>,
    done_set: HashSet<Id>,
}

impl Registry {
    /// Records that the upload of `id` succeeded, forgetting the oldest record past
    /// [`DONE_KEPT`].
    fn succeeded(&mut self, id: Id) {
        if self.done_set.insert(id.clone()) {
            self.done.push_back(id);
        }
        while self.done.len() > DONE_KEPT {
            if let Some(old) = self.done.pop_front() {
                self.done_set.remove(&old);
            }
        }
    }
}

/// The process's uploads of shared files.
static UPLOADS: LazyLock<Mutex<Registry>> = LazyLock::new(Default::default);

/// Numbers the uploads.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Who wrote a shared file that [`write_shared_once`] stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Writer {
    /// This call uploaded it.
    Mine,
    /// An upload already in flight did: this call waited for it (or, for a writer that knew
    /// of an upload ahead, found that it had succeeded).
    Joined,
}

/// Stores the local file `path` as shared file `key` of `storage`
/// ([`CheckpointStorage::write_shared`]), or waits for the upload of `key` already in flight.
/// When the awaited upload fails, this call uploads `path` itself. `ahead`: the caller knows
/// that an upload of `key` was in flight a moment ago (a store's upload ahead, still running
/// when its checkpoint listed the file); if it has succeeded since, this call writes nothing.
pub(crate) async fn write_shared_once(
    storage: &Arc<dyn CheckpointStorage>,
    key: &str,
    path: &Path,
    ahead: bool,
) -> Result<Writer, String> {
    let id = (storage.location(), key.to_string());
    let (writer, upload) = {
        let mut all = sluice_core::sync::lock(&UPLOADS);
        match all.in_flight.get(&id).and_then(|(_, weak)| weak.upgrade()) {
            Some(upload) => (Writer::Joined, upload),
            None if ahead && all.done_set.contains(&id) => return Ok(Writer::Joined),
            None => {
                // Uploads whose writers all went away leave no trace.
                all.in_flight
                    .retain(|_, (_, weak)| weak.upgrade().is_some());
                let number = NEXT.fetch_add(1, Ordering::Relaxed);
                let upload = start(storage.clone(), id.clone(), number, path);
                if let Some(weak) = upload.downgrade() {
                    all.in_flight.insert(id, (number, weak));
                }
                (Writer::Mine, upload)
            }
        }
    };
    match (upload.await, writer) {
        (Ok(()), w) => Ok(w),
        (Err(e), Writer::Mine) => Err(e),
        (Err(e), Writer::Joined) => {
            tracing::debug!(%key, error = %e, "a joined upload failed; uploading the file again");
            storage
                .write_shared(key, path)
                .await
                .map_err(|e| format!("uploading {}: {e}", path.display()))?;
            Ok(Writer::Mine)
        }
    }
}

/// The upload of `path` as `id`'s key; it leaves the uploads in flight when it ends, for the
/// uploads done if it succeeded.
fn start(storage: Arc<dyn CheckpointStorage>, id: Id, number: u64, path: &Path) -> Upload {
    let path = path.to_path_buf();
    async move {
        let result = storage
            .write_shared(&id.1, &path)
            .await
            .map_err(|e| format!("uploading {}: {e}", path.display()));
        let mut all = sluice_core::sync::lock(&UPLOADS);
        if all.in_flight.get(&id).is_some_and(|(n, _)| *n == number) {
            all.in_flight.remove(&id);
        }
        if result.is_ok() {
            all.succeeded(id);
        }
        result
    }
    .boxed()
    .shared()
}

/// Test blob stores for the writers of shared files (here and in `state/ahead.rs`).
#[cfg(test)]
pub(crate) mod testing {
    use crate::storage::{BlobStore, MemoryBlobStore, StorageError};
    use futures::future::BoxFuture;
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::{Notify, Semaphore};

    /// Blobs in memory whose puts wait for a permit and are counted; its own location, so
    /// that tests do not share uploads in flight.
    #[derive(Debug)]
    pub(crate) struct Gated {
        pub(crate) inner: MemoryBlobStore,
        pub(crate) location: String,
        /// A put waits for one of these.
        pub(crate) permits: Arc<Semaphore>,
        /// Puts started.
        pub(crate) puts: Arc<AtomicUsize>,
        /// Notified as each put starts.
        pub(crate) entered: Arc<Notify>,
        /// Whether the first put fails (once it has its permit).
        pub(crate) fail_first: bool,
    }

    impl BlobStore for Gated {
        fn location(&self) -> String {
            self.location.clone()
        }
        fn path_of(&self, key: &str) -> PathBuf {
            self.inner.path_of(key)
        }
        fn put<'a>(
            &'a self,
            key: &'a str,
            bytes: Vec<u8>,
        ) -> BoxFuture<'a, Result<(), StorageError>> {
            Box::pin(async move {
                let n = self.puts.fetch_add(1, Ordering::SeqCst);
                self.entered.notify_one();
                let _permit = self
                    .permits
                    .acquire()
                    .await
                    .map_err(|e| StorageError::Background(e.to_string()))?;
                if self.fail_first && n == 0 {
                    return Err(StorageError::Background("the first put fails".into()));
                }
                self.inner.put(key, bytes).await
            })
        }
        fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Vec<u8>, StorageError>> {
            self.inner.get(key)
        }
        fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>, StorageError>> {
            self.inner.list(prefix)
        }
        fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<(), StorageError>> {
            self.inner.delete(key)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::Gated;
    use super::*;
    use crate::checkpoint::persistence::Pending;
    use crate::storage::{BlobCheckpointStorage, MemoryBlobStore};
    use std::num::NonZeroUsize;
    use std::path::PathBuf;
    use std::sync::atomic::AtomicUsize;
    use tokio::sync::{Notify, Semaphore};

    struct Setup {
        storage: Arc<dyn CheckpointStorage>,
        permits: Arc<Semaphore>,
        puts: Arc<AtomicUsize>,
        entered: Arc<Notify>,
        file: PathBuf,
        dir: tempfile::TempDir,
    }

    fn setup(location: &str, fail_first: bool) -> Setup {
        let (permits, puts) = (Arc::new(Semaphore::new(0)), Arc::new(AtomicUsize::new(0)));
        let entered = Arc::new(Notify::new());
        let blobs = Gated {
            inner: MemoryBlobStore::new(),
            location: location.into(),
            permits: permits.clone(),
            puts: puts.clone(),
            entered: entered.clone(),
            fail_first,
        };
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("000042.sst");
        std::fs::write(&file, b"table").unwrap();
        Setup {
            storage: Arc::new(BlobCheckpointStorage::over(blobs, NonZeroUsize::MIN)),
            permits,
            puts,
            entered,
            file,
            dir,
        }
    }

    /// Starts an upload of `key` and drives it until its put waits for a permit.
    async fn started<'a>(
        s: &'a Setup,
        key: &'a str,
    ) -> std::pin::Pin<Box<impl Future<Output = Result<Writer, String>> + 'a>> {
        let mut upload = Box::pin(write_shared_once(&s.storage, key, &s.file, false));
        tokio::select! {
            _ = &mut upload => panic!("the upload ended without a permit"),
            _ = s.entered.notified() => {}
        }
        upload
    }

    /// One writer of `key` from `s.file` (`ahead`: it knew of an upload ahead of it).
    async fn write(s: &Setup, key: &str, ahead: bool) -> Result<Writer, String> {
        write_shared_once(&s.storage, key, &s.file, ahead).await
    }

    /// Two writers of one key, the second starting while the first's put waits; then every
    /// put may go. Their results, in order.
    async fn two_writers(s: &Setup) -> (Result<Writer, String>, Result<Writer, String>) {
        let first = started(s, "k-000042.sst").await;
        let mut second = Box::pin(write_shared_once(
            &s.storage,
            "k-000042.sst",
            &s.file,
            false,
        ));
        assert!(futures::poll!(&mut second).is_pending());
        s.permits.add_permits(10);
        tokio::join!(first, second)
    }

    #[tokio::test]
    async fn a_second_writer_joins_the_upload_in_flight() {
        let s = setup("gated://joins", false);
        let (first, second) = two_writers(&s).await;
        assert_eq!(first, Ok(Writer::Mine));
        assert_eq!(second, Ok(Writer::Joined));
        assert_eq!(
            s.puts.load(Ordering::SeqCst),
            1,
            "the file was written once"
        );
        // Once it ended, the next writer uploads again; another key's upload is not joined.
        assert_eq!(write(&s, "k-000042.sst", false).await, Ok(Writer::Mine));
        assert_eq!(write(&s, "k-000043.sst", false).await, Ok(Writer::Mine));
        assert_eq!(s.puts.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_writer_that_knew_of_an_upload_ahead_takes_its_result_once_it_ended() {
        let s = setup("gated://ended", false);
        s.permits.add_permits(10);
        // The upload ahead ends before the checkpoint that listed the file comes to write it.
        assert_eq!(write(&s, "k-000042.sst", false).await, Ok(Writer::Mine));
        assert_eq!(
            write(&s, "k-000042.sst", true).await,
            Ok(Writer::Joined),
            "the checkpoint takes the upload's result"
        );
        assert_eq!(s.puts.load(Ordering::SeqCst), 1, "written once");
        // A writer that knew of no upload ahead writes; so does one whose key never succeeded.
        assert_eq!(write(&s, "k-000042.sst", false).await, Ok(Writer::Mine));
        assert_eq!(write(&s, "k-000043.sst", true).await, Ok(Writer::Mine));
        assert_eq!(s.puts.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_failed_upload_ahead_leaves_the_file_to_the_checkpoint() {
        let s = setup("gated://ahead-fails", true);
        s.permits.add_permits(10);
        assert!(write(&s, "k-000042.sst", false).await.is_err());
        assert_eq!(
            write(&s, "k-000042.sst", true).await,
            Ok(Writer::Mine),
            "the checkpoint writes the file the upload ahead failed to"
        );
        let fetched = s.dir.path().join("fetched");
        s.storage
            .fetch_shared("k-000042.sst", &fetched)
            .await
            .unwrap();
        assert_eq!(std::fs::read(&fetched).unwrap(), b"table");
    }

    #[test]
    fn the_record_of_succeeded_uploads_is_bounded() {
        let mut uploads = Registry::default();
        let id = |n: usize| ("bounded://".to_string(), format!("k-{n}"));
        for n in 0..=DONE_KEPT {
            uploads.succeeded(id(n));
        }
        uploads.succeeded(id(DONE_KEPT));
        assert_eq!(uploads.done.len(), DONE_KEPT);
        assert_eq!(uploads.done_set.len(), DONE_KEPT);
        assert!(!uploads.done_set.contains(&id(0)), "the oldest went first");
        assert!(uploads.done_set.contains(&id(1)));
        assert!(uploads.done_set.contains(&id(DONE_KEPT)));
    }

    #[tokio::test]
    async fn a_writer_whose_joined_upload_fails_uploads_itself() {
        let s = setup("gated://fails", true);
        let (first, second) = two_writers(&s).await;
        assert!(first.is_err(), "the first upload failed");
        assert_eq!(second, Ok(Writer::Mine));
        assert_eq!(s.puts.load(Ordering::SeqCst), 2);
        let fetched = s.dir.path().join("fetched");
        s.storage
            .fetch_shared("k-000042.sst", &fetched)
            .await
            .unwrap();
        assert_eq!(std::fs::read(&fetched).unwrap(), b"table");
    }

    #[tokio::test]
    async fn a_checkpoint_counts_as_its_own_only_what_it_uploaded() {
        let s = setup("gated://counts", false);
        let ahead = started(&s, "k-000042.sst").await;
        let other = s.dir.path().join("000043.sst");
        std::fs::write(&other, b"another table").unwrap();
        let pending = |path: &PathBuf, length| Pending {
            path: path.clone(),
            length,
            ahead: false,
            restored: false,
        };
        let uploads = [
            ("k-000042.sst".to_string(), pending(&s.file, 5)),
            ("k-000043.sst".to_string(), pending(&other, 13)),
        ];
        let mut checkpoint = Box::pin(crate::checkpoint::persistence::upload_all(
            &s.storage,
            uploads.into_iter().collect(),
        ));
        assert!(futures::poll!(&mut checkpoint).is_pending());
        s.permits.add_permits(10);
        let (ahead, checkpoint) = tokio::join!(ahead, checkpoint);
        assert_eq!(ahead, Ok(Writer::Mine));
        assert_eq!(
            checkpoint,
            Ok(13),
            "the joined file is not the checkpoint's"
        );
        assert_eq!(s.puts.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_upload_whose_writers_went_away_is_not_joined() {
        let s = setup("gated://abandoned", false);
        let first = started(&s, "k-000042.sst").await;
        drop(first);
        s.permits.add_permits(10);
        assert_eq!(
            write(&s, "k-000042.sst", false).await,
            Ok(Writer::Mine),
            "the dropped upload is neither joined nor finished"
        );
        assert!(
            sluice_core::sync::lock(&UPLOADS)
                .in_flight
                .keys()
                .all(|(location, _)| location != "gated://abandoned"),
            "no entry is left behind"
        );
    }
}
