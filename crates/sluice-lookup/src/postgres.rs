//! [`PostgresSource`]: rows by key from PostgreSQL, one prepared `... WHERE key = ANY($1)`
//! query per batch, over a small connection pool per subtask (`deadpool-postgres`).

use crate::error::{Cause, LookupError};
use crate::source::LookupSource;
use deadpool_postgres::{Pool, PoolError, Runtime, Timeouts};
use std::fmt::Debug;
use std::future::Future;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::types::{FromSqlOwned, ToSql};
use tokio_postgres::{NoTls, Row};

/// A PostgreSQL query as a lookup source: `query` takes the batch's keys as an array in `$1`
/// and returns rows whose first column is the key, for example
/// `SELECT id, name, tier FROM profiles WHERE id = ANY($1)`. A key with no row is missing; with
/// several rows, the last one wins. Values are the rows (`Arc<Row>`); decode columns with
/// `row.try_get`.
///
/// The query is prepared once per connection. The pool holds at most
/// [`max_connections`](Self::max_connections) connections per subtask (default 2).
///
/// ```no_run
/// use sluice_lookup::{Lookup, PostgresSource};
///
/// let pg = PostgresSource::<i64>::new(
///     "postgres://sluice:sluice@127.0.0.1:5432/sluice",
///     "SELECT id, name FROM profiles WHERE id = ANY($1)",
/// )
/// .unwrap();
/// assert_eq!(pg.server(), "postgres at 127.0.0.1:5432");
/// let lookup = Lookup::new(pg, |user: &i64| *user, |user, row: Option<&std::sync::Arc<tokio_postgres::Row>>| {
///     Ok(row.map(|r| (user, r.get::<_, String>(1))))
/// });
/// # let _ = lookup;
/// ```
pub struct PostgresSource<K> {
    config: deadpool_postgres::Config,
    query: Arc<str>,
    server: String,
    pool: Option<Pool>,
    _key: PhantomData<fn() -> K>,
}

impl<K> Clone for PostgresSource<K> {
    fn clone(&self) -> Self {
        PostgresSource {
            config: self.config.clone(),
            query: self.query.clone(),
            server: self.server.clone(),
            pool: self.pool.clone(),
            _key: PhantomData,
        }
    }
}

impl<K> PostgresSource<K> {
    /// A source running `query` on the database at `url` (`postgres://user:password@host:port/db`).
    pub fn new(url: &str, query: &str) -> Result<Self, LookupError> {
        let parsed: tokio_postgres::Config = url.parse().map_err(|e| LookupError::Config {
            server: "postgres".to_string(),
            reason: format!("invalid URL: {e}"),
        })?;
        let host = match parsed.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            #[cfg(unix)]
            Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
            None => "localhost".to_string(),
        };
        let port = parsed.get_ports().first().copied().unwrap_or(5432);
        let mut config = deadpool_postgres::Config::new();
        config.url = Some(url.to_string());
        config.connect_timeout = Some(Duration::from_secs(2));
        let mut pool = deadpool_postgres::PoolConfig::new(2);
        pool.timeouts = Timeouts {
            wait: Some(Duration::from_secs(5)),
            create: Some(Duration::from_secs(2)),
            recycle: Some(Duration::from_secs(2)),
        };
        config.pool = Some(pool);
        Ok(PostgresSource {
            config,
            query: Arc::from(query),
            server: format!("postgres at {host}:{port}"),
            pool: None,
            _key: PhantomData,
        })
    }

    /// At most `n` connections per subtask (at least 1).
    pub fn max_connections(mut self, n: usize) -> Self {
        if let Some(pool) = &mut self.config.pool {
            pool.max_size = n.max(1);
        }
        self
    }

    /// The server, as messages name it.
    pub fn server(&self) -> &str {
        &self.server
    }

    fn error(&self, e: tokio_postgres::Error) -> LookupError {
        let server = self.server.clone();
        let rejected = e.as_db_error().is_some();
        let source: Cause = Box::new(e);
        if rejected {
            LookupError::Rejected { server, source }
        } else {
            LookupError::Connection { server, source }
        }
    }

    fn pool_error(&self, e: PoolError) -> LookupError {
        match e {
            PoolError::Backend(e) => self.error(e),
            other => LookupError::Connection {
                server: self.server.clone(),
                source: Box::new(other),
            },
        }
    }
}

impl<K> LookupSource for PostgresSource<K>
where
    K: ToSql + FromSqlOwned + Clone + Eq + Hash + Debug + Send + Sync + 'static,
{
    type Key = K;
    type Value = Arc<Row>;

    fn server(&self) -> &str {
        &self.server
    }

    fn connect(&mut self) -> Result<(), LookupError> {
        let pool = self
            .config
            .create_pool(Some(Runtime::Tokio1), NoTls)
            .map_err(|e| LookupError::Config {
                server: self.server.clone(),
                reason: e.to_string(),
            })?;
        self.pool = Some(pool);
        Ok(())
    }

    fn fetch(
        &self,
        keys: &[K],
    ) -> impl Future<Output = Result<Vec<Option<Arc<Row>>>, LookupError>> + Send + 'static {
        let this = self.clone();
        let keys = keys.to_vec();
        async move {
            let Some(pool) = &this.pool else {
                return Err(LookupError::Config {
                    server: this.server.clone(),
                    reason: "the source was not connected (open was not called)".into(),
                });
            };
            let client = pool.get().await.map_err(|e| this.pool_error(e))?;
            let statement = client
                .prepare_cached(&this.query)
                .await
                .map_err(|e| this.error(e))?;
            let rows = client
                .query(&statement, &[&keys])
                .await
                .map_err(|e| this.error(e))?;
            let mut by_key: std::collections::HashMap<K, Arc<Row>> =
                std::collections::HashMap::with_capacity(rows.len());
            for row in rows {
                let key: K = row.try_get(0).map_err(|e| LookupError::Answer {
                    server: this.server.clone(),
                    reason: format!("the first column must be the key: {e}"),
                })?;
                by_key.insert(key, Arc::new(row));
            }
            Ok(keys.iter().map(|k| by_key.get(k).cloned()).collect())
        }
    }

    fn weight(key: &K, value: &Arc<Row>) -> u32 {
        let _ = key;
        u32::try_from(value.raw_size_bytes() + 64 + std::mem::size_of::<K>()).unwrap_or(u32::MAX)
    }
}
