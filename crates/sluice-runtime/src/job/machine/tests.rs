//! The job machine's legal moves and rules, one test each, without threads or a runtime.

use super::*;
use crate::checkpoint::{CheckpointPlanner, CheckpointSettings};
use crate::error::TaskFailure;
use crate::failover::{Connection, Exchange, FailoverStrategy, Regions};
use crate::state::OperatorState;

/// Tasks 0 and 1 (chains a and b, forward) form region {0, 1}; task 2 (chain c) is alone.
fn layout(failover: FailoverStrategy) -> Layout {
    let exchanges = [Exchange {
        from: 0,
        to: 1,
        connection: Connection::Pointwise,
    }];
    Layout {
        tasks: 3,
        has_coordinators: false,
        regions: Regions::compute(&[1, 1, 1], &exchanges),
        failover,
    }
}

fn fixed(attempts: u32, delay_ms: u64) -> RestartStrategy {
    RestartStrategy::fixed_delay(attempts, Duration::from_millis(delay_ms)).unwrap()
}

fn settings(failover: FailoverStrategy, restart: RestartStrategy) -> JobSettings {
    JobSettings {
        layout: layout(failover),
        restart,
        root_cause_grace_ms: None,
    }
}

/// A machine whose attempt 0 runs, with checkpoints every 100 ms if `checkpoints`.
fn running(s: JobSettings, checkpoints: bool) -> JobMachine {
    let cps = checkpoints.then(|| {
        let settings = CheckpointSettings::every(Duration::from_millis(100))
            .with_timeout(Duration::from_millis(10_000));
        JobCheckpoints::new(
            CheckpointPlanner::new(settings, s.layout.tasks, CheckpointId(0)),
            None,
        )
    });
    let (mut m, first) = JobMachine::start(s, cps, None);
    assert_eq!(names(&first), ["deploy all 0"]);
    assert!(m.on(JobFact::Deployed(0), 0).is_empty());
    m
}

fn user_error(subtask: usize) -> TaskError {
    TaskError::Failed(TaskFailure {
        operator_id: NodeId(0),
        operator_name: "op".into(),
        subtask,
        parallelism: 1,
        message: "boom".into(),
    })
}

fn failed(task: TaskIndex, attempt: AttemptNumber) -> JobFact {
    JobFact::TaskEnded {
        task,
        attempt,
        exit: TaskExit::Failed(user_error(task)),
    }
}

fn peer_gone(task: TaskIndex, attempt: AttemptNumber) -> JobFact {
    JobFact::TaskEnded {
        task,
        attempt,
        exit: TaskExit::Failed(TaskError::PeerGone("channel closed".into())),
    }
}

fn ended(task: TaskIndex, attempt: AttemptNumber, exit: TaskExit) -> JobFact {
    JobFact::TaskEnded {
        task,
        attempt,
        exit,
    }
}

fn names(actions: &[JobAction]) -> Vec<String> {
    actions
        .iter()
        .map(|a| match a {
            JobAction::Deploy {
                scope: DeployScope::All,
                attempt,
                ..
            } => format!("deploy all {attempt}"),
            JobAction::Deploy {
                scope: DeployScope::Region(t),
                attempt,
                ..
            } => format!("deploy {t:?} {attempt}"),
            JobAction::StopTasks(t) => format!("stop {t:?}"),
            JobAction::SubtasksFailed { tasks, .. } => format!("failed {tasks:?}"),
            JobAction::EndAttempt => "end attempt".into(),
            JobAction::ResetCoordinators { .. } => "reset".into(),
            JobAction::ReleaseHeldEvents { attempt, id, .. } => format!("release {attempt} {id}"),
            JobAction::Discard(id) => format!("discard {id}"),
            JobAction::Written { id, .. } => format!("written {id}"),
            JobAction::Failure {
                restart: Some(r), ..
            } => format!("restart {} after {}", r.restarts, r.after_ms),
            JobAction::Failure { restart: None, .. } => "give up".into(),
            JobAction::Checkpoint(Action::TriggerSources(b)) => format!("trigger {}", b.id),
            JobAction::Checkpoint(Action::NotifyAborted(id, _)) => format!("abort {id}"),
            JobAction::Checkpoint(Action::NotifyComplete(id)) => format!("complete {id}"),
            JobAction::Checkpoint(Action::Persist(cp)) => format!("persist {}", cp.id),
            JobAction::Checkpoint(Action::RequestDone(r, _)) => format!("answer {}", r.0),
            JobAction::Checkpoint(Action::FinishTasks) => "finish tasks".into(),
            JobAction::Checkpoint(a) => format!("{a:?}"),
            JobAction::Finish(Ok(_)) => "finished".into(),
            JobAction::Finish(Err(JobError::Cancelled)) => "cancelled".into(),
            JobAction::Finish(Err(e)) => format!("failed: {e}"),
        })
        .collect()
}

