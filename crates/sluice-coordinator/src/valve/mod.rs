//! The event valve: a pure state machine aligning coordinator-to-subtask events with
//! checkpoints (Flink's gateway closing in `OperatorCoordinatorHolder` / `SubtaskGatewayImpl`).
//!
//! The valve makes decisions from facts the driver observes and reports; it has no threads,
//! clocks or I/O, so every rule is a unit test and the whole machine can be stress-tested over
//! random interleavings. The driver (the job master's coordinator holder) feeds it:
//!
//! | fact | method | decision returned |
//! | --- | --- | --- |
//! | an attempt became ready / failed | [`attempt_ready`](EventValve::attempt_ready) / [`attempt_failed`](EventValve::attempt_failed) | events dropped, checkpoints that failed |
//! | checkpoint `c` triggered (before the coordinator's snapshot) | [`trigger`](EventValve::trigger) | error on regressing ids |
//! | the coordinator sent an event | [`send`](EventValve::send) | deliver now, hold, or target not running |
//! | the coordinator completed its snapshot for `c` | [`coordinator_checkpoint_taken`](EventValve::coordinator_checkpoint_taken) | ready, or wait for acks, or failed |
//! | an event was acknowledged / lost | [`acked`](EventValve::acked) / [`delivery_failed`](EventValve::delivery_failed) | checkpoints now ready; failover and failed checkpoints |
//! | a subtask took barrier `c` | [`barrier_taken`](EventValve::barrier_taken) | held events to release, in order |
//! | `c` completed / aborted, global reset | [`checkpoint_complete`](EventValve::checkpoint_complete) / [`checkpoint_aborted`](EventValve::checkpoint_aborted) / [`reset`](EventValve::reset) | held events to release |
//!
//! The rules:
//! 1. Checkpoint ids must grow: triggering an id at or below the latest one is rejected.
//! 2. Between trigger and the coordinator's snapshot, events flow: they belong to the checkpoint.
//! 3. When the snapshot completes, every attempt's gateway closes for that checkpoint: later
//!    events to it are held, in order.
//! 4. The coordinator's part of the checkpoint is ready only when every event sent before the
//!    snapshot (in flight or held) has been acknowledged. If one of them is lost, the
//!    checkpoint fails; if its target is still running, that target must be failed over.
//! 5. A gateway reopens for checkpoint `c` when its attempt reports it took barrier `c`, or when
//!    `c` completes or aborts; a global reset reopens everything. Reopening releases the events
//!    held for `c` in order. With several checkpoints closed at once, an event is held until
//!    every one of them has reopened: reopening a later checkpoint first merges its events into
//!    the earlier one's queue.
//! 6. An attempt that becomes ready while checkpoints are pending is closed for them too (Flink
//!    leaves it open; holding is the safe side: its events cannot overtake a barrier).
//! 7. Completing `c` also reopens any older checkpoint still pending (it is subsumed).

#[cfg(test)]
mod tests;

use crate::gateway::SubtaskAttempt;
use sluice_core::CheckpointId;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

/// Identifies one event sent through the valve, in send order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId(pub u64);

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "event {}", self.0)
    }
}

/// What to do with an event the coordinator sent.
#[derive(Debug, PartialEq, Eq)]
pub enum SendOutcome<E> {
    /// The gateway is open: hand the event to the transport now.
    Deliver {
        /// The event's id (report its acknowledgement with it).
        id: EventId,
        /// The event.
        event: E,
    },
    /// The gateway is closed: the valve holds the event until it reopens.
    Held {
        /// The event's id.
        id: EventId,
    },
    /// The target attempt is not ready: the send fails.
    NotRunning {
        /// The event, given back.
        event: E,
    },
}

/// A held event to hand to the transport now.
#[derive(Debug, PartialEq, Eq)]
pub struct Release<E> {
    /// Where it goes.
    pub target: SubtaskAttempt,
    /// Its id.
    pub id: EventId,
    /// The event.
    pub event: E,
}

/// Where the coordinator's part of a checkpoint stands after its snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Every event sent before the snapshot was acknowledged: the checkpoint may proceed
    /// (barriers may be injected).
    Ready,
    /// Waiting for this many acknowledgements.
    AwaitingAcks {
        /// Events sent before the snapshot and not acknowledged yet.
        events: usize,
    },
    /// An event sent before the snapshot was lost: decline the checkpoint.
    Failed,
}

