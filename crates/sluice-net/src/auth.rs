//! Mutual authentication by a shared secret, as pure functions over the handshake's bytes.
//!
//! Neither side sends the secret. Each sends a fresh random nonce and proves it knows the
//! secret with an HMAC-SHA256 over both nonces and its role, so a proof cannot be replayed to
//! another connection (new nonces) or reflected back to its sender (the role differs):
//!
//! ```text
//! client → server  Hello     { version, client nonce }
//! server → client  Challenge { server nonce, server proof = HMAC(secret, "server" ‖ client nonce ‖ server nonce) }
//! client → server  Proof     { client proof = HMAC(secret, "client" ‖ server nonce ‖ client nonce) }
//! server → client  Accepted
//! ```
//!
//! The client checks the server's proof before it proves anything, so it never talks to an
//! impostor; the server drops a connection whose proof is wrong, and logs it.
//!
//! ```
//! use sluice_net::auth::{Role, Secret, nonce, prove, verify};
//!
//! let secret = Secret::new(b"a long random shared secret".to_vec()).unwrap();
//! let (client_nonce, server_nonce) = (nonce(), nonce());
//! let proof = prove(&secret, Role::Server, &client_nonce, &server_nonce);
//! assert!(verify(&secret, Role::Server, &client_nonce, &server_nonce, &proof));
//! // Reflected as the client's proof, or checked with another secret, it fails.
//! assert!(!verify(&secret, Role::Client, &client_nonce, &server_nonce, &proof));
//! let other = Secret::new(b"another secret of some length".to_vec()).unwrap();
//! assert!(!verify(&other, Role::Server, &client_nonce, &server_nonce, &proof));
//! ```

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use std::fmt;

/// The length of a nonce and of a proof.
pub const NONCE_LEN: usize = 32;
/// The fewest bytes a secret may have.
pub const MIN_SECRET_LEN: usize = 16;

/// A random nonce.
pub type Nonce = [u8; NONCE_LEN];

/// The shared secret every process of a cluster is configured with. Its `Debug` output hides
/// it.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

/// A secret too short to be one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the shared secret has {len} bytes; use at least {MIN_SECRET_LEN} random bytes")]
pub struct WeakSecret {
    /// The length given.
    pub len: usize,
}

impl Secret {
    /// A secret of `bytes`, at least [`MIN_SECRET_LEN`] of them.
    pub fn new(bytes: Vec<u8>) -> Result<Self, WeakSecret> {
        if bytes.len() < MIN_SECRET_LEN {
            return Err(WeakSecret { len: bytes.len() });
        }
        Ok(Secret(bytes))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes, hidden)", self.0.len())
    }
}

/// Which side of the handshake proves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The side that connected.
    Client,
    /// The side that accepted.
    Server,
}

/// A fresh random nonce.
pub fn nonce() -> Nonce {
    let mut n = [0u8; NONCE_LEN];
    rand::rng().fill_bytes(&mut n);
    n
}

fn mac(secret: &Secret, role: Role, client: &Nonce, server: &Nonce) -> Hmac<Sha256> {
    // HMAC takes keys of any length: this cannot fail.
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&secret.0)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of every length"));
    match role {
        Role::Server => {
            mac.update(b"sluice-net/1 server");
            mac.update(client);
            mac.update(server);
        }
        Role::Client => {
            mac.update(b"sluice-net/1 client");
            mac.update(server);
            mac.update(client);
        }
    }
    mac
}

/// The proof of `role` for the nonces of one handshake.
pub fn prove(secret: &Secret, role: Role, client: &Nonce, server: &Nonce) -> [u8; NONCE_LEN] {
    mac(secret, role, client, server)
        .finalize()
        .into_bytes()
        .into()
}

/// The bearer token of request-based protocols (the gRPC control plane), derived from the
/// secret so that the secret itself never crosses the wire: hex of HMAC-SHA256 over a fixed
/// label. Compare tokens with [`token_matches`].
///
/// ```
/// use sluice_net::auth::{Secret, bearer_token, token_matches};
///
/// let secret = Secret::new(b"a long random shared secret".to_vec()).unwrap();
/// let token = bearer_token(&secret);
/// assert_eq!(token.len(), 64);
/// assert!(token_matches(&secret, &token));
/// assert!(!token_matches(&secret, "0123"));
/// ```
pub fn bearer_token(secret: &Secret) -> String {
    let tag = token_mac(secret).finalize().into_bytes();
    tag.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `token` is the secret's [`bearer_token`] (compared in constant time).
pub fn token_matches(secret: &Secret, token: &str) -> bool {
    let Some(bytes) = decode_hex(token) else {
        return false;
    };
    token_mac(secret).verify_slice(&bytes).is_ok()
}

fn token_mac(secret: &Secret) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&secret.0)
        .unwrap_or_else(|_| unreachable!("HMAC accepts keys of every length"));
    mac.update(b"sluice-control/1 bearer token");
    mac
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

/// Whether `proof` is `role`'s proof for these nonces (compared in constant time).
pub fn verify(secret: &Secret, role: Role, client: &Nonce, server: &Nonce, proof: &[u8]) -> bool {
    mac(secret, role, client, server)
        .verify_slice(proof)
        .is_ok()
}
