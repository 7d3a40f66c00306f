//! Checkpoints and durable storage: the seam the job master writes completed checkpoints
//! through, and loading a checkpoint to restore from.

use super::{CheckpointSettings, CompletedCheckpoint};
use crate::error::JobError;
use crate::state::OperatorState;
use crate::storage::{
    CheckpointMetadata, CheckpointStorage, LocalCheckpointStorage, OperatorInfo, RestorePathKind,
    RestoredCheckpoint, StateFileHandle, restore_path_kind,
};
use futures::future::BoxFuture;
use sluice_core::{CheckpointId, NodeId, codec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where completed checkpoints are written; the master awaits it off the task loops.
pub(crate) trait Persistence: Send + Sync + 'static {
    /// Writes `checkpoint` durably (state files first, metadata last); returns the bytes
    /// written (state files, coordinator states and the keyed stores' table files it uploaded).
    fn persist(&self, checkpoint: CompletedCheckpoint) -> BoxFuture<'_, Result<u64, String>>;
    /// Removes what was written of an aborted checkpoint.
    fn discard(&self, id: CheckpointId) -> BoxFuture<'_, ()>;
    /// Takes charge of the local copies of keyed store files that the restore of checkpoint
    /// `id` gathered: they go as those of a retired checkpoint do, or when the job ends.
    fn adopt(&self, id: CheckpointId, dirs: Vec<PathBuf>) {
        let _ = (id, dirs);
    }
}

/// State files that task managers wrote to the storage themselves (cluster mode), by
/// checkpoint: persisting lists them in the metadata instead of writing them again.
#[derive(Debug, Default)]
pub(crate) struct WrittenStates(std::sync::Mutex<BTreeMap<CheckpointId, Written>>);

/// What task managers wrote for one checkpoint.
#[derive(Debug, Default)]
struct Written {
    /// The state files, by operator subtask.
    handles: BTreeMap<(NodeId, usize), StateFileHandle>,
    /// The bytes of keyed store table files they uploaded for it.
    uploaded_bytes: u64,
}

impl WrittenStates {
    /// Task managers wrote `handles` for checkpoint `id`, and uploaded `uploaded_bytes` of
    /// table files for it.
    pub(crate) fn add(&self, id: CheckpointId, handles: Vec<StateFileHandle>, uploaded_bytes: u64) {
        let mut all = sluice_core::sync::lock(&self.0);
        let entry = all.entry(id).or_default();
        entry.uploaded_bytes += uploaded_bytes;
        for h in handles {
            entry.handles.insert((h.node, h.subtask), h);
        }
    }

    /// Takes what was written for `id`, forgetting older checkpoints (completed or aborted).
    fn take(&self, id: CheckpointId) -> Written {
        let mut all = sluice_core::sync::lock(&self.0);
        let taken = all.remove(&id).unwrap_or_default();
        all.retain(|other, _| *other > id);
        taken
    }

    fn forget(&self, id: CheckpointId) {
        sluice_core::sync::lock(&self.0).remove(&id);
    }
}

/// Writes checkpoints to a [`CheckpointStorage`].
pub(crate) struct StoragePersistence {
    pub(crate) storage: Arc<dyn CheckpointStorage>,
    pub(crate) fingerprint: String,
    pub(crate) max_parallelism: usize,
    /// In cluster mode: the state files task managers wrote already.
    pub(crate) written: Option<Arc<WrittenStates>>,
    /// The local copies of keyed store files (the stores' own checkpoints) of the checkpoints
    /// still retained, by checkpoint: a failover restores from them, so they go when their
    /// checkpoint is retired.
    pub(crate) staged: std::sync::Mutex<BTreeMap<CheckpointId, Vec<PathBuf>>>,
}

impl Drop for StoragePersistence {
    /// The job ended: no restore needs the local copies of store files any more. (Removing hard
    /// links and small files is quick enough not to move off the thread.)
    fn drop(&mut self) {
        let staged = std::mem::take(&mut *sluice_core::sync::lock(&self.staged));
        for d in staged.into_values().flatten() {
            let _ = std::fs::remove_dir_all(&d);
        }
    }
}

