//! The checkpoint coordinator's decisions, as a pure state machine.
//!
//! [`CheckpointPlanner`] observes facts (time passed, a trigger was requested, a task acknowledged
//! or declined, the state of a completed checkpoint was persisted, tasks finished their input, the
//! job failed) and answers with [`Decision`]s for the job master to carry out (inject barriers,
//! persist, notify, abort, discard). It reads no clock and does no I/O: time is passed in as
//! milliseconds, so every rule is tested without threads.
//!
//! A worked example of one checkpoint with two tasks (the unit test `worked_example` runs it):
//!
//! ```text
//! let mut p = CheckpointPlanner::new(CheckpointSettings::every(100 ms), 2, CheckpointId(0));
//! p.on_time(50)          -> []                                   not yet due
//! p.on_time(100)         -> [Trigger { id: 1, timestamp_ms: 100 }]
//! p.on_ack(0, 1)         -> []
//! p.on_ack(1, 1)         -> [Persist { id: 1 }]                  every task acknowledged
//! p.on_persisted(1, 120) -> [NotifyComplete { id: 1 }]
//! ```

use super::CheckpointSettings;
use sluice_core::CheckpointId;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

/// The index of a task (one subtask of one chain) as the planner knows it.
pub(crate) type TaskIndex = usize;

/// Why a checkpoint was aborted. Whether it counts against the tolerated failures follows
/// Flink's `CheckpointFailureManager`: see [`counts_as_failure`](Self::counts_as_failure).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AbortReason {
    /// Not every task acknowledged it within the timeout.
    Expired {
        /// The timeout.
        after: Duration,
    },
    /// A task gave it up because a newer checkpoint's barrier overtook it during alignment.
    DeclinedSubsumed {
        /// The task.
        task: TaskIndex,
    },
    /// A coordinator could not take its part (Flink: a trigger failure).
    CoordinatorDeclined(String),
    /// Its files could not be written.
    PersistFailed(String),
    /// A newer checkpoint completed first.
    Subsumed {
        /// The newer checkpoint.
        by: CheckpointId,
    },
    /// The job failed or is restarting.
    JobFailed,
    /// A pipelined region failed and restarts: its tasks cannot acknowledge, and what they
    /// acknowledged belongs to the attempt that failed.
    RegionFailed,
}

impl AbortReason {
    /// Whether this abort counts as a failed checkpoint (Flink counts expired checkpoints,
    /// declines because a snapshot failed, and I/O failures writing it; in sluice a snapshot
    /// that fails fails its task, so only the first and the last remain).
    pub(crate) fn counts_as_failure(&self) -> bool {
        matches!(
            self,
            AbortReason::Expired { .. } | AbortReason::PersistFailed(_)
        )
    }
}

impl fmt::Display for AbortReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AbortReason::Expired { after } => {
                write!(
                    f,
                    "expired after {after:?} before every task acknowledged it"
                )
            }
            AbortReason::DeclinedSubsumed { task } => write!(
                f,
                "task {task} gave it up: a newer checkpoint's barrier overtook it during alignment"
            ),
            AbortReason::CoordinatorDeclined(reason) => write!(f, "{reason}"),
            AbortReason::PersistFailed(reason) => write!(f, "it could not be written: {reason}"),
            AbortReason::Subsumed { by } => write!(f, "subsumed by checkpoint {by}"),
            AbortReason::JobFailed => write!(f, "the job failed"),
            AbortReason::RegionFailed => write!(f, "a pipelined region of the job failed"),
        }
    }
}

/// What the job master must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Start checkpoint `id`: inject barriers at the sources (and trigger finished tasks).
    Trigger {
        /// The new checkpoint.
        id: CheckpointId,
        /// Its trigger time.
        timestamp_ms: u64,
    },
    /// Trigger checkpoint `id` directly at one task that finished its input (no barrier can reach
    /// it any more).
    TriggerFinishedTask {
        /// The checkpoint.
        id: CheckpointId,
        /// The finished task.
        task: TaskIndex,
    },
    /// Every task acknowledged `id`: write its metadata, then report `on_persisted`.
    Persist {
        /// The checkpoint.
        id: CheckpointId,
    },
    /// `id` is durable: tell every task (sinks commit now).
    NotifyComplete {
        /// The checkpoint.
        id: CheckpointId,
    },
    /// `id` failed: tell every task and drop its partial state.
    Abort {
        /// The checkpoint.
        id: CheckpointId,
        /// Why.
        reason: AbortReason,
    },
    /// Every task finished and the final checkpoint completed: the job may end.
    Finish,
}

