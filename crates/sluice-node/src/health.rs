//! `GET /healthz` (200 while the process runs) and `GET /readyz` (200 once the job master
//! serves its task managers, or the task manager is registered; 503 before), for the probes
//! of an orchestrator such as Kubernetes.

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Whether the process is ready, shared with its health endpoint.
#[derive(Clone, Debug, Default)]
pub struct Health(Arc<AtomicBool>);

impl Health {
    /// Says whether the process is ready.
    pub fn set_ready(&self, ready: bool) {
        self.0.store(ready, Ordering::SeqCst);
    }

    /// Whether the process said it is ready.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// The answer to one request.
    fn answer(&self, path: &str) -> (StatusCode, &'static str) {
        match path {
            "/healthz" => (StatusCode::OK, "ok\n"),
            "/readyz" if self.is_ready() => (StatusCode::OK, "ready\n"),
            "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, "not ready\n"),
            _ => (StatusCode::NOT_FOUND, "not found\n"),
        }
    }

    /// Serves the endpoints on `addr` until the returned task is aborted.
    pub async fn serve(
        &self,
        addr: SocketAddr,
    ) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let local = listener.local_addr()?;
        let health = self.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let health = health.clone();
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                            let (status, body) = health.answer(req.uri().path());
                            let mut resp =
                                Response::new(Full::new(Bytes::from_static(body.as_bytes())));
                            *resp.status_mut() = status;
                            async move { Ok::<_, std::convert::Infallible>(resp) }
                        });
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        Ok((local, task))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_the_flag() {
        let h = Health::default();
        assert_eq!(h.answer("/healthz").0, StatusCode::OK);
        assert_eq!(h.answer("/readyz").0, StatusCode::SERVICE_UNAVAILABLE);
        h.set_ready(true);
        assert_eq!(h.answer("/readyz").0, StatusCode::OK);
        assert_eq!(h.answer("/other").0, StatusCode::NOT_FOUND);
    }
}
