//! One attempt of a job as a pure state machine: facts in, actions out.
//!
//! The job machine (`machine.rs`) runs one of these per attempt of the whole job; what happens
//! across attempts (restarts, attempt numbers, stale reports, root causes) is its. It hands
//! this machine the facts of the attempt (task reports, task exits and failures, coordinator
//! snapshots and failures, persisted or failed checkpoint writes, deadlines, trigger and cancel
//! requests), each to [`AttemptMachine::on`] with the time it observed it. The machine answers
//! with [`Action`]s for the master to carry out: trigger a checkpoint at the sources, snapshot
//! the coordinators, release held coordinator events, persist a completed checkpoint, notify
//! completion or abort, finish or flush, and end the attempt. It reads no clock, spawns nothing
//! and does no I/O, so every rule below is a unit test without threads or a runtime.
//!
//! The rules, in the order they apply:
//! 1. **Coordinators first.** A checkpoint the planner triggers is first snapshotted by the
//!    coordinators; barriers go to the sources (and to tasks that finished their input) only
//!    once every coordinator's part is taken. If a coordinator cannot take its part, the
//!    checkpoint aborts; if its snapshot never completes, the checkpoint expires like any other.
//! 2. **Acknowledgements** release the coordinator events held for that subtask and checkpoint,
//!    and their states are kept until every task acknowledged; then the grouped checkpoint is
//!    persisted, and only a persisted checkpoint completes (tasks and coordinators are told, and
//!    it becomes the restore point).
//! 3. **Failed checkpoints** are counted against the tolerated number; one too many ends the
//!    attempt with a cause naming the checkpoint and why it failed.
//! 4. **A job ends** when every task has exited: the coordinators are flushed (every event a
//!    subtask sent before it exited is handled) and only then is the attempt finished; a
//!    coordinator failure before that fails it. A stop with savepoint finishes the tasks once
//!    its checkpoint completed and ends the attempt as stopped.
//! 5. **A task failure restarts its region** under region failover (the default): every pending
//!    checkpoint is aborted, the region's tasks count as down (no checkpoint starts, their exits
//!    do not count towards the end of the job, and what they still report is dropped) and the
//!    job machine is asked to restart them; when it reports them restored they run again. The
//!    rest of the job keeps running. Under full failover, when the region is the whole job, or
//!    once the tasks were told to finish, a task failure ends the attempt instead.
//! 6. **Any other failure ends the attempt**: a coordinator failure, a lost coordinator event,
//!    too many failed checkpoints. Facts after the end are ignored, so a late persist of a
//!    checkpoint of a failed attempt changes nothing.
//!
//! A worked example, one source task, no coordinators:
//!
//! ```text
//! on(Time, 100)                      -> [TriggerSources(barrier 1)]
//! on(Report(Ack(task 0, 1, states)), 101)
//!                                    -> [ReleaseHeldEvents(..), Persist(checkpoint 1)]
//! on(Persisted(1), 102)              -> [NotifyComplete(1)]
//! on(Report(FinishedInput(task 0)), 103)
//!                                    -> [TriggerSources(barrier 2), TriggerTask(0, barrier 2)]
//! ... acknowledged and persisted     -> [NotifyComplete(2), FinishTasks]
//! on(TaskExited, 110)                -> [End(Finished)]
//! ```

use crate::checkpoint::{
    AbortReason, CheckpointPlanner, CompletedCheckpoint, Decision, FailureCounter, PendingStates,
    TaskIndex,
};
use crate::error::{JobError, TaskError};
use crate::failover::{FailoverStrategy, Regions, RestartScope};
use crate::task::control::{DeclineReason, TaskReport};
use sluice_core::{CheckpointBarrier, CheckpointId, NodeId, SubtaskIndex};
use std::collections::{BTreeMap, BTreeSet};

/// Identifies one request made through the job handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct RequestId(pub(crate) u64);

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RequestKind {
    /// A checkpoint as soon as the rules allow.
    Checkpoint,
    /// A checkpoint, then stop the job (Flink's stop-with-savepoint).
    StopWithSavepoint,
}

