//! The live view of a running sluice job over HTTP, as Flink's web UI and metric reporters give
//! it: a REST API in Flink's resource names, one dashboard page, and a Prometheus endpoint.
//!
//! Everything is read from a [`JobObserver`] ([`JobHandle::observer`](sluice_runtime::JobHandle::observer)):
//! the runtime records what its job master sees (graph, metrics, checkpoints, restarts,
//! failures) and knows nothing of this crate.
//!
//! Where to find things:
//! - [`serve_dashboard`] / [`WebUi::serve_dashboard`]: the dashboard at `/` (the job graph laid
//!   out left to right, each vertex with its records per second and a backpressure colour, the
//!   checkpoint history, the last failure; HTML, JavaScript and CSS embedded in the binary, no
//!   build step, nothing loaded from elsewhere), the REST API (`/overview`, `/jobs/overview`,
//!   `/jobs/:jobid`, `/jobs/:jobid/vertices/:vertexid`, `/jobs/:jobid/checkpoints`,
//!   `/jobs/:jobid/exceptions`; JSON) and `/metrics`;
//! - [`serve_prometheus`] / [`WebUi::serve_prometheus`]: `/metrics` alone, for a separate
//!   `--metrics-addr`;
//! - [`rest`]: the REST answers, pure functions of a [`JobStatus`](sluice_runtime::JobStatus);
//! - [`prometheus`]: the text exposition format, a pure function of job statuses, and the list
//!   of metric families;
//! - [`rates`]: records per second, backpressured and busy shares over a window of samples, and
//!   the backpressure levels (Flink's OK / LOW / HIGH: green, amber, red);
//! - [`WebServer`]: the handle of a running server (its address; dropping it stops it).
//!
//! A server binds where it is told. The examples bind `127.0.0.1` (this machine only) unless
//! told otherwise; binding `0.0.0.0` shows the job, its names and its failures to the network,
//! without authentication.
//!
//! ```
//! use sluice_runtime::prelude::*;
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> std::io::Result<()> {
//! let env = StreamEnvironment::new();
//! env.from_generator(Generator::new(|i| i).rate_limit(10_000.0)).name("numbers").discard();
//! let job = env.submit("endless").unwrap();
//! // The dashboard and the REST API; port 0 lets the system choose.
//! let ui = sluice_web::serve_dashboard("127.0.0.1:0", job.observer()).await?;
//! // Prometheus on its own address.
//! let metrics = sluice_web::serve_prometheus("127.0.0.1:0", job.observer()).await?;
//! println!("dashboard: {}  metrics: {}metrics", ui.url(), metrics.url());
//! job.cancel();
//! let _ = job.await;
//! drop((ui, metrics)); // stops both servers
//! # Ok(())
//! # }
//! ```

pub mod prometheus;
pub mod rates;
pub mod rest;
mod server;
#[cfg(test)]
mod testing;

pub use server::{MAX_CONNECTIONS, WebServer};
pub use sluice_runtime::JobObserver;

use server::{App, Mode};
use std::time::Duration;

/// How often a dashboard server samples its jobs for rates, by default.
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_millis(500);

/// The window rates are computed over, by default.
pub const DEFAULT_RATE_WINDOW: Duration = Duration::from_secs(2);

/// What a server shows: one or more jobs, and how rates are sampled.
///
/// ```
/// use sluice_runtime::prelude::*;
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> std::io::Result<()> {
/// let env = StreamEnvironment::new();
/// env.from_iter(0u64..10).discard();
/// let job = env.submit("small").unwrap();
/// let ui = sluice_web::WebUi::new()
///     .job(job.observer())
///     .sample_interval(Duration::from_millis(250))
///     .serve_dashboard("127.0.0.1:0")
///     .await?;
/// assert!(ui.local_addr().ip().is_loopback());
/// job.await.unwrap();
/// ui.shutdown().await;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct WebUi {
    jobs: Vec<JobObserver>,
    sample_interval: Duration,
    rate_window: Duration,
}

impl Default for WebUi {
    fn default() -> Self {
        Self::new()
    }
}

impl WebUi {
    /// No jobs yet; rates sampled every [`DEFAULT_SAMPLE_INTERVAL`] over
    /// [`DEFAULT_RATE_WINDOW`].
    pub fn new() -> Self {
        WebUi {
            jobs: Vec::new(),
            sample_interval: DEFAULT_SAMPLE_INTERVAL,
            rate_window: DEFAULT_RATE_WINDOW,
        }
    }

    /// Shows the job `observer` views too.
    pub fn job(mut self, observer: JobObserver) -> Self {
        self.jobs.push(observer);
        self
    }

    /// How often the dashboard server samples its jobs for rates.
    pub fn sample_interval(mut self, interval: Duration) -> Self {
        self.sample_interval = interval;
        self
    }

    /// The window records per second and backpressure shares are computed over.
    pub fn rate_window(mut self, window: Duration) -> Self {
        self.rate_window = window;
        self
    }

    /// Serves the dashboard, the REST API and `/metrics` on `addr`. Must be called inside a
    /// tokio runtime; the server runs on it until the returned handle is dropped.
    pub async fn serve_dashboard(
        self,
        addr: impl tokio::net::ToSocketAddrs,
    ) -> std::io::Result<WebServer> {
        let app = App::new(self.jobs, Mode::Dashboard, self.rate_window);
        server::start(addr, app, self.sample_interval).await
    }

    /// Serves `/metrics` (Prometheus' text format) on `addr`. Must be called inside a tokio
    /// runtime; the server runs on it until the returned handle is dropped.
    pub async fn serve_prometheus(
        self,
        addr: impl tokio::net::ToSocketAddrs,
    ) -> std::io::Result<WebServer> {
        let app = App::new(self.jobs, Mode::Prometheus, self.rate_window);
        server::start(addr, app, self.sample_interval).await
    }
}

/// Serves the dashboard of the job `observer` views, its REST API and `/metrics` on `addr`
/// (say `127.0.0.1:8081`; port 0 lets the system choose, see [`WebServer::local_addr`]).
/// The server stops when the returned handle is dropped.
///
/// ```
/// use sluice_runtime::prelude::*;
///
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> std::io::Result<()> {
/// let env = StreamEnvironment::new();
/// env.from_iter(0u64..10).discard();
/// let job = env.submit("small").unwrap();
/// let ui = sluice_web::serve_dashboard("127.0.0.1:0", job.observer()).await?;
/// println!("open {}", ui.url());
/// job.await.unwrap();
/// # Ok(())
/// # }
/// ```
pub async fn serve_dashboard(
    addr: impl tokio::net::ToSocketAddrs,
    observer: JobObserver,
) -> std::io::Result<WebServer> {
    WebUi::new().job(observer).serve_dashboard(addr).await
}

/// Serves the job's metrics for Prometheus at `/metrics` on `addr` (the families are listed in
/// [`prometheus`]). The server stops when the returned handle is dropped.
///
/// ```
/// use sluice_runtime::prelude::*;
///
/// # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
/// # async fn main() -> std::io::Result<()> {
/// let env = StreamEnvironment::new();
/// env.from_iter(0u64..10).discard();
/// let job = env.submit("small").unwrap();
/// let metrics = sluice_web::serve_prometheus("127.0.0.1:0", job.observer()).await?;
/// println!("scrape {}metrics", metrics.url());
/// job.await.unwrap();
/// # Ok(())
/// # }
/// ```
pub async fn serve_prometheus(
    addr: impl tokio::net::ToSocketAddrs,
    observer: JobObserver,
) -> std::io::Result<WebServer> {
    WebUi::new().job(observer).serve_prometheus(addr).await
}
