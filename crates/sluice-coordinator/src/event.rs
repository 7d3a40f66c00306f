//! Typed operator events: encode a serde value into an [`OperatorEvent`] and back, with the one
//! codec of sluice (`sluice_core::codec`), so the same events work across processes later.

use serde::{Serialize, de::DeserializeOwned};
use sluice_core::OperatorEvent;
use sluice_core::codec::{self, CodecError};

/// Encodes a typed event for a gateway or for `handle_event_from_operator`.
///
/// Each operator pair (a coordinator and its operator) defines its own event enum; both sides
/// encode and decode it with these two functions.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use sluice_coordinator::{decode_event, encode_event};
///
/// #[derive(Debug, PartialEq, Serialize, Deserialize)]
/// enum Progress { Report { processed: u64 }, Total(u64) }
///
/// let e = encode_event(&Progress::Report { processed: 42 }).unwrap();
/// assert_eq!(decode_event::<Progress>(&e).unwrap(), Progress::Report { processed: 42 });
/// ```
pub fn encode_event<T: Serialize + ?Sized>(event: &T) -> Result<OperatorEvent, CodecError> {
    codec::encode(event).map(OperatorEvent::new)
}

/// Decodes a typed event encoded with [`encode_event`].
///
/// ```
/// use sluice_coordinator::decode_event;
/// let garbage = sluice_core::OperatorEvent::new(vec![0xff]);
/// assert!(decode_event::<u64>(&garbage).is_err());
/// ```
pub fn decode_event<T: DeserializeOwned>(event: &OperatorEvent) -> Result<T, CodecError> {
    codec::decode(event.payload())
}
