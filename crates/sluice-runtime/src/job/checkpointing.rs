//! Checkpointing as the job master runs it: the completed checkpoints it keeps, the seam to
//! durable storage, and loading a checkpoint to restore from.

use crate::checkpoint::CheckpointSettings;
use crate::error::JobError;
use crate::graph::{NodeKind, StreamGraph};
use crate::job::deploy::RestoreState;
use crate::state::OperatorState;
use crate::storage::{
    CheckpointMetadata, CheckpointStorage, LocalCheckpointStorage, OperatorInfo, RestorePathKind,
    RestoredCheckpoint, StateFileHandle, restore_path_kind,
};
use futures::future::BoxFuture;
use sluice_core::{CheckpointId, NodeId, codec};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A checkpoint every task acknowledged, ready to be made durable.
#[derive(Clone, Debug)]
pub(crate) struct CompletedCheckpoint {
    pub(crate) id: u64,
    pub(crate) timestamp_ms: u64,
    /// Per operator, one state per subtask, in subtask order.
    pub(crate) operators: Arc<BTreeMap<NodeId, Vec<OperatorState>>>,
    /// Per operator with a coordinator, the coordinator's state.
    pub(crate) coordinators: Arc<BTreeMap<NodeId, Vec<u8>>>,
}

impl CompletedCheckpoint {
    pub(crate) fn restore_state(&self) -> RestoreState {
        RestoreState {
            checkpoint_id: self.id,
            operators: self.operators.clone(),
            coordinators: self.coordinators.clone(),
        }
    }
}

/// Coordinator states are stored as one-subtask pseudo operators with ids from here on.
const COORDINATOR_NODE_BASE: usize = usize::MAX / 2;

/// Where completed checkpoints are written; the master awaits it off the task loops.
pub(crate) trait Persistence: Send + Sync + 'static {
    /// Writes `checkpoint` durably (state files first, metadata last).
    fn persist(&self, checkpoint: CompletedCheckpoint) -> BoxFuture<'_, Result<(), String>>;
    /// Removes what was written of an aborted checkpoint.
    fn discard(&self, id: u64) -> BoxFuture<'_, ()>;
}

/// Writes checkpoints to a [`CheckpointStorage`].
pub(crate) struct StoragePersistence {
    pub(crate) storage: Arc<dyn CheckpointStorage>,
    pub(crate) fingerprint: String,
    pub(crate) max_parallelism: usize,
}

impl Persistence for StoragePersistence {
    fn persist(&self, cp: CompletedCheckpoint) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let id = CheckpointId(cp.id);
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
                for subtask in 0..states.len() {
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
            for (&node, state) in cp.coordinators.iter() {
                let state = state.clone();
                let pseudo = NodeId(COORDINATOR_NODE_BASE + node.0);
                operators.push(OperatorInfo {
                    node: pseudo,
                    parallelism: 1,
                    max_parallelism: self.max_parallelism,
                });
                let storage = self.storage.clone();
                writes.push(Box::pin(async move {
                    storage
                        .write_state(id, pseudo, 0, state)
                        .await
                        .map_err(|e| e.to_string())
                }));
            }
            let files = futures::future::try_join_all(writes).await?;
            let metadata = CheckpointMetadata {
                job_fingerprint: self.fingerprint.clone(),
                checkpoint_id: id,
                timestamp_ms: cp.timestamp_ms,
                operators,
                state_files: files,
            };
            let removed = self
                .storage
                .complete(metadata)
                .await
                .map_err(|e| e.to_string())?;
            if !removed.is_empty() {
                tracing::debug!(?removed, "checkpoints removed by retention");
            }
            Ok(())
        })
    }

    fn discard(&self, id: u64) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Err(e) = self.storage.discard(CheckpointId(id)).await {
                tracing::warn!(checkpoint = id, error = %e, "could not remove an aborted checkpoint");
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

/// A string that changes when the job graph changes shape: operators (name, kind, sink or not),
/// and edges (endpoints and partitioning). A checkpoint of one graph does not restore into
/// another.
pub(crate) fn fingerprint(graph: &StreamGraph) -> String {
    let mut s = String::from("sluice-graph-v1;");
    for n in &graph.nodes {
        let kind = match n.kind {
            NodeKind::Source(_) => "source",
            NodeKind::Operator(_) if n.is_sink => "sink",
            NodeKind::Operator(_) => "operator",
        };
        let _ = write!(s, "n{}:{}:{};", n.id.0, kind, n.name);
    }
    for e in &graph.edges {
        let _ = write!(s, "e{}>{}:{};", e.from.0, e.to.0, e.partitioning);
    }
    s
}

/// Turns a verified checkpoint read from storage into the state to restore.
pub(crate) fn decode_restored(cp: RestoredCheckpoint) -> Result<RestoreState, JobError> {
    let id = cp.id().0;
    let location = cp.location().display().to_string();
    let mut operators: BTreeMap<NodeId, Vec<OperatorState>> = BTreeMap::new();
    let mut coordinators = BTreeMap::new();
    for ((node, _subtask), bytes) in cp.into_states() {
        if node.0 >= COORDINATOR_NODE_BASE {
            coordinators.insert(NodeId(node.0 - COORDINATOR_NODE_BASE), bytes);
            continue;
        }
        let state: OperatorState = codec::decode(&bytes).map_err(|e| {
            JobError::InvalidJob(format!(
                "checkpoint {id} in {location}: the state of operator {node} cannot be decoded: {e}"
            ))
        })?;
        operators.entry(node).or_default().push(state);
    }
    Ok(RestoreState {
        checkpoint_id: id,
        operators: Arc::new(operators),
        coordinators: Arc::new(coordinators),
    })
}

/// Loads the checkpoint to restore from `path`: a `chk-N` directory (exactly that checkpoint, no
/// fallback), or a checkpoint storage directory (its newest valid checkpoint, skipping damaged
/// ones with a warning naming the bad file).
pub(crate) async fn load_restore(path: &Path, fingerprint: &str) -> Result<RestoreState, JobError> {
    let invalid = |e: crate::storage::StorageError| {
        JobError::InvalidJob(format!("cannot restore from {}: {e}", path.display()))
    };
    if restore_path_kind(path).map_err(invalid)? == RestorePathKind::Checkpoint {
        let cp = LocalCheckpointStorage::load_dir(path.to_path_buf(), fingerprint)
            .await
            .map_err(invalid)?;
        return decode_restored(cp);
    }
    let storage = LocalCheckpointStorage::new(path.to_path_buf(), std::num::NonZeroUsize::MIN);
    let outcome = storage.latest_valid(fingerprint).await.map_err(invalid)?;
    for skipped in &outcome.skipped {
        tracing::warn!(checkpoint = %skipped.id, error = %skipped.error, "skipping a damaged checkpoint");
    }
    match outcome.restored {
        Some(cp) => decode_restored(cp),
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
