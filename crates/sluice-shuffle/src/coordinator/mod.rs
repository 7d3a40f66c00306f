//! The shuffle coordinator: [`ShuffleCoordinator`], the [`CoordinatorLogic`] that aggregates
//! the subtasks' statistics per checkpoint and sends them global statistics, run by
//! [`BaseCoordinator`] on a [`CoordinatorContextBase`]; and [`ShuffleCoordinatorContext`], the
//! base plus the shuffle's sends (`context.rs`).
//!
//! Like Iceberg's `DataStatisticsCoordinator`:
//! - statistics events feed the [`StatisticsTracker`]; a completed, non-empty aggregation
//!   becomes the completed statistics, from which global statistics are computed for the
//!   downstream parallelism the subtasks reported, and sent to every subtask to apply at their
//!   next checkpoint;
//! - a request (every subtask sends one after a restore) is ignored while there are no global
//!   statistics, skipped when its signature equals theirs, and otherwise answered to that
//!   subtask alone, to apply at once; a request reporting another downstream parallelism first
//!   recomputes the global statistics for it;
//! - the checkpoint holds the completed statistics (empty bytes when there are none); a restore
//!   recomputes the global statistics from them.
//!
//! Where sluice differs: when a completed aggregation holds a part above the previous one's
//! highest key large enough to matter (keys that lead with a time bucket moved on to a new
//! one), only that part is kept ([`CompletedStatistics::advanced_from`]), since the traffic the
//! statistics will route is the new bucket's.
//!
//! The base, not this module, registers and forgets gateways, drops events of attempts that are
//! no longer ready, runs everything on the coordinator thread and fails the job when a callback
//! fails.

mod context;

pub use context::ShuffleCoordinatorContext;

use crate::aggregation::{StatisticsTracker, TrackerSettings, Update};
use crate::config::RangeShuffleConfig;
use crate::event::ToCoordinator;
use crate::global::{CompletedStatistics, GlobalStatistics};
use crate::metrics::{ReportCause, StatisticsReport};
use crate::statistics::ShuffleKey;
use sluice_coordinator::{
    BaseCoordinator, CoordinatorContextBase, CoordinatorLogic, CoordinatorProvider, decode_event,
};
use sluice_core::{AttemptNumber, CheckpointId, OperatorEvent, SubtaskIndex, UserError};

/// The shuffle coordinator's logic (see the [module](self) documentation).
pub struct ShuffleCoordinator<K> {
    config: RangeShuffleConfig,
    context: Option<ShuffleCoordinatorContext>,
    tracker: Option<StatisticsTracker<K>>,
    completed: Option<CompletedStatistics<K>>,
    global: Option<(GlobalStatistics<K>, u64)>,
}

impl<K: ShuffleKey> ShuffleCoordinator<K> {
    /// A coordinator with nothing aggregated yet.
    pub fn new(config: RangeShuffleConfig) -> Self {
        ShuffleCoordinator {
            config,
            context: None,
            tracker: None,
            completed: None,
            global: None,
        }
    }

    /// A provider creating it on a [`BaseCoordinator`] (and again on every global failover).
    pub fn provider(config: RangeShuffleConfig) -> impl CoordinatorProvider + 'static {
        BaseCoordinator::provider(move || ShuffleCoordinator::<K>::new(config.clone()))
    }

    /// The statistics of the last completed aggregation.
    pub fn completed_statistics(&self) -> Option<&CompletedStatistics<K>> {
        self.completed.as_ref()
    }

    /// The global statistics the subtasks are sent.
    pub fn global_statistics(&self) -> Option<&GlobalStatistics<K>> {
        self.global.as_ref().map(|(g, _)| g)
    }

    /// Computes, records and logs global statistics of the completed ones for `downstream`.
    fn recompute(&mut self, downstream: usize, cause: ReportCause) -> Result<(), UserError> {
        let Some(completed) = &self.completed else {
            return Ok(());
        };
        let global =
            GlobalStatistics::compute(completed, downstream, self.config.base_weight_percent)?;
        let report = StatisticsReport::new(&global, cause);
        tracing::info!(
            target: "sluice_shuffle",
            operator = %self.config.name,
            checkpoint = global.checkpoint,
            statistics = global.kind().name(),
            keys = global.len(),
            downstream_parallelism = downstream,
            cause = ?cause,
            "new global statistics: {}",
            report.describe()
        );
        self.config.metrics.report(report);
        let signature = global.signature();
        self.global = Some((global, signature));
        Ok(())
    }

    fn context(&self) -> Result<&ShuffleCoordinatorContext, UserError> {
        self.context
            .as_ref()
            .ok_or_else(|| "the shuffle coordinator received an event before it started".into())
    }
}

