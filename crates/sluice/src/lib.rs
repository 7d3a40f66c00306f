//! sluice: a stream-processing engine with Flink's guarantees, as a Rust library.
//!
//! This facade re-exports the public API of the workspace's crates. Most programs need only the
//! [`prelude`].
//!
//! # Features
//!
//! - `testing` (off by default): forwards `sluice-runtime/testing` and so makes `sluice::testing`
//!   available (fault injectors and test operators for tests of jobs). Enable it from
//!   `[dev-dependencies]`:
//!
//!   ```toml
//!   [dev-dependencies]
//!   sluice = { version = "0.1", features = ["testing"] }
//!   ```
//!
//! ```
//! use sluice::prelude::*;
//!
//! let env = StreamEnvironment::new();
//! let out = env.from_iter(vec![1u64, 2, 3]).map(|x| x + 1).collect();
//! env.execute_blocking("hello").unwrap();
//! let mut v = out.take();
//! v.sort();
//! assert_eq!(v, vec![2, 3, 4]);
//! ```

// A chosen list, not the runtime's every item: the job master, deployment, the wire protocol of
// cluster mode, exchanges, timers' machinery and checkpoint storage's layout stay behind it
// (`sluice-node` and `sluice-object-store` reach what they need from `sluice-runtime` itself).

/// Joining two streams: by event-time intervals, in windows, co-grouped in windows.
pub use sluice_runtime::{CoGroupedStreams, IntervalJoin, IntervalJoined, JoinedStreams};
/// Writing a job: the environment, streams and their sinks.
pub use sluice_runtime::{
    CollectHandle, ConnectedStreams, DataStream, DataStreamSink, Generator, KeyedConnectedStreams,
    KeyedStream, Partitioning, ProcessedStream, Sink, StreamEnvironment, WindowedStream,
};
/// Writing operators, sources and partitioners.
pub use sluice_runtime::{
    Collector, Operator, OperatorContext, OperatorState, Partitioner, SourceHead, SourceHeadPoll,
    WatermarkStrategy,
};
/// Running and watching a job: its configuration, handle, result, errors, live view and metrics.
pub use sluice_runtime::{
    CoordinatorFailureInfo, DEFAULT_MAX_PARALLELISM, JobConfig, JobError, JobHandle, JobMetrics,
    JobObserver, JobResult, JobState, JobStatus, OperatorMetrics, OperatorTotals, SubtaskMetrics,
    TaskFailure,
};
/// The modules a job or an operator author reaches into: sinks and two-phase commit (`api`),
/// checkpoint settings, restart and failover strategies, the job's statistics and status types,
/// key groups, metrics that operators publish, operators, keyed process functions, state views,
/// watermarks and windows.
pub use sluice_runtime::{
    api, checkpoint, failover, job, key_groups, metrics, operator, process, state, watermark,
    window,
};

pub use sluice_async_io as async_io;
pub use sluice_connectors as connectors;
pub use sluice_coordinator as coordinator;
pub use sluice_core as core;
#[cfg(feature = "testing")]
pub use sluice_runtime::testing;
pub use sluice_shuffle as shuffle;

/// Everything a job definition usually needs: the DataStream API, checkpoint settings, restart
/// strategies, the exactly-once JSON-lines sink, async I/O and the range shuffle.
///
/// A first job with checkpoints, a restart strategy and exactly-once output, with nothing but
/// the prelude in scope:
///
/// ```
/// use sluice::prelude::*;
/// use std::time::Duration;
///
/// let dir = tempfile::tempdir().unwrap();
/// let env = StreamEnvironment::new();
/// env.set_parallelism(2);
/// env.set_checkpoint_settings(CheckpointSettings::every(Duration::from_millis(50)));
/// env.set_checkpoint_storage(dir.path().join("checkpoints"));
/// let backoff = ExponentialBackoff::new(Duration::from_millis(10), Duration::from_secs(1), 2.0);
/// env.set_restart_strategy(RestartStrategy::exponential_backoff(backoff).unwrap());
/// env.from_iter(0u64..100)
///     .map(|x| x * 2)
///     .sink_to_exactly_once(JsonLinesSink::new(dir.path().join("out"), "doubled"));
/// let result: JobResult = env.execute_blocking("first job").unwrap();
/// assert_eq!(result.restarts, 0);
/// let mut out: Vec<u64> = read_committed(&dir.path().join("out")).unwrap();
/// out.sort();
/// assert_eq!(out, (0..100).map(|x| x * 2).collect::<Vec<_>>());
/// ```
pub mod prelude {
    pub use sluice_async_io::{
        AsyncBatchFunction, AsyncDataStream, AsyncFunction, AsyncRetryStrategy, AsyncWait, async_fn,
    };
    pub use sluice_connectors::file::{JsonLinesSink, read_committed};
    pub use sluice_runtime::JobHandle;
    pub use sluice_runtime::checkpoint::CheckpointSettings;
    pub use sluice_runtime::failover::{ExponentialBackoff, FailoverStrategy, RestartStrategy};
    pub use sluice_runtime::prelude::*;
    pub use sluice_shuffle::{RangeShuffle, RangeShuffleConfig, StatisticsType};
}