impl StoragePersistence {
    /// Whether a task manager wrote the state of `(node, subtask)` (and its store files).
    /// Keeps `staged` for checkpoint `id` and removes those of the checkpoints older than the
    /// newest one retention removed.
    async fn release_staged(
        &self,
        id: CheckpointId,
        staged: Vec<PathBuf>,
        removed: &[CheckpointId],
    ) {
        let doomed: Vec<PathBuf> = {
            let mut all = sluice_core::sync::lock(&self.staged);
            all.insert(id, staged);
            let Some(&newest_removed) = removed.iter().max() else {
                return;
            };
            // The newest retired checkpoint stays: the job master may restore from it until it
            // learns that this one completed.
            let keep = all.split_off(&newest_removed);
            std::mem::replace(&mut *all, keep)
                .into_values()
                .flatten()
                .collect()
        };
        remove_dirs(doomed).await;
    }
}

/// A table file to upload.
#[derive(Clone, Debug)]
pub(crate) struct Pending {
    /// Where it is.
    pub(crate) path: PathBuf,
    /// Its length in bytes.
    pub(crate) length: u64,
    /// Whether the store's upload ahead of it was in flight when the checkpoint listed it
    /// ([`SharedFile::ahead`](crate::state::SharedFile::ahead)).
    pub(crate) ahead: bool,
    /// Whether storage most likely holds it already, from before a failover
    /// ([`SharedFile::restored`](crate::state::SharedFile::restored)): written only if not.
    pub(crate) restored: bool,
}

/// Table files to upload, by key.
pub(crate) type Uploads = BTreeMap<String, Pending>;

/// The table files of `state`'s stores that checkpoint storage does not hold yet.
fn pending_uploads(state: &OperatorState) -> Result<Uploads, String> {
    let mut out = Uploads::new();
    for h in state.store_handles() {
        for f in h.shared.iter().filter(|f| !f.uploaded) {
            let Some(dir) = &h.local else {
                return Err(format!(
                    "the {} file {} of key groups {:?} has no local copy to upload",
                    h.backend, f.name, h.key_groups
                ));
            };
            let pending = Pending {
                path: dir.join(&f.name),
                length: f.length,
                ahead: f.ahead,
                restored: f.restored,
            };
            out.insert(f.key.clone(), pending);
        }
    }
    Ok(out)
}

/// Uploads every file of `uploads` to `storage`'s shared files, a few at a time, joining the
/// uploads of the same keys already in flight (a store's uploads ahead, see
/// `storage/shared_uploads.rs`), or taking their result when they ended since the checkpoint
/// listed them. Files restored after a failover that storage still holds are not written
/// again. Returns the bytes it uploaded itself.
pub(crate) async fn upload_all(
    storage: &Arc<dyn CheckpointStorage>,
    mut uploads: Uploads,
) -> Result<u64, String> {
    use crate::storage::shared_uploads::{Writer, write_shared_once};
    use futures::{StreamExt, TryStreamExt};
    let restored: Vec<String> = uploads
        .iter()
        .filter(|(_, p)| p.restored)
        .map(|(k, _)| k.clone())
        .collect();
    if !restored.is_empty() {
        // One listing for all of them; if it fails, they are written again.
        match storage.shared_present(&restored).await {
            Ok(present) => uploads.retain(|k, _| !present.contains(k)),
            Err(e) => {
                tracing::warn!(error = %e, files = restored.len(), "cannot tell which restored table files checkpoint storage holds; writing them again");
            }
        }
    }
    let written: Vec<u64> = futures::stream::iter(uploads)
        .map(|(key, p)| async move {
            match write_shared_once(storage, &key, &p.path, p.ahead).await? {
                Writer::Mine => Ok::<_, String>(p.length),
                Writer::Joined => Ok(0),
            }
        })
        .buffer_unordered(4)
        .try_collect()
        .await?;
    Ok(written.iter().sum())
}

/// Uploads the store files `state` names that checkpoint storage does not hold yet (a task
/// manager writing its own states).
/// Returns the bytes it uploaded itself.
pub(crate) async fn upload_store_files(
    storage: &Arc<dyn CheckpointStorage>,
    state: &OperatorState,
) -> Result<u64, String> {
    upload_all(storage, pending_uploads(state)?).await
}

