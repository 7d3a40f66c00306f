//! The checkpointed form of the operator's in-flight elements: one state entry per record or
//! watermark, in input order.
//!
//! A record entry carries the input, its event time (when it has one: a `TimedRecord`, a variant
//! added after the others so entries written before timestamps existed still decode), how many attempts had ended before the snapshot, and how
//! much of its timeout budget was used, so a restore re-invokes it with the right attempt number
//! and the remaining budget. One entry per element lets a restore at another parallelism deal
//! the records out to any subtasks.

use serde::{Deserialize, Serialize};
use sluice_core::codec::{self, CodecError};
use std::time::Duration;

/// The version of the entry format, written first in every entry.
const FORMAT: u8 = 1;

#[derive(Serialize)]
enum StoredRef<'a, In> {
    Record {
        input: &'a In,
        attempts_done: u32,
        elapsed_us: u64,
    },
    Watermark(i64),
    TimedRecord {
        input: &'a In,
        timestamp: i64,
        attempts_done: u32,
        elapsed_us: u64,
    },
}

#[derive(Deserialize)]
enum Stored<In> {
    Record {
        input: In,
        attempts_done: u32,
        elapsed_us: u64,
    },
    Watermark(i64),
    TimedRecord {
        input: In,
        timestamp: i64,
        attempts_done: u32,
        elapsed_us: u64,
    },
}

/// One restored element.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RestoredElement<In> {
    /// A record to call again as attempt `attempts_done + 1`, `elapsed` into its timeout.
    Record {
        input: In,
        timestamp: Option<i64>,
        attempts_done: u32,
        elapsed: Duration,
    },
    /// A watermark at this timestamp.
    Watermark(i64),
}

/// Encodes a record entry.
pub(crate) fn encode_record<In: Serialize>(
    input: &In,
    timestamp: Option<i64>,
    attempts_done: u32,
    elapsed: Duration,
) -> Result<Vec<u8>, CodecError> {
    let elapsed_us = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    let stored = match timestamp {
        None => StoredRef::Record {
            input,
            attempts_done,
            elapsed_us,
        },
        Some(timestamp) => StoredRef::TimedRecord {
            input,
            timestamp,
            attempts_done,
            elapsed_us,
        },
    };
    codec::encode(&(FORMAT, stored))
}

/// Encodes a watermark entry.
pub(crate) fn encode_watermark(timestamp: i64) -> Result<Vec<u8>, CodecError> {
    codec::encode(&(FORMAT, StoredRef::<()>::Watermark(timestamp)))
}

/// Decodes an entry written by [`encode_record`] or [`encode_watermark`].
pub(crate) fn decode<In: for<'de> Deserialize<'de>>(
    bytes: &[u8],
) -> Result<RestoredElement<In>, String> {
    let (format, stored): (u8, Stored<In>) = codec::decode(bytes).map_err(|e| e.to_string())?;
    if format != FORMAT {
        return Err(format!(
            "entry format {format} is not supported (expected {FORMAT})"
        ));
    }
    Ok(match stored {
        Stored::Record {
            input,
            attempts_done,
            elapsed_us,
        } => RestoredElement::Record {
            input,
            timestamp: None,
            attempts_done,
            elapsed: Duration::from_micros(elapsed_us),
        },
        Stored::TimedRecord {
            input,
            timestamp,
            attempts_done,
            elapsed_us,
        } => RestoredElement::Record {
            input,
            timestamp: Some(timestamp),
            attempts_done,
            elapsed: Duration::from_micros(elapsed_us),
        },
        Stored::Watermark(t) => RestoredElement::Watermark(t),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip() {
        let r = encode_record(
            &("k".to_string(), 7u32),
            None,
            2,
            Duration::from_millis(1500),
        )
        .unwrap();
        assert_eq!(
            decode::<(String, u32)>(&r).unwrap(),
            RestoredElement::Record {
                input: ("k".to_string(), 7),
                timestamp: None,
                attempts_done: 2,
                elapsed: Duration::from_millis(1500),
            }
        );
        let t = encode_record(&("t".to_string(), 1u32), Some(-3), 0, Duration::ZERO).unwrap();
        assert_eq!(
            decode::<(String, u32)>(&t).unwrap(),
            RestoredElement::Record {
                input: ("t".to_string(), 1),
                timestamp: Some(-3),
                attempts_done: 0,
                elapsed: Duration::ZERO,
            }
        );
        let w = encode_watermark(-5).unwrap();
        assert_eq!(
            decode::<(String, u32)>(&w).unwrap(),
            RestoredElement::Watermark(-5)
        );
    }

    #[test]
    fn garbage_and_unknown_formats_are_errors() {
        assert!(decode::<u64>(&[0xff, 0xff]).is_err());
        let mut w = encode_watermark(1).unwrap();
        w[0] = 9;
        let err = decode::<u64>(&w).unwrap_err();
        assert!(err.contains("format 9"), "{err}");
    }
}
