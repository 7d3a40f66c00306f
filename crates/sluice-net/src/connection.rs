//! Connections: the TCP edge of the crate. One authenticated connection per pair of peers
//! carries any number of channels; a reader task and a writer task per connection move frames,
//! and the pure [`credit`](crate::credit) rules decide when a sender may send and when the
//! receiver grants more.
//!
//! Ordering rules: frames of one channel arrive in the order they were sent (one TCP stream,
//! one writer); a channel's data, barriers and watermarks are its buffers, so they keep their
//! order too. A failure of the connection (the peer gone, a frame that breaks the protocol)
//! fails every channel of it: senders and receivers return [`NetError::Closed`] with the
//! reason, never hang.

use crate::auth::{self, Role, Secret};
use crate::credit::{ReceiverWindow, credits_for};
use crate::frame::{ChannelId, Frame, Handshake, PROTOCOL_VERSION};
use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// Frames waiting for the writer task of one connection.
const OUTGOING_FRAMES: usize = 64;

/// What can go wrong on a connection.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// Socket I/O failed.
    #[error("{action} {peer}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The peer or address.
        peer: String,
        /// The error.
        source: std::io::Error,
    },
    /// The handshake failed: wrong secret, another protocol version, or a peer that does not
    /// speak the protocol.
    #[error("handshake with {peer} refused: {reason}")]
    Refused {
        /// The peer.
        peer: SocketAddr,
        /// Why.
        reason: String,
    },
    /// The connection is closed or failed; every channel of it ends with this.
    #[error("connection to {peer} closed: {reason}")]
    Closed {
        /// The peer.
        peer: SocketAddr,
        /// Why.
        reason: String,
    },
    /// A channel was opened twice on one side.
    #[error("channel {channel} is already open for receiving on the connection to {peer}")]
    DuplicateChannel {
        /// The peer.
        peer: SocketAddr,
        /// The channel.
        channel: ChannelId,
    },
}

/// How connections are made.
#[derive(Clone, Debug)]
pub struct NetConfig {
    /// The secret every peer of the cluster shares.
    pub secret: Secret,
    /// Credits a receiver grants per channel, each for
    /// [`CREDIT_BYTES`](crate::credit::CREDIT_BYTES) of buffer (what one channel's queued
    /// frames may cost at most; at least
    /// [`MAX_FRAME_CREDITS`](crate::credit::MAX_FRAME_CREDITS); see [`credit`](crate::credit)).
    pub window: u32,
    /// The longest frame accepted, in bytes.
    pub max_frame: usize,
    /// How long a handshake may take.
    pub handshake_timeout: Duration,
}