fn finish_error(actions: Vec<JobAction>) -> JobError {
    match actions.into_iter().last() {
        Some(JobAction::Finish(Err(e))) => e,
        other => panic!("expected the job to fail, got {other:?}"),
    }
}

#[test]
fn worked_example() {
    let mut m = running(settings(FailoverStrategy::Full, fixed(1, 1000)), false);
    assert_eq!(m.phase(), JobPhase::Running);
    let a = m.on(failed(0, 0), 10);
    // Tasks 1 and 2 still run: they are stopped first.
    assert_eq!(names(&a), ["end attempt", "stop [1, 2]"]);
    assert!(m.on(ended(1, 0, TaskExit::Cancelled), 10).is_empty());
    let a = m.on(ended(2, 0, TaskExit::Cancelled), 10);
    assert_eq!(names(&a), ["restart 1 after 1000", "reset"]);
    assert_eq!(m.phase(), JobPhase::Restarting);
    assert_eq!(
        m.next_deadline_ms(),
        None,
        "the delay starts once the coordinators reset"
    );
    assert!(m.on(JobFact::CoordinatorsReset(Ok(())), 10).is_empty());
    assert_eq!(m.next_deadline_ms(), Some(1010));
    assert!(m.on(JobFact::Time, 1009).is_empty());
    assert_eq!(names(&m.on(JobFact::Time, 1010)), ["deploy all 1"]);
    assert_eq!(m.phase(), JobPhase::Deploying);
    assert!(m.on(JobFact::Deployed(1), 1010).is_empty());
    assert_eq!(m.phase(), JobPhase::Running);
    for t in 0..2 {
        assert!(m.on(ended(t, 1, TaskExit::Finished), 20).is_empty());
    }
    let a = m.on(ended(2, 1, TaskExit::Finished), 20);
    assert_eq!(names(&a), ["end attempt", "finished"]);
    assert_eq!(m.phase(), JobPhase::Finished);
    match a.into_iter().last() {
        Some(JobAction::Finish(Ok(s))) => assert_eq!(s.restarts, 1),
        other => panic!("{other:?}"),
    }
}

#[test]
fn move_1_deploying_to_running_once_deployed() {
    let (mut m, _) = JobMachine::start(settings(FailoverStrategy::Region, fixed(1, 0)), None, None);
    assert_eq!(m.phase(), JobPhase::Deploying);
    assert!(
        m.on(JobFact::Deployed(7), 0).is_empty(),
        "not this deployment"
    );
    assert_eq!(m.phase(), JobPhase::Deploying);
    m.on(JobFact::Deployed(0), 0);
    assert_eq!(m.phase(), JobPhase::Running);
}

