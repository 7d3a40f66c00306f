//! An exactly-once Apache Iceberg sink for sluice, on iceberg-rust, as Iceberg's Flink sink does
//! it: writer subtasks write Parquet data files rolled by size and, at each checkpoint barrier,
//! close them and hand their list to a single committer ahead of the barrier; the committer keeps
//! the lists per checkpoint in its checkpointed state and commits each completed checkpoint as
//! one snapshot whose summary records the job id and the checkpoint id (a run of checkpoints
//! without data commits an empty one every `max_continuous_empty_commits`); after a restore it
//! skips the checkpoints the table already holds. Records are distributed to the writers as
//! Iceberg's `write.distribution-mode` says: `none`, `hash` (by partition key) or `range` (the
//! range shuffle of `sluice-shuffle`, by partition key and sort order).
//!
//! Where to find things:
//! - [`IcebergSink`] / [`IcebergSinkBuilder`] (`sink.rs`): the table, its spec, file size,
//!   [`DistributionMode`], and the job-graph layout;
//! - [`IcebergCatalog`] (`catalog/`): SQLite (embedded default), other SQL, REST catalogs;
//!   `S3Storage` (`catalog/s3.rs`, feature `s3`): a warehouse in an S3-compatible bucket;
//!   [`RetryPolicy`] (`catalog/retry.rs`): backoff of catalog calls;
//! - [`schema`]: Arrow → Iceberg schema, the compatibility check, records → Arrow batches;
//!   `schema::serde_type` (feature `serde-schema`): a schema derived from a serde type;
//!   [`schema::key`]: partition fields and the distribution key;
//! - [`writer`]: the writer operator and the [`WriteResult`] it hands on at a barrier;
//! - [`committer`]: the committer, a `TwoPhaseCommitSink` of [`WriteResult`]s;
//!   [`committer::decide`]: its pure decisions (what the table already holds, what is left to
//!   commit, when a checkpoint without files is committed);
//! - reading a table back (`read.rs`): [`IcebergCatalog::scan_table`],
//!   [`IcebergCatalog::table_overview`] ([`TableOverview`], [`DataFileInfo`]),
//!   [`IcebergCatalog::drop_table`];
//! - [`IcebergSinkError`] (`error.rs`).
//!
//! Files of a checkpoint that never completes (the job failed first) are left in the table's
//! data directory, unreferenced by any snapshot: no reader sees them, and removing them safely
//! needs the table's full file list, which is what Iceberg's orphan-file removal (a maintenance
//! job) does. See ARCHITECTURE.md, "How a data file travels".

pub mod catalog;
pub mod committer;
pub mod error;
mod io;
mod read;
pub mod schema;
mod sink;
pub mod writer;

pub use catalog::IcebergCatalog;
#[cfg(feature = "s3")]
pub use catalog::S3Storage;
pub use catalog::retry::RetryPolicy;
pub use error::IcebergSinkError;
pub use read::{DataFileInfo, TableOverview};
pub use schema::key::PartitionField;
pub use sink::{AfterCommit, DistributionMode, IcebergSink, IcebergSinkBuilder};
pub use writer::WriteResult;
