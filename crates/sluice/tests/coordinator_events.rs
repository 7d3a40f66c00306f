//! Coordinator events and checkpoints through a real job: an event sent before a coordinator's
//! snapshot reaches every subtask before its snapshot of that checkpoint; one sent after reaches
//! it only after that snapshot (the valve held it until the subtask took the barrier); events
//! keep their order across consecutive checkpoints.

use serde::{Deserialize, Serialize};
use sluice::coordinator::{
    CheckpointResult, CoordinatorContext, CoordinatorContextBase, CoordinatorError,
    CoordinatorFuture, OperatorCoordinator, SubtaskGateway, decode_event, done, encode_event,
};
use sluice::core::{CheckpointId, OperatorEvent};
use sluice::prelude::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// Sent just before the coordinator completes its snapshot of checkpoint `n`.
    Before(u64),
    /// Sent right after it, on the coordinator thread.
    After(u64),
}

/// Per subtask, what the operator saw: events and its own snapshots, in order.
type Logs = Arc<Mutex<Vec<Vec<String>>>>;

struct Marker {
    base: CoordinatorContextBase,
}

impl OperatorCoordinator for Marker {
    fn start(&mut self) -> CoordinatorFuture<'_> {
        self.base.mark_started();
        done(Ok(()))
    }
    fn close(&mut self) -> CoordinatorFuture<'_> {
        self.base.close();
        done(Ok(()))
    }
    fn handle_event_from_operator(
        &mut self,
        _s: usize,
        _a: u32,
        _e: OperatorEvent,
    ) -> CoordinatorFuture<'_> {
        done(Ok(()))
    }
    fn checkpoint_coordinator(
        &mut self,
        id: CheckpointId,
        result: CheckpointResult,
    ) -> CoordinatorFuture<'_> {
        let base = self.base.clone();
        Box::pin(async move {
            let b = base.clone();
            base.run_in_event_loop_async(
                move || {
                    let send = |m: Mark| -> Result<(), UserError> {
                        for s in 0..b.parallelism() {
                            drop(b.send_event_to_operator(s, encode_event(&m)?));
                        }
                        Ok(())
                    };
                    send(Mark::Before(id.0))?;
                    result.complete(Vec::new());
                    send(Mark::After(id.0))
                },
                "mark a checkpoint",
            )
            .await
        })
    }
    fn notify_checkpoint_complete(&mut self, _id: CheckpointId) -> CoordinatorFuture<'_> {
        done(Ok(()))
    }
    fn reset_to_checkpoint(
        &mut self,
        _id: CheckpointId,
        _s: Option<Vec<u8>>,
    ) -> CoordinatorFuture<'_> {
        done(Ok(()))
    }
    fn subtask_reset(&mut self, _s: usize, _id: CheckpointId) -> CoordinatorFuture<'_> {
        done(Ok(()))
    }
    fn execution_attempt_failed(
        &mut self,
        s: usize,
        a: u32,
        _r: Option<String>,
    ) -> CoordinatorFuture<'_> {
        self.base.attempt_not_ready(s, a);
        done(Ok(()))
    }
    fn execution_attempt_ready(
        &mut self,
        _s: usize,
        _a: u32,
        g: SubtaskGateway,
    ) -> CoordinatorFuture<'_> {
        done(self.base.subtask_ready(g).map_err(CoordinatorError::from))
    }
}

#[derive(Clone)]
struct Recorder {
    logs: Logs,
    subtask: usize,
}

impl Operator<u64> for Recorder {
    type Out = u64;
    fn open(&mut self, ctx: &OperatorContext) -> Result<(), UserError> {
        self.subtask = ctx.subtask_index();
        Ok(())
    }
    fn process_batch(
        &mut self,
        batch: Vec<u64>,
        out: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        out.emit_batch(batch);
        Ok(())
    }
    fn snapshot_state(
        &mut self,
        id: CheckpointId,
        _o: &mut Collector<u64>,
    ) -> Result<OperatorState, UserError> {
        self.logs.lock().unwrap()[self.subtask].push(format!("snapshot {}", id.0));
        Ok(OperatorState::default())
    }
    fn handle_operator_event(
        &mut self,
        e: OperatorEvent,
        _o: &mut Collector<u64>,
    ) -> Result<(), UserError> {
        let m: Mark = decode_event(&e)?;
        self.logs.lock().unwrap()[self.subtask].push(format!("{m:?}"));
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_before_a_coordinator_snapshot_precede_the_barrier_and_events_after_it_follow() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    let p = 3;
    let logs: Logs = Arc::new(Mutex::new(vec![Vec::new(); p]));
    let storage = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(p).set_batch_size(16);
    env.enable_checkpointing(Duration::from_millis(3));
    env.set_checkpoint_storage(storage.path());
    let provider =
        |ctx: CoordinatorContext| -> Result<Box<dyn OperatorCoordinator>, CoordinatorError> {
            Ok(Box::new(Marker {
                base: CoordinatorContextBase::new(ctx)?,
            }))
        };
    env.from_generator(Generator::new(|i| i).rate_limit(300_000.0))
        .rebalance()
        .transform_with_coordinator(
            "Recorder",
            Recorder {
                logs: logs.clone(),
                subtask: 0,
            },
            provider,
        )
        .discard();
    // Enough checkpoints whatever the machine's load: wait for six more to complete, then stop.
    let job = env.submit("valve").unwrap();
    for _ in 0..6 {
        let pending = job.trigger_checkpoint().await.unwrap();
        pending.completed().await.unwrap();
    }
    let savepoint = job.stop_with_savepoint().await.unwrap();
    let result = job.await.unwrap();
    assert_eq!(result.stopped_with_savepoint, Some(savepoint));
    assert!(result.completed_checkpoints >= 7, "{result:?}");

    for (s, log) in logs.lock().unwrap().iter().enumerate() {
        let pos = |what: &str| log.iter().position(|l| l == what);
        let mut checked = 0;
        for c in 1..=result.last_checkpoint.map_or(0, |c| c.0) {
            let (Some(before), Some(snap)) =
                (pos(&format!("Before({c})")), pos(&format!("snapshot {c}")))
            else {
                continue;
            };
            assert!(
                before < snap,
                "subtask {s}: Before({c}) must arrive before snapshot {c}: {log:?}"
            );
            if let Some(after) = pos(&format!("After({c})")) {
                assert!(
                    snap < after,
                    "subtask {s}: After({c}) must wait for snapshot {c}: {log:?}"
                );
                assert!(before < after, "subtask {s}: order across the snapshot");
                checked += 1;
            }
        }
        assert!(
            checked >= 3,
            "subtask {s}: only {checked} checkpoints checked: {log:?}"
        );
        // Order across consecutive checkpoints: every Before(c) comes after After(c - 1).
        for c in 2..=result.last_checkpoint.map_or(0, |c| c.0) {
            if let (Some(prev), Some(next)) = (
                pos(&format!("After({})", c - 1)),
                pos(&format!("Before({c})")),
            ) {
                assert!(
                    prev < next,
                    "subtask {s}: After({}) overtaken by Before({c})",
                    c - 1
                );
            }
        }
    }
}
