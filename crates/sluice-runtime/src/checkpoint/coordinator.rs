//! The checkpoint coordinator's decisions, as a pure state machine.
//!
//! [`CheckpointPlanner`] observes facts (time passed, a trigger was requested, a task acknowledged
//! or declined, the state of a completed checkpoint was persisted, tasks finished their input, the
//! job failed) and answers with [`Decision`]s for the job master to carry out (inject barriers,
//! persist, notify, abort, discard). It reads no clock and does no I/O: time is passed in as
//! milliseconds, so every rule is tested without threads.
//!
//! A worked example of one checkpoint with two tasks:
//!
//! ```
//! use sluice_runtime::checkpoint::{CheckpointPlanner, CheckpointSettings, Decision};
//! use std::time::Duration;
//!
//! let settings = CheckpointSettings::every(Duration::from_millis(100));
//! let mut p = CheckpointPlanner::new(settings, 2, 0);
//! assert!(p.on_time(50).is_empty()); // not yet due
//! let d = p.on_time(100);
//! assert_eq!(d, vec![Decision::Trigger { id: 1, timestamp_ms: 100 }]);
//! assert!(p.on_ack(0, 1).is_empty());
//! assert_eq!(p.on_ack(1, 1), vec![Decision::Persist { id: 1 }]);
//! assert_eq!(p.on_persisted(1, 120), vec![Decision::NotifyComplete { id: 1 }]);
//! ```

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// The index of a task (one subtask of one chain) as the planner knows it.
pub type TaskIndex = usize;

/// Checkpointing configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointSettings {
    /// Time between two triggers.
    pub interval: Duration,
    /// A checkpoint not complete after this long is aborted.
    pub timeout: Duration,
    /// Minimum time between the end of one checkpoint and the trigger of the next.
    pub min_pause: Duration,
    /// How many checkpoints may be in progress at once.
    pub max_concurrent: usize,
    /// How many completed checkpoints storage keeps.
    pub retained: usize,
}

impl CheckpointSettings {
    /// Checkpoints every `interval`, with Flink's defaults otherwise: a 10 minute timeout, no
    /// pause, one at a time, one retained.
    pub fn every(interval: Duration) -> Self {
        CheckpointSettings {
            interval,
            timeout: Duration::from_secs(600),
            min_pause: Duration::ZERO,
            max_concurrent: 1,
            retained: 1,
        }
    }

    /// Checks the values, naming the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        if self.interval.is_zero() {
            return Err("the checkpoint interval must be greater than zero".into());
        }
        if self.timeout.is_zero() {
            return Err("the checkpoint timeout must be greater than zero".into());
        }
        if self.max_concurrent == 0 {
            return Err(
                "at most 0 concurrent checkpoints would never checkpoint; use 1 or more".into(),
            );
        }
        if self.retained == 0 {
            return Err("at least one completed checkpoint must be retained".into());
        }
        Ok(())
    }
}

