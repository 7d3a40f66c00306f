//! The delivery protocol of one coordinator's events to its subtasks (the gateway side of
//! Flink's `OperatorCoordinatorHolder`): [`EventDelivery`] drives the pure
//! [`EventValve`] and hands what it lets through to each attempt's
//! [`Mailbox`].
//!
//! - The coordinator sends through gateways whose transport is the [`EventDelivery`]: an open
//!   valve puts the event into the target's mailbox at once (the acknowledgement is the mailbox
//!   taking it), a closed one holds it and owes the acknowledgement.
//! - The driver (the job master's holder) reports the checkpoint facts: [`trigger`], the
//!   coordinator's snapshot ([`coordinator_checkpoint_done`], called on the thread completing the
//!   snapshot, so no later event slips into the checkpoint), a subtask taking a barrier
//!   ([`barrier_taken`]), completion, abort and reset; reopening releases held events in order.
//!   [`ready`] resolves once every event sent before the snapshot reached its mailbox: only then
//!   may barriers be injected.
//! - Failover: [`attempt_failed`] drops the events held for an attempt (their acknowledgements
//!   fail) and forgets its mailbox; a new attempt registered with [`attempt_ready`] gets only
//!   events sent to it. An event lost while its target still ran is reported by [`take_lost`]:
//!   that target must be failed over.
//!
//! Two locks: `state` guards the valve, the mailboxes and the acknowledgements owed; `order` is
//! held across a valve decision and the mailbox hand-off, so events released by the driver and
//! events sent by the coordinator reach a mailbox in valve order. A hand-off may wait for room in
//! a full mailbox (where waiting is allowed), so it waits holding `order` but never `state`.
//! The locks come from the crate's `sync` shim (loom's under `--cfg loom`); the loom models in
//! `tests/loom_delivery.rs` check the protocol over every interleaving up to a preemption bound.
//!
//! [`trigger`]: EventDelivery::trigger
//! [`coordinator_checkpoint_done`]: EventDelivery::coordinator_checkpoint_done
//! [`barrier_taken`]: EventDelivery::barrier_taken
//! [`ready`]: EventDelivery::ready
//! [`attempt_failed`]: EventDelivery::attempt_failed
//! [`attempt_ready`]: EventDelivery::attempt_ready
//! [`take_lost`]: EventDelivery::take_lost

use crate::error::SendError;
use crate::gateway::{AckFuture, AckSender, EventTransport, SubtaskAttempt};
use crate::sync::{Mutex, MutexGuard, Notify, lock};
use crate::valve::{EventId, EventValve, Readiness, Release, SendOutcome, ValveError};
use sluice_core::{CheckpointId, OperatorEvent};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

/// Why a mailbox did not take an event at once.
#[derive(Debug)]
pub enum TryPutError<P> {
    /// The mailbox is full: the message to wait with.
    Full(P),
    /// The task reading the mailbox is gone.
    Gone,
}

/// Why a mailbox did not take an event after waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutError {
    /// The mailbox is full and waiting is not allowed where the caller runs.
    Full,
    /// The task reading the mailbox is gone.
    Gone,
}

/// One subtask attempt's task mailbox: where [`EventDelivery`] puts the events it lets through.
pub trait Mailbox: Clone + Send + Sync + 'static {
    /// A message the mailbox had no room for, kept to wait with.
    type Pending: Send;

    /// Puts `event` into the mailbox without waiting.
    fn try_put(&self, event: OperatorEvent) -> Result<(), TryPutError<Self::Pending>>;

    /// Puts a message [`try_put`](Self::try_put) had no room for, waiting for room where the
    /// caller may wait. Must not block a tokio worker that cannot hand its tasks away.
    fn put(&self, pending: Self::Pending) -> Result<(), PutError>;
}

/// A [`Mailbox`] over a bounded tokio channel of the task's messages `T`.
///
/// A full channel is waited on from a plain thread (the coordinator's), or from a worker of a
/// multi-threaded runtime after it handed its other tasks away (`block_in_place`); on a
/// current-thread runtime the put fails with [`PutError::Full`] instead of blocking.
pub struct ChannelMailbox<T> {
    tx: mpsc::Sender<T>,
    wrap: Arc<dyn Fn(OperatorEvent) -> T + Send + Sync>,
}

impl<T> ChannelMailbox<T> {
    /// The mailbox behind `tx`; `wrap` turns an event into the task's message.
    pub fn new(
        tx: mpsc::Sender<T>,
        wrap: impl Fn(OperatorEvent) -> T + Send + Sync + 'static,
    ) -> Self {
        ChannelMailbox {
            tx,
            wrap: Arc::new(wrap),
        }
    }
}

