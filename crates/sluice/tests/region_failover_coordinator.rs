//! What an operator coordinator sees of a region failover: the failed subtask's attempt fails,
//! the subtask is reset to the checkpoint its region restores, and its new attempt becomes
//! ready; the other subtask's attempt is never touched and the coordinator is never reset.

use sluice::coordinator::{
    CheckpointResult, CoordinatorContext, CoordinatorError, CoordinatorFuture, OperatorCoordinator,
    SubtaskGateway, done,
};
use sluice::core::{CheckpointId, OperatorEvent};
use sluice::prelude::*;
use sluice::testing::FailureInjector;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Every call the coordinator got, in order (checkpoint calls left out).
type Calls = Arc<Mutex<Vec<String>>>;

struct Recording {
    calls: Calls,
}

impl Recording {
    fn record(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
}

impl OperatorCoordinator for Recording {
    fn start(&mut self) -> CoordinatorFuture<'_> {
        done(Ok(()))
    }
    fn close(&mut self) -> CoordinatorFuture<'_> {
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
        _id: CheckpointId,
        result: CheckpointResult,
    ) -> CoordinatorFuture<'_> {
        result.complete(Vec::new());
        done(Ok(()))
    }
    fn notify_checkpoint_complete(&mut self, _id: CheckpointId) -> CoordinatorFuture<'_> {
        done(Ok(()))
    }
    fn reset_to_checkpoint(
        &mut self,
        id: CheckpointId,
        _s: Option<Vec<u8>>,
    ) -> CoordinatorFuture<'_> {
        self.record(format!("reset to {}", id.0));
        done(Ok(()))
    }
    fn subtask_reset(&mut self, s: usize, id: CheckpointId) -> CoordinatorFuture<'_> {
        self.record(format!("subtask {s} reset to {}", id.0));
        done(Ok(()))
    }
    fn execution_attempt_failed(
        &mut self,
        s: usize,
        a: u32,
        _r: Option<String>,
    ) -> CoordinatorFuture<'_> {
        self.record(format!("subtask {s} attempt {a} failed"));
        done(Ok(()))
    }
    fn execution_attempt_ready(
        &mut self,
        s: usize,
        a: u32,
        _g: SubtaskGateway,
    ) -> CoordinatorFuture<'_> {
        self.record(format!("subtask {s} attempt {a} ready"));
        done(Ok(()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_coordinator_sees_the_failed_subtask_fail_reset_and_become_ready_again() {
    let n = 40_000u64;
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(64);
    env.enable_checkpointing(Duration::from_millis(5));
    let storage = tempfile::tempdir().unwrap();
    env.set_checkpoint_storage(storage.path());
    env.set_restart_strategy(RestartStrategy::fixed_delay(3, Duration::ZERO).unwrap());
    let calls: Calls = Arc::default();
    let c = calls.clone();
    let provider =
        move |_ctx: CoordinatorContext| -> Result<Box<dyn OperatorCoordinator>, CoordinatorError> {
            Ok(Box::new(Recording { calls: c.clone() }))
        };
    let out = env
        .from_generator(Generator::new(|i| i).take(n).rate_limit(400_000.0))
        .transform_with_coordinator(
            "fails in subtask 1",
            FailureInjector::at_record(1, n / 4),
            provider,
        )
        .collect();
    let result = env
        .execute("coordinator under region failover")
        .await
        .unwrap();
    assert_eq!(result.restarts, 1);
    assert!(out.take().len() as u64 >= n);
    let calls = calls.lock().unwrap().clone();
    // The first attempts become ready (in subtask order), then only subtask 1 goes round.
    assert_eq!(
        calls[..2],
        ["subtask 0 attempt 0 ready", "subtask 1 attempt 0 ready"]
    );
    let rest: Vec<&str> = calls[2..].iter().map(String::as_str).collect();
    assert_eq!(rest.len(), 3, "{calls:?}");
    assert_eq!(rest[0], "subtask 1 attempt 0 failed");
    assert!(
        rest[1].starts_with("subtask 1 reset to "),
        "reset to the restored checkpoint: {calls:?}"
    );
    assert_eq!(rest[2], "subtask 1 attempt 1 ready");
    assert!(
        !calls
            .iter()
            .any(|c| c.starts_with("reset to") || c.starts_with("subtask 0 attempt 0 failed")),
        "no global reset, subtask 0 untouched: {calls:?}"
    );
}
