//! The one binary codec of sluice, for state, checkpoints and operator events.
//!
//! Everything sluice persists or sends between a coordinator and its subtasks is encoded with
//! `postcard` over serde: compact, fast, with a wire format that is stable across its 1.x
//! releases. Keeping the choice in one place means a later change of codec is one edit.

use serde::{Serialize, de::DeserializeOwned};

/// Encoding or decoding failed.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct CodecError {
    context: &'static str,
    #[source]
    source: postcard::Error,
}

/// Encodes `value` to bytes.
///
/// ```
/// let bytes = sluice_core::codec::encode(&(7u32, "seven".to_string())).unwrap();
/// let back: (u32, String) = sluice_core::codec::decode(&bytes).unwrap();
/// assert_eq!(back, (7, "seven".to_string()));
/// ```
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    postcard::to_stdvec(value).map_err(|source| CodecError {
        context: "cannot encode value",
        source,
    })
}

/// Appends the encoding of `value` to `out` (what [`encode`] returns, without a new buffer).
///
/// ```
/// let mut out = vec![9];
/// sluice_core::codec::encode_into(&7u32, &mut out).unwrap();
/// assert_eq!(out, [9, 7]);
/// ```
pub fn encode_into<T: Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
    let buf = std::mem::take(out);
    *out = postcard::to_extend(value, buf).map_err(|source| CodecError {
        context: "cannot encode value",
        source,
    })?;
    Ok(())
}

/// Decodes a value from bytes produced by [`encode`]. Trailing bytes are an error.
///
/// ```
/// assert!(sluice_core::codec::decode::<u64>(&[0xff]).is_err());
/// ```
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, rest) = postcard::take_from_bytes(bytes).map_err(|source| CodecError {
        context: "cannot decode value",
        source,
    })?;
    if rest.is_empty() {
        Ok(value)
    } else {
        Err(CodecError {
            context: "trailing bytes after value",
            source: postcard::Error::DeserializeBadEncoding,
        })
    }
}
