//! The attempt machine's rules, one test each, without threads or a runtime.

use super::*;
use crate::checkpoint::CheckpointSettings;
use crate::error::TaskFailure;
use crate::state::OperatorState;
use std::time::Duration;

fn c(id: u64) -> CheckpointId {
    CheckpointId(id)
}

fn settings() -> CheckpointSettings {
    CheckpointSettings::every(Duration::from_millis(100)).with_timeout(Duration::from_millis(1000))
}

fn machine(
    tasks: usize,
    coordinators: bool,
    s: CheckpointSettings,
) -> (AttemptMachine, Vec<Action>) {
    let planner = CheckpointPlanner::new(s, tasks, c(0));
    let layout = full_layout(tasks, coordinators);
    AttemptMachine::start(layout, Some(JobCheckpoints::new(planner, None)), 0)
}

/// A layout under full failover: every task failure ends the attempt.
fn full_layout(tasks: usize, has_coordinators: bool) -> Layout {
    Layout {
        tasks,
        has_coordinators,
        regions: Regions::compute(&[tasks], &[]),
        failover: FailoverStrategy::Full,
    }
}

fn ack(task: usize, id: u64) -> Fact {
    Fact::Report(TaskReport::Ack {
        task,
        checkpoint: c(id),
        states: vec![(NodeId(0), task, OperatorState::default())],
    })
}

fn names(actions: &[Action]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            Action::SnapshotCoordinators(id) => format!("snapshot {id}"),
            Action::TriggerSources(b) => format!("sources {}", b.id),
            Action::TriggerTask(t, b) => format!("task {t} {}", b.id),
            Action::ReleaseHeldEvents { subtask, id, .. } => format!("release {subtask} {id}"),
            Action::Persist(cp) => format!("persist {}", cp.id),
            Action::NotifyComplete(id) => format!("complete {id}"),
            Action::NotifyAborted(id, _) => format!("abort {id}"),
            Action::RequestTriggered(r, id) => format!("triggered {} {id}", r.0),
            Action::RequestDone(r, Ok(id)) => format!("done {} {id}", r.0),
            Action::RequestDone(r, Err(_)) => format!("failed {}", r.0),
            Action::FinishTasks => "finish".into(),
            Action::FlushCoordinators => "flush".into(),
            Action::End(AttemptEnd::Finished) => "end finished".into(),
            Action::End(AttemptEnd::Stopped(id)) => format!("end stopped {id}"),
            Action::End(AttemptEnd::Cancelled) => "end cancelled".into(),
            Action::End(AttemptEnd::TaskFailed(_)) => "end task failed".into(),
            Action::End(AttemptEnd::Failed(e)) => format!("end failed: {e}"),
            Action::End(AttemptEnd::GaveUp(e)) => format!("end gave up: {e}"),
            Action::RestartRegion { tasks, .. } => format!("restart {tasks:?}"),
        })
        .collect()
}

fn task_failure() -> TaskError {
    TaskError::Failed(TaskFailure {
        operator_id: NodeId(1),
        operator_name: "map".into(),
        subtask: 0,
        parallelism: 2,
        message: "boom".into(),
    })
}

#[test]
fn worked_example_one_source_no_coordinators() {
    let (mut m, first) = machine(1, false, settings());
    assert!(first.is_empty());
    assert_eq!(m.next_deadline_ms(), Some(100));
    assert_eq!(names(&m.on(Fact::Time, 100)), ["sources 1"]);
    assert_eq!(names(&m.on(ack(0, 1), 101)), ["release 0 1", "persist 1"]);
    assert_eq!(names(&m.on(Fact::Persisted(c(1)), 102)), ["complete 1"]);
    assert_eq!(m.latest().map(|l| l.id), Some(c(1)));
    let finished = Fact::Report(TaskReport::FinishedInput { task: 0 });
    assert_eq!(names(&m.on(finished, 103)), ["sources 2", "task 0 2"]);
    m.on(ack(0, 2), 104);
    assert_eq!(
        names(&m.on(Fact::Persisted(c(2)), 105)),
        ["complete 2", "finish"]
    );
    assert_eq!(names(&m.on(Fact::TaskExited(0), 106)), ["end finished"]);
    assert!(m.has_ended());
    assert_eq!(m.counts().completed, 2);
}

