//! The control plane of sluice's cluster mode (issue 15) over gRPC (tonic): the job master's
//! service, which task managers call (registration, heartbeats, and `up`: what their tasks
//! send, in order), and the task managers' service, which the job master calls (deployment,
//! `control`: one message for one task's mailbox, cancellation, heartbeats). Every request carries the cluster's bearer
//! token, derived from its shared secret; a request without it is refused and logged. Every
//! request but a registration carries a fence (job-master epoch, attempt); a stale one is
//! refused before the service sees it. `sluice-node` wires it to the runtime.
//!
//! Where to find things:
//! - [`messages`]: the protobuf messages (prost derives, no `.proto` compiler needed);
//! - [`services`]: the [`JobMaster`] and [`TaskManager`] traits, their servers and clients;
//! - [`serve`]: runs a server on an address until its [`ServerHandle`] is dropped;
//! - `service.rs` (private): the hand-written gRPC plumbing, token and fence checks.
//!
//! ```
//! use sluice_control::messages::*;
//! use sluice_control::{JobMaster, JobMasterClient, JobMasterServer, serve};
//! use sluice_net::auth::Secret;
//! use tonic::Status;
//!
//! /// A job master that welcomes every task manager.
//! struct Welcome;
//! impl JobMaster for Welcome {
//!     async fn register(&self, r: RegisterTaskManager) -> Result<Registered, Status> {
//!         Ok(Registered { fence: Some(FenceMsg { epoch: 1, attempt: 0 }), heartbeat_interval_ms: 1_000, heartbeat_timeout_ms: 10_000 })
//!     }
//!     async fn heartbeat(&self, h: Heartbeat) -> Result<Heartbeat, Status> { Ok(h) }
//!     async fn up(&self, _: UpMessage) -> Result<Ack, Status> { Ok(Ack {}) }
//! }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let secret = Secret::new(b"shared by every process".to_vec()).unwrap();
//! let server = serve("127.0.0.1:0".parse().unwrap(), JobMasterServer::new(Welcome, 1), secret.clone())
//!     .await
//!     .unwrap();
//! let mut client = JobMasterClient::new(&format!("http://{}", server.local_addr()), &secret).unwrap();
//! let registered = client
//!     .register(RegisterTaskManager { task_manager: "tm-1".into(), slots: 2, ..Default::default() })
//!     .await
//!     .unwrap();
//! assert_eq!(registered.fence, Some(FenceMsg { epoch: 1, attempt: 0 }));
//! # });
//! ```

pub mod messages;

/// The largest message either side sends or accepts: 256 MiB. States cross as handles to
/// their files in checkpoint storage, but a state travels whole where a task manager could not
/// write it or a job restores from a savepoint directory, so messages beyond gRPC's usual
/// 4 MiB are possible; a larger one fails its call.
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;
mod service;
pub mod services;

pub use service::Authenticator;
pub use services::{
    JobMaster, JobMasterClient, JobMasterServer, TaskManager, TaskManagerClient, TaskManagerServer,
};

use sluice_net::auth::Secret;
use std::convert::Infallible;
use std::net::SocketAddr;
use tonic::codegen::http;

/// What can go wrong setting up the control plane.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// A configuration value is unusable.
    #[error("control plane configuration: {0}")]
    Config(String),
    /// The server cannot listen.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A running server; dropping it stops the server.
#[derive(Debug)]
pub struct ServerHandle {
    addr: SocketAddr,
    auth: Authenticator,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl ServerHandle {
    /// The address served (with the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests refused so far for a missing or wrong token.
    pub fn refused(&self) -> u64 {
        self.auth.refused()
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.abort();
    }
}

/// Serves `service` (a [`JobMasterServer`] or a [`TaskManagerServer`]) on `addr` until the
/// handle is dropped, refusing requests without the token of `secret`. Bind to 127.0.0.1
/// unless other hosts must reach it.
pub async fn serve<S>(
    addr: SocketAddr,
    service: S,
    secret: Secret,
) -> Result<ServerHandle, ControlError>
where
    S: tonic::codegen::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = Infallible,
        > + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ControlError::Listen { addr, source })?;
    let addr = listener
        .local_addr()
        .map_err(|source| ControlError::Listen { addr, source })?;
    let auth = Authenticator::new(secret);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let router = tonic::transport::Server::builder().add_service(
        tonic::service::interceptor::InterceptedService::new(service, auth.clone()),
    );
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    let task = tokio::spawn(async move {
        let shutdown = async {
            let _ = stopped.await;
        };
        if let Err(e) = router
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
        {
            tracing::warn!(%addr, error = %e, "the control server stopped");
        }
    });
    Ok(ServerHandle {
        addr,
        auth,
        stop: Some(stop),
        task,
    })
}
