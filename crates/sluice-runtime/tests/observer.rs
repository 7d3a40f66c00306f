//! The live view of a job (`JobHandle::observer`): what the job master records as it happens,
//! laid over the planned graph: vertices and edges, metrics, checkpoints with their sizes and
//! durations, failures and restarts, and the job's and its tasks' states at the end.

use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::job::{CheckpointStatus, JobState, TaskState};
use sluice_runtime::prelude::*;
use sluice_runtime::testing::{FailureInjector, KeyedCounter};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_failed_once_shows_its_graph_checkpoints_failure_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    env.enable_checkpointing(Duration::from_millis(20));
    env.set_checkpoint_storage(dir.path());
    env.set_restart_strategy(RestartStrategy::fixed_delay(3, Duration::from_millis(10)).unwrap());
    let counts = env
        .from_generator(Generator::new(|i| i).take(100_000).rate_limit(200_000.0))
        .name("numbers")
        .process(FailureInjector::at_record(1, 20_000))
        .name("fail once")
        .key_by(|x| x % 8)
        .process(KeyedCounter::new())
        .name("count")
        .collect();
    let job = env.submit("observed").unwrap();
    let observer = job.observer();
    assert_eq!(observer.name(), "observed");
    assert_eq!(observer.job_id().len(), 32);
    let result = job.await.unwrap();
    assert!(!counts.is_empty());

    let s = observer.snapshot();
    assert_eq!(s.state, JobState::Finished);
    assert!(s.end_time_ms.is_some());
    assert_eq!(s.restarts, result.restarts);
    assert_eq!(s.restarts, 1);
    // The graph as planned: two vertices, a hash edge between them.
    let names: Vec<&str> = s.vertices.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names[0], "Source: numbers -> fail once");
    assert!(names[1].starts_with("count -> "), "{names:?}");
    assert_eq!(s.edges.len(), 1);
    assert_eq!(s.edges[0].ship_strategy, "HASH");
    assert_eq!(
        (s.edges[0].source.as_str(), s.edges[0].target.as_str()),
        (s.vertices[0].id.as_str(), s.vertices[1].id.as_str())
    );
    for v in &s.vertices {
        assert_eq!(v.parallelism, 2);
        assert_eq!(v.subtasks.len(), 2);
        assert!(v.subtasks.iter().all(|t| t.state == TaskState::Finished));
        assert_eq!(v.state(), TaskState::Finished);
    }
    // Metrics over every attempt, as the job result counts them.
    let numbers = s.operator("numbers").unwrap();
    assert_eq!(
        numbers.records_out(),
        result.metrics.operator("numbers").records_out
    );
    assert!(numbers.records_out() >= 100_000);
    assert!(s.operator("count").unwrap().records_in() >= 100_000);
    // The failure, once, naming its task.
    assert_eq!(s.exceptions_total, 1);
    let e = &s.exceptions[0];
    assert_eq!(e.operator.as_deref(), Some("fail once"));
    assert_eq!(e.subtask, Some(1));
    assert!(e.message.contains("injected failure"), "{}", e.message);
    // Checkpoints: as many completed as the result says, each with a size and a duration.
    let c = &s.checkpoints;
    assert!(c.enabled);
    assert_eq!(c.counts.completed, result.checkpoints.completed);
    assert!(c.counts.completed >= 1);
    assert_eq!(c.counts.in_progress, 0);
    let completed: Vec<_> = c
        .history
        .iter()
        .filter(|r| r.status == CheckpointStatus::Completed)
        .collect();
    assert!(!completed.is_empty());
    for r in &completed {
        assert!(r.size_bytes.is_some_and(|b| b > 0), "{r:?}");
        assert!(r.duration_ms.is_some() && r.end_time_ms >= Some(r.trigger_time_ms));
    }
    assert_eq!(
        c.latest_completed.as_ref().unwrap().id,
        result.last_checkpoint.unwrap().0
    );
    assert_eq!(c.duration_seconds.count(), c.counts.completed);
    assert_eq!(c.size_bytes.count(), c.counts.completed);
    // Newest first.
    assert!(c.history.windows(2).all(|w| w[0].id > w[1].id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_records_its_failure_once_and_a_cancelled_one_its_cancel() {
    let env = StreamEnvironment::new();
    env.from_iter(0u64..10_000)
        .process(FailureInjector::at_record(0, 10))
        .name("fail")
        .discard();
    let job = env.submit("failing").unwrap();
    let observer = job.observer();
    assert!(job.await.is_err());
    let s = observer.snapshot();
    assert_eq!(s.state, JobState::Failed);
    assert_eq!(s.exceptions_total, 1, "{:?}", s.exceptions);
    assert_eq!(s.exceptions[0].operator.as_deref(), Some("fail"));
    assert!(!s.checkpoints.enabled);

    let env = StreamEnvironment::new();
    env.from_generator(Generator::new(|i| i)).discard();
    let job = env.submit("endless").unwrap();
    let observer = job.observer();
    assert_eq!(observer.state(), JobState::Running);
    job.cancel();
    let _ = job.await;
    let s = observer.snapshot();
    assert_eq!(s.state, JobState::Canceled);
    assert_eq!(s.exceptions_total, 0);
    assert!(
        s.vertices
            .iter()
            .flat_map(|v| &v.subtasks)
            .all(|t| t.state != TaskState::Running)
    );
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["state"], "CANCELED");
}
