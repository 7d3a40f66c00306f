//! [`RangeShuffleConfig`]: the statistics type, the per-key base weight, the sample sizes and the
//! operator's name, with the [`ShuffleMetrics`] handle that reports what the shuffle decided.

use crate::metrics::ShuffleMetrics;
use crate::sizing::{
    COORDINATOR_SKETCH_SWITCH_THRESHOLD, OPERATOR_SKETCH_SWITCH_THRESHOLD, ReservoirSizing,
};
use crate::statistics::StatisticsType;

/// A setting of [`RangeShuffleConfig`] that cannot work; reported when the job is submitted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ShuffleConfigError {
    /// The base weight is negative, above 100 % or not a number.
    #[error(
        "the sort key base weight must be between 0 and 100 % of the target weight per subtask, got {0}"
    )]
    BaseWeight(f64),
}

/// How a [`range_shuffle`](crate::RangeShuffle::range_shuffle) collects statistics and assigns
/// keys.
///
/// Defaults: [`StatisticsType::Auto`], base weight 0 %, [`ReservoirSizing::KeepAll`], operator
/// name "Range Shuffle".
///
/// ```
/// use sluice_shuffle::{RangeShuffleConfig, StatisticsType};
///
/// let config = RangeShuffleConfig::default()
///     .statistics_type(StatisticsType::Map)
///     .base_weight_percent(2.0);
/// let metrics = config.metrics(); // read it while the job runs or after
/// assert_eq!(metrics.reports(), 0);
/// assert!(config.validate().is_ok());
/// assert!(RangeShuffleConfig::default().base_weight_percent(120.0).validate().is_err());
/// ```
#[derive(Clone, Debug)]
pub struct RangeShuffleConfig {
    pub(crate) statistics_type: StatisticsType,
    pub(crate) base_weight_percent: f64,
    pub(crate) sizing: ReservoirSizing,
    pub(crate) name: String,
    pub(crate) metrics: ShuffleMetrics,
    pub(crate) operator_switch_threshold: usize,
    pub(crate) coordinator_switch_threshold: usize,
}

impl Default for RangeShuffleConfig {
    fn default() -> Self {
        RangeShuffleConfig {
            statistics_type: StatisticsType::Auto,
            base_weight_percent: 0.0,
            sizing: ReservoirSizing::default(),
            name: "Range Shuffle".to_string(),
            metrics: ShuffleMetrics::default(),
            operator_switch_threshold: OPERATOR_SKETCH_SWITCH_THRESHOLD,
            coordinator_switch_threshold: COORDINATOR_SKETCH_SWITCH_THRESHOLD,
        }
    }
}

impl RangeShuffleConfig {
    /// Which statistics to collect (Iceberg's `range-distribution-statistics-type`).
    pub fn statistics_type(mut self, statistics_type: StatisticsType) -> Self {
        self.statistics_type = statistics_type;
        self
    }

    /// The base weight added per subtask a key is assigned to, as a percentage of the target
    /// weight per subtask (Iceberg's `range-distribution-sort-key-base-weight`, default 0).
    /// With a sink writing one file per key and subtask, 2 % means a subtask takes at most about
    /// 50 small keys, each standing for the cost of one more file. Map statistics only.
    pub fn base_weight_percent(mut self, percent: f64) -> Self {
        self.base_weight_percent = percent;
        self
    }

    /// How large the coordinator's merged sample is (Sketch statistics).
    pub fn reservoir_sizing(mut self, sizing: ReservoirSizing) -> Self {
        self.sizing = sizing;
        self
    }

    /// The shuffle operator's name (in metrics, logs and errors).
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// The handle on what the shuffle decides and how it routed (shared by clones of this
    /// configuration).
    pub fn metrics(&self) -> ShuffleMetrics {
        self.metrics.clone()
    }

    /// Lower switch thresholds, for tests of `Auto`.
    #[doc(hidden)]
    pub fn switch_thresholds(mut self, operator: usize, coordinator: usize) -> Self {
        self.operator_switch_threshold = operator;
        self.coordinator_switch_threshold = coordinator;
        self
    }

    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ShuffleConfigError> {
        let p = self.base_weight_percent;
        if !(0.0..=100.0).contains(&p) {
            return Err(ShuffleConfigError::BaseWeight(p));
        }
        Ok(())
    }
}