impl<K: ShuffleKey> CoordinatorLogic for ShuffleCoordinator<K> {
    fn start(&mut self, base: &CoordinatorContextBase) -> Result<(), UserError> {
        self.context = Some(ShuffleCoordinatorContext::new(base.clone()));
        let settings = TrackerSettings {
            parallelism: base.parallelism(),
            statistics_type: self.config.statistics_type,
            switch_threshold: self.config.coordinator_switch_threshold,
            sizing: self.config.sizing,
        };
        let restored = self.completed.as_ref().map(|c| (c.checkpoint, c.kind()));
        self.tracker = Some(StatisticsTracker::new(settings, restored));
        Ok(())
    }

    fn handle_event(
        &mut self,
        _base: &CoordinatorContextBase,
        subtask: SubtaskIndex,
        _attempt: AttemptNumber,
        event: OperatorEvent,
    ) -> Result<(), UserError> {
        match decode_event::<ToCoordinator<K>>(&event)? {
            ToCoordinator::Statistics {
                checkpoint,
                downstream_parallelism,
                statistics,
            } => {
                let tracker = self
                    .tracker
                    .as_mut()
                    .ok_or("the shuffle coordinator received statistics before it started")?;
                match tracker.update(subtask, checkpoint, downstream_parallelism, statistics) {
                    Update::Complete(completed) if completed.is_empty() => {
                        tracing::info!(
                            operator = %self.config.name,
                            checkpoint,
                            "skipping empty aggregated statistics"
                        );
                    }
                    Update::Complete(completed) => {
                        let downstream = completed.downstream_parallelism;
                        let completed =
                            completed.advanced_from(self.completed.as_ref(), downstream);
                        self.completed = Some(completed);
                        self.recompute(downstream, ReportCause::Aggregated)?;
                        if let Some((g, _)) = &self.global {
                            self.context()?.send_statistics_to_subtasks(g)?;
                        }
                    }
                    Update::Stale { completed } => tracing::debug!(
                        operator = %self.config.name,
                        subtask,
                        checkpoint,
                        completed,
                        "ignoring statistics of a checkpoint older than the last completed one"
                    ),
                    Update::Duplicate | Update::UnknownSubtask => tracing::debug!(
                        operator = %self.config.name,
                        subtask,
                        checkpoint,
                        "ignoring duplicate statistics"
                    ),
                    Update::Pending { .. } => {}
                }
            }
            ToCoordinator::Request {
                signature,
                downstream_parallelism,
            } => {
                let Some((g, _)) = &self.global else {
                    tracing::debug!(
                        operator = %self.config.name,
                        subtask,
                        "ignoring a statistics request: no statistics yet"
                    );
                    return Ok(());
                };
                if g.downstream_parallelism != downstream_parallelism {
                    self.recompute(downstream_parallelism, ReportCause::Rescaled)?;
                }
                let Some((g, own)) = &self.global else {
                    return Ok(());
                };
                if signature == Some(*own) {
                    tracing::debug!(
                        operator = %self.config.name,
                        subtask,
                        "the subtask holds the current statistics already"
                    );
                } else {
                    self.context()?.send_statistics_to_subtask(subtask, g)?;
                }
            }
        }
        Ok(())
    }

    fn checkpoint(
        &mut self,
        _base: &CoordinatorContextBase,
        _checkpoint: CheckpointId,
    ) -> Result<Vec<u8>, UserError> {
        match &self.completed {
            Some(c) => Ok(sluice_core::codec::encode(c)?),
            None => Ok(Vec::new()),
        }
    }

    fn restore(&mut self, checkpoint: CheckpointId, state: Option<&[u8]>) -> Result<(), UserError> {
        self.completed = None;
        self.global = None;
        let Some(bytes) = state.filter(|b| !b.is_empty()) else {
            tracing::debug!(operator = %self.config.name, checkpoint = checkpoint.0, "no statistics to restore");
            return Ok(());
        };
        let completed: CompletedStatistics<K> = sluice_core::codec::decode(bytes).map_err(|e| {
            format!("cannot restore the shuffle statistics of checkpoint {checkpoint}: {e}")
        })?;
        let downstream = completed.downstream_parallelism;
        self.completed = Some(completed);
        self.recompute(downstream, ReportCause::Restored)
    }
}

#[cfg(test)]
mod tests;
