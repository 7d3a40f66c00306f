//! The sluice engine: the DataStream API, the job graph, tasks, exchanges, watermarks and
//! metrics.
//!
//! Where to find things:
//! - [`api`]: [`StreamEnvironment`], [`DataStream`], [`KeyedStream`], sources and sinks;
//! - [`operator`]: the [`Operator`] trait every transformation implements;
//! - `exchange` (crate-private): channels, batches and routing between tasks; the
//!   [`Partitioner`] trait is public at the root;
//! - [`key_groups`]: how keys map to key groups and key groups to subtasks;
//! - [`watermark`]: watermark strategies and the per-task watermark valve;
//! - [`process`]: keyed process functions with per-key state, timers and side outputs;
//! - [`window`]: tumbling, sliding, session and global windows with reduce, aggregate and
//!   process; Flink's triggers and evictors;
//! - `timer` (crate-private): event-time and processing-time timers of keyed operators, kept as
//!   keyed state; operators reach them through [`process`] (its `TimerService` and
//!   [`process::TimeDomain`]);
//! - [`job`]: planning, deployment, the job master, [`JobHandle`] and [`JobResult`], and the
//!   live view of a running job ([`JobObserver`], whose snapshot is a [`JobStatus`]);
//! - [`checkpoint`]: checkpoint settings and the pure machines that plan and complete them;
//! - [`failover`]: restart strategies, and the failover strategy (region by default, or full)
//!   that says which tasks a failure restarts;
//! - [`metrics`]: per operator subtask counters, and what operators publish themselves
//!   (gauges, counters and histograms through a [`metrics::MetricSource`]);
//! - `testing` (with the `testing` feature): fault injection and test operators.
//!
//! # For operator, source and connector authors
//!
//! Everything a new operator, source or sink needs, and nothing of the engine's machinery (the
//! job master, deployment, exchanges and timers' internals are crate-private):
//! - operators: [`Operator`], [`Collector`] (records, event times, watermarks out),
//!   [`OperatorContext`] (subtask, parallelism, metrics, coordinator events), and
//!   [`OperatorState`] with the typed views [`state::ValueState`], [`state::MapState`],
//!   [`state::KeyedListState`] (keyed, in the job's keyed store when it has one, sharing its
//!   backend's [`state::ValueCaches`]) and
//!   [`state::ListState`] (operator state), snapshotted and restored by key group at any
//!   parallelism;
//! - keyed logic with timers: [`process::KeyedProcessFunction`], its [`process::Context`] and
//!   [`process::TimerService`] ([`process::TimeDomain`]), side outputs ([`process::OutputTag`]);
//! - sources: [`SourceHead`] and [`SourceHeadPoll`] (a source at the head of a task that takes
//!   coordinator events and decides its watermarks and end; `sluice-source`'s split sources are
//!   built on it), [`WatermarkStrategy`];
//! - sinks: [`Sink`], and exactly once [`api::TwoPhaseCommitSink`] (a transaction per
//!   checkpoint, committed up to the completed one, [`api::Restored`] on restore) driven by
//!   [`api::TwoPhaseCommitOp`];
//! - routing: [`Partitioner`] and [`key_groups`]; published metrics:
//!   [`metrics::MetricSource`];
//! - checkpoint backends: [`storage::BlobStore`] (put, get, list, delete) under the one layout,
//!   [`storage::BlobCheckpointStorage`];
//! - tests (feature `testing`): `testing::OperatorTestHarness` (one operator driven by hand,
//!   snapshots and restores at another parallelism, coordinator events), the fault injectors
//!   `testing::FailureInjector` and `testing::CoordinatorFaultInjector`.
//!
//! # Features
//!
//! - `testing` (off by default): compiles the `testing` module, the utilities for tests of jobs
//!   and operators (`FailureInjector`, `KeyedCounter`, `SplitMix64`). Like tokio's
//!   `test-util`, enable it only where tests need it:
//!
//!   ```toml
//!   [dev-dependencies]
//!   sluice-runtime = { version = "0.1", features = ["testing"] }
//!   ```
//!
//! ```
//! use sluice_runtime::prelude::*;
//!
//! let env = StreamEnvironment::new();
//! let out = env.from_iter(0u64..1_000).map(|x| x * 2).filter(|x| x % 3 == 0).collect();
//! env.execute_blocking("example").unwrap();
//! assert_eq!(out.len(), 334);
//! ```

#![warn(unreachable_pub)]

pub mod api;
pub mod checkpoint;
pub mod cluster;
mod error;
mod exchange;
pub mod failover;
mod graph;
pub mod job;
pub mod key_groups;
pub mod metrics;
pub mod operator;
pub mod process;
pub mod state;
pub mod storage;
mod task;
#[cfg(feature = "testing")]
pub mod testing;
mod timer;
pub mod watermark;
pub mod window;

pub use api::DataStreamSink;
pub use api::{CoGroupedStreams, IntervalJoin, IntervalJoined, JoinedStreams};
pub use api::{
    CollectHandle, ConnectedStreams, DataStream, Generator, KeyedConnectedStreams, KeyedStream,
    ProcessedStream, Sink, StreamEnvironment, WindowedStream,
};
pub use error::{CoordinatorFailureInfo, JobError, TaskFailure};
pub use exchange::partitioner::Partitioner;
pub use graph::Partitioning;
pub use job::{JobConfig, JobHandle, JobObserver, JobResult, JobState, JobStatus};
pub use key_groups::DEFAULT_MAX_PARALLELISM;
pub use metrics::{JobMetrics, OperatorMetrics, OperatorTotals, SubtaskMetrics};
pub use operator::{Collector, Operator, OperatorContext, SourceHead, SourceHeadPoll};
pub use state::OperatorState;
pub use watermark::WatermarkStrategy;

/// Everything a job definition usually needs.
pub mod prelude {
    pub use crate::{
        CollectHandle, Collector, DataStream, Generator, JobError, JobResult, KeyedStream,
        Operator, OperatorContext, OperatorState, Partitioner, Sink, StreamEnvironment,
        WatermarkStrategy,
    };
    pub use sluice_core::{Data, Either, UserError, Watermark, WatermarkStatus};
}
