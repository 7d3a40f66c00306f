//! [`FileReader`]: reads its files one at a time. Each file is read and decoded on tokio's
//! blocking pool by a fetch job that sends batches through a bounded channel (two batches
//! ahead), so the task never blocks on I/O and memory stays bounded; the reader keeps the
//! position after the last batch it returned, which is what a checkpoint stores.

use crate::api::{ReaderPoll, SourceReader, SourceSplit, SplitId};
use crate::builtin::file::{FileFormat, FileSourceMetrics, FileSplit, MalformedLines};
use serde::de::DeserializeOwned;
use sluice_core::{CheckpointId, Data, UserError};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::marker::PhantomData;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Batches a fetch job may have decoded ahead of the task.
const AHEAD: usize = 2;
/// The read buffer of a fetch job.
const READ_BUFFER: usize = 256 * 1024;

/// What a fetch job sends.
enum Fetched<T> {
    /// Decoded records, and the position after them.
    Batch {
        records: Vec<T>,
        offset: u64,
        line: u64,
    },
    /// The file is read to its end.
    End,
    /// Reading or decoding failed (the message names the file and line).
    Failed(String),
}

struct Current<T> {
    id: SplitId,
    split: FileSplit,
    rx: mpsc::Receiver<Fetched<T>>,
}

/// The reader of a [`FileSource`](crate::FileSource) (see the module docs).
pub struct FileReader<T> {
    format: FileFormat,
    malformed: MalformedLines,
    metrics: Arc<FileSourceMetrics>,
    queued: VecDeque<FileSplit>,
    current: Option<Current<T>>,
    _t: PhantomData<fn() -> T>,
}

impl<T> FileReader<T> {
    pub(crate) fn new(
        format: FileFormat,
        malformed: MalformedLines,
        metrics: Arc<FileSourceMetrics>,
    ) -> Self {
        FileReader {
            format,
            malformed,
            metrics,
            queued: VecDeque::new(),
            current: None,
            _t: PhantomData,
        }
    }
}

impl<T: Data + DeserializeOwned> FileReader<T> {
    fn start_next(&mut self, max: usize) -> bool {
        let Some(split) = self.queued.pop_front() else {
            return false;
        };
        let (tx, rx) = mpsc::channel(AHEAD);
        let job = FetchJob {
            split: split.clone(),
            format: self.format,
            malformed: self.malformed,
            metrics: self.metrics.clone(),
            batch: max.max(1),
        };
        // Blocking file I/O runs on tokio's blocking pool, never on a worker.
        drop(tokio::task::spawn_blocking(move || job.run(tx)));
        self.current = Some(Current {
            id: split.split_id(),
            split,
            rx,
        });
        true
    }
}

impl<T: Data + DeserializeOwned> SourceReader for FileReader<T> {
    type Out = T;
    type Split = FileSplit;

    fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
        max: usize,
    ) -> Poll<Result<ReaderPoll<T>, UserError>> {
        if self.current.is_none() && !self.start_next(max) {
            return Poll::Ready(Ok(ReaderPoll::NeedsSplits));
        }
        let Some(current) = &mut self.current else {
            return Poll::Ready(Ok(ReaderPoll::NeedsSplits));
        };
        match current.rx.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Fetched::Batch {
                records,
                offset,
                line,
            })) => {
                current.split.offset = offset;
                current.split.line = line;
                Poll::Ready(Ok(ReaderPoll::Records {
                    split: current.id.clone(),
                    records,
                }))
            }
            Poll::Ready(Some(Fetched::End)) => {
                let id = current.id.clone();
                self.current = None;
                Poll::Ready(Ok(ReaderPoll::SplitFinished(id)))
            }
            Poll::Ready(Some(Fetched::Failed(message))) => Poll::Ready(Err(message.into())),
            Poll::Ready(None) => Poll::Ready(Err(format!(
                "reading file {} stopped before its end",
                current.split.path.display()
            )
            .into())),
        }
    }

    fn add_splits(&mut self, splits: Vec<FileSplit>) -> Result<(), UserError> {
        self.queued.extend(splits);
        Ok(())
    }

    fn snapshot_state(&mut self, _checkpoint: CheckpointId) -> Result<Vec<FileSplit>, UserError> {
        Ok(self
            .current
            .iter()
            .map(|c| c.split.clone())
            .chain(self.queued.iter().cloned())
            .collect())
    }
}

