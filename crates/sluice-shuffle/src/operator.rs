//! [`ShuffleOperator`]: counts the keys of the records passing through, sends the counts to the
//! coordinator at each checkpoint, and publishes the global statistics it receives to its
//! partitioner (Iceberg's `DataStatisticsOperator`).
//!
//! - Records pass through unchanged; their keys feed the local statistics: exact counts (Map)
//!   or a reservoir sample (Sketch; a record's key is computed only when the sample keeps it).
//! - At each checkpoint the local statistics go to the coordinator for that checkpoint id, and
//!   counting starts afresh; local statistics are never checkpointed.
//! - Global statistics from a broadcast are applied at the next checkpoint (every subtask then
//!   switches at the same barrier); those answering a request, at once.
//! - The latest global statistics are the operator's state. After a restore the subtask routes
//!   by them at once and asks the coordinator for the current ones, sending their signature, so
//!   the coordinator answers only if they differ (also after a rescale of either side).
//! - `Auto` switches the local statistics from Map to Sketch beyond
//!   [`OPERATOR_SKETCH_SWITCH_THRESHOLD`](crate::sizing::OPERATOR_SKETCH_SWITCH_THRESHOLD)
//!   distinct keys, or when the global statistics are a Sketch, replaying the counts.
//!
//! Where sluice differs: Iceberg keeps the statistics in union list state written by subtask 0;
//! sluice has no union state, so every subtask writes its own copy (all equal). At the same
//! parallelism each gets its own back; a subtask added by a scale-up gets none and routes round
//! robin until the coordinator answers its request.

use crate::config::RangeShuffleConfig;
use crate::event::{ToCoordinator, ToOperator};
use crate::global::GlobalStatistics;
use crate::metrics::{GAUGE_CHECKPOINT, GAUGE_KEYS, GAUGE_TYPE};
use crate::partitioner::{RouteCell, RouteCells};
use crate::router::RouteTable;
use crate::statistics::{LocalStatistics, ShuffleKey, StatisticsType, map_to_sketch};
use sluice_coordinator::decode_event;
use sluice_core::{CheckpointId, Data, OperatorEvent, UserError, codec};
use sluice_runtime::{Collector, Operator, OperatorContext, OperatorState};
use std::sync::Arc;

/// The shuffle operator (see the [module](self) documentation). Made by
/// [`range_shuffle`](crate::RangeShuffle::range_shuffle).
pub struct ShuffleOperator<K, F> {
    key_fn: F,
    config: RangeShuffleConfig,
    cells: Arc<RouteCells<K>>,
    ctx: Option<OperatorContext>,
    cell: Option<Arc<RouteCell<K>>>,
    local: Option<LocalStatistics<K>>,
    /// The latest global statistics received or restored.
    latest: Option<GlobalStatistics<K>>,
    /// Whether `latest` still has to be published to the partitioner.
    pending: bool,
    restored: bool,
}

impl<K: ShuffleKey, F: Clone> Clone for ShuffleOperator<K, F> {
    /// A fresh operator for another subtask (nothing counted, nothing received).
    fn clone(&self) -> Self {
        ShuffleOperator::new(self.key_fn.clone(), self.config.clone(), self.cells.clone())
    }
}

impl<K: ShuffleKey, F> ShuffleOperator<K, F> {
    /// An operator counting `key_fn`'s keys under `config`, publishing to `cells`.
    pub fn new(key_fn: F, config: RangeShuffleConfig, cells: Arc<RouteCells<K>>) -> Self {
        ShuffleOperator {
            key_fn,
            config,
            cells,
            ctx: None,
            cell: None,
            local: None,
            latest: None,
            pending: false,
            restored: false,
        }
    }

    /// The local statistics counted since the last checkpoint.
    pub fn local_statistics(&self) -> Option<&LocalStatistics<K>> {
        self.local.as_ref()
    }

    /// The latest global statistics received or restored.
    pub fn global_statistics(&self) -> Option<&GlobalStatistics<K>> {
        self.latest.as_ref()
    }

    /// Whether the latest global statistics are routed by already.
    pub fn is_applied(&self) -> bool {
        self.latest.is_some() && !self.pending
    }

    fn ctx(&self) -> Result<&OperatorContext, UserError> {
        self.ctx
            .as_ref()
            .ok_or_else(|| "the shuffle operator was not opened".into())
    }

    /// The downstream parallelism the partitioner routes among (1 when the edge is chained).
    fn downstream(&self) -> usize {
        self.cell
            .as_ref()
            .map_or(1, |c| c.downstream_parallelism())
            .max(1)
    }

    fn reservoir(&self) -> usize {
        let p = self.ctx.as_ref().map_or(1, |c| c.parallelism());
        self.config.sizing.operator(p, self.downstream())
    }

    fn fresh(&self, kind: StatisticsType) -> LocalStatistics<K> {
        LocalStatistics::new(kind, self.reservoir())
    }

