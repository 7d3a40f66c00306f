//! Subtask gateways: how a coordinator sends operator events to one attempt of one subtask.
//!
//! A [`SubtaskGateway`] is bound to one [`SubtaskAttempt`] and sends through an
//! [`EventTransport`], the seam where the runtime plugs in its task mailboxes. Every send
//! returns an [`AckFuture`] that resolves when the subtask has taken the event, or fails when
//! the event could not be delivered (sending to a dead attempt fails).
//!
//! - [`memory`]: an in-memory transport (one bounded tokio channel per subtask) for tests and
//!   for running coordinator and subtasks in one process without the runtime;
//! - [`registry`]: [`SubtaskGateways`], the ready gateways per subtask and attempt.

pub mod memory;
pub mod registry;

pub use registry::SubtaskGateways;

use crate::error::{SendError, SubmitError};
use crate::event::encode_event;
use serde::Serialize;
use sluice_core::{AttemptNumber, OperatorEvent, SubtaskIndex};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::oneshot;

/// One execution attempt of one subtask: where an event is addressed.
///
/// ```
/// use sluice_coordinator::SubtaskAttempt;
/// assert_eq!(SubtaskAttempt::new(2, 1).to_string(), "subtask 2 (attempt 1)");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SubtaskAttempt {
    /// The subtask index.
    pub subtask: SubtaskIndex,
    /// The attempt number.
    pub attempt: AttemptNumber,
}

impl SubtaskAttempt {
    /// Attempt `attempt` of subtask `subtask`.
    pub const fn new(subtask: SubtaskIndex, attempt: AttemptNumber) -> Self {
        SubtaskAttempt { subtask, attempt }
    }
}

impl fmt::Display for SubtaskAttempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "subtask {} (attempt {})", self.subtask, self.attempt)
    }
}

/// Carries events from a coordinator to subtask attempts: the runtime's task mailboxes, or the
/// [`memory`] transport.
///
/// Contract:
/// - events to one attempt arrive in the order `send` was called (from one thread);
/// - `send` must not block a tokio worker; it may block a plain thread (the coordinator thread)
///   briefly while the target's mailbox is full;
/// - the returned future resolves `Ok` once the attempt has taken the event into its mailbox,
///   and fails with [`SendError::TaskNotRunning`] when the attempt is not running, or
///   [`SendError::Lost`] when it stopped before taking the event.
pub trait EventTransport: Send + Sync + 'static {
    /// Sends `event` to `target`.
    fn send(&self, target: SubtaskAttempt, event: OperatorEvent) -> AckFuture;
}

/// A coordinator's handle to one attempt of one subtask (Flink's `SubtaskGateway`).
///
/// Cheap to clone. The job master creates it and hands it to the coordinator in
/// `execution_attempt_ready`; it stays bound to that attempt, so after a failover sends through
/// the old gateway fail.
///
/// ```
/// use sluice_coordinator::gateway::memory::InMemoryTransport;
/// use sluice_coordinator::SubtaskGateway;
/// use sluice_core::OperatorEvent;
///
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let transport = InMemoryTransport::new(16);
/// let mut inbox = transport.start_attempt(1, 0);
/// let gateway = SubtaskGateway::new(1, 0, transport.clone());
/// let ack = gateway.send_event(OperatorEvent::new(vec![7]));
/// let delivery = inbox.recv().await.unwrap();
/// assert_eq!(delivery.ack().payload(), &[7]);
/// assert_eq!(ack.await, Ok(()));
///
/// transport.stop_attempt(1, 0);
/// assert!(gateway.send_event(OperatorEvent::new(vec![8])).await.is_err());
/// # });
/// ```
#[derive(Clone)]
pub struct SubtaskGateway {
    target: SubtaskAttempt,
    transport: Arc<dyn EventTransport>,
}

impl SubtaskGateway {
    /// The gateway to attempt `attempt` of subtask `subtask` over `transport`.
    pub fn new(
        subtask: SubtaskIndex,
        attempt: AttemptNumber,
        transport: Arc<dyn EventTransport>,
    ) -> Self {
        SubtaskGateway {
            target: SubtaskAttempt::new(subtask, attempt),
            transport,
        }
    }

    /// The subtask this gateway sends to.
    pub fn subtask(&self) -> SubtaskIndex {
        self.target.subtask
    }

    /// The attempt this gateway is bound to.
    pub fn attempt(&self) -> AttemptNumber {
        self.target.attempt
    }

    /// The subtask and attempt together.
    pub fn target(&self) -> SubtaskAttempt {
        self.target
    }

    /// Sends `event`; the future resolves when the attempt has taken it.
    pub fn send_event(&self, event: OperatorEvent) -> AckFuture {
        self.transport.send(self.target, event)
    }

    /// Encodes `event` with [`encode_event`] and sends it.
    pub fn send<T: Serialize + ?Sized>(&self, event: &T) -> AckFuture {
        match encode_event(event) {
            Ok(e) => self.send_event(e),
            Err(e) => AckFuture::failed(SendError::Encode(e.to_string())),
        }
    }
}

