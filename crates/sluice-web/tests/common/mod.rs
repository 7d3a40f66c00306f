//! Shared by the sluice-web tests: a long-running job with several vertices, an HTTP client,
//! waiting on a condition of a running job, and the CI environment rule.
#![allow(dead_code)] // each test binary uses part of it

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sluice_runtime::failover::RestartStrategy;
use sluice_runtime::prelude::*;
use sluice_runtime::testing::{CountingPassThrough, FailureInjector};
use sluice_runtime::{JobHandle, JobObserver, JobStatus};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// The operators of [`running_job`], by name.
pub const OPERATORS: [&str; 5] = [
    "numbers",
    "double",
    "fail once",
    "count per key",
    "Sink: Discard",
];

/// Submits an unbounded job of four vertices: `numbers` (a rate-limited generator, 2 subtasks)
/// → rebalance → `double` (to (key, value)) and `fail once` (chained; it fails once, after
/// 5000 records, on subtask 0) → hash → `count per key` (keyed state, passes records on) →
/// rebalance → `Sink: Discard` (1 subtask), checkpointing every
/// 100 ms into `dir`. Cancel it at the end.
pub fn running_job(dir: &Path) -> JobHandle {
    let env = StreamEnvironment::new();
    env.set_parallelism(2);
    env.enable_checkpointing(Duration::from_millis(100));
    env.set_checkpoint_storage(dir);
    env.set_restart_strategy(RestartStrategy::fixed_delay(3, Duration::from_millis(10)).unwrap());
    env.from_generator(Generator::new(|i| i).rate_limit(20_000.0))
        .name("numbers")
        .rebalance()
        .map(|x| (x % 16, x * 2))
        .name("double")
        .process(FailureInjector::at_record(0, 5_000))
        .name("fail once")
        .key_by(|r: &(u64, u64)| r.0)
        .process(CountingPassThrough::new())
        .name("count per key")
        .discard()
        .parallelism(1);
    env.submit("web-test").unwrap()
}

/// Waits until `done` holds for a snapshot of the job (checked every 20 ms, as the job
/// progresses); fails naming `what` after a minute.
pub async fn wait_for(
    observer: &JobObserver,
    what: &str,
    done: impl Fn(&JobStatus) -> bool,
) -> JobStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tick.tick().await;
        let s = observer.snapshot();
        if done(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {s:#?}"
        );
    }
}

/// Records out of the operator named `name`, over its subtasks.
pub fn records_out(s: &JobStatus, name: &str) -> u64 {
    s.operator(name).map_or(0, |o| o.records_out())
}

/// GETs `path` from `addr`: the status code and the body.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let uri = format!("http://{addr}{path}").parse().unwrap();
    let response = client.get(uri).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

/// GETs `path` from `addr` and parses the JSON answer (which must be 200 OK).
pub async fn get_json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (status, body) = get(addr, path).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Waits until the JSON answer to `path` satisfies `done` (asked every 20 ms: the server
/// samples rates on its own timer); fails naming `what` after a minute.
pub async fn wait_for_json(
    addr: SocketAddr,
    path: &str,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    loop {
        tick.tick().await;
        let answer = get_json(addr, path).await;
        if done(&answer) {
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {answer:#}"
        );
    }
}

/// The value of the environment variable `var` that a CI script exports (`how` says which), or
/// `None` (the test skips, saying so) when it is not set outside CI. Under CI a missing variable
/// fails the test: a tool CI should have installed must not turn into a silent pass.
pub fn ci_env(var: &str, how: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(value) => Some(value),
        Err(_) if std::env::var_os("CI").is_some() => {
            panic!("{var} is not set under CI ({how})")
        }
        Err(_) => {
            eprintln!("skipped: set {var} ({how}) to run this test");
            None
        }
    }
}
