//! The framing of checkpoint files and their names, used by the one layout every
//! [`CheckpointStorage`] backend shares (local directories, memory, object stores in
//! `sluice-object-store`), so that a checkpoint copied between them stays readable.
//!
//! Every file starts with a 20-byte header: 4 magic bytes (which kind of file), the format
//! version (u32), the payload length (u64) and the CRC32 of the payload (u32), all little-endian.
//! The payload follows. The checks here are pure, so every kind of damage is unit tested.
//!
//! ```text
//! use sluice_runtime::storage::format::{FileKind, frame, unframe};
//!
//! let file = frame(FileKind::State, b"offset=42");
//! let (header, payload) = unframe(FileKind::State, &file).unwrap();
//! assert_eq!((header.len, payload), (9, &b"offset=42"[..]));
//! // One flipped bit is caught by the checksum.
//! let mut damaged = file.clone();
//! damaged[25] ^= 1;
//! assert!(unframe(FileKind::State, &damaged).is_err());
//! ```
//!
//! [`CheckpointStorage`]: super::CheckpointStorage

use super::Corruption;
use sluice_core::{CheckpointId, NodeId, SubtaskIndex};

/// The length of the header.
pub(crate) const HEADER_LEN: usize = 20;
/// The format version this build writes and reads.
pub(crate) const VERSION: u32 = 2;
/// The name of a checkpoint's metadata file, written last.
pub(crate) const METADATA_FILE: &str = "_metadata";

/// Which kind of file a header belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FileKind {
    /// The state of one operator subtask.
    State,
    /// A checkpoint's metadata.
    Metadata,
}

impl FileKind {
    fn magic(self) -> [u8; 4] {
        match self {
            FileKind::State => *b"SLST",
            FileKind::Metadata => *b"SLMD",
        }
    }
}

/// A header that passed the checks that need no payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    /// The payload length.
    pub len: u64,
    /// The payload's CRC32.
    pub crc32: u32,
}

/// The header fields of `payload`.
pub(crate) fn header_of(payload: &[u8]) -> Header {
    Header {
        len: payload.len() as u64,
        crc32: crc32fast::hash(payload),
    }
}

/// The header bytes of a file of `kind` with a payload described by `header`.
pub(crate) fn encode_header(kind: FileKind, header: Header) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&kind.magic());
    h[4..8].copy_from_slice(&VERSION.to_le_bytes());
    h[8..16].copy_from_slice(&header.len.to_le_bytes());
    h[16..20].copy_from_slice(&header.crc32.to_le_bytes());
    h
}

/// Checks a header read from a file of `file_len` bytes.
pub(crate) fn check_header(
    kind: FileKind,
    header: &[u8; HEADER_LEN],
    file_len: u64,
) -> Result<Header, Corruption> {
    let mut magic = [0u8; 4];
    magic.copy_from_slice(&header[0..4]);
    if magic != kind.magic() {
        return Err(Corruption::BadMagic {
            found: magic,
            expected: kind.magic(),
        });
    }
    let version = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if version != VERSION {
        return Err(Corruption::UnsupportedVersion(version));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&header[8..16]);
    let len = u64::from_le_bytes(len);
    let crc32 = u32::from_le_bytes([header[16], header[17], header[18], header[19]]);
    let actual = file_len.saturating_sub(HEADER_LEN as u64);
    if actual < len {
        return Err(Corruption::Truncated {
            expected: len,
            actual,
        });
    }
    if actual > len {
        return Err(Corruption::Oversized {
            expected: len,
            actual,
        });
    }
    Ok(Header { len, crc32 })
}

/// Checks a payload against its header's checksum.
pub(crate) fn check_payload(header: Header, payload: &[u8]) -> Result<(), Corruption> {
    let computed = crc32fast::hash(payload);
    if computed == header.crc32 {
        Ok(())
    } else {
        Err(Corruption::ChecksumMismatch {
            stored: header.crc32,
            computed,
        })
    }
}

/// `payload` framed as a file of `kind`: its header, then the payload.
pub(crate) fn frame(kind: FileKind, payload: &[u8]) -> Vec<u8> {
    let mut file = Vec::with_capacity(HEADER_LEN + payload.len());
    file.extend_from_slice(&encode_header(kind, header_of(payload)));
    file.extend_from_slice(payload);
    file
}