#[test]
fn a_failure_while_a_checkpoint_is_pending_ends_the_attempt_and_its_late_persist_is_ignored() {
    let (mut m, _) = machine(2, false, settings());
    m.on(Fact::Time, 100);
    m.on(ack(0, 1), 101);
    assert_eq!(names(&m.on(ack(1, 1), 102)), ["release 1 1", "persist 1"]);
    assert_eq!(
        names(&m.on(Fact::TaskFailed(0, task_failure()), 103)),
        ["end task failed"]
    );
    assert!(m.on(Fact::Persisted(c(1)), 104).is_empty(), "late persist");
    assert!(m.latest().is_none(), "not a restore point");
    assert_eq!(m.next_deadline_ms(), None);
    // The next attempt aborts what was pending and never reuses its id.
    let back = m.into_checkpoints();
    let layout = full_layout(2, false);
    let (mut next, first) = AttemptMachine::start(layout, back, 200);
    assert_eq!(names(&first), ["abort 1"]);
    assert_eq!(names(&next.on(Fact::Time, 300)), ["sources 2"]);
}

#[test]
fn a_decline_aborts_the_checkpoint_without_counting_as_a_failure() {
    let (mut m, _) = machine(2, false, settings());
    m.on(Fact::Time, 100);
    let decline = Fact::Report(TaskReport::Decline {
        task: 1,
        checkpoint: c(1),
        reason: DeclineReason::Subsumed,
    });
    assert_eq!(names(&m.on(decline, 110)), ["abort 1"]);
    assert!(
        m.on(ack(0, 1), 111)
            .iter()
            .all(|a| !matches!(a, Action::Persist(_)))
    );
    assert_eq!(m.counts().failed, 0);
    assert!(!m.has_ended(), "a decline does not fail the job");
}

#[test]
fn the_final_checkpoint_after_end_of_input_ends_the_job() {
    let (mut m, _) = machine(2, false, settings());
    let finished = |task| Fact::Report(TaskReport::FinishedInput { task });
    assert!(m.on(finished(0), 10).is_empty());
    assert_eq!(
        names(&m.on(finished(1), 20)),
        ["sources 1", "task 0 1", "task 1 1"]
    );
    m.on(ack(0, 1), 21);
    m.on(ack(1, 1), 22);
    assert_eq!(
        names(&m.on(Fact::Persisted(c(1)), 23)),
        ["complete 1", "finish"]
    );
    assert!(m.on(Fact::TaskExited(0), 24).is_empty());
    assert_eq!(names(&m.on(Fact::TaskExited(1), 25)), ["end finished"]);
}

#[test]
fn coordinators_snapshot_before_barriers_and_a_snapshot_that_never_completes_expires() {
    let (mut m, _) = machine(1, true, settings());
    assert_eq!(names(&m.on(Fact::Time, 100)), ["snapshot 1"]);
    // Nothing reaches the sources while the coordinators have not answered.
    assert_eq!(m.next_deadline_ms(), Some(1100));
    let expired = m.on(Fact::Time, 1100);
    assert!(
        matches!(&expired[0], Action::NotifyAborted(id, AbortReason::Expired { .. }) if *id == c(1))
    );
    // With no failure tolerated, an expired checkpoint fails the attempt, naming it.
    match expired.last() {
        Some(Action::End(AttemptEnd::Failed(JobError::CheckpointFailed {
            checkpoint,
            reason,
            tolerated: 0,
        }))) => {
            assert_eq!(*checkpoint, c(1));
            assert!(reason.contains("expired"), "{reason}");
        }
        other => panic!("expected the attempt to fail, got {other:?}"),
    }
    assert_eq!(m.counts().expired, 1);
}

