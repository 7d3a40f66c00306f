//! From acknowledgements to a completed checkpoint.
//!
//! While a checkpoint is pending, [`PendingStates`] collects what each task acknowledged (one
//! state per operator subtask of its chain) and what the coordinators snapshotted. When every task
//! acknowledged, [`PendingStates::complete`] groups the states by operator in subtask order into a
//! [`CompletedCheckpoint`], the unit that is persisted and, once durable, restored from. Its
//! states sit behind `Arc`s: the persisted copy, the restore point and every redeployment share
//! them.
//!
//! ```text
//! add_task_states(1, [(#2, subtask 1, s21), (#0, subtask 1, s01)])
//! add_task_states(1, [(#2, subtask 0, s20), (#0, subtask 0, s00)])
//! add_coordinator_states(1, {#2: c2})
//! complete(1, t) -> CompletedCheckpoint { id: 1, operators: {#0: [s00, s01], #2: [s20, s21]},
//!                                         coordinators: {#2: c2} }
//! ```

use crate::state::OperatorState;
use sluice_core::{CheckpointId, NodeId, SubtaskIndex};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The state of one operator subtask at a checkpoint, as a task acknowledges it.
pub(crate) type SubtaskState = (NodeId, SubtaskIndex, OperatorState);

/// A checkpoint every task acknowledged: what is persisted, and what a job restores from.
#[derive(Clone, Debug, Default)]
pub(crate) struct CompletedCheckpoint {
    /// The checkpoint.
    pub(crate) id: CheckpointId,
    /// When it was triggered (milliseconds since the job started, or as read from storage).
    pub(crate) timestamp_ms: u64,
    /// Per operator, one state per subtask, in subtask order.
    pub(crate) operators: Arc<BTreeMap<NodeId, Vec<OperatorState>>>,
    /// Per operator with a coordinator, the coordinator's state.
    pub(crate) coordinators: Arc<BTreeMap<NodeId, Vec<u8>>>,
    /// The directory of the local checkpoint storage that holds its files, when that is not
    /// the job's own (a checkpoint restored from a path): where task managers read the files
    /// its stubs and store handles name.
    pub(crate) location: Option<std::path::PathBuf>,
}

impl CompletedCheckpoint {
    /// The same checkpoint with every state that is stored in a known file replaced by its stub
    /// (see `state/deferred.rs`): the entries stay in checkpoint storage.
    pub(crate) fn into_stubs(self) -> Self {
        let operators = self
            .operators
            .iter()
            .map(|(node, states)| {
                let stubs = states.iter().map(|s| s.stub().unwrap_or_else(|| s.clone()));
                (*node, stubs.collect())
            })
            .collect();
        CompletedCheckpoint {
            operators: Arc::new(operators),
            ..self
        }
    }
}

#[derive(Debug, Default)]
struct Parts {
    subtasks: Vec<SubtaskState>,
    coordinators: BTreeMap<NodeId, Vec<u8>>,
}

/// The states gathered for checkpoints in progress. See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct PendingStates {
    pending: BTreeMap<CheckpointId, Parts>,
}

impl PendingStates {
    /// Adds what one task acknowledged for `id`.
    pub(crate) fn add_task_states(&mut self, id: CheckpointId, states: Vec<SubtaskState>) {
        self.pending.entry(id).or_default().subtasks.extend(states);
    }

    /// Adds the coordinators' states for `id`.
    pub(crate) fn add_coordinator_states(
        &mut self,
        id: CheckpointId,
        states: BTreeMap<NodeId, Vec<u8>>,
    ) {
        self.pending
            .entry(id)
            .or_default()
            .coordinators
            .extend(states);
    }

    /// Forgets `id` (aborted).
    pub(crate) fn discard(&mut self, id: CheckpointId) {
        self.pending.remove(&id);
    }

    /// Forgets everything (the attempt ended).
    pub(crate) fn clear(&mut self) {
        self.pending.clear();
    }

    /// Takes everything gathered for `id` as a completed checkpoint.
    pub(crate) fn complete(&mut self, id: CheckpointId, timestamp_ms: u64) -> CompletedCheckpoint {
        let parts = self.pending.remove(&id).unwrap_or_default();
        let mut operators: BTreeMap<NodeId, Vec<(SubtaskIndex, OperatorState)>> = BTreeMap::new();
        for (node, subtask, state) in parts.subtasks {
            operators.entry(node).or_default().push((subtask, state));
        }
        let operators = operators
            .into_iter()
            .map(|(node, mut states)| {
                states.sort_by_key(|(s, _)| *s);
                (node, states.into_iter().map(|(_, st)| st).collect())
            })
            .collect();
        CompletedCheckpoint {
            id,
            timestamp_ms,
            operators: Arc::new(operators),
            coordinators: Arc::new(parts.coordinators),
            location: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(tag: u8) -> OperatorState {
        let mut s = OperatorState::default();
        s.push(vec![tag]);
        s
    }

    #[test]
    fn groups_by_operator_in_subtask_order() {
        let mut p = PendingStates::default();
        let c = CheckpointId(1);
        p.add_task_states(c, vec![(NodeId(2), 1, state(21)), (NodeId(0), 1, state(1))]);
        p.add_task_states(c, vec![(NodeId(2), 0, state(20)), (NodeId(0), 0, state(0))]);
        p.add_coordinator_states(c, BTreeMap::from([(NodeId(2), vec![7])]));
        p.add_task_states(CheckpointId(2), vec![(NodeId(0), 0, state(99))]);
        let done = p.complete(c, 5);
        assert_eq!(done.id, c);
        assert_eq!(done.operators[&NodeId(0)], vec![state(0), state(1)]);
        assert_eq!(done.operators[&NodeId(2)], vec![state(20), state(21)]);
        assert_eq!(done.coordinators[&NodeId(2)], vec![7]);
        p.discard(CheckpointId(2));
        assert!(p.complete(CheckpointId(2), 6).operators.is_empty());
    }
}
