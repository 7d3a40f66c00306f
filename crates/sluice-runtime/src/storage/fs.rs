//! Blocking file-system helpers of the local storage: framed files written by atomic rename,
//! directory fsync, listing and removal of checkpoint directories. Only ever called from
//! `spawn_blocking` (or from synchronous configuration code).

use super::format::{self, FileKind, HEADER_LEN, Header, METADATA_FILE};
use super::{Corruption, StorageError};
use sluice_core::CheckpointId;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A name for a temporary file next to `final_path`, unique in this process.
pub(crate) fn temp_path(final_path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = final_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    final_path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Writes `payload` with its header to `final_path`: to a temporary file first, fsynced, then
/// renamed over `final_path`. The caller fsyncs the directory to make the rename durable.
/// Returns the payload's length and checksum.
pub(crate) fn write_framed(
    final_path: &Path,
    kind: FileKind,
    payload: &[u8],
) -> Result<Header, StorageError> {
    let header = format::header_of(payload);
    let tmp = temp_path(final_path);
    let result = (|| {
        let mut file = File::create(&tmp).map_err(|e| StorageError::io("create", &tmp, e))?;
        file.write_all(&format::encode_header(kind, header))
            .and_then(|()| file.write_all(payload))
            .map_err(|e| StorageError::io("write", &tmp, e))?;
        file.sync_all()
            .map_err(|e| StorageError::io("fsync", &tmp, e))?;
        fs::rename(&tmp, final_path).map_err(|e| StorageError::io("rename into", final_path, e))
    })();
    if result.is_err() {
        // Best effort: the temporary file is garbage either way and goes with its directory.
        let _ = fs::remove_file(&tmp);
    }
    result.map(|()| header)
}

/// Reads a framed file and checks its header and checksum. A file that does not exist is
/// [`StorageError::Missing`]; a damaged one is [`StorageError::Corrupt`].
pub(crate) fn read_framed(path: &Path, kind: FileKind) -> Result<(Header, Vec<u8>), StorageError> {
    let corrupt = |reason| StorageError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let mut file = File::open(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => StorageError::Missing {
            path: path.to_path_buf(),
        },
        _ => StorageError::io("open", path, e),
    })?;
    let file_len = file
        .metadata()
        .map_err(|e| StorageError::io("stat", path, e))?
        .len();
    if file_len < HEADER_LEN as u64 {
        return Err(corrupt(Corruption::TooShort {
            len: file_len,
            header: HEADER_LEN as u64,
        }));
    }
    let mut raw = [0u8; HEADER_LEN];
    file.read_exact(&mut raw)
        .map_err(|e| StorageError::io("read", path, e))?;
    let header = format::check_header(kind, &raw, file_len).map_err(corrupt)?;
    // The length matches the file's real size, so this allocation is bounded by it.
    let len = usize::try_from(header.len).map_err(|_| {
        corrupt(Corruption::Inconsistent(format!(
            "payload of {} bytes does not fit in memory",
            header.len
        )))
    })?;
    let mut payload = vec![0u8; len];
    file.read_exact(&mut payload)
        .map_err(|e| StorageError::io("read", path, e))?;
    format::check_payload(header, &payload).map_err(corrupt)?;
    Ok((header, payload))
}

/// Makes the entries of directory `dir` (creations, renames, removals) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    #[cfg(unix)]
    {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| StorageError::io("fsync directory", dir, e))
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// One checkpoint directory found under the base directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Listed {
    pub(crate) id: CheckpointId,
    pub(crate) dir: PathBuf,
    /// Whether its metadata file exists.
    pub(crate) complete: bool,
}

/// The checkpoint directories under `base`, oldest first. A missing `base` has none.
pub(crate) fn list_checkpoints(base: &Path) -> Result<Vec<Listed>, StorageError> {
    let entries = match fs::read_dir(base) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(StorageError::io("list", base, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io("list", base, e))?;
        let Some(id) = entry
            .file_name()
            .to_str()
            .and_then(format::parse_checkpoint_dir_name)
        else {
            continue;
        };
        let dir = entry.path();
        if !dir.is_dir() {
            continue;
        }
        let complete = dir.join(METADATA_FILE).exists();
        out.push(Listed { id, dir, complete });
    }
    out.sort_by_key(|l| l.id);
    Ok(out)
}

/// Removes a checkpoint directory, its metadata first so that an interrupted removal leaves an
/// incomplete checkpoint (garbage) rather than a complete one with missing files.
pub(crate) fn remove_checkpoint(dir: &Path) -> Result<(), StorageError> {
    let meta = dir.join(METADATA_FILE);
    match fs::remove_file(&meta) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(StorageError::io("remove", meta, e)),
    }
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io("remove", dir, e)),
    }
}
