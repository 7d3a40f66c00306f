//! Operator events: the serialized messages exchanged between an operator coordinator and the
//! operator's subtasks.

use serde::{Deserialize, Serialize};

/// An event between an operator coordinator and one of the operator's subtasks, already encoded.
///
/// Events travel as bytes so that the same code works when the coordinator and the subtask live
/// in different processes; the coordinator crate offers typed encode/decode helpers on top.
///
/// ```
/// use sluice_core::OperatorEvent;
/// let e = OperatorEvent::new(vec![1, 2, 3]);
/// assert_eq!(e.payload(), &[1, 2, 3]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorEvent {
    payload: Vec<u8>,
}

impl OperatorEvent {
    /// An event carrying `payload`.
    pub fn new(payload: Vec<u8>) -> Self {
        OperatorEvent { payload }
    }

    /// The encoded event.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The encoded event, by value.
    pub fn into_payload(self) -> Vec<u8> {
        self.payload
    }
}
