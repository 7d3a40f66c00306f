//! How the driver carries out the running attempt's checkpoint actions: coordinator snapshots,
//! barriers to the sources and to finished tasks, writes and discards, notifications, the
//! handle's requests, finishing and flushing; and the facts their results become.

use super::Driver;
use crate::checkpoint::CompletedCheckpoint;
use crate::error::JobError;
use crate::job::attempt::{Action, Fact};
use crate::job::coordination::reported_failure;
use crate::job::machine::{CoordinatorStates, JobFact};
use crate::task::control::TaskControl;
use sluice_core::CheckpointId;
use tokio::sync::mpsc;
use tokio::task::JoinError;

/// A coordinator snapshot's end: the checkpoint, and every coordinator's state or why not.
pub(super) type SnapshotDone = (CheckpointId, Result<CoordinatorStates, String>);

impl Driver<'_> {
    /// Carries out a checkpoint action of the running attempt.
    pub(super) async fn carry_out_checkpoint(&mut self, action: Action) -> Option<JobFact> {
        let recorder = &self.inputs.recorder;
        match action {
            Action::SnapshotCoordinators(id) => {
                recorder.checkpoint_triggered(id);
                let part = self.coordinators.start_checkpoint(id).await;
                self.snapshots.spawn(async move { (id, part.await) });
            }
            Action::TriggerSources(barrier) => {
                recorder.checkpoint_triggered(barrier.id);
                for &t in &self.wiring.source_tasks {
                    let _ = self.wiring.controls[t]
                        .send(TaskControl::TriggerCheckpoint(barrier))
                        .await;
                }
            }
            Action::TriggerTask(task, barrier) => {
                recorder.checkpoint_triggered(barrier.id);
                if let Some(c) = self.wiring.controls.get(task) {
                    let _ = c.send(TaskControl::TriggerCheckpoint(barrier)).await;
                }
            }
            Action::Persist(cp) => {
                recorder.checkpoint_acknowledged(cp.id);
                self.persist(cp)
            }
            Action::NotifyComplete(id) => {
                tracing::debug!(checkpoint = %id, "checkpoint completed");
                recorder.checkpoint_completed(id);
                if let Err(e) = self.coordinators.checkpoint_complete(id).await {
                    return Some(JobFact::CoordinatorFailed(e));
                }
                send_all(&self.wiring.controls, || TaskControl::NotifyComplete(id)).await;
            }
            Action::NotifyAborted(id, reason) => {
                tracing::info!(checkpoint = %id, %reason, "checkpoint aborted");
                recorder.checkpoint_failed(id, &reason.to_string());
                if let Err(e) = self.coordinators.checkpoint_aborted(id).await {
                    return Some(JobFact::CoordinatorFailed(e));
                }
                send_all(&self.wiring.controls, || TaskControl::NotifyAborted(id)).await;
                self.discard(id);
            }
            Action::RequestTriggered(r, id) => self.requests.triggered(r, id),
            Action::RequestDone(r, result) => self.requests.done(r, result),
            Action::FinishTasks => send_all(&self.wiring.controls, || TaskControl::Finish).await,
            Action::FlushCoordinators => return Some(self.flush_coordinators().await),
            // The job machine handles these.
            Action::ReleaseHeldEvents { .. } | Action::End(_) | Action::RestartRegion { .. } => {}
        }
        None
    }

    /// Writes checkpoint `cp` in the background; its result comes out of `persisting`.
    fn persist(&mut self, cp: CompletedCheckpoint) {
        let persistence = self
            .spec
            .checkpointing
            .as_ref()
            .map(|c| c.persistence.clone());
        let id = cp.id;
        self.persisting.spawn(async move {
            match persistence {
                Some(p) => (id, p.persist(cp).await),
                None => (id, Ok(0)),
            }
        });
    }

    /// Removes what was written of checkpoint `id`.
    pub(super) fn discard(&self, id: CheckpointId) {
        if let Some(c) = &self.spec.checkpointing {
            let p = c.persistence.clone();
            tokio::spawn(async move { p.discard(id).await });
        }
    }

    /// Every task ended: hands the coordinators what the tasks sent last, waits until they
    /// handled it all, and reports any failure they had meanwhile.
    async fn flush_coordinators(&mut self) -> JobFact {
        while let Ok(event) = self.wiring.to_coordinators.try_recv() {
            if let Err(e) = self.coordinators.event_from_operator(event).await {
                return JobFact::CoordinatorFailed(e);
            }
        }
        let flushed = tokio::select! {
            biased;
            Some(f) = self.coordinator_failures.recv() => Err(reported_failure(&f)),
            r = self.coordinators.flush() => r,
        };
        // A failure while handling an event is reported before the flush that follows it ends.
        match flushed.and_then(|()| match self.coordinator_failures.try_recv() {
            Ok(f) => Err(reported_failure(&f)),
            Err(_) => Ok(()),
        }) {
            Ok(()) => JobFact::Checkpoint(Fact::CoordinatorsFlushed),
            Err(e) => JobFact::CoordinatorFailed(e),
        }
    }
}

pub(super) fn snapshot_fact(done: Result<SnapshotDone, JoinError>) -> JobFact {
    match done {
        Ok((id, Ok(states))) => JobFact::Checkpoint(Fact::CoordinatorsSnapshotted { id, states }),
        Ok((id, Err(reason))) => {
            JobFact::Checkpoint(Fact::CoordinatorSnapshotFailed { id, reason })
        }
        Err(j) => JobFact::CoordinatorFailed(JobError::Internal(format!(
            "waiting for a coordinator snapshot panicked: {j}"
        ))),
    }
}

pub(super) fn persist_fact(
    done: Result<(CheckpointId, Result<u64, String>), JoinError>,
) -> JobFact {
    match done {
        Ok((id, Ok(bytes))) => JobFact::Persisted { id, bytes },
        Ok((id, Err(reason))) => JobFact::Checkpoint(Fact::PersistFailed { id, reason }),
        Err(j) => JobFact::CoordinatorFailed(JobError::Internal(format!(
            "writing a checkpoint panicked: {j}"
        ))),
    }
}

/// Sends one message to every task. A task that ended cannot receive; its exit is reported
/// through the join set.
async fn send_all(controls: &[mpsc::Sender<TaskControl>], msg: impl Fn() -> TaskControl) {
    for c in controls {
        let _ = c.send(msg()).await;
    }
}