impl NetConfig {
    /// Defaults: a window of 256 credits (1 MiB per channel), frames up to 64 MiB, 10 s for a
    /// handshake.
    pub fn new(secret: Secret) -> Self {
        NetConfig {
            secret,
            window: 256,
            max_frame: 64 << 20,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

type Wire = Framed<TcpStream, LengthDelimitedCodec>;

fn wire(stream: TcpStream, config: &NetConfig) -> Wire {
    let codec = LengthDelimitedCodec::builder()
        .max_frame_length(config.max_frame)
        .new_codec();
    let mut framed = Framed::new(stream, codec);
    // A burst of queued frames is written with one system call up to this size, not one per
    // 8 KiB (the default).
    framed.set_backpressure_boundary(WRITE_BURST_BYTES);
    framed
}

/// Bytes of frames gathered before the writer must flush them.
const WRITE_BURST_BYTES: usize = 256 * 1024;

async fn send_msg<T: Serialize>(
    wire: &mut Wire,
    peer: SocketAddr,
    msg: &T,
) -> Result<(), NetError> {
    let bytes = postcard::to_allocvec(msg).map_err(|e| NetError::Closed {
        peer,
        reason: format!("cannot encode a frame: {e}"),
    })?;
    wire.send(Bytes::from(bytes))
        .await
        .map_err(|source| NetError::Io {
            action: "write to",
            peer: peer.to_string(),
            source,
        })
}

async fn recv_msg<T: DeserializeOwned>(wire: &mut Wire, peer: SocketAddr) -> Result<T, NetError> {
    match wire.next().await {
        Some(Ok(bytes)) => postcard::from_bytes(&bytes).map_err(|e| NetError::Refused {
            peer,
            reason: format!("undecodable message: {e}"),
        }),
        Some(Err(source)) => Err(NetError::Io {
            action: "read from",
            peer: peer.to_string(),
            source,
        }),
        None => Err(NetError::Refused {
            peer,
            reason: "the peer closed the connection".into(),
        }),
    }
}

/// Connects to `addr` and authenticates both ways.
pub async fn connect(addr: SocketAddr, config: &NetConfig) -> Result<Connection, NetError> {
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|source| NetError::Io {
            action: "connect to",
            peer: addr.to_string(),
            source,
        })?;
    let _ = stream.set_nodelay(true);
    let mut wire = wire(stream, config);
    let handshake = async {
        let mine = auth::nonce();
        send_msg(
            &mut wire,
            addr,
            &Handshake::Hello {
                version: PROTOCOL_VERSION,
                nonce: mine,
            },
        )
        .await?;
        let refused = |reason: String| NetError::Refused { peer: addr, reason };
        match recv_msg(&mut wire, addr).await? {
            Handshake::Challenge { nonce, proof } => {
                if !auth::verify(&config.secret, Role::Server, &mine, &nonce, &proof) {
                    let _ =
                        send_msg(&mut wire, addr, &Handshake::Refused("bad proof".into())).await;
                    return Err(refused("the server does not know the shared secret".into()));
                }
                let proof = auth::prove(&config.secret, Role::Client, &mine, &nonce);
                send_msg(&mut wire, addr, &Handshake::Proof { proof }).await?;
                match recv_msg(&mut wire, addr).await? {
                    Handshake::Accepted => Ok(()),
                    Handshake::Refused(why) => Err(refused(why)),
                    other => Err(refused(format!("unexpected {other:?}"))),
                }
            }
            Handshake::Refused(why) => Err(refused(why)),
            other => Err(refused(format!("unexpected {other:?}"))),
        }
    };
    tokio::time::timeout(config.handshake_timeout, handshake)
        .await
        .map_err(|_| NetError::Refused {
            peer: addr,
            reason: "the handshake timed out".into(),
        })??;
    Ok(Connection::start(wire, addr, config.window))
}

/// Accepts connections on an address, authenticating each.
#[derive(Debug)]
pub struct Listener {
    listener: TcpListener,
    config: NetConfig,
    rejected: AtomicU64,
}

impl Listener {
    /// Listens on `addr` (bind cluster ports to 127.0.0.1 unless other hosts must reach them).
    pub async fn bind(addr: SocketAddr, config: NetConfig) -> Result<Self, NetError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| NetError::Io {
                action: "listen on",
                peer: addr.to_string(),
                source,
            })?;
        Ok(Listener {
            listener,
            config,
            rejected: AtomicU64::new(0),
        })
    }

    /// The address listened on (with the port the system chose for port 0).
    pub fn local_addr(&self) -> Result<SocketAddr, NetError> {
        self.listener.local_addr().map_err(|source| NetError::Io {
            action: "read the address of",
            peer: "the listener".into(),
            source,
        })
    }

    /// Connections refused so far (failed handshakes).
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// The next peer that authenticates. A peer that fails the handshake is refused, logged
    /// and counted ([`rejected`](Self::rejected)), and the wait goes on. Handshakes run one
    /// at a time, each bounded by the configured timeout.
    pub async fn accept(&self) -> Result<Connection, NetError> {
        loop {
            let (stream, peer) = self
                .listener
                .accept()
                .await
                .map_err(|source| NetError::Io {
                    action: "accept on",
                    peer: "the listener".into(),
                    source,
                })?;
            let _ = stream.set_nodelay(true);
            let mut wire = wire(stream, &self.config);
            let handshake = tokio::time::timeout(
                self.config.handshake_timeout,
                server_handshake(&mut wire, peer, &self.config.secret),
            )
            .await
            .unwrap_or_else(|_| {
                Err(NetError::Refused {
                    peer,
                    reason: "the handshake timed out".into(),
                })
            });
            match handshake {
                Ok(()) => return Ok(Connection::start(wire, peer, self.config.window)),
                Err(e) => {
                    self.rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%peer, error = %e, "refused a connection");
                }
            }
        }
    }
}

