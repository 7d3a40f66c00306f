//! Range shuffle for sluice (placeholder; filled in below).
pub mod aggregation;
pub mod assignment;
pub mod bounds;
pub mod global;
mod rng;
pub mod router;
pub mod sizing;
pub mod statistics;

pub use assignment::{AssignmentError, KeyAssignment, MapAssignment, SubtaskShare};
pub use global::{CompletedData, CompletedStatistics, GlobalStatistics, Routing};
pub use router::{RangeRouter, RouteTable};
pub use sizing::ReservoirSizing;
pub use statistics::{LocalStatistics, ShuffleKey, StatisticsType};
pub mod metrics;
pub mod partitioner;
pub use metrics::ShuffleMetrics;
pub use partitioner::RangePartitioner;
pub mod config;
pub mod coordinator;
pub mod event;
pub use config::{RangeShuffleConfig, ShuffleConfigError};
pub use coordinator::{ShuffleCoordinator, ShuffleCoordinatorContext};
mod api;
pub mod operator;
pub use api::RangeShuffle;
pub use operator::ShuffleOperator;