#[derive(Clone, Debug)]
struct Pending {
    triggered_ms: u64,
    acked: BTreeSet<TaskIndex>,
    persisting: bool,
    is_final: bool,
}

/// The checkpoint coordinator's state machine. See the module documentation.
#[derive(Clone, Debug)]
pub(crate) struct CheckpointPlanner {
    settings: CheckpointSettings,
    tasks: usize,
    next_id: CheckpointId,
    pending: BTreeMap<CheckpointId, Pending>,
    /// Trigger time of the last checkpoint; the next is due one interval later.
    last_trigger_ms: Option<u64>,
    /// When the last checkpoint ended (completed or aborted).
    last_end_ms: Option<u64>,
    requested: bool,
    finished: BTreeSet<TaskIndex>,
    /// Tasks of failed regions not running again yet: no checkpoint starts until they are.
    down: BTreeSet<TaskIndex>,
    final_id: Option<CheckpointId>,
    start_ms: u64,
}

impl CheckpointPlanner {
    /// A planner for `tasks` tasks; ids continue after `last_completed` (`CheckpointId(0)` when
    /// starting fresh).
    pub(crate) fn new(
        settings: CheckpointSettings,
        tasks: usize,
        last_completed: CheckpointId,
    ) -> Self {
        CheckpointPlanner {
            settings,
            tasks,
            next_id: last_completed.next(),
            pending: BTreeMap::new(),
            last_trigger_ms: None,
            last_end_ms: None,
            requested: false,
            finished: BTreeSet::new(),
            down: BTreeSet::new(),
            final_id: None,
            start_ms: 0,
        }
    }

    /// The settings the planner runs with.
    pub(crate) fn settings(&self) -> &CheckpointSettings {
        &self.settings
    }

    /// Resets for a restarted job at `now_ms`: every pending checkpoint is aborted (their ids are
    /// never reused) and every task counts as running again.
    pub(crate) fn on_restart(&mut self, now_ms: u64) -> Vec<Decision> {
        let out = self.abort_all(AbortReason::JobFailed);
        self.finished.clear();
        self.down.clear();
        self.final_id = None;
        self.last_trigger_ms = None;
        self.start_ms = now_ms;
        out
    }

    /// The tasks `tasks` (one pipelined region) failed and will restart: every pending
    /// checkpoint is aborted (Flink aborts them on any failover, so that a checkpoint holding
    /// state of the failed attempt can never complete), the tasks count as running again (not
    /// finished), and no checkpoint starts until [`on_region_restored`](Self::on_region_restored).
    pub(crate) fn on_region_failed(&mut self, tasks: &[TaskIndex]) -> Vec<Decision> {
        let out = self.abort_all(AbortReason::RegionFailed);
        for t in tasks {
            self.finished.remove(t);
            self.down.insert(*t);
        }
        self.final_id = None;
        out
    }

    /// The tasks of a failed region run again, restored; checkpoints resume (the next one is
    /// due one interval after `now_ms`, as after a restart).
    pub(crate) fn on_region_restored(&mut self, tasks: &[TaskIndex], now_ms: u64) {
        for t in tasks {
            self.down.remove(t);
        }
        if self.down.is_empty() {
            self.last_trigger_ms = Some(now_ms);
        }
    }

    /// Whether checkpoint `id` is in progress.
    pub(crate) fn is_pending(&self, id: CheckpointId) -> bool {
        self.pending.contains_key(&id)
    }

    /// The ids of checkpoints in progress.
    #[cfg(test)]
    pub(crate) fn pending_ids(&self) -> Vec<CheckpointId> {
        self.pending.keys().copied().collect()
    }

    /// Asks for a checkpoint as soon as the rules allow (`JobHandle::trigger_checkpoint`).
    pub(crate) fn request_trigger(&mut self) {
        self.requested = true;
    }

