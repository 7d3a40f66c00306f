//! [`SplitAssignmentTracker`]: which splits went to which subtask since the last completed
//! checkpoint, so that a subtask reset to a checkpoint gets back exactly the splits it was given
//! after it (Flink's `SplitAssignmentTracker`). A pure structure: no clock, no thread.

use sluice_core::{CheckpointId, SubtaskIndex};
use std::collections::BTreeMap;

type Assignment<S> = BTreeMap<SubtaskIndex, Vec<S>>;

/// Assignments grouped by the checkpoint they belong to.
///
/// Assignments are recorded as "uncheckpointed" until the next checkpoint is taken, and filed
/// under that checkpoint; when a checkpoint completes, everything filed under it or an earlier
/// one is dropped (the readers' checkpointed state holds those splits). A subtask reset to
/// checkpoint `c` takes back what it was assigned after `c`, in assignment order.
///
/// ```
/// use sluice_source::SplitAssignmentTracker;
/// use sluice_core::CheckpointId;
///
/// let mut t = SplitAssignmentTracker::default();
/// t.record_assignment(0, vec!["a"]);
/// t.on_checkpoint(CheckpointId(1));
/// t.record_assignment(0, vec!["b"]);
/// t.on_checkpoint(CheckpointId(2));
/// t.record_assignment(0, vec!["c"]);
/// t.on_checkpoint_complete(CheckpointId(1));
/// // Reset to checkpoint 1: "b" (filed under 2) and "c" (not checkpointed) come back.
/// assert_eq!(t.take_uncheckpointed(0, CheckpointId(1)), vec!["b", "c"]);
/// assert!(t.take_uncheckpointed(0, CheckpointId(1)).is_empty());
/// ```
#[derive(Debug, Clone)]
pub struct SplitAssignmentTracker<S> {
    by_checkpoint: BTreeMap<CheckpointId, Assignment<S>>,
    uncheckpointed: Assignment<S>,
}

impl<S> Default for SplitAssignmentTracker<S> {
    fn default() -> Self {
        SplitAssignmentTracker {
            by_checkpoint: BTreeMap::new(),
            uncheckpointed: BTreeMap::new(),
        }
    }
}

impl<S> SplitAssignmentTracker<S> {
    /// `splits` were assigned to `subtask`.
    pub fn record_assignment(&mut self, subtask: SubtaskIndex, splits: Vec<S>) {
        if !splits.is_empty() {
            self.uncheckpointed
                .entry(subtask)
                .or_default()
                .extend(splits);
        }
    }

    /// Checkpoint `checkpoint` is taken: what was assigned so far belongs to it.
    pub fn on_checkpoint(&mut self, checkpoint: CheckpointId) {
        let taken = std::mem::take(&mut self.uncheckpointed);
        if !taken.is_empty() {
            self.by_checkpoint.insert(checkpoint, taken);
        }
    }

    /// Checkpoint `checkpoint` completed: assignments filed under it or earlier are forgotten.
    pub fn on_checkpoint_complete(&mut self, checkpoint: CheckpointId) {
        self.by_checkpoint = self
            .by_checkpoint
            .split_off(&CheckpointId(checkpoint.0 + 1));
    }

    /// Takes (and forgets) the splits assigned to `subtask` after checkpoint `restored`: those
    /// filed under later checkpoints, then the uncheckpointed ones, in assignment order.
    pub fn take_uncheckpointed(&mut self, subtask: SubtaskIndex, restored: CheckpointId) -> Vec<S> {
        let mut out = Vec::new();
        for (_, assignment) in self.by_checkpoint.range_mut(CheckpointId(restored.0 + 1)..) {
            if let Some(splits) = assignment.remove(&subtask) {
                out.extend(splits);
            }
        }
        self.by_checkpoint.retain(|_, a| !a.is_empty());
        if let Some(splits) = self.uncheckpointed.remove(&subtask) {
            out.extend(splits);
        }
        out
    }

    /// How many splits are tracked in all (for tests and metrics).
    pub fn len(&self) -> usize {
        let filed: usize = self
            .by_checkpoint
            .values()
            .flat_map(|a| a.values())
            .map(Vec::len)
            .sum();
        filed + self.uncheckpointed.values().map(Vec::len).sum::<usize>()
    }

    /// Whether nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Assign(usize),
        Checkpoint,
        Complete(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0usize..3).prop_map(Op::Assign),
            Just(Op::Checkpoint),
            (1u64..10).prop_map(Op::Complete),
        ]
    }

    proptest! {
        /// Resetting a subtask to a checkpoint `c` that completed returns exactly the splits
        /// assigned to it after `c` was taken, in order, whatever happened in between.
        #[test]
        fn a_reset_returns_exactly_what_was_assigned_after_the_checkpoint(
            ops in proptest::collection::vec(op(), 0..60),
            subtask in 0usize..3,
        ) {
            let mut t = SplitAssignmentTracker::default();
            let mut next_split = 0u32;
            let mut next_checkpoint = 1u64;
            // The model: every assignment with the checkpoint it belongs to (taken after it).
            let mut log: Vec<(usize, u32, u64)> = Vec::new();
            let mut completed = 0u64;
            for o in ops {
                match o {
                    Op::Assign(s) => {
                        t.record_assignment(s, vec![next_split]);
                        log.push((s, next_split, next_checkpoint));
                        next_split += 1;
                    }
                    Op::Checkpoint => {
                        t.on_checkpoint(CheckpointId(next_checkpoint));
                        next_checkpoint += 1;
                    }
                    Op::Complete(c) if c < next_checkpoint => {
                        t.on_checkpoint_complete(CheckpointId(c));
                        completed = completed.max(c);
                    }
                    Op::Complete(_) => {}
                }
            }
            let expected: Vec<u32> = log
                .iter()
                .filter(|(s, _, belongs)| *s == subtask && *belongs > completed)
                .map(|(_, split, _)| *split)
                .collect();
            prop_assert_eq!(t.take_uncheckpointed(subtask, CheckpointId(completed)), expected);
            prop_assert!(t.take_uncheckpointed(subtask, CheckpointId(completed)).is_empty());
        }
    }
}
