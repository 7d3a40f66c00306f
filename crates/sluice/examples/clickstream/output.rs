//! The output directory: emptied at a fresh start, kept (with a note of the run's settings) for a
//! restore, and read back at the end to check that every click was committed exactly once.

use crate::events::Expected;
use rustc_hash::FxHashMap;
use serde::Deserialize;
use sluice_connectors::file::{FileError, read_committed};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The prefix of the sink's files.
pub const FILE_PREFIX: &str = "clickstream";
/// The prefix of the per-minute sink's files.
pub const MINUTES_PREFIX: &str = "minutes";
/// The per-minute output's directory, inside the output directory.
const MINUTES_DIR: &str = "per-minute";

/// Where the per-minute counts go.
pub fn minutes_dir(output: &Path) -> PathBuf {
    output.join(MINUTES_DIR)
}
/// The note of the settings a restore must keep (hidden: readers of the output skip it).
const RUN_NOTE: &str = ".clickstream-run";

/// What went wrong with the output directory.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// A file operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Nothing to continue: the directory holds no run.
    #[error(
        "{0} holds no output of an earlier run; --restore continues a run into the --output \
         directory it was writing to"
    )]
    NoRun(PathBuf),
    /// The note is damaged.
    #[error("{path} is damaged: {reason}")]
    BadNote {
        /// The note.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Reading the committed output failed.
    #[error(transparent)]
    Read(#[from] FileError),
}

fn io_error(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> OutputError {
    let path = path.to_path_buf();
    move |source| OutputError::Io { op, path, source }
}

/// The settings of a run that a restore must keep: they decide which events exist and which
/// source subtask generates each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunSettings {
    /// Number of events.
    pub events: u64,
    /// Parallelism of the job.
    pub parallelism: usize,
}

/// Creates `dir` for a fresh run: removes the output files of earlier runs (and nothing else)
/// and notes `settings`.
pub fn start_fresh(dir: &Path, settings: RunSettings) -> Result<(), OutputError> {
    remove_outputs(dir, FILE_PREFIX)?;
    remove_outputs(&minutes_dir(dir), MINUTES_PREFIX)?;
    let note = dir.join(RUN_NOTE);
    let text = format!(
        "events {}\nparallelism {}\n",
        settings.events, settings.parallelism
    );
    fs::write(&note, text).map_err(io_error("write", &note))
}

/// Creates `dir` and removes the sink files with `prefix` (and the run note) from it.
fn remove_outputs(dir: &Path, prefix: &str) -> Result<(), OutputError> {
    fs::create_dir_all(dir).map_err(io_error("create directory", dir))?;
    for entry in fs::read_dir(dir).map_err(io_error("list", dir))? {
        let entry = entry.map_err(io_error("list", dir))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let ours = name.trim_start_matches('.').starts_with(prefix)
            && (name.ends_with(".jsonl") || name.ends_with(".jsonl.inprogress"));
        if ours || name == RUN_NOTE {
            let path = entry.path();
            fs::remove_file(&path).map_err(io_error("remove", &path))?;
        }
    }
    Ok(())
}

/// The settings noted by the run that wrote to `dir`.
pub fn noted_settings(dir: &Path) -> Result<RunSettings, OutputError> {
    let note = dir.join(RUN_NOTE);
    let text = match fs::read_to_string(&note) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(OutputError::NoRun(dir.to_path_buf()));
        }
        other => other.map_err(io_error("read", &note))?,
    };
    let bad = |reason: String| OutputError::BadNote {
        path: note.clone(),
        reason,
    };
    let value = |key: &str| -> Result<u64, OutputError> {
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .ok_or_else(|| bad(format!("no {key}")))?;
        line.trim()
            .parse()
            .map_err(|e| bad(format!("{key} {line:?}: {e}")))
    };
    Ok(RunSettings {
        events: value("events")?,
        parallelism: usize::try_from(value("parallelism")?)
            .map_err(|e| bad(format!("parallelism: {e}")))?,
    })
}

/// The two fields of an output line the check needs.
#[derive(Deserialize)]
struct Line {
    user: u64,
    clicks: u64,
}