impl<T> Clone for ChannelMailbox<T> {
    fn clone(&self) -> Self {
        ChannelMailbox {
            tx: self.tx.clone(),
            wrap: self.wrap.clone(),
        }
    }
}

impl<T> fmt::Debug for ChannelMailbox<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelMailbox")
            .field("capacity", &self.tx.max_capacity())
            .finish()
    }
}

impl<T: Send + 'static> Mailbox for ChannelMailbox<T> {
    type Pending = T;

    fn try_put(&self, event: OperatorEvent) -> Result<(), TryPutError<T>> {
        self.tx.try_send((self.wrap)(event)).map_err(|e| match e {
            TrySendError::Full(msg) => TryPutError::Full(msg),
            TrySendError::Closed(_) => TryPutError::Gone,
        })
    }

    fn put(&self, msg: T) -> Result<(), PutError> {
        let msg = match self.tx.try_send(msg) {
            Ok(()) => return Ok(()),
            Err(TrySendError::Closed(_)) => return Err(PutError::Gone),
            Err(TrySendError::Full(msg)) => msg,
        };
        match tokio::runtime::Handle::try_current() {
            Err(_) => self.tx.blocking_send(msg).map_err(|_| PutError::Gone),
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| self.tx.blocking_send(msg))
                    .map_err(|_| PutError::Gone)
            }
            Ok(_) => Err(PutError::Full),
        }
    }
}

/// Why a coordinator's part of a checkpoint cannot become ready.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    /// The valve refused to close for a checkpoint.
    #[error("{0}")]
    Refused(ValveError),
    /// An event sent before the snapshot was lost.
    #[error("an event it sent before its snapshot of checkpoint {0} was lost")]
    EventLost(CheckpointId),
    /// The checkpoint was completed, aborted or reset meanwhile (or never triggered).
    #[error("checkpoint {0} is no longer pending")]
    NotPending(CheckpointId),
}

/// What the two locks guard.
struct State<M> {
    valve: EventValve<OperatorEvent>,
    /// Acknowledgements owed for events the valve holds.
    waiting: HashMap<EventId, AckSender>,
    /// The mailbox of each running subtask attempt.
    mailboxes: BTreeMap<SubtaskAttempt, M>,
    /// Attempts whose events were lost while they ran: they must be failed over.
    lost: Vec<SubtaskAttempt>,
    /// Why the valve refused to close for a checkpoint, if it did.
    close_error: Option<ValveError>,
}

/// One coordinator's event delivery: its valve, its subtasks' mailboxes and the
/// acknowledgements it owes (see the [module](self)). Gateways send through it as their
/// [`EventTransport`].
pub struct EventDelivery<M: Mailbox> {
    state: Mutex<State<M>>,
    /// Held across a valve decision and the mailbox hand-off (see the module).
    order: Mutex<()>,
    /// Signalled when a checkpoint's readiness may have changed.
    ready: Notify,
}

impl<M: Mailbox> Default for EventDelivery<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M: Mailbox> fmt::Debug for EventDelivery<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EventDelivery")
    }
}

impl<M: Mailbox> EventDelivery<M> {
    /// No attempts, no checkpoints.
    pub fn new() -> Self {
        EventDelivery {
            state: Mutex::new(State {
                valve: EventValve::new(),
                waiting: HashMap::new(),
                mailboxes: BTreeMap::new(),
                lost: Vec::new(),
                close_error: None,
            }),
            order: Mutex::new(()),
            ready: Notify::new(),
        }
    }

    /// `target` runs, reading `mailbox` (`None`: it has none, and events to it fail).
    pub fn attempt_ready(&self, target: SubtaskAttempt, mailbox: Option<M>) {
        let mut st = lock(&self.state);
        if let Some(mailbox) = mailbox {
            st.mailboxes.insert(target, mailbox);
        }
        st.valve.attempt_ready(target);
    }

    /// `target` failed or was stopped: its mailbox is forgotten, and the events held for it
    /// are dropped, failing their acknowledgements with [`SendError::TaskNotRunning`].
    pub fn attempt_failed(&self, target: SubtaskAttempt) {
        let owed: Vec<AckSender> = {
            let mut st = lock(&self.state);
            st.mailboxes.remove(&target);
            let failed = st.valve.attempt_failed(target);
            failed
                .dropped
                .iter()
                .filter_map(|(id, _)| st.waiting.remove(id))
                .collect()
        };
        for ack in owed {
            ack.fail(SendError::TaskNotRunning { target });
        }
        // A checkpoint that counted a dropped event has failed.
        self.ready.notify_waiters();
    }

    /// Checkpoint `id` is triggered, before the coordinator's snapshot.
    pub fn trigger(&self, id: CheckpointId) -> Result<(), ValveError> {
        lock(&self.state).valve.trigger(id)
    }