/// What the job master must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start checkpoint `id`: inject barriers at the sources (and trigger finished tasks).
    Trigger {
        /// The new checkpoint.
        id: u64,
        /// Its trigger time.
        timestamp_ms: u64,
    },
    /// Trigger checkpoint `id` directly at one task that finished its input (no barrier can reach
    /// it any more).
    TriggerFinishedTask {
        /// The checkpoint.
        id: u64,
        /// The finished task.
        task: TaskIndex,
    },
    /// Every task acknowledged `id`: write its metadata, then report `on_persisted`.
    Persist {
        /// The checkpoint.
        id: u64,
    },
    /// `id` is durable: tell every task (sinks commit now).
    NotifyComplete {
        /// The checkpoint.
        id: u64,
    },
    /// `id` failed: tell every task and drop its partial state.
    Abort {
        /// The checkpoint.
        id: u64,
        /// Why.
        reason: String,
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
pub struct CheckpointPlanner {
    settings: CheckpointSettings,
    tasks: usize,
    next_id: u64,
    pending: BTreeMap<u64, Pending>,
    /// Trigger time of the last checkpoint; the next is due one interval later.
    last_trigger_ms: Option<u64>,
    /// When the last checkpoint ended (completed or aborted).
    last_end_ms: Option<u64>,
    requested: bool,
    finished: BTreeSet<TaskIndex>,
    final_id: Option<u64>,
    completed: VecDeque<u64>,
    start_ms: u64,
}

impl CheckpointPlanner {
    /// A planner for `tasks` tasks, started at `now_ms`; ids continue after `last_completed`
    /// (0 when starting fresh).
    pub fn new(settings: CheckpointSettings, tasks: usize, last_completed: u64) -> Self {
        CheckpointPlanner {
            settings,
            tasks,
            next_id: last_completed + 1,
            pending: BTreeMap::new(),
            last_trigger_ms: None,
            last_end_ms: None,
            requested: false,
            finished: BTreeSet::new(),
            final_id: None,
            completed: VecDeque::new(),
            start_ms: 0,
        }
    }

    /// Resets for a restarted job at `now_ms`: every pending checkpoint is aborted (their ids are
    /// never reused) and every task counts as running again.
    pub fn on_restart(&mut self, now_ms: u64) -> Vec<Decision> {
        let out = self.abort_all("the job is restarting after a failure");
        self.finished.clear();
        self.final_id = None;
        self.last_trigger_ms = None;
        self.start_ms = now_ms;
        out
    }

    /// The id the next checkpoint will get.
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// The ids of checkpoints in progress.
    pub fn pending_ids(&self) -> Vec<u64> {
        self.pending.keys().copied().collect()
    }

    /// Asks for a checkpoint as soon as the rules allow (`JobHandle::trigger_checkpoint`).
    pub fn request_trigger(&mut self) {
        self.requested = true;
    }

    /// When the planner next wants `on_time` to be called, if ever.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        let mut next: Option<u64> = None;
        let mut consider = |t: u64| next = Some(next.map_or(t, |n: u64| n.min(t)));
        for p in self.pending.values() {
            consider(p.triggered_ms + ms(self.settings.timeout));
        }
        if let Some(t) = self.trigger_due_ms() {
            consider(t);
        }
        next
    }

    fn trigger_due_ms(&self) -> Option<u64> {
        if self.pending.len() >= self.settings.max_concurrent || self.final_id.is_some() {
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
    pub fn on_time(&mut self, now_ms: u64) -> Vec<Decision> {
        let mut out = Vec::new();
        let timeout = ms(self.settings.timeout);
        let expired: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| !p.persisting && now_ms >= p.triggered_ms + timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            self.pending.remove(&id);
            self.last_end_ms = Some(now_ms);
            out.push(Decision::Abort {
                id,
                reason: format!(
                    "checkpoint {id} expired after {:?} before every task acknowledged it",
                    self.settings.timeout
                ),
            });
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
        self.next_id += 1;
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
    pub fn on_ack(&mut self, task: TaskIndex, id: u64) -> Vec<Decision> {
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

    /// Task `task` declined checkpoint `id`: it is aborted.
    pub fn on_decline(
        &mut self,
        task: TaskIndex,
        id: u64,
        reason: &str,
        now_ms: u64,
    ) -> Vec<Decision> {
        self.abort(
            id,
            format!("task {task} declined checkpoint {id}: {reason}"),
            now_ms,
        )
    }

    /// Aborts pending checkpoint `id` (nothing if it is not pending); a final checkpoint will be
    /// triggered again.
    fn abort(&mut self, id: u64, reason: String, now_ms: u64) -> Vec<Decision> {
        if self.pending.remove(&id).is_none() {
            return Vec::new();
        }
        self.last_end_ms = Some(now_ms);
        if self.final_id == Some(id) {
            self.final_id = None;
        }
        vec![Decision::Abort { id, reason }]
    }

    /// A coordinator could not take its part of checkpoint `id`: it is aborted.
    pub fn on_coordinator_declined(&mut self, id: u64, reason: &str, now_ms: u64) -> Vec<Decision> {
        self.abort(id, reason.to_string(), now_ms)
    }

    /// The metadata of `id` was written: it is complete. Older pending checkpoints are subsumed.
    pub fn on_persisted(&mut self, id: u64, now_ms: u64) -> Vec<Decision> {
        let Some(p) = self.pending.remove(&id) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let older: Vec<u64> = self.pending.range(..id).map(|(i, _)| *i).collect();
        for old in older {
            self.pending.remove(&old);
            out.push(Decision::Abort {
                id: old,
                reason: format!("checkpoint {old} was subsumed by checkpoint {id}"),
            });
        }
        self.last_end_ms = Some(now_ms);
        self.completed.push_back(id);
        while self.completed.len() > self.settings.retained {
            self.completed.pop_front();
        }
        out.push(Decision::NotifyComplete { id });
        if p.is_final {
            out.push(Decision::Finish);
        }
        out
    }

    /// Writing the metadata of `id` failed: it is aborted.
    pub fn on_persist_failed(&mut self, id: u64, reason: &str, now_ms: u64) -> Vec<Decision> {
        self.abort(
            id,
            format!("checkpoint {id} could not be written: {reason}"),
            now_ms,
        )
    }

    /// Task `task` finished its input. It will not see barriers any more, so pending checkpoints
    /// it has not acknowledged are triggered at it directly; once every task finished, the final
    /// checkpoint is due.
    pub fn on_task_finished(&mut self, task: TaskIndex, now_ms: u64) -> Vec<Decision> {
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

    /// The job failed: every pending checkpoint is aborted.
    pub fn on_failure(&mut self) -> Vec<Decision> {
        self.abort_all("the job failed")
    }

    fn abort_all(&mut self, why: &str) -> Vec<Decision> {
        let ids: Vec<u64> = self.pending.keys().copied().collect();
        self.pending.clear();
        ids.into_iter()
            .map(|id| Decision::Abort {
                id,
                reason: format!("checkpoint {id} aborted: {why}"),
            })
            .collect()
    }

    /// The completed checkpoints still retained, oldest first.
    pub fn retained(&self) -> Vec<u64> {
        self.completed.iter().copied().collect()
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> CheckpointSettings {
        CheckpointSettings {
            interval: Duration::from_millis(100),
            timeout: Duration::from_millis(1000),
            min_pause: Duration::ZERO,
            max_concurrent: 1,
            retained: 2,
        }
    }

    fn complete(p: &mut CheckpointPlanner, id: u64, tasks: usize, now: u64) -> Vec<Decision> {
        for t in 0..tasks {
            p.on_ack(t, id);
        }
        p.on_persisted(id, now)
    }

    #[test]
    fn completes_only_when_every_task_acknowledged() {
        let mut p = CheckpointPlanner::new(settings(), 3, 0);
        assert_eq!(
            p.on_time(100),
            vec![Decision::Trigger {
                id: 1,
                timestamp_ms: 100
            }]
        );
        assert!(p.on_ack(0, 1).is_empty());
        assert!(
            p.on_ack(0, 1).is_empty(),
            "a duplicate ack does not count twice"
        );
        assert!(p.on_ack(2, 1).is_empty());
        assert_eq!(p.on_ack(1, 1), vec![Decision::Persist { id: 1 }]);
        assert_eq!(
            p.on_persisted(1, 150),
            vec![Decision::NotifyComplete { id: 1 }]
        );
        assert!(p.pending_ids().is_empty());
    }

    #[test]
    fn at_most_one_in_progress_and_interval_from_last_trigger() {
        let mut p = CheckpointPlanner::new(settings(), 1, 0);
        assert_eq!(p.on_time(100).len(), 1);
        assert!(p.on_time(250).is_empty(), "checkpoint 1 still pending");
        p.on_ack(0, 1);
        p.on_persisted(1, 260);
        // due at 100 + 100 = 200 already passed: triggers immediately
        assert_eq!(
            p.on_time(260),
            vec![Decision::Trigger {
                id: 2,
                timestamp_ms: 260
            }]
        );
    }

    #[test]
    fn min_pause_counts_from_the_end_of_the_previous_checkpoint() {
        let mut s = settings();
        s.min_pause = Duration::from_millis(500);
        let mut p = CheckpointPlanner::new(s, 1, 0);
        p.on_time(100);
        complete(&mut p, 1, 1, 300);
        assert!(p.on_time(799).is_empty());
        assert_eq!(p.next_deadline_ms(), Some(800));
        assert_eq!(p.on_time(800).len(), 1);
    }

    #[test]
    fn timeout_aborts_and_a_late_ack_is_ignored() {
        let mut p = CheckpointPlanner::new(settings(), 2, 0);
        p.on_time(100);
        p.on_ack(0, 1);
        let d = p.on_time(1100);
        assert!(matches!(&d[0], Decision::Abort { id: 1, reason } if reason.contains("expired")));
        // the next one is triggered in the same step (interval long past)
        assert_eq!(
            d[1],
            Decision::Trigger {
                id: 2,
                timestamp_ms: 1100
            }
        );
        assert!(
            p.on_ack(1, 1).is_empty(),
            "late ack of an aborted checkpoint"
        );
        assert!(p.on_persisted(1, 1200).is_empty());
    }

    #[test]
    fn decline_aborts_with_the_reason() {
        let mut p = CheckpointPlanner::new(settings(), 2, 0);
        p.on_time(100);
        let d = p.on_decline(1, 1, "snapshot failed: disk full", 120);
        assert!(matches!(&d[0], Decision::Abort { id: 1, reason } if reason.contains("disk full")));
        assert!(p.on_ack(0, 1).is_empty());
    }

    #[test]
    fn ids_never_repeat_across_aborts_and_restarts() {
        let mut p = CheckpointPlanner::new(settings(), 1, 7);
        assert_eq!(
            p.on_time(100),
            vec![Decision::Trigger {
                id: 8,
                timestamp_ms: 100
            }]
        );
        let d = p.on_restart(150);
        assert!(matches!(d[0], Decision::Abort { id: 8, .. }));
        assert_eq!(
            p.on_time(250),
            vec![Decision::Trigger {
                id: 9,
                timestamp_ms: 250
            }]
        );
    }

    #[test]
    fn retention_keeps_the_last_k() {
        let mut p = CheckpointPlanner::new(settings(), 1, 0);
        for (i, t) in [(1, 100), (2, 200), (3, 300)] {
            assert_eq!(
                p.on_time(t)[0],
                Decision::Trigger {
                    id: i,
                    timestamp_ms: t
                }
            );
            complete(&mut p, i, 1, t + 1);
        }
        assert_eq!(p.retained(), vec![2, 3]);
    }

    #[test]
    fn on_demand_trigger_does_not_wait_for_the_interval() {
        let mut p = CheckpointPlanner::new(settings(), 1, 0);
        p.request_trigger();
        assert_eq!(
            p.on_time(5),
            vec![Decision::Trigger {
                id: 1,
                timestamp_ms: 5
            }]
        );
    }

    #[test]
    fn finished_tasks_are_triggered_directly_and_the_final_checkpoint_ends_the_job() {
        let mut p = CheckpointPlanner::new(settings(), 2, 0);
        p.on_time(100);
        // task 1 finishes while checkpoint 1 is pending and unacknowledged by it
        assert_eq!(
            p.on_task_finished(1, 110),
            vec![Decision::TriggerFinishedTask { id: 1, task: 1 }]
        );
        complete(&mut p, 1, 2, 120);
        // task 0 finishes: every task finished, the final checkpoint is due at once
        let d = p.on_task_finished(0, 130);
        assert_eq!(
            d,
            vec![
                Decision::Trigger {
                    id: 2,
                    timestamp_ms: 130
                },
                Decision::TriggerFinishedTask { id: 2, task: 0 },
                Decision::TriggerFinishedTask { id: 2, task: 1 },
            ]
        );
        p.on_ack(0, 2);
        p.on_ack(1, 2);
        assert_eq!(
            p.on_persisted(2, 140),
            vec![Decision::NotifyComplete { id: 2 }, Decision::Finish]
        );
    }

    #[test]
    fn completing_a_newer_checkpoint_subsumes_older_pending_ones() {
        let mut s = settings();
        s.max_concurrent = 2;
        let mut p = CheckpointPlanner::new(s, 1, 0);
        p.on_time(100);
        p.on_time(200);
        p.on_ack(0, 2);
        let d = p.on_persisted(2, 210);
        assert!(matches!(&d[0], Decision::Abort { id: 1, reason } if reason.contains("subsumed")));
        assert_eq!(d[1], Decision::NotifyComplete { id: 2 });
    }

    #[test]
    fn a_coordinator_decline_aborts_and_a_final_checkpoint_is_retried() {
        let mut p = CheckpointPlanner::new(settings(), 1, 0);
        p.on_task_finished(0, 10);
        assert_eq!(
            p.pending_ids(),
            vec![1],
            "the final checkpoint is due at once"
        );
        let d = p.on_coordinator_declined(1, "coordinator of 'x' declined", 20);
        assert!(matches!(&d[0], Decision::Abort { id: 1, reason } if reason.contains("declined")));
        assert!(matches!(p.on_time(20)[0], Decision::Trigger { id: 2, .. }));
    }

    #[test]
    fn failure_aborts_everything_pending() {
        let mut p = CheckpointPlanner::new(settings(), 1, 0);
        p.on_time(100);
        assert!(matches!(p.on_failure()[0], Decision::Abort { id: 1, .. }));
        assert!(p.pending_ids().is_empty());
    }

    #[test]
    fn validation_names_the_bad_value() {
        let mut s = settings();
        s.interval = Duration::ZERO;
        assert!(s.validate().unwrap_err().contains("interval"));
        let mut s = settings();
        s.retained = 0;
        assert!(s.validate().unwrap_err().contains("retained"));
    }
}