/// What a lost event means.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DeliveryFailure {
    /// The target, if it is still running: it must be failed over to stay consistent.
    pub failover: Option<SubtaskAttempt>,
    /// Checkpoints that can no longer complete and must be declined / aborted.
    pub failed_checkpoints: Vec<CheckpointId>,
}

/// What an attempt failure means for the events held for it.
#[derive(Debug, PartialEq, Eq)]
pub struct AttemptFailed<E> {
    /// Events held for the attempt: they fail (the attempt is not running).
    pub dropped: Vec<(EventId, E)>,
    /// Checkpoints that counted one of those events and can no longer complete.
    pub failed_checkpoints: Vec<CheckpointId>,
}

/// A fact the valve refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ValveError {
    /// A checkpoint id at or below the latest attempted one.
    #[error("regressing checkpoint ids: latest attempted is {latest}, requested {requested}")]
    Regressing {
        /// The latest attempted checkpoint.
        latest: CheckpointId,
        /// The requested one.
        requested: CheckpointId,
    },
    /// The checkpoint is not waiting for the coordinator's snapshot (aborted meanwhile, or
    /// never triggered).
    #[error("checkpoint {0} is not pending a coordinator snapshot")]
    NotPending(CheckpointId),
    /// A checkpoint id above the latest attempted one: ignored.
    #[error("unknown checkpoint {requested}: the latest attempted is {latest}")]
    UnknownCheckpoint {
        /// The latest attempted checkpoint.
        latest: CheckpointId,
        /// The reported one.
        requested: CheckpointId,
    },
}

#[derive(Debug)]
enum Phase {
    /// Triggered; the coordinator's snapshot is not done. `lost`: an event was lost meanwhile.
    Marked { lost: bool },
    /// The snapshot is done; waiting for acknowledgements of the events sent before it.
    Closed {
        unacked: BTreeSet<EventId>,
        failed: bool,
    },
}

#[derive(Debug)]
struct Target<E> {
    /// Checkpoints this gateway is marked for and has not reopened for.
    marked: BTreeSet<CheckpointId>,
    /// Held events per closed checkpoint; new events go to the last queue.
    held: BTreeMap<CheckpointId, VecDeque<(EventId, E)>>,
}

/// The checkpoint alignment of coordinator events, for all attempts of one coordinator's
/// subtasks. `E` is the event payload (the valve stores held events).
///
/// ```
/// use sluice_coordinator::valve::{EventValve, Readiness, SendOutcome};
/// use sluice_coordinator::SubtaskAttempt;
/// use sluice_core::CheckpointId;
///
/// let s0 = SubtaskAttempt::new(0, 0);
/// let mut valve = EventValve::new();
/// valve.attempt_ready(s0);
/// valve.trigger(CheckpointId(1)).unwrap();
///
/// // Before the coordinator's snapshot: delivered, and counted by checkpoint 1.
/// let SendOutcome::Deliver { id: before, .. } = valve.send(s0, "before") else { panic!() };
/// assert_eq!(valve.coordinator_checkpoint_taken(CheckpointId(1)), Ok(Readiness::AwaitingAcks { events: 1 }));
///
/// // After the snapshot: held until subtask 0 has taken barrier 1.
/// assert!(matches!(valve.send(s0, "after"), SendOutcome::Held { .. }));
/// assert_eq!(valve.acked(before), vec![CheckpointId(1)]); // checkpoint 1 may proceed
/// let released = valve.barrier_taken(s0, CheckpointId(1)).unwrap();
/// assert_eq!(released.len(), 1);
/// assert_eq!(released[0].event, "after");
/// ```
#[derive(Debug)]
pub struct EventValve<E> {
    targets: BTreeMap<SubtaskAttempt, Target<E>>,
    checkpoints: BTreeMap<CheckpointId, Phase>,
    latest_attempted: CheckpointId,
    /// Events not acknowledged yet (held or in flight), with their target, in id order.
    unacked: VecDeque<(EventId, SubtaskAttempt)>,
    next_event: u64,
}