    /// The coordinator finished its snapshot for `id` (`taken`), or failed to. Call it on the
    /// thread completing the snapshot: on success the valve closes at once, so events sent
    /// afterwards are held for the next epoch.
    pub fn coordinator_checkpoint_done(&self, id: CheckpointId, taken: bool) {
        if taken {
            let _order = lock(&self.order);
            let mut st = lock(&self.state);
            if let Err(e) = st.valve.coordinator_checkpoint_taken(id) {
                st.close_error = Some(e);
            }
        }
        self.ready.notify_waiters();
    }

    /// Resolves once the coordinator's snapshot for `id` was taken and every event sent before
    /// it reached its mailbox, or fails when that cannot happen: the valve refused to close, an
    /// event sent before the snapshot was lost, or `id` was completed, aborted or reset
    /// meanwhile. Before the snapshot it waits (a failed snapshot leaves it waiting until `id`
    /// is aborted).
    pub async fn ready(&self, id: CheckpointId) -> Result<(), NotReady> {
        loop {
            // Created before the check: a change made after the check wakes it.
            let notified = self.ready.notified();
            {
                let mut st = lock(&self.state);
                if let Some(e) = st.close_error.take() {
                    return Err(NotReady::Refused(e));
                }
                match st.valve.readiness(id) {
                    Some(Readiness::Ready) => return Ok(()),
                    Some(Readiness::Failed) => return Err(NotReady::EventLost(id)),
                    Some(Readiness::AwaitingAcks { .. }) => {}
                    None if st.valve.pending_checkpoints().contains(&id) => {}
                    None => return Err(NotReady::NotPending(id)),
                }
            }
            notified.await;
        }
    }

    /// `target` took barrier `id`: the events held for it are released, in order.
    pub fn barrier_taken(&self, target: SubtaskAttempt, id: CheckpointId) {
        let _order = lock(&self.order);
        let released = lock(&self.state).valve.barrier_taken(target, id);
        if let Ok(released) = released {
            self.release(released);
        }
    }

    /// Checkpoint `id` completed: every gateway reopens and the held events are released.
    pub fn checkpoint_complete(&self, id: CheckpointId) {
        let _order = lock(&self.order);
        let released = lock(&self.state)
            .valve
            .checkpoint_complete(id)
            .unwrap_or_default();
        self.release(released);
        self.ready.notify_waiters();
    }

    /// Checkpoint `id` was aborted: every gateway reopens for it and the held events are
    /// released.
    pub fn checkpoint_aborted(&self, id: CheckpointId) {
        let _order = lock(&self.order);
        let released = lock(&self.state)
            .valve
            .checkpoint_aborted(id)
            .unwrap_or_default();
        self.release(released);
        self.ready.notify_waiters();
    }

    /// Global reset: every pending checkpoint is forgotten and every held event released.
    pub fn reset(&self) {
        let _order = lock(&self.order);
        let released = lock(&self.state).valve.reset();
        self.release(released);
        self.ready.notify_waiters();
    }

    /// An attempt whose event was lost while it ran, if any (it must be failed over); forgets
    /// every such attempt.
    pub fn take_lost(&self) -> Option<SubtaskAttempt> {
        lock(&self.state).lost.drain(..).next()
    }

    /// Delivers events the valve released, completing their acknowledgements. The caller holds
    /// `order` since the valve decided the release.
    fn release(&self, releases: Vec<Release<OperatorEvent>>) {
        for r in releases {
            let result = self.deliver_locked(lock(&self.state), r.target, r.id, r.event);
            let ack = lock(&self.state).waiting.remove(&r.id);
            if let Some(ack) = ack {
                match result {
                    Ok(()) => ack.ack(),
                    Err(e) => ack.fail(e),
                }
            }
        }
    }

    /// Hands an event the valve let through to its attempt's mailbox, with the state locked
    /// by the caller (and `order` held).
    fn deliver_locked(
        &self,
        mut st: MutexGuard<'_, State<M>>,
        target: SubtaskAttempt,
        id: EventId,
        event: OperatorEvent,
    ) -> Result<(), SendError> {
        // The common case under one lock: the mailbox has room, the event is acknowledged.
        let tried = match st.mailboxes.get(&target) {
            None => Err(None),
            Some(mailbox) => match mailbox.try_put(event) {
                Ok(()) => Ok(()),
                Err(TryPutError::Full(pending)) => Err(Some((mailbox.clone(), pending))),
                Err(TryPutError::Gone) => Err(None),
            },
        };
        let waiting_for_room = match tried {
            Ok(()) => {
                let ready = st.valve.acked(id);
                drop(st);
                if !ready.is_empty() {
                    self.ready.notify_waiters();
                }
                return Ok(());
            }
            Err(full) => full,
        };
        drop(st);
        // A full mailbox: wait for room (where waiting is allowed) without holding the state.
        let sent = match waiting_for_room {
            None => Err(SendError::TaskNotRunning { target }),
            Some((mailbox, pending)) => mailbox.put(pending).map_err(|e| match e {
                PutError::Full => SendError::MailboxFull { target },
                PutError::Gone => SendError::TaskNotRunning { target },
            }),
        };
        {
            let mut st = lock(&self.state);
            match &sent {
                Ok(()) => {
                    st.valve.acked(id);
                }
                Err(_) => {
                    if let Some(t) = st.valve.delivery_failed(id).failover {
                        st.lost.push(t);
                    }
                }
            }
        }
        self.ready.notify_waiters();
        sent
    }
}

