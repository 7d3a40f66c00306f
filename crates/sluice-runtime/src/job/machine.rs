//! The whole job as one pure state machine: facts in, actions out, no clock, no I/O.
//!
//! [`JobMachine`] owns every decision the job master makes across the life of a job: attempt
//! numbers, the restart strategy and its failure history, the region-restart lifecycle, which
//! reports and exits are stale, the root cause of a failure (with cluster mode's grace for it),
//! and what is discarded. Inside an attempt it runs the [`AttemptMachine`] (checkpoints and the
//! end of the job) and acts on the two things that machine asks of it: restart a region, end the
//! attempt. The driver (`job/driver.rs`) only waits on channels, turns what arrives into a
//! [`JobFact`] and carries out the [`JobAction`]s; times are milliseconds since the job started,
//! as the driver observed them.
//!
//! # Lifecycle
//!
//! ```text
//!              Deployed                  a region fails             its tasks redeployed
//! Deploying ─────────────▶ Running ───────────────────▶ RegionRestarting ──────────────▶ Running
//!     │                     │  │  every task told to finish                │
//!     │ deploy failed,      │  └──────────────────────────▶ Finishing      │
//!     │ cancel, failure     │ the attempt ends (any phase of a running      │
//!     ▼                     ▼ attempt, also when a region restart gives up) ▼
//! Stopping ◀───────────────────────────────────────────────────────────────────────────
//!     │ every task stopped:  Finished | Failed | Cancelled   (success, stop, cancel, give up)
//!     │                  or  Restarting                     (a failure the strategy restarts)
//!     ▼
//! Restarting ── the delay passed, coordinators reset ──▶ Deploying
//!     │ cancel ──▶ Cancelled;  coordinators could not reset ──▶ Failed
//! ```
//!
//! Every legal move, each a unit test in `machine/tests.rs`:
//! 1. `Deploying → Running`: the whole job's tasks were deployed.
//! 2. `Deploying → Stopping`: the deployment failed, or the job was cancelled.
//! 3. `Running → RegionRestarting`: a task failed and its pipelined region alone restarts: its
//!    tasks are stopped (their reports dropped from then on), the coordinators are told; once
//!    every one of them stopped the restart strategy decides and the delay starts.
//! 4. `RegionRestarting → Running`: the delay passed and the region's tasks run again as a new
//!    attempt, restored from the latest completed checkpoint.
//! 5. `Running → Finishing`: every task was told to finish (input ended, or a stop with
//!    savepoint completed).
//! 6. `Running | RegionRestarting | Finishing → Stopping`: the attempt ended (every task
//!    exited, a stop, a cancel, a failure, or the restart strategy gave up on a region). Every
//!    task still running is stopped, and the attempt's checkpoint work is abandoned. After a task
//!    failure in cluster mode, the tasks may first end on their own for the root-cause grace
//!    while the first failure known is a consequence (a task that lost its peer).
//! 7. `Stopping → Finished | Failed | Cancelled`: every task stopped and the attempt ended
//!    with success or a stop, was cancelled, or failed and the strategy gives up.
//! 8. `Stopping → Restarting`: every task stopped after a failure the strategy restarts; the
//!    coordinators are reset to the restore point.
//! 9. `Restarting → Deploying`: the delay passed: the whole job deploys as a new attempt.
//! 10. `Restarting → Cancelled | Failed`: cancelled during the delay, or the coordinators could
//!     not be reset.
//!
//! Rules that hold in every phase:
//! - **Attempt numbers never repeat.** The first deployment is attempt 0; each later one, of a
//!   region or of the whole job, takes the next number. A report or exit is of the attempt its
//!   task runs now, or it is dropped; reports of a task of a failed region are dropped from its
//!   stop until its new attempt runs.
//! - **The root cause names a failure**: among the failures of the tasks being stopped, one in
//!   user code is preferred to a task that lost its peer.
//! - **A checkpoint aborted while it was being written** is discarded again once its write ends.
//! - **Requests wait** for the next attempt while none runs, and are answered when the job ends.
//!
//! A worked example (run as the test `worked_example`): one task, no checkpoints, a fixed-delay
//! strategy of one restart after 1 s:
//!
//! ```text
//! start(0)                                  -> [Deploy(all, attempt 0)]
//! on(Deployed(0), 0)                        -> []                              Running
//! on(TaskEnded(0, attempt 0, failed), 10)   -> [EndAttempt, Failure(restart after 1000)]
//!                                              [ResetCoordinators]             Restarting
//! on(CoordinatorsReset(ok), 10)             -> []
//! on(Time, 1010)                            -> [Deploy(all, attempt 1)]        Deploying
//! on(Deployed(1), 1010)                     -> []                              Running
//! on(TaskEnded(0, attempt 1, finished), 20) -> [EndAttempt, Finish(Ok)]        Finished
//! ```

