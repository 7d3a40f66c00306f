//! What the job master prepares before the first attempt: the checkpoint a job starts from (a
//! path it was given, or the newest valid checkpoint of its own storage) and checkpointing (the
//! storage made ready, the planner continuing after every stored checkpoint id).

use crate::checkpoint::persistence::{CheckpointRun, load_latest, load_restore};
use crate::checkpoint::{CheckpointPlanner, CompletedCheckpoint};
use crate::error::JobError;
use crate::job::attempt::JobCheckpoints;
use crate::job::spec::JobSpec;

/// Where the job starts from and how it checkpoints.
pub(crate) struct Prepared {
    /// The checkpoint the first attempt restores, if any.
    pub(crate) initial: Option<CompletedCheckpoint>,
    /// Checkpointing, if enabled.
    pub(crate) checkpoints: Option<JobCheckpoints>,
}

/// Loads the checkpoint `spec` starts from and prepares its checkpointing.
pub(crate) async fn prepare(spec: &JobSpec) -> Result<Prepared, JobError> {
    let mut initial = None;
    // Where tasks read and write checkpoint storage themselves (cluster mode), the job master
    // keeps only handles to the state files and sends those, and leaves the files of keyed
    // stores to the task managers that restore them.
    let cluster = spec.deployer.written_states().is_some();
    if let Some(path) = &spec.restore_path {
        let restored = load_restore(path, &spec.graph.fingerprint(), !cluster).await?;
        tracing::info!(checkpoint = %restored.id, path = %path.display(), "restoring");
        // In cluster mode task managers read the files at the same path, as in Flink, where a
        // savepoint's path must be reachable from every task manager.
        initial = Some(restored);
    }
    if let (true, Some(run)) = (spec.resume_latest, &spec.checkpointing) {
        let location = run.storage.location();
        match load_latest(&*run.storage, &spec.graph.fingerprint(), !cluster).await? {
            Some(restored) => {
                tracing::info!(checkpoint = %restored.id, %location, "resuming from the latest checkpoint");
                initial = Some(restored);
            }
            None => tracing::info!(%location, "no checkpoint to resume from: starting afresh"),
        }
    }
    if cluster {
        initial = initial.map(CompletedCheckpoint::into_stubs);
    }
    if let (Some(run), Some(cp)) = (&spec.checkpointing, &initial) {
        let dirs = cp
            .operators
            .values()
            .flatten()
            .flat_map(|s| s.store_handles().iter().filter_map(|h| h.local.clone()))
            .collect();
        run.persistence.adopt(cp.id, dirs);
    }
    let checkpoints = match &spec.checkpointing {
        Some(c) => Some(start_checkpointing(c, spec.plan.task_count(), initial.clone()).await?),
        None => None,
    };
    Ok(Prepared {
        initial,
        checkpoints,
    })
}

/// Prepares checkpoint storage and the planner for `tasks` tasks; ids continue after every
/// stored checkpoint.
async fn start_checkpointing(
    c: &CheckpointRun,
    tasks: usize,
    restore: Option<CompletedCheckpoint>,
) -> Result<JobCheckpoints, JobError> {
    let storage_error = |e: crate::storage::StorageError| {
        JobError::InvalidJob(format!(
            "checkpoint storage {} is not usable: {e}",
            c.storage.location()
        ))
    };
    c.storage.initialize().await.map_err(storage_error)?;
    let stored_max = c
        .storage
        .completed()
        .await
        .map_err(storage_error)?
        .last()
        .copied()
        .unwrap_or_default();
    tracing::info!(location = %c.storage.location(), "checkpoints are stored here");
    let last = restore
        .as_ref()
        .map_or(stored_max, |r| r.id.max(stored_max));
    let planner = CheckpointPlanner::new(c.settings.clone(), tasks, last);
    Ok(JobCheckpoints::new(planner, restore))
}
