//! [`LookupSource`]: where a lookup's values come from — a key in, a value or nothing out, many
//! keys per round trip. Implemented by [`RedisSource`](crate::RedisSource) and
//! [`PostgresSource`](crate::PostgresSource); [`Lookup`](crate::Lookup) turns any source into a
//! batch function with retries of connection failures and an optional cache.

use crate::error::LookupError;
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;

/// A store answering many keys in one round trip.
///
/// A source is cloned once per subtask before the job starts; [`connect`](Self::connect) then
/// runs once per subtask (inside the tokio runtime) and should create its client without
/// waiting for the server: clients connect on first use, so a server that is down surfaces as a
/// [`LookupError::Connection`] from [`fetch`](Self::fetch), which is retried.
pub trait LookupSource: Clone + Send + Sync + 'static {
    /// What is looked up.
    type Key: Clone + Eq + Hash + Debug + Send + Sync + 'static;
    /// What a key maps to.
    type Value: Clone + Send + Sync + 'static;

    /// The server, for messages: its kind and address, never a password
    /// (`redis at 127.0.0.1:6379`).
    fn server(&self) -> &str;

    /// Creates this subtask's client (without waiting for the server).
    fn connect(&mut self) -> Result<(), LookupError>;

    /// Looks up `keys` (distinct) in one round trip: one answer per key, in the same order.
    /// The future owns what it needs.
    fn fetch(
        &self,
        keys: &[Self::Key],
    ) -> impl Future<Output = Result<Vec<Option<Self::Value>>, LookupError>> + Send + 'static;

    /// An estimate of the memory an entry takes in a cache bounded by bytes
    /// ([`LookupCache::max_bytes`](crate::LookupCache::max_bytes)).
    fn weight(key: &Self::Key, value: &Self::Value) -> u32 {
        let _ = (key, value);
        u32::try_from(std::mem::size_of::<Self::Key>() + std::mem::size_of::<Self::Value>())
            .unwrap_or(u32::MAX)
    }
}
