//! [`FileSource`]: the files of a directory as splits, each line a record decoded with serde
//! (JSON lines or CSV), bounded or continuous (new files discovered periodically).
//!
//! - `enumerator.rs`: lists the directory (on the coordinator's worker pool when continuous)
//!   and hands out one file per request; remembers the files it has seen, so a file is read
//!   once;
//! - `reader.rs`: reads a file on tokio's blocking pool, a bounded channel of decoded batches
//!   ahead of the task, and keeps the byte offset and line number of the last batch it
//!   returned: the split's position in a checkpoint.

mod enumerator;
mod reader;

pub use enumerator::{FileEnumerator, FileEnumeratorCheckpoint};
pub use reader::FileReader;

use crate::api::{Boundedness, ReaderContext, Source, SourceSplit, SplitId};
use crate::coordinator::SplitEnumeratorContext;
use crate::error::SourceError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sluice_core::{Data, UserError};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One file, with the position up to which it has been read.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileSplit {
    /// The file.
    pub path: PathBuf,
    /// The byte offset of the next line to read.
    pub offset: u64,
    /// How many lines were read before `offset` (the next line is `line + 1`).
    pub line: u64,
}

impl FileSplit {
    /// A split of `path` from its start.
    pub fn new(path: PathBuf) -> Self {
        FileSplit {
            path,
            offset: 0,
            line: 0,
        }
    }
}

impl SourceSplit for FileSplit {
    fn split_id(&self) -> SplitId {
        SplitId::from(self.path.to_string_lossy().as_ref())
    }
}

/// How each line is decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileFormat {
    /// One JSON value per line (`serde_json`).
    JsonLines,
    /// One CSV record per line (the `csv` crate); with `has_headers` the first line of every
    /// file is a header and is skipped. Quoted fields may not span lines.
    Csv {
        /// Whether each file starts with a header line.
        has_headers: bool,
        /// The field delimiter.
        delimiter: u8,
    },
}

/// What a line that does not decode does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MalformedLines {
    /// Fail the job, naming the file and the line (the default).
    Fail,
    /// Skip the line and count it in [`FileSourceMetrics::skipped_lines`].
    Skip,
}

/// Counters of a [`FileSource`], shared by all its readers (lines re-read after a restore are
/// counted again).
#[derive(Debug, Default)]
pub struct FileSourceMetrics {
    skipped: AtomicU64,
}

impl FileSourceMetrics {
    /// Malformed lines skipped so far.
    pub fn skipped_lines(&self) -> u64 {
        self.skipped.load(Ordering::Relaxed)
    }

    pub(crate) fn add_skipped(&self, n: u64) {
        if n > 0 {
            self.skipped.fetch_add(n, Ordering::Relaxed);
        }
    }
}

/// The files of a directory as a source of `T` (Flink's `FileSource` with a stream format).
///
/// Every regular file directly in the directory is one split (hidden files, starting with `.`
/// or `_`, are ignored, so files can be written under such a name and renamed into place).
/// Lines are decoded with serde; empty lines are skipped. Bounded by default: the files present
/// when the job starts are read, then the source ends. [`continuous`](Self::continuous) lists
/// the directory again every interval and reads each new file once. A missing directory refuses
/// the job at submit time.
///
/// ```
/// use serde::Deserialize;
/// use sluice_runtime::prelude::*;
/// use sluice_source::{FileSource, FromSource};
///
/// #[derive(Clone, Debug, Deserialize, serde::Serialize)]
/// struct Click { user: u32 }
///
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("a.json"), "{\"user\":1}\n{\"user\":2}\n").unwrap();
/// std::fs::write(dir.path().join("b.json"), "{\"user\":3}\n").unwrap();
///
/// let env = StreamEnvironment::new();
/// env.set_parallelism(2);
/// let clicks = env.from_source(FileSource::<Click>::json_lines(dir.path()), None, "clicks").collect();
/// env.execute_blocking("clicks").unwrap();
/// let mut users: Vec<u32> = clicks.take().iter().map(|c| c.user).collect();
/// users.sort();
/// assert_eq!(users, vec![1, 2, 3]);
/// ```
pub struct FileSource<T> {
    dir: PathBuf,
    format: FileFormat,
    malformed: MalformedLines,
    discovery: Option<Duration>,
    metrics: Arc<FileSourceMetrics>,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for FileSource<T> {
    fn clone(&self) -> Self {
        FileSource {
            dir: self.dir.clone(),
            format: self.format,
            malformed: self.malformed,
            discovery: self.discovery,
            metrics: self.metrics.clone(),
            _t: PhantomData,
        }
    }
}

impl<T: Data + DeserializeOwned> FileSource<T> {
    /// The JSON-lines files of `dir`.
    pub fn json_lines(dir: impl AsRef<Path>) -> Self {
        Self::new(dir, FileFormat::JsonLines)
    }