#[test]
fn move_2_deploying_to_stopping_when_the_deployment_fails() {
    let (mut m, _) =
        JobMachine::start(settings(FailoverStrategy::Region, fixed(1, 50)), None, None);
    let err = JobError::Internal("no slot".into());
    let a = m.on(JobFact::DeployFailed(0, err), 5);
    // No task runs: the strategy decides at once.
    assert_eq!(names(&a), ["end attempt", "restart 1 after 50", "reset"]);
    assert_eq!(m.phase(), JobPhase::Restarting);

    let (mut m, _) =
        JobMachine::start(settings(FailoverStrategy::Region, fixed(1, 50)), None, None);
    assert_eq!(
        names(&m.on(JobFact::Cancel, 5)),
        ["end attempt", "cancelled"]
    );
    assert_eq!(m.phase(), JobPhase::Cancelled);
}

#[test]
fn move_3_running_to_region_restarting_when_a_region_fails() {
    let mut m = running(settings(FailoverStrategy::Region, fixed(3, 100)), false);
    let a = m.on(failed(2, 0), 10);
    // Task 2 is its own region and already ended: nothing to stop, the strategy decides.
    assert_eq!(names(&a), ["stop []", "failed [2]", "restart 1 after 100"]);
    assert_eq!(m.phase(), JobPhase::RegionRestarting);
    assert_eq!(m.next_deadline_ms(), Some(110));

    let mut m = running(settings(FailoverStrategy::Region, fixed(3, 100)), false);
    let a = m.on(failed(0, 0), 10);
    assert_eq!(names(&a), ["stop [1]", "failed [0, 1]"]);
    assert_eq!(m.next_deadline_ms(), None, "no delay until task 1 stopped");
    let a = m.on(ended(1, 0, TaskExit::Cancelled), 20);
    assert_eq!(names(&a), ["restart 1 after 100"]);
    assert_eq!(m.next_deadline_ms(), Some(120));
}

#[test]
fn move_4_region_restarting_to_running_once_redeployed() {
    let mut m = running(settings(FailoverStrategy::Region, fixed(3, 100)), false);
    m.on(failed(0, 0), 10);
    m.on(ended(1, 0, TaskExit::Cancelled), 20);
    assert_eq!(names(&m.on(JobFact::Time, 120)), ["deploy [0, 1] 1"]);
    assert_eq!(m.phase(), JobPhase::RegionRestarting);
    assert_eq!(m.task_attempt(0), Some(1));
    assert_eq!(m.task_attempt(2), Some(0), "the rest keeps its attempt");
    assert!(m.on(JobFact::Deployed(1), 120).is_empty());
    assert_eq!(m.phase(), JobPhase::Running);
    // The region's new attempt counts towards the end of the job.
    m.on(ended(2, 0, TaskExit::Finished), 130);
    m.on(ended(0, 1, TaskExit::Finished), 130);
    assert_eq!(
        names(&m.on(ended(1, 1, TaskExit::Finished), 130)),
        ["end attempt", "finished"]
    );
}

#[test]
fn move_5_running_to_finishing_when_tasks_are_told_to_finish() {
    let mut m = running(settings(FailoverStrategy::Region, fixed(3, 100)), true);
    let mut a = Vec::new();
    for task in 0..3 {
        let report = TaskReport::FinishedInput { task };
        a.extend(m.on(JobFact::Report { attempt: 0, report }, 10));
    }
    a.extend(m.on(JobFact::Time, 100));
    // Every input ended: the final checkpoint goes to each task; once it completes, the tasks
    // are told to finish.
    assert_eq!(m.phase(), JobPhase::Running, "{:?}", names(&a));
    for task in 0..3 {
        let report = TaskReport::Ack {
            task,
            checkpoint: CheckpointId(1),
            states: vec![(NodeId(0), task, OperatorState::default())],
        };
        m.on(JobFact::Report { attempt: 0, report }, 101);
    }
    let persisted = JobFact::Persisted {
        id: CheckpointId(1),
        bytes: 10,
    };
    let a = m.on(persisted, 102);
    assert_eq!(names(&a), ["written 1", "complete 1", "finish tasks"]);
    assert_eq!(m.phase(), JobPhase::Finishing);
}