impl<M: Mailbox> EventTransport for EventDelivery<M> {
    fn send(&self, target: SubtaskAttempt, event: OperatorEvent) -> AckFuture {
        let _order = lock(&self.order);
        let mut st = lock(&self.state);
        match st.valve.send(target, event) {
            SendOutcome::Deliver { id, event } => {
                match self.deliver_locked(st, target, id, event) {
                    Ok(()) => AckFuture::acked(),
                    Err(e) => AckFuture::failed(e),
                }
            }
            SendOutcome::Held { id } => {
                let (ack, fut) = AckFuture::channel(target);
                st.waiting.insert(id, ack);
                fut
            }
            SendOutcome::NotRunning { .. } => {
                AckFuture::failed(SendError::TaskNotRunning { target })
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn ev(b: u8) -> OperatorEvent {
        OperatorEvent::new(vec![b])
    }

    fn mailbox(capacity: usize) -> (ChannelMailbox<OperatorEvent>, mpsc::Receiver<OperatorEvent>) {
        let (tx, rx) = mpsc::channel(capacity);
        (ChannelMailbox::new(tx, |e| e), rx)
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_full_channel_fails_on_a_current_thread_runtime_instead_of_blocking() {
        let (m, _rx) = mailbox(1);
        m.try_put(ev(1)).unwrap();
        let Err(TryPutError::Full(pending)) = m.try_put(ev(2)) else {
            panic!("the channel should be full")
        };
        assert_eq!(m.put(pending), Err(PutError::Full));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_channel_is_waited_on_a_multi_threaded_worker() {
        let (m, mut rx) = mailbox(1);
        m.try_put(ev(1)).unwrap();
        let reader = tokio::spawn(async move { (rx.recv().await, rx.recv().await) });
        assert_eq!(m.put(ev(2)), Ok(()));
        let (a, b) = reader.await.unwrap();
        assert_eq!((a, b), (Some(ev(1)), Some(ev(2))));
    }

    #[test]
    fn a_closed_channel_is_gone() {
        let (m, rx) = mailbox(1);
        drop(rx);
        assert!(matches!(m.try_put(ev(1)), Err(TryPutError::Gone)));
        assert_eq!(m.put(ev(1)), Err(PutError::Gone));
    }

    /// Held events go when the subtask takes the barrier; an attempt failing drops its held
    /// events; the checkpoint's part waits for the events sent before the snapshot.
    #[tokio::test]
    async fn the_protocol_over_tokio_channels() {
        let d = Arc::new(EventDelivery::new());
        let (s0, s1) = (SubtaskAttempt::new(0, 0), SubtaskAttempt::new(1, 0));
        let (m0, mut rx0) = mailbox(8);
        let (m1, _rx1) = mailbox(8);
        d.attempt_ready(s0, Some(m0));
        d.attempt_ready(s1, Some(m1));
        d.trigger(CheckpointId(1)).unwrap();
        assert_eq!(d.send(s0, ev(1)).await, Ok(()));
        d.coordinator_checkpoint_done(CheckpointId(1), true);
        d.ready(CheckpointId(1)).await.unwrap();

        let mut held = d.send(s0, ev(2));
        let mut dropped = d.send(s1, ev(3));
        assert_eq!(held.try_result(), None);
        assert_eq!(rx0.try_recv().ok(), Some(ev(1)));
        assert!(rx0.try_recv().is_err());

        d.attempt_failed(s1);
        assert_eq!(
            dropped.try_result(),
            Some(Err(SendError::TaskNotRunning { target: s1 }))
        );
        d.barrier_taken(s0, CheckpointId(1));
        assert_eq!(held.try_result(), Some(Ok(())));
        assert_eq!(rx0.try_recv().ok(), Some(ev(2)));

        d.checkpoint_complete(CheckpointId(1));
        assert_eq!(
            d.ready(CheckpointId(1)).await,
            Err(NotReady::NotPending(CheckpointId(1)))
        );
        assert_eq!(d.take_lost(), None);
    }
}
