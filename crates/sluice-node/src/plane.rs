//! The data plane between task managers: the runtime's [`DataPlane`] over `sluice-net`, one
//! authenticated TCP connection per pair of task managers carrying every channel between
//! them, with credit-based flow control.
//!
//! Of two task managers, the one whose name sorts first dials the other, once; the dialer
//! introduces itself on channel 0, and the other side files the connection under that name.
//! Every exchange channel has one end on each side, so the dialer always has a reason to
//! dial when the other side waits for it. A connection that fails is forgotten, so the next
//! channel to that peer dials again.

use futures::future::BoxFuture;
use sluice_net::{ChannelReceiver, ChannelSender, Connection, Listener, NetConfig};
use sluice_runtime::cluster::{
    ByteReceiver, ByteSender, DataPlane, OpenReceiver, OpenSender, TransportError,
};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, OnceCell};

/// The channel on which a dialing task manager names itself.
const HELLO: u64 = 0;

/// This task manager's data plane.
pub struct NetDataPlane {
    name: String,
    config: NetConfig,
    local_addr: SocketAddr,
    dialed: Mutex<HashMap<String, Arc<OnceCell<Arc<Connection>>>>>,
    accepted: Mutex<HashMap<String, Arc<Connection>>>,
    arrived: Notify,
    refused: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for NetDataPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetDataPlane")
            .field("name", &self.name)
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

impl NetDataPlane {
    /// Binds the data plane of task manager `name` on `addr` and starts accepting peers.
    pub async fn bind(
        name: &str,
        addr: SocketAddr,
        config: NetConfig,
    ) -> Result<Arc<Self>, sluice_net::NetError> {
        let listener = Listener::bind(addr, config.clone()).await?;
        let local_addr = listener.local_addr()?;
        let plane = Arc::new(NetDataPlane {
            name: name.to_string(),
            config,
            local_addr,
            dialed: Mutex::new(HashMap::new()),
            accepted: Mutex::new(HashMap::new()),
            arrived: Notify::new(),
            refused: Arc::new(std::sync::atomic::AtomicU64::new(0)),
        });
        let weak = Arc::downgrade(&plane);
        tokio::spawn(async move {
            loop {
                let accepted = listener.accept().await;
                let Some(plane) = weak.upgrade() else {
                    return;
                };
                plane
                    .refused
                    .store(listener.rejected(), std::sync::atomic::Ordering::Relaxed);
                match accepted {
                    Ok(conn) => {
                        let plane = plane.clone();
                        tokio::spawn(async move { plane.introduce(conn).await });
                    }
                    Err(e) => tracing::warn!(error = %e, "refused a data-plane connection"),
                }
            }
        });
        Ok(plane)
    }

    /// Where the data plane listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Connections refused so far (failed authentication).
    pub fn refused(&self) -> u64 {
        self.refused.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reads an accepted connection's introduction and files it under the peer's name.
    async fn introduce(&self, conn: Connection) {
        let name = async {
            let mut hello = conn.receiver(HELLO).await?;
            hello.recv().await
        }
        .await;
        match name {
            Ok(Some(bytes)) => {
                let peer = String::from_utf8_lossy(&bytes).into_owned();
                tracing::debug!(%peer, "data-plane connection accepted");
                self.lock_accepted().insert(peer, Arc::new(conn));
                self.arrived.notify_waiters();
            }
            Ok(None) => tracing::warn!("a peer closed its data connection before naming itself"),
            Err(e) => {
                tracing::warn!(error = %e, "a peer's data connection failed before it named itself")
            }
        }
    }

    fn lock_accepted(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Connection>>> {
        self.accepted.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The connection to `peer` at `addr`: dialed by the side whose name sorts first.
    async fn connection(&self, peer: &str, addr: &str) -> Result<Arc<Connection>, TransportError> {
        if self.name.as_str() < peer {
            let cell = self
                .dialed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(peer.to_string())
                .or_default()
                .clone();
            let conn = cell
                .get_or_try_init(|| async {
                    let socket: SocketAddr = tokio::net::lookup_host(addr)
                        .await
                        .map_err(|e| {
                            TransportError(format!("data address {addr} of '{peer}': {e}"))
                        })?
                        .next()
                        .ok_or_else(|| {
                            TransportError(format!(
                                "data address {addr} of '{peer}' resolves to nothing"
                            ))
                        })?;
                    let conn = sluice_net::connect(socket, &self.config)
                        .await
                        .map_err(|e| {
                            TransportError(format!("connecting to '{peer}' at {addr}: {e}"))
                        })?;
                    let mut hello = conn.sender(HELLO);
                    hello
                        .send(self.name.clone().into_bytes())
                        .await
                        .map_err(|e| TransportError(format!("introducing to '{peer}': {e}")))?;
                    Ok::<_, TransportError>(Arc::new(conn))
                })
                .await?
                .clone();
            Ok(conn)
        } else {
            loop {
                let arrived = self.arrived.notified();
                if let Some(conn) = self.lock_accepted().get(peer) {
                    return Ok(conn.clone());
                }
                arrived.await;
            }
        }
    }

    /// Forgets a failed connection to `peer`.
    fn forget(&self, peer: &str) {
        self.dialed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(peer);
        self.lock_accepted().remove(peer);
    }
}

struct NetSender(ChannelSender);
struct NetReceiver(ChannelReceiver);

impl ByteSender for NetSender {
    fn ready(&mut self) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            self.0
                .ready()
                .await
                .map_err(|e| TransportError(e.to_string()))
        })
    }
    fn send(&mut self, bytes: Vec<u8>) -> BoxFuture<'_, Result<(), TransportError>> {
        Box::pin(async move {
            self.0
                .send(bytes)
                .await
                .map_err(|e| TransportError(e.to_string()))
        })
    }
    fn close(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move {
            self.0
                .close()
                .await
                .map_err(|e| TransportError(e.to_string()))
        })
    }
}

impl ByteReceiver for NetReceiver {
    fn recv(&mut self) -> BoxFuture<'_, Result<Option<Vec<u8>>, TransportError>> {
        Box::pin(async move {
            self.0
                .recv()
                .await
                .map_err(|e| TransportError(e.to_string()))
        })
    }
}

/// The plane, shared with the runtime.
#[derive(Clone, Debug)]
pub struct SharedPlane(pub Arc<NetDataPlane>);

impl DataPlane for SharedPlane {
    fn sender(&self, peer: &str, addr: &str, channel: u64) -> OpenSender {
        let (plane, peer, addr) = (self.0.clone(), peer.to_string(), addr.to_string());
        Box::pin(async move {
            let conn = plane.connection(&peer, &addr).await?;
            Ok(Box::new(NetSender(conn.sender(channel))) as Box<dyn ByteSender>)
        })
    }
    fn receiver(&self, peer: &str, addr: &str, channel: u64) -> OpenReceiver {
        let (plane, peer, addr) = (self.0.clone(), peer.to_string(), addr.to_string());
        Box::pin(async move {
            let conn = plane.connection(&peer, &addr).await?;
            match conn.receiver(channel).await {
                Ok(rx) => Ok(Box::new(NetReceiver(rx)) as Box<dyn ByteReceiver>),
                Err(e) => {
                    plane.forget(&peer);
                    Err(TransportError(format!("channel from '{peer}': {e}")))
                }
            }
        })
    }
}