async fn server_handshake(
    wire: &mut Wire,
    peer: SocketAddr,
    secret: &Secret,
) -> Result<(), NetError> {
    let refuse = |reason: &str| NetError::Refused {
        peer,
        reason: reason.to_owned(),
    };
    let client = match recv_msg(wire, peer).await? {
        Handshake::Hello { version, nonce } if version == PROTOCOL_VERSION => nonce,
        Handshake::Hello { version, .. } => {
            let why = format!("protocol version {version}, expected {PROTOCOL_VERSION}");
            let _ = send_msg(wire, peer, &Handshake::Refused(why.clone())).await;
            return Err(refuse(&why));
        }
        _ => return Err(refuse("the first message is not a hello")),
    };
    let mine = auth::nonce();
    let proof = auth::prove(secret, Role::Server, &client, &mine);
    send_msg(wire, peer, &Handshake::Challenge { nonce: mine, proof }).await?;
    match recv_msg(wire, peer).await? {
        Handshake::Proof { proof }
            if auth::verify(secret, Role::Client, &client, &mine, &proof) =>
        {
            send_msg(wire, peer, &Handshake::Accepted).await
        }
        Handshake::Proof { .. } => {
            let _ = send_msg(
                wire,
                peer,
                &Handshake::Refused("wrong shared secret".into()),
            )
            .await;
            Err(refuse("the client does not know the shared secret"))
        }
        _ => Err(refuse("expected the client's proof")),
    }
}

/// One frame's bytes, sized for its payload up front: growing the buffer by doubling would copy
/// a batch's bytes several times over.
fn encode_frame(frame: &Frame) -> Result<Bytes, String> {
    let size = match frame {
        Frame::Data { payload, .. } => payload.len() + 24,
        _ => 24,
    };
    postcard::to_extend(frame, Vec::with_capacity(size))
        .map(Bytes::from)
        .map_err(|e| format!("cannot encode a frame: {e}"))
}

/// What the tasks of a connection share with its channels.
#[derive(Debug)]
struct Shared {
    peer: SocketAddr,
    window: u32,
    out: mpsc::Sender<Frame>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Credit of each outgoing channel.
    credits: HashMap<ChannelId, Arc<Semaphore>>,
    /// Each incoming channel's queue and window.
    inbound: HashMap<ChannelId, Inbound>,
    /// Incoming channels the peer closed.
    closed: HashSet<ChannelId>,
    /// Why the connection failed, once it did.
    failure: Option<String>,
}

#[derive(Debug)]
struct Inbound {
    queue: mpsc::Sender<Vec<u8>>,
    window: Arc<Mutex<ReceiverWindow>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    fn credit(&self, channel: ChannelId) -> Arc<Semaphore> {
        let mut state = lock(&self.state);
        let failed = state.failure.is_some();
        state
            .credits
            .entry(channel)
            .or_insert_with(|| {
                let s = Arc::new(Semaphore::new(0));
                if failed {
                    s.close();
                }
                s
            })
            .clone()
    }

    /// Fails every channel: senders stop waiting for credit, receivers see the end.
    fn fail(&self, reason: String) {
        let mut state = lock(&self.state);
        if state.failure.is_none() {
            tracing::debug!(peer = %self.peer, %reason, "connection failed");
            state.failure = Some(reason);
        }
        for credit in state.credits.values() {
            credit.close();
        }
        state.inbound.clear();
    }

    fn closed(&self) -> NetError {
        NetError::Closed {
            peer: self.peer,
            reason: lock(&self.state)
                .failure
                .clone()
                .unwrap_or_else(|| "the connection was dropped".into()),
        }
    }

