//! [`FileReader`]: reads its files one at a time. A fetch job on tokio's blocking pool reads the
//! file in blocks of whole lines and sends them through a bounded channel (two blocks ahead),
//! so the task never waits on the disk and memory stays bounded. The task decodes the lines of
//! a block as it polls, at most one batch at a time, and keeps the byte offset and line number
//! of the first line not yet returned: that is the split's position in a checkpoint.
//!
//! Decoding on the task rather than in the fetch job keeps each record's allocation and its
//! release on the same thread (a record allocated on the blocking pool and freed on a tokio
//! worker costs glibc's allocator more than decoding it: `BENCHMARKS.md`, `source`).

use crate::api::{ReaderPoll, SourceReader, SourceSplit, SplitId};
use crate::builtin::file::{FileFormat, FileSourceMetrics, FileSplit, MalformedLines};
use serde::de::DeserializeOwned;
use sluice_core::{CheckpointId, Data, UserError};
use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom};
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Blocks a fetch job may have read ahead of the task.
const AHEAD: usize = 2;
/// The size of a block: it ends at the last line break within this many bytes (a longer line
/// makes a longer block).
const BLOCK: usize = 256 * 1024;

/// What a fetch job sends.
enum Fetched {
    /// Whole lines (the last one may lack its line break at the end of the file).
    Block(Vec<u8>),
    /// The file is read to its end.
    End,
    /// Reading failed (the message names the file).
    Failed(String),
}

/// The file being read: its position (the first line not yet returned), the block being
/// decoded and the channel from its fetch job.
struct Current {
    id: SplitId,
    split: FileSplit,
    block: Vec<u8>,
    at: usize,
    rx: mpsc::Receiver<Fetched>,
}

/// The reader of a [`FileSource`](crate::FileSource) (see the module docs).
pub struct FileReader<T> {
    format: FileFormat,
    malformed: MalformedLines,
    metrics: Arc<FileSourceMetrics>,
    queued: VecDeque<FileSplit>,
    current: Option<Current>,
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

    /// Starts reading the next queued file, if any.
    fn start_next(&mut self) -> bool {
        let Some(split) = self.queued.pop_front() else {
            return false;
        };
        let (tx, rx) = mpsc::channel(AHEAD);
        let (path, offset) = (split.path.clone(), split.offset);
        // Blocking file I/O runs on tokio's blocking pool, never on a worker.
        drop(tokio::task::spawn_blocking(move || {
            fetch(&path, offset, tx)
        }));
        self.current = Some(Current {
            id: split.split_id(),
            split,
            block: Vec::new(),
            at: 0,
            rx,
        });
        true
    }
}