impl<E> Default for EventValve<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventValve<E> {
    /// A valve with no attempts and no checkpoints.
    pub fn new() -> Self {
        EventValve {
            targets: BTreeMap::new(),
            checkpoints: BTreeMap::new(),
            latest_attempted: CheckpointId(0),
            unacked: VecDeque::new(),
            next_event: 0,
        }
    }

    // ----- attempts ----------------------------------------------------------------------------

    /// `target` is running and may receive events. It is closed for every pending checkpoint
    /// (rule 6). Registering a ready attempt again changes nothing.
    pub fn attempt_ready(&mut self, target: SubtaskAttempt) {
        if self.targets.contains_key(&target) {
            return;
        }
        let mut t = Target {
            marked: BTreeSet::new(),
            held: BTreeMap::new(),
        };
        for (&c, phase) in &self.checkpoints {
            t.marked.insert(c);
            if matches!(phase, Phase::Closed { .. }) {
                t.held.insert(c, VecDeque::new());
            }
        }
        self.targets.insert(target, t);
    }

    /// `target` failed or was cancelled. Its held events fail; checkpoints that counted them
    /// fail too. Events already in flight to it stay unacknowledged until the transport
    /// reports them ([`acked`](Self::acked) or [`delivery_failed`](Self::delivery_failed)).
    pub fn attempt_failed(&mut self, target: SubtaskAttempt) -> AttemptFailed<E> {
        let Some(t) = self.targets.remove(&target) else {
            return AttemptFailed {
                dropped: Vec::new(),
                failed_checkpoints: Vec::new(),
            };
        };
        let dropped: Vec<(EventId, E)> = t.held.into_values().flatten().collect();
        let mut failed = BTreeSet::new();
        for (id, _) in &dropped {
            self.take_unacked(*id);
            failed.extend(self.fail_event_in_checkpoints(*id));
        }
        AttemptFailed {
            dropped,
            failed_checkpoints: failed.into_iter().collect(),
        }
    }

    /// Whether `target` is registered as ready.
    pub fn is_ready(&self, target: SubtaskAttempt) -> bool {
        self.targets.contains_key(&target)
    }

    // ----- checkpoints -------------------------------------------------------------------------

    /// Checkpoint `checkpoint` is triggered: mark every gateway for it, before the coordinator
    /// takes its snapshot. Rejects ids at or below the latest one (rule 1).
    pub fn trigger(&mut self, checkpoint: CheckpointId) -> Result<(), ValveError> {
        if checkpoint <= self.latest_attempted {
            return Err(ValveError::Regressing {
                latest: self.latest_attempted,
                requested: checkpoint,
            });
        }
        self.latest_attempted = checkpoint;
        self.checkpoints
            .insert(checkpoint, Phase::Marked { lost: false });
        for t in self.targets.values_mut() {
            t.marked.insert(checkpoint);
        }
        Ok(())
    }

    /// The coordinator completed its snapshot for `checkpoint`: close every gateway marked for
    /// it (rule 3) and start waiting for the events sent before (rule 4).
    pub fn coordinator_checkpoint_taken(
        &mut self,
        checkpoint: CheckpointId,
    ) -> Result<Readiness, ValveError> {
        let lost = match self.checkpoints.get(&checkpoint) {
            Some(Phase::Marked { lost }) => *lost,
            _ => return Err(ValveError::NotPending(checkpoint)),
        };
        for t in self.targets.values_mut() {
            if t.marked.contains(&checkpoint) {
                t.held.entry(checkpoint).or_default();
            }
        }
        let unacked: BTreeSet<EventId> = self.unacked.iter().map(|(id, _)| *id).collect();
        let readiness = if lost {
            Readiness::Failed
        } else if unacked.is_empty() {
            Readiness::Ready
        } else {
            Readiness::AwaitingAcks {
                events: unacked.len(),
            }
        };
        self.checkpoints.insert(
            checkpoint,
            Phase::Closed {
                unacked,
                failed: lost,
            },
        );
        Ok(readiness)
    }

    /// Whether `checkpoint`'s coordinator part is ready (snapshot taken, all earlier events
    /// acknowledged).
    pub fn is_checkpoint_ready(&self, checkpoint: CheckpointId) -> bool {
        matches!(
            self.checkpoints.get(&checkpoint),
            Some(Phase::Closed { unacked, failed: false }) if unacked.is_empty()
        )
    }

