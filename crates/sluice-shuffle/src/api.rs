//! [`RangeShuffle`]: `range_shuffle` on every `DataStream`, as an extension trait (the runtime
//! does not depend on this crate).

use crate::config::RangeShuffleConfig;
use crate::coordinator::ShuffleCoordinator;
use crate::operator::ShuffleOperator;
use crate::partitioner::{RangePartitioner, RouteCells};
use crate::statistics::ShuffleKey;
use sluice_core::Data;
use sluice_runtime::DataStream;
use std::sync::Arc;

/// Range shuffle on a stream.
pub trait RangeShuffle<T> {
    /// Partitions the stream by ranges of `key_fn`'s key, balanced by the measured weight of
    /// the keys: the next operator's subtasks receive balanced, clustered key ranges. Heavy keys
    /// are split over several subtasks, light keys packed together in key order.
    ///
    /// Adds a shuffle operator (at this stream's parallelism, so that it chains) whose
    /// coordinator aggregates key statistics at every checkpoint; checkpointing must be on for
    /// it to learn anything. Until the first statistics arrive, records go round robin. Bad
    /// settings fail `submit`/`execute` with `JobError::InvalidJob` naming the operator.
    ///
    /// ```
    /// use sluice_runtime::prelude::*;
    /// use sluice_shuffle::{RangeShuffle, RangeShuffleConfig, StatisticsType};
    /// use std::time::Duration;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let env = StreamEnvironment::new();
    /// env.set_parallelism(2).enable_checkpointing(Duration::from_millis(10));
    /// env.set_checkpoint_storage(dir.path());
    /// let config = RangeShuffleConfig::default().statistics_type(StatisticsType::Map);
    /// let metrics = config.metrics();
    /// let out = env
    ///     // Key 0 is half of the traffic (of every source subtask's too, however the indices
    ///     // are split: the lowest bit of the index's Gray code alternates either way).
    ///     .from_generator(Generator::new(|i| if (i ^ (i >> 1)) & 1 == 0 { 0u64 } else { i % 50 }).take(20_000).rate_limit(200_000.0))
    ///     .range_shuffle(|k: &u64| *k, config)
    ///     .map(|k| k)
    ///     .parallelism(4)
    ///     .collect();
    /// env.execute_blocking("range shuffle").unwrap();
    /// assert_eq!(out.len(), 20_000);
    /// // The latest statistics are those of the last checkpoint interval; the final one may
    /// // have seen only a handful of records, so look only if it saw a fair sample.
    /// if let Some(report) = metrics.latest().filter(|r| r.keys >= 10) {
    ///     // Key 0 needs two of the four subtasks.
    ///     let route = report.route_of("0").expect("key 0 is in every fair sample");
    ///     assert!(route.subtasks.len() >= 2, "{}", report.describe());
    /// }
    /// ```
    fn range_shuffle<K, F>(&self, key_fn: F, config: RangeShuffleConfig) -> DataStream<T>
    where
        K: ShuffleKey,
        F: Fn(&T) -> K + Clone + Send + 'static;
}

impl<T: Data> RangeShuffle<T> for DataStream<T> {
    fn range_shuffle<K, F>(&self, key_fn: F, config: RangeShuffleConfig) -> DataStream<T>
    where
        K: ShuffleKey,
        F: Fn(&T) -> K + Clone + Send + 'static,
    {
        let cells = Arc::new(RouteCells::<K>::default());
        let operator = ShuffleOperator::new(key_fn.clone(), config.clone(), cells.clone());
        let provider = ShuffleCoordinator::<K>::provider(config.clone());
        let mut shuffled = self.transform_with_coordinator(&config.name, operator, provider);
        if let Some(p) = self.configured_parallelism() {
            shuffled = shuffled.parallelism(p);
        }
        if let Err(e) = config.validate() {
            shuffled = shuffled.reject_at_submit(e.to_string());
        }
        shuffled.partition_custom(RangePartitioner::new(key_fn, cells, config.metrics()))
    }
}
