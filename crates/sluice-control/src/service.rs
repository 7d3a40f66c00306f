//! The gRPC plumbing both services share, written by hand instead of generated (so that no
//! protobuf compiler is needed to build): one unary call per method on either side, the bearer
//! token on every request, and fencing of every request that carries a fence.

use crate::messages::Fenced;
use sluice_cluster::fencing::{Fence, FenceKeeper, Verdict};
use sluice_net::auth::{Secret, bearer_token, token_matches};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tonic::codegen::http;
use tonic::{Request, Response, Status};

pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Which fences a server accepts.
#[derive(Debug)]
pub(crate) enum FencePolicy {
    /// The job master's: requests of its own epoch only (attempts are the service's business).
    Epoch(u64),
    /// A task manager's: the newest fence seen, adopting newer ones.
    Newest(Mutex<FenceKeeper>),
}

impl FencePolicy {
    /// Refuses a request whose fence is stale (or missing, where one is required).
    pub(crate) fn check<M: Fenced>(&self, message: &M) -> Result<(), Status> {
        let Some(fence) = message.fence() else {
            return if M::FENCED {
                Err(Status::invalid_argument("the request carries no fence"))
            } else {
                Ok(())
            };
        };
        match self {
            FencePolicy::Epoch(epoch) if fence.epoch == *epoch => Ok(()),
            FencePolicy::Epoch(epoch) => Err(Status::failed_precondition(format!(
                "stale fence {fence}: this job master's epoch is {epoch}; register again"
            ))),
            FencePolicy::Newest(keeper) => {
                let verdict = keeper
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .check(fence);
                match verdict {
                    Verdict::Accept | Verdict::Adopt => Ok(()),
                    Verdict::Stale { current } => Err(Status::failed_precondition(format!(
                        "stale fence {fence}: the current one is {current}"
                    ))),
                }
            }
        }
    }

    /// The newest fence a task manager has seen.
    pub(crate) fn current(&self) -> Option<Fence> {
        match self {
            FencePolicy::Epoch(epoch) => Some(Fence::new(*epoch, 0)),
            FencePolicy::Newest(keeper) => keeper
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .current(),
        }
    }
}

/// A tower service that answers one request with a closure.
struct Once<F>(Option<F>);

impl<F, Req, Resp> tonic::codegen::Service<Request<Req>> for Once<F>
where
    F: FnOnce(Request<Req>) -> BoxFuture<Result<Response<Resp>, Status>>,
{
    type Response = Response<Resp>;
    type Error = Status;
    type Future = BoxFuture<Result<Response<Resp>, Status>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Req>) -> Self::Future {
        match self.0.take() {
            Some(f) => f(request),
            None => Box::pin(async { Err(Status::internal("a unary call was made twice")) }),
        }
    }
}

/// Serves one unary request with `handle` (decoding and encoding with prost).
pub(crate) fn unary<Req, Resp, B, F>(
    request: http::Request<B>,
    handle: F,
) -> BoxFuture<Result<http::Response<tonic::body::Body>, Infallible>>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    B: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    B::Error: Into<tonic::codegen::StdError> + Send + 'static,
    F: FnOnce(Request<Req>) -> BoxFuture<Result<Response<Resp>, Status>> + Send + 'static,
{
    Box::pin(async move {
        let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<Resp, Req>::default())
            .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
            .max_encoding_message_size(crate::MAX_MESSAGE_BYTES);
        Ok(grpc.unary(Once(Some(handle)), request).await)
    })
}

/// The answer to a path no method has.
pub(crate) fn unimplemented(
    path: &str,
) -> BoxFuture<Result<http::Response<tonic::body::Body>, Infallible>> {
    let status = Status::unimplemented(format!("no method {path}"));
    Box::pin(async move { Ok(status.into_http()) })
}

/// The server side's check of the bearer token, counting and logging refusals.
#[derive(Clone, Debug)]
pub struct Authenticator {
    secret: Arc<Secret>,
    refused: Arc<AtomicU64>,
}

impl Authenticator {
    pub(crate) fn new(secret: Secret) -> Self {
        Authenticator {
            secret: Arc::new(secret),
            refused: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Requests refused so far for a missing or wrong token.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

impl tonic::service::Interceptor for Authenticator {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let token = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match token {
            Some(t) if token_matches(&self.secret, t) => Ok(request),
            _ => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                let peer = request
                    .remote_addr()
                    .map(|a| a.to_string())
                    .unwrap_or_else(|| "an unknown peer".into());
                tracing::warn!(%peer, "refused a control request without the cluster's token");
                Err(Status::unauthenticated("missing or wrong cluster token"))
            }
        }
    }
}

/// The client side: adds the bearer token to every request.
#[derive(Clone, Debug)]
pub struct TokenInterceptor {
    header: tonic::metadata::MetadataValue<tonic::metadata::Ascii>,
}

impl TokenInterceptor {
    pub(crate) fn new(secret: &Secret) -> Result<Self, crate::ControlError> {
        let header = format!("Bearer {}", bearer_token(secret))
            .parse()
            .map_err(|_| crate::ControlError::Config("the token is not a valid header".into()))?;
        Ok(TokenInterceptor { header })
    }
}

impl tonic::service::Interceptor for TokenInterceptor {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        request
            .metadata_mut()
            .insert("authorization", self.header.clone());
        Ok(request)
    }
}