use crate::checkpoint::CompletedCheckpoint;
use crate::error::{JobError, TaskError};
use crate::failover::{FailureHistory, RestartDecision, RestartStrategy};
use crate::job::attempt::{
    Action, AttemptEnd, AttemptMachine, CheckpointCounts, Fact, JobCheckpoints, Layout, RequestId,
    RequestKind,
};
use crate::task::control::TaskReport;
use sluice_core::{AttemptNumber, CheckpointId, NodeId, SubtaskIndex};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// A task's index in the plan.
pub(crate) type TaskIndex = usize;

/// Every coordinator's state at one checkpoint.
pub(crate) type CoordinatorStates = BTreeMap<NodeId, Vec<u8>>;

/// What a successful run reports besides metrics.
#[derive(Clone, Debug, Default)]
pub(crate) struct RunSummary {
    pub(crate) restarts: u32,
    pub(crate) checkpoints: CheckpointCounts,
    pub(crate) last_checkpoint: Option<CheckpointId>,
    pub(crate) restored_from: Option<CheckpointId>,
    pub(crate) stopped_with_savepoint: Option<CheckpointId>,
}

/// The job's phase, as the lifecycle at the top of this file names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum JobPhase {
    Deploying,
    Running,
    RegionRestarting,
    Finishing,
    Stopping,
    Restarting,
    Finished,
    Failed,
    Cancelled,
}

/// How a task's future ended.
#[derive(Debug)]
pub(crate) enum TaskExit {
    /// It returned without error.
    Finished,
    /// It was stopped (aborted) by the driver.
    Cancelled,
    /// It failed.
    Failed(TaskError),
}

/// Which tasks a deployment runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum DeployScope {
    /// Every task of the job.
    All,
    /// The tasks of one failed pipelined region.
    Region(Vec<TaskIndex>),
}

/// Something the driver observed.
#[derive(Debug)]
pub(crate) enum JobFact {
    /// A deadline the machine asked for was reached.
    Time,
    /// A checkpoint (or a stop with savepoint) was requested.
    Requested(RequestId, RequestKind),
    /// The job was cancelled.
    Cancel,
    /// A task of attempt `attempt` reported.
    Report {
        attempt: AttemptNumber,
        report: TaskReport,
    },
    /// A task of attempt `attempt` ended.
    TaskEnded {
        task: TaskIndex,
        attempt: AttemptNumber,
        exit: TaskExit,
    },
    /// The deployment of `attempt` runs.
    Deployed(AttemptNumber),
    /// The deployment of `attempt` failed.
    DeployFailed(AttemptNumber, JobError),
    /// A coordinator failed the job (or could not be told of a failure).
    CoordinatorFailed(JobError),
    /// An event a coordinator sent was lost while its target ran.
    EventLost(JobError),
    /// The coordinators were reset for a whole-job restart (or could not be).
    CoordinatorsReset(Result<(), JobError>),
    /// Checkpoint `id` is durable: `bytes` were written.
    Persisted { id: CheckpointId, bytes: u64 },
    /// A checkpoint fact of the running attempt: coordinators snapshotted or failed to, a
    /// checkpoint write failed, the coordinators flushed.
    Checkpoint(Fact),
}

