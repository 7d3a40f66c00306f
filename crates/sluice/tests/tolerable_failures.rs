//! Tolerable failed checkpoints through a real job: a coordinator that never completes its part
//! of the first K checkpoints makes them expire; `tolerable_failed_checkpoints = N` lets the job
//! run on through N of them, and the (N+1)-th in a row fails the job naming that checkpoint.
//!
//! Checkpoints are only triggered through the job handle (the periodic interval is an hour), so
//! which checkpoints stall is exact; the timeout is a setting, not something the test measures.

use sluice::checkpoint::CheckpointSettings;
use sluice::coordinator::{
    BaseCoordinator, CheckpointResult, CoordinatorContext, CoordinatorError, CoordinatorFuture,
    CoordinatorProvider, OperatorCoordinator, SubtaskGateway,
};
use sluice::core::{CheckpointId, OperatorEvent};
use sluice::job::CheckpointError;
use sluice::prelude::*;
use sluice::testing::{IgnoreEvents, PassThrough};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Long enough for an unstalled checkpoint of this small job on a loaded machine; each stalled
/// checkpoint costs this much.
const TIMEOUT: Duration = Duration::from_millis(500);

/// A `BaseCoordinator` that keeps (neither completes nor drops, which would decline) the
/// checkpoint results of its first `stalls` checkpoints, so that those checkpoints expire.
struct Stalling {
    inner: Box<dyn OperatorCoordinator>,
    stalls: Arc<AtomicU32>,
    kept: Arc<Mutex<Vec<CheckpointResult>>>,
}

impl OperatorCoordinator for Stalling {
    fn start(&mut self) -> CoordinatorFuture<'_> {
        self.inner.start()
    }
    fn close(&mut self) -> CoordinatorFuture<'_> {
        self.inner.close()
    }
    fn flush(&mut self) -> CoordinatorFuture<'_> {
        self.inner.flush()
    }
    fn handle_event_from_operator(
        &mut self,
        s: usize,
        a: u32,
        e: OperatorEvent,
    ) -> CoordinatorFuture<'_> {
        self.inner.handle_event_from_operator(s, a, e)
    }
    fn checkpoint_coordinator(
        &mut self,
        id: CheckpointId,
        result: CheckpointResult,
    ) -> CoordinatorFuture<'_> {
        let stall = self
            .stalls
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if stall {
            self.kept.lock().unwrap().push(result);
            return sluice::coordinator::done(Ok(()));
        }
        self.inner.checkpoint_coordinator(id, result)
    }
    fn notify_checkpoint_complete(&mut self, id: CheckpointId) -> CoordinatorFuture<'_> {
        self.inner.notify_checkpoint_complete(id)
    }
    fn notify_checkpoint_aborted(&mut self, id: CheckpointId) -> CoordinatorFuture<'_> {
        self.inner.notify_checkpoint_aborted(id)
    }
    fn reset_to_checkpoint(
        &mut self,
        id: CheckpointId,
        state: Option<Vec<u8>>,
    ) -> CoordinatorFuture<'_> {
        self.inner.reset_to_checkpoint(id, state)
    }
    fn subtask_reset(&mut self, s: usize, id: CheckpointId) -> CoordinatorFuture<'_> {
        self.inner.subtask_reset(s, id)
    }
    fn execution_attempt_failed(
        &mut self,
        s: usize,
        a: u32,
        reason: Option<String>,
    ) -> CoordinatorFuture<'_> {
        self.inner.execution_attempt_failed(s, a, reason)
    }
    fn execution_attempt_ready(
        &mut self,
        s: usize,
        a: u32,
        g: SubtaskGateway,
    ) -> CoordinatorFuture<'_> {
        self.inner.execution_attempt_ready(s, a, g)
    }
}

/// A provider of [`Stalling`] coordinators that stall `stalls` checkpoints in all; the kept
/// results live in `kept` until the test ends.
fn stalling(
    stalls: u32,
    kept: Arc<Mutex<Vec<CheckpointResult>>>,
) -> impl CoordinatorProvider + 'static {
    let base = BaseCoordinator::provider(|| IgnoreEvents);
    let stalls = Arc::new(AtomicU32::new(stalls));
    move |ctx: CoordinatorContext| -> Result<Box<dyn OperatorCoordinator>, CoordinatorError> {
        Ok(Box::new(Stalling {
            inner: base.create(ctx)?,
            stalls: stalls.clone(),
            kept: kept.clone(),
        }))
    }
}

