//! The "global progress" coordinator: the smallest real user of operator coordinators.
//!
//! Every subtask of a `Progress` operator reports how many records it has processed at each
//! checkpoint (its count is checkpointed state, so a restart never counts a record twice). The
//! coordinator adds the reports of one checkpoint up and, once every subtask has reported and
//! the checkpoint has completed (a checkpoint that fails is rolled back, and so is its total),
//! sends the total back to all of them; each exposes it as the gauge `global_progress`.

use serde::{Deserialize, Serialize};
use sluice::coordinator::{
    BaseCoordinator, CoordinatorContextBase, CoordinatorLogic, CoordinatorProvider, decode_event,
    encode_event,
};
use sluice::core::{CheckpointId, OperatorEvent, codec};
use sluice::prelude::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Events between the operator and its coordinator.
#[derive(Serialize, Deserialize)]
pub enum ProgressEvent {
    /// A subtask's count at a checkpoint.
    Report { checkpoint: u64, processed: u64 },
    /// The sum of every subtask's count at a checkpoint.
    Total { checkpoint: u64, total: u64 },
}

/// The coordinator's logic. `log` records every total it published, for tests and the demo.
pub struct GlobalProgress {
    reports: BTreeMap<u64, BTreeMap<usize, u64>>,
    completed: BTreeMap<u64, bool>,
    log: Arc<Mutex<Vec<(u64, u64)>>>,
}

impl GlobalProgress {
    /// The logic with nothing reported yet, logging totals into `log`.
    pub fn new(log: Arc<Mutex<Vec<(u64, u64)>>>) -> Self {
        GlobalProgress {
            reports: BTreeMap::new(),
            completed: BTreeMap::new(),
            log,
        }
    }

    /// A provider for `transform_with_coordinator`.
    pub fn provider(log: Arc<Mutex<Vec<(u64, u64)>>>) -> impl CoordinatorProvider {
        BaseCoordinator::provider(move || GlobalProgress::new(log.clone()))
    }

    /// Publishes the total of `checkpoint` once every subtask reported and it completed.
    fn publish(&mut self, base: &CoordinatorContextBase, checkpoint: u64) -> Result<(), UserError> {
        let Some(reported) = self.reports.get(&checkpoint) else {
            return Ok(());
        };
        if reported.len() < base.parallelism() || !self.completed.contains_key(&checkpoint) {
            return Ok(());
        }
        let total = reported.values().sum();
        self.reports.retain(|c, _| *c > checkpoint);
        self.completed.retain(|c, _| *c > checkpoint);
        self.log
            .lock()
            .map_err(|_| "poisoned")?
            .push((checkpoint, total));
        for s in 0..base.parallelism() {
            // A subtask that is restarting misses this total; the next one reaches it.
            drop(base.send_event_to_operator(
                s,
                encode_event(&ProgressEvent::Total { checkpoint, total })?,
            ));
        }
        Ok(())
    }
}

impl CoordinatorLogic for GlobalProgress {
    fn handle_event(
        &mut self,
        base: &CoordinatorContextBase,
        subtask: usize,
        _attempt: u32,
        event: OperatorEvent,
    ) -> Result<(), UserError> {
        let ProgressEvent::Report {
            checkpoint,
            processed,
        } = decode_event(&event)?
        else {
            return Err("expected a progress report".into());
        };
        self.reports
            .entry(checkpoint)
            .or_default()
            .insert(subtask, processed);
        self.publish(base, checkpoint)
    }

    /// A checkpoint that fails is rolled back, and so is its total: publish only completed ones.
    fn checkpoint_complete(
        &mut self,
        base: &CoordinatorContextBase,
        id: CheckpointId,
    ) -> Result<(), UserError> {
        self.completed.insert(id.0, true);
        self.publish(base, id.0)
    }
}

/// The operator: passes records through, counts them, reports at each checkpoint.
#[derive(Clone, Default)]
pub struct Progress {
    processed: u64,
    ctx: Option<OperatorContext>,
}

impl Operator<u64> for Progress {
    type Out = u64;
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.ctx = Some(ctx.clone());
        Ok(())
    }
    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        self.processed += batch.len() as u64;
        out.emit_batch(batch);
        Ok(())
    }
    fn snapshot_state(
        &mut self,
        id: CheckpointId,
        _out: &mut Collector<u64>,
    ) -> Result<OperatorState, UserError> {
        let ctx = self.ctx.as_ref().ok_or("snapshot before open")?;
        ctx.send_to_coordinator(&ProgressEvent::Report {
            checkpoint: id.0,
            processed: self.processed,
        })?;
        Ok(OperatorState::from_entries(vec![codec::encode(
            &self.processed,
        )?]))
    }
    fn initialize_state(&mut self, state: OperatorState) -> Result<(), UserError> {
        for entry in state.entries() {
            self.processed += codec::decode::<u64>(entry)?;
        }
        Ok(())
    }
    fn handle_operator_event(
        &mut self,
        event: OperatorEvent,
        _out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        if let ProgressEvent::Total { total, .. } = decode_event(&event)? {
            let ctx = self.ctx.as_ref().ok_or("event before open")?;
            ctx.metrics()
                .set_gauge("global_progress", i64::try_from(total)?);
        }
        Ok(())
    }
}
