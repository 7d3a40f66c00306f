//! The "global progress" coordinator: the smallest real user of operator coordinators.
//!
//! Every subtask of a `Progress` operator reports how many records it has processed at each
//! checkpoint (its count is checkpointed state, so a restart never counts a record twice). The
//! coordinator adds the reports of one checkpoint up and, once every subtask has reported and
//! the checkpoint has completed (a checkpoint that fails is rolled back, and so is its total),
//! sends the total back to all of them; each exposes it as the gauge `global_progress`.

use serde::{Deserialize, Serialize};
use sluice::coordinator::{
    CheckpointResult, CoordinatorContext, CoordinatorContextBase, CoordinatorError,
    CoordinatorFuture, OperatorCoordinator, SubtaskGateway, decode_event, done, encode_event,
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

/// The coordinator. `log` records every total it computed, for tests and the demo.
pub struct GlobalProgress {
    base: CoordinatorContextBase,
    state: Arc<Mutex<Totals>>,
    log: Arc<Mutex<Vec<(u64, u64)>>>,
}

/// Per checkpoint: the reports so far, whether it completed; a total is published once both
/// are in.
#[derive(Default)]
struct Totals {
    reports: BTreeMap<u64, BTreeMap<usize, u64>>,
    completed: BTreeMap<u64, bool>,
}

impl Totals {
    /// The total of `checkpoint` if every subtask reported and it completed; forgets older ones.
    fn publishable(&mut self, checkpoint: u64, parallelism: usize) -> Option<u64> {
        let reported = self.reports.get(&checkpoint)?;
        if reported.len() < parallelism
            || !self.completed.get(&checkpoint).copied().unwrap_or(false)
        {
            return None;
        }
        let total = reported.values().sum();
        self.reports.retain(|c, _| *c > checkpoint);
        self.completed.retain(|c, _| *c > checkpoint);
        Some(total)
    }
}

impl GlobalProgress {
    /// Runs `update` on the coordinator thread, then publishes `checkpoint`'s total if it can.
    fn step(
        &self,
        checkpoint: u64,
        name: &str,
        update: impl FnOnce(&mut Totals) -> Result<(), UserError> + Send + 'static,
    ) -> CoordinatorFuture<'static> {
        let (base, state, log) = (self.base.clone(), self.state.clone(), self.log.clone());
        let b = base.clone();
        let name = name.to_string();
        Box::pin(async move {
            base.run_in_event_loop_async(
                move || {
                    let mut totals = state.lock().map_err(|_| "poisoned")?;
                    update(&mut totals)?;
                    if let Some(total) = totals.publishable(checkpoint, b.parallelism()) {
                        log.lock()
                            .map_err(|_| "poisoned")?
                            .push((checkpoint, total));
                        for s in 0..b.parallelism() {
                            // A subtask that is restarting misses this total; the next one reaches it.
                            drop(b.send_event_to_operator(
                                s,
                                encode_event(&ProgressEvent::Total { checkpoint, total })?,
                            ));
                        }
                    }
                    Ok(())
                },
                &name,
            )
            .await
        })
    }
}

impl GlobalProgress {
    pub fn provider(
        log: Arc<Mutex<Vec<(u64, u64)>>>,
    ) -> impl sluice::coordinator::CoordinatorProvider {
        move |ctx: CoordinatorContext| -> Result<Box<dyn OperatorCoordinator>, CoordinatorError> {
            Ok(Box::new(GlobalProgress {
                base: CoordinatorContextBase::new(ctx)?,
                state: Arc::default(),
                log: log.clone(),
            }))
        }
    }
}

impl OperatorCoordinator for GlobalProgress {
    fn start(&mut self) -> CoordinatorFuture<'_> {
        self.base.mark_started();
        done(Ok(()))
    }
    fn close(&mut self) -> CoordinatorFuture<'_> {
        let base = self.base.clone();
        Box::pin(async move {
            // Let what is queued on the coordinator thread run first.
            let drained = base
                .call_in_coordinator_thread_async(|| Ok(()), "drain before close")
                .await;
            base.close();
            drained.map_err(CoordinatorError::from)
        })
    }
    fn handle_event_from_operator(
        &mut self,
        subtask: usize,
        _attempt: u32,
        event: OperatorEvent,
    ) -> CoordinatorFuture<'_> {
        let ProgressEvent::Report {
            checkpoint,
            processed,
        } = (match decode_event(&event) {
            Ok(e) => e,
            Err(e) => {
                return done(Err(CoordinatorError::user(format!(
                    "bad progress event: {e}"
                ))));
            }
        })
        else {
            return done(Err(CoordinatorError::user("expected a progress report")));
        };
        self.step(checkpoint, "aggregate a progress report", move |t| {
            t.reports
                .entry(checkpoint)
                .or_default()
                .insert(subtask, processed);
            Ok(())
        })
    }
    fn checkpoint_coordinator(
        &mut self,
        _id: CheckpointId,
        result: CheckpointResult,
    ) -> CoordinatorFuture<'_> {
        result.complete(Vec::new()); // totals are recomputed from the subtasks' checkpointed counts
        done(Ok(()))
    }
    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> CoordinatorFuture<'_> {
        self.step(id.0, "publish a checkpoint's progress", move |t| {
            t.completed.insert(id.0, true);
            Ok(())
        })
    }
    fn reset_to_checkpoint(
        &mut self,
        _id: CheckpointId,
        _state: Option<Vec<u8>>,
    ) -> CoordinatorFuture<'_> {
        done(Ok(()))
    }
    fn subtask_reset(&mut self, _subtask: usize, _id: CheckpointId) -> CoordinatorFuture<'_> {
        done(Ok(()))
    }
    fn execution_attempt_failed(
        &mut self,
        subtask: usize,
        attempt: u32,
        _reason: Option<String>,
    ) -> CoordinatorFuture<'_> {
        self.base.attempt_not_ready(subtask, attempt);
        done(Ok(()))
    }
    fn execution_attempt_ready(
        &mut self,
        _subtask: usize,
        _attempt: u32,
        gateway: SubtaskGateway,
    ) -> CoordinatorFuture<'_> {
        done(
            self.base
                .subtask_ready(gateway)
                .map_err(CoordinatorError::from),
        )
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