/// Something the driver must do.
#[derive(Debug)]
pub(crate) enum JobAction {
    /// Deploy `scope` as `attempt`, restored from `restore`; report back with
    /// [`JobFact::Deployed`] or [`JobFact::DeployFailed`].
    Deploy {
        scope: DeployScope,
        attempt: AttemptNumber,
        restore: Option<CompletedCheckpoint>,
    },
    /// Stop these tasks; each one's end comes back as [`JobFact::TaskEnded`].
    StopTasks(Vec<TaskIndex>),
    /// Tell the coordinators that the subtasks of these tasks failed (`reason`).
    SubtasksFailed {
        tasks: Vec<TaskIndex>,
        reason: String,
    },
    /// The attempt ended: abandon its coordinator snapshots and checkpoint writes in flight.
    EndAttempt,
    /// Reset every coordinator for a whole-job restart from `restore`; report back with
    /// [`JobFact::CoordinatorsReset`].
    ResetCoordinators {
        reason: String,
        restore: Option<(CheckpointId, Arc<CoordinatorStates>)>,
    },
    /// Subtask `subtask` of `node`, running `attempt`, took barrier `id`: release the
    /// coordinator events held for it.
    ReleaseHeldEvents {
        node: NodeId,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        id: CheckpointId,
    },
    /// Remove what was written of checkpoint `id`.
    Discard(CheckpointId),
    /// Checkpoint `id` of the running attempt was written (`bytes`).
    Written { id: CheckpointId, bytes: u64 },
    /// The job failed with `error`: record it, and the restart if one follows.
    Failure {
        error: JobError,
        restart: Option<Restart>,
    },
    /// A checkpoint action of the running attempt (everything but its end and region restarts,
    /// which this machine handles).
    Checkpoint(Action),
    /// The job is over.
    Finish(Result<RunSummary, JobError>),
}

/// A restart the strategy allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Restart {
    /// Restarts so far, this one included.
    pub(crate) restarts: u32,
    /// The delay before the tasks deploy again.
    pub(crate) after_ms: u64,
    /// The tasks of the region that restarts, or `None` for the whole job.
    pub(crate) region: Option<Vec<TaskIndex>>,
}

/// What the machine is configured with.
#[derive(Clone, Debug)]
pub(crate) struct JobSettings {
    /// How the job's attempts are laid out.
    pub(crate) layout: Layout,
    /// The restart strategy.
    pub(crate) restart: RestartStrategy,
    /// In cluster mode: how long a failing job waits for a root cause while the first failure
    /// known is a consequence.
    pub(crate) root_cause_grace_ms: Option<u64>,
}

/// A failed region on its way back.
#[derive(Debug)]
struct RegionRestart {
    tasks: Vec<TaskIndex>,
    /// Why it failed (upgraded to a root cause among its tasks' failures).
    cause: TaskError,
    /// Its tasks not stopped yet.
    stopping: BTreeSet<TaskIndex>,
    /// When to deploy it again, once every task stopped and the strategy agreed.
    due_ms: Option<u64>,
    /// The attempt its deployment runs, once asked for.
    deploying: Option<AttemptNumber>,
}

/// An attempt that runs.
#[derive(Debug)]
struct Running {
    attempt: AttemptMachine,
    regions: Vec<RegionRestart>,
    /// Checkpoints aborted in this attempt: one still being written is discarded once written.
    aborted: BTreeSet<CheckpointId>,
}

/// How an ended attempt is being wound down.
#[derive(Debug)]
struct Stopping {
    end: AttemptEnd,
    /// While set, the tasks may end on their own until then (root-cause grace).
    grace_until_ms: Option<u64>,
}

#[derive(Debug)]
enum Phase {
    Deploying,
    Running(Box<Running>),
    Stopping(Stopping),
    Restarting { due_ms: u64, reset: bool },
    Ended(JobPhase),
}

/// The state machine of a job. See the module documentation.
#[derive(Debug)]
pub(crate) struct JobMachine {
    settings: JobSettings,
    phase: Phase,
    /// The attempt deployed last as a whole.
    attempt: AttemptNumber,
    next_attempt: AttemptNumber,
    /// The attempt each task runs.
    task_attempts: Vec<AttemptNumber>,
    /// Tasks deployed whose end has not been observed.
    alive: BTreeSet<TaskIndex>,
    history: FailureHistory,
    summary: RunSummary,
    /// Checkpointing between attempts (inside the attempt machine while one runs).
    checkpoints: Option<JobCheckpoints>,
    /// The checkpoint the job started from, restored when none completed since.
    initial: Option<CompletedCheckpoint>,
    /// Requests waiting for an attempt to take them.
    waiting: Vec<(RequestId, RequestKind)>,
    /// A coordinator failure seen while no attempt ran, for the next one.
    pending_failure: Option<JobError>,
}

