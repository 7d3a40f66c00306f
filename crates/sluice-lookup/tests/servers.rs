//! Lookups against real servers: Debian's redis-server and PostgreSQL, found through
//! `SLUICE_REDIS_URL` and `SLUICE_POSTGRES_URL` (`.ci/services` starts them on 127.0.0.1 and sets
//! both). Without a variable its tests are skipped with a notice, except under CI (`CI` set),
//! where a missing server is a failure.
//!
//! Each test loads its own data (keys and tables named after the test and the process), so tests
//! run side by side on the same servers. Outages are made with an [`OutageProxy`] in front of the
//! server: stopping it closes its port and every connection through it, as a stopped server
//! would, and starting it opens the same port again, with the server's data intact.

use sluice_async_io::{AsyncBatchFunction, AsyncRetryStrategy, AsyncWait};
use sluice_connectors::file::{JsonLinesSink, read_committed};
use sluice_lookup::{
    Lookup, LookupCache, LookupMetrics, PostgresSource, Reconnect, RedisSource, RedisValue, Row,
};
use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::prelude::*;
use sluice_runtime::testing::FailureInjector;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Users `0..USERS` have a profile named `name-<id>`, except every tenth.
const USERS: u64 = 2_000;

fn has_profile(user: u64) -> bool {
    !user.is_multiple_of(10)
}

/// What every job here should output for `inputs`.
fn expected(inputs: impl IntoIterator<Item = u64>) -> Vec<(u64, String)> {
    let mut v: Vec<(u64, String)> = inputs
        .into_iter()
        .filter(|u| has_profile(*u))
        .map(|u| (u, format!("name-{u}")))
        .collect();
    v.sort();
    v
}

/// Asserts `got == want`, reporting the sizes and the first difference rather than both lists.
#[track_caller]
fn assert_same(got: &[Out], want: &[Out]) {
    if got != want {
        let at = got.iter().zip(want).position(|(g, w)| g != w);
        panic!(
            "got {} records, want {}; first difference at {at:?}: got {:?}, want {:?}",
            got.len(),
            want.len(),
            at.and_then(|i| got.get(i)),
            at.and_then(|i| want.get(i)),
        );
    }
}

/// The URL in `var`, or `None` (the test is skipped) when it is not set outside CI.
fn server_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) => Some(url),
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!("{var} is not set: .ci/run starts the servers and sets it (.ci/services)")
        }
        Err(_) => {
            eprintln!("skipped: {var} is not set (`source .ci/services` starts the servers)");
            None
        }
    }
}

/// A name unique to this test in this process.
fn unique(test: &str) -> String {
    format!("sluice_{test}_{}", std::process::id())
}

// ---- data ---------------------------------------------------------------------------------

async fn load_redis(url: &str, prefix: &str) {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut pipe = redis::pipe();
    for u in (0..USERS).filter(|u| has_profile(*u)) {
        pipe.set(format!("{prefix}:{u}"), format!("name-{u}"))
            .ignore();
        pipe.hset(format!("{prefix}:h:{u}"), "name", format!("name-{u}"))
            .ignore();
    }
    let () = pipe.query_async(&mut conn).await.unwrap();
}

async fn load_postgres(url: &str, table: &str) {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {table};
             CREATE TABLE {table} (id BIGINT PRIMARY KEY, name TEXT NOT NULL);
             INSERT INTO {table} SELECT i, 'name-' || i FROM generate_series(0, {last}) AS i
                 WHERE i % 10 <> 0;",
            last = USERS - 1
        ))
        .await
        .unwrap();
}

// ---- lookups ------------------------------------------------------------------------------

type Out = (u64, String);

/// A Redis lookup of the profiles under `prefix`.
type RedisLookup = Lookup<u64, RedisSource, Box<dyn Fn(&u64) -> String + Send + Sync>, DecodeRedis>;
type DecodeRedis = fn(u64, Option<&RedisValue>) -> Result<Option<Out>, UserError>;

fn redis_lookup(url: &str, prefix: &str, reconnect: Reconnect) -> RedisLookup {
    let prefix = prefix.to_string();
    let decode: DecodeRedis = |u, v| {
        Ok(v.and_then(RedisValue::as_bytes)
            .map(|b| (u, String::from_utf8_lossy(b).into_owned())))
    };
    Lookup::new(
        RedisSource::mget(url).unwrap(),
        Box::new(move |u: &u64| format!("{prefix}:{u}"))
            as Box<dyn Fn(&u64) -> String + Send + Sync>,
        decode,
    )
    .reconnect(reconnect)
}

