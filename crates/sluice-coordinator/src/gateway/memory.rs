//! [`InMemoryTransport`]: an [`EventTransport`] over one bounded tokio channel per subtask, with
//! a oneshot acknowledgement per event. Tests use it to play the subtasks; it is also the model
//! the runtime's task mailbox follows.

use crate::error::SendError;
use crate::gateway::{AckFuture, AckSender, EventTransport, SubtaskAttempt, SubtaskGateway};
use crate::util::{in_tokio_runtime, lock};
use sluice_core::{AttemptNumber, OperatorEvent, SubtaskIndex};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

/// One event as a subtask receives it, with the acknowledgement to complete.
pub struct Delivery {
    target: SubtaskAttempt,
    event: OperatorEvent,
    ack: AckSender,
}

impl Delivery {
    /// The attempt the event was addressed to.
    pub fn target(&self) -> SubtaskAttempt {
        self.target
    }

    /// The event.
    pub fn event(&self) -> &OperatorEvent {
        &self.event
    }

    /// Acknowledges the event and returns it.
    pub fn ack(self) -> OperatorEvent {
        self.ack.ack();
        self.event
    }

    /// The event and its acknowledgement, to acknowledge later (or never: dropping the sender
    /// makes the coordinator see the event as lost).
    pub fn into_parts(self) -> (OperatorEvent, AckSender) {
        (self.event, self.ack)
    }
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("target", &self.target)
            .field("event", &self.event)
            .finish()
    }
}

/// The receiving end of one subtask attempt: its event mailbox.
#[derive(Debug)]
pub struct SubtaskInbox {
    target: SubtaskAttempt,
    rx: mpsc::Receiver<Delivery>,
}

impl SubtaskInbox {
    /// The attempt this inbox belongs to.
    pub fn target(&self) -> SubtaskAttempt {
        self.target
    }

    /// The next event, or `None` once the attempt was stopped and the inbox is drained.
    pub async fn recv(&mut self) -> Option<Delivery> {
        self.rx.recv().await
    }

    /// The next event if one is queued.
    pub fn try_recv(&mut self) -> Option<Delivery> {
        self.rx.try_recv().ok()
    }
}

#[derive(Default)]
struct Slot {
    attempt: AttemptNumber,
    tx: Option<mpsc::Sender<Delivery>>,
}

/// An in-process [`EventTransport`]: each running subtask attempt has a bounded mailbox.
///
/// - [`start_attempt`](Self::start_attempt) makes an attempt the running one and returns its
///   inbox (a previous attempt of that subtask stops);
/// - [`stop_attempt`](Self::stop_attempt) stops it: later sends fail with
///   [`SendError::TaskNotRunning`], and events it never took fail with [`SendError::Lost`]
///   once its inbox is dropped;
/// - when a mailbox is full, a send from a plain thread (the coordinator thread) waits for
///   room; a send from a tokio worker fails with [`SendError::MailboxFull`] instead of blocking.
///
/// ```
/// use sluice_coordinator::gateway::memory::InMemoryTransport;
/// use sluice_coordinator::{SendError, SubtaskAttempt};
/// use sluice_core::OperatorEvent;
///
/// let transport = InMemoryTransport::new(4);
/// let _inbox = transport.start_attempt(0, 1);
/// let stale = transport.gateway(0, 0).send_event(OperatorEvent::new(vec![]));
/// assert_eq!(
///     futures::executor::block_on(stale),
///     Err(SendError::TaskNotRunning { target: SubtaskAttempt::new(0, 0) })
/// );
/// ```
pub struct InMemoryTransport {
    capacity: usize,
    slots: Mutex<BTreeMap<SubtaskIndex, Slot>>,
}

impl InMemoryTransport {
    /// A transport whose mailboxes hold `capacity` events each (at least one).
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(InMemoryTransport {
            capacity: capacity.max(1),
            slots: Mutex::new(BTreeMap::new()),
        })
    }

    /// Makes `attempt` the running attempt of `subtask` and returns its inbox.
    pub fn start_attempt(&self, subtask: SubtaskIndex, attempt: AttemptNumber) -> SubtaskInbox {
        let (tx, rx) = mpsc::channel(self.capacity);
        lock(&self.slots).insert(
            subtask,
            Slot {
                attempt,
                tx: Some(tx),
            },
        );
        SubtaskInbox {
            target: SubtaskAttempt::new(subtask, attempt),
            rx,
        }
    }

    /// Stops `attempt` of `subtask` if it is the running one. Returns whether it was.
    pub fn stop_attempt(&self, subtask: SubtaskIndex, attempt: AttemptNumber) -> bool {
        let mut slots = lock(&self.slots);
        match slots.get_mut(&subtask) {
            Some(slot) if slot.attempt == attempt && slot.tx.is_some() => {
                slot.tx = None;
                true
            }
            _ => false,
        }
    }

    /// The running attempt of `subtask`, if any.
    pub fn running_attempt(&self, subtask: SubtaskIndex) -> Option<AttemptNumber> {
        lock(&self.slots)
            .get(&subtask)
            .filter(|s| s.tx.is_some())
            .map(|s| s.attempt)
    }

    /// A gateway to `attempt` of `subtask` over this transport.
    pub fn gateway(
        self: &Arc<Self>,
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
    ) -> SubtaskGateway {
        SubtaskGateway::new(subtask, attempt, self.clone())
    }
}

