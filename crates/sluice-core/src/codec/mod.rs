//! The one binary codec of sluice, for state, checkpoints, operator events and the records that
//! cross processes in cluster mode.
//!
//! Everything is encoded in [postcard]'s wire format (1.x, stable): compact (integers as
//! varints, no field names), over serde. sluice writes and reads the format with its own
//! encoder and decoder (modules `ser` and `de`): postcard's own spend most of a small record's time
//! appending and reading one byte at a time through a generic buffer, and records crossing a
//! network are the hottest path of a cluster. Property tests check that the bytes are
//! postcard's, byte for byte, both ways. Keeping the choice in one place means a later change of
//! codec is one edit.
//!
//! [postcard]: https://docs.rs/postcard

mod de;
mod ser;

use serde::{Serialize, de::DeserializeOwned};

/// Encoding or decoding failed.
#[derive(Debug, thiserror::Error)]
#[error("{context}: {source}")]
pub struct CodecError {
    context: &'static str,
    #[source]
    source: WireError,
}

/// What is wrong with a value or its bytes.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    #[error("{0}")]
    Custom(String),
    #[error("the input ended in the middle of a value")]
    Eof,
    #[error("a malformed or out-of-range varint")]
    BadVarint,
    #[error("{0} is not a bool")]
    BadBool(u8),
    #[error("{0} is not an option's tag")]
    BadOption(u8),
    #[error("not a single UTF-8 character")]
    BadChar,
    #[error("a string that is not UTF-8")]
    BadUtf8,
    #[error("a sequence or map without a known length cannot be encoded")]
    LengthUnknown,
    #[error("the format needs the type to drive decoding ({0} is not supported)")]
    NeedsType(&'static str),
    #[error("trailing bytes after the value")]
    Trailing,
}

impl serde::ser::Error for WireError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        WireError::Custom(msg.to_string())
    }
}