    /// Handles one frame read from the peer.
    fn on_frame(&self, frame: Frame) -> Result<(), String> {
        let mut state = lock(&self.state);
        match frame {
            Frame::Data { channel, payload } => {
                let inbound = state
                    .inbound
                    .get(&channel)
                    .ok_or_else(|| format!("data for channel {channel}, which is not open"))?;
                lock(&inbound.window)
                    .on_data(payload.len())
                    .map_err(|e| format!("channel {channel}: {e}"))?;
                // The window bounds the queue, so this never finds it full; a receiver that
                // was dropped just discards the rest of its channel.
                let _ = inbound.queue.try_send(payload);
            }
            Frame::Credit { channel, credits } => {
                let credit = state
                    .credits
                    .entry(channel)
                    .or_insert_with(|| Arc::new(Semaphore::new(0)));
                let room = Semaphore::MAX_PERMITS.saturating_sub(credit.available_permits());
                credit.add_permits((credits as usize).min(room));
            }
            Frame::Close { channel } => {
                state.inbound.remove(&channel);
                state.closed.insert(channel);
            }
        }
        Ok(())
    }
}

/// An authenticated connection to one peer, carrying channels both ways. Dropping it closes
/// the socket and ends its channels.
#[derive(Debug)]
pub struct Connection {
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
    writer: JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
    }
}

impl Connection {
    fn start(wire: Wire, peer: SocketAddr, window: u32) -> Self {
        let (out, mut outgoing) = mpsc::channel::<Frame>(OUTGOING_FRAMES);
        let shared = Arc::new(Shared {
            peer,
            window: window.max(crate::credit::MAX_FRAME_CREDITS),
            out,
            state: Mutex::new(State::default()),
        });
        let (mut sink, mut stream) = wire.split();
        let writer_shared = shared.clone();
        let writer = tokio::spawn(async move {
            // Frames already queued are written together and flushed once: one system call for
            // a burst of frames, not one each.
            while let Some(first) = outgoing.recv().await {
                let sent = async {
                    let mut next = Some(first);
                    while let Some(frame) = next {
                        let bytes = encode_frame(&frame)?;
                        sink.feed(bytes).await.map_err(|e| e.to_string())?;
                        next = outgoing.try_recv().ok();
                    }
                    sink.flush().await.map_err(|e| e.to_string())
                }
                .await;
                if let Err(e) = sent {
                    writer_shared.fail(format!("writing failed: {e}"));
                    return;
                }
            }
        });
        let reader_shared = shared.clone();
        let reader = tokio::spawn(async move {
            let reason = loop {
                match stream.next().await {
                    Some(Ok(bytes)) => {
                        let handled = postcard::from_bytes::<Frame>(&bytes)
                            .map_err(|e| format!("undecodable frame: {e}"))
                            .and_then(|frame| reader_shared.on_frame(frame));
                        if let Err(e) = handled {
                            tracing::warn!(peer = %reader_shared.peer, error = %e, "protocol violation; closing");
                            break format!("protocol violation: {e}");
                        }
                    }
                    Some(Err(e)) => break format!("reading failed: {e}"),
                    None => break "the peer closed the connection".into(),
                }
            };
            reader_shared.fail(reason);
        });
        Connection {
            shared,
            reader,
            writer,
        }
    }

    /// The peer's address.
    pub fn peer(&self) -> SocketAddr {
        self.shared.peer
    }

    /// The sending end of `channel` (its credit comes from the peer's
    /// [`receiver`](Self::receiver) of the same channel).
    pub fn sender(&self, channel: ChannelId) -> ChannelSender {
        ChannelSender {
            channel,
            credit: self.shared.credit(channel),
            shared: self.shared.clone(),
            sent: 0,
            held: 0,
        }
    }

    /// Opens the receiving end of `channel` and grants the peer's sender the window.
    pub async fn receiver(&self, channel: ChannelId) -> Result<ChannelReceiver, NetError> {
        let (window, initial) = ReceiverWindow::new(self.shared.window);
        let window = Arc::new(Mutex::new(window));
        let (queue, rx) = mpsc::channel(self.shared.window as usize);
        {
            let mut state = lock(&self.shared.state);
            if state.failure.is_some() {
                drop(state);
                return Err(self.shared.closed());
            }
            if state.inbound.contains_key(&channel) {
                return Err(NetError::DuplicateChannel {
                    peer: self.shared.peer,
                    channel,
                });
            }
            state.inbound.insert(
                channel,
                Inbound {
                    queue,
                    window: window.clone(),
                },
            );
        }
        self.shared
            .out
            .send(Frame::Credit {
                channel,
                credits: initial,
            })
            .await
            .map_err(|_| self.shared.closed())?;
        Ok(ChannelReceiver {
            channel,
            queue: rx,
            window,
            shared: self.shared.clone(),
        })
    }
}