    /// Where `checkpoint`'s coordinator part stands once its snapshot was taken: ready, waiting
    /// for acknowledgements, or failed (an event sent before the snapshot was lost). `None`
    /// before the snapshot and for checkpoints that are not pending.
    pub fn readiness(&self, checkpoint: CheckpointId) -> Option<Readiness> {
        match self.checkpoints.get(&checkpoint)? {
            Phase::Marked { .. } => None,
            Phase::Closed { failed: true, .. } => Some(Readiness::Failed),
            Phase::Closed { unacked, .. } if unacked.is_empty() => Some(Readiness::Ready),
            Phase::Closed { unacked, .. } => Some(Readiness::AwaitingAcks {
                events: unacked.len(),
            }),
        }
    }

    /// The checkpoints triggered and not yet completed, aborted or reset.
    pub fn pending_checkpoints(&self) -> Vec<CheckpointId> {
        self.checkpoints.keys().copied().collect()
    }

    /// The latest checkpoint id triggered.
    pub fn latest_attempted(&self) -> CheckpointId {
        self.latest_attempted
    }

    /// `target` took barrier `checkpoint`: reopen its gateway for it and release what it held
    /// (rule 5). Facts about attempts that are not ready, or checkpoints the gateway is not
    /// marked for (already reopened, aborted), change nothing.
    pub fn barrier_taken(
        &mut self,
        target: SubtaskAttempt,
        checkpoint: CheckpointId,
    ) -> Result<Vec<Release<E>>, ValveError> {
        self.check_known(checkpoint)?;
        let mut out = Vec::new();
        if let Some(t) = self.targets.get_mut(&target) {
            open(target, t, checkpoint, &mut out);
        }
        Ok(out)
    }

    /// `checkpoint` completed: every gateway reopens for it and for any older pending
    /// checkpoint (rule 7).
    pub fn checkpoint_complete(
        &mut self,
        checkpoint: CheckpointId,
    ) -> Result<Vec<Release<E>>, ValveError> {
        self.check_known(checkpoint)?;
        let done: Vec<CheckpointId> = self
            .checkpoints
            .range(..=checkpoint)
            .map(|(c, _)| *c)
            .collect();
        let mut out = Vec::new();
        for c in done {
            self.checkpoints.remove(&c);
            self.open_all(c, &mut out);
        }
        Ok(out)
    }

    /// `checkpoint` was aborted (or its coordinator part declined): every gateway reopens for
    /// it.
    pub fn checkpoint_aborted(
        &mut self,
        checkpoint: CheckpointId,
    ) -> Result<Vec<Release<E>>, ValveError> {
        self.check_known(checkpoint)?;
        self.checkpoints.remove(&checkpoint);
        let mut out = Vec::new();
        self.open_all(checkpoint, &mut out);
        Ok(out)
    }

    /// Global reset (`reset_to_checkpoint`): forget every pending checkpoint and release every
    /// held event, in order per attempt.
    pub fn reset(&mut self) -> Vec<Release<E>> {
        self.checkpoints.clear();
        let mut out = Vec::new();
        for (&target, t) in self.targets.iter_mut() {
            t.marked.clear();
            for (_, queue) in std::mem::take(&mut t.held) {
                out.extend(
                    queue
                        .into_iter()
                        .map(|(id, event)| Release { target, id, event }),
                );
            }
        }
        out
    }

    fn check_known(&self, checkpoint: CheckpointId) -> Result<(), ValveError> {
        if checkpoint > self.latest_attempted {
            Err(ValveError::UnknownCheckpoint {
                latest: self.latest_attempted,
                requested: checkpoint,
            })
        } else {
            Ok(())
        }
    }

    fn open_all(&mut self, checkpoint: CheckpointId, out: &mut Vec<Release<E>>) {
        for (&target, t) in self.targets.iter_mut() {
            open(target, t, checkpoint, out);
        }
    }

    // ----- events ------------------------------------------------------------------------------