    /// When the planner next wants `on_time` to be called, if ever.
    pub(crate) fn next_deadline_ms(&self) -> Option<u64> {
        let timeout = ms(self.settings.timeout);
        let expiry = self
            .pending
            .values()
            .filter(|p| !p.persisting)
            .map(|p| p.triggered_ms.saturating_add(timeout))
            .min();
        match (expiry, self.trigger_due_ms()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn trigger_due_ms(&self) -> Option<u64> {
        if self.pending.len() >= self.settings.max_concurrent
            || self.final_id.is_some()
            || !self.down.is_empty()
        {
            return None;
        }
        if self.finished.len() == self.tasks {
            return Some(0); // the final checkpoint is due now
        }
        let by_interval = if self.requested {
            0
        } else {
            self.last_trigger_ms.unwrap_or(self.start_ms) + ms(self.settings.interval)
        };
        let by_pause = self
            .last_end_ms
            .map_or(0, |e| e + ms(self.settings.min_pause));
        Some(by_interval.max(by_pause))
    }

    /// Time passed: abort timed-out checkpoints, trigger a due one.
    pub(crate) fn on_time(&mut self, now_ms: u64) -> Vec<Decision> {
        let mut out = Vec::new();
        let timeout = ms(self.settings.timeout);
        let expired: Vec<CheckpointId> = self
            .pending
            .iter()
            .filter(|(_, p)| !p.persisting && now_ms >= p.triggered_ms.saturating_add(timeout))
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            let after = self.settings.timeout;
            out.extend(self.abort(id, AbortReason::Expired { after }, now_ms));
        }
        if let Some(due) = self.trigger_due_ms()
            && now_ms >= due
        {
            out.extend(self.trigger(now_ms));
        }
        out
    }

    fn trigger(&mut self, now_ms: u64) -> Vec<Decision> {
        let id = self.next_id;
        self.next_id = id.next();
        self.requested = false;
        self.last_trigger_ms = Some(now_ms);
        let is_final = self.finished.len() == self.tasks;
        if is_final {
            self.final_id = Some(id);
        }
        self.pending.insert(
            id,
            Pending {
                triggered_ms: now_ms,
                acked: BTreeSet::new(),
                persisting: false,
                is_final,
            },
        );
        let mut out = vec![Decision::Trigger {
            id,
            timestamp_ms: now_ms,
        }];
        out.extend(
            self.finished
                .iter()
                .map(|&task| Decision::TriggerFinishedTask { id, task }),
        );
        out
    }

    /// Task `task` acknowledged checkpoint `id` (its state is held by the master meanwhile).
    /// Acknowledgements of unknown or aborted checkpoints are ignored.
    pub(crate) fn on_ack(&mut self, task: TaskIndex, id: CheckpointId) -> Vec<Decision> {
        let Some(p) = self.pending.get_mut(&id) else {
            return Vec::new();
        };
        if task >= self.tasks || p.persisting {
            return Vec::new();
        }
        p.acked.insert(task);
        if p.acked.len() == self.tasks {
            p.persisting = true;
            return vec![Decision::Persist { id }];
        }
        Vec::new()
    }

    /// Checkpoint `id` cannot complete (a task declined it, a coordinator could not take its
    /// part): it is aborted. Nothing happens if it is not pending.
    pub(crate) fn on_failed(
        &mut self,
        id: CheckpointId,
        reason: AbortReason,
        now_ms: u64,
    ) -> Vec<Decision> {
        self.abort(id, reason, now_ms)
    }

    /// Aborts pending checkpoint `id` (nothing if it is not pending); a final checkpoint will be
    /// triggered again.
    fn abort(&mut self, id: CheckpointId, reason: AbortReason, now_ms: u64) -> Vec<Decision> {
        if self.pending.remove(&id).is_none() {
            return Vec::new();
        }
        self.last_end_ms = Some(now_ms);
        if self.final_id == Some(id) {
            self.final_id = None;
        }
        vec![Decision::Abort { id, reason }]
    }

    /// The metadata of `id` was written: it is complete. Older pending checkpoints are subsumed.
    pub(crate) fn on_persisted(&mut self, id: CheckpointId, now_ms: u64) -> Vec<Decision> {
        let Some(p) = self.pending.remove(&id) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let older: Vec<CheckpointId> = self.pending.range(..id).map(|(i, _)| *i).collect();
        for old in older {
            self.pending.remove(&old);
            out.push(Decision::Abort {
                id: old,
                reason: AbortReason::Subsumed { by: id },
            });
        }
        self.last_end_ms = Some(now_ms);
        out.push(Decision::NotifyComplete { id });
        if p.is_final {
            out.push(Decision::Finish);
        }
        out
    }

    /// Writing the metadata of `id` failed: it is aborted.
    pub(crate) fn on_persist_failed(
        &mut self,
        id: CheckpointId,
        reason: &str,
        now_ms: u64,
    ) -> Vec<Decision> {
        self.abort(id, AbortReason::PersistFailed(reason.to_string()), now_ms)
    }

    /// Task `task` finished its input. It will not see barriers any more, so pending checkpoints
    /// it has not acknowledged are triggered at it directly; once every task finished, the final
    /// checkpoint is due.
    pub(crate) fn on_task_finished(&mut self, task: TaskIndex, now_ms: u64) -> Vec<Decision> {
        if task >= self.tasks || !self.finished.insert(task) {
            return Vec::new();
        }
        let mut out: Vec<Decision> = self
            .pending
            .iter()
            .filter(|(_, p)| !p.acked.contains(&task) && !p.persisting)
            .map(|(&id, _)| Decision::TriggerFinishedTask { id, task })
            .collect();
        out.extend(self.on_time(now_ms));
        out
    }

    fn abort_all(&mut self, reason: AbortReason) -> Vec<Decision> {
        std::mem::take(&mut self.pending)
            .into_keys()
            .map(|id| Decision::Abort {
                id,
                reason: reason.clone(),
            })
            .collect()
    }
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: u64) -> CheckpointId {
        CheckpointId(id)
    }