/// Counts of checkpoints over the whole job (every attempt).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CheckpointCounts {
    pub(crate) triggered: u64,
    pub(crate) completed: u64,
    pub(crate) failed: u64,
    pub(crate) expired: u64,
}

/// What checkpointing keeps across attempts: the planner (ids never repeat), the failure
/// counter, the restore point, and the counts.
#[derive(Debug)]
pub(crate) struct JobCheckpoints {
    pub(crate) planner: CheckpointPlanner,
    pub(crate) failures: FailureCounter,
    pub(crate) latest: Option<CompletedCheckpoint>,
    pub(crate) counts: CheckpointCounts,
}

impl JobCheckpoints {
    pub(crate) fn new(planner: CheckpointPlanner, latest: Option<CompletedCheckpoint>) -> Self {
        let failures = FailureCounter::new(planner.settings().tolerable_failed_checkpoints);
        JobCheckpoints {
            planner,
            failures,
            latest,
            counts: CheckpointCounts::default(),
        }
    }
}

/// How an attempt is laid out.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    /// How many tasks run.
    pub(crate) tasks: usize,
    /// Whether any operator has a coordinator.
    pub(crate) has_coordinators: bool,
    /// The job's pipelined regions.
    pub(crate) regions: Regions,
    /// What a task failure restarts.
    pub(crate) failover: FailoverStrategy,
}

/// Something the master observed.
#[derive(Debug)]
pub(crate) enum Fact {
    /// A deadline the machine asked for was reached.
    Time,
    /// A checkpoint (or a stop with savepoint) was requested.
    Requested(RequestId, RequestKind),
    /// The job was cancelled.
    Cancel,
    /// A task reported.
    Report(TaskReport),
    /// Task `task` ended without error.
    TaskExited(TaskIndex),
    /// Task `task` failed.
    TaskFailed(TaskIndex, TaskError),
    /// The tasks of a failed region run again, restored from the latest completed checkpoint.
    RegionRestored(Vec<TaskIndex>),
    /// Every coordinator took its part of checkpoint `id`.
    CoordinatorsSnapshotted {
        id: CheckpointId,
        states: BTreeMap<NodeId, Vec<u8>>,
    },
    /// A coordinator could not take its part of checkpoint `id`.
    CoordinatorSnapshotFailed { id: CheckpointId, reason: String },
    /// A coordinator failed the job.
    CoordinatorFailed(JobError),
    /// An event a coordinator sent was lost while its target ran: the attempt must fail over to
    /// stay consistent.
    EventLost(JobError),
    /// Checkpoint `id` is durable.
    Persisted(CheckpointId),
    /// Checkpoint `id` could not be written.
    PersistFailed { id: CheckpointId, reason: String },
    /// Every coordinator handled every call made before the flush.
    CoordinatorsFlushed,
    /// Something the job master did for the attempt failed (a region could not be deployed).
    Failed(JobError),
    /// A region failed and the restart strategy gave up: the job fails with this error.
    GaveUp(JobError),
}

/// How an attempt ended.
#[derive(Debug)]
pub(crate) enum AttemptEnd {
    /// Every task finished (and the final checkpoint, if any, completed).
    Finished,
    /// The job stopped after savepoint `id` completed.
    Stopped(CheckpointId),
    /// The job was cancelled.
    Cancelled,
    /// A task failed: the master picks the root cause among the failing tasks.
    TaskFailed(TaskError),
    /// Anything else failed.
    Failed(JobError),
    /// A region failed and the restart strategy gave up: the job fails with this error.
    GaveUp(JobError),
}