#[test]
fn barriers_follow_the_coordinator_snapshot_with_finished_tasks_held_until_then() {
    let (mut m, _) = machine(2, true, settings());
    let finished = Fact::Report(TaskReport::FinishedInput { task: 1 });
    assert!(m.on(finished, 50).is_empty());
    assert_eq!(names(&m.on(Fact::Time, 100)), ["snapshot 1"]);
    let snapshotted = Fact::CoordinatorsSnapshotted {
        id: c(1),
        states: BTreeMap::from([(NodeId(3), vec![1])]),
    };
    assert_eq!(names(&m.on(snapshotted, 101)), ["sources 1", "task 1 1"]);
    m.on(ack(0, 1), 102);
    let persisted = m.on(ack(1, 1), 103);
    match &persisted[1] {
        Action::Persist(cp) => assert_eq!(cp.coordinators[&NodeId(3)], vec![1]),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_lost_coordinator_event_aborts_the_checkpoint_at_once_instead_of_stalling() {
    let (mut m, _) = machine(1, true, settings());
    m.on(Fact::Time, 100);
    let lost = Fact::CoordinatorSnapshotFailed {
        id: c(1),
        reason: "an event it sent before its snapshot of checkpoint 1 was lost".into(),
    };
    let out = m.on(lost, 101);
    assert_eq!(names(&out), ["abort 1"]);
    assert!(
        matches!(&out[0], Action::NotifyAborted(_, AbortReason::CoordinatorDeclined(r)) if r.contains("lost"))
    );
    // A late answer for the aborted checkpoint triggers nothing.
    let late = Fact::CoordinatorsSnapshotted {
        id: c(1),
        states: BTreeMap::new(),
    };
    assert!(m.on(late, 102).is_empty());
    assert_eq!(names(&m.on(Fact::Time, 200)), ["snapshot 2"]);
}

#[test]
fn n_failed_checkpoints_are_tolerated_and_the_next_one_fails_over() {
    let (mut m, _) = machine(1, false, settings().with_tolerable_failed_checkpoints(2));
    let mut now = 100;
    for id in 1..=2 {
        m.on(Fact::Time, now);
        m.on(ack(0, id), now + 1);
        let out = m.on(
            Fact::PersistFailed {
                id: c(id),
                reason: "disk full".into(),
            },
            now + 2,
        );
        assert_eq!(
            names(&out),
            [format!("abort {id}")],
            "failure {id} is tolerated"
        );
        now += 200;
    }
    m.on(Fact::Time, now);
    m.on(ack(0, 3), now + 1);
    let out = m.on(
        Fact::PersistFailed {
            id: c(3),
            reason: "disk full".into(),
        },
        now + 2,
    );
    assert_eq!(
        names(&out),
        [
            "abort 3".to_string(),
            "end failed: checkpoint 3 failed: it could not be written: disk full (more than 2 \
             failed checkpoints in a row; see tolerable_failed_checkpoints)"
                .to_string()
        ]
    );
    assert_eq!(m.counts().failed, 3);
}

#[test]
fn the_job_ends_only_after_the_coordinators_were_flushed() {
    let (mut m, _) = machine(
        1,
        true,
        CheckpointSettings::every(Duration::from_secs(3600)),
    );
    assert_eq!(names(&m.on(Fact::TaskExited(0), 10)), ["flush"]);
    let failed = Fact::CoordinatorFailed(JobError::Internal("handling the last event".into()));
    assert_eq!(
        names(&m.on(failed, 11)),
        ["end failed: internal error in the sluice runtime: handling the last event"]
    );

    let (mut m, _) = machine(
        1,
        true,
        CheckpointSettings::every(Duration::from_secs(3600)),
    );
    m.on(Fact::TaskExited(0), 10);
    assert_eq!(
        names(&m.on(Fact::CoordinatorsFlushed, 11)),
        ["end finished"]
    );
}

#[test]
fn a_requested_checkpoint_reports_its_id_and_outcome() {
    let (mut m, _) = machine(
        1,
        false,
        CheckpointSettings::every(Duration::from_secs(3600)),
    );
    let out = m.on(Fact::Requested(RequestId(7), RequestKind::Checkpoint), 5);
    assert_eq!(names(&out), ["triggered 7 1", "sources 1"]);
    m.on(ack(0, 1), 6);
    assert_eq!(
        names(&m.on(Fact::Persisted(c(1)), 7)),
        ["complete 1", "done 7 1"]
    );
}

#[test]
fn stop_with_savepoint_finishes_the_tasks_after_the_savepoint() {
    let (mut m, _) = machine(
        2,
        false,
        CheckpointSettings::every(Duration::from_secs(3600)),
    );
    m.on(
        Fact::Requested(RequestId(1), RequestKind::StopWithSavepoint),
        5,
    );
    m.on(ack(0, 1), 6);
    m.on(ack(1, 1), 7);
    assert_eq!(
        names(&m.on(Fact::Persisted(c(1)), 8)),
        ["complete 1", "done 1 1", "finish"]
    );
    // A peer that loses its channel to a task that finished first is not a failure.
    let peer_gone = Fact::TaskFailed(1, TaskError::PeerGone("upstream channel closed".into()));
    assert!(m.on(peer_gone, 9).is_empty());
    // No checkpoint starts any more (and the master is not woken for one), and events lost to
    // finished tasks do not matter.
    assert_eq!(m.next_deadline_ms(), None);
    assert!(m.on(Fact::Time, 5000).is_empty());
    assert!(
        m.on(Fact::EventLost(JobError::Internal("lost".into())), 5001)
            .is_empty()
    );
    assert_eq!(names(&m.on(Fact::TaskExited(0), 10)), ["end stopped 1"]);
}

#[test]
fn a_request_without_checkpointing_is_refused() {
    let layout = full_layout(1, false);
    let (mut m, _) = AttemptMachine::start(layout, None, 0);
    let out = m.on(Fact::Requested(RequestId(0), RequestKind::Checkpoint), 1);
    assert_eq!(names(&out), ["failed 0"]);
}

#[test]
fn cancel_ends_the_attempt_and_fails_open_requests() {
    let (mut m, _) = machine(
        1,
        false,
        CheckpointSettings::every(Duration::from_secs(3600)),
    );
    m.on(Fact::Requested(RequestId(3), RequestKind::Checkpoint), 1);
    assert_eq!(names(&m.on(Fact::Cancel, 2)), ["failed 3", "end cancelled"]);
    assert!(m.on(Fact::Time, 3).is_empty());
}

/// Two independent pipelines of one task each ({0} and {1}) under region failover.
fn two_regions(s: CheckpointSettings) -> (AttemptMachine, Vec<Action>) {
    let planner = CheckpointPlanner::new(s, 2, c(0));
    let layout = Layout {
        tasks: 2,
        has_coordinators: false,
        regions: Regions::compute(&[1, 1], &[]),
        failover: FailoverStrategy::Region,
    };
    AttemptMachine::start(layout, Some(JobCheckpoints::new(planner, None)), 0)
}

#[test]
fn a_task_failure_restarts_only_its_region_and_aborts_pending_checkpoints() {
    let (mut m, _) = two_regions(settings());
    assert_eq!(names(&m.on(Fact::Time, 100)), ["sources 1"]);
    m.on(ack(0, 1), 101);
    // Task 1 fails: checkpoint 1 can no longer complete, and only task 1 restarts.
    assert_eq!(
        names(&m.on(Fact::TaskFailed(1, task_failure()), 102)),
        ["abort 1", "restart [1]"]
    );
    assert!(!m.has_ended());
    // While the region is down no checkpoint starts, and a consequence failure of a task of
    // the failed region changes nothing.
    assert_eq!(m.next_deadline_ms(), None);
    assert!(m.on(Fact::Time, 500).is_empty());
    let peer_gone = Fact::TaskFailed(1, TaskError::PeerGone("channel closed".into()));
    assert!(m.on(peer_gone, 501).is_empty());
    // Restored, checkpoints resume one interval later, and need both tasks again.
    assert!(m.on(Fact::RegionRestored(vec![1]), 600).is_empty());
    assert_eq!(m.next_deadline_ms(), Some(700));
    assert_eq!(names(&m.on(Fact::Time, 700)), ["sources 2"]);
    m.on(ack(0, 2), 701);
    assert_eq!(names(&m.on(ack(1, 2), 702)), ["release 1 2", "persist 2"]);
    assert_eq!(names(&m.on(Fact::Persisted(c(2)), 703)), ["complete 2"]);
}

#[test]
fn the_job_ends_only_when_the_restarted_region_ended_too() {
    let (mut m, _) = two_regions(CheckpointSettings::every(Duration::from_secs(3600)));
    let finished = |task| Fact::Report(TaskReport::FinishedInput { task });
    // Task 1 finished its input, then fails (its region's final checkpoint had not completed).
    assert!(m.on(finished(1), 9).is_empty());
    m.on(Fact::TaskFailed(1, task_failure()), 10);
    // Task 0 finishes while task 1's region is down: no final checkpoint yet.
    assert!(m.on(finished(0), 11).is_empty());
    m.on(Fact::RegionRestored(vec![1]), 12);
    // The restarted task is no longer finished for the planner; the final checkpoint waits for
    // it, and only then do the tasks end.
    assert!(m.on(Fact::Time, 13).is_empty());
    assert_eq!(
        names(&m.on(finished(1), 14)),
        ["sources 1", "task 0 1", "task 1 1"]
    );
    m.on(ack(0, 1), 15);
    m.on(ack(1, 1), 16);
    assert_eq!(
        names(&m.on(Fact::Persisted(c(1)), 17)),
        ["complete 1", "finish"]
    );
    assert!(m.on(Fact::TaskExited(0), 18).is_empty());
    assert_eq!(names(&m.on(Fact::TaskExited(1), 19)), ["end finished"]);
}

#[test]
fn full_failover_or_a_failure_while_finishing_ends_the_attempt() {
    let (mut m, _) = machine(2, false, settings());
    assert_eq!(
        names(&m.on(Fact::TaskFailed(1, task_failure()), 10)),
        ["end task failed"]
    );
    let (mut m, _) = two_regions(CheckpointSettings::every(Duration::from_secs(3600)));
    m.on(
        Fact::Requested(RequestId(0), RequestKind::StopWithSavepoint),
        5,
    );
    m.on(ack(0, 1), 6);
    m.on(ack(1, 1), 7);
    m.on(Fact::Persisted(c(1)), 8);
    assert_eq!(
        names(&m.on(Fact::TaskFailed(1, task_failure()), 9)),
        ["end task failed"]
    );
}
