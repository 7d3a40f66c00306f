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

use super::CheckpointStorage;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared, WeakShared};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

/// An upload any number of writers await.
type Upload = Shared<BoxFuture<'static, Result<(), String>>>;

/// The uploads in flight, by (storage location, key): a number telling one upload of a key
/// from the next, and the upload, held by its writers.
type InFlight =
    HashMap<(String, String), (u64, WeakShared<BoxFuture<'static, Result<(), String>>>)>;

static IN_FLIGHT: LazyLock<Mutex<InFlight>> = LazyLock::new(Default::default);

/// Numbers the uploads.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// Who wrote a shared file that [`write_shared_once`] stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Writer {
    /// This call uploaded it.
    Mine,
    /// An upload already in flight did: this call waited for it.
    Joined,
}

/// Stores the local file `path` as shared file `key` of `storage`
/// ([`CheckpointStorage::write_shared`]), or waits for the upload of `key` already in flight.
/// When the awaited upload fails, this call uploads `path` itself.
pub(crate) async fn write_shared_once(
    storage: &Arc<dyn CheckpointStorage>,
    key: &str,
    path: &Path,
) -> Result<Writer, String> {
    let id = (storage.location(), key.to_string());
    let (writer, upload) = {
        let mut all = sluice_core::sync::lock(&IN_FLIGHT);
        match all.get(&id).and_then(|(_, weak)| weak.upgrade()) {
            Some(upload) => (Writer::Joined, upload),
            None => {
                // Uploads whose writers all went away leave no trace.
                all.retain(|_, (_, weak)| weak.upgrade().is_some());
                let number = NEXT.fetch_add(1, Ordering::Relaxed);
                let upload = start(storage.clone(), id.clone(), number, path);
                if let Some(weak) = upload.downgrade() {
                    all.insert(id, (number, weak));
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

/// The upload of `path` as `id`'s key; it leaves the uploads in flight when it ends.
fn start(
    storage: Arc<dyn CheckpointStorage>,
    id: (String, String),
    number: u64,
    path: &Path,
) -> Upload {
    let path = path.to_path_buf();
    async move {
        let result = storage
            .write_shared(&id.1, &path)
            .await
            .map_err(|e| format!("uploading {}: {e}", path.display()));
        let mut all = sluice_core::sync::lock(&IN_FLIGHT);
        if all.get(&id).is_some_and(|(n, _)| *n == number) {
            all.remove(&id);
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
        let mut upload = Box::pin(write_shared_once(&s.storage, key, &s.file));
        tokio::select! {
            _ = &mut upload => panic!("the upload ended without a permit"),
            _ = s.entered.notified() => {}
        }
        upload
    }

    /// Two writers of one key, the second starting while the first's put waits; then every
    /// put may go. Their results, in order.
    async fn two_writers(s: &Setup) -> (Result<Writer, String>, Result<Writer, String>) {
        let first = started(s, "k-000042.sst").await;
        let mut second = Box::pin(write_shared_once(&s.storage, "k-000042.sst", &s.file));
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
        assert_eq!(
            write_shared_once(&s.storage, "k-000042.sst", &s.file).await,
            Ok(Writer::Mine)
        );
        assert_eq!(
            write_shared_once(&s.storage, "k-000043.sst", &s.file).await,
            Ok(Writer::Mine)
        );
        assert_eq!(s.puts.load(Ordering::SeqCst), 3);
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
        let uploads = [
            ("k-000042.sst".to_string(), (s.file.clone(), 5)),
            ("k-000043.sst".to_string(), (other, 13)),
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
            write_shared_once(&s.storage, "k-000042.sst", &s.file).await,
            Ok(Writer::Mine),
            "the dropped upload is neither joined nor finished"
        );
        assert!(
            sluice_core::sync::lock(&IN_FLIGHT)
                .keys()
                .all(|(location, _)| location != "gated://abandoned"),
            "no entry is left behind"
        );
    }
}
