//! What crosses a connection: length-prefixed frames (a 4-byte big-endian length, then the
//! postcard encoding of a [`Handshake`] message during the handshake and of a [`Frame`] after
//! it). A frame longer than the configured maximum is refused before it is read.

use serde::{Deserialize, Serialize};

use crate::auth::{NONCE_LEN, Nonce};

/// The protocol version a handshake names; peers of another version are refused.
pub const PROTOCOL_VERSION: u32 = 1;

/// Which logical channel of a connection a frame belongs to (chosen by the peers: for an
/// exchange, the edge and the producer and consumer subtasks).
pub type ChannelId = u64;

/// A message of the handshake (see [`auth`](crate::auth)).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Handshake {
    /// Client → server.
    Hello {
        /// [`PROTOCOL_VERSION`] of the client.
        version: u32,
        /// The client's nonce.
        nonce: Nonce,
    },
    /// Server → client.
    Challenge {
        /// The server's nonce.
        nonce: Nonce,
        /// The server's proof.
        proof: [u8; NONCE_LEN],
    },
    /// Client → server.
    Proof {
        /// The client's proof.
        proof: [u8; NONCE_LEN],
    },
    /// Server → client: the connection is open.
    Accepted,
    /// Either way: the handshake failed, and why (never says more than the reason).
    Refused(String),
}

/// A frame of an open connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Frame {
    /// One buffer of a channel (encoded batches, barriers and watermarks: opaque here), sent
    /// with the credits its length costs ([`credits_for`](crate::credit::credits_for)).
    Data {
        /// The channel.
        channel: ChannelId,
        /// The buffer.
        payload: Vec<u8>,
    },
    /// The receiver of `channel` grants its sender `credits` more credits.
    Credit {
        /// The channel.
        channel: ChannelId,
        /// How many.
        credits: u32,
    },
    /// The sender of `channel` sends nothing more on it.
    Close {
        /// The channel.
        channel: ChannelId,
    },
}
