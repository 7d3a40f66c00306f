//! What a checkpoint's metadata records, and what a restore hands back.

use super::StorageError;
use super::format::is_plain_file_name;
use serde::{Deserialize, Serialize};
use sluice_core::{CheckpointId, NodeId, SubtaskIndex};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The parallelism of one operator when the checkpoint was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorInfo {
    /// The operator.
    pub node: NodeId,
    /// How many subtasks it had.
    pub parallelism: usize,
    /// Its number of key groups.
    pub max_parallelism: usize,
}

/// One stored state file, as [`write_state`](super::CheckpointStorage::write_state) returns it and
/// the metadata lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateFileHandle {
    /// The operator.
    pub node: NodeId,
    /// The subtask.
    pub subtask: SubtaskIndex,
    /// The file's name inside the checkpoint directory.
    pub file_name: String,
    /// The payload's length in bytes.
    pub length: u64,
    /// The payload's CRC32.
    pub crc32: u32,
}

/// The stored state of one operator's coordinator, as
/// [`write_coordinator_state`](super::CheckpointStorage::write_coordinator_state) returns it and the
/// metadata lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CoordinatorStateHandle {
    /// The operator whose coordinator it is.
    pub node: NodeId,
    /// The file's name inside the checkpoint directory.
    pub file_name: String,
    /// The payload's length in bytes.
    pub length: u64,
    /// The payload's CRC32.
    pub crc32: u32,
}

/// The metadata of a completed checkpoint, written last: a checkpoint without it is incomplete.
///
/// ```
/// use sluice_core::{CheckpointId, NodeId};
/// use sluice_runtime::storage::{CheckpointMetadata, OperatorInfo};
///
/// let meta = CheckpointMetadata {
///     job_fingerprint: "graph-v1".into(),
///     checkpoint_id: CheckpointId(1),
///     timestamp_ms: 1_700_000_000_000,
///     operators: vec![OperatorInfo { node: NodeId(0), parallelism: 2, max_parallelism: 128 }],
///     state_files: vec![],
///     coordinator_states: vec![],
///     shared_files: vec![],
/// };
/// assert!(meta.check().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    /// Identifies the job graph; a restore into a different graph is refused.
    pub job_fingerprint: String,
    /// The checkpoint.
    pub checkpoint_id: CheckpointId,
    /// When it was triggered, in milliseconds since the Unix epoch (the caller's clock).
    pub timestamp_ms: u64,
    /// Every operator of the job with its parallelism.
    pub operators: Vec<OperatorInfo>,
    /// Every state file of the checkpoint.
    pub state_files: Vec<StateFileHandle>,
    /// The state of every operator coordinator, in a section of its own.
    pub coordinator_states: Vec<CoordinatorStateHandle>,
    /// The keys (below `shared/`) of the files of keyed stores that this checkpoint's states
    /// refer to (incremental snapshots). A shared file is deleted once no retained checkpoint
    /// lists it.
    pub shared_files: Vec<String>,
}

/// [`CheckpointMetadata`] as checkpoints wrote it before shared files existed; still read.
#[derive(Deserialize)]
pub(crate) struct CheckpointMetadataV1 {
    job_fingerprint: String,
    checkpoint_id: CheckpointId,
    timestamp_ms: u64,
    operators: Vec<OperatorInfo>,
    state_files: Vec<StateFileHandle>,
    coordinator_states: Vec<CoordinatorStateHandle>,
}

impl From<CheckpointMetadataV1> for CheckpointMetadata {
    fn from(v: CheckpointMetadataV1) -> Self {
        CheckpointMetadata {
            job_fingerprint: v.job_fingerprint,
            checkpoint_id: v.checkpoint_id,
            timestamp_ms: v.timestamp_ms,
            operators: v.operators,
            state_files: v.state_files,
            coordinator_states: v.coordinator_states,
            shared_files: Vec::new(),
        }
    }
}

