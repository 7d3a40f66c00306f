//! The one binary codec of sluice, for state, checkpoints and operator events.
//!
//! Everything sluice persists or sends between a coordinator and its subtasks is encoded with
//! `postcard` over serde: compact, fast, with a wire format that is stable across its 1.x
//! releases. Keeping the choice in one place means a later change of codec is one edit.

use postcard::ser_flavors::Flavor;
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
    let mut out = Vec::new();
    encode_into(value, &mut out)?;
    Ok(out)
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
    *out = postcard::serialize_with_flavor(value, Appender(buf)).map_err(|source| CodecError {
        context: "cannot encode value",
        source,
    })?;
    Ok(())
}

/// Appends to a `Vec`, copying the short pieces postcard writes (a varint is 1 to 10 bytes)
/// byte by byte: postcard's own `Vec` flavors copy every piece with a call to `memmove`, which
/// cost a third of the encoding time of a batch of small records (issue 15's `cluster`
/// benchmark).
struct Appender(Vec<u8>);

impl Flavor for Appender {
    type Output = Vec<u8>;

    #[inline(always)]
    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        self.0.push(byte);
        Ok(())
    }

    #[inline(always)]
    fn try_extend(&mut self, bytes: &[u8]) -> postcard::Result<()> {
        if bytes.len() <= 16 {
            for &b in bytes {
                self.0.push(b);
            }
        } else {
            self.0.extend_from_slice(bytes);
        }
        Ok(())
    }

    fn finalize(self) -> postcard::Result<Vec<u8>> {
        Ok(self.0)
    }
}

/// Decodes the value at the start of `bytes` and returns it with the bytes after it: how a
/// buffer holding several encodings one after another (as [`encode_into`] appends them) is
/// read.
///
/// ```
/// let mut buf = Vec::new();
/// sluice_core::codec::encode_into(&1u32, &mut buf).unwrap();
/// sluice_core::codec::encode_into(&"two", &mut buf).unwrap();
/// let (one, rest) = sluice_core::codec::decode_first::<u32>(&buf).unwrap();
/// let (two, rest) = sluice_core::codec::decode_first::<String>(rest).unwrap();
/// assert_eq!((one, two.as_str(), rest.len()), (1, "two", 0));
/// ```
pub fn decode_first<T: DeserializeOwned>(bytes: &[u8]) -> Result<(T, &[u8]), CodecError> {
    postcard::take_from_bytes(bytes).map_err(|source| CodecError {
        context: "cannot decode value",
        source,
    })
}

/// Decodes a value from bytes produced by [`encode`]. Trailing bytes are an error.
///
/// ```
/// assert!(sluice_core::codec::decode::<u64>(&[0xff]).is_err());
/// ```
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, rest) = decode_first(bytes)?;
    if rest.is_empty() {
        Ok(value)
    } else {
        Err(CodecError {
            context: "trailing bytes after value",
            source: postcard::Error::DeserializeBadEncoding,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The faster appender writes exactly postcard's own bytes: the wire format is
        /// postcard's, whoever encodes.
        #[test]
        fn appender_writes_postcards_bytes(
            records in proptest::collection::vec((any::<u64>(), any::<i32>(), ".{0,40}"), 0..50),
            prefix in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let mut out = prefix.clone();
            encode_into(&records, &mut out).unwrap();
            let mut expected = prefix.clone();
            expected.extend(postcard::to_stdvec(&records).unwrap());
            prop_assert_eq!(&out, &expected);
            let back: Vec<(u64, i32, String)> = decode(&out[prefix.len()..]).unwrap();
            prop_assert_eq!(back, records);
        }
    }
}