#[test]
fn move_6_an_ended_attempt_stops_every_task() {
    // From Running: a coordinator failure.
    let mut m = running(
        settings(FailoverStrategy::Region, RestartStrategy::none()),
        false,
    );
    let a = m.on(
        JobFact::CoordinatorFailed(JobError::Internal("c".into())),
        5,
    );
    assert_eq!(names(&a), ["end attempt", "stop [0, 1, 2]"]);
    assert_eq!(m.phase(), JobPhase::Stopping);
    // From RegionRestarting: the strategy gives up on the region.
    let mut m = running(
        settings(FailoverStrategy::Region, RestartStrategy::none()),
        false,
    );
    let a = m.on(failed(2, 0), 10);
    assert_eq!(
        names(&a),
        [
            "stop []",
            "failed [2]",
            "give up",
            "end attempt",
            "stop [0, 1]"
        ]
    );
    // From Finishing: a cancel.
    let mut m = running(settings(FailoverStrategy::Region, fixed(3, 100)), false);
    m.on(JobFact::Cancel, 5);
    assert_eq!(m.phase(), JobPhase::Stopping);
}

#[test]
fn move_7_stopping_to_an_end_once_every_task_stopped() {
    let mut m = running(
        settings(FailoverStrategy::Region, RestartStrategy::none()),
        false,
    );
    m.on(JobFact::Cancel, 5);
    m.on(ended(0, 0, TaskExit::Cancelled), 6);
    m.on(ended(1, 0, TaskExit::Cancelled), 6);
    assert_eq!(
        names(&m.on(ended(2, 0, TaskExit::Cancelled), 6)),
        ["cancelled"]
    );
    assert_eq!(m.phase(), JobPhase::Cancelled);

    let mut m = running(
        settings(FailoverStrategy::Full, RestartStrategy::none()),
        false,
    );
    m.on(failed(0, 0), 5);
    m.on(ended(1, 0, TaskExit::Cancelled), 6);
    let a = m.on(ended(2, 0, TaskExit::Cancelled), 6);
    assert_eq!(names(&a)[0], "give up");
    assert!(matches!(finish_error(a), JobError::TaskFailed(f) if f.message == "boom"));
    assert_eq!(m.phase(), JobPhase::Failed);
}

#[test]
fn move_8_stopping_to_restarting_resets_the_coordinators() {
    let mut m = running(settings(FailoverStrategy::Full, fixed(2, 30)), false);
    m.on(failed(1, 0), 5);
    m.on(ended(0, 0, TaskExit::Cancelled), 6);
    let a = m.on(ended(2, 0, TaskExit::Cancelled), 6);
    assert_eq!(names(&a), ["restart 1 after 30", "reset"]);
    assert_eq!(m.phase(), JobPhase::Restarting);
}

#[test]
fn move_9_restarting_to_deploying_after_the_delay() {
    let mut m = running(settings(FailoverStrategy::Full, fixed(2, 30)), false);
    m.on(failed(0, 0), 5);
    m.on(ended(1, 0, TaskExit::Cancelled), 6);
    m.on(ended(2, 0, TaskExit::Cancelled), 6);
    m.on(JobFact::CoordinatorsReset(Ok(())), 6);
    assert_eq!(names(&m.on(JobFact::Time, 36)), ["deploy all 1"]);
    assert_eq!(m.phase(), JobPhase::Deploying);
}

#[test]
fn move_10_restarting_ends_on_cancel_or_a_failed_reset() {
    let restarting = || {
        let mut m = running(settings(FailoverStrategy::Full, fixed(2, 30)), false);
        m.on(failed(0, 0), 5);
        m.on(ended(1, 0, TaskExit::Cancelled), 6);
        m.on(ended(2, 0, TaskExit::Cancelled), 6);
        m
    };
    let mut m = restarting();
    assert_eq!(names(&m.on(JobFact::Cancel, 7)), ["cancelled"]);
    assert_eq!(m.phase(), JobPhase::Cancelled);
    let mut m = restarting();
    let e = finish_error(m.on(
        JobFact::CoordinatorsReset(Err(JobError::Internal("r".into()))),
        7,
    ));
    assert!(e.to_string().contains('r'));
    assert_eq!(m.phase(), JobPhase::Failed);
}

