//! The job master's driver: the I/O at the edge of the pure [`JobMachine`].
//!
//! One async loop per job. It waits on its channels (task exits, task reports, coordinator
//! failures and events, coordinator snapshots, checkpoint writes, requests from the job handle,
//! the machine's next deadline, cancel), turns what arrives into a [`JobFact`], and carries out
//! the [`JobAction`]s the machine answers with: deploy, stop tasks, tell and reset coordinators,
//! trigger and persist checkpoints, record the live view. Every decision (restarts, attempt
//! numbers, stale reports, root causes, checkpoints, the end of the job) is the machine's; this
//! file keeps no sets of its own beyond the tasks' futures.

mod checkpoints;
mod wiring;

use crate::checkpoint::CompletedCheckpoint;
use crate::error::JobError;
use crate::job::attempt::Layout;
use crate::job::coordination::{Coordinators, reported_failure};
use crate::job::deploy::{Deployment, Scope};
use crate::job::handle::Requests;
use crate::job::machine::{
    DeployScope, JobAction, JobFact, JobMachine, JobSettings, RunSummary, TaskExit, TaskIndex,
};
use crate::job::prepare::prepare;
use crate::job::spec::{JobSpec, MasterInputs};
use crate::job::status::TaskState;
use checkpoints::{SnapshotDone, persist_fact, snapshot_fact};
use sluice_core::{AttemptNumber, CheckpointId, NodeId};
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use wiring::{RunningTasks, Wiring};

/// Runs the job to its end: success, stop, cancel, or a failure the restart strategy gives up on.
pub(crate) async fn run_job(spec: JobSpec, inputs: MasterInputs) -> Result<RunSummary, JobError> {
    let start = Instant::now();
    let prepared = prepare(&spec).await?;
    if let Some(c) = &prepared.initial {
        inputs.recorder.restored_from(c.id);
    }
    let regions = spec.plan.regions(&spec.graph);
    tracing::info!(tasks = spec.plan.task_count(), regions = regions.len(), failover = %spec.failover, "job planned");
    let (failure_tx, coordinator_failures) = mpsc::channel(16);
    let mut coordinators = Coordinators::create(&spec.graph, &spec.plan, failure_tx)?;
    let restored = prepared
        .initial
        .as_ref()
        .map(|r| (r.id, r.coordinators.clone()));
    coordinators
        .start(restored.as_ref().map(|(id, m)| (*id, &**m)))
        .await?;
    let settings = JobSettings {
        layout: Layout {
            tasks: spec.plan.task_count(),
            has_coordinators: !coordinators.is_empty(),
            regions,
            failover: spec.failover,
        },
        restart: spec.restart,
        root_cause_grace_ms: spec.root_cause_grace().map(|g| g.as_millis() as u64),
    };
    let (machine, first) = JobMachine::start(settings, prepared.checkpoints, prepared.initial);
    let wiring = Wiring::new(&spec, &coordinators);
    let mut driver = Driver {
        spec: &spec,
        start,
        inputs,
        cancel_seen: false,
        requests: Requests::default(),
        coordinators,
        coordinator_failures,
        wiring,
        running: RunningTasks::default(),
        snapshots: JoinSet::new(),
        persisting: JoinSet::new(),
    };
    let result = driver.run(machine, first.into()).await;
    driver.coordinators.close().await;
    result
}

/// The driver's state: the channels it waits on and what carries out actions.
struct Driver<'a> {
    spec: &'a JobSpec,
    start: Instant,
    inputs: MasterInputs,
    /// Cancel was observed (the token stays cancelled: it is not observed twice).
    cancel_seen: bool,
    requests: Requests,
    coordinators: Coordinators,
    coordinator_failures: mpsc::Receiver<sluice_coordinator::CoordinatorFailure>,
    wiring: Wiring,
    running: RunningTasks,
    snapshots: JoinSet<SnapshotDone>,
    persisting: JoinSet<(CheckpointId, Result<u64, String>)>,
}