    /// Publishes the latest statistics to the partitioner.
    fn apply(&mut self) {
        let (Some(g), Some(cell)) = (&self.latest, &self.cell) else {
            return;
        };
        cell.publish(Arc::new(RouteTable::new(g)));
        self.pending = false;
        if let Some(ctx) = &self.ctx {
            let m = ctx.metrics();
            m.set_gauge(
                GAUGE_CHECKPOINT,
                i64::try_from(g.checkpoint).unwrap_or(i64::MAX),
            );
            m.set_gauge(
                GAUGE_TYPE,
                if g.kind() == StatisticsType::Map {
                    1
                } else {
                    2
                },
            );
            m.set_gauge(GAUGE_KEYS, i64::try_from(g.len()).unwrap_or(i64::MAX));
        }
    }

    /// `Auto`: from Map to Sketch beyond the threshold or when the global statistics are a
    /// Sketch.
    fn check_migration(&mut self) {
        if self.config.statistics_type != StatisticsType::Auto {
            return;
        }
        let Some(LocalStatistics::Map(m)) = &self.local else {
            return;
        };
        let global_sketch = self
            .latest
            .as_ref()
            .is_some_and(|g| g.kind() == StatisticsType::Sketch);
        if m.len() <= self.config.operator_switch_threshold && !global_sketch {
            return;
        }
        let size = self.reservoir();
        if let Some(LocalStatistics::Map(m)) = self.local.take() {
            tracing::info!(
                operator = %self.config.name,
                subtask = self.ctx.as_ref().map_or(0, |c| c.subtask_index()),
                keys = m.len(),
                "switching local statistics from map to sketch"
            );
            self.local = Some(LocalStatistics::Sketch(map_to_sketch(m, size)));
            self.config.metrics.local_switch();
        }
    }
}

impl<T, K, F> Operator<T> for ShuffleOperator<K, F>
where
    T: Data,
    K: ShuffleKey,
    F: Fn(&T) -> K + Clone + Send + 'static,
{
    type Out = T;

    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        self.restored = true;
        for entry in state.entries() {
            let g: GlobalStatistics<K> = codec::decode(entry)?;
            if self
                .latest
                .as_ref()
                .is_none_or(|l| l.checkpoint < g.checkpoint)
            {
                self.latest = Some(g);
            }
        }
        self.pending = self.latest.is_some();
        Ok(())
    }

    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.cell = Some(self.cells.cell(ctx.subtask_index(), ctx.attempt_number()));
        self.ctx = Some(ctx.clone());
        // Restored statistics route the first records already.
        self.apply();
        let kind = self
            .latest
            .as_ref()
            .map_or(self.config.statistics_type.initial(), |g| g.kind());
        self.local = Some(self.fresh(kind));
        if self.restored {
            ctx.send_to_coordinator(&ToCoordinator::<K>::Request {
                signature: self.latest.as_ref().map(|g| g.signature()),
                downstream_parallelism: self.downstream(),
            })?;
        }
        if !ctx.checkpointing_enabled() && ctx.subtask_index() == 0 {
            tracing::warn!(
                operator = %self.config.name,
                "checkpointing is off: the range shuffle learns no statistics and routes round robin"
            );
        }
        Ok(())
    }

    fn process_batch(&mut self, batch: Vec<T>, out: &mut Collector<T>) -> Result<(), UserError> {
        match &mut self.local {
            Some(LocalStatistics::Map(m)) => {
                for r in &batch {
                    *m.entry((self.key_fn)(r)).or_insert(0) += 1;
                }
            }
            Some(LocalStatistics::Sketch(s)) => {
                for r in &batch {
                    if let Some(slot) = s.offer() {
                        s.put(slot, (self.key_fn)(r));
                    }
                }
            }
            None => return Err("the shuffle operator was not opened".into()),
        }
        self.check_migration();
        // A pass-through: the records keep their event times.
        out.forward_batch(batch);
        Ok(())
    }

    fn snapshot_state(
        &mut self,
        checkpoint: CheckpointId,
        _out: &mut Collector<T>,
    ) -> Result<OperatorState, UserError> {
        if self.pending {
            // Broadcast statistics switch here, at the barrier.
            self.apply();
        }
        let state = match &self.latest {
            Some(g) => OperatorState::from_entries(vec![codec::encode(g)?]),
            None => OperatorState::default(),
        };
        let kind = self
            .local
            .as_ref()
            .map_or(self.config.statistics_type.initial(), |l| l.kind());
        let fresh = self.fresh(kind);
        let statistics = self
            .local
            .replace(fresh)
            .ok_or("the shuffle operator was not opened")?;
        self.ctx()?
            .send_to_coordinator(&ToCoordinator::Statistics {
                checkpoint: checkpoint.0,
                downstream_parallelism: self.downstream(),
                statistics,
            })?;
        Ok(state)
    }

    fn handle_operator_event(
        &mut self,
        event: OperatorEvent,
        _out: &mut Collector<T>,
    ) -> Result<(), UserError> {
        let ToOperator::Statistics {
            statistics,
            apply_immediately,
        } = decode_event::<ToOperator<K>>(&event)?;
        tracing::debug!(
            operator = %self.config.name,
            subtask = self.ctx.as_ref().map_or(0, |c| c.subtask_index()),
            checkpoint = statistics.checkpoint,
            apply_immediately,
            "received global statistics"
        );
        self.latest = Some(statistics);
        self.pending = true;
        self.check_migration();
        if apply_immediately {
            self.apply();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