/// Removes local directories off the tokio workers; failures are logged.
async fn remove_dirs(dirs: Vec<PathBuf>) {
    if dirs.is_empty() {
        return;
    }
    let _ = tokio::task::spawn_blocking(move || {
        for d in dirs {
            if let Err(e) = std::fs::remove_dir_all(&d)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(dir = %d.display(), error = %e, "cannot remove a keyed store's checkpoint");
            }
        }
    })
    .await;
}

impl Persistence for StoragePersistence {
    fn persist(&self, cp: CompletedCheckpoint) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async move {
            let id = cp.id;
            let Written {
                handles: mut written,
                uploaded_bytes: uploaded_by_task_managers,
            } = self
                .written
                .as_ref()
                .map(|w| w.take(id))
                .unwrap_or_default();
            // The subtasks whose task manager wrote their state (and uploaded their store
            // files) itself; `written` loses its entries as the writes below take them.
            let wrote_itself: std::collections::BTreeSet<(NodeId, usize)> =
                written.keys().copied().collect();
            let mut operators = Vec::new();
            // One write per operator subtask (and per coordinator), all in flight at once: each
            // encodes its state on the blocking pool (large states would stall a tokio worker)
            // and the storage writes and syncs its file there too.
            let mut writes = Vec::new();
            for (&node, states) in cp.operators.iter() {
                operators.push(OperatorInfo {
                    node,
                    parallelism: states.len(),
                    max_parallelism: self.max_parallelism,
                });
                for (subtask, state) in states.iter().enumerate() {
                    if let Some(handle) = written.remove(&(node, subtask)) {
                        // A task manager wrote this one to the storage itself.
                        writes.push(Box::pin(async move { Ok(handle) })
                            as BoxFuture<'static, Result<StateFileHandle, String>>);
                        continue;
                    }
                    if state.deferred().is_some() {
                        // Its entries are in storage, not here: writing it would lose them.
                        return Err(format!(
                            "the state of operator {node} subtask {subtask} is a handle whose \
                             file the task manager did not report as written"
                        ));
                    }
                    let storage = self.storage.clone();
                    let all = cp.operators.clone();
                    writes.push(Box::pin(async move {
                        let encode = move || match all.get(&node).and_then(|v| v.get(subtask)) {
                            Some(state) => codec::encode(state),
                            None => codec::encode(&OperatorState::default()),
                        };
                        let bytes = tokio::task::spawn_blocking(encode)
                            .await
                            .map_err(|e| format!("encoding a state panicked: {e}"))?
                            .map_err(|e| e.to_string())?;
                        storage
                            .write_state(id, node, subtask, bytes)
                            .await
                            .map_err(|e| e.to_string())
                    })
                        as BoxFuture<'static, Result<StateFileHandle, String>>);
                }
            }
            let coordinator_writes = cp.coordinators.iter().map(|(&node, state)| {
                let (storage, state) = (self.storage.clone(), state.clone());
                async move {
                    storage
                        .write_coordinator_state(id, node, state)
                        .await
                        .map_err(|e| e.to_string())
                }
            });
            // The table files of incremental keyed stores go first, each once: the state files
            // written below name them, and the metadata lists them.
            let mut shared_files = std::collections::BTreeSet::new();
            let mut uploads = BTreeMap::new();
            let mut uploaded_bytes = uploaded_by_task_managers;
            let mut staged = Vec::new();
            for (&node, states) in cp.operators.iter() {
                for (subtask, state) in states.iter().enumerate() {
                    for h in state.store_handles() {
                        shared_files.extend(h.shared.iter().map(|f| f.key.clone()));
                        if let Some(dir) = &h.local {
                            staged.push(dir.clone());
                        }
                    }
                    if !wrote_itself.contains(&(node, subtask)) {
                        uploads.extend(pending_uploads(state)?);
                    }
                }
            }
            uploaded_bytes += upload_all(&self.storage, uploads).await?;
            let shared_files: Vec<String> = shared_files.into_iter().collect();
            let (files, coordinator_states) = futures::future::try_join(
                futures::future::try_join_all(writes),
                futures::future::try_join_all(coordinator_writes),
            )
            .await?;
            let bytes = files.iter().map(|f| f.length).sum::<u64>()
                + coordinator_states.iter().map(|c| c.length).sum::<u64>()
                + uploaded_bytes;
            let metadata = CheckpointMetadata {
                job_fingerprint: self.fingerprint.clone(),
                checkpoint_id: id,
                timestamp_ms: cp.timestamp_ms,
                operators,
                state_files: files,
                coordinator_states,
                shared_files,
            };
            let removed = self
                .storage
                .complete(metadata)
                .await
                .map_err(|e| e.to_string())?;
            if !removed.is_empty() {
                tracing::debug!(?removed, "checkpoints removed by retention");
            }
            self.release_staged(id, staged, &removed).await;
            Ok(bytes)
        })
    }