/// Checks a whole framed file of `kind` (header, length and checksum) and returns its header
/// and payload.
pub(crate) fn unframe(kind: FileKind, file: &[u8]) -> Result<(Header, &[u8]), Corruption> {
    let Some((raw, payload)) = file.split_first_chunk::<HEADER_LEN>() else {
        return Err(Corruption::TooShort {
            len: file.len() as u64,
            header: HEADER_LEN as u64,
        });
    };
    let header = check_header(kind, raw, file.len() as u64)?;
    check_payload(header, payload)?;
    Ok((header, payload))
}

/// The directory name of checkpoint `id`.
pub(crate) fn checkpoint_dir_name(id: CheckpointId) -> String {
    format!("chk-{}", id.0)
}

/// The checkpoint id of a directory name, if it is one.
pub(crate) fn parse_checkpoint_dir_name(name: &str) -> Option<CheckpointId> {
    let digits = name.strip_prefix("chk-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().map(CheckpointId)
}

/// The file name of the state of one operator subtask.
pub fn state_file_name(node: NodeId, subtask: SubtaskIndex) -> String {
    format!("node-{}.subtask-{}.state", node.0, subtask)
}

/// The file name of the state of one operator's coordinator.
pub(crate) fn coordinator_file_name(node: NodeId) -> String {
    format!("node-{}.coordinator.state", node.0)
}

/// Whether `name` is a plain file name inside a checkpoint directory (no separator, not `.` or
/// `..`), so that metadata can never point outside its directory.
pub(crate) fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
        && name != METADATA_FILE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(kind: FileKind, payload: &[u8]) -> Vec<u8> {
        let mut f = encode_header(kind, header_of(payload)).to_vec();
        f.extend_from_slice(payload);
        f
    }

    fn check(kind: FileKind, file: &[u8]) -> Result<(), Corruption> {
        let mut h = [0u8; HEADER_LEN];
        h.copy_from_slice(&file[..HEADER_LEN]);
        let header = check_header(kind, &h, file.len() as u64)?;
        check_payload(header, &file[HEADER_LEN..])
    }

    #[test]
    fn an_intact_frame_passes() {
        let f = framed(FileKind::State, b"hello state");
        assert_eq!(check(FileKind::State, &f), Ok(()));
        let empty = framed(FileKind::Metadata, b"");
        assert_eq!(check(FileKind::Metadata, &empty), Ok(()));
    }

    #[test]
    fn every_damage_is_named() {
        let f = framed(FileKind::State, b"0123456789");
        // Magic of the other kind.
        assert!(matches!(
            check(FileKind::Metadata, &f),
            Err(Corruption::BadMagic { .. })
        ));
        let mut v = f.clone();
        v[4] = 9;
        assert_eq!(
            check(FileKind::State, &v),
            Err(Corruption::UnsupportedVersion(9))
        );
        assert_eq!(
            check(FileKind::State, &f[..f.len() - 3]),
            Err(Corruption::Truncated {
                expected: 10,
                actual: 7
            })
        );
        let mut long = f.clone();
        long.push(0);
        assert_eq!(
            check(FileKind::State, &long),
            Err(Corruption::Oversized {
                expected: 10,
                actual: 11
            })
        );
        let mut flipped = f.clone();
        flipped[HEADER_LEN + 4] ^= 0x01;
        assert!(matches!(
            check(FileKind::State, &flipped),
            Err(Corruption::ChecksumMismatch { .. })
        ));
        let mut bad_crc = f;
        bad_crc[17] ^= 0x80;
        assert!(matches!(
            check(FileKind::State, &bad_crc),
            Err(Corruption::ChecksumMismatch { .. })
        ));
    }

    #[test]
    fn checkpoint_dir_names_round_trip_and_reject_others() {
        assert_eq!(checkpoint_dir_name(CheckpointId(17)), "chk-17");
        assert_eq!(parse_checkpoint_dir_name("chk-17"), Some(CheckpointId(17)));
        for bad in [
            "chk-",
            "chk-1a",
            "chk--1",
            "chk-+1",
            "xchk-1",
            "chk-99999999999999999999",
        ] {
            assert_eq!(parse_checkpoint_dir_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn file_names_stay_inside_the_directory() {
        assert!(is_plain_file_name(&state_file_name(NodeId(3), 1)));
        for bad in ["", ".", "..", "../x", "a/b", "a\\b", METADATA_FILE] {
            assert!(!is_plain_file_name(bad), "{bad}");
        }
    }
}
