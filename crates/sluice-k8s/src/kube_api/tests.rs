//! The Lease mapping (round trips, rounding, absent fields) and [`KubeLeaseApi`] through a
//! real `kube::Client` whose transport is an in-process stand-in for the API server: it keeps
//! one Lease with a `resourceVersion`, answers 404 and 409 with `Status` objects as the API
//! server does, and can be told to fail.

use super::*;
use crate::LeaderElection;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use proptest::prelude::*;
use serde_json::{Value, json};
use sluice_cluster::lease::LeaseConfig;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

const COLLECTION: &str = "/apis/coordination.k8s.io/v1/namespaces/stream/leases";
const ITEM: &str = "/apis/coordination.k8s.io/v1/namespaces/stream/leases/sluice-jobmanager";

#[derive(Default)]
struct Server {
    lease: Option<Value>,
    version: u64,
    /// Answer the next request with this status, unapplied.
    fail_next: Option<StatusCode>,
    requests: Vec<(Method, String)>,
}

fn status(code: StatusCode, reason: &str, message: &str) -> (StatusCode, Value) {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16(),
    });
    (code, body)
}

impl Server {
    fn store(&mut self, mut lease: Value) -> (StatusCode, Value) {
        self.version += 1;
        lease["metadata"]["resourceVersion"] = json!(self.version.to_string());
        lease["metadata"]["namespace"] = json!("stream");
        self.lease = Some(lease.clone());
        (StatusCode::OK, lease)
    }

    fn handle(&mut self, method: Method, path: &str, body: &[u8]) -> (StatusCode, Value) {
        self.requests.push((method.clone(), path.to_string()));
        if let Some(code) = self.fail_next.take() {
            return status(code, "InternalError", "the stand-in was told to fail");
        }
        let sent: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        match (method, path) {
            (Method::GET, ITEM) => match &self.lease {
                Some(lease) => (StatusCode::OK, lease.clone()),
                None => status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    "leases \"sluice-jobmanager\" not found",
                ),
            },
            (Method::POST, COLLECTION) => {
                if self.lease.is_some() {
                    return status(
                        StatusCode::CONFLICT,
                        "AlreadyExists",
                        "leases \"sluice-jobmanager\" already exists",
                    );
                }
                let (_, lease) = self.store(sent);
                (StatusCode::CREATED, lease)
            }
            (Method::PUT, ITEM) => {
                let current = self
                    .lease
                    .as_ref()
                    .map(|l| l["metadata"]["resourceVersion"].clone());
                if current.as_ref() != Some(&sent["metadata"]["resourceVersion"]) {
                    return status(
                        StatusCode::CONFLICT,
                        "Conflict",
                        "Operation cannot be fulfilled on leases.coordination.k8s.io \"sluice-jobmanager\": the object has been modified",
                    );
                }
                self.store(sent)
            }
            _ => status(StatusCode::NOT_FOUND, "NotFound", "no such path"),
        }
    }
}

/// A client whose every request is answered by `server`.
fn client(server: &Arc<Mutex<Server>>) -> Client {
    let server = Arc::clone(server);
    let service = tower::service_fn(move |request: Request<kube::client::Body>| {
        let server = Arc::clone(&server);
        async move {
            let (parts, body) = request.into_parts();
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let (code, answer) =
                server
                    .lock()
                    .unwrap()
                    .handle(parts.method, parts.uri.path(), &body);
            let response = Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(answer.to_string())))
                .unwrap();
            Ok::<_, Infallible>(response)
        }
    });
    Client::new(service, "stream")
}

fn record(holder: &str, renew_ms: i64) -> LeaseRecord {
    LeaseRecord {
        holder: Some(holder.into()),
        lease_duration: Duration::from_secs(15),
        acquire_time_ms: 1_700_000_000_000,
        renew_time_ms: renew_ms,
        transitions: 2,
    }
}

#[tokio::test]
async fn reads_creates_and_replaces_a_lease_through_kube() {
    let server = Arc::new(Mutex::new(Server::default()));
    let api = KubeLeaseApi::new(client(&server), "stream", "sluice-jobmanager");
    assert_eq!(api.get().await, Observation::Missing);

    let mine = record("jm-0", 1_700_000_001_234);
    let (created, version) = api.create(&mine).await.unwrap();
    assert_eq!((created, version.as_str()), (mine.clone(), "1"));
    assert_eq!(
        api.get().await,
        Observation::Found((mine.clone(), "1".into()))
    );
    let stored = server.lock().unwrap().lease.clone().unwrap();
    assert_eq!(stored["spec"]["holderIdentity"], "jm-0");
    assert_eq!(stored["spec"]["leaseDurationSeconds"], 15);
    assert_eq!(stored["spec"]["leaseTransitions"], 2);
    assert_eq!(stored["spec"]["renewTime"], "2023-11-14T22:13:21.234000Z");

    let renewed = record("jm-0", 1_700_000_003_000);
    let (_, version) = api.replace("1", &renewed).await.unwrap();
    assert_eq!(version, "2");

    // A second create and a replace at an old version lose the race (409).
    let lost = api.create(&record("jm-1", 0)).await.unwrap_err();
    assert!(
        lost.0.contains("409") && lost.0.contains("stream/sluice-jobmanager"),
        "{lost}"
    );
    let stale = api.replace("1", &record("jm-1", 0)).await.unwrap_err();
    assert!(stale.0.contains("409 Conflict"), "{stale}");
    assert_eq!(api.get().await, Observation::Found((renewed, "2".into())));

    // A server error is a failed read, naming the lease.
    server.lock().unwrap().fail_next = Some(StatusCode::INTERNAL_SERVER_ERROR);
    let Observation::Failed(why) = api.get().await else {
        panic!("a 500 must be a failed read");
    };
    assert!(why.contains("stream/sluice-jobmanager"), "{why}");
}

