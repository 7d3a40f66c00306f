//! The input of the `source` scenario (JSON-lines files of click-like events), the plain loop
//! that reads and decodes them, and the sluice job that does the same through `FileSource`.

use serde::{Deserialize, Serialize};
use sluice::prelude::*;
use sluice_source::{FileSource, FromSource};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One input line.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Event {
    id: u64,
    user: String,
    page: String,
    amount: f64,
    tags: Vec<String>,
}

/// Writes `files` files of `lines` events each (ids `0..files*lines`); returns the bytes written.
pub fn write_files(dir: &Path, files: u64, lines: u64) -> anyhow::Result<u64> {
    let mut bytes = 0;
    for f in 0..files {
        let file = std::fs::File::create(dir.join(format!("events-{f:04}.json")))?;
        let mut out = std::io::BufWriter::new(file);
        for l in 0..lines {
            let id = f * lines + l;
            let event = Event {
                id,
                user: format!("user-{}", id % 9_973),
                page: format!("/products/{}", id % 613),
                amount: (id % 10_000) as f64 / 100.0,
                tags: vec![
                    "web".into(),
                    if id.is_multiple_of(3) {
                        "promo"
                    } else {
                        "organic"
                    }
                    .into(),
                ],
            };
            let line = serde_json::to_string(&event)?;
            bytes += line.len() as u64 + 1;
            writeln!(out, "{line}")?;
        }
        out.flush()?;
    }
    Ok(bytes)
}

/// The baseline: every file in name order, a buffered reader, one `serde_json::from_str` per
/// line; returns the wrapping sum of the ids.
pub fn baseline_loop(dir: &Path) -> anyhow::Result<u64> {
    read_files(&sorted_files(dir)?)
}

/// The same loop on `threads` threads, each over every `threads`-th file: what this machine
/// gives the same work on more cores (the reference for the job's own scaling).
pub fn baseline_loop_threads(dir: &Path, threads: usize) -> anyhow::Result<u64> {
    let files = sorted_files(dir)?;
    let shares: Vec<Vec<PathBuf>> = (0..threads)
        .map(|t| files.iter().skip(t).step_by(threads).cloned().collect())
        .collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = shares
            .iter()
            .map(|share| scope.spawn(move || read_files(share)))
            .collect();
        handles.into_iter().try_fold(0u64, |sum, h| {
            let part = h
                .join()
                .map_err(|_| anyhow::anyhow!("a loop thread panicked"))??;
            Ok(sum.wrapping_add(part))
        })
    })
}

/// The files of `dir`, in name order.
fn sorted_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.sort();
    Ok(files)
}

/// Reads and decodes `files` in order; returns the wrapping sum of the ids.
fn read_files(files: &[PathBuf]) -> anyhow::Result<u64> {
    let mut sum = 0u64;
    let mut line = String::new();
    for path in files {
        let mut input = BufReader::with_capacity(256 * 1024, std::fs::File::open(path)?);
        loop {
            line.clear();
            if input.read_line(&mut line)? == 0 {
                break;
            }
            let text = line.trim_end_matches(['\n', '\r']);
            if text.is_empty() {
                continue;
            }
            let event: Event = serde_json::from_str(text)?;
            sum = sum.wrapping_add(event.id);
        }
    }
    Ok(sum)
}

/// Sums the ids it receives; at the end adds its subtask's sum to a shared one.
#[derive(Clone)]
struct SumIds {
    sum: u64,
    total: Arc<AtomicU64>,
}

impl Sink<Event> for SumIds {
    fn write_batch(&mut self, batch: Vec<Event>) -> Result<(), UserError> {
        self.sum = batch.iter().fold(self.sum, |a, e| a.wrapping_add(e.id));
        Ok(())
    }

    fn finish(&mut self) -> Result<(), UserError> {
        self.total.fetch_add(self.sum, Ordering::Relaxed);
        Ok(())
    }
}

/// `FileSource` at `parallelism` into a summing sink; returns the wrapping sum of the ids.
pub async fn job(dir: &Path, parallelism: usize) -> anyhow::Result<u64> {
    let env = StreamEnvironment::new();
    env.set_parallelism(parallelism);
    let total = Arc::new(AtomicU64::new(0));
    env.from_source(FileSource::<Event>::json_lines(dir), None, "files")
        .sink_to(SumIds {
            sum: 0,
            total: total.clone(),
        });
    env.execute("source").await?;
    Ok(total.load(Ordering::Relaxed))
}