impl<T: Data + DeserializeOwned> FileReader<T> {
    /// Decodes up to `max` records from the current block, advancing the position line by line.
    fn decode(&self, current: &mut Current, max: usize) -> Result<Vec<T>, UserError> {
        let mut records = Vec::with_capacity(max.min(4096));
        let mut skipped = 0;
        while records.len() < max && current.at < current.block.len() {
            let rest = &current.block[current.at..];
            let len = memchr::memchr(b'\n', rest).map_or(rest.len(), |i| i + 1);
            let line = trim_line(&rest[..len]);
            current.at += len;
            current.split.offset += len as u64;
            current.split.line += 1;
            let header = current.split.line == 1
                && matches!(
                    self.format,
                    FileFormat::Csv {
                        has_headers: true,
                        ..
                    }
                );
            if line.is_empty() || header {
                continue;
            }
            match decode_line::<T>(self.format, line) {
                Ok(record) => records.push(record),
                Err(e) if self.malformed == MalformedLines::Skip => {
                    tracing::debug!(file = %current.split.path.display(), line = current.split.line, error = %e, "skipping a malformed line");
                    skipped += 1;
                }
                Err(e) => {
                    return Err(format!(
                        "malformed line {} in file {}: {e}",
                        current.split.line,
                        current.split.path.display()
                    )
                    .into());
                }
            }
        }
        self.metrics.add_skipped(skipped);
        Ok(records)
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
        loop {
            if self.current.is_none() && !self.start_next() {
                return Poll::Ready(Ok(ReaderPoll::NeedsSplits));
            }
            let Some(mut current) = self.current.take() else {
                return Poll::Ready(Ok(ReaderPoll::NeedsSplits));
            };
            if current.at < current.block.len() {
                let decoded = self.decode(&mut current, max.max(1));
                let id = current.id.clone();
                self.current = Some(current);
                match decoded {
                    Ok(records) if records.is_empty() => continue,
                    Ok(records) => {
                        return Poll::Ready(Ok(ReaderPoll::Records { split: id, records }));
                    }
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
            let fetched = current.rx.poll_recv(cx);
            match fetched {
                Poll::Pending => {
                    self.current = Some(current);
                    return Poll::Pending;
                }
                Poll::Ready(Some(Fetched::Block(block))) => {
                    current.block = block;
                    current.at = 0;
                    self.current = Some(current);
                }
                Poll::Ready(Some(Fetched::End)) => {
                    return Poll::Ready(Ok(ReaderPoll::SplitFinished(current.id)));
                }
                Poll::Ready(Some(Fetched::Failed(message))) => {
                    return Poll::Ready(Err(message.into()));
                }
                Poll::Ready(None) => {
                    return Poll::Ready(Err(format!(
                        "reading file {} stopped before its end",
                        current.split.path.display()
                    )
                    .into()));
                }
            }
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

/// A line without its line break (`\n` or `\r\n`).
fn trim_line(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn decode_line<T: DeserializeOwned>(format: FileFormat, line: &[u8]) -> Result<T, String> {
    match format {
        // Validating the line's UTF-8 once is cheaper than `from_slice` checking each string.
        FileFormat::JsonLines => std::str::from_utf8(line)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str(text).map_err(|e| e.to_string())),
        FileFormat::Csv { delimiter, .. } => {
            let mut reader = csv::ReaderBuilder::new()
                .has_headers(false)
                .delimiter(delimiter)
                .from_reader(line);
            match reader.deserialize().next() {
                Some(r) => r.map_err(|e| e.to_string()),
                None => Err("no CSV record on the line".into()),
            }
        }
    }
}

/// The fetch job: reads `path` from `offset` in blocks of whole lines, on the blocking pool.
fn fetch(path: &Path, offset: u64, tx: mpsc::Sender<Fetched>) {
    let last = match read_blocks(path, offset, &tx) {
        Ok(true) => Fetched::End,
        Ok(false) => return, // the reader went away
        Err(message) => Fetched::Failed(message),
    };
    let _ = tx.blocking_send(last);
}

/// Sends the file's blocks; `Ok(false)` when the reader stopped listening.
fn read_blocks(path: &Path, offset: u64, tx: &mpsc::Sender<Fetched>) -> Result<bool, String> {
    let name = path.display();
    let mut file =
        std::fs::File::open(path).map_err(|e| format!("cannot open file {name}: {e}"))?;
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| format!("cannot seek in file {name}: {e}"))?;
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let mut block = Vec::with_capacity(BLOCK + carry.len());
        block.append(&mut carry);
        let read = (&mut file)
            .take(BLOCK as u64)
            .read_to_end(&mut block)
            .map_err(|e| format!("cannot read file {name}: {e}"))?;
        if read == 0 {
            // The end: what is left is a last line without a line break.
            return Ok(block.is_empty() || tx.blocking_send(Fetched::Block(block)).is_ok());
        }
        match memchr::memrchr(b'\n', &block) {
            Some(i) => carry = block.split_off(i + 1),
            None => {
                carry = block; // no line ends in this block yet: read on
                continue;
            }
        }
        if tx.blocking_send(Fetched::Block(block)).is_err() {
            return Ok(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks end at line breaks, and together they are the file from the offset on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn blocks_hold_whole_lines_and_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let mut text = String::new();
        for i in 0..50_000 {
            text.push_str(&format!("line {i} {}\n", "x".repeat(i % 17)));
        }
        text.push_str("last line without a break");
        std::fs::write(&path, &text).unwrap();
        let (tx, mut rx) = mpsc::channel(AHEAD);
        let p = path.clone();
        let job = tokio::task::spawn_blocking(move || fetch(&p, 7, tx));
        let mut got = Vec::new();
        let mut blocks = 0;
        while let Some(f) = rx.recv().await {
            match f {
                Fetched::Block(b) => {
                    blocks += 1;
                    if got.len() + b.len() < text.len() - 7 {
                        assert_eq!(b.last(), Some(&b'\n'), "block {blocks} ends mid-line");
                    }
                    got.extend(b);
                }
                Fetched::End => break,
                Fetched::Failed(m) => panic!("{m}"),
            }
        }
        job.await.unwrap();
        assert!(blocks > 2);
        assert_eq!(got, text.as_bytes()[7..]);
    }
}
