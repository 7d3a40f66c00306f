//! Operator state as the runtime carries it between a snapshot and a restore.
//!
//! An operator's state is a list of opaque entries. When a job is restored at the same
//! parallelism each subtask gets back exactly the entries it wrote; when the parallelism changed,
//! the entries of all old subtasks are dealt out to the new ones (Flink's "list state"
//! redistribution), so an operator should write one entry per independent piece of state (for
//! example one per in-flight request) rather than one blob.

use serde::{Deserialize, Serialize};

/// The state of one operator subtask: a list of encoded entries.
///
/// ```
/// use sluice_runtime::OperatorState;
/// let mut s = OperatorState::default();
/// s.push(vec![1, 2]);
/// s.push(vec![3]);
/// assert_eq!(s.entries().len(), 2);
/// assert!(!s.is_empty());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorState {
    entries: Vec<Vec<u8>>,
}

impl OperatorState {
    /// State made of `entries`.
    pub fn from_entries(entries: Vec<Vec<u8>>) -> Self {
        OperatorState { entries }
    }

    /// Appends one entry.
    pub fn push(&mut self, entry: Vec<u8>) {
        self.entries.push(entry);
    }

    /// The entries, in the order they were written.
    pub fn entries(&self) -> &[Vec<u8>] {
        &self.entries
    }

    /// The entries, by value.
    pub fn into_entries(self) -> Vec<Vec<u8>> {
        self.entries
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}
