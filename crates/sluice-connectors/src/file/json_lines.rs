//! [`JsonLinesSink`]: one JSON document per line, committed exactly once.

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use sluice_core::{CheckpointId, UserError};
use sluice_runtime::OperatorContext;
use sluice_runtime::api::TwoPhaseCommitSink;
use sluice_runtime::operator::blocking;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// A file operation failed; the message names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Reading, writing, renaming or removing a file failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// A committed line is not valid JSON for the expected type.
    #[error("{path}, line {line}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The 1-based line.
        line: usize,
        /// Why it failed.
        #[source]
        source: serde_json::Error,
    },
    /// A transaction to commit has neither its in-progress nor its committed file: its records
    /// are lost.
    #[error("transaction file {0} is missing: neither in progress nor committed")]
    Lost(PathBuf),
}

fn io(op: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> FileError {
    let path = path.to_path_buf();
    move |source| FileError::Io { op, path, source }
}

/// One transaction of a [`JsonLinesSink`]: one file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonTransaction {
    /// The visible name once committed.
    pub name: String,
    /// Records written.
    pub records: u64,
}

impl JsonTransaction {
    fn in_progress_name(&self) -> String {
        format!(".{}.inprogress", self.name)
    }
}

/// An exactly-once sink writing one JSON document per line (see the module documentation).
///
/// ```
/// use sluice_connectors::file::{JsonLinesSink, read_committed};
/// use sluice_runtime::prelude::*;
///
/// let dir = tempfile::tempdir().unwrap();
/// let env = StreamEnvironment::new();
/// env.set_parallelism(2);
/// env.from_iter(0u64..100).sink_to_exactly_once(JsonLinesSink::new(dir.path(), "numbers"));
/// env.execute_blocking("to-files").unwrap();
/// let mut got: Vec<u64> = read_committed(dir.path()).unwrap();
/// got.sort();
/// assert_eq!(got, (0..100).collect::<Vec<_>>());
/// ```
pub struct JsonLinesSink<T> {
    dir: PathBuf,
    prefix: String,
    run: String,
    next: u64,
    writer: Option<(String, BufWriter<File>)>,
    line: Vec<u8>,
    _t: PhantomData<fn(T)>,
}

impl<T> Clone for JsonLinesSink<T> {
    fn clone(&self) -> Self {
        JsonLinesSink {
            dir: self.dir.clone(),
            prefix: self.prefix.clone(),
            run: String::new(),
            next: 0,
            writer: None,
            line: Vec::new(),
            _t: PhantomData,
        }
    }
}

impl<T> JsonLinesSink<T> {
    /// A sink writing files named `<prefix>-...jsonl` into `dir` (created if needed).
    pub fn new(dir: impl Into<PathBuf>, prefix: &str) -> Self {
        JsonLinesSink {
            dir: dir.into(),
            prefix: prefix.to_string(),
            run: String::new(),
            next: 0,
            writer: None,
            line: Vec::new(),
            _t: PhantomData,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn close_writer(&mut self, txn: &JsonTransaction) -> Result<(), FileError> {
        if let Some((name, mut w)) = self.writer.take() {
            let path = self.path(&txn.in_progress_name());
            if name == txn.name {
                blocking(|| {
                    w.flush().map_err(io("flush", &path))?;
                    w.get_ref().sync_all().map_err(io("sync", &path))
                })?;
            } else {
                self.writer = Some((name, w));
            }
        }
        Ok(())
    }
}

impl<T: Serialize + Send + 'static> TwoPhaseCommitSink<T> for JsonLinesSink<T> {
    type Transaction = JsonTransaction;

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        let dir = self.dir.clone();
        blocking(|| fs::create_dir_all(&dir).map_err(io("create directory", &dir)))?;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        // Unique per subtask attempt: restarts and later runs never reuse a file name.
        self.run = format!(
            "{nanos:x}-{:x}-a{}-s{}",
            std::process::id(),
            ctx.attempt_number(),
            ctx.subtask_index()
        );
        self.next = 0;
        Ok(())
    }

    fn begin_transaction(&mut self) -> Result<JsonTransaction, UserError> {
        let txn = JsonTransaction {
            name: format!("{}-{}-{}.jsonl", self.prefix, self.run, self.next),
            records: 0,
        };
        self.next += 1;
        let path = self.path(&txn.in_progress_name());
        let file = blocking(|| {
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .map_err(io("create", &path))
        })?;
        self.writer = Some((txn.name.clone(), BufWriter::with_capacity(1 << 16, file)));
        Ok(txn)
    }

    fn write(&mut self, txn: &mut JsonTransaction, batch: Vec<T>) -> Result<(), UserError> {
        let path = self.path(&txn.in_progress_name());
        let Some((name, w)) = self.writer.as_mut() else {
            return Err(format!("no open file for transaction {}", txn.name).into());
        };
        if *name != txn.name {
            return Err(format!("transaction {} is not the open one ({name})", txn.name).into());
        }
        self.line.clear();
        for r in &batch {
            serde_json::to_writer(&mut self.line, r)?;
            self.line.push(b'\n');
        }
        txn.records += batch.len() as u64;
        let line = &self.line;
        blocking(|| w.write_all(line).map_err(io("write", &path)))?;
        Ok(())
    }

    fn pre_commit(&mut self, txn: &mut JsonTransaction) -> Result<(), UserError> {
        self.close_writer(txn)?;
        Ok(())
    }

    fn commit(
        &mut self,
        txn: JsonTransaction,
        _checkpoint: Option<CheckpointId>,
    ) -> Result<(), UserError> {
        let from = self.path(&txn.in_progress_name());
        let to = self.path(&txn.name);
        blocking(|| {
            if from.exists() {
                if txn.records == 0 {
                    fs::remove_file(&from).map_err(io("remove", &from))
                } else {
                    fs::rename(&from, &to).map_err(io("rename", &from))
                }
            } else if to.exists() || txn.records == 0 {
                Ok(()) // committed before (a retry after restore)
            } else {
                Err(FileError::Lost(to.clone()))
            }
        })?;
        Ok(())
    }

    fn abort(&mut self, txn: JsonTransaction) -> Result<(), UserError> {
        if self.writer.as_ref().is_some_and(|(n, _)| *n == txn.name) {
            self.writer = None;
        }
        let path = self.path(&txn.in_progress_name());
        blocking(|| match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("remove", &path)(e)),
            _ => Ok(()),
        })?;
        Ok(())
    }
}

/// Reads every committed (visible) file of `dir`, ignoring in-progress ones.
pub fn read_committed<T: DeserializeOwned>(dir: &Path) -> Result<Vec<T>, FileError> {
    let mut out = Vec::new();
    let entries = fs::read_dir(dir).map_err(io("list", dir))?;
    let mut paths: Vec<PathBuf> = Vec::new();
    for e in entries {
        let e = e.map_err(io("list", dir))?;
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with('.') && name.ends_with(".jsonl") {
            paths.push(e.path());
        }
    }
    paths.sort();
    for path in paths {
        let f = File::open(&path).map_err(io("open", &path))?;
        for (i, line) in BufReader::new(f).lines().enumerate() {
            let line = line.map_err(io("read", &path))?;
            let v = serde_json::from_str(&line).map_err(|source| FileError::Parse {
                path: path.clone(),
                line: i + 1,
                source,
            })?;
            out.push(v);
        }
    }
    Ok(out)
}
