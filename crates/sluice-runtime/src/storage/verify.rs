//! Reading a checkpoint back, as pure checks over bytes already read: the metadata decoded and
//! checked against the job, then every state file it lists checked against the metadata. The
//! layout (`layout.rs`) reads the blobs from whatever [`BlobStore`](super::BlobStore) it runs
//! over and hands the bytes to these two functions, so that every backend refuses the same
//! damage with the same errors.

use super::format::Header;
use super::{CheckpointMetadata, Corruption, RestoredCheckpoint, StorageError};
use sluice_core::{CheckpointId, codec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Decodes the metadata payload read from `meta_path` and checks it: written by the job with
/// `fingerprint`, of checkpoint `expected_id` (when the caller knows which one it asked for),
/// and consistent in itself.
pub(crate) fn decode_metadata(
    meta_path: &Path,
    payload: &[u8],
    expected_id: Option<CheckpointId>,
    fingerprint: &str,
) -> Result<CheckpointMetadata, StorageError> {
    let corrupt = |reason| StorageError::Corrupt {
        path: meta_path.to_path_buf(),
        reason,
    };
    let metadata: CheckpointMetadata = match codec::decode(payload) {
        Ok(m) => m,
        Err(e) => codec::decode::<super::metadata::CheckpointMetadataV1>(payload)
            .map(CheckpointMetadata::from)
            .map_err(|_| corrupt(Corruption::Undecodable(e.to_string())))?,
    };
    if metadata.job_fingerprint != fingerprint {
        return Err(StorageError::FingerprintMismatch {
            path: meta_path.to_path_buf(),
            expected: fingerprint.to_owned(),
            found: metadata.job_fingerprint,
        });
    }
    if let Some(id) = expected_id.filter(|id| *id != metadata.checkpoint_id) {
        let reason = format!(
            "the directory is checkpoint {id} but the metadata is of checkpoint {}",
            metadata.checkpoint_id
        );
        return Err(corrupt(Corruption::Inconsistent(reason)));
    }
    metadata
        .check()
        .map_err(|reason| corrupt(Corruption::Inconsistent(reason)))?;
    Ok(metadata)
}

/// The checkpoint at `location` with `metadata` (from [`decode_metadata`]): every state file
/// the metadata lists is read by `read` (its file name → the header and payload, whose
/// framing and checksum `read` has checked) and must have the length and checksum the metadata
/// recorded.
/// Checks that the file at `path` with `header` is the one the metadata listed: `length` bytes
/// with checksum `crc32`.
pub(crate) fn check_listed(
    path: &Path,
    header: &Header,
    length: u64,
    crc32: u32,
) -> Result<(), StorageError> {
    if header.len != length || header.crc32 != crc32 {
        let describe = |len: u64, crc: u32| format!("{len} bytes with crc32 {crc:#010x}");
        return Err(StorageError::Corrupt {
            path: path.to_path_buf(),
            reason: Corruption::MetadataMismatch {
                expected: describe(length, crc32),
                found: describe(header.len, header.crc32),
            },
        });
    }
    Ok(())
}

pub(crate) fn assemble(
    location: PathBuf,
    metadata: CheckpointMetadata,
    mut read: impl FnMut(&str) -> Result<(Header, Vec<u8>), StorageError>,
) -> Result<RestoredCheckpoint, StorageError> {
    let mut read_checked = |file_name: &str, length: u64, crc32: u32| {
        let (header, payload) = read(file_name)?;
        check_listed(&location.join(file_name), &header, length, crc32)?;
        Ok::<_, StorageError>(payload)
    };
    let mut states = BTreeMap::new();
    for f in &metadata.state_files {
        let payload = read_checked(&f.file_name, f.length, f.crc32)?;
        states.insert((f.node, f.subtask), payload);
    }
    let mut coordinator_states = BTreeMap::new();
    for c in &metadata.coordinator_states {
        let payload = read_checked(&c.file_name, c.length, c.crc32)?;
        coordinator_states.insert(c.node, payload);
    }
    Ok(RestoredCheckpoint {
        location,
        metadata,
        states,
        coordinator_states,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::CheckpointId;

    #[test]
    fn metadata_of_another_job_or_checkpoint_is_refused() {
        let metadata = CheckpointMetadata {
            job_fingerprint: "job-v1".into(),
            checkpoint_id: CheckpointId(3),
            timestamp_ms: 0,
            operators: vec![],
            state_files: vec![],
            coordinator_states: vec![],
            shared_files: vec![],
        };
        let bytes = codec::encode(&metadata).unwrap();
        let path = Path::new("s3://bucket/chk-3/_metadata");
        assert!(decode_metadata(path, &bytes, Some(CheckpointId(3)), "job-v1").is_ok());
        let other_job = decode_metadata(path, &bytes, None, "job-v2").unwrap_err();
        assert!(matches!(
            other_job,
            StorageError::FingerprintMismatch { .. }
        ));
        let other_id = decode_metadata(path, &bytes, Some(CheckpointId(4)), "job-v1").unwrap_err();
        assert!(matches!(
            other_id,
            StorageError::Corrupt {
                reason: Corruption::Inconsistent(_),
                ..
            }
        ));
        let garbage = decode_metadata(path, b"\xff\xff", None, "job-v1").unwrap_err();
        assert_eq!(garbage.path(), Some(path));
    }
}