fn redis_hash_lookup(
    url: &str,
    prefix: &str,
) -> impl AsyncBatchFunction<u64, Out = Out, Results = Option<Out>> {
    let prefix = prefix.to_string();
    Lookup::new(
        RedisSource::hgetall(url).unwrap(),
        move |u: &u64| format!("{prefix}:h:{u}"),
        |u, v: Option<&RedisValue>| Ok(v.and_then(|h| h.field("name")).map(|n| (u, n.into()))),
    )
}

/// A PostgreSQL lookup of the profiles in a table.
type PostgresLookup = Lookup<u64, PostgresSource<i64>, fn(&u64) -> i64, DecodeRow>;
type DecodeRow = fn(u64, Option<&Arc<Row>>) -> Result<Option<Out>, UserError>;

fn postgres_lookup(url: &str, table: &str, reconnect: Reconnect) -> PostgresLookup {
    let query = format!("SELECT id, name FROM {table} WHERE id = ANY($1)");
    let decode: DecodeRow = |u, row| match row {
        Some(r) => Ok(Some((u, r.try_get::<_, String>(1)?))),
        None => Ok(None),
    };
    Lookup::new(
        PostgresSource::<i64>::new(url, &query).unwrap(),
        (|u: &u64| *u as i64) as fn(&u64) -> i64,
        decode,
    )
    .reconnect(reconnect)
}

/// Users in a Zipf-like order: low ids often, so batches repeat keys and the cache hits.
fn skewed_users(n: u64) -> Vec<u64> {
    (0..n)
        .map(|i| (i * i * 7 + i) % (USERS / 4 + i % (USERS / 2)))
        .collect()
}

/// Runs `inputs` through a batched lookup at parallelism 2 and returns the sorted output.
async fn run_lookup<B>(lookup: B, inputs: Vec<u64>, cache: bool) -> Vec<Out>
where
    B: AsyncBatchFunction<u64, Out = Out>,
{
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(64);
    let _ = cache;
    let out = AsyncWait::batched(lookup)
        .max_batch_size(50)
        .max_batch_delay(Duration::from_millis(2))
        .capacity(200)
        .timeout(Duration::from_secs(60))
        .unordered()
        .apply(&env.from_iter(inputs))
        .unwrap()
        .collect();
    env.execute("lookup").await.unwrap();
    let mut got = out.take();
    got.sort();
    got
}

// ---- an outage proxy ------------------------------------------------------------------------

/// A TCP proxy in front of a server whose port can be closed and opened again.
struct OutageProxy {
    addr: SocketAddr,
    target: SocketAddr,
    running: Option<(CancellationToken, JoinHandle<()>)>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl OutageProxy {
    /// A proxy to `target` on a free port of 127.0.0.1, started.
    async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut proxy = OutageProxy {
            addr: listener.local_addr().unwrap(),
            target,
            running: None,
            connections: Arc::default(),
        };
        proxy.serve(listener);
        proxy
    }

    fn serve(&mut self, listener: TcpListener) {
        let token = CancellationToken::new();
        let (target, connections, stop) = (self.target, self.connections.clone(), token.clone());
        let accept = tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = stop.cancelled() => return,
                    a = listener.accept() => a,
                };
                let Ok((mut client, _)) = accepted else {
                    continue;
                };
                let stop = stop.clone();
                let relay = tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                    }
                });
                connections.lock().unwrap().push(relay);
            }
        });
        self.running = Some((token, accept));
    }

    /// Closes the port and every connection, as a stopped server does; returns once they are.
    async fn stop(&mut self) {
        if let Some((token, accept)) = self.running.take() {
            token.cancel();
            let _ = accept.await;
            let relays: Vec<_> = self.connections.lock().unwrap().drain(..).collect();
            for r in relays {
                let _ = r.await;
            }
        }
    }

    /// Opens the same port again.
    async fn restart(&mut self) {
        let listener = TcpListener::bind(self.addr).await.unwrap();
        self.serve(listener);
    }

    /// `url` with its host and port replaced by the proxy's.
    fn url(&self, url: &str) -> String {
        let target = format!("127.0.0.1:{}", self.target.port());
        assert!(url.contains(&target), "{url} does not name {target}");
        url.replace(&target, &self.addr.to_string())
    }
}