    fn adopt(&self, id: CheckpointId, dirs: Vec<PathBuf>) {
        sluice_core::sync::lock(&self.staged)
            .entry(id)
            .or_default()
            .extend(dirs);
    }

    fn discard(&self, id: CheckpointId) -> BoxFuture<'_, ()> {
        if let Some(w) = &self.written {
            w.forget(id);
        }
        Box::pin(async move {
            if let Err(e) = self.storage.discard(id).await {
                tracing::warn!(checkpoint = %id, error = %e, "could not remove an aborted checkpoint");
            }
        })
    }
}

/// How the master checkpoints a job.
#[derive(Clone)]
pub(crate) struct CheckpointRun {
    pub(crate) settings: CheckpointSettings,
    pub(crate) persistence: Arc<dyn Persistence>,
    pub(crate) storage: Arc<dyn CheckpointStorage>,
}

/// Turns a verified checkpoint read from storage into the state to restore.
pub(crate) fn decode_restored(cp: RestoredCheckpoint) -> Result<CompletedCheckpoint, JobError> {
    let id = cp.id();
    let timestamp_ms = cp.metadata().timestamp_ms;
    let location = cp.location().display().to_string();
    let mut operators: BTreeMap<NodeId, Vec<OperatorState>> = BTreeMap::new();
    let files: BTreeMap<(NodeId, usize), StateFileHandle> = cp
        .metadata()
        .state_files
        .iter()
        .map(|f| ((f.node, f.subtask), f.clone()))
        .collect();
    let (states, coordinators) = cp.into_states();
    for ((node, subtask), bytes) in states {
        let mut state = OperatorState::decode(&bytes).map_err(|e| {
            JobError::InvalidJob(format!(
                "checkpoint {id} in {location}: the state of operator {node} cannot be decoded: {e}"
            ))
        })?;
        // Where it is stored: in cluster mode the job master sends task managers this file's
        // handle instead of the state.
        if let Some(f) = files.get(&(node, subtask)) {
            state.stored_at(id, f.clone());
        }
        operators.entry(node).or_default().push(state);
    }
    Ok(CompletedCheckpoint {
        id,
        timestamp_ms,
        operators: Arc::new(operators),
        coordinators: Arc::new(coordinators),
        location: None,
    })
}

/// Loads the checkpoint to restore from `path`: a `chk-N` directory (exactly that checkpoint, no
/// fallback), or a checkpoint storage directory (its newest valid checkpoint, skipping damaged
/// ones with a warning naming the bad file).
///
/// With `fetch_files`, the files of its keyed stores are gathered locally as well; without
/// (cluster mode), the checkpoint keeps the storage directory as its `location`, where the
/// task managers read its state and store files themselves.
pub(crate) async fn load_restore(
    path: &Path,
    fingerprint: &str,
    fetch_files: bool,
) -> Result<CompletedCheckpoint, JobError> {
    let invalid = |e: crate::storage::StorageError| {
        JobError::InvalidJob(format!("cannot restore from {}: {e}", path.display()))
    };
    let finish = |storage: LocalCheckpointStorage, cp: CompletedCheckpoint| async move {
        if fetch_files {
            fetch_store_files(&storage, cp).await
        } else {
            Ok(CompletedCheckpoint {
                location: Some(storage.base().to_path_buf()),
                ..cp
            })
        }
    };
    if restore_path_kind(path).map_err(invalid)? == RestorePathKind::Checkpoint {
        let cp = LocalCheckpointStorage::load_dir(path.to_path_buf(), fingerprint)
            .await
            .map_err(invalid)?;
        // Shared files live beside the checkpoint directories.
        let base = path.parent().unwrap_or(path).to_path_buf();
        let storage = LocalCheckpointStorage::new(base, std::num::NonZeroUsize::MIN);
        return finish(storage, decode_restored(cp)?).await;
    }
    // A restore reads; it removes nothing (not even incomplete checkpoints), so that a
    // checkpoint skipped here can still be restored by itself and named for what it lacks.
    let storage = LocalCheckpointStorage::new(path.to_path_buf(), std::num::NonZeroUsize::MIN);
    let outcome = storage
        .find_latest_valid(fingerprint)
        .await
        .map_err(invalid)?;
    for skipped in &outcome.skipped {
        tracing::warn!(checkpoint = %skipped.id, error = %skipped.error, "skipping a damaged checkpoint");
    }
    match outcome.restored {
        Some(cp) => finish(storage, decode_restored(cp)?).await,
        None => Err(JobError::InvalidJob(format!(
            "cannot restore from {}: it holds no complete, valid checkpoint{}",
            path.display(),
            outcome
                .skipped
                .first()
                .map(|s| format!(" (newest problem: {})", s.error))
                .unwrap_or_default()
        ))),
    }
}

