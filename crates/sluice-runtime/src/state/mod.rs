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
//! [`ValueState`], [`MapState`], [`KeyedListState`] (keyed) and [`ListState`] (operator state)
//! are typed views that write and read these. Keyed state lives on the heap unless the job sets
//! a [`StateBackend`] with a store (`backend.rs`: the [`KeyedStore`] and [`KeyedStateBackend`]
//! traits), in which case the keyed views cache decoded values in front of it, sharing the
//! backend's [`ValueCaches`] (`value_cache.rs`).

pub(crate) mod ahead;
mod backend;
mod deferred;
pub(crate) mod fetched;
mod keyed;
mod list;
mod map_list;
mod map_stored;
mod redistribute;
mod ttl;
mod value;
mod value_cache;

#[cfg(test)]
pub(crate) use backend::{CountingBackend, CountingStore, memory_store};
pub use backend::{
    KeyedStateBackend, KeyedStore, MemoryStateBackend, StateBackend, StoreError, StoreFiles,
    StoreScope, StoreStats, StoreWrite, UploadAhead,
};
pub(crate) use backend::{key_prefix, prefix_end, state_id};
pub use deferred::Deferred;
pub(crate) use deferred::Part;
pub use fetched::{FetchedDir, dirs_of_processes_gone};
pub use list::ListState;
pub use map_list::{AttachKeyedState, KeyedListState, MapEntries, MapState};
pub(crate) use redistribute::redistribute;
pub use ttl::{
    Expiry, ExpiryRules, StateTtlConfig, StateVisibility, TtlUpdate, expired, strip_stamp,
};
pub use value::ValueState;
pub use value_cache::ValueCaches;

use crate::storage::StateFileHandle;
use serde::{Deserialize, Serialize};
use sluice_core::CheckpointId;

/// A failure to snapshot, restore or attach keyed state.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A key or value did not encode or decode.
    #[error(transparent)]
    Codec(#[from] sluice_core::codec::CodecError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The state is declared with a time-to-live and what is restored was taken without one,
    /// or the other way round: its values are stored differently (see [`StateTtlConfig`]).
    #[error(
        "state {state:?} was checkpointed {} a time-to-live and is declared {} one: declare it as it was checkpointed (or give it another name to start it empty)",
        if *.checkpointed_with_ttl { "with" } else { "without" },
        if *.checkpointed_with_ttl { "without" } else { "with" }
    )]
    TimeToLiveChanged {
        /// The state's name.
        state: String,
        /// Whether the checkpoint holds it with a time-to-live.
        checkpointed_with_ttl: bool,
    },
    /// The state's time-to-live is under a millisecond (Flink refuses one that is not
    /// positive).
    #[error(
        "state {state:?} has a time-to-live of {ttl:?}: it must be at least 1 ms (every value would expire as soon as written)"
    )]
    InvalidTimeToLive {
        /// The state's name.
        state: String,
        /// The time-to-live it was given.
        ttl: std::time::Duration,
    },
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

/// The files of a keyed store at a checkpoint (an incremental snapshot, Flink's
/// `IncrementalRemoteKeyedStateHandle`): its table files, kept once in checkpoint storage's
/// shared area and referred to by every checkpoint that still needs them, and its small files
/// inline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreHandle {
    /// The backend that wrote the files (`"rocksdb"`).
    pub backend: String,
    /// The key groups the store held.
    pub key_groups: std::ops::Range<usize>,
    /// The table files.
    pub shared: Vec<SharedFile>,
    /// The small files (manifest, options), whole.
    pub private: Vec<(String, Vec<u8>)>,
    /// A local directory holding every file by name: the store's own checkpoint until the
    /// checkpoint is persisted, or where a restore gathered them. Never written.
    #[serde(skip)]
    pub local: Option<std::path::PathBuf>,
    /// Set when a restore fetched the files from checkpoint storage into [`local`](Self::local),
    /// which then holds every shared file (a failover's handle from memory may name shared
    /// files that retention removed since). The directory is removed when the last clone of
    /// the handle is dropped. Never written.
    #[serde(skip)]
    pub fetched: Option<std::sync::Arc<FetchedDir>>,
}

/// One table file of a [`StoreHandle`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedFile {
    /// Its name in the store's directory.
    pub name: String,
    /// Its key in checkpoint storage, below `shared/`.
    pub key: String,
    /// Its length in bytes.
    pub length: u64,
    /// Whether checkpoint storage holds it already (an earlier completed checkpoint uploaded
    /// it). Never written.
    #[serde(skip)]
    pub uploaded: bool,
    /// Whether the store's upload ahead of it was in flight when the checkpoint listed it: the
    /// checkpoint joins that upload, or takes its result if it ended meanwhile, instead of
    /// writing the file again. Never written.
    #[serde(skip)]
    pub ahead: bool,
    /// Whether the store was restored after a failover from a checkpoint in memory that
    /// referred to this file under `key`: checkpoint storage most likely holds it still, so the
    /// checkpoint writes it only if storage lacks it (retention may have removed it since).
    /// Never written.
    #[serde(skip)]
    pub restored: bool,
}

