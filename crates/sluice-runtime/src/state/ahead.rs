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
//! One task per store, every [`EVERY`]: ask the store for the files nobody uploaded yet
//! ([`KeyedStore::files_to_upload_ahead`]), upload them a few at a time, report which arrived
//! ([`KeyedStore::uploaded_ahead`]), then delete from the shared area the files uploaded ahead
//! that compaction removed before any checkpoint took them ([`KeyedStore::take_orphans`]). The
//! task ends when the store is dropped. What a store uploaded ahead but no checkpoint took when
//! it was dropped (a failover, the job's end) stays until the storage's next `initialize`,
//! which removes every shared file no complete checkpoint lists.

use super::KeyedStore;
use crate::storage::CheckpointStorage;
use crate::storage::shared_uploads::write_shared_once;
use futures::StreamExt;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often a store's new files are looked for. A compaction installs its output at once;
/// what it wrote in the last round's interval before a checkpoint is uploaded by the
/// checkpoint itself, so the interval is short (listing the live files costs microseconds).
pub(crate) const EVERY: Duration = Duration::from_millis(25);

/// Uploads at once per store.
const CONCURRENT: usize = 2;

/// Starts uploading `store`'s new table files to `storage` ahead of its checkpoints, until the
/// store is dropped. Does nothing outside a tokio runtime.
pub(crate) fn spawn(store: &Arc<dyn KeyedStore>, storage: Arc<dyn CheckpointStorage>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(run(Arc::downgrade(store), storage));
}

async fn run(store: Weak<dyn KeyedStore>, storage: Arc<dyn CheckpointStorage>) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(s) = store.upgrade() else {
            return;
        };
        // A failed round is logged and tried again: the checkpoint uploads what is missing.
        if let Err(e) = round(s, &storage).await {
            tracing::warn!(error = %e, "uploading a keyed store's files ahead failed");
        }
    }
}

/// One round: upload what is new, then delete the orphans.
async fn round(
    store: Arc<dyn KeyedStore>,
    storage: &Arc<dyn CheckpointStorage>,
) -> Result<(), String> {
    let s = store.clone();
    let found = tokio::task::spawn_blocking(move || s.files_to_upload_ahead())
        .await
        .map_err(|e| format!("listing the files to upload panicked: {e}"))?
        .map_err(|e| e.to_string())?;
    if !found.is_empty() {
        let results: Vec<(String, bool)> = futures::stream::iter(found)
            .map(|u| async move {
                // A checkpoint that lists the file meanwhile joins this upload.
                let ok = match write_shared_once(storage, &u.key, &u.path).await {
                    Ok(_) => true,
                    Err(e) => {
                        tracing::debug!(file = %u.name, error = %e, "an upload ahead failed");
                        false
                    }
                };
                (u.name, ok)
            })
            .buffer_unordered(CONCURRENT)
            .collect()
            .await;
        let (done, failed): (Vec<_>, Vec<_>) = results.into_iter().partition(|(_, ok)| *ok);
        let done: Vec<String> = done.into_iter().map(|(n, _)| n).collect();
        let failed: Vec<String> = failed.into_iter().map(|(n, _)| n).collect();
        let s = store.clone();
        tokio::task::spawn_blocking(move || s.uploaded_ahead(&done, &failed))
            .await
            .map_err(|e| format!("recording uploads panicked: {e}"))?;
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