    /// The CSV files of `dir` (comma-separated, with a header line).
    pub fn csv(dir: impl AsRef<Path>) -> Self {
        Self::new(
            dir,
            FileFormat::Csv {
                has_headers: true,
                delimiter: b',',
            },
        )
    }

    /// The files of `dir` in `format`.
    pub fn new(dir: impl AsRef<Path>, format: FileFormat) -> Self {
        FileSource {
            dir: dir.as_ref().to_path_buf(),
            format,
            malformed: MalformedLines::Fail,
            discovery: None,
            metrics: Arc::default(),
            _t: PhantomData,
        }
    }

    /// Keeps running, listing the directory every `interval` for new files.
    pub fn continuous(mut self, interval: Duration) -> Self {
        self.discovery = Some(interval);
        self
    }

    /// What a malformed line does.
    pub fn on_malformed(mut self, policy: MalformedLines) -> Self {
        self.malformed = policy;
        self
    }

    /// The source's counters (keep a clone before handing the source to `from_source`).
    pub fn metrics(&self) -> Arc<FileSourceMetrics> {
        self.metrics.clone()
    }
}

impl<T: Data + DeserializeOwned> Source for FileSource<T> {
    type Out = T;
    type Split = FileSplit;
    type Enumerator = FileEnumerator;
    type Reader = FileReader<T>;

    fn boundedness(&self) -> Boundedness {
        match self.discovery {
            Some(_) => Boundedness::ContinuousUnbounded,
            None => Boundedness::Bounded,
        }
    }

    fn create_enumerator(
        &self,
        _ctx: &SplitEnumeratorContext<FileEnumerator>,
    ) -> Result<FileEnumerator, UserError> {
        // Listing happens in `start`, off the coordinator thread when continuous.
        Ok(FileEnumerator::new(self.dir.clone(), self.discovery))
    }

    fn restore_enumerator(
        &self,
        _ctx: &SplitEnumeratorContext<FileEnumerator>,
        checkpoint: FileEnumeratorCheckpoint,
    ) -> Result<FileEnumerator, UserError> {
        Ok(FileEnumerator::restore(
            self.dir.clone(),
            self.discovery,
            checkpoint,
        ))
    }

    fn create_reader(&self, _ctx: ReaderContext) -> Result<FileReader<T>, UserError> {
        Ok(FileReader::new(
            self.format,
            self.malformed,
            self.metrics.clone(),
        ))
    }

    fn validate(&self) -> Result<(), UserError> {
        check_directory(&self.dir)?;
        if let Some(d) = self.discovery
            && d.is_zero()
        {
            return Err("the discovery interval must be positive".into());
        }
        Ok(())
    }
}

/// Whether `path` is a directory a file source can list: it must exist and be a directory.
fn check_directory(path: &Path) -> Result<(), SourceError> {
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(SourceError::NotADirectory {
            path: path.to_path_buf(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(SourceError::NoSuchDirectory {
            path: path.to_path_buf(),
        }),
        Err(source) => Err(SourceError::DirectoryMetadata {
            path: path.to_path_buf(),
            source,
        }),
    }
}