/// Reads one file from a position, on the blocking pool.
struct FetchJob {
    split: FileSplit,
    format: FileFormat,
    malformed: MalformedLines,
    metrics: Arc<FileSourceMetrics>,
    batch: usize,
}

impl FetchJob {
    fn run<T: DeserializeOwned>(self, tx: mpsc::Sender<Fetched<T>>) {
        let last = match self.read(&tx) {
            Ok(true) => Fetched::End,
            Ok(false) => return, // the reader went away
            Err(message) => Fetched::Failed(message),
        };
        let _ = tx.blocking_send(last);
    }

    /// Reads to the end; `Ok(false)` when the reader stopped listening.
    fn read<T: DeserializeOwned>(&self, tx: &mpsc::Sender<Fetched<T>>) -> Result<bool, String> {
        let path = &self.split.path;
        let name = path.display();
        let mut file =
            std::fs::File::open(path).map_err(|e| format!("cannot open file {name}: {e}"))?;
        file.seek(SeekFrom::Start(self.split.offset))
            .map_err(|e| format!("cannot seek in file {name}: {e}"))?;
        let mut input = BufReader::with_capacity(READ_BUFFER, file);
        let (mut offset, mut line) = (self.split.offset, self.split.line);
        let mut text = String::new();
        let mut records = Vec::with_capacity(self.batch);
        let mut skipped = 0;
        loop {
            text.clear();
            let n = input
                .read_line(&mut text)
                .map_err(|e| format!("cannot read file {name} at line {}: {e}", line + 1))?;
            if n == 0 {
                break;
            }
            offset += n as u64;
            line += 1;
            let trimmed = text.trim_end_matches(['\n', '\r']);
            let header = line == 1
                && matches!(
                    self.format,
                    FileFormat::Csv {
                        has_headers: true,
                        ..
                    }
                );
            if trimmed.is_empty() || header {
                continue;
            }
            match self.decode::<T>(trimmed) {
                Ok(record) => records.push(record),
                Err(e) if self.malformed == MalformedLines::Skip => {
                    tracing::debug!(file = %name, line, error = %e, "skipping a malformed line");
                    skipped += 1;
                }
                Err(e) => return Err(format!("malformed line {line} in file {name}: {e}")),
            }
            if records.len() >= self.batch {
                let batch = std::mem::replace(&mut records, Vec::with_capacity(self.batch));
                self.metrics.add_skipped(std::mem::take(&mut skipped));
                if tx
                    .blocking_send(Fetched::Batch {
                        records: batch,
                        offset,
                        line,
                    })
                    .is_err()
                {
                    return Ok(false);
                }
            }
        }
        self.metrics.add_skipped(skipped);
        if !records.is_empty()
            && tx
                .blocking_send(Fetched::Batch {
                    records,
                    offset,
                    line,
                })
                .is_err()
        {
            return Ok(false);
        }
        Ok(true)
    }

    fn decode<T: DeserializeOwned>(&self, text: &str) -> Result<T, String> {
        match self.format {
            FileFormat::JsonLines => serde_json::from_str(text).map_err(|e| e.to_string()),
            FileFormat::Csv { delimiter, .. } => {
                let mut reader = csv::ReaderBuilder::new()
                    .has_headers(false)
                    .delimiter(delimiter)
                    .from_reader(text.as_bytes());
                match reader.deserialize().next() {
                    Some(r) => r.map_err(|e| e.to_string()),
                    None => Err("no CSV record on the line".into()),
                }
            }
        }
    }
}