impl fmt::Debug for SubtaskGateway {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubtaskGateway")
            .field("target", &self.target)
            .finish()
    }
}

/// Completes an [`AckFuture`]: the transport's half of an acknowledgement.
///
/// Dropping it without acknowledging fails the future with [`SendError::Lost`].
#[derive(Debug)]
pub struct AckSender {
    tx: oneshot::Sender<Result<(), SendError>>,
}

impl AckSender {
    /// The event was taken by the subtask.
    pub fn ack(self) {
        let _ = self.tx.send(Ok(()));
    }

    /// The event could not be delivered.
    pub fn fail(self, error: SendError) {
        let _ = self.tx.send(Err(error));
    }
}

/// Resolves when the target subtask has taken an event, or fails when it could not.
///
/// ```
/// use sluice_coordinator::{AckFuture, SendError, SubtaskAttempt};
///
/// let target = SubtaskAttempt::new(0, 0);
/// let (sender, ack) = AckFuture::channel(target);
/// sender.ack();
/// assert_eq!(futures::executor::block_on(ack), Ok(()));
///
/// let (sender, ack) = AckFuture::channel(target);
/// drop(sender);
/// assert_eq!(futures::executor::block_on(ack), Err(SendError::Lost { target }));
/// ```
#[derive(Debug)]
#[must_use = "an acknowledgement future tells whether the event arrived"]
pub struct AckFuture {
    state: AckState,
}

#[derive(Debug)]
enum AckState {
    Done(Result<(), SendError>),
    Waiting {
        target: SubtaskAttempt,
        rx: oneshot::Receiver<Result<(), SendError>>,
    },
    /// The send itself happens later (on the coordinator thread); its acknowledgement follows.
    Deferred(oneshot::Receiver<AckFuture>),
}

/// Resolves a deferred [`AckFuture`] with the acknowledgement of the send once it happened.
/// Dropping it fails the future: the coordinator closed before sending.
#[derive(Debug)]
pub(crate) struct DeferredAck {
    tx: oneshot::Sender<AckFuture>,
}

impl DeferredAck {
    pub(crate) fn resolve(self, ack: AckFuture) {
        let _ = self.tx.send(ack);
    }
}

impl AckFuture {
    /// A pending acknowledgement for an event to `target`, and the sender that completes it.
    pub fn channel(target: SubtaskAttempt) -> (AckSender, AckFuture) {
        let (tx, rx) = oneshot::channel();
        (
            AckSender { tx },
            AckFuture {
                state: AckState::Waiting { target, rx },
            },
        )
    }

    /// An acknowledgement for a send that will happen later, and its resolver.
    pub(crate) fn deferred() -> (DeferredAck, AckFuture) {
        let (tx, rx) = oneshot::channel();
        (
            DeferredAck { tx },
            AckFuture {
                state: AckState::Deferred(rx),
            },
        )
    }

    /// An acknowledgement that already failed with `error`.
    pub fn failed(error: SendError) -> Self {
        AckFuture {
            state: AckState::Done(Err(error)),
        }
    }

    /// An acknowledgement that already succeeded.
    pub fn acked() -> Self {
        AckFuture {
            state: AckState::Done(Ok(())),
        }
    }

    /// The outcome if it is known already, without waiting.
    pub fn try_result(&mut self) -> Option<Result<(), SendError>> {
        match &mut self.state {
            AckState::Done(r) => Some(r.clone()),
            AckState::Waiting { target, rx } => match rx.try_recv() {
                Ok(r) => {
                    self.state = AckState::Done(r.clone());
                    Some(r)
                }
                Err(oneshot::error::TryRecvError::Empty) => None,
                Err(oneshot::error::TryRecvError::Closed) => {
                    let r = Err(SendError::Lost { target: *target });
                    self.state = AckState::Done(r.clone());
                    Some(r)
                }
            },
            AckState::Deferred(rx) => match rx.try_recv() {
                Ok(inner) => {
                    self.state = inner.state;
                    self.try_result()
                }
                Err(oneshot::error::TryRecvError::Empty) => None,
                Err(oneshot::error::TryRecvError::Closed) => {
                    let r = Err(SendError::Submit(SubmitError::Closed));
                    self.state = AckState::Done(r.clone());
                    Some(r)
                }
            },
        }
    }
}

impl Future for AckFuture {
    type Output = Result<(), SendError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            match &mut self.state {
                AckState::Done(r) => return Poll::Ready(r.clone()),
                AckState::Waiting { target, rx } => {
                    let target = *target;
                    return Pin::new(rx)
                        .poll(cx)
                        .map(|r| r.unwrap_or(Err(SendError::Lost { target })));
                }
                AckState::Deferred(rx) => match Pin::new(rx).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(inner)) => self.state = inner.state,
                    Poll::Ready(Err(_)) => {
                        self.state = AckState::Done(Err(SendError::Submit(SubmitError::Closed)))
                    }
                },
            }
        }
    }
}
