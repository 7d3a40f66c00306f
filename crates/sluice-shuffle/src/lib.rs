//! Range shuffle for sluice: partitions a stream by ranges of a key, balanced by the key weights
//! measured at every checkpoint, so that the next operator's subtasks receive balanced,
//! clustered key ranges (heavy keys split over several subtasks, light keys packed together in
//! key order). It follows the Iceberg Flink sink's `RANGE` distribution mode.
//!
//! Where to find things:
//! - [`RangeShuffle::range_shuffle`] and [`RangeShuffleConfig`] (`api.rs`, `config.rs`): the
//!   API; [`ShuffleMetrics`] (`metrics.rs`): what the shuffle decided and how it routed;
//! - [`ShuffleOperator`] (`operator.rs`): counts keys, sends them at checkpoints, applies the
//!   global statistics; [`RangePartitioner`] (`partitioner.rs`): routes its output;
//! - [`ShuffleCoordinator`] and [`ShuffleCoordinatorContext`] (`coordinator/`): the coordinator,
//!   on `sluice_coordinator`'s `BaseCoordinator` and `CoordinatorContextBase`;
//! - pure pieces: [`statistics`] (local statistics, reservoir sampling and its union),
//!   [`aggregation`] (the per-checkpoint tracker), [`assignment`] (Map statistics → key
//!   assignment), [`bounds`] (Sketch samples → range bounds), [`global`] (completed and global
//!   statistics), [`router`] (routing by them), [`sizing`] (sample sizes and thresholds);
//! - [`event`]: the events between operator and coordinator.
//!
//! ```
//! use sluice_runtime::prelude::*;
//! use sluice_shuffle::{RangeShuffle, RangeShuffleConfig};
//!
//! let env = StreamEnvironment::new();
//! env.set_parallelism(2);
//! let out = env
//!     .from_iter(0u64..100)
//!     .range_shuffle(|x: &u64| x % 10, RangeShuffleConfig::default())
//!     .map(|x| x * 2)
//!     .collect();
//! env.execute_blocking("shuffled").unwrap();
//! assert_eq!(out.len(), 100);
//! ```

pub mod aggregation;
mod api;
pub mod assignment;
pub mod bounds;
pub mod config;
pub mod coordinator;
pub mod event;
pub mod global;
pub mod metrics;
pub mod operator;
pub mod partitioner;
mod rng;
pub mod router;
pub mod sizing;
pub mod statistics;

pub use api::RangeShuffle;
pub use assignment::{AssignmentError, KeyAssignment, MapAssignment, SubtaskShare};
pub use config::{RangeShuffleConfig, ShuffleConfigError};
pub use coordinator::{ShuffleCoordinator, ShuffleCoordinatorContext};
pub use global::{CompletedData, CompletedStatistics, GlobalStatistics, Routing};
pub use metrics::ShuffleMetrics;
pub use operator::ShuffleOperator;
pub use partitioner::RangePartitioner;
pub use router::{RangeRouter, RouteTable};
pub use sizing::ReservoirSizing;
pub use statistics::{LocalStatistics, ShuffleKey, StatisticsType};