/// The newest valid checkpoint in `storage`, if it holds one (damaged ones are skipped with a
/// warning; one of another job graph is an error).
///
/// With `fetch_files`, the files of its keyed stores are gathered locally as well (see
/// `fetch_store_files`); without (cluster mode, where each task manager fetches those of the
/// states it is sent), the handles stay as stored.
pub(crate) async fn load_latest(
    storage: &dyn CheckpointStorage,
    fingerprint: &str,
    fetch_files: bool,
) -> Result<Option<CompletedCheckpoint>, JobError> {
    let outcome = storage.latest_valid(fingerprint).await.map_err(|e| {
        JobError::InvalidJob(format!(
            "cannot resume from checkpoint storage {}: {e}",
            storage.location()
        ))
    })?;
    for skipped in &outcome.skipped {
        tracing::warn!(checkpoint = %skipped.id, error = %skipped.error, "skipping a damaged checkpoint");
    }
    match outcome.restored {
        None => Ok(None),
        Some(cp) if fetch_files => Ok(Some(
            fetch_store_files(storage, decode_restored(cp)?).await?,
        )),
        Some(cp) => Ok(Some(decode_restored(cp)?)),
    }
}

/// Gathers the files of every keyed store handle in `cp` into a local directory per handle
/// (shared files fetched from `storage`, small files written out), so that the restored stores
/// open from them.
async fn fetch_store_files(
    storage: &dyn CheckpointStorage,
    mut cp: CompletedCheckpoint,
) -> Result<CompletedCheckpoint, JobError> {
    if cp
        .operators
        .values()
        .all(|states| states.iter().all(|s| s.store_handles().is_empty()))
    {
        return Ok(cp);
    }
    let mut operators = (*cp.operators).clone();
    // Plain loops: closures here keep the job's future from proving `Send`
    // (rust-lang/rust#64552).
    let mut states = Vec::new();
    for (node, subtasks) in operators.iter_mut() {
        for s in subtasks.iter_mut() {
            states.push((*node, s));
        }
    }
    fetch_handles(storage, cp.id, states).await?;
    cp.operators = Arc::new(operators);
    Ok(cp)
}

/// Fetches the files of every keyed store handle of `states` (of checkpoint `id`) that has no
/// local directory yet into a new one; a task manager does this for the states the job master
/// sent it.
pub(crate) async fn fetch_handles(
    storage: &dyn CheckpointStorage,
    id: CheckpointId,
    states: Vec<(NodeId, &mut OperatorState)>,
) -> Result<(), JobError> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let root = std::env::temp_dir();
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| {
        let removed = crate::state::fetched::sweep_dead_processes(&root);
        if removed > 0 {
            tracing::info!(removed, dir = %root.display(), "removed the restored files of processes that are gone");
        }
    });
    let prefix = format!(
        "{}p{}-{nanos:x}-chk{}",
        crate::state::fetched::PREFIX,
        std::process::id(),
        id.0
    );
    let failed = |what: String| {
        JobError::InvalidJob(format!(
            "cannot restore checkpoint {id} from {}: {what}",
            storage.location()
        ))
    };
    let mut n = 0usize;
    for (node, state) in states {
        for h in state.store_handles_mut() {
            if h.local.is_some() {
                continue;
            }
            let dir = root.join(format!("{prefix}-n{}-{n}", node.0));
            n += 1;
            std::fs::create_dir_all(&dir)
                .map_err(|e| failed(format!("creating {}: {e}", dir.display())))?;
            // Held before anything is written, so that a failed fetch removes what it wrote.
            let held = Arc::new(crate::state::FetchedDir::new(dir.clone()));
            for f in &h.shared {
                storage
                    .fetch_shared(&f.key, &dir.join(&f.name))
                    .await
                    .map_err(|e| failed(e.to_string()))?;
            }
            for (name, bytes) in &h.private {
                std::fs::write(dir.join(name), bytes)
                    .map_err(|e| failed(format!("writing {}: {e}", dir.join(name).display())))?;
            }
            for f in h.shared.iter_mut() {
                f.uploaded = true;
            }
            h.local = Some(dir);
            h.fetched = Some(held);
        }
    }
    Ok(())
}

