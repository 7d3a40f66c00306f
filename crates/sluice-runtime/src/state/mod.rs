//! Operator state as the runtime carries it between a snapshot and a restore, and typed helpers
//! over it.
//!
//! An operator's state has two parts:
//! - **list entries**: opaque byte strings. Restored at the same parallelism, each subtask gets
//!   back exactly what it wrote; at another parallelism, the entries of all old subtasks are split
//!   into contiguous, even shares (Flink's list-state redistribution), so an operator should write
//!   one entry per independent piece (for example one per in-flight request);
//! - **keyed entries**: byte strings tagged with a state name and a key group. At restore each goes
//!   to the subtask that owns its key group at the new parallelism, so keyed state follows its keys;
//! - **broadcast entries**: byte strings tagged with a state name, the same on every subtask (the
//!   broadcast state pattern). At another parallelism, new subtask `i` gets the broadcast entries
//!   of old subtask `i % old_parallelism`, as Flink hands out broadcast state.
//!
//! [`ValueState`], [`MapState`] and [`ListState`] are typed views that write and read these.
//! Keyed state lives on the heap unless the job sets a [`StateBackend`] with a store
//! (`backend.rs`: the [`KeyedStore`] and [`KeyedStateBackend`] traits), in which case
//! [`ValueState`] and [`MapState`] cache decoded values in front of it.

mod backend;
mod keyed;
mod list;
mod redistribute;

pub use backend::{
    KeyedStateBackend, KeyedStore, MemoryStateBackend, StateBackend, StoreError, StoreFiles,
    StoreScope, StoreStats, StoreWrite,
};
pub use keyed::{MapState, ValueState};
pub use list::ListState;
pub(crate) use redistribute::redistribute;

use serde::{Deserialize, Serialize};

/// A failure to snapshot, restore or attach keyed state.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A key or value did not encode or decode.
    #[error(transparent)]
    Codec(#[from] sluice_core::codec::CodecError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One keyed entry: all keys of one key group of one named state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyGroupEntry {
    /// The state's name within its operator.
    pub state: String,
    /// The key group, `0..max_parallelism`.
    pub key_group: u32,
    /// The encoded keys and values.
    pub data: Vec<u8>,
}

/// One broadcast entry: one named broadcast state of one subtask.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BroadcastEntry {
    /// The state's name within its operator.
    pub state: String,
    /// The encoded entries of the state.
    pub data: Vec<u8>,
}

/// The state of one operator subtask.
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
    keyed: Vec<KeyGroupEntry>,
    /// The operator had ended its input when this state was taken (Flink's
    /// `FINISHED_ON_RESTORE`): restored, it does not end its input again.
    finished: bool,
    /// Broadcast state, the same on every subtask.
    broadcast: Vec<BroadcastEntry>,
}

/// [`OperatorState`] as checkpoints wrote it before broadcast state existed; still read.
#[derive(Deserialize)]
struct OperatorStateV1 {
    entries: Vec<Vec<u8>>,
    keyed: Vec<KeyGroupEntry>,
    finished: bool,
}

impl OperatorState {
    /// State made of list `entries`.
    pub fn from_entries(entries: Vec<Vec<u8>>) -> Self {
        OperatorState {
            entries,
            ..OperatorState::default()
        }
    }

    /// Decodes a state written by [`codec::encode`](sluice_core::codec::encode), also in the
    /// layout of checkpoints taken before broadcast state existed.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Self, sluice_core::codec::CodecError> {
        match sluice_core::codec::decode::<OperatorState>(bytes) {
            Ok(s) => Ok(s),
            Err(e) => match sluice_core::codec::decode::<OperatorStateV1>(bytes) {
                Ok(old) => Ok(OperatorState {
                    entries: old.entries,
                    keyed: old.keyed,
                    finished: old.finished,
                    broadcast: Vec::new(),
                }),
                Err(_) => Err(e),
            },
        }
    }

    /// Appends one broadcast entry.
    pub(crate) fn push_broadcast(&mut self, entry: BroadcastEntry) {
        self.broadcast.push(entry);
    }

    /// The broadcast entries.
    pub fn broadcast_entries(&self) -> &[BroadcastEntry] {
        &self.broadcast
    }

    /// Appends one list entry.
    pub fn push(&mut self, entry: Vec<u8>) {
        self.entries.push(entry);
    }

    /// The list entries, in the order they were written.
    pub fn entries(&self) -> &[Vec<u8>] {
        &self.entries
    }

    /// The list entries, by value.
    pub(crate) fn into_entries(self) -> Vec<Vec<u8>> {
        self.entries
    }

    /// Appends one keyed entry.
    pub(crate) fn push_keyed(&mut self, entry: KeyGroupEntry) {
        self.keyed.push(entry);
    }

    /// The keyed entries.
    pub fn keyed_entries(&self) -> &[KeyGroupEntry] {
        &self.keyed
    }

    /// Whether there is no entry of any kind.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.keyed.is_empty() && self.broadcast.is_empty()
    }

    /// Whether the operator had ended its input (`end_input` ran) when this state was taken.
    /// An operator restored from such a state does not run `end_input` again, so what it
    /// emitted then is not emitted twice after a failover that follows the final checkpoint.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    pub(crate) fn mark_finished(&mut self) {
        self.finished = true;
    }

    pub(crate) fn into_parts(self) -> (Vec<Vec<u8>>, Vec<KeyGroupEntry>, Vec<BroadcastEntry>) {
        (self.entries, self.keyed, self.broadcast)
    }

    pub(crate) fn from_parts(
        entries: Vec<Vec<u8>>,
        keyed: Vec<KeyGroupEntry>,
        broadcast: Vec<BroadcastEntry>,
    ) -> Self {
        OperatorState {
            entries,
            keyed,
            finished: false,
            broadcast,
        }
    }
}
