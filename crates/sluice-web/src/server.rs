//! The HTTP server: hyper 1's HTTP/1 connections over a tokio listener, one task that accepts,
//! samples the jobs' rates on a timer, and owns every connection. [`WebServer`] is its handle:
//! the bound address, and dropping it stops the server and closes its connections.

use crate::rates::RateWindow;
use crate::{prometheus, rest};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use sluice_runtime::JobObserver;
use sluice_runtime::job::JobStatus;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

/// Most connections a server keeps open at once; further ones are closed at once.
pub const MAX_CONNECTIONS: usize = 64;

/// How long a client may take to send a request's headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const STYLE_CSS: &str = include_str!("assets/style.css");

/// A running server: where it listens. Dropping it stops the server (the listener, the rate
/// sampler and every open connection); [`shutdown`](Self::shutdown) does the same and waits
/// until it stopped.
#[derive(Debug)]
pub struct WebServer {
    local_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl WebServer {
    /// The address the server is bound to (with the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// `http://<local address>/`.
    pub fn url(&self) -> String {
        format!("http://{}/", self.local_addr)
    }

    /// Stops the server and waits until its connections are closed.
    pub async fn shutdown(mut self) {
        drop(self.stop.take());
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Which routes a server answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The dashboard, the REST API and `/metrics`.
    Dashboard,
    /// `/metrics` only.
    Prometheus,
}

/// A job the server shows, with its rate window.
struct Watched {
    observer: JobObserver,
    rates: Mutex<RateWindow>,
}

/// What a server answers from: the jobs, and which routes.
pub(crate) struct App {
    jobs: Vec<Watched>,
    mode: Mode,
    started: Instant,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl App {
    pub(crate) fn new(observers: Vec<JobObserver>, mode: Mode, rate_window: Duration) -> Self {
        App {
            jobs: observers
                .into_iter()
                .map(|observer| Watched {
                    observer,
                    rates: Mutex::new(RateWindow::new(rate_window)),
                })
                .collect(),
            mode,
            started: Instant::now(),
        }
    }

    /// Takes one sample of every job for its rates.
    fn sample(&self) {
        for w in &self.jobs {
            let status = w.observer.snapshot();
            lock(&w.rates).push(self.started.elapsed(), &status);
        }
    }

    fn snapshots(&self) -> Vec<JobStatus> {
        self.jobs.iter().map(|w| w.observer.snapshot()).collect()
    }

    /// Answers one request.
    fn handle(&self, method: &Method, path: &str) -> Response<Full<Bytes>> {
        if method != Method::GET && method != Method::HEAD {
            return json(
                StatusCode::METHOD_NOT_ALLOWED,
                &rest::error("only GET is served"),
            );
        }
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        if parts == ["metrics"] {
            let text = prometheus::render(&self.snapshots());
            return body(StatusCode::OK, prometheus::CONTENT_TYPE, text);
        }
        if self.mode == Mode::Prometheus {
            return match parts.as_slice() {
                [] => body(
                    StatusCode::OK,
                    "text/plain; charset=utf-8",
                    "sluice metrics: GET /metrics\n".to_string(),
                ),
                _ => not_found(path),
            };
        }
        match parts.as_slice() {
            [] | ["index.html"] => body(
                StatusCode::OK,
                "text/html; charset=utf-8",
                INDEX_HTML.to_string(),
            ),
            ["app.js"] => body(
                StatusCode::OK,
                "text/javascript; charset=utf-8",
                APP_JS.to_string(),
            ),
            ["style.css"] => body(
                StatusCode::OK,
                "text/css; charset=utf-8",
                STYLE_CSS.to_string(),
            ),
            ["overview"] => json(StatusCode::OK, &rest::overview(&self.snapshots())),
            ["jobs"] | ["jobs", "overview"] => {
                json(StatusCode::OK, &rest::jobs_overview(&self.snapshots()))
            }
            ["jobs", id, rest @ ..] => self.job_route(id, rest, path),
            _ => not_found(path),
        }
    }

    fn job_route(&self, id: &str, rest: &[&str], path: &str) -> Response<Full<Bytes>> {
        let Some(w) = self.jobs.iter().find(|w| w.observer.job_id() == id) else {
            return not_found(path);
        };
        let status = w.observer.snapshot();
        let rates = lock(&w.rates).rates();
        match rest {
            [] => json(StatusCode::OK, &rest::job(&status, rates.as_ref())),
            ["vertices", vertex] => match rest::vertex(&status, vertex, rates.as_ref()) {
                Some(v) => json(StatusCode::OK, &v),
                None => not_found(path),
            },
            ["checkpoints"] => json(StatusCode::OK, &rest::checkpoints(&status)),
            ["exceptions"] => json(StatusCode::OK, &rest::exceptions(&status)),
            _ => not_found(path),
        }
    }
}

fn body(status: StatusCode, content_type: &'static str, text: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(text)));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn json(status: StatusCode, value: &Value) -> Response<Full<Bytes>> {
    body(status, "application/json", value.to_string())
}

fn not_found(path: &str) -> Response<Full<Bytes>> {
    json(
        StatusCode::NOT_FOUND,
        &rest::error(&format!("not found: {path}")),
    )
}

/// Binds `addr` and starts serving `app` (sampling rates every `sample_interval` when it
/// serves the dashboard).
pub(crate) async fn start(
    addr: impl tokio::net::ToSocketAddrs,
    app: App,
    sample_interval: Duration,
) -> std::io::Result<WebServer> {
    let listener = TcpListener::bind(addr).await?;
    let local_addr = listener.local_addr()?;
    let (stop_tx, stop) = oneshot::channel();
    let app = Arc::new(app);
    tracing::info!(address = %local_addr, mode = ?app.mode, "sluice web server listening");
    let task = tokio::spawn(run(listener, app, stop, sample_interval));
    Ok(WebServer {
        local_addr,
        stop: Some(stop_tx),
        task: Some(task),
    })
}

async fn run(
    listener: TcpListener,
    app: Arc<App>,
    mut stop: oneshot::Receiver<()>,
    sample_interval: Duration,
) {
    let sampling = app.mode == Mode::Dashboard && !app.jobs.is_empty();
    let mut tick = tokio::time::interval(sample_interval.max(Duration::from_millis(10)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Dropped with this future (a stop, or the server task aborted): every connection ends.
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick(), if sampling => app.sample(),
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        // Out of file descriptors, say: wait a moment rather than spin.
                        tracing::debug!(error = %e, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if connections.len() >= MAX_CONNECTIONS {
                    continue; // dropped: closed at once
                }
                let app = app.clone();
                connections.spawn(async move {
                    let service = service_fn(move |req: Request<hyper::body::Incoming>| {
                        let response = app.handle(req.method(), req.uri().path());
                        async move { Ok::<_, Infallible>(response) }
                    });
                    let served = http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(HEADER_READ_TIMEOUT)
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                    if let Err(e) = served {
                        tracing::debug!(error = %e, "a web connection ended with an error");
                    }
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_answer_and_unknown_ones_are_not_found() {
        let app = App::new(Vec::new(), Mode::Dashboard, Duration::from_secs(1));
        let get = |p: &str| app.handle(&Method::GET, p);
        assert_eq!(get("/").status(), StatusCode::OK);
        assert_eq!(get("/").headers()[CONTENT_TYPE], "text/html; charset=utf-8");
        assert_eq!(get("/app.js").status(), StatusCode::OK);
        assert_eq!(get("/style.css").status(), StatusCode::OK);
        assert_eq!(get("/overview").status(), StatusCode::OK);
        assert_eq!(get("/jobs/overview").status(), StatusCode::OK);
        assert_eq!(get("/metrics").status(), StatusCode::OK);
        assert_eq!(get("/jobs/0000").status(), StatusCode::NOT_FOUND);
        assert_eq!(get("/nope").status(), StatusCode::NOT_FOUND);
        assert_eq!(
            app.handle(&Method::POST, "/overview").status(),
            StatusCode::METHOD_NOT_ALLOWED
        );
        let metrics = App::new(Vec::new(), Mode::Prometheus, Duration::from_secs(1));
        assert_eq!(
            metrics.handle(&Method::GET, "/metrics").headers()[CONTENT_TYPE],
            prometheus::CONTENT_TYPE
        );
        assert_eq!(
            metrics.handle(&Method::GET, "/overview").status(),
            StatusCode::NOT_FOUND
        );
    }

    #[test]
    fn the_page_loads_its_assets_from_the_server_only() {
        assert!(INDEX_HTML.contains("src=\"app.js\""));
        assert!(INDEX_HTML.contains("href=\"style.css\""));
        // Nothing from a CDN or any other host (the SVG namespace is a name, not a load).
        for asset in [INDEX_HTML, APP_JS, STYLE_CSS] {
            for load in [
                "src=\"http",
                "href=\"http",
                "url(http",
                "fetch(\"http",
                "@import",
            ] {
                assert!(!asset.contains(load), "{load}");
            }
        }
    }
}
