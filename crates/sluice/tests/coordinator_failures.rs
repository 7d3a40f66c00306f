//! Coordinator failures are the user's errors, naming the operator: a coordinator that fails
//! while handling an event a subtask sent just before the end of its input fails the job (a job
//! is finished only after every coordinator handled every event sent to it), and a provider
//! that cannot create its coordinator fails the job with its message.

use sluice::coordinator::{
    BaseCoordinator, CoordinatorContext, CoordinatorContextBase, CoordinatorError,
    CoordinatorLogic, OperatorCoordinator,
};
use sluice::core::{NodeId, OperatorEvent};
use sluice::prelude::*;
use sluice::testing::PassThrough;
use sluice::{CoordinatorFailureInfo, JobError};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Passes records through and tells its coordinator when its input ended.
fn reports_the_end() -> PassThrough {
    PassThrough::new().on_end_input(|ctx| ctx.send_to_coordinator(&ctx.subtask_index()))
}

/// Rejects every event, after a while on its thread (slow user code), so that the failure
/// happens after the subtasks ended.
struct SlowReject;

impl CoordinatorLogic for SlowReject {
    fn handle_event(
        &mut self,
        _base: &CoordinatorContextBase,
        subtask: usize,
        _attempt: u32,
        _event: OperatorEvent,
    ) -> Result<(), UserError> {
        std::thread::sleep(Duration::from_millis(20));
        Err(format!("the end report of subtask {subtask} is not acceptable").into())
    }
}

fn coordinator_failure(result: Result<JobResult, JobError>) -> CoordinatorFailureInfo {
    match result {
        Err(JobError::CoordinatorFailed(f)) => f,
        other => panic!("expected a coordinator failure, got {other:?}"),
    }
}

/// Runs the job over 1,000 records from an unthrottled source and returns its failure.
async fn run_rejecting_the_end(checkpointing: bool) -> (NodeId, CoordinatorFailureInfo) {
    let storage = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(32);
    env.set_restart_strategy(RestartStrategy::none());
    if checkpointing {
        env.enable_checkpointing(Duration::from_millis(5));
        env.set_checkpoint_storage(storage.path());
    }
    let reporter = env
        .from_generator(Generator::new(|i| i).take(1_000))
        .transform_with_coordinator(
            "Reporter",
            reports_the_end(),
            BaseCoordinator::provider(|| SlowReject),
        );
    reporter.discard();
    let result = env.execute("rejected end").await;
    (reporter.node_id(), coordinator_failure(result))
}

async fn a_failure_handling_an_event_sent_at_the_end_fails_the_job(checkpointing: bool) {
    for run in 0..5 {
        let (node, f) = run_rejecting_the_end(checkpointing).await;
        let context = format!("run {run} (checkpointing: {checkpointing}): {f}");
        assert_eq!(f.operator_name, "Reporter", "{context}");
        assert_eq!(f.operator_id, node, "{context}");
        assert!(f.message.contains("is not acceptable"), "{context}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_failing_on_an_event_sent_at_the_end_of_input_fails_the_job() {
    a_failure_handling_an_event_sent_at_the_end_fails_the_job(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_checkpointing_a_coordinator_failing_on_an_event_sent_at_the_end_fails_the_job() {
    a_failure_handling_an_event_sent_at_the_end_fails_the_job(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_cannot_create_its_coordinator_fails_the_job_naming_the_operator() {
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    let provider =
        |_ctx: CoordinatorContext| -> Result<Box<dyn OperatorCoordinator>, CoordinatorError> {
            Err(CoordinatorError::user(
                "no endpoint configured for the planner",
            ))
        };
    let planned = env
        .from_generator(Generator::new(|i| i).take(100))
        .transform_with_coordinator("Planned", reports_the_end(), provider);
    planned.discard();
    let job = env
        .submit("no coordinator")
        .expect("a provider is only called when the job runs");
    let f = coordinator_failure(job.await);
    assert_eq!(f.operator_name, "Planned", "{f}");
    assert_eq!(f.operator_id, planned.node_id(), "{f}");
    assert!(
        f.message.contains("no endpoint configured for the planner"),
        "the provider's message: {f}"
    );
    assert!(f.to_string().contains("'Planned'"), "{f}");
}

/// Emits one marker at end of input and, once its input ended, reports every completed
/// checkpoint to its coordinator.
#[derive(Clone, Default)]
struct MarksTheEnd {
    ctx: Option<OperatorContext>,
    ended: bool,
}

impl Operator<u64> for MarksTheEnd {
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
        out.emit_batch(batch);
        Ok(())
    }
    fn end_input(&mut self, out: &mut Collector<u64>) -> Result<(), UserError> {
        self.ended = true;
        out.collect(u64::MAX);
        Ok(())
    }
    fn notify_checkpoint_complete(
        &mut self,
        c: sluice::core::CheckpointId,
    ) -> Result<(), UserError> {
        if self.ended {
            let ctx = self.ctx.as_ref().ok_or("not opened")?;
            ctx.send_to_coordinator(&c.0)?;
        }
        Ok(())
    }
}

/// Rejects the first event it is ever sent (over every coordinator instance).
struct RejectOnce(Arc<AtomicBool>);

impl CoordinatorLogic for RejectOnce {
    fn handle_event(
        &mut self,
        _base: &CoordinatorContextBase,
        _subtask: usize,
        _attempt: u32,
        _event: OperatorEvent,
    ) -> Result<(), UserError> {
        if self.0.swap(true, Ordering::SeqCst) {
            Ok(())
        } else {
            Err("rejecting the report of the final checkpoint".into())
        }
    }
}

/// A failover after the final checkpoint (taken after end of input) completed must not run
/// `end_input` again: what it emitted is already committed. Flink restores such operators as
/// finished (`FINISHED_ON_RESTORE`), and so does sluice: a state taken after `end_input` is
/// marked finished. Here the coordinator fails the job once, on the report of the final
/// checkpoint; the restart restores that checkpoint, and the end marker must be committed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_after_the_final_checkpoint_does_not_replay_end_of_input() {
    let n = 1_000;
    let storage = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    env.enable_checkpointing(Duration::from_secs(3600));
    env.set_checkpoint_storage(storage.path());
    env.set_restart_strategy(RestartStrategy::fixed_delay(1, Duration::ZERO).unwrap());
    let rejected = Arc::new(AtomicBool::new(false));
    let r = rejected.clone();
    env.from_generator(Generator::new(|i| i).take(n))
        .transform_with_coordinator(
            "Marks the end",
            MarksTheEnd::default(),
            BaseCoordinator::provider(move || RejectOnce(r.clone())),
        )
        .sink_to_exactly_once(JsonLinesSink::new(out.path(), "marked"));
    let result = env.execute("failover after the end").await.unwrap();
    assert!(rejected.load(Ordering::SeqCst));
    assert_eq!(result.restarts, 1, "{result:?}");
    let mut committed: Vec<u64> = read_committed(out.path()).unwrap();
    committed.sort_unstable();
    let markers = committed.iter().filter(|v| **v == u64::MAX).count();
    assert_eq!(markers, 1, "the end marker must be committed once");
    committed.pop();
    assert_eq!(committed, (0..n).collect::<Vec<_>>());
}
