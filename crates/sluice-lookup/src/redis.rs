//! [`RedisSource`]: string values by key with one `MGET` per batch, or hashes with pipelined
//! `HGETALL`s, over one multiplexed connection per subtask (`redis`'s `ConnectionManager`,
//! which reconnects after a failure).

use crate::error::{Cause, LookupError};
use crate::source::LookupSource;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// What a [`RedisSource`] reads per key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Command {
    /// `MGET k1 k2 ...`: the string (bytes) under each key.
    Mget,
    /// `HGETALL k` for each key, pipelined in one round trip: the fields of each hash.
    HgetAll,
}

/// A Redis server as a lookup source. Keys are strings; values are the bytes of a string
/// ([`mget`](Self::mget)) or the fields of a hash ([`hgetall`](Self::hgetall), as
/// [`RedisValue::Hash`]).
///
/// ```no_run
/// use sluice_lookup::{Lookup, RedisSource, RedisValue};
///
/// let redis = RedisSource::mget("redis://127.0.0.1:6379/").unwrap();
/// assert_eq!(redis.server(), "redis at 127.0.0.1:6379");
/// let lookup = Lookup::new(redis, |user: &u64| format!("user:{user}"), |user, v: Option<&RedisValue>| {
///     Ok(v.and_then(RedisValue::as_bytes).map(|b| (user, String::from_utf8_lossy(b).into_owned())))
/// });
/// # let _ = lookup;
/// ```
#[derive(Clone)]
pub struct RedisSource {
    client: redis::Client,
    server: String,
    command: Command,
    response_timeout: Duration,
    connection: Option<ConnectionManager>,
}

/// A value read from Redis; cloning it (for the cache) only counts a reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RedisValue {
    /// A string's bytes (`MGET`), as the client read them (no copy).
    Bytes(bytes::Bytes),
    /// A hash's fields and values (`HGETALL`), in the server's order.
    Hash(Arc<[(String, String)]>),
}

impl RedisValue {
    /// The bytes of a string value.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            RedisValue::Bytes(b) => Some(b),
            RedisValue::Hash(_) => None,
        }
    }

    /// The value of `field` of a hash value.
    pub fn field(&self, field: &str) -> Option<&str> {
        match self {
            RedisValue::Hash(fields) => fields
                .iter()
                .find(|(f, _)| f == field)
                .map(|(_, v)| v.as_str()),
            RedisValue::Bytes(_) => None,
        }
    }
}

impl RedisSource {
    /// String values, one `MGET` per batch. `url` is a `redis://` URL.
    pub fn mget(url: &str) -> Result<Self, LookupError> {
        Self::open(url, Command::Mget)
    }

    /// Hash values, one pipelined `HGETALL` per key, one round trip per batch. A key with no
    /// hash is missing.
    pub fn hgetall(url: &str) -> Result<Self, LookupError> {
        Self::open(url, Command::HgetAll)
    }

    /// How long a round trip may take before it counts as a connection failure (default 5 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// The server, as messages name it.
    pub fn server(&self) -> &str {
        &self.server
    }

    fn open(url: &str, command: Command) -> Result<Self, LookupError> {
        let client = redis::Client::open(url).map_err(|e| LookupError::Config {
            server: "redis".to_string(),
            reason: format!("invalid URL: {e}"),
        })?;
        let server = format!("redis at {}", client.get_connection_info().addr());
        Ok(RedisSource {
            client,
            server,
            command,
            response_timeout: Duration::from_secs(5),
            connection: None,
        })
    }

    fn error(&self, e: redis::RedisError) -> LookupError {
        let server = self.server.clone();
        let transient = e.is_io_error()
            || e.is_connection_refusal()
            || e.is_connection_dropped()
            || e.is_timeout();
        let source: Cause = Box::new(e);
        if transient {
            LookupError::Connection { server, source }
        } else {
            LookupError::Rejected { server, source }
        }
    }
}

impl LookupSource for RedisSource {
    type Key = String;
    type Value = RedisValue;

    fn server(&self) -> &str {
        &self.server
    }

    fn connect(&mut self) -> Result<(), LookupError> {
        // The manager's own reconnection is kept short: `Lookup` retries failed round trips
        // with its `Reconnect` policy, and each new request makes the manager try again.
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(Duration::from_millis(100))
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(self.response_timeout));
        let manager = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|e| self.error(e))?;
        self.connection = Some(manager);
        Ok(())
    }

    fn fetch(
        &self,
        keys: &[String],
    ) -> impl Future<Output = Result<Vec<Option<RedisValue>>, LookupError>> + Send + 'static {
        let this = self.clone();
        let command = match self.command {
            Command::Mget => {
                // Sized once: the command's buffers would otherwise grow key by key.
                let bytes = 4 + keys.iter().map(String::len).sum::<usize>();
                let mut cmd = redis::Cmd::with_capacity(keys.len() + 1, bytes);
                cmd.arg("MGET").arg(keys);
                Ok(cmd)
            }
            Command::HgetAll => {
                let mut pipe = redis::pipe();
                for k in keys {
                    pipe.hgetall(k);
                }
                Err(pipe)
            }
        };
        async move {
            let Some(mut conn) = this.connection.clone() else {
                return Err(LookupError::Config {
                    server: this.server.clone(),
                    reason: "the source was not connected (open was not called)".into(),
                });
            };
            match command {
                Ok(mget) => {
                    let values: Vec<Option<bytes::Bytes>> = mget
                        .query_async(&mut conn)
                        .await
                        .map_err(|e| this.error(e))?;
                    Ok(values
                        .into_iter()
                        .map(|v| v.map(RedisValue::Bytes))
                        .collect())
                }
                Err(pipe) => {
                    let hashes: Vec<Vec<(String, String)>> = pipe
                        .query_async(&mut conn)
                        .await
                        .map_err(|e| this.error(e))?;
                    Ok(hashes
                        .into_iter()
                        .map(|h| (!h.is_empty()).then(|| RedisValue::Hash(h.into())))
                        .collect())
                }
            }
        }
    }

    fn weight(key: &String, value: &RedisValue) -> u32 {
        let value = match value {
            RedisValue::Bytes(b) => b.len(),
            RedisValue::Hash(fields) => fields.iter().map(|(f, v)| f.len() + v.len() + 48).sum(),
        };
        u32::try_from(key.len() + value + 64).unwrap_or(u32::MAX)
    }
}