/// Something the master must do.
#[derive(Debug)]
pub(crate) enum Action {
    /// Take the coordinators' part of checkpoint `id`; report back with
    /// [`Fact::CoordinatorsSnapshotted`] or [`Fact::CoordinatorSnapshotFailed`].
    SnapshotCoordinators(CheckpointId),
    /// Inject the barrier at every source task.
    TriggerSources(CheckpointBarrier),
    /// Trigger the checkpoint directly at a task that finished its input.
    TriggerTask(TaskIndex, CheckpointBarrier),
    /// The subtask took barrier `id`: release the coordinator events held for it.
    ReleaseHeldEvents {
        node: NodeId,
        subtask: SubtaskIndex,
        id: CheckpointId,
    },
    /// Write the checkpoint; report back with [`Fact::Persisted`] or [`Fact::PersistFailed`].
    Persist(CompletedCheckpoint),
    /// Tell coordinators and tasks that `id` completed.
    NotifyComplete(CheckpointId),
    /// Tell coordinators and tasks that `id` was aborted, and remove what was written of it.
    NotifyAborted(CheckpointId, AbortReason),
    /// Tell the requester which checkpoint its request started.
    RequestTriggered(RequestId, CheckpointId),
    /// Tell the requester how its checkpoint ended.
    RequestDone(RequestId, Result<CheckpointId, String>),
    /// Stop the tasks `tasks` (one pipelined region; `cause` is the failure of one of them) and
    /// restart them from the latest completed checkpoint, as the restart strategy allows; report
    /// back with [`Fact::RegionRestored`].
    RestartRegion {
        tasks: Vec<TaskIndex>,
        cause: TaskError,
    },
    /// Tell every task to end.
    FinishTasks,
    /// Flush every coordinator; report back with [`Fact::CoordinatorsFlushed`].
    FlushCoordinators,
    /// The attempt is over: stop every task still running.
    End(AttemptEnd),
}

/// A checkpoint triggered by the planner whose coordinators have not answered yet.
#[derive(Debug)]
struct AwaitingCoordinators {
    barrier: CheckpointBarrier,
    finished_tasks: Vec<TaskIndex>,
}

/// The state machine of one attempt. See the module documentation.
#[derive(Debug)]
pub(crate) struct AttemptMachine {
    layout: Layout,
    checkpoints: Option<JobCheckpoints>,
    states: PendingStates,
    awaiting: BTreeMap<CheckpointId, AwaitingCoordinators>,
    persisting: BTreeMap<CheckpointId, CompletedCheckpoint>,
    /// Requests waiting for the next trigger.
    waiting: Vec<(RequestId, RequestKind)>,
    /// Requests attached to a triggered checkpoint.
    requests: BTreeMap<CheckpointId, Vec<(RequestId, RequestKind)>>,
    /// The savepoint a stop waits for to end the job, once it completed.
    stopped_at: Option<CheckpointId>,
    /// Tasks running (not exited, not down).
    running: BTreeSet<TaskIndex>,
    /// Tasks of failed regions the master is restarting.
    down: BTreeSet<TaskIndex>,
    /// Every task was told to finish.
    finishing: bool,
    flushing: bool,
    ended: bool,
}

impl AttemptMachine {
    /// A machine for an attempt laid out as `layout`, checkpointing with `checkpoints` if
    /// enabled. Returns it with the actions of its start at `now_ms` (checkpoints still pending
    /// from the previous attempt are aborted).
    pub(crate) fn start(
        layout: Layout,
        mut checkpoints: Option<JobCheckpoints>,
        now_ms: u64,
    ) -> (Self, Vec<Action>) {
        let decisions = checkpoints
            .as_mut()
            .map(|c| c.planner.on_restart(now_ms))
            .unwrap_or_default();
        let running: BTreeSet<TaskIndex> = (0..layout.tasks).collect();
        let empty = running.is_empty();
        let mut m = AttemptMachine {
            layout,
            checkpoints,
            states: PendingStates::default(),
            awaiting: BTreeMap::new(),
            persisting: BTreeMap::new(),
            waiting: Vec::new(),
            requests: BTreeMap::new(),
            stopped_at: None,
            running,
            down: BTreeSet::new(),
            finishing: false,
            flushing: false,
            ended: false,
        };
        let mut out = Vec::new();
        m.apply(decisions, now_ms, &mut out);
        if empty {
            m.all_exited(&mut out);
        }
        (m, out)
    }

    /// What checkpointing keeps for the next attempt.
    pub(crate) fn into_checkpoints(self) -> Option<JobCheckpoints> {
        self.checkpoints
    }

    /// The job's checkpoint counts so far.
    #[cfg(test)]
    pub(crate) fn counts(&self) -> CheckpointCounts {
        self.checkpoints
            .as_ref()
            .map(|c| c.counts)
            .unwrap_or_default()
    }

