//! Operator coordinators for sluice: a coordinator per operator on the job master, exchanging
//! typed operator events with the operator's subtasks.
//!
//! Where to find things:
//! - [`OperatorCoordinator`] and [`CoordinatorProvider`]: the lifecycle the job master drives;
//! - [`CoordinatorContextBase`]: the reusable part of every coordinator (its thread, subtask
//!   gateways, job-failure hook, calls into the coordinator thread, worker pool);
//! - [`BaseCoordinator`] and [`CoordinatorLogic`]: a whole coordinator from just its logic;
//! - [`CoordinatorExecutorThreadFactory`] and [`CoordinatorExecutor`]: the one named thread per
//!   coordinator and the bounded queue it runs;
//! - [`gateway`]: [`SubtaskGateway`], the [`EventTransport`] seam the runtime plugs its task
//!   mailboxes into, and an in-memory transport;
//! - [`valve`]: the pure state machine that aligns coordinator events with checkpoints;
//! - [`delivery`]: [`EventDelivery`], the delivery protocol around the valve (the transport of
//!   the job master's gateways), over a [`Mailbox`] per subtask attempt;
//! - [`DirectSlot`]: the subtasks' direct path to the coordinator thread;
//! - [`RecreateOnResetCoordinator`]: recreates a coordinator on global failover;
//! - [`LiveAttempts`]: drops events from failed subtask attempts.
//!
//! ```
//! use sluice_coordinator::{CoordinatorContext, CoordinatorContextBase, JobFailureHook};
//! use sluice_core::NodeId;
//! use std::sync::{Arc, Mutex};
//!
//! let failures = Arc::new(Mutex::new(Vec::new()));
//! let sink = failures.clone();
//! let hook = JobFailureHook::new(move |f| sink.lock().unwrap().push(f.to_string()));
//! let base = CoordinatorContextBase::new(CoordinatorContext::new("split-enumerator", NodeId(0), 4, hook)).unwrap();
//!
//! let doubled = base.call_in_coordinator_thread(|| Ok(21 * 2), "cannot compute").unwrap();
//! assert_eq!(doubled, 42);
//!
//! let err = base.call_in_coordinator_thread(|| -> Result<(), _> { Err("no".into()) }, "cannot assign").unwrap_err();
//! assert_eq!(err.to_string(), "cannot assign: no");
//! base.close();
//! ```

mod base;
mod checkpoint;
mod context;
mod coordinator;
pub mod delivery;
mod direct;
mod error;
mod event;
mod executor;
mod filter;
pub mod gateway;
mod logic;
mod recreate;
mod sync;
mod thread_factory;
mod util;
pub mod valve;

pub use base::{BaseOptions, CoordinatorContextBase, PeriodicCall};
pub use checkpoint::{CheckpointDeclined, CheckpointFuture, CheckpointOutcome, CheckpointResult};
pub use context::{CoordinatorContext, JobFailureHook, NO_CHECKPOINT};
pub use coordinator::{
    CoordinatorFuture, CoordinatorProvider, DirectEventHandler, OperatorCoordinator, done,
};
pub use delivery::{ChannelMailbox, EventDelivery, Mailbox};
pub use direct::DirectSlot;
pub use error::{
    CallError, CallFailure, CoordinatorError, CoordinatorFailure, GatewayError, SendError,
    SubmitError, ThreadFactoryError,
};
pub use event::{decode_event, encode_event};
pub use executor::{CoordinatorExecutor, CoordinatorTask, DEFAULT_QUEUE_CAPACITY};
pub use filter::LiveAttempts;
pub use gateway::{
    AckFuture, AckSender, EventTransport, SubtaskAttempt, SubtaskGateway, SubtaskGateways,
};
pub use logic::{BaseCoordinator, CoordinatorLogic};
pub use recreate::RecreateOnResetCoordinator;
pub use thread_factory::{CoordinatorExecutorThreadFactory, PanicHandler};