impl JobMachine {
    /// A machine for a job with `settings`, checkpointing with `checkpoints` if enabled, started
    /// from `initial` if given. Returns it with its first actions (deploy attempt 0).
    pub(crate) fn start(
        settings: JobSettings,
        checkpoints: Option<JobCheckpoints>,
        initial: Option<CompletedCheckpoint>,
    ) -> (Self, Vec<JobAction>) {
        let tasks = settings.layout.tasks;
        let summary = RunSummary {
            restored_from: initial.as_ref().map(|c| c.id),
            ..RunSummary::default()
        };
        let mut m = JobMachine {
            settings,
            phase: Phase::Deploying,
            attempt: 0,
            next_attempt: 1,
            task_attempts: vec![0; tasks],
            alive: BTreeSet::new(),
            history: FailureHistory::new(),
            summary,
            checkpoints,
            initial,
            waiting: Vec::new(),
            pending_failure: None,
        };
        let deploy = m.deploy_all(0);
        (m, vec![deploy])
    }

    /// The job's phase.
    pub(crate) fn phase(&self) -> JobPhase {
        match &self.phase {
            Phase::Deploying => JobPhase::Deploying,
            Phase::Running(r) if r.attempt.is_finishing() => JobPhase::Finishing,
            Phase::Running(r) if !r.regions.is_empty() => JobPhase::RegionRestarting,
            Phase::Running(_) => JobPhase::Running,
            Phase::Stopping(_) => JobPhase::Stopping,
            Phase::Restarting { .. } => JobPhase::Restarting,
            Phase::Ended(p) => *p,
        }
    }

    /// The attempt task `task` runs.
    pub(crate) fn task_attempt(&self, task: TaskIndex) -> Option<AttemptNumber> {
        self.task_attempts.get(task).copied()
    }

    /// When the machine next wants [`JobFact::Time`], in the driver's milliseconds.
    pub(crate) fn next_deadline_ms(&self) -> Option<u64> {
        match &self.phase {
            Phase::Running(r) => r
                .regions
                .iter()
                .filter(|g| g.deploying.is_none())
                .filter_map(|g| g.due_ms)
                .chain(r.attempt.next_deadline_ms())
                .min(),
            Phase::Stopping(s) => s.grace_until_ms,
            Phase::Restarting {
                due_ms,
                reset: true,
            } => Some(*due_ms),
            Phase::Deploying | Phase::Restarting { .. } | Phase::Ended(_) => None,
        }
    }

    /// Handles one fact observed at `now_ms`.
    pub(crate) fn on(&mut self, fact: JobFact, now_ms: u64) -> Vec<JobAction> {
        let mut out = Vec::new();
        match fact {
            JobFact::Time => self.on_time(now_ms, &mut out),
            JobFact::Requested(id, kind) => match &mut self.phase {
                Phase::Running(r) => {
                    let actions = r.attempt.on(Fact::Requested(id, kind), now_ms);
                    self.attempt_actions(actions, now_ms, &mut out);
                }
                Phase::Ended(_) => out.push(ended_request(id)),
                _ => self.waiting.push((id, kind)),
            },
            JobFact::Cancel => self.on_cancel(now_ms, &mut out),
            JobFact::Report { attempt, report } => {
                self.on_report(attempt, report, now_ms, &mut out)
            }
            JobFact::TaskEnded {
                task,
                attempt,
                exit,
            } => self.on_task_ended(task, attempt, exit, now_ms, &mut out),
            JobFact::Deployed(attempt) => self.on_deployed(attempt, now_ms, &mut out),
            JobFact::DeployFailed(attempt, e) => match &self.phase {
                Phase::Deploying if attempt == self.attempt => {
                    self.stop(AttemptEnd::Failed(e), now_ms, &mut out)
                }
                Phase::Running(r) if r.regions.iter().any(|g| g.deploying == Some(attempt)) => {
                    self.pass_to_attempt(Fact::Failed(e), now_ms, &mut out)
                }
                _ => {}
            },
            JobFact::CoordinatorFailed(e) => match &self.phase {
                Phase::Running(_) => {
                    self.pass_to_attempt(Fact::CoordinatorFailed(e), now_ms, &mut out)
                }
                Phase::Deploying => self.stop(AttemptEnd::Failed(e), now_ms, &mut out),
                // Seen between attempts: the next attempt fails with it.
                Phase::Restarting { .. } | Phase::Stopping(_) => {
                    self.pending_failure.get_or_insert(e);
                }
                Phase::Ended(_) => {}
            },
            JobFact::EventLost(e) => self.pass_to_attempt(Fact::EventLost(e), now_ms, &mut out),
            JobFact::CoordinatorsReset(result) => self.on_reset(result, &mut out),
            JobFact::Persisted { id, .. } if self.aborted(id) => out.push(JobAction::Discard(id)),
            JobFact::Persisted { id, bytes } => {
                out.push(JobAction::Written { id, bytes });
                self.pass_to_attempt(Fact::Persisted(id), now_ms, &mut out);
            }
            JobFact::Checkpoint(fact) => self.pass_to_attempt(fact, now_ms, &mut out),
        }
        out
    }