/// Generates a service: its trait (one async method per RPC), its server (a tower service
/// routing by path, fencing every request) and its client (adding the token).
macro_rules! control_service {
    (
        $(#[$doc:meta])*
        service $Trait:ident as $name:literal, server $Server:ident, client $Client:ident {
            $(
                $(#[$mdoc:meta])*
                fn $method:ident($Req:ty) -> $Resp:ty = $path:literal;
            )*
        }
    ) => {
        $(#[$doc])*
        pub trait $Trait: Send + Sync + 'static {
            $(
                $(#[$mdoc])*
                fn $method(
                    &self,
                    request: $Req,
                ) -> impl std::future::Future<Output = Result<$Resp, tonic::Status>> + Send;
            )*
        }

        #[doc = concat!("The gRPC server of a [`", stringify!($Trait), "`]: routes each request to its method after checking its fence.")]
        #[derive(Debug)]
        pub struct $Server<T> {
            inner: std::sync::Arc<T>,
            fences: std::sync::Arc<$crate::service::FencePolicy>,
        }

        impl<T> Clone for $Server<T> {
            fn clone(&self) -> Self {
                $Server {
                    inner: self.inner.clone(),
                    fences: self.fences.clone(),
                }
            }
        }

        impl<T> tonic::server::NamedService for $Server<T> {
            const NAME: &'static str = $name;
        }

        impl<T, B> tonic::codegen::Service<tonic::codegen::http::Request<B>> for $Server<T>
        where
            T: $Trait,
            B: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
            B::Error: Into<tonic::codegen::StdError> + Send + 'static,
        {
            type Response = tonic::codegen::http::Response<tonic::body::Body>;
            type Error = std::convert::Infallible;
            type Future = $crate::service::BoxFuture<Result<Self::Response, Self::Error>>;

            fn poll_ready(
                &mut self,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Result<(), Self::Error>> {
                std::task::Poll::Ready(Ok(()))
            }

            fn call(&mut self, request: tonic::codegen::http::Request<B>) -> Self::Future {
                match request.uri().path() {
                    $(
                        $path => {
                            let (inner, fences) = (self.inner.clone(), self.fences.clone());
                            $crate::service::unary::<$Req, $Resp, B, _>(request, move |r| {
                                Box::pin(async move {
                                    let message = r.into_inner();
                                    fences.check(&message)?;
                                    inner.$method(message).await.map(tonic::Response::new)
                                })
                            })
                        }
                    )*
                    other => $crate::service::unimplemented(other),
                }
            }
        }

        #[doc = concat!("A client of a [`", stringify!($Trait), "`] server, sending the cluster's token with every request.")]
        #[derive(Clone, Debug)]
        pub struct $Client {
            grpc: tonic::client::Grpc<
                tonic::service::interceptor::InterceptedService<
                    tonic::transport::Channel,
                    $crate::service::TokenInterceptor,
                >,
            >,
        }

        impl $Client {
            /// A client of the server at `address` (`http://host:port`), connecting lazily
            /// (the first call connects, and reconnects after a failure).
            pub fn new(
                address: &str,
                secret: &sluice_net::auth::Secret,
            ) -> Result<Self, $crate::ControlError> {
                let endpoint = tonic::transport::Endpoint::from_shared(address.to_owned())
                    .map_err(|e| $crate::ControlError::Config(format!("address {address}: {e}")))?;
                let channel = endpoint.connect_lazy();
                let token = $crate::service::TokenInterceptor::new(secret)?;
                Ok($Client {
                    grpc: tonic::client::Grpc::new(
                        tonic::service::interceptor::InterceptedService::new(channel, token),
                    )
                    .max_decoding_message_size($crate::MAX_MESSAGE_BYTES)
                    .max_encoding_message_size($crate::MAX_MESSAGE_BYTES),
                })
            }

            $(
                $(#[$mdoc])*
                pub async fn $method(&mut self, request: $Req) -> Result<$Resp, tonic::Status> {
                    self.grpc.ready().await.map_err(|e| {
                        tonic::Status::unavailable(format!("the control service is not reachable: {e}"))
                    })?;
                    let path = tonic::codegen::http::uri::PathAndQuery::from_static($path);
                    self.grpc
                        .unary(
                            tonic::Request::new(request),
                            path,
                            tonic_prost::ProstCodec::<$Req, $Resp>::default(),
                        )
                        .await
                        .map(tonic::Response::into_inner)
                }
            )*
        }
    };
}

pub(crate) use control_service;
