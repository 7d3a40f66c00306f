//! The click files the job reads: generated into the data directory on first use, kept for
//! later runs, generated again when a run asks for another number of events or files. A small
//! manifest (`_clickstream-manifest`, ignored by the file source like every name starting with
//! `_` or `.`) says what the files hold; it is written last, so an interrupted generation is
//! redone.
//!
//! File `clicks-K.csv` holds a contiguous range of events in index order (so its event times
//! only grow, up to the generator's lateness): each reader subtask's event time then advances
//! from file to file, and no click is late for the windows.

use crate::events::{self, CSV_HEADER};
use anyhow::{Context as _, bail};
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The manifest's name.
const MANIFEST: &str = "_clickstream-manifest";
/// The first line of the manifest; a new generator gets a new one, so old data is replaced.
const MANIFEST_HEAD: &str = "sluice clickstream click files, generator 2";

/// The click files of a run.
#[derive(Debug)]
pub struct DataSet {
    /// The directory.
    pub dir: PathBuf,
    /// Events in the files.
    pub events: u64,
    /// The files.
    pub files: Vec<PathBuf>,
    /// Their size.
    pub bytes: u64,
    /// How long generating them took, when this run generated them.
    pub generated: Option<Duration>,
}

/// What the manifest says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// Events in the files.
    pub events: u64,
    /// Number of files.
    pub files: usize,
}

fn file_name(k: usize) -> String {
    format!("clicks-{k:04}.csv")
}

/// The manifest of the data in `dir`, if there is one.
pub fn manifest(dir: &Path) -> anyhow::Result<Option<Manifest>> {
    let path = dir.join(MANIFEST);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut lines = text.lines();
    if lines.next() != Some(MANIFEST_HEAD) {
        return Ok(None);
    }
    let mut value = |key: &str| -> Option<u64> {
        lines
            .next()?
            .strip_prefix(key)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    };
    Ok(match (value("events"), value("files")) {
        (Some(events), Some(files)) => Some(Manifest {
            events,
            files: files as usize,
        }),
        _ => None,
    })
}

/// The data set in `dir` as `wanted` describes it: the files there when their manifest matches
/// and every file is present, otherwise generated anew (removing the old click files).
pub fn prepare(dir: &Path, wanted: Manifest) -> anyhow::Result<DataSet> {
    fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    let files: Vec<PathBuf> = (0..wanted.files).map(|k| dir.join(file_name(k))).collect();
    let present = files.iter().all(|f| f.is_file());
    let generated = if present && manifest(dir)? == Some(wanted) {
        None
    } else {
        let started = Instant::now();
        generate(dir, wanted, &files)?;
        Some(started.elapsed())
    };
    let mut bytes = 0;
    for f in &files {
        bytes += fs::metadata(f)
            .with_context(|| format!("cannot read {}", f.display()))?
            .len();
    }
    Ok(DataSet {
        dir: dir.to_path_buf(),
        events: wanted.events,
        files,
        bytes,
        generated,
    })
}

/// Removes the old click files and the manifest, writes the new files (in parallel, each under
/// a hidden name, then renamed into place), then the manifest.
fn generate(dir: &Path, wanted: Manifest, files: &[PathBuf]) -> anyhow::Result<()> {
    let manifest_path = dir.join(MANIFEST);
    if manifest_path.exists() {
        fs::remove_file(&manifest_path)
            .with_context(|| format!("cannot remove {}", manifest_path.display()))?;
    }
    for entry in fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let ours = name.trim_start_matches('.').starts_with("clicks-")
            && (name.ends_with(".csv") || name.ends_with(".csv.tmp"));
        if ours {
            fs::remove_file(entry.path())
                .with_context(|| format!("cannot remove {}", entry.path().display()))?;
        }
    }
    let users = events::user_popularity().context("invalid user distribution")?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per_file = wanted.events.div_ceil(wanted.files as u64);
    let written: Vec<anyhow::Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || -> anyhow::Result<()> {
                    for (k, path) in files.iter().enumerate().skip(t).step_by(threads) {
                        let start = (k as u64 * per_file).min(wanted.events);
                        let end = (start + per_file).min(wanted.events);
                        write_file(path, start..end, &users)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a generator thread panicked")))
            })
            .collect()
    });
    for w in written {
        w?;
    }
    let text = format!(
        "{MANIFEST_HEAD}\nevents {}\nfiles {}\n",
        wanted.events, wanted.files
    );
    fs::write(&manifest_path, text)
        .with_context(|| format!("cannot write {}", manifest_path.display()))
}

/// Writes events `range` to `path` (through a hidden temporary name).
fn write_file(
    path: &Path,
    range: std::ops::Range<u64>,
    users: &rand_distr::Zipf<f64>,
) -> anyhow::Result<()> {
    let Some(name) = path.file_name() else {
        bail!("{} is not a file path", path.display());
    };
    let tmp = path.with_file_name(format!(".{}.tmp", name.to_string_lossy()));
    let write = || -> std::io::Result<()> {
        let mut out = BufWriter::with_capacity(1 << 20, fs::File::create(&tmp)?);
        writeln!(out, "{CSV_HEADER}")?;
        for i in range {
            events::generate(i, users).write_csv(&mut out)?;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()
    };
    write().with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, path)
        .with_context(|| format!("cannot rename {} to {}", tmp.display(), path.display()))
}
