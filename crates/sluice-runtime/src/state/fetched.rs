//! The local directories a restore gathers a keyed store's files into, and their cleanup.
//!
//! A restore from checkpoint storage fetches each store handle's files into a new directory
//! below the system's temporary directory (`checkpoint/persistence.rs`, `fetch_handles`); the
//! store then links them into its own directory. Such a directory is held by a [`FetchedDir`]
//! that every clone of the handle shares, and is removed when the last clone is dropped: on a
//! task manager once its stores have opened and the deployment's states are gone, in a local job
//! when the restored checkpoint is retired. A process killed before that leaves its directories
//! behind; the next restore in any process removes those of processes that are gone
//! ([`sweep_dead_processes`]).

use std::path::{Path, PathBuf};

/// The name every fetched directory starts with, followed by `p<pid>-`.
pub(crate) const PREFIX: &str = "sluice-restore-";

/// A directory of fetched store files, removed when dropped.
///
/// Shared (in an `Arc`) by every clone of the [`StoreHandle`](super::StoreHandle) whose files it
/// holds. The removal runs on tokio's blocking pool when dropped inside a runtime, so that it
/// never holds up a worker; a runtime that is shutting down may skip it, and then the next
/// restore of any process removes the directory (its sweep of the processes that are gone).
#[derive(Debug, PartialEq, Eq)]
pub struct FetchedDir {
    path: PathBuf,
}

impl FetchedDir {
    /// Takes charge of `path`, which the caller created.
    pub(crate) fn new(path: PathBuf) -> Self {
        Self { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for FetchedDir {
    fn drop(&mut self) {
        drop(remove_off_runtime(std::mem::take(&mut self.path)));
    }
}

/// Removes `path`: on tokio's blocking pool inside a runtime (returning the task), at once
/// outside one.
fn remove_off_runtime(path: PathBuf) -> Option<tokio::task::JoinHandle<()>> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => Some(runtime.spawn_blocking(move || remove_logged(&path))),
        Err(_) => {
            remove_logged(&path);
            None
        }
    }
}

fn remove_logged(path: &Path) {
    if let Err(e) = std::fs::remove_dir_all(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %path.display(), error = %e, "cannot remove the files a restore fetched");
    }
}

/// Removes the fetched directories in `root` of processes that are no longer running. Returns
/// how many it removed.
pub(crate) fn sweep_dead_processes(root: &Path) -> usize {
    let gone = dirs_of_processes_gone(root, PREFIX);
    for dir in &gone {
        remove_logged(dir);
    }
    gone.len()
}

/// The entries of `root` named `<prefix>p<pid>-…` whose process is no longer running (a
/// process runs while `/proc/<pid>` exists): what a process that was killed left behind, for a
/// store backend or a restore to remove. Where `/proc` is missing it finds none, so that
/// nothing of a running process is ever taken for a leftover.
pub fn dirs_of_processes_gone(root: &Path, prefix: &str) -> Vec<PathBuf> {
    if !Path::new("/proc/self").exists() {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.strip_prefix(prefix))
                .and_then(|n| n.strip_prefix('p'))
                .and_then(|n| n.split('-').next())
                .filter(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()));
            pid.is_some_and(|pid| !Path::new("/proc").join(pid).exists())
        })
        .map(|e| e.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn the_last_clone_removes_the_directory() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("fetched");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("000001.sst"), b"table").unwrap();
        let held = Arc::new(FetchedDir::new(dir.clone()));
        let clone = held.clone();
        drop(held);
        assert!(dir.exists(), "a clone still refers to it");
        drop(clone);
        assert!(!dir.exists());
    }

    #[tokio::test]
    async fn inside_a_runtime_the_removal_runs_on_the_blocking_pool() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("fetched");
        std::fs::create_dir_all(&dir).unwrap();
        let removal = remove_off_runtime(dir.clone()).expect("queued on the blocking pool");
        removal.await.unwrap();
        assert!(!dir.exists());
    }

    #[test]
    fn the_sweep_removes_only_dead_processes_directories() {
        let root = tempfile::tempdir().unwrap();
        let mine = root
            .path()
            .join(format!("{PREFIX}p{}-1f-chk3-n1-0", std::process::id()));
        // Beyond Linux's largest pid (2^22), so no process has it.
        let dead = root.path().join(format!("{PREFIX}p99999999-1f-chk3-n1-0"));
        let other = root.path().join("sluice-rocksdb");
        for d in [&mine, &dead, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        assert_eq!(sweep_dead_processes(root.path()), 1);
        assert!(mine.exists() && other.exists());
        assert!(!dead.exists());
    }
}