impl Driver<'_> {
    /// Carries out actions and feeds facts to the machine until the job is over.
    async fn run(
        &mut self,
        mut machine: JobMachine,
        mut actions: VecDeque<JobAction>,
    ) -> Result<RunSummary, JobError> {
        loop {
            while let Some(action) = actions.pop_front() {
                if let JobAction::Finish(result) = action {
                    return result;
                }
                if let Some(fact) = self.carry_out(action).await {
                    actions.extend(self.hand(&mut machine, fact));
                }
            }
            let fact = match self.coordinators.lost_event() {
                Some(e) => JobFact::EventLost(e),
                None => self.next_fact(machine.next_deadline_ms()).await,
            };
            actions.extend(self.hand(&mut machine, fact));
        }
    }

    /// Hands `fact` to the machine now; logs where the job's lifecycle moves.
    fn hand(&self, machine: &mut JobMachine, fact: JobFact) -> Vec<JobAction> {
        let before = machine.phase();
        let actions = machine.on(fact, self.now_ms());
        if machine.phase() != before {
            tracing::debug!(from = ?before, to = ?machine.phase(), "job phase");
        }
        actions
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Waits for the next thing that happens and turns it into a fact.
    async fn next_fact(&mut self, deadline_ms: Option<u64>) -> JobFact {
        let deadline = deadline_ms.map(|ms| self.start + Duration::from_millis(ms));
        loop {
            tokio::select! {
                biased;
                _ = self.inputs.cancel.cancelled(), if !self.cancel_seen => {
                    self.cancel_seen = true;
                    return JobFact::Cancel;
                }
                Some(f) = self.coordinator_failures.recv() => return JobFact::CoordinatorFailed(reported_failure(&f)),
                Some(r) = self.wiring.reports.recv() => return JobFact::Report { attempt: r.attempt, report: r.report },
                Some(event) = self.wiring.to_coordinators.recv() => {
                    if let Err(e) = self.coordinators.event_from_operator(event).await {
                        return JobFact::CoordinatorFailed(e);
                    }
                }
                Some(joined) = self.running.set.join_next_with_id() => {
                    if let Some(fact) = self.running.ended(joined) {
                        self.record_end(&fact);
                        return fact;
                    }
                }
                Some(done) = self.snapshots.join_next() => return snapshot_fact(done),
                Some(done) = self.persisting.join_next() => return persist_fact(done),
                Some(r) = self.inputs.requests.recv() => {
                    let (id, kind) = self.requests.add(r);
                    return JobFact::Requested(id, kind);
                }
                _ = sleep_until(deadline) => return JobFact::Time,
            }
        }
    }

    fn record_end(&self, fact: &JobFact) {
        if let JobFact::TaskEnded { task, exit, .. } = fact {
            let state = match exit {
                TaskExit::Finished => TaskState::Finished,
                TaskExit::Cancelled => TaskState::Canceled,
                TaskExit::Failed(_) => TaskState::Failed,
            };
            self.inputs.recorder.task_state(*task, state);
        }
    }

    /// Carries out one action; returns the fact it produced at once, if any.
    async fn carry_out(&mut self, action: JobAction) -> Option<JobFact> {
        match action {
            JobAction::Deploy {
                scope,
                attempt,
                restore,
            } => Some(match self.deploy(scope, attempt, restore.as_ref()).await {
                Ok(()) => JobFact::Deployed(attempt),
                Err(e) => JobFact::DeployFailed(attempt, e),
            }),
            JobAction::SubtasksFailed { tasks, reason } => {
                tracing::info!(?tasks, error = %reason, "a task failed; stopping its pipelined region");
                let subtasks: Vec<(NodeId, usize)> = tasks
                    .iter()
                    .flat_map(|&t| self.spec.plan.task_subtasks(t))
                    .collect();
                let told = self.coordinators.subtasks_failed(&subtasks, &reason).await;
                told.err().map(JobFact::CoordinatorFailed)
            }
            JobAction::ResetCoordinators { reason, restore } => {
                let restore = restore.as_ref().map(|(id, m)| (*id, &**m));
                let reset = self.coordinators.global_failover(&reason, restore).await;
                Some(JobFact::CoordinatorsReset(reset))
            }
            JobAction::Checkpoint(action) => self.carry_out_checkpoint(action).await,
            other => {
                self.carry_out_now(other);
                None
            }
        }
    }

    /// Carries out an action that completes at once.
    fn carry_out_now(&mut self, action: JobAction) {
        let recorder = &self.inputs.recorder;
        match action {
            JobAction::StopTasks(tasks) => self.running.stop(&tasks),
            JobAction::EndAttempt => {
                // Dropping a join set aborts what it still runs; nothing of it is reported.
                self.snapshots = JoinSet::new();
                self.persisting = JoinSet::new();
            }
            JobAction::ReleaseHeldEvents {
                node,
                subtask,
                attempt,
                id,
            } => self.coordinators.barrier_taken(node, subtask, attempt, id),
            JobAction::Discard(id) => self.discard(id),
            JobAction::Written { id, bytes } => recorder.checkpoint_written(id, bytes),
            JobAction::Failure { error, restart } => {
                recorder.failure(&error);
                if let Some(r) = restart {
                    tracing::warn!(%error, region = ?r.region, after_ms = r.after_ms, "restarting");
                    recorder.restarting(r.restarts, r.region.is_none());
                }
            }
            // Carried out by `carry_out`, or by the loop (the end).
            JobAction::Deploy { .. }
            | JobAction::SubtasksFailed { .. }
            | JobAction::ResetCoordinators { .. }
            | JobAction::Checkpoint(_)
            | JobAction::Finish(_) => {}
        }
    }

    /// Deploys `scope` as `attempt` and runs its tasks.
    async fn deploy(
        &mut self,
        scope: DeployScope,
        attempt: AttemptNumber,
        restore: Option<&CompletedCheckpoint>,
    ) -> Result<(), JobError> {
        let spec = self.spec;
        let (d, tasks) = match scope {
            DeployScope::All => {
                let wiring = Wiring::new(spec, &self.coordinators);
                let d = spec.deploy(&wiring.inputs(spec), Scope::All, attempt, restore)?;
                self.coordinators
                    .attempt_deployed(attempt, &d.node_mailboxes)
                    .await?;
                self.wiring = wiring;
                (d, None)
            }
            DeployScope::Region(tasks) => {
                let set: BTreeSet<usize> = tasks.iter().copied().collect();
                let scope = Scope::Region {
                    tasks: &set,
                    metrics: &self.wiring.metrics,
                };
                let d = spec.deploy(&self.wiring.inputs(spec), scope, attempt, restore)?;
                let restored = restore.map_or(sluice_coordinator::NO_CHECKPOINT, |c| c.id);
                self.coordinators
                    .subtasks_restored(attempt, restored, &d.node_mailboxes)
                    .await?;
                tracing::info!(?tasks, attempt, checkpoint = %restored, "pipelined region restarted");
                (d, Some(tasks))
            }
        };
        self.run_deployed(d, attempt, tasks);
        Ok(())
    }

    /// Spawns what a deployment built; `region` is `None` for a whole attempt.
    fn run_deployed(
        &mut self,
        d: Deployment,
        attempt: AttemptNumber,
        region: Option<Vec<TaskIndex>>,
    ) {
        match &region {
            None => {
                self.wiring.metrics = Arc::new(d.metrics);
                self.inputs
                    .metrics
                    .next_attempt(self.wiring.metrics.clone());
                self.wiring.controls = d.controls.into_iter().map(|(_, tx)| tx).collect();
                self.wiring.source_tasks = d.source_tasks;
                self.running = RunningTasks::default();
            }
            Some(_) => {
                for (t, tx) in d.controls {
                    if let Some(c) = self.wiring.controls.get_mut(t) {
                        *c = tx;
                    }
                }
            }
        }
        for t in d.tasks {
            self.running.spawn(t, attempt);
        }
        match region {
            None => self.inputs.recorder.attempt_running(),
            Some(tasks) => self.inputs.recorder.tasks_state(&tasks, TaskState::Running),
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