    /// The checkpoint a restart would restore.
    pub(crate) fn latest(&self) -> Option<&CompletedCheckpoint> {
        self.checkpoints.as_ref().and_then(|c| c.latest.as_ref())
    }

    /// When the machine next wants [`Fact::Time`], in the master's milliseconds.
    pub(crate) fn next_deadline_ms(&self) -> Option<u64> {
        // Finishing, no checkpoint starts (and none may expire-and-retrigger): nothing to wake for.
        if self.ended || self.finishing {
            return None;
        }
        self.checkpoints
            .as_ref()
            .and_then(|c| c.planner.next_deadline_ms())
    }

    /// Whether every task was told to finish (or the coordinators are being flushed at the end).
    pub(crate) fn is_finishing(&self) -> bool {
        self.finishing || self.flushing
    }

    /// Whether the attempt has ended.
    #[cfg(test)]
    pub(crate) fn has_ended(&self) -> bool {
        self.ended
    }

    /// Handles one fact observed at `now_ms`.
    pub(crate) fn on(&mut self, fact: Fact, now_ms: u64) -> Vec<Action> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        match fact {
            // Once the tasks were told to finish, no new checkpoint starts.
            Fact::Time if self.finishing => {}
            Fact::Time => {
                let d = self.planner_do(|p| p.on_time(now_ms));
                self.apply(d, now_ms, &mut out);
            }
            Fact::Requested(request, kind) => self.on_request(request, kind, now_ms, &mut out),
            Fact::Cancel => self.end(AttemptEnd::Cancelled, &mut out),
            // Tasks of a failed region are down from their stop until they run again: what they
            // still report is dropped.
            Fact::Report(report) if self.down.contains(&report.task()) => {}
            Fact::Report(report) => self.on_report(report, now_ms, &mut out),
            Fact::TaskExited(task) => {
                self.running.remove(&task);
                if self.running.is_empty() && self.down.is_empty() {
                    self.all_exited(&mut out);
                }
            }
            // Told to finish, a task may end before its peers read their last message: a peer
            // that lost its channel then is not a failure.
            Fact::TaskFailed(task, e) if self.finishing && !e.is_root_cause() => {
                return self.on(Fact::TaskExited(task), now_ms);
            }
            // A consequence of a region failure already being handled (a peer in the region
            // stopped first) changes nothing.
            Fact::TaskFailed(task, _) if self.down.contains(&task) => {}
            Fact::TaskFailed(task, e) => self.on_task_failed(task, e, now_ms, &mut out),
            Fact::RegionRestored(tasks) => {
                for t in &tasks {
                    if self.down.remove(t) {
                        self.running.insert(*t);
                    }
                }
                if let Some(c) = self.checkpoints.as_mut() {
                    c.planner.on_region_restored(&tasks, now_ms);
                }
            }
            Fact::CoordinatorFailed(e) | Fact::Failed(e) => {
                self.end(AttemptEnd::Failed(e), &mut out)
            }
            Fact::GaveUp(e) => self.end(AttemptEnd::GaveUp(e), &mut out),
            // An event lost to a task that finished on request is of no consequence.
            Fact::EventLost(_) if self.finishing => {}
            Fact::EventLost(e) => self.end(AttemptEnd::Failed(e), &mut out),
            Fact::CoordinatorsSnapshotted { id, states } => {
                let Some(a) = self.awaiting.remove(&id) else {
                    return out; // aborted meanwhile
                };
                self.states.add_coordinator_states(id, states);
                out.push(Action::TriggerSources(a.barrier));
                for t in a.finished_tasks {
                    out.push(Action::TriggerTask(t, a.barrier));
                }
            }
            Fact::CoordinatorSnapshotFailed { id, reason } => {
                let d = self.planner_do(|p| {
                    p.on_failed(id, AbortReason::CoordinatorDeclined(reason), now_ms)
                });
                self.apply(d, now_ms, &mut out);
            }
            Fact::Persisted(id) => {
                let Some(cp) = self.persisting.remove(&id) else {
                    return out;
                };
                if let Some(c) = self.checkpoints.as_mut() {
                    c.latest = Some(cp);
                    c.counts.completed += 1;
                    c.failures.on_completed(id);
                }
                let d = self.planner_do(|p| p.on_persisted(id, now_ms));
                self.apply(d, now_ms, &mut out);
            }
            Fact::PersistFailed { id, reason } => {
                self.persisting.remove(&id);
                let d = self.planner_do(|p| p.on_persist_failed(id, &reason, now_ms));
                self.apply(d, now_ms, &mut out);
            }
            Fact::CoordinatorsFlushed => {
                if self.flushing {
                    let end = match self.stopped_at {
                        Some(id) => AttemptEnd::Stopped(id),
                        None => AttemptEnd::Finished,
                    };
                    self.end(end, &mut out);
                }
            }
        }
        out
    }

    /// Task `task` failed: restart its region, or end the attempt (see rule 5).
    fn on_task_failed(
        &mut self,
        task: TaskIndex,
        e: TaskError,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        let scope = if self.finishing {
            RestartScope::All
        } else {
            self.layout.failover.scope(&self.layout.regions, task)
        };
        let tasks = match scope {
            RestartScope::All => return self.end(AttemptEnd::TaskFailed(e), out),
            RestartScope::Region(tasks) => tasks,
        };
        for t in &tasks {
            self.running.remove(t);
            self.down.insert(*t);
        }
        // Checkpoints in progress can no longer complete; their requests are answered.
        let d = self.planner_do(|p| p.on_region_failed(&tasks));
        self.apply(d, now_ms, out);
        if !self.ended {
            out.push(Action::RestartRegion { tasks, cause: e });
        }
    }

    fn planner_do(
        &mut self,
        f: impl FnOnce(&mut CheckpointPlanner) -> Vec<Decision>,
    ) -> Vec<Decision> {
        self.checkpoints
            .as_mut()
            .map(|c| f(&mut c.planner))
            .unwrap_or_default()
    }

    fn on_request(
        &mut self,
        request: RequestId,
        kind: RequestKind,
        now_ms: u64,
        out: &mut Vec<Action>,
    ) {
        if self.checkpoints.is_none() {
            out.push(Action::RequestDone(
                request,
                Err("checkpointing is not enabled for this job".into()),
            ));
            return;
        }
        self.waiting.push((request, kind));
        let d = self.planner_do(|p| {
            p.request_trigger();
            p.on_time(now_ms)
        });
        self.apply(d, now_ms, out);
    }

    fn on_report(&mut self, report: TaskReport, now_ms: u64, out: &mut Vec<Action>) {
        let d = match report {
            TaskReport::Ack {
                task,
                checkpoint,
                states,
            } => {
                for (node, subtask, _) in &states {
                    out.push(Action::ReleaseHeldEvents {
                        node: *node,
                        subtask: *subtask,
                        id: checkpoint,
                    });
                }
                let pending = self
                    .checkpoints
                    .as_ref()
                    .is_some_and(|c| c.planner.is_pending(checkpoint));
                if pending {
                    self.states.add_task_states(checkpoint, states);
                }
                self.planner_do(|p| p.on_ack(task, checkpoint))
            }
            TaskReport::Decline {
                task,
                checkpoint,
                reason: DeclineReason::Subsumed,
            } => self.planner_do(|p| {
                p.on_failed(checkpoint, AbortReason::DeclinedSubsumed { task }, now_ms)
            }),
            TaskReport::FinishedInput { task } => {
                self.planner_do(|p| p.on_task_finished(task, now_ms))
            }
        };
        self.apply(d, now_ms, out);
    }

    /// Carries the planner's decisions into actions.
    fn apply(&mut self, decisions: Vec<Decision>, now_ms: u64, out: &mut Vec<Action>) {
        for d in decisions {
            if self.ended {
                return;
            }
            match d {
                Decision::Trigger { id, timestamp_ms } => {
                    let barrier = CheckpointBarrier { id, timestamp_ms };
                    if let Some(c) = self.checkpoints.as_mut() {
                        c.counts.triggered += 1;
                    }
                    let requests = std::mem::take(&mut self.waiting);
                    for (r, _) in &requests {
                        out.push(Action::RequestTriggered(*r, id));
                    }
                    if !requests.is_empty() {
                        self.requests.insert(id, requests);
                    }
                    if self.layout.has_coordinators {
                        self.awaiting.insert(
                            id,
                            AwaitingCoordinators {
                                barrier,
                                finished_tasks: Vec::new(),
                            },
                        );
                        out.push(Action::SnapshotCoordinators(id));
                    } else {
                        out.push(Action::TriggerSources(barrier));
                    }
                }
                Decision::TriggerFinishedTask { id, task } => match self.awaiting.get_mut(&id) {
                    Some(a) => a.finished_tasks.push(task),
                    None => out.push(Action::TriggerTask(
                        task,
                        CheckpointBarrier {
                            id,
                            timestamp_ms: now_ms,
                        },
                    )),
                },
                Decision::Persist { id } => {
                    let cp = self.states.complete(id, now_ms);
                    self.persisting.insert(id, cp.clone());
                    out.push(Action::Persist(cp));
                }
                Decision::NotifyComplete { id } => {
                    out.push(Action::NotifyComplete(id));
                    for (r, kind) in self.requests.remove(&id).unwrap_or_default() {
                        out.push(Action::RequestDone(r, Ok(id)));
                        if kind == RequestKind::StopWithSavepoint && self.stopped_at.is_none() {
                            self.stopped_at = Some(id);
                            self.finishing = true;
                            out.push(Action::FinishTasks);
                        }
                    }
                }
                Decision::Abort { id, reason } => self.abort(id, reason, out),
                Decision::Finish => {
                    self.finishing = true;
                    out.push(Action::FinishTasks);
                }
            }
        }
    }

    fn abort(&mut self, id: CheckpointId, reason: AbortReason, out: &mut Vec<Action>) {
        self.states.discard(id);
        self.awaiting.remove(&id);
        self.persisting.remove(&id);
        for (r, _) in self.requests.remove(&id).unwrap_or_default() {
            out.push(Action::RequestDone(
                r,
                Err(format!("checkpoint {id} was aborted: {reason}")),
            ));
        }
        let exceeded = self.checkpoints.as_mut().and_then(|c| {
            if reason.counts_as_failure() {
                c.counts.failed += 1;
            }
            if matches!(reason, AbortReason::Expired { .. }) {
                c.counts.expired += 1;
            }
            c.failures.on_aborted(id, &reason)
        });
        out.push(Action::NotifyAborted(id, reason));
        if let Some(f) = exceeded {
            self.end(
                AttemptEnd::Failed(JobError::CheckpointFailed {
                    checkpoint: f.checkpoint,
                    reason: f.reason,
                    tolerated: f.tolerated,
                }),
                out,
            );
        }
    }

    fn all_exited(&mut self, out: &mut Vec<Action>) {
        if self.layout.has_coordinators {
            self.flushing = true;
            out.push(Action::FlushCoordinators);
        } else {
            let end = match self.stopped_at {
                Some(id) => AttemptEnd::Stopped(id),
                None => AttemptEnd::Finished,
            };
            self.end(end, out);
        }
    }

    fn end(&mut self, end: AttemptEnd, out: &mut Vec<Action>) {
        if self.ended {
            return;
        }
        self.ended = true;
        // Pending checkpoints of this attempt cannot complete any more.
        let pending: Vec<CheckpointId> = self.requests.keys().copied().collect();
        for id in pending {
            for (r, _) in self.requests.remove(&id).unwrap_or_default() {
                out.push(Action::RequestDone(
                    r,
                    Err(format!(
                        "checkpoint {id} did not complete: the job attempt ended"
                    )),
                ));
            }
        }
        self.states.clear();
        self.awaiting.clear();
        self.persisting.clear();
        out.push(Action::End(end));
    }

    /// Requests still waiting for a trigger (handed to the next attempt).
    pub(crate) fn take_waiting_requests(&mut self) -> Vec<(RequestId, RequestKind)> {
        std::mem::take(&mut self.waiting)
    }

    /// Requests made to an earlier attempt, still waiting for a trigger.
    pub(crate) fn add_waiting_requests(&mut self, requests: Vec<(RequestId, RequestKind)>) {
        self.waiting.extend(requests);
        if let Some(c) = self.checkpoints.as_mut()
            && !self.waiting.is_empty()
        {
            c.planner.request_trigger();
        }
    }
}

#[cfg(test)]
mod tests;