impl EventTransport for InMemoryTransport {
    fn send(&self, target: SubtaskAttempt, event: OperatorEvent) -> AckFuture {
        let tx = {
            let slots = lock(&self.slots);
            match slots.get(&target.subtask) {
                Some(Slot {
                    attempt,
                    tx: Some(tx),
                }) if *attempt == target.attempt => tx.clone(),
                _ => return AckFuture::failed(SendError::TaskNotRunning { target }),
            }
        };
        let (ack, future) = AckFuture::channel(target);
        let delivery = Delivery { target, event, ack };
        match tx.try_send(delivery) {
            Ok(()) => future,
            Err(TrySendError::Closed(_)) => AckFuture::failed(SendError::TaskNotRunning { target }),
            Err(TrySendError::Full(delivery)) => {
                if in_tokio_runtime() {
                    return AckFuture::failed(SendError::MailboxFull { target });
                }
                match tx.blocking_send(delivery) {
                    Ok(()) => future,
                    Err(_) => AckFuture::failed(SendError::TaskNotRunning { target }),
                }
            }
        }
    }
}

impl fmt::Debug for InMemoryTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryTransport")
            .field("capacity", &self.capacity)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(b: u8) -> OperatorEvent {
        OperatorEvent::new(vec![b])
    }

    #[tokio::test]
    async fn events_arrive_in_order_and_acks_complete() {
        let t = InMemoryTransport::new(8);
        let mut inbox = t.start_attempt(0, 0);
        let g = t.gateway(0, 0);
        let acks: Vec<_> = (0..5).map(|i| g.send_event(ev(i))).collect();
        for i in 0..5 {
            assert_eq!(inbox.recv().await.unwrap().ack(), ev(i));
        }
        for a in acks {
            assert_eq!(a.await, Ok(()));
        }
    }

    #[tokio::test]
    async fn full_mailbox_fails_on_a_tokio_worker_instead_of_blocking() {
        let t = InMemoryTransport::new(1);
        let _inbox = t.start_attempt(0, 0);
        let g = t.gateway(0, 0);
        let _first = g.send_event(ev(1));
        let target = SubtaskAttempt::new(0, 0);
        assert_eq!(
            g.send_event(ev(2)).await,
            Err(SendError::MailboxFull { target })
        );
    }

    #[test]
    fn full_mailbox_blocks_a_plain_thread_until_room() {
        let t = InMemoryTransport::new(1);
        let mut inbox = t.start_attempt(0, 0);
        let g = t.gateway(0, 0);
        let sender = std::thread::spawn(move || {
            let a = g.send_event(ev(1));
            let b = g.send_event(ev(2)); // waits for the receiver to make room
            (a, b)
        });
        let first = futures::executor::block_on(inbox.recv()).unwrap().ack();
        let second = futures::executor::block_on(inbox.recv()).unwrap().ack();
        assert_eq!((first, second), (ev(1), ev(2)));
        let (a, b) = sender.join().unwrap();
        assert_eq!(futures::executor::block_on(a), Ok(()));
        assert_eq!(futures::executor::block_on(b), Ok(()));
    }

    #[tokio::test]
    async fn events_never_taken_by_a_stopped_attempt_are_lost() {
        let t = InMemoryTransport::new(4);
        let inbox = t.start_attempt(3, 0);
        let ack = t.gateway(3, 0).send_event(ev(1));
        assert!(t.stop_attempt(3, 0));
        assert_eq!(t.running_attempt(3), None);
        drop(inbox);
        let target = SubtaskAttempt::new(3, 0);
        assert_eq!(ack.await, Err(SendError::Lost { target }));
        assert_eq!(
            t.gateway(3, 0).send_event(ev(2)).await,
            Err(SendError::TaskNotRunning { target })
        );
    }

    #[tokio::test]
    async fn a_new_attempt_replaces_the_old_one() {
        let t = InMemoryTransport::new(4);
        let _old = t.start_attempt(1, 0);
        let mut new = t.start_attempt(1, 1);
        assert_eq!(t.running_attempt(1), Some(1));
        assert!(t.gateway(1, 0).send_event(ev(1)).await.is_err());
        let ack = t.gateway(1, 1).send_event(ev(2));
        assert_eq!(new.recv().await.unwrap().ack(), ev(2));
        assert_eq!(ack.await, Ok(()));
    }
}