/// The sending end of a channel.
#[derive(Debug)]
pub struct ChannelSender {
    channel: ChannelId,
    credit: Arc<Semaphore>,
    shared: Arc<Shared>,
    sent: u64,
    /// Credits taken by [`ready`](Self::ready) and not yet spent.
    held: u32,
}

impl ChannelSender {
    /// Waits until this sender holds a credit, and keeps it for the next [`send`](Self::send).
    /// Cancel-safe: dropped before it completes, it takes no credit. A caller can gather more
    /// into its next buffer while it waits (a fuller buffer under backpressure, a prompt one
    /// without).
    pub async fn ready(&mut self) -> Result<(), NetError> {
        if self.held == 0 {
            self.take(1).await?;
        }
        Ok(())
    }

    /// Takes `credits` more and holds them.
    async fn take(&mut self, credits: u32) -> Result<(), NetError> {
        let permit = self
            .credit
            .acquire_many(credits)
            .await
            .map_err(|_| self.shared.closed())?;
        permit.forget();
        self.held += credits;
        Ok(())
    }

    /// Sends one buffer, waiting for its credits first ([`credits_for`] its length): a sender
    /// never sends without them.
    pub async fn send(&mut self, payload: Vec<u8>) -> Result<(), NetError> {
        let cost = credits_for(payload.len());
        if self.held < cost {
            self.take(cost - self.held).await?;
        }
        // Credits held beyond the cost (none today: `ready` takes one) stay for the next.
        self.held -= cost;
        self.shared
            .out
            .send(Frame::Data {
                channel: self.channel,
                payload,
            })
            .await
            .map_err(|_| self.shared.closed())?;
        self.sent += 1;
        Ok(())
    }

    /// Tells the receiver nothing more comes on this channel.
    pub async fn close(self) -> Result<(), NetError> {
        self.shared
            .out
            .send(Frame::Close {
                channel: self.channel,
            })
            .await
            .map_err(|_| self.shared.closed())
    }

    /// Buffers sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Credit held now (what it may send without waiting, in credits of
    /// [`CREDIT_BYTES`](crate::credit::CREDIT_BYTES)).
    pub fn credit(&self) -> usize {
        self.credit.available_permits() + self.held as usize
    }
}

/// The receiving end of a channel.
#[derive(Debug)]
pub struct ChannelReceiver {
    channel: ChannelId,
    queue: mpsc::Receiver<Vec<u8>>,
    window: Arc<Mutex<ReceiverWindow>>,
    shared: Arc<Shared>,
}

impl ChannelReceiver {
    /// The next buffer, `None` once the sender closed the channel, or the connection's
    /// failure. Taking a buffer frees it; freed buffers go back to the sender as credit.
    pub async fn recv(&mut self) -> Result<Option<Vec<u8>>, NetError> {
        match self.queue.recv().await {
            Some(payload) => {
                let credit = lock(&self.window).on_consumed(payload.len());
                if let Some(credits) = credit {
                    self.shared
                        .out
                        .send(Frame::Credit {
                            channel: self.channel,
                            credits,
                        })
                        .await
                        .map_err(|_| self.shared.closed())?;
                }
                Ok(Some(payload))
            }
            None if lock(&self.shared.state).closed.contains(&self.channel) => Ok(None),
            None => Err(self.shared.closed()),
        }
    }

    /// Credits the frames queued now hold, received but not taken.
    pub fn queued(&self) -> u32 {
        lock(&self.window).queued()
    }

    /// The most credits ever queued at once: never above the window, however slow the
    /// consumer.
    pub fn max_queued(&self) -> u32 {
        lock(&self.window).max_queued()
    }
}
