//! Blocking file-system helpers of the local blob store: files written (or linked, or copied)
//! by atomic rename and fsync, reads, recursive listing, and removal that takes emptied
//! directories with it. Only
//! ever called from `spawn_blocking` (or from synchronous configuration code).

use super::StorageError;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A name for a temporary file next to `final_path`, unique in this process. It starts with a
/// `.`, so listings never show it.
pub(crate) fn temp_path(final_path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = final_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    final_path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Whether a directory entry is one of ours that no listing shows (a temporary file).
fn hidden(name: &str) -> bool {
    name.starts_with('.')
}

/// Writes `bytes` to `path` durably: the directory is created if needed (and its creation
/// made durable), the bytes go to a temporary file that is fsynced and renamed over `path`,
/// and the directory is fsynced so that the rename is durable too.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    replace_atomically(path, |tmp| {
        let mut file = File::create(tmp).map_err(|e| StorageError::io("create", tmp, e))?;
        file.write_all(bytes)
            .map_err(|e| StorageError::io("write", tmp, e))?;
        file.sync_all()
            .map_err(|e| StorageError::io("fsync", tmp, e))
    })
}

/// Puts the content of the file `source` at `path`, as [`write_atomically`] does, without
/// reading it into memory: a hard link when both are on one file system (for files never
/// changed in place, such as a keyed store's table files), else a copy, fsynced.
pub(crate) fn copy_atomically(source: &Path, path: &Path) -> Result<(), StorageError> {
    replace_atomically(path, |tmp| {
        if fs::hard_link(source, tmp).is_ok() {
            return Ok(());
        }
        fs::copy(source, tmp).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound if !source.exists() => StorageError::Missing {
                path: source.to_path_buf(),
            },
            _ => StorageError::io("copy into", tmp, e),
        })?;
        File::open(tmp)
            .and_then(|f| f.sync_all())
            .map_err(|e| StorageError::io("fsync", tmp, e))
    })
}

/// Creates `path`'s directory if needed (durably), lets `fill` write a temporary file next to
/// `path`, renames it over `path` and fsyncs the directory. The temporary file is removed
/// when `fill` or the rename fails.
fn replace_atomically(
    path: &Path,
    fill: impl FnOnce(&Path) -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    if let Some(dir) = path.parent().filter(|d| !d.is_dir()) {
        fs::create_dir_all(dir).map_err(|e| StorageError::io("create directory", dir, e))?;
        // The new directory's entry in its parent (`""` for a relative one: the working
        // directory).
        match dir.parent() {
            Some(parent) if parent.as_os_str().is_empty() => sync_dir(Path::new("."))?,
            Some(parent) => sync_dir(parent)?,
            None => {}
        }
    }
    let tmp = temp_path(path);
    let result = fill(&tmp).and_then(|()| {
        fs::rename(&tmp, path).map_err(|e| StorageError::io("rename into", path, e))
    });
    if result.is_err() {
        // Best effort: the temporary file is garbage either way and goes with its directory.
        let _ = fs::remove_file(&tmp);
    }
    result?;
    // A rename between two links to one file does nothing and succeeds (POSIX), leaving the
    // temporary link: the same file put twice (an upload ahead and a checkpoint's).
    if tmp.exists() {
        let _ = fs::remove_file(&tmp);
    }
    match path.parent() {
        Some(dir) => sync_dir(dir),
        None => Ok(()),
    }
}

/// The content of the file at `path`; [`StorageError::Missing`] if there is none.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, StorageError> {
    fs::read(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => StorageError::Missing {
            path: path.to_path_buf(),
        },
        _ => StorageError::io("read", path, e),
    })
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

/// The files below `dir`, as keys (`/`-separated, starting with `key_prefix`), hidden ones
/// left out. A `dir` that does not exist has none.
pub(crate) fn list_files(
    dir: &Path,
    key_prefix: &str,
    out: &mut Vec<String>,
) -> Result<(), StorageError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StorageError::io("list", dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io("list", dir, e))?;
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str().filter(|n| !hidden(n)) else {
            continue;
        };
        let key = super::blob::join_key(key_prefix, name);
        let kind = entry
            .file_type()
            .map_err(|e| StorageError::io("inspect", entry.path(), e))?;
        if kind.is_dir() {
            list_files(&entry.path(), &key, out)?;
        } else if kind.is_file() || entry.path().is_file() {
            out.push(key);
        }
    }
    Ok(())
}

/// Removes the file at `path` (one that does not exist is not an error), then every directory
/// between it and `root` that holds nothing visible any more.
pub(crate) fn remove_file(root: &Path, path: &Path) -> Result<(), StorageError> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(StorageError::io("remove", path, e)),
    }
    let mut dir = path.parent();
    while let Some(d) = dir.filter(|d| *d != root && d.starts_with(root)) {
        if !holds_nothing_visible(d)? {
            break;
        }
        match fs::remove_dir_all(d) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageError::io("remove", d, e)),
        }
        dir = d.parent();
    }
    Ok(())
}

/// Whether `dir` holds nothing but hidden entries (or is gone already).
fn holds_nothing_visible(dir: &Path) -> Result<bool, StorageError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(StorageError::io("list", dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| StorageError::io("list", dir, e))?;
        if !entry.file_name().to_str().is_some_and(hidden) {
            return Ok(false);
        }
    }
    Ok(true)
}