impl StoreHandle {
    /// The files as one local directory, for opening a store from them. The shared files are
    /// known to be in checkpoint storage when the restore fetched them from there, and only
    /// likely to be when the handle comes from memory (a failover's).
    pub fn local_files(&self) -> Option<StoreFiles> {
        let dir = self.local.clone()?;
        let mut files: Vec<(String, u64)> = self
            .shared
            .iter()
            .map(|f| (f.name.clone(), f.length))
            .collect();
        files.extend(
            self.private
                .iter()
                .map(|(n, b)| (n.clone(), b.len() as u64)),
        );
        let keys: Vec<(String, String)> = self
            .shared
            .iter()
            .map(|f| (f.name.clone(), f.key.clone()))
            .collect();
        let (shared, restored_shared) = if self.fetched.is_some() {
            (keys, Vec::new())
        } else {
            (Vec::new(), keys)
        };
        Some(StoreFiles {
            dir,
            files,
            key_groups: self.key_groups.clone(),
            shared,
            restored_shared,
        })
    }
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
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct OperatorState {
    entries: Vec<Vec<u8>>,
    keyed: Vec<KeyGroupEntry>,
    /// The operator had ended its input when this state was taken (Flink's
    /// `FINISHED_ON_RESTORE`): restored, it does not end its input again.
    finished: bool,
    /// Broadcast state, the same on every subtask.
    broadcast: Vec<BroadcastEntry>,
    /// The files of the subtask's keyed store, when its snapshots are incremental.
    stores: Vec<StoreHandle>,
    /// Where this state is stored whole, when known: a checkpoint's state file. Never written.
    #[serde(skip)]
    stored_in: Option<(CheckpointId, StateFileHandle)>,
    /// The state's entries are not here but in checkpoint storage (a stub: see `deferred.rs`).
    /// Never written.
    #[serde(skip)]
    deferred: Option<Box<Deferred>>,
}

impl PartialEq for OperatorState {
    /// Two states are equal when they hold the same state; where else it is stored does not
    /// matter.
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
            && self.keyed == other.keyed
            && self.finished == other.finished
            && self.broadcast == other.broadcast
            && self.stores == other.stores
            && self.deferred == other.deferred
    }
}

impl Eq for OperatorState {}

/// [`OperatorState`] as checkpoints wrote it before keyed stores existed; still read.
#[derive(Deserialize)]
struct OperatorStateV2 {
    entries: Vec<Vec<u8>>,
    keyed: Vec<KeyGroupEntry>,
    finished: bool,
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
            Err(e) => match sluice_core::codec::decode::<OperatorStateV2>(bytes) {
                Ok(old) => Ok(OperatorState {
                    entries: old.entries,
                    keyed: old.keyed,
                    finished: old.finished,
                    broadcast: old.broadcast,
                    ..OperatorState::default()
                }),
                Err(_) => match sluice_core::codec::decode::<OperatorStateV1>(bytes) {
                    Ok(old) => Ok(OperatorState {
                        entries: old.entries,
                        keyed: old.keyed,
                        finished: old.finished,
                        ..OperatorState::default()
                    }),
                    Err(_) => Err(e),
                },
            },
        }
    }

    /// The files of the subtask's keyed store (incremental snapshots).
    pub fn store_handles(&self) -> &[StoreHandle] {
        &self.stores
    }

    /// The files of the subtask's keyed store, mutably (checkpoint storage fills in where they
    /// are).
    pub(crate) fn store_handles_mut(&mut self) -> &mut Vec<StoreHandle> {
        &mut self.stores
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
        self.entries.is_empty()
            && self.keyed.is_empty()
            && self.broadcast.is_empty()
            && self.stores.is_empty()
            && self.deferred.is_none()
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

    pub(crate) fn into_parts(
        self,
    ) -> (
        Vec<Vec<u8>>,
        Vec<KeyGroupEntry>,
        Vec<BroadcastEntry>,
        Vec<StoreHandle>,
    ) {
        (self.entries, self.keyed, self.broadcast, self.stores)
    }

    pub(crate) fn from_parts(
        entries: Vec<Vec<u8>>,
        keyed: Vec<KeyGroupEntry>,
        broadcast: Vec<BroadcastEntry>,
        stores: Vec<StoreHandle>,
    ) -> Self {
        OperatorState {
            entries,
            keyed,
            finished: false,
            broadcast,
            stores,
            ..OperatorState::default()
        }
    }

    /// Records that this state is stored whole in state file `handle` of checkpoint
    /// `checkpoint` (a checkpoint read back, or a task manager's acknowledgement).
    pub(crate) fn stored_at(&mut self, checkpoint: CheckpointId, handle: StateFileHandle) {
        self.stored_in = Some((checkpoint, handle));
    }

    /// The state's stub (see `deferred.rs`): its keyed stores' handles and finished flag, its
    /// entries left in checkpoint storage, where [`deferred`](Self::deferred) says. `None` when
    /// this state is not known to be stored (it travels whole).
    pub(crate) fn stub(&self) -> Option<OperatorState> {
        if self.deferred.is_some() {
            return Some(self.clone());
        }
        let (checkpoint, handle) = self.stored_in.clone()?;
        let mut stub = self.without_entries();
        stub.deferred = Some(Box::new(Deferred::file(checkpoint, handle)));
        Some(stub)
    }

    /// This state without its list, keyed and broadcast entries: what a task manager sends up
    /// once it stored the state itself.
    pub(crate) fn without_entries(&self) -> OperatorState {
        OperatorState {
            finished: self.finished,
            stores: self.stores.clone(),
            ..OperatorState::default()
        }
    }

    /// Makes this state a stub whose entries are where `deferred` says.
    pub(crate) fn defer(&mut self, deferred: Deferred) {
        self.deferred = Some(Box::new(deferred));
    }

    /// Where this state's entries are, when they are not here.
    pub(crate) fn deferred(&self) -> Option<&Deferred> {
        self.deferred.as_deref()
    }

    /// Takes the [`Deferred`] out, leaving a state that claims to be whole.
    pub(crate) fn take_deferred(&mut self) -> Option<Deferred> {
        self.deferred.take().map(|d| *d)
    }
}