    /// The coordinator sends `event` to `target`: deliver it now, or hold it while the gateway
    /// is closed, or refuse it when the attempt is not ready.
    pub fn send(&mut self, target: SubtaskAttempt, event: E) -> SendOutcome<E> {
        let Some(t) = self.targets.get_mut(&target) else {
            return SendOutcome::NotRunning { event };
        };
        let id = EventId(self.next_event);
        self.next_event += 1;
        self.unacked.push_back((id, target));
        match t.held.values_mut().next_back() {
            Some(queue) => {
                queue.push_back((id, event));
                SendOutcome::Held { id }
            }
            None => SendOutcome::Deliver { id, event },
        }
    }

    /// The target took event `id`. Returns the checkpoints whose coordinator part became ready.
    pub fn acked(&mut self, id: EventId) -> Vec<CheckpointId> {
        if self.take_unacked(id).is_none() {
            return Vec::new();
        }
        let mut ready = Vec::new();
        for (&c, phase) in self.checkpoints.iter_mut() {
            if let Phase::Closed { unacked, failed } = phase
                && unacked.remove(&id)
                && unacked.is_empty()
                && !*failed
            {
                ready.push(c);
            }
        }
        ready
    }

    /// Event `id` was not received by its target (rule 4). If the target is still ready it
    /// must be failed over; checkpoints that counted the event fail, and so do checkpoints
    /// whose snapshot is still to come (the coordinator believes the event was delivered).
    pub fn delivery_failed(&mut self, id: EventId) -> DeliveryFailure {
        let Some(target) = self.take_unacked(id) else {
            return DeliveryFailure::default();
        };
        let mut failed = self.fail_event_in_checkpoints(id);
        for (&c, phase) in self.checkpoints.iter_mut() {
            if let Phase::Marked { lost } = phase {
                *lost = true;
                failed.push(c);
            }
        }
        failed.sort();
        failed.dedup();
        DeliveryFailure {
            failover: self.targets.contains_key(&target).then_some(target),
            failed_checkpoints: failed,
        }
    }

    /// Marks every closed checkpoint counting `id` as failed; returns those that just failed.
    /// Forgets an unacknowledged event, returning its target. Ids are handed out in order and
    /// usually acknowledged in order, so this is a pop from the front; the queue keeps its
    /// capacity, so the common send-and-acknowledge allocates nothing.
    fn take_unacked(&mut self, id: EventId) -> Option<SubtaskAttempt> {
        if self.unacked.front().is_some_and(|(first, _)| *first == id) {
            return self.unacked.pop_front().map(|(_, target)| target);
        }
        let at = self.unacked.binary_search_by_key(&id, |(e, _)| *e).ok()?;
        self.unacked.remove(at).map(|(_, target)| target)
    }

    fn fail_event_in_checkpoints(&mut self, id: EventId) -> Vec<CheckpointId> {
        let mut failed = Vec::new();
        for (&c, phase) in self.checkpoints.iter_mut() {
            if let Phase::Closed { unacked, failed: f } = phase
                && unacked.remove(&id)
                && !*f
            {
                *f = true;
                failed.push(c);
            }
        }
        failed
    }

    // ----- queries -----------------------------------------------------------------------------

    /// Whether `target`'s gateway is closed (it holds new events).
    pub fn is_closed(&self, target: SubtaskAttempt) -> bool {
        self.targets
            .get(&target)
            .is_some_and(|t| !t.held.is_empty())
    }

    /// How many events are held for `target`.
    pub fn held_events(&self, target: SubtaskAttempt) -> usize {
        self.targets
            .get(&target)
            .map_or(0, |t| t.held.values().map(VecDeque::len).sum())
    }

    /// How many events are not acknowledged yet (held or in flight).
    pub fn unacked_events(&self) -> usize {
        self.unacked.len()
    }
}

/// Reopens `t` for `checkpoint`: releases its held events if it is the oldest closed
/// checkpoint, otherwise merges them into the previous one's queue (they must still wait for it).
fn open<E>(
    target: SubtaskAttempt,
    t: &mut Target<E>,
    checkpoint: CheckpointId,
    out: &mut Vec<Release<E>>,
) {
    if !t.marked.remove(&checkpoint) {
        return;
    }
    let Some(queue) = t.held.remove(&checkpoint) else {
        return;
    };
    match t.held.range_mut(..checkpoint).next_back() {
        Some((_, earlier)) => earlier.extend(queue),
        None => out.extend(
            queue
                .into_iter()
                .map(|(id, event)| Release { target, id, event }),
        ),
    }
}