impl serde::de::Error for WireError {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        WireError::Custom(msg.to_string())
    }
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
    let mut encoder = ser::Encoder {
        out: std::mem::take(out),
    };
    let encoded = value.serialize(&mut encoder);
    *out = encoder.out;
    encoded.map_err(|source| CodecError {
        context: "cannot encode value",
        source,
    })
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
    let mut decoder = de::Decoder { input: bytes };
    let value = T::deserialize(&mut decoder).map_err(|source| CodecError {
        context: "cannot decode value",
        source,
    })?;
    Ok((value, decoder.input))
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
            context: "cannot decode value",
            source: WireError::Trailing,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde::Deserialize;
    use std::collections::BTreeMap;

    /// Every shape of serde's data model.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    enum Shape {
        Unit,
        Newtype(i64),
        Tuple(u8, i16, u32),
        Struct { a: Option<u16>, b: String },
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Unit;

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Everything {
        b: bool,
        small: (i8, u8, i16, u16),
        words: (i32, u32, i64, u64),
        wide: (i128, u128),
        floats: (f32, f64),
        c: char,
        s: String,
        bytes: Vec<u8>,
        opt: Option<Box<Everything>>,
        unit: (),
        unit_struct: Unit,
        shapes: Vec<Shape>,
        map: BTreeMap<String, Vec<u64>>,
        newtype: Wrapper,
    }

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Wrapper(u64);

    fn shape() -> impl Strategy<Value = Shape> {
        prop_oneof![
            Just(Shape::Unit),
            any::<i64>().prop_map(Shape::Newtype),
            (any::<u8>(), any::<i16>(), any::<u32>()).prop_map(|(a, b, c)| Shape::Tuple(a, b, c)),
            (any::<Option<u16>>(), ".{0,12}").prop_map(|(a, b)| Shape::Struct { a, b }),
        ]
    }

    fn leaf() -> impl Strategy<Value = Everything> {
        (
            any::<bool>(),
            any::<(i8, u8, i16, u16)>(),
            any::<(i32, u32, i64, u64)>(),
            any::<(i128, u128)>(),
            (any::<f32>(), any::<f64>()).prop_filter("NaN never equals itself", |(a, b)| {
                !a.is_nan() && !b.is_nan()
            }),
            any::<char>(),
            ".{0,20}",
            proptest::collection::vec(any::<u8>(), 0..40),
            proptest::collection::vec(shape(), 0..6),
            proptest::collection::btree_map(
                ".{0,6}",
                proptest::collection::vec(any::<u64>(), 0..4),
                0..4,
            ),
            any::<u64>(),
        )
            .prop_map(
                |(b, small, words, wide, floats, c, s, bytes, shapes, map, n)| Everything {
                    b,
                    small,
                    words,
                    wide,
                    floats,
                    c,
                    s,
                    bytes,
                    opt: None,
                    unit: (),
                    unit_struct: Unit,
                    shapes,
                    map,
                    newtype: Wrapper(n),
                },
            )
    }

    fn everything() -> impl Strategy<Value = Everything> {
        (leaf(), proptest::option::of(leaf())).prop_map(|(mut outer, inner)| {
            outer.opt = inner.map(Box::new);
            outer
        })
    }

    proptest! {
        /// The encoder writes postcard's bytes exactly, and the decoder reads postcard's bytes
        /// back into the value: the wire format is postcard's, whoever writes or reads it.
        #[test]
        fn the_bytes_are_postcards_both_ways(
            value in everything(),
            prefix in proptest::collection::vec(any::<u8>(), 0..8),
        ) {
            let theirs = postcard::to_stdvec(&value).unwrap();
            let mut ours = prefix.clone();
            encode_into(&value, &mut ours).unwrap();
            prop_assert_eq!(&ours[..prefix.len()], &prefix[..]);
            prop_assert_eq!(&ours[prefix.len()..], &theirs[..]);
            let back: Everything = decode(&theirs).unwrap();
            prop_assert_eq!(&back, &value);
            let theirs_back: Everything = postcard::from_bytes(&ours[prefix.len()..]).unwrap();
            prop_assert_eq!(&theirs_back, &value);
        }

        /// Integers at every size, where varints change length: the same bytes as postcard.
        #[test]
        fn integers_at_every_width(shift in 0u32..64, below in 0u64..3) {
            let v = (1u64 << shift).saturating_sub(below);
            for bytes in [
                (encode(&v).unwrap(), postcard::to_stdvec(&v).unwrap()),
                (encode(&(v as u32)).unwrap(), postcard::to_stdvec(&(v as u32)).unwrap()),
                (encode(&(v as u16)).unwrap(), postcard::to_stdvec(&(v as u16)).unwrap()),
                (encode(&(v as i64)).unwrap(), postcard::to_stdvec(&(v as i64)).unwrap()),
                (encode(&(v as i64).wrapping_neg()).unwrap(), postcard::to_stdvec(&(v as i64).wrapping_neg()).unwrap()),
            ] {
                prop_assert_eq!(&bytes.0, &bytes.1);
            }
            prop_assert_eq!(decode::<u64>(&encode(&v).unwrap()).unwrap(), v);
            prop_assert_eq!(decode::<u32>(&encode(&(v as u32)).unwrap()).unwrap(), v as u32);
            prop_assert_eq!(decode::<u16>(&encode(&(v as u16)).unwrap()).unwrap(), v as u16);
            prop_assert_eq!(decode::<i64>(&encode(&(v as i64).wrapping_neg()).unwrap()).unwrap(), (v as i64).wrapping_neg());
        }

        /// Whatever bytes arrive, decoding returns a value or an error: it never panics, and
        /// it agrees with postcard on which inputs are values.
        #[test]
        fn any_bytes_decode_or_fail_like_postcard(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let ours = decode::<(u16, Vec<(u32, i64)>, Option<String>)>(&bytes).ok();
            let theirs = postcard::from_bytes::<(u16, Vec<(u32, i64)>, Option<String>)>(&bytes)
                .ok()
                .filter(|_| postcard::take_from_bytes::<(u16, Vec<(u32, i64)>, Option<String>)>(&bytes)
                    .is_ok_and(|(_, rest)| rest.is_empty()));
            prop_assert_eq!(ours, theirs);
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        let e = decode::<u32>(&[0x80]).unwrap_err().to_string();
        assert!(e.contains("ended"), "{e}");
        let e = decode::<u16>(&[0xff, 0xff, 0x04]).unwrap_err().to_string();
        assert!(e.contains("varint"), "{e}");
        let e = decode::<bool>(&[2]).unwrap_err().to_string();
        assert!(e.contains("bool"), "{e}");
        let e = decode::<u8>(&[1, 2]).unwrap_err().to_string();
        assert!(e.contains("trailing"), "{e}");
        struct Unsized;
        impl Serialize for Unsized {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq((0..3).filter(|_| true))
            }
        }
        let e = encode(&Unsized).unwrap_err().to_string();
        assert!(e.contains("length"), "{e}");
    }
}