/// Puts the whole state in place of every stub among `states` (see `state/deferred.rs`): reads
/// each state file they name from `storage` once, side by side, decodes it off the tokio
/// workers and deals the parts out at `max_parallelism` key groups. A task manager does this
/// for the states the job master sent it as handles.
pub(crate) async fn resolve_deferred(
    storage: &dyn CheckpointStorage,
    states: Vec<(NodeId, usize, &mut OperatorState)>,
    max_parallelism: usize,
) -> Result<(), JobError> {
    use futures::{StreamExt, TryStreamExt};
    let mut wanted: BTreeMap<(CheckpointId, String), StateFileHandle> = BTreeMap::new();
    for (_, _, s) in &states {
        for (c, h) in s.deferred().map(|d| d.file_handles()).unwrap_or_default() {
            wanted.insert((c, h.file_name.clone()), h);
        }
    }
    if wanted.is_empty() {
        return Ok(());
    }
    let location = storage.location();
    let read: BTreeMap<(CheckpointId, String), OperatorState> = futures::stream::iter(wanted)
        .map(|(key, handle)| async move {
            let failed = |what: String| {
                JobError::InvalidJob(format!(
                    "cannot restore the state of operator {} subtask {} from checkpoint {} in \
                     {}: {what}",
                    handle.node,
                    handle.subtask,
                    key.0,
                    storage.location()
                ))
            };
            let bytes = storage
                .read_state(key.0, &handle)
                .await
                .map_err(|e| failed(e.to_string()))?;
            let state = tokio::task::spawn_blocking(move || OperatorState::decode(&bytes))
                .await
                .map_err(|e| failed(format!("decoding panicked: {e}")))?
                .map_err(|e| failed(format!("it does not decode: {e}")))?;
            Ok::<_, JobError>((key, state))
        })
        .buffer_unordered(4)
        .try_collect()
        .await?;
    for (node, subtask, s) in states {
        let Some(d) = s.take_deferred() else {
            continue;
        };
        *s = d
            .resolve(max_parallelism, &mut |c, h| {
                read.get(&(c, h.file_name.clone()))
                    .cloned()
                    .ok_or_else(|| format!("state file {} was not read", h.file_name))
            })
            .map_err(|e| {
                JobError::InvalidJob(format!(
                    "cannot restore the state of operator {node} subtask {subtask} from \
                     {location}: {e}"
                ))
            })?;
    }
    Ok(())
}