impl CheckpointMetadata {
    /// Checks that the metadata does not contradict itself: operators listed once, every state
    /// file of a listed operator and of one of its subtasks, one file per subtask, at most one
    /// coordinator state per listed operator, and file names that stay inside the checkpoint
    /// directory. Returns what is wrong.
    pub fn check(&self) -> Result<(), String> {
        let mut operators = BTreeMap::new();
        for op in &self.operators {
            if operators.insert(op.node, op.parallelism).is_some() {
                return Err(format!("operator {} is listed twice", op.node));
            }
        }
        let mut seen = BTreeSet::new();
        let mut names = BTreeSet::new();
        for f in &self.state_files {
            let Some(&parallelism) = operators.get(&f.node) else {
                return Err(format!(
                    "state file {:?} belongs to unknown operator {}",
                    f.file_name, f.node
                ));
            };
            if f.subtask >= parallelism {
                return Err(format!(
                    "state file {:?} is for subtask {} but operator {} has parallelism {}",
                    f.file_name, f.subtask, f.node, parallelism
                ));
            }
            if !seen.insert((f.node, f.subtask)) {
                return Err(format!(
                    "operator {} subtask {} has two state files",
                    f.node, f.subtask
                ));
            }
            if !is_plain_file_name(&f.file_name) || !names.insert(f.file_name.as_str()) {
                return Err(format!(
                    "state file name {:?} is not a unique plain file name",
                    f.file_name
                ));
            }
        }
        let mut coordinators = BTreeSet::new();
        for c in &self.coordinator_states {
            if !operators.contains_key(&c.node) {
                return Err(format!(
                    "coordinator state {:?} belongs to unknown operator {}",
                    c.file_name, c.node
                ));
            }
            if !coordinators.insert(c.node) {
                return Err(format!("operator {} has two coordinator states", c.node));
            }
            if !is_plain_file_name(&c.file_name) || !names.insert(c.file_name.as_str()) {
                return Err(format!(
                    "coordinator state file name {:?} is not a unique plain file name",
                    c.file_name
                ));
            }
        }
        Ok(())
    }

    /// The operator `node`, if the checkpoint has it.
    pub fn operator(&self, node: NodeId) -> Option<&OperatorInfo> {
        self.operators.iter().find(|op| op.node == node)
    }
}

/// A verified checkpoint, read back with every state payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoredCheckpoint {
    pub(crate) location: PathBuf,
    pub(crate) metadata: CheckpointMetadata,
    pub(crate) states: BTreeMap<(NodeId, SubtaskIndex), Vec<u8>>,
    pub(crate) coordinator_states: BTreeMap<NodeId, Vec<u8>>,
}

impl RestoredCheckpoint {
    /// The checkpoint.
    pub fn id(&self) -> CheckpointId {
        self.metadata.checkpoint_id
    }

    /// Where it was read from.
    pub fn location(&self) -> &Path {
        &self.location
    }

    /// Its metadata.
    pub fn metadata(&self) -> &CheckpointMetadata {
        &self.metadata
    }

    /// The state payload of one operator subtask, if the checkpoint has one.
    pub fn state(&self, node: NodeId, subtask: SubtaskIndex) -> Option<&[u8]> {
        self.states.get(&(node, subtask)).map(Vec::as_slice)
    }

    /// The state payload of one operator's coordinator, if the checkpoint has one.
    pub fn coordinator_state(&self, node: NodeId) -> Option<&[u8]> {
        self.coordinator_states.get(&node).map(Vec::as_slice)
    }

    /// Every state payload by operator and subtask, and every coordinator state by operator.
    #[allow(clippy::type_complexity)]
    pub fn into_states(
        self,
    ) -> (
        BTreeMap<(NodeId, SubtaskIndex), Vec<u8>>,
        BTreeMap<NodeId, Vec<u8>>,
    ) {
        (self.states, self.coordinator_states)
    }
}

/// A checkpoint that a restore passed over, and why.
#[derive(Debug)]
pub struct SkippedCheckpoint {
    /// The checkpoint.
    pub id: CheckpointId,
    /// What is wrong with it; names the bad file.
    pub error: StorageError,
}

/// What [`latest_valid`](super::CheckpointStorage::latest_valid) found.
#[derive(Debug, Default)]
pub struct RestoreOutcome {
    /// The newest checkpoint that passed every check, if any.
    pub restored: Option<RestoredCheckpoint>,
    /// The checkpoints passed over, newest first: incomplete ones (removed) and complete ones
    /// that failed verification (left in place for inspection; retention removes them later).
    pub skipped: Vec<SkippedCheckpoint>,
}
