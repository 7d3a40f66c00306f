//! [`FileEnumerator`]: lists a directory and hands out one file per split request.

use crate::api::SplitEnumerator;
use crate::builtin::file::FileSplit;
use crate::coordinator::SplitEnumeratorContext;
use serde::{Deserialize, Serialize};
use sluice_core::{CheckpointId, SubtaskIndex, UserError};
use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a [`FileEnumerator`] checkpoints: the splits not handed out and every file seen.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct FileEnumeratorCheckpoint {
    pending: Vec<FileSplit>,
    seen: BTreeSet<PathBuf>,
    listed: bool,
}

/// Hands out the files of a directory (see [`FileSource`](crate::FileSource)).
#[derive(Debug)]
pub struct FileEnumerator {
    dir: PathBuf,
    discovery: Option<Duration>,
    pending: VecDeque<FileSplit>,
    seen: BTreeSet<PathBuf>,
    /// Whether the directory was listed at least once (a bounded source ends after that).
    listed: bool,
    /// Readers that asked while nothing was pending.
    waiting: BTreeSet<SubtaskIndex>,
}

impl FileEnumerator {
    pub(crate) fn new(dir: PathBuf, discovery: Option<Duration>) -> Self {
        FileEnumerator {
            dir,
            discovery,
            pending: VecDeque::new(),
            seen: BTreeSet::new(),
            listed: false,
            waiting: BTreeSet::new(),
        }
    }

    pub(crate) fn restore(
        dir: PathBuf,
        discovery: Option<Duration>,
        checkpoint: FileEnumeratorCheckpoint,
    ) -> Self {
        FileEnumerator {
            pending: checkpoint.pending.into(),
            seen: checkpoint.seen,
            listed: checkpoint.listed,
            ..Self::new(dir, discovery)
        }
    }

    /// Takes the files of a listing that were never seen, in name order.
    fn discovered(&mut self, files: Vec<PathBuf>) {
        for f in files {
            if self.seen.insert(f.clone()) {
                self.pending.push_back(FileSplit::new(f));
            }
        }
        self.listed = true;
    }

    /// Serves the waiting readers (a listing arrived or splits came back).
    fn serve_waiting(&mut self, ctx: &SplitEnumeratorContext<Self>) -> Result<(), UserError> {
        let waiting = std::mem::take(&mut self.waiting);
        let registered = ctx.registered_readers();
        for subtask in waiting {
            if registered.contains_key(&subtask) {
                self.serve(ctx, subtask)?;
            }
        }
        Ok(())
    }

    fn serve(
        &mut self,
        ctx: &SplitEnumeratorContext<Self>,
        subtask: SubtaskIndex,
    ) -> Result<(), UserError> {
        if let Some(split) = self.pending.pop_front() {
            ctx.assign_split(subtask, vec![split])?;
        } else if self.listed && self.discovery.is_none() {
            ctx.signal_no_more_splits(subtask)?;
        } else {
            self.waiting.insert(subtask);
        }
        Ok(())
    }
}

/// The regular, visible files directly in `dir`, sorted.
pub(crate) fn list_files(dir: &Path) -> Result<Vec<PathBuf>, UserError> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot list directory {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot list directory {}: {e}", dir.display()))?;
        let name = entry.file_name();
        let hidden = name.to_string_lossy().starts_with(['.', '_']);
        let is_file = entry.file_type().map(|t| t.is_file()).unwrap_or(false);
        if is_file && !hidden {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

impl SplitEnumerator for FileEnumerator {
    type Split = FileSplit;
    type Checkpoint = FileEnumeratorCheckpoint;

    fn start(&mut self, ctx: &SplitEnumeratorContext<Self>) -> Result<(), UserError> {
        let dir = self.dir.clone();
        match self.discovery {
            // A restored bounded enumerator already listed its files.
            None if self.listed => Ok(()),
            None => Ok(ctx.call_async(
                move || list_files(&dir),
                |e: &mut Self, ctx, files| {
                    e.discovered(files);
                    e.serve_waiting(ctx)
                },
            )?),
            Some(period) => {
                ctx.call_async_periodic(
                    move || list_files(&dir),
                    |e: &mut Self, ctx, files| {
                        e.discovered(files);
                        e.serve_waiting(ctx)
                    },
                    Duration::ZERO,
                    period,
                )?;
                Ok(())
            }
        }
    }

    fn handle_split_request(
        &mut self,
        ctx: &SplitEnumeratorContext<Self>,
        subtask: SubtaskIndex,
    ) -> Result<(), UserError> {
        self.serve(ctx, subtask)
    }

    fn add_splits_back(
        &mut self,
        ctx: &SplitEnumeratorContext<Self>,
        splits: Vec<FileSplit>,
        _subtask: SubtaskIndex,
    ) -> Result<(), UserError> {
        for s in splits.into_iter().rev() {
            self.pending.push_front(s);
        }
        self.serve_waiting(ctx)
    }

    fn add_reader(
        &mut self,
        _ctx: &SplitEnumeratorContext<Self>,
        _subtask: SubtaskIndex,
    ) -> Result<(), UserError> {
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        _checkpoint: CheckpointId,
    ) -> Result<FileEnumeratorCheckpoint, UserError> {
        Ok(FileEnumeratorCheckpoint {
            pending: self.pending.iter().cloned().collect(),
            seen: self.seen.clone(),
            listed: self.listed,
        })
    }
}
