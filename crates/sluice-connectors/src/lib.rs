//! Connectors: where sluice jobs read from and write to.
//!
//! - [`file`](mod@file): an exactly-once JSON-lines file sink built on
//!   [`TwoPhaseCommitSink`](sluice_runtime::api::TwoPhaseCommitSink), and a reader of what it
//!   committed.

pub mod file;