#[tokio::test(start_paused = true)]
async fn two_job_masters_elect_one_through_kube_and_the_standby_follows_a_release() {
    let server = Arc::new(Mutex::new(Server::default()));
    let candidate = |name: &str| {
        let api = KubeLeaseApi::new(client(&server), "stream", "sluice-jobmanager");
        LeaderElection::new(api, LeaseConfig::new(name).unwrap())
    };
    let (a, b) = (candidate("jm-a"), candidate("jm-b"));
    let leading_a = a.acquire().await;
    let standby = tokio::spawn(async move { b.acquire().await });
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(leading_a.is_leading());
    assert!(!standby.is_finished());
    leading_a.release().await.unwrap();
    let leading_b = standby.await.unwrap();
    assert!(leading_b.is_leading());
    let stored = server.lock().unwrap().lease.clone().unwrap();
    assert_eq!(stored["spec"]["holderIdentity"], "jm-b");
    assert_eq!(stored["spec"]["leaseTransitions"], 1);
    let requests = &server.lock().unwrap().requests;
    assert!(
        requests
            .iter()
            .all(|(_, path)| path.starts_with(COLLECTION))
    );
}

#[test]
fn an_empty_spec_reads_as_an_unheld_lease() {
    let record = record_from_spec(&LeaseSpec::default());
    assert_eq!(record.holder, None);
    assert_eq!(record.lease_duration, Duration::ZERO);
    assert_eq!(
        (
            record.acquire_time_ms,
            record.renew_time_ms,
            record.transitions
        ),
        (0, 0, 0)
    );
    let empty_holder = LeaseSpec {
        holder_identity: Some(String::new()),
        lease_transitions: Some(-3),
        ..LeaseSpec::default()
    };
    let record = record_from_spec(&empty_holder);
    assert_eq!((record.holder, record.transitions), (None, 0));
}

#[test]
fn a_lease_without_a_resource_version_is_refused() {
    let lease = lease_from_record("sluice-jobmanager", None, &record("a", 0));
    let why = versioned_from_lease(&lease).unwrap_err();
    assert!(
        why.contains("sluice-jobmanager") && why.contains("resourceVersion"),
        "{why}"
    );
}

#[test]
fn sub_second_durations_round_up() {
    let mut r = record("a", 0);
    r.lease_duration = Duration::from_millis(15_001);
    assert_eq!(spec_from_record(&r).lease_duration_seconds, Some(16));
}

proptest! {
    /// Whole-second durations and times in range survive the trip through a Lease's spec.
    #[test]
    fn records_round_trip_through_the_spec(
        holder in proptest::option::of("[a-z0-9-]{1,20}"),
        seconds in 0u64..100_000,
        acquire in -100_000_000_000_000i64..100_000_000_000_000,
        renew in -100_000_000_000_000i64..100_000_000_000_000,
        transitions in 0u32..=i32::MAX as u32,
    ) {
        let record = LeaseRecord {
            holder,
            lease_duration: Duration::from_secs(seconds),
            acquire_time_ms: acquire,
            renew_time_ms: renew,
            transitions,
        };
        let lease = lease_from_record("l", Some("7"), &record);
        prop_assert_eq!(versioned_from_lease(&lease), Ok((record, "7".to_string())));
    }
}

/// The real client stack (HTTPS through rustls with aws-lc-rs) builds, and an API server that
/// cannot be reached is a failed read naming the lease, not a panic. Port 1 on loopback
/// refuses the connection at once.
#[tokio::test]
async fn an_unreachable_api_server_is_a_failed_read() {
    let url = "https://127.0.0.1:1".parse().unwrap();
    let client = Client::try_from(Config::new(url)).unwrap();
    let api = KubeLeaseApi::new(client, "stream", "sluice-jobmanager");
    let Observation::Failed(why) = api.get().await else {
        panic!("nothing listens on port 1");
    };
    assert!(why.contains("stream/sluice-jobmanager"), "{why}");
    let lost = api.create(&record("jm-0", 0)).await.unwrap_err();
    assert!(
        lost.0.contains("creating lease stream/sluice-jobmanager"),
        "{lost}"
    );
}