/// The address of the server of `url` (it must be on 127.0.0.1).
fn server_addr(url: &str, default_port: u16) -> SocketAddr {
    let rest = url
        .split("127.0.0.1")
        .nth(1)
        .expect("the server is on 127.0.0.1");
    let port = rest
        .strip_prefix(':')
        .and_then(|r| r.split(['/', '?']).next())
        .and_then(|p| p.parse().ok())
        .unwrap_or(default_port);
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A job of `n` rate-limited records through `lookup`, stopped and restarted behind `proxy`
/// once `metrics` show progress, started again once the lookup has retried; all results must
/// arrive, exactly once.
async fn survive_an_outage<B>(lookup: B, metrics: LookupMetrics, proxy: &mut OutageProxy)
where
    B: AsyncBatchFunction<u64, Out = Out>,
{
    let n = 3_000u64;
    let env = StreamEnvironment::new();
    env.set_parallelism(1).set_batch_size(32);
    let users = env.from_generator(Generator::new(|i| i % USERS).take(n).rate_limit(3_000.0));
    let out = AsyncWait::batched(lookup)
        .max_batch_size(20)
        .max_batch_delay(Duration::from_millis(2))
        .capacity(100)
        .timeout(Duration::from_secs(120))
        .apply(&users)
        .unwrap()
        .collect();
    let job = env.submit("outage").unwrap();
    metrics.wait_until(|m| m.round_trips >= 20).await;
    proxy.stop().await;
    metrics.wait_until(|m| m.connection_retries >= 2).await;
    proxy.restart().await;
    let result = job.await.unwrap();
    assert!(metrics.snapshot().connection_retries >= 2);
    let mut got = out.take();
    got.sort();
    assert_same(&got, &expected((0..n).map(|i| i % USERS)));
    let _ = result;
}

// ---- Redis --------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lookups_are_correct_batched_cached_and_as_hashes() {
    let Some(url) = server_url("SLUICE_REDIS_URL") else {
        return;
    };
    let prefix = unique("redis_correct");
    load_redis(&url, &prefix).await;
    let inputs = skewed_users(5_000);
    let want = expected(inputs.clone());

    let plain = redis_lookup(&url, &prefix, Reconnect::default());
    let plain_metrics = plain.metrics();
    assert_same(&run_lookup(plain, inputs.clone(), false).await, &want);
    let m = plain_metrics.snapshot();
    assert_eq!((m.hits, m.misses), (0, 5_000));
    assert!(m.round_trips < 5_000 / 10, "not batched: {m:?}");

    let cached = redis_lookup(&url, &prefix, Reconnect::default())
        .with_cache(LookupCache::max_entries(10_000).cache_missing(true));
    let metrics = cached.metrics();
    assert_same(&run_lookup(cached, inputs.clone(), true).await, &want);
    let m = metrics.snapshot();
    assert_eq!(m.hits + m.misses, 5_000);
    assert!(m.hits > 2_000, "the skewed keys should mostly hit: {m:?}");
    assert!(m.keys_fetched <= 2 * USERS, "{m:?}");

    assert_same(
        &run_lookup(redis_hash_lookup(&url, &prefix), inputs, false).await,
        &want,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_server_stopped_mid_run_is_survived_through_retries() {
    let Some(url) = server_url("SLUICE_REDIS_URL") else {
        return;
    };
    let prefix = unique("redis_outage");
    load_redis(&url, &prefix).await;
    let mut proxy = OutageProxy::start(server_addr(&url, 6379)).await;
    let lookup = redis_lookup(
        &proxy.url(&url),
        &prefix,
        Reconnect::new(200, Duration::from_millis(5), Duration::from_millis(100)),
    );
    let metrics = lookup.metrics();
    survive_an_outage(lookup, metrics, &mut proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_server_that_stays_down_fails_the_job_naming_it() {
    let Some(url) = server_url("SLUICE_REDIS_URL") else {
        return;
    };
    let mut proxy = OutageProxy::start(server_addr(&url, 6379)).await;
    let proxied = proxy.url(&url);
    proxy.stop().await;
    let lookup = redis_lookup(
        &proxied,
        "unused",
        Reconnect::new(3, Duration::from_millis(5), Duration::from_millis(20)),
    );
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    AsyncWait::batched(lookup)
        .timeout(Duration::from_secs(60))
        .name("profile lookup")
        .apply(&env.from_iter(0u64..10))
        .unwrap()
        .discard();
    let msg = env.execute("down").await.unwrap_err().to_string();
    let server = format!("redis at {} is unavailable: 4 attempts", proxy.addr);
    assert!(msg.contains(&server), "{msg}");
    assert!(msg.contains("'profile lookup'"), "{msg}");
}

// ---- PostgreSQL ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lookups_are_correct_batched_and_cached_by_bytes() {
    let Some(url) = server_url("SLUICE_POSTGRES_URL") else {
        return;
    };
    let table = unique("pg_correct");
    load_postgres(&url, &table).await;
    let inputs = skewed_users(5_000);
    let want = expected(inputs.clone());

    let plain = postgres_lookup(&url, &table, Reconnect::default());
    let plain_metrics = plain.metrics();
    assert_same(&run_lookup(plain, inputs.clone(), false).await, &want);
    assert!(plain_metrics.snapshot().round_trips < 5_000 / 10);

    // A cache too small for the keys: it evicts, and answers stay right.
    let cached = postgres_lookup(&url, &table, Reconnect::default())
        .with_cache(LookupCache::max_bytes(16 * 1024).time_to_live(Duration::from_secs(60)));
    let metrics = cached.metrics();
    assert_same(&run_lookup(cached, inputs, true).await, &want);
    let m = metrics.snapshot();
    assert_eq!(m.hits + m.misses, 5_000);
    assert!(m.hits > 0, "{m:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_server_stopped_mid_run_is_survived_through_retries() {
    let Some(url) = server_url("SLUICE_POSTGRES_URL") else {
        return;
    };
    let table = unique("pg_outage");
    load_postgres(&url, &table).await;
    let mut proxy = OutageProxy::start(server_addr(&url, 5432)).await;
    let lookup = postgres_lookup(
        &proxy.url(&url),
        &table,
        Reconnect::new(200, Duration::from_millis(5), Duration::from_millis(100)),
    );
    let metrics = lookup.metrics();
    survive_an_outage(lookup, metrics, &mut proxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_server_that_stays_down_fails_the_job_naming_it() {
    let Some(url) = server_url("SLUICE_POSTGRES_URL") else {
        return;
    };
    let mut proxy = OutageProxy::start(server_addr(&url, 5432)).await;
    let proxied = proxy.url(&url);
    proxy.stop().await;
    let lookup = postgres_lookup(
        &proxied,
        "unused",
        Reconnect::new(2, Duration::from_millis(5), Duration::from_millis(20)),
    );
    let env = StreamEnvironment::new();
    env.set_parallelism(1);
    AsyncWait::batched(lookup)
        .timeout(Duration::from_secs(60))
        .apply(&env.from_iter(0u64..10))
        .unwrap()
        .discard();
    let msg = env.execute("down").await.unwrap_err().to_string();
    let server = format!(
        "postgres at 127.0.0.1:{} is unavailable: 3 attempts",
        proxy.addr.port()
    );
    assert!(msg.contains(&server), "{msg}");
}

// ---- exactly once -------------------------------------------------------------------------

/// Checkpoints every few milliseconds, failures injected, retried lookup errors: the committed
/// output holds every enriched record exactly once.
async fn exactly_once<B>(lookup: B, seed: u64)
where
    B: AsyncBatchFunction<u64, Out = Out, Results = Option<Out>>,
{
    let n = 4_000u64;
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = tempfile::tempdir().unwrap();
    let env = StreamEnvironment::new();
    env.set_parallelism(2).set_batch_size(16);
    env.enable_checkpointing(Duration::from_millis(5));
    env.set_checkpoint_storage(checkpoints.path());
    env.set_restart_strategy(RestartStrategy::fixed_delay(20, Duration::ZERO).unwrap());
    let source = env
        .from_generator(Generator::new(|i| i).take(n).rate_limit(100_000.0))
        .process(FailureInjector::at_record(0, 1_000))
        .process(FailureInjector::seeded(0.02, seed).times(2));
    let retry = AsyncRetryStrategy::fixed_delay(3, Duration::from_millis(5))
        .if_error(|_| true)
        .build()
        .unwrap();
    AsyncWait::batched(lookup)
        .max_batch_size(40)
        .max_batch_delay(Duration::from_millis(1))
        .capacity(80)
        .timeout(Duration::from_secs(60))
        .retry(retry)
        .unordered()
        .apply(&source.map(|i| i % USERS))
        .unwrap()
        .sink_to_exactly_once(JsonLinesSink::new(dir.path(), "enriched"));
    let result = env.execute("lookup-exactly-once").await.unwrap();
    let mut got: Vec<Out> = read_committed(dir.path()).unwrap();
    got.sort();
    assert_eq!(
        got,
        expected((0..n).map(|i| i % USERS)),
        "{} restarts",
        result.restarts
    );
    assert!(result.restarts >= 1, "no failure was injected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_and_postgres_lookups_commit_exactly_once_under_injected_failures() {
    if let Some(url) = server_url("SLUICE_REDIS_URL") {
        let prefix = unique("redis_exactly_once");
        load_redis(&url, &prefix).await;
        let lookup = redis_lookup(&url, &prefix, Reconnect::default())
            .with_cache(LookupCache::max_entries(500));
        exactly_once(lookup, 0x51_0001).await;
    }
    if let Some(url) = server_url("SLUICE_POSTGRES_URL") {
        let table = unique("pg_exactly_once");
        load_postgres(&url, &table).await;
        exactly_once(
            postgres_lookup(&url, &table, Reconnect::default()),
            0x51_0002,
        )
        .await;
    }
}
