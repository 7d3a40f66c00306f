//! The user-profile lookup: a small HTTP service the example starts on 127.0.0.1 (with a
//! configurable latency and failure rate), and the [`AsyncFunction`] that asks it for the profile
//! of each click's user over pooled HTTP/1 connections.
//!
//! The protocol is one call: `GET <base>/profile/<user>` answers `200` with
//! `{"country":"DE","tier":"free"}`; any other answer is an error the job retries.

use crate::events::Click;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rand::Rng;
use serde::{Deserialize, Serialize};
use sluice::prelude::*;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What the lookup service knows about a user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    /// Two-letter country code.
    pub country: String,
    /// Subscription tier.
    pub tier: String,
}

impl Profile {
    /// The profile of a click whose lookup timed out (or whose user has none).
    pub fn unknown() -> Self {
        Profile {
            country: "??".to_string(),
            tier: "unknown".to_string(),
        }
    }

    /// Whether this is the profile of a click whose lookup timed out.
    pub fn is_unknown(&self) -> bool {
        self.tier == "unknown"
    }

    /// The profile the in-process service holds for `user`: made up, but always the same.
    pub fn of(user: u64) -> Self {
        const COUNTRIES: [&str; 8] = ["DE", "FR", "US", "BR", "IN", "JP", "NG", "SE"];
        let tier = match user % 100 {
            0..=4 => "gold",
            5..=24 => "plus",
            _ => "free",
        };
        Profile {
            country: COUNTRIES[(user.wrapping_mul(0x9e37_79b9) >> 7) as usize % COUNTRIES.len()]
                .to_string(),
            tier: tier.to_string(),
        }
    }
}

/// A click with its user's profile.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct EnrichedClick {
    /// The click.
    pub click: Click,
    /// The profile of its user.
    pub profile: Profile,
}

/// How the in-process lookup service behaves.
#[derive(Clone, Copy, Debug)]
pub struct ServiceBehaviour {
    /// Mean answer time; each answer takes between half and one and a half times this.
    pub latency: Duration,
    /// Share of requests answered with `503 Service Unavailable`.
    pub failure_rate: f64,
}

/// Starts the lookup service on a free port of 127.0.0.1; returns its base url and its task.
pub async fn start_service(
    behaviour: ServiceBehaviour,
) -> std::io::Result<(String, JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    Ok((url, tokio::spawn(accept_loop(listener, behaviour))))
}

async fn accept_loop(listener: TcpListener, behaviour: ServiceBehaviour) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve_connection(stream, behaviour));
            }
            Err(e) => {
                // Out of file descriptors and the like: give the process a moment to recover.
                eprintln!("lookup service: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn serve_connection(stream: TcpStream, behaviour: ServiceBehaviour) {
    // Small requests and answers: send them at once rather than waiting to fill a packet.
    let _ = stream.set_nodelay(true);
    let service = service_fn(move |req| answer(req, behaviour));
    // A connection ends with an error when the client goes away mid-request; nothing to do.
    let _ = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

async fn answer(
    req: Request<Incoming>,
    behaviour: ServiceBehaviour,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let user = req
        .uri()
        .path()
        .strip_prefix("/profile/")
        .and_then(|id| id.parse::<u64>().ok());
    let (delay, fail) = {
        let mut rng = rand::rng();
        let jitter = rng.random_range(0.5..1.5);
        (
            behaviour.latency.mul_f64(jitter),
            rng.random_bool(behaviour.failure_rate),
        )
    };
    tokio::time::sleep(delay).await;
    Ok(match user {
        None => plain(StatusCode::NOT_FOUND, "no such resource"),
        Some(_) if fail => plain(StatusCode::SERVICE_UNAVAILABLE, "overloaded (injected)"),
        Some(user) => match serde_json::to_vec(&Profile::of(user)) {
            Ok(json) => Response::new(Full::new(Bytes::from(json))),
            Err(e) => plain(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
        },
    })
}

fn plain(status: StatusCode, text: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text.to_string())));
    *response.status_mut() = status;
    response
}

/// Why one lookup failed (the cause, if any, is the error's source).
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The lookup url does not parse.
    #[error("invalid lookup url {url}")]
    Url {
        /// The url.
        url: String,
        /// Why.
        source: hyper::http::uri::InvalidUri,
    },
    /// No answer (connection refused, reset, ...).
    #[error("request to {url} failed")]
    Request {
        /// The url.
        url: String,
        /// Why.
        source: hyper_util::client::legacy::Error,
    },
    /// The service answered with an error status.
    #[error("{url} answered {status}")]
    Status {
        /// The url.
        url: String,
        /// The status.
        status: StatusCode,
    },
    /// The answer broke off.
    #[error("reading the answer of {url} failed")]
    Body {
        /// The url.
        url: String,
        /// Why.
        source: hyper::Error,
    },
    /// The answer is not a profile.
    #[error("the answer of {url} is not a profile")]
    Json {
        /// The url.
        url: String,
        /// Why.
        source: serde_json::Error,
    },
}

/// Looks up the profile of each click's user; clones share one connection pool.
///
/// Every failed attempt is retried by the operator's retry strategy; a click whose lookups all
/// fail within the timeout gets an "unknown" profile ([`AsyncFunction::timeout`]), so a flaky
/// service slows the job down but never stops it, and every click is still counted.
#[derive(Clone)]
pub struct ProfileLookup {
    client: Client<HttpConnector, Empty<Bytes>>,
    base: Arc<str>,
}

impl ProfileLookup {
    /// A lookup against the service at `base` (such as `http://127.0.0.1:8080`).
    pub fn new(base: &str) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        ProfileLookup {
            client,
            base: base.trim_end_matches('/').into(),
        }
    }

    /// The profile of `user`.
    pub fn fetch(
        &self,
        user: u64,
    ) -> impl Future<Output = Result<Profile, LookupError>> + Send + use<> {
        let client = self.client.clone();
        let url = format!("{}/profile/{user}", self.base);
        async move {
            let uri: Uri = url.parse().map_err(|source| LookupError::Url {
                url: url.clone(),
                source,
            })?;
            let response = client
                .get(uri)
                .await
                .map_err(|source| LookupError::Request {
                    url: url.clone(),
                    source,
                })?;
            let status = response.status();
            if !status.is_success() {
                return Err(LookupError::Status { url, status });
            }
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|source| LookupError::Body {
                    url: url.clone(),
                    source,
                })?
                .to_bytes();
            serde_json::from_slice(&body).map_err(|source| LookupError::Json { url, source })
        }
    }
}

impl AsyncFunction<Click> for ProfileLookup {
    type Out = EnrichedClick;
    type Results = Option<EnrichedClick>;

    fn invoke(
        &self,
        click: Click,
    ) -> impl Future<Output = Result<Self::Results, UserError>> + Send + use<> {
        let profile = self.fetch(click.user);
        async move {
            let profile = profile.await?;
            Ok(Some(EnrichedClick { click, profile }))
        }
    }

    fn timeout(&self, click: &Click) -> Result<Self::Results, UserError> {
        Ok(Some(EnrichedClick {
            click: click.clone(),
            profile: Profile::unknown(),
        }))
    }
}