/// The default checkpoint directory of a job: `./sluice-checkpoints/<job name>`.
pub(crate) fn default_dir(job_name: &str) -> PathBuf {
    let safe: String = job_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    PathBuf::from("sluice-checkpoints").join(if safe.is_empty() { "job".into() } else { safe })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Deferred;
    use crate::storage::LocalCheckpointStorage;
    use std::num::NonZeroUsize;

    /// Local checkpoint storage in `dir`, retaining two checkpoints.
    fn storage_in(dir: impl Into<PathBuf>) -> Arc<dyn CheckpointStorage> {
        Arc::new(LocalCheckpointStorage::new(
            dir.into(),
            NonZeroUsize::new(2).unwrap(),
        ))
    }

    /// After a failover, a store restored from a checkpoint in memory refers to that
    /// checkpoint's table files under their keys: its checkpoint writes those that storage
    /// still holds no more (retention may have removed one since), and the others not at all.
    #[tokio::test]
    async fn restored_table_files_are_written_only_where_storage_lacks_them() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        };
        let kept = file("000007.sst", b"kept");
        let removed = file("000008.sst", b"removed since");
        let new = file("000009.sst", b"new file");
        let storage = storage_in(dir.path().join("checkpoints"));
        storage.initialize().await.unwrap();
        // Checkpoint storage holds the first file still; retention removed the second.
        let keys = ["old-000007.sst", "old-000008.sst", "new-000009.sst"].map(String::from);
        storage.write_shared(&keys[0], &kept).await.unwrap();
        let pending = |path: &PathBuf, restored| Pending {
            path: path.clone(),
            length: std::fs::metadata(path).unwrap().len(),
            ahead: false,
            restored,
        };
        let uploads = Uploads::from([
            (keys[0].clone(), pending(&kept, true)),
            (keys[1].clone(), pending(&removed, true)),
            (keys[2].clone(), pending(&new, false)),
        ]);
        let uploaded = upload_all(&storage, uploads).await.unwrap();
        assert_eq!(
            uploaded,
            13 + 8,
            "the file retention removed and the new one are written, the one still there is not"
        );
        let present = storage.shared_present(&keys).await.unwrap();
        assert_eq!(present.len(), 3, "every file is in storage: {present:?}");
    }

    /// The directory a restore fetches a store's files into belongs to the handle: it goes with
    /// the last clone (before, it stayed in the temporary directory for good, a copy of the
    /// whole state per restore).
    #[test]
    fn the_files_a_restore_fetched_go_with_the_last_handle() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("000007.sst");
        std::fs::write(&table, b"table file").unwrap();
        let storage = storage_in(dir.path().join("checkpoints"));
        let mut state = OperatorState::default();
        state.store_handles_mut().push(crate::state::StoreHandle {
            backend: "rocksdb".into(),
            key_groups: 0..128,
            shared: vec![crate::state::SharedFile {
                name: "000007.sst".into(),
                key: "op0/000007.sst".into(),
                length: 10,
                uploaded: true,
                ahead: false,
                restored: false,
            }],
            private: vec![("MANIFEST-000005".into(), b"manifest".to_vec())],
            local: None,
            fetched: None,
        });
        let state = runtime.block_on(async {
            storage.initialize().await.unwrap();
            storage
                .write_shared("op0/000007.sst", &table)
                .await
                .unwrap();
            let mut state = state;
            fetch_handles(&*storage, CheckpointId(3), vec![(NodeId(0), &mut state)])
                .await
                .unwrap();
            state
        });
        let handle = &state.store_handles()[0];
        let local = handle
            .local
            .clone()
            .expect("the restore gathered the files");
        assert_eq!(
            std::fs::read(local.join("000007.sst")).unwrap(),
            b"table file"
        );
        assert_eq!(
            std::fs::read(local.join("MANIFEST-000005")).unwrap(),
            b"manifest"
        );
        assert_eq!(
            handle.fetched.as_ref().map(|f| f.path().to_path_buf()),
            Some(local.clone())
        );
        let clone = state.clone();
        drop(state);
        assert!(
            local.exists(),
            "a clone of the handle still needs the files"
        );
        // Outside the runtime the last drop removes the directory at once.
        drop(clone);
        assert!(!local.exists());
    }

    #[tokio::test]
    async fn the_size_of_a_checkpoint_counts_what_task_managers_uploaded() {
        let dir = tempfile::tempdir().unwrap();
        let storage = storage_in(dir.path());
        storage.initialize().await.unwrap();
        let (id, node) = (CheckpointId(1), NodeId(0));
        // A task manager wrote the state file and uploaded 1,000 bytes of table files.
        let handle = storage.write_state(id, node, 0, vec![7; 10]).await.unwrap();
        let written = Arc::new(WrittenStates::default());
        written.add(id, vec![handle.clone()], 1_000);
        let persistence = StoragePersistence {
            storage,
            fingerprint: "f".into(),
            max_parallelism: 128,
            written: Some(written),
            staged: Default::default(),
        };
        let mut stub = OperatorState::default();
        stub.defer(Deferred::file(id, handle.clone()));
        let cp = CompletedCheckpoint {
            id,
            timestamp_ms: 0,
            operators: Arc::new(BTreeMap::from([(node, vec![stub])])),
            coordinators: Arc::default(),
            location: None,
        };
        let bytes = persistence.persist(cp).await.unwrap();
        assert_eq!(bytes, handle.length + 1_000);
    }
}