    /// A report of the attempt its task runs goes to the attempt machine; the coordinator events
    /// held for its subtasks are released for that attempt.
    fn on_report(
        &mut self,
        attempt: AttemptNumber,
        report: TaskReport,
        now_ms: u64,
        out: &mut Vec<JobAction>,
    ) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        if self.task_attempts.get(report.task()) != Some(&attempt) {
            return;
        }
        let (release, rest): (Vec<Action>, Vec<Action>) = r
            .attempt
            .on(Fact::Report(report), now_ms)
            .into_iter()
            .partition(|a| matches!(a, Action::ReleaseHeldEvents { .. }));
        for a in release {
            if let Action::ReleaseHeldEvents { node, subtask, id } = a {
                out.push(JobAction::ReleaseHeldEvents {
                    node,
                    subtask,
                    attempt,
                    id,
                });
            }
        }
        self.attempt_actions(rest, now_ms, out);
    }

    fn aborted(&self, id: CheckpointId) -> bool {
        matches!(&self.phase, Phase::Running(r) if r.aborted.contains(&id))
    }

    /// Hands `fact` to the running attempt (and drops it if none runs).
    fn pass_to_attempt(&mut self, fact: Fact, now_ms: u64, out: &mut Vec<JobAction>) {
        if let Phase::Running(r) = &mut self.phase {
            let actions = r.attempt.on(fact, now_ms);
            self.attempt_actions(actions, now_ms, out);
        }
    }

    /// Carries out what the attempt machine asked: region restarts and its end here, the rest
    /// by the driver.
    fn attempt_actions(&mut self, actions: Vec<Action>, now_ms: u64, out: &mut Vec<JobAction>) {
        for action in actions {
            match action {
                Action::RestartRegion { tasks, cause } => {
                    self.stop_region(tasks, cause, now_ms, out);
                }
                Action::End(end) => self.stop(end, now_ms, out),
                action => {
                    if let (Phase::Running(r), Action::NotifyAborted(id, _)) =
                        (&mut self.phase, &action)
                    {
                        r.aborted.insert(*id);
                    }
                    out.push(JobAction::Checkpoint(action));
                }
            }
        }
    }

    fn on_time(&mut self, now_ms: u64, out: &mut Vec<JobAction>) {
        match &mut self.phase {
            Phase::Running(r) => {
                let due: Vec<usize> = (0..r.regions.len())
                    .filter(|&i| {
                        r.regions[i].deploying.is_none()
                            && r.regions[i].due_ms.is_some_and(|d| d <= now_ms)
                    })
                    .collect();
                for i in due {
                    self.deploy_region(i, out);
                }
                self.pass_to_attempt(Fact::Time, now_ms, out);
            }
            Phase::Stopping(s) if s.grace_until_ms.is_some_and(|d| d <= now_ms) => {
                s.grace_until_ms = None;
                self.stop_alive(now_ms, out);
            }
            Phase::Restarting {
                due_ms,
                reset: true,
            } if *due_ms <= now_ms => {
                let attempt = self.take_attempt();
                self.phase = Phase::Deploying;
                out.push(self.deploy_all(attempt));
            }
            _ => {}
        }
    }

    fn on_cancel(&mut self, now_ms: u64, out: &mut Vec<JobAction>) {
        match &self.phase {
            Phase::Running(_) => self.pass_to_attempt(Fact::Cancel, now_ms, out),
            Phase::Deploying => self.stop(AttemptEnd::Cancelled, now_ms, out),
            Phase::Restarting { .. } => self.finish(Err(JobError::Cancelled), out),
            // Stopping already: a failure still ends as cancelled, nothing restarts.
            Phase::Stopping(_) => {
                if let Phase::Stopping(s) = &mut self.phase {
                    s.end = AttemptEnd::Cancelled;
                }
            }
            Phase::Ended(_) => {}
        }
    }

    fn on_deployed(&mut self, attempt: AttemptNumber, now_ms: u64, out: &mut Vec<JobAction>) {
        match &mut self.phase {
            Phase::Deploying if attempt == self.attempt => {
                self.alive = (0..self.settings.layout.tasks).collect();
                let (mut machine, first) = AttemptMachine::start(
                    self.settings.layout.clone(),
                    self.checkpoints.take(),
                    now_ms,
                );
                machine.add_waiting_requests(std::mem::take(&mut self.waiting));
                self.phase = Phase::Running(Box::new(Running {
                    attempt: machine,
                    regions: Vec::new(),
                    aborted: BTreeSet::new(),
                }));
                self.attempt_actions(first, now_ms, out);
                if let Some(e) = self.pending_failure.take() {
                    self.pass_to_attempt(Fact::CoordinatorFailed(e), now_ms, out);
                }
            }
            Phase::Running(r) => {
                let Some(i) = r.regions.iter().position(|g| g.deploying == Some(attempt)) else {
                    return;
                };
                let region = r.regions.remove(i);
                self.alive.extend(region.tasks.iter().copied());
                self.pass_to_attempt(Fact::RegionRestored(region.tasks), now_ms, out);
            }
            _ => {}
        }
    }

    fn on_task_ended(
        &mut self,
        task: TaskIndex,
        attempt: AttemptNumber,
        exit: TaskExit,
        now_ms: u64,
        out: &mut Vec<JobAction>,
    ) {
        if self.task_attempt(task) != Some(attempt) || !self.alive.remove(&task) {
            return; // an exit of an attempt that no longer runs
        }
        match &mut self.phase {
            Phase::Running(r) => {
                if let Some(i) = r.regions.iter().position(|g| g.stopping.contains(&task)) {
                    let region = &mut r.regions[i];
                    region.stopping.remove(&task);
                    upgrade_cause(&mut region.cause, &exit);
                    if region.stopping.is_empty() {
                        self.region_stopped(i, now_ms, out);
                    }
                    return;
                }
                let fact = match exit {
                    TaskExit::Finished | TaskExit::Cancelled => Fact::TaskExited(task),
                    TaskExit::Failed(e) => Fact::TaskFailed(task, e),
                };
                self.pass_to_attempt(fact, now_ms, out);
            }
            Phase::Stopping(s) => {
                if let AttemptEnd::TaskFailed(cause) = &mut s.end {
                    upgrade_cause(cause, &exit);
                    if s.grace_until_ms.is_some() && cause.is_root_cause() {
                        s.grace_until_ms = None;
                        self.stop_alive(now_ms, out);
                        return;
                    }
                }
                if self.alive.is_empty() {
                    self.stopped(now_ms, out);
                }
            }
            _ => {}
        }
    }

    /// A region failed: stop its tasks still running and tell the coordinators (rule 3).
    fn stop_region(
        &mut self,
        tasks: Vec<TaskIndex>,
        cause: TaskError,
        now_ms: u64,
        out: &mut Vec<JobAction>,
    ) {
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        let stopping: BTreeSet<TaskIndex> = tasks
            .iter()
            .copied()
            .filter(|t| self.alive.contains(t))
            .collect();
        out.push(JobAction::StopTasks(stopping.iter().copied().collect()));
        out.push(JobAction::SubtasksFailed {
            tasks: tasks.clone(),
            reason: cause.clone().into_job_error().to_string(),
        });
        let empty = stopping.is_empty();
        r.regions.push(RegionRestart {
            tasks,
            cause,
            stopping,
            due_ms: None,
            deploying: None,
        });
        if empty {
            let i = r.regions.len() - 1;
            self.region_stopped(i, now_ms, out);
        }
    }

    /// Every task of the failed region at `i` stopped: the restart strategy decides.
    fn region_stopped(&mut self, i: usize, now_ms: u64, out: &mut Vec<JobAction>) {
        let Phase::Running(r) = &self.phase else {
            return;
        };
        let Some(region) = r.regions.get(i) else {
            return;
        };
        let (err, tasks) = (region.cause.clone().into_job_error(), region.tasks.clone());
        match self.decide_restart(err, Some(tasks), now_ms, out) {
            Err(final_error) => self.pass_to_attempt(Fact::GaveUp(final_error), now_ms, out),
            Ok(after_ms) => {
                if let Phase::Running(r) = &mut self.phase
                    && let Some(region) = r.regions.get_mut(i)
                {
                    region.due_ms = Some(now_ms.saturating_add(after_ms));
                }
            }
        }
    }

    /// Records failure `err` (of the tasks of `region`, or of the whole job) and asks the
    /// restart strategy: the delay before the restart, counted and recorded, or the job's final
    /// error.
    fn decide_restart(
        &mut self,
        err: JobError,
        region: Option<Vec<TaskIndex>>,
        now_ms: u64,
        out: &mut Vec<JobAction>,
    ) -> Result<u64, JobError> {
        let decision = decide(
            &self.settings.restart,
            &mut self.history,
            err.clone(),
            now_ms,
        );
        let restart = decision.as_ref().ok().map(|&after_ms| {
            self.summary.restarts += 1;
            Restart {
                restarts: self.summary.restarts,
                after_ms,
                region,
            }
        });
        out.push(JobAction::Failure {
            error: err,
            restart,
        });
        decision
    }

    /// The region at `i` is due: deploy it as a new attempt (rule 4).
    fn deploy_region(&mut self, i: usize, out: &mut Vec<JobAction>) {
        let attempt = self.take_attempt();
        let restore = self.restore_point();
        let Phase::Running(r) = &mut self.phase else {
            return;
        };
        let Some(region) = r.regions.get_mut(i) else {
            return;
        };
        region.deploying = Some(attempt);
        for &t in &region.tasks {
            if let Some(a) = self.task_attempts.get_mut(t) {
                *a = attempt;
            }
        }
        out.push(JobAction::Deploy {
            scope: DeployScope::Region(region.tasks.clone()),
            attempt,
            restore,
        });
    }

    /// The attempt (or its deployment) ended with `end`: stop every task (rule 6).
    fn stop(&mut self, end: AttemptEnd, now_ms: u64, out: &mut Vec<JobAction>) {
        let phase = std::mem::replace(&mut self.phase, Phase::Deploying);
        if let Phase::Running(r) = phase {
            let mut attempt = r.attempt;
            self.waiting.extend(attempt.take_waiting_requests());
            self.checkpoints = attempt.into_checkpoints();
        }
        out.push(JobAction::EndAttempt);
        let grace_until_ms = match (&end, self.settings.root_cause_grace_ms) {
            (AttemptEnd::TaskFailed(e), Some(grace)) if !e.is_root_cause() => {
                Some(now_ms.saturating_add(grace))
            }
            _ => None,
        };
        let in_grace = grace_until_ms.is_some();
        self.phase = Phase::Stopping(Stopping {
            end,
            grace_until_ms,
        });
        if !in_grace {
            self.stop_alive(now_ms, out);
        }
    }

    /// Stops every task still alive, or moves on if none is.
    fn stop_alive(&mut self, now_ms: u64, out: &mut Vec<JobAction>) {
        if self.alive.is_empty() {
            self.stopped(now_ms, out);
        } else {
            out.push(JobAction::StopTasks(self.alive.iter().copied().collect()));
        }
    }

    /// Every task of the ended attempt stopped: the job ends or restarts (rules 7 and 8).
    fn stopped(&mut self, now_ms: u64, out: &mut Vec<JobAction>) {
        let phase = std::mem::replace(&mut self.phase, Phase::Deploying);
        let Phase::Stopping(s) = phase else {
            self.phase = phase;
            return;
        };
        if let Some(c) = &self.checkpoints {
            self.summary.checkpoints = c.counts;
            self.summary.last_checkpoint = c.latest.as_ref().map(|l| l.id);
        }
        let err = match s.end {
            AttemptEnd::Finished => return self.finish(Ok(()), out),
            AttemptEnd::Stopped(id) => {
                self.summary.stopped_with_savepoint = Some(id);
                return self.finish(Ok(()), out);
            }
            AttemptEnd::Cancelled => return self.finish(Err(JobError::Cancelled), out),
            AttemptEnd::GaveUp(e) => return self.finish(Err(e), out),
            AttemptEnd::TaskFailed(e) => e.into_job_error(),
            AttemptEnd::Failed(e) => e,
        };
        match self.decide_restart(err.clone(), None, now_ms, out) {
            Err(final_error) => self.finish(Err(final_error), out),
            Ok(after_ms) => {
                let restore = self.restore_point().map(|c| (c.id, c.coordinators));
                out.push(JobAction::ResetCoordinators {
                    reason: err.to_string(),
                    restore,
                });
                self.phase = Phase::Restarting {
                    due_ms: now_ms.saturating_add(after_ms),
                    reset: false,
                };
            }
        }
    }

    fn on_reset(&mut self, result: Result<(), JobError>, out: &mut Vec<JobAction>) {
        if let Phase::Restarting { reset, .. } = &mut self.phase {
            match result {
                Ok(()) => *reset = true,
                Err(e) => self.finish(Err(e), out),
            }
        }
    }

    /// The job is over with `result`.
    fn finish(&mut self, result: Result<(), JobError>, out: &mut Vec<JobAction>) {
        let phase = match &result {
            Ok(()) => JobPhase::Finished,
            Err(JobError::Cancelled) => JobPhase::Cancelled,
            Err(_) => JobPhase::Failed,
        };
        self.phase = Phase::Ended(phase);
        for (id, _) in std::mem::take(&mut self.waiting) {
            out.push(ended_request(id));
        }
        out.push(JobAction::Finish(result.map(|()| self.summary.clone())));
    }

    /// Deploy the whole job as `attempt`.
    fn deploy_all(&mut self, attempt: AttemptNumber) -> JobAction {
        self.attempt = attempt;
        self.task_attempts.fill(attempt);
        JobAction::Deploy {
            scope: DeployScope::All,
            attempt,
            restore: self.restore_point(),
        }
    }

    /// Where a deployment restores from: the latest completed checkpoint, or else the one the
    /// job started from.
    fn restore_point(&self) -> Option<CompletedCheckpoint> {
        let latest = match &self.phase {
            Phase::Running(r) => r.attempt.latest(),
            _ => self.checkpoints.as_ref().and_then(|c| c.latest.as_ref()),
        };
        latest.or(self.initial.as_ref()).cloned()
    }

    fn take_attempt(&mut self) -> AttemptNumber {
        let a = self.next_attempt;
        self.next_attempt += 1;
        a
    }
}

/// Records failure `err` at `now_ms` and asks the strategy: the delay before the restart, or
/// the job's final error.
fn decide(
    strategy: &RestartStrategy,
    history: &mut FailureHistory,
    err: JobError,
    now_ms: u64,
) -> Result<u64, JobError> {
    match strategy.on_failure(history, Duration::from_millis(now_ms)) {
        RestartDecision::GiveUp { attempts } => Err(if attempts == 0 && strategy.is_none() {
            err
        } else {
            JobError::RestartsExhausted {
                attempts,
                last: Box::new(err),
            }
        }),
        RestartDecision::Restart { after } => {
            Ok(u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
        }
    }
}

/// A root cause among the failures of stopping tasks is preferred to the first failure known.
fn upgrade_cause(cause: &mut TaskError, exit: &TaskExit) {
    if let TaskExit::Failed(e) = exit
        && e.is_root_cause()
        && !cause.is_root_cause()
    {
        *cause = e.clone();
    }
}

/// The answer to a request the job ended before taking.
fn ended_request(id: RequestId) -> JobAction {
    JobAction::Checkpoint(Action::RequestDone(
        id,
        Err("the job ended before the checkpoint was triggered".into()),
    ))
}

#[cfg(test)]
mod tests;
