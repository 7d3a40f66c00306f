//! Cluster mode in the runtime's terms: a job master that deploys its tasks to task managers
//! in other processes, and a task manager that runs them, with the transport left to the
//! caller (the `sluice-node` crate carries it over gRPC and `sluice-net`), so that this crate
//! compiles no network stack and its cluster logic is tested with in-memory transports.
//!
//! Where to find things:
//! - [`wire`]: what crosses between processes (deployments, control messages, reports,
//!   channel elements), all serde;
//! - [`placement`]: the pure rule that puts subtasks into task managers' slots;
//! - [`RemoteTasks`] (`master.rs`): the job master's side; every task of the job is a proxy
//!   that forwards its mailbox to the task manager running it and ends when that task ends,
//!   so the job master's loop, its checkpoints, coordinators and failover run unchanged;
//! - [`Worker`] (`worker.rs`): the task manager's side; it deploys the tasks it is sent with
//!   local channels between its own tasks and data-plane channels to the others, and sends
//!   every report, coordinator event and task end up in order;
//! - the seams: [`DataPlane`] (byte channels to another task manager) and
//!   [`TaskManagerGateway`] (the job master's calls to task managers).
//!
//! How a job runs on a cluster: every process runs the job's own binary and builds the same
//! graph. The job master submits it with [`StreamEnvironment::submit_remote`]; each
//! [`Deployment`](wire::Deployment) it sends names the tasks, where every task of the batch
//! runs, and their restored state. A task manager checks the graph's fingerprint, deploys its
//! tasks with [`Worker::deploy`], and from then on routes [`wire::Control`] messages to them
//! and [`wire::Up`] messages back.
//!
//! [`StreamEnvironment::submit_remote`]: crate::StreamEnvironment::submit_remote

mod master;
pub mod wire;
mod worker;

/// The pure rule that puts subtasks into task managers' slots (from `sluice-cluster`).
pub use sluice_cluster::placement;

pub(crate) use master::RemoteDeployer;
pub use master::{RemoteTasks, TaskManagerGateway, TaskManagerSlots};
pub use worker::{Worker, WorkerJob};

pub use crate::exchange::remote::{
    ByteReceiver, ByteSender, DataPlane, OpenReceiver, OpenSender, TransportError,
};