#[test]
fn attempt_numbers_never_repeat_across_regions_and_the_job() {
    let mut m = running(settings(FailoverStrategy::Region, fixed(5, 0)), false);
    m.on(failed(2, 0), 1);
    assert_eq!(names(&m.on(JobFact::Time, 1)), ["deploy [2] 1"]);
    m.on(JobFact::Deployed(1), 1);
    m.on(failed(2, 1), 2);
    assert_eq!(names(&m.on(JobFact::Time, 2)), ["deploy [2] 2"]);
    m.on(JobFact::Deployed(2), 2);
    m.on(
        JobFact::CoordinatorFailed(JobError::Internal("c".into())),
        3,
    );
    for t in 0..3 {
        let attempt = m.task_attempt(t).unwrap();
        m.on(ended(t, attempt, TaskExit::Cancelled), 3);
    }
    m.on(JobFact::CoordinatorsReset(Ok(())), 3);
    assert_eq!(names(&m.on(JobFact::Time, 3)), ["deploy all 3"]);
}

#[test]
fn reports_of_stale_attempts_and_of_stopped_tasks_are_dropped() {
    let mut m = running(settings(FailoverStrategy::Region, fixed(5, 100)), true);
    m.on(JobFact::Time, 100); // checkpoint 1 triggered
    m.on(failed(0, 0), 101); // region {0, 1} down; checkpoint 1 aborted
    let ack = |task| TaskReport::Ack {
        task,
        checkpoint: CheckpointId(2),
        states: vec![(NodeId(0), task, OperatorState::default())],
    };
    // Task 1 is stopping: its report is dropped, no event released.
    assert!(
        m.on(
            JobFact::Report {
                attempt: 0,
                report: ack(1)
            },
            102
        )
        .is_empty()
    );
    // A report from an attempt that never ran on task 2 is dropped too.
    assert!(
        m.on(
            JobFact::Report {
                attempt: 9,
                report: ack(2)
            },
            102
        )
        .is_empty()
    );
    // An exit of a stale attempt changes nothing.
    assert!(m.on(ended(2, 9, TaskExit::Finished), 102).is_empty());
    assert_eq!(m.phase(), JobPhase::RegionRestarting);
}

#[test]
fn held_events_are_released_for_the_attempt_the_subtask_runs() {
    let mut m = running(settings(FailoverStrategy::Region, fixed(5, 0)), true);
    m.on(failed(2, 0), 1);
    m.on(JobFact::Time, 1);
    m.on(JobFact::Deployed(1), 1);
    m.on(JobFact::Time, 100); // checkpoint 1 triggered
    let report = TaskReport::Ack {
        task: 2,
        checkpoint: CheckpointId(1),
        states: vec![(NodeId(2), 0, OperatorState::default())],
    };
    let a = m.on(JobFact::Report { attempt: 1, report }, 101);
    assert_eq!(names(&a), ["release 1 1"]);
}

#[test]
fn the_root_cause_is_preferred_to_a_peer_that_lost_its_channel() {
    // Full failover: the first failure is a consequence, the user error comes while stopping.
    let mut m = running(
        settings(FailoverStrategy::Full, RestartStrategy::none()),
        false,
    );
    m.on(peer_gone(1, 0), 5);
    m.on(failed(0, 0), 6);
    let e = finish_error(m.on(ended(2, 0, TaskExit::Cancelled), 6));
    assert!(
        matches!(&e, JobError::TaskFailed(f) if f.message == "boom"),
        "{e}"
    );
    // A region's cause is upgraded the same way.
    let mut m = running(
        settings(FailoverStrategy::Region, RestartStrategy::none()),
        false,
    );
    m.on(peer_gone(1, 0), 5);
    let a = m.on(failed(0, 0), 6);
    let e = a.iter().find_map(|a| match a {
        JobAction::Failure { error, .. } => Some(error.clone()),
        _ => None,
    });
    assert!(matches!(e, Some(JobError::TaskFailed(f)) if f.message == "boom"));
}

