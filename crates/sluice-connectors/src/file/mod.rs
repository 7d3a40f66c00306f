//! Files: the exactly-once [`JsonLinesSink`] and [`read_committed`].
//!
//! A transaction is one file. Records are written to a hidden in-progress file
//! (`.<prefix>-<run>-<subtask>-<n>.jsonl.inprogress`); at a checkpoint barrier the file is flushed
//! and synced (pre-commit); when the checkpoint completes it is renamed to its visible name
//! (`<prefix>-<run>-<subtask>-<n>.jsonl`), which is atomic. A reader that lists only visible
//! `.jsonl` files therefore sees every record exactly once after any number of failures. The run
//! tag differs per attempt, so file names never collide across restarts or runs.

mod json_lines;

pub use json_lines::{FileError, JsonLinesSink, JsonTransaction, read_committed};
