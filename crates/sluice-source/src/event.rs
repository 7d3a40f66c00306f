//! The operator events between a source's readers and its coordinator, encoded with
//! `sluice_coordinator::encode_event`.

use serde::{Deserialize, Serialize};

/// From a reader to the coordinator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum ReaderEvent {
    /// The reader of the sending attempt is up.
    Register,
    /// The reader wants a split.
    RequestSplit,
    /// A custom event for the enumerator.
    Source(Vec<u8>),
}

/// From the coordinator to a reader.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum EnumeratorEvent<S> {
    /// New splits for the reader.
    AddSplits(Vec<S>),
    /// No more splits will come.
    NoMoreSplits,
    /// A custom event for the reader.
    Source(Vec<u8>),
}