#[test]
fn in_cluster_mode_a_failing_job_waits_for_its_root_cause() {
    let mut s = settings(FailoverStrategy::Full, RestartStrategy::none());
    s.root_cause_grace_ms = Some(1000);
    let mut m = running(s.clone(), false);
    assert_eq!(names(&m.on(peer_gone(1, 0), 5)), ["end attempt"]);
    assert_eq!(m.next_deadline_ms(), Some(1005));
    // The root cause arrives within the grace: the rest is stopped at once.
    assert_eq!(names(&m.on(failed(0, 0), 10)), ["stop [2]"]);
    let e = finish_error(m.on(ended(2, 0, TaskExit::Cancelled), 11));
    assert!(matches!(&e, JobError::TaskFailed(_)), "{e}");
    // No root cause within the grace: the tasks are stopped when it ends.
    let mut m = running(s, false);
    m.on(peer_gone(1, 0), 5);
    assert_eq!(names(&m.on(JobFact::Time, 1005)), ["stop [0, 2]"]);
}

#[test]
fn a_checkpoint_aborted_while_being_written_is_discarded_once_written() {
    let mut m = running(settings(FailoverStrategy::Region, fixed(5, 100)), true);
    m.on(JobFact::Time, 100);
    for task in 0..3 {
        let report = TaskReport::Ack {
            task,
            checkpoint: CheckpointId(1),
            states: vec![(NodeId(0), task, OperatorState::default())],
        };
        m.on(JobFact::Report { attempt: 0, report }, 101);
    }
    // Checkpoint 1 is being written when task 2 fails: it is aborted.
    let a = m.on(failed(2, 0), 102);
    assert!(
        names(&a).contains(&"abort 1".to_string()),
        "{:?}",
        names(&a)
    );
    let a = m.on(
        JobFact::Persisted {
            id: CheckpointId(1),
            bytes: 3,
        },
        103,
    );
    assert_eq!(names(&a), ["discard 1"]);
}

#[test]
fn requests_wait_for_the_next_attempt_and_are_answered_at_the_end() {
    let mut m = running(settings(FailoverStrategy::Full, fixed(2, 30)), true);
    m.on(failed(0, 0), 5);
    // While stopping, a request waits.
    assert!(
        m.on(JobFact::Requested(RequestId(4), RequestKind::Checkpoint), 6)
            .is_empty()
    );
    m.on(ended(1, 0, TaskExit::Cancelled), 6);
    m.on(ended(2, 0, TaskExit::Cancelled), 6);
    // Cancelled during the delay: the waiting request is answered.
    assert_eq!(names(&m.on(JobFact::Cancel, 7)), ["answer 4", "cancelled"]);
}

#[test]
fn a_coordinator_failure_between_attempts_fails_the_next_one() {
    let mut m = running(settings(FailoverStrategy::Full, fixed(2, 0)), false);
    m.on(failed(0, 0), 5);
    m.on(ended(1, 0, TaskExit::Cancelled), 6);
    m.on(ended(2, 0, TaskExit::Cancelled), 6);
    assert!(
        m.on(
            JobFact::CoordinatorFailed(JobError::Internal("c".into())),
            6
        )
        .is_empty()
    );
    m.on(JobFact::CoordinatorsReset(Ok(())), 6);
    m.on(JobFact::Time, 6);
    let a = m.on(JobFact::Deployed(1), 6);
    assert_eq!(names(&a), ["end attempt", "stop [0, 1, 2]"]);
}

