//! [`ListState`]: a typed list of items stored as one list entry per item.

use super::OperatorState;
use serde::{Serialize, de::DeserializeOwned};
use sluice_core::codec::{self, CodecError};

/// Operator state that is a list of items, redistributed item by item on rescale.
///
/// ```
/// use sluice_runtime::state::ListState;
/// use sluice_runtime::OperatorState;
///
/// let mut offsets: ListState<u64> = ListState::default();
/// offsets.push(7);
/// offsets.push(9);
/// let mut snapshot = OperatorState::default();
/// offsets.snapshot_into(&mut snapshot).unwrap();
/// let restored: ListState<u64> = ListState::restore_from(&snapshot).unwrap();
/// assert_eq!(restored.items(), &[7, 9]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListState<T> {
    items: Vec<T>,
}

impl<T> Default for ListState<T> {
    fn default() -> Self {
        ListState { items: Vec::new() }
    }
}

impl<T: Serialize + DeserializeOwned> ListState<T> {
    /// Appends an item.
    pub fn push(&mut self, item: T) {
        self.items.push(item);
    }

    /// The items.
    pub fn items(&self) -> &[T] {
        &self.items
    }

    /// Removes every item.
    pub fn clear(&mut self) {
        self.items.clear();
    }

    /// Writes one list entry per item.
    pub fn snapshot_into(&self, state: &mut OperatorState) -> Result<(), CodecError> {
        for item in &self.items {
            state.push(codec::encode(item)?);
        }
        Ok(())
    }

    /// Reads every list entry of `state` as an item.
    pub fn restore_from(state: &OperatorState) -> Result<Self, CodecError> {
        let items = state
            .entries()
            .iter()
            .map(|e| codec::decode(e))
            .collect::<Result<_, _>>()?;
        Ok(ListState { items })
    }
}