/// Submits an endless job whose coordinator stalls its first `stalls` checkpoints and which
/// tolerates `tolerated` failed checkpoints in a row.
fn submit(
    stalls: u32,
    tolerated: u32,
    storage: &std::path::Path,
    kept: Arc<Mutex<Vec<CheckpointResult>>>,
) -> JobHandle {
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(16);
    env.set_checkpoint_settings(
        CheckpointSettings::every(Duration::from_secs(3600))
            .with_timeout(TIMEOUT)
            .with_tolerable_failed_checkpoints(tolerated),
    );
    env.set_checkpoint_storage(storage);
    env.set_restart_strategy(RestartStrategy::none());
    env.from_generator(Generator::new(|i| i).rate_limit(20_000.0))
        .transform_with_coordinator("Stalled", PassThrough::new(), stalling(stalls, kept))
        .discard();
    env.submit("tolerable failures").unwrap()
}

/// Triggers checkpoint after checkpoint that the coordinator stalls and expects each to expire.
async fn expect_expired(job: &JobHandle, ids: std::ops::RangeInclusive<u64>) {
    for expected in ids {
        let pending = job.trigger_checkpoint().await.unwrap();
        assert_eq!(pending.id(), CheckpointId(expected));
        match pending.completed().await {
            Err(CheckpointError::Failed(reason)) => {
                assert!(
                    reason.contains("expired"),
                    "checkpoint {expected}: {reason}"
                )
            }
            other => panic!("checkpoint {expected} must expire, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_expired_checkpoints_in_a_row_are_tolerated() {
    let n = 2;
    let storage = tempfile::tempdir().unwrap();
    let kept = Arc::new(Mutex::new(Vec::new()));
    let job = submit(n, n, storage.path(), kept.clone());
    expect_expired(&job, 1..=u64::from(n)).await;
    assert_eq!(kept.lock().unwrap().len(), n as usize);
    // The job is still running: the next checkpoint completes, and so does a savepoint.
    let next = job.trigger_checkpoint().await.unwrap();
    assert_eq!(next.completed().await, Ok(CheckpointId(u64::from(n) + 1)));
    let savepoint = job.stop_with_savepoint().await.unwrap();
    let result = job.await.unwrap();
    assert_eq!(result.stopped_with_savepoint, Some(savepoint));
    assert_eq!(result.checkpoints.expired, u64::from(n), "{result:?}");
    assert_eq!(result.checkpoints.failed, u64::from(n), "{result:?}");
    assert_eq!(result.checkpoints.completed, 2, "{result:?}");
    assert_eq!(result.last_checkpoint, Some(savepoint));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_expired_checkpoint_too_many_fails_the_job_naming_it() {
    let n = 1;
    let storage = tempfile::tempdir().unwrap();
    let kept = Arc::new(Mutex::new(Vec::new()));
    let job = submit(n + 1, n, storage.path(), kept.clone());
    expect_expired(&job, 1..=u64::from(n)).await;
    // The (N+1)-th stalled checkpoint is one too many: the job fails (no restarts allowed).
    let last = job.trigger_checkpoint().await.unwrap();
    let last_id = last.id();
    assert_eq!(last_id, CheckpointId(u64::from(n) + 1));
    assert!(last.completed().await.is_err());
    let err = job.await.unwrap_err();
    match &err {
        JobError::CheckpointFailed {
            checkpoint,
            reason,
            tolerated,
        } => {
            assert_eq!(*checkpoint, last_id, "{err}");
            assert!(reason.contains("expired"), "{reason}");
            assert_eq!(*tolerated, n);
        }
        other => panic!("expected CheckpointFailed, got {other:?}"),
    }
    let shown = err.to_string();
    assert!(
        shown.contains(&format!("checkpoint {last_id}")),
        "the message must name the checkpoint: {shown}"
    );
    assert_eq!(kept.lock().unwrap().len(), n as usize + 1);
}