mod model {
    //! The machine against a model of the driver, under any order of task failures, exits,
    //! time and cancel: attempt numbers only grow, no task is deployed while it still runs,
    //! every task is stopped before the job ends, and the job always ends.

    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, VecDeque};

    #[derive(Clone, Debug)]
    enum Step {
        Fail(usize, bool),
        Exit(usize),
        Time,
        Cancel,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0..3usize, any::<bool>()).prop_map(|(t, root)| Step::Fail(t, root)),
            3 => (0..3usize).prop_map(Step::Exit),
            3 => Just(Step::Time),
            1 => Just(Step::Cancel),
        ]
    }

    /// The driver as the machine sees it: which attempt of each task runs.
    #[derive(Default)]
    struct World {
        alive: BTreeMap<TaskIndex, AttemptNumber>,
        facts: VecDeque<JobFact>,
        last_attempt: Option<AttemptNumber>,
        ended: bool,
    }

    impl World {
        fn act(&mut self, actions: Vec<JobAction>) {
            for a in actions {
                assert!(!self.ended, "an action after the end: {a:?}");
                match a {
                    JobAction::Deploy { scope, attempt, .. } => {
                        assert!(
                            self.last_attempt.is_none_or(|l| attempt > l),
                            "attempt {attempt} reused"
                        );
                        self.last_attempt = Some(attempt);
                        let tasks = match scope {
                            DeployScope::All => vec![0, 1, 2],
                            DeployScope::Region(t) => t,
                        };
                        for t in tasks {
                            assert!(
                                !self.alive.contains_key(&t),
                                "task {t} deployed while it runs"
                            );
                            self.alive.insert(t, attempt);
                        }
                        self.facts.push_back(JobFact::Deployed(attempt));
                    }
                    JobAction::StopTasks(tasks) => {
                        for t in tasks {
                            if let Some(attempt) = self.alive.remove(&t) {
                                self.facts.push_back(ended(t, attempt, TaskExit::Cancelled));
                            }
                        }
                    }
                    JobAction::ResetCoordinators { .. } => {
                        self.facts.push_back(JobFact::CoordinatorsReset(Ok(())));
                    }
                    JobAction::Finish(_) => {
                        assert!(self.alive.is_empty(), "the job ended with tasks running");
                        self.ended = true;
                    }
                    _ => {}
                }
            }
        }
    }

    proptest! {
        #[test]
        fn any_order_of_failures_keeps_the_rules(
            steps in proptest::collection::vec(step(), 0..40),
            region in any::<bool>(),
        ) {
            let failover = if region { FailoverStrategy::Region } else { FailoverStrategy::Full };
            let mut s = settings(failover, fixed(1000, 10));
            s.root_cause_grace_ms = Some(5);
            let (mut m, first) = JobMachine::start(s, None, None);
            let mut w = World::default();
            let mut now = 0;
            w.act(first);
            let mut steps: VecDeque<Step> = steps.into();
            // After the given steps: cancel, then let time run until the job ended.
            let mut rounds = 0;
            while !w.ended {
                rounds += 1;
                prop_assert!(rounds < 10_000, "the job never ended");
                if let Some(f) = w.facts.pop_front() {
                    let a = m.on(f, now);
                    w.act(a);
                    continue;
                }
                let next = steps.pop_front().unwrap_or(if rounds % 2 == 0 { Step::Cancel } else { Step::Time });
                let fact = match next {
                    Step::Fail(t, root) => match w.alive.remove(&t) {
                        Some(a) if root => failed(t, a),
                        Some(a) => peer_gone(t, a),
                        None => continue,
                    },
                    Step::Exit(t) => match w.alive.remove(&t) {
                        Some(a) => ended(t, a, TaskExit::Finished),
                        None => continue,
                    },
                    Step::Time => {
                        now = m.next_deadline_ms().unwrap_or(now + 1).max(now);
                        JobFact::Time
                    }
                    Step::Cancel => JobFact::Cancel,
                };
                let a = m.on(fact, now);
                w.act(a);
            }
            prop_assert!(matches!(m.phase(), JobPhase::Finished | JobPhase::Failed | JobPhase::Cancelled));
        }
    }
}