/// What the committed output holds, compared with what the filters let through.
#[derive(Debug)]
pub struct Verdict {
    /// Lines committed.
    pub records: u64,
    /// Committed files.
    pub files: usize,
    /// Lines whose `(user, clicks)` pair appeared before.
    pub duplicates: u64,
    /// Users whose committed count differs from the expected one (missing or extra clicks).
    pub wrong_users: usize,
    /// Users with committed clicks.
    pub users: usize,
    /// Clicks that passed the filters, by the independent count.
    pub expected: u64,
    /// The five users with most clicks, as committed.
    pub top: Vec<(u64, u64)>,
}

impl Verdict {
    /// Every click that passed the filters is in the output, once.
    pub fn exact(&self) -> bool {
        self.duplicates == 0 && self.wrong_users == 0 && self.records == self.expected
    }
}

/// Reads what the sink committed to `dir` and checks it against `expected`.
pub fn verify(dir: &Path, expected: &Expected) -> Result<Verdict, OutputError> {
    let mut lines: Vec<(u64, u64)> = read_committed::<Line>(dir)?
        .into_iter()
        .map(|l| (l.user, l.clicks))
        .collect();
    lines.sort_unstable();
    let records = lines.len() as u64;
    let before = lines.len();
    lines.dedup();
    let duplicates = (before - lines.len()) as u64;

    // Per user, after dedup: how many distinct counts, and the highest.
    let mut committed: FxHashMap<u64, (u64, u64)> = FxHashMap::default();
    for &(user, clicks) in &lines {
        let (n, max) = committed.entry(user).or_insert((0, 0));
        *n += 1;
        *max = (*max).max(clicks);
    }
    // A user is right when it has exactly the expected clicks, numbered 1 to that count.
    let wrong = expected
        .per_user
        .iter()
        .filter(|&(user, &want)| committed.get(user) != Some(&(want, want)))
        .count();
    let unexpected = committed
        .keys()
        .filter(|u| !expected.per_user.contains_key(u))
        .count();

    let mut top: Vec<(u64, u64)> = committed.iter().map(|(&u, &(n, _))| (u, n)).collect();
    top.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(5);
    Ok(Verdict {
        records,
        files: count_files(dir)?,
        duplicates,
        wrong_users: wrong + unexpected,
        users: committed.len(),
        expected: expected.passed(),
        top,
    })
}

/// The per-minute output, checked against the clicks that passed the filters.
#[derive(Debug)]
pub struct MinutesVerdict {
    /// (user, minute) counts committed.
    pub windows: u64,
    /// (user, minute) pairs committed more than once.
    pub duplicates: u64,
    /// Users whose minutes do not add up to their clicks.
    pub wrong_users: usize,
}

impl MinutesVerdict {
    /// Every window once, and every user's minutes add up to the user's clicks.
    pub fn exact(&self) -> bool {
        self.duplicates == 0 && self.wrong_users == 0
    }
}

#[derive(Deserialize)]
struct MinuteLine {
    user: u64,
    minute_ms: i64,
    clicks: u64,
}

/// Reads the per-minute counts committed under `dir` and checks them against `expected`.
pub fn verify_minutes(dir: &Path, expected: &Expected) -> Result<MinutesVerdict, OutputError> {
    let lines: Vec<MinuteLine> = read_committed(&minutes_dir(dir))?;
    let mut seen = std::collections::HashSet::new();
    let mut duplicates = 0;
    let mut per_user: FxHashMap<u64, u64> = FxHashMap::default();
    for l in &lines {
        if seen.insert((l.user, l.minute_ms)) {
            *per_user.entry(l.user).or_insert(0) += l.clicks;
        } else {
            duplicates += 1;
        }
    }
    let wrong = expected
        .per_user
        .iter()
        .filter(|&(user, &want)| per_user.get(user) != Some(&want))
        .count()
        + per_user
            .keys()
            .filter(|u| !expected.per_user.contains_key(u))
            .count();
    Ok(MinutesVerdict {
        windows: lines.len() as u64,
        duplicates,
        wrong_users: wrong,
    })
}

fn count_files(dir: &Path) -> Result<usize, OutputError> {
    let mut files = 0;
    for entry in fs::read_dir(dir).map_err(io_error("list", dir))? {
        let name = entry.map_err(io_error("list", dir))?.file_name();
        let name = name.to_string_lossy();
        files += usize::from(!name.starts_with('.') && name.ends_with(".jsonl"));
    }
    Ok(files)
}