    fn settings() -> CheckpointSettings {
        CheckpointSettings::every(Duration::from_millis(100))
            .with_timeout(Duration::from_millis(1000))
            .with_retained(2)
    }

    fn complete(p: &mut CheckpointPlanner, id: u64, tasks: usize, now: u64) -> Vec<Decision> {
        for t in 0..tasks {
            p.on_ack(t, c(id));
        }
        p.on_persisted(c(id), now)
    }

    fn trigger(id: u64, timestamp_ms: u64) -> Decision {
        Decision::Trigger {
            id: c(id),
            timestamp_ms,
        }
    }

    #[test]
    fn worked_example() {
        let mut p = CheckpointPlanner::new(settings(), 2, c(0));
        assert!(p.on_time(50).is_empty());
        assert_eq!(p.on_time(100), vec![trigger(1, 100)]);
        assert!(p.on_ack(0, c(1)).is_empty());
        assert_eq!(p.on_ack(1, c(1)), vec![Decision::Persist { id: c(1) }]);
        assert_eq!(
            p.on_persisted(c(1), 120),
            vec![Decision::NotifyComplete { id: c(1) }]
        );
    }

    #[test]
    fn completes_only_when_every_task_acknowledged() {
        let mut p = CheckpointPlanner::new(settings(), 3, c(0));
        assert_eq!(p.on_time(100), vec![trigger(1, 100)]);
        assert!(p.on_ack(0, c(1)).is_empty());
        assert!(
            p.on_ack(0, c(1)).is_empty(),
            "a duplicate ack does not count twice"
        );
        assert!(p.on_ack(2, c(1)).is_empty());
        assert_eq!(p.on_ack(1, c(1)), vec![Decision::Persist { id: c(1) }]);
        assert_eq!(
            p.on_persisted(c(1), 150),
            vec![Decision::NotifyComplete { id: c(1) }]
        );
        assert!(p.pending_ids().is_empty());
    }

    #[test]
    fn at_most_one_in_progress_and_interval_from_last_trigger() {
        let mut p = CheckpointPlanner::new(settings(), 1, c(0));
        assert_eq!(p.on_time(100).len(), 1);
        assert!(p.on_time(250).is_empty(), "checkpoint 1 still pending");
        p.on_ack(0, c(1));
        p.on_persisted(c(1), 260);
        // due at 100 + 100 = 200 already passed: triggers immediately
        assert_eq!(p.on_time(260), vec![trigger(2, 260)]);
    }

    #[test]
    fn min_pause_counts_from_the_end_of_the_previous_checkpoint() {
        let s = settings().with_min_pause(Duration::from_millis(500));
        let mut p = CheckpointPlanner::new(s, 1, c(0));
        p.on_time(100);
        complete(&mut p, 1, 1, 300);
        assert!(p.on_time(799).is_empty());
        assert_eq!(p.next_deadline_ms(), Some(800));
        assert_eq!(p.on_time(800).len(), 1);
    }

    #[test]
    fn timeout_aborts_and_a_late_ack_is_ignored() {
        let mut p = CheckpointPlanner::new(settings(), 2, c(0));
        p.on_time(100);
        p.on_ack(0, c(1));
        assert_eq!(p.next_deadline_ms(), Some(1100));
        let d = p.on_time(1100);
        assert!(matches!(
            &d[0],
            Decision::Abort { id, reason: AbortReason::Expired { .. } } if *id == c(1)
        ));
        // the next one is triggered in the same step (interval long past)
        assert_eq!(d[1], trigger(2, 1100));
        assert!(
            p.on_ack(1, c(1)).is_empty(),
            "late ack of an aborted checkpoint"
        );
        assert!(p.on_persisted(c(1), 1200).is_empty());
    }

