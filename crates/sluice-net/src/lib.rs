//! The network layer of sluice's cluster mode (issue 15): record batches, barriers and
//! watermarks between task managers travel as buffers of *channels*, many channels multiplexed
//! over one TCP connection per pair of processes, with credit-based flow control (a receiver
//! grants buffers; a sender never sends without credit) and mutual authentication by a shared
//! secret before anything else crosses.
//!
//! Where to find things:
//! - [`credit`]: the pure flow-control rules of one channel ([`credit::ReceiverWindow`],
//!   [`credit::SenderCredit`]), with their invariant property-tested;
//! - [`auth`]: the handshake's proofs (HMAC-SHA256 over both sides' nonces), pure;
//! - [`frame`]: what crosses the wire ([`frame::Handshake`], [`frame::Frame`]);
//! - [`connection`]: the TCP edge: [`connect`], [`Listener`], [`Connection`] and its
//!   [`ChannelSender`] / [`ChannelReceiver`].
//!
//! ```
//! use sluice_net::auth::Secret;
//! use sluice_net::{Listener, NetConfig, connect};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let config = NetConfig::new(Secret::new(b"shared by every process".to_vec()).unwrap());
//! let listener = Listener::bind("127.0.0.1:0".parse().unwrap(), config.clone()).await.unwrap();
//! let addr = listener.local_addr().unwrap();
//! let (server, client) = tokio::join!(listener.accept(), connect(addr, &config));
//! let (server, client) = (server.unwrap(), client.unwrap());
//!
//! // Channel 7 from the client to the server: the receiver opens it and grants credit.
//! let mut rx = server.receiver(7).await.unwrap();
//! let mut tx = client.sender(7);
//! tx.send(b"batch 1".to_vec()).await.unwrap();
//! tx.send(b"barrier 1".to_vec()).await.unwrap();
//! tx.close().await.unwrap();
//! assert_eq!(rx.recv().await.unwrap(), Some(b"batch 1".to_vec()));
//! assert_eq!(rx.recv().await.unwrap(), Some(b"barrier 1".to_vec()));
//! assert_eq!(rx.recv().await.unwrap(), None);
//! # });
//! ```

pub mod auth;
pub mod connection;
pub mod credit;
pub mod frame;

pub use connection::{
    ChannelReceiver, ChannelSender, Connection, Listener, NetConfig, NetError, connect,
};