    #[test]
    fn a_persisting_checkpoint_does_not_expire() {
        let mut p = CheckpointPlanner::new(settings(), 1, c(0));
        p.on_time(100);
        p.on_ack(0, c(1));
        assert_eq!(
            p.next_deadline_ms(),
            None,
            "nothing to trigger, nothing to expire"
        );
        assert!(p.on_time(5000).is_empty());
    }

    #[test]
    fn decline_aborts_with_the_reason() {
        let mut p = CheckpointPlanner::new(settings(), 2, c(0));
        p.on_time(100);
        let reason = AbortReason::DeclinedSubsumed { task: 1 };
        let d = p.on_failed(c(1), reason.clone(), 120);
        assert_eq!(d, vec![Decision::Abort { id: c(1), reason }]);
        assert!(p.on_ack(0, c(1)).is_empty());
    }

    #[test]
    fn ids_never_repeat_across_aborts_and_restarts() {
        let mut p = CheckpointPlanner::new(settings(), 1, c(7));
        assert_eq!(p.on_time(100), vec![trigger(8, 100)]);
        let d = p.on_restart(150);
        assert!(
            matches!(d[0], Decision::Abort { id, reason: AbortReason::JobFailed } if id == c(8))
        );
        assert_eq!(p.on_time(250), vec![trigger(9, 250)]);
    }

    #[test]
    fn on_demand_trigger_does_not_wait_for_the_interval() {
        let mut p = CheckpointPlanner::new(settings(), 1, c(0));
        p.request_trigger();
        assert_eq!(p.on_time(5), vec![trigger(1, 5)]);
    }

    #[test]
    fn finished_tasks_are_triggered_directly_and_the_final_checkpoint_ends_the_job() {
        let mut p = CheckpointPlanner::new(settings(), 2, c(0));
        p.on_time(100);
        // task 1 finishes while checkpoint 1 is pending and unacknowledged by it
        assert_eq!(
            p.on_task_finished(1, 110),
            vec![Decision::TriggerFinishedTask { id: c(1), task: 1 }]
        );
        complete(&mut p, 1, 2, 120);
        // task 0 finishes: every task finished, the final checkpoint is due at once
        let d = p.on_task_finished(0, 130);
        assert_eq!(
            d,
            vec![
                trigger(2, 130),
                Decision::TriggerFinishedTask { id: c(2), task: 0 },
                Decision::TriggerFinishedTask { id: c(2), task: 1 },
            ]
        );
        p.on_ack(0, c(2));
        p.on_ack(1, c(2));
        assert_eq!(
            p.on_persisted(c(2), 140),
            vec![Decision::NotifyComplete { id: c(2) }, Decision::Finish]
        );
    }

    #[test]
    fn completing_a_newer_checkpoint_subsumes_older_pending_ones() {
        let s = settings().with_max_concurrent(2);
        let mut p = CheckpointPlanner::new(s, 1, c(0));
        p.on_time(100);
        p.on_time(200);
        p.on_ack(0, c(2));
        let d = p.on_persisted(c(2), 210);
        assert_eq!(
            d[0],
            Decision::Abort {
                id: c(1),
                reason: AbortReason::Subsumed { by: c(2) }
            }
        );
        assert_eq!(d[1], Decision::NotifyComplete { id: c(2) });
    }

    #[test]
    fn a_coordinator_decline_aborts_and_a_final_checkpoint_is_retried() {
        let mut p = CheckpointPlanner::new(settings(), 1, c(0));
        p.on_task_finished(0, 10);
        assert_eq!(
            p.pending_ids(),
            vec![c(1)],
            "the final checkpoint is due at once"
        );
        let reason = AbortReason::CoordinatorDeclined("coordinator of 'x' declined".into());
        let d = p.on_failed(c(1), reason, 20);
        assert!(matches!(&d[0], Decision::Abort { id, .. } if *id == c(1)));
        assert!(matches!(p.on_time(20)[0], Decision::Trigger { id, .. } if id == c(2)));
    }

    #[test]
    fn which_aborts_count_as_failures() {
        let counted = [
            AbortReason::Expired {
                after: Duration::from_secs(1),
            },
            AbortReason::PersistFailed("disk full".into()),
        ];
        let ignored = [
            AbortReason::DeclinedSubsumed { task: 0 },
            AbortReason::CoordinatorDeclined("x".into()),
            AbortReason::Subsumed { by: c(3) },
            AbortReason::JobFailed,
        ];
        assert!(counted.iter().all(AbortReason::counts_as_failure));
        assert!(!ignored.iter().any(AbortReason::counts_as_failure));
    }
}
