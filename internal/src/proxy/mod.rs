//! The proxy handler: the per-request entry point of the data plane (the Go original's
//! `internal/handler/proxy.go`), as named phases over one [`context::RequestCtx`] — the same for
//! HTTP/1.1, HTTP/2, gRPC and WebSocket, which differ only inside the phases that must differ:
//!
//! | phase | file | what it settles |
//! |---|---|---|
//! | guard | [`guard`], [`head`] ([`http1`]) | the head is well-formed and within limits (SPEC section 4) |
//! | 1. match route | [`route`] | route, host, the node's request target |
//! | 2. identify | [`identify`] | the conn id (client's, validated; or issued) |
//! | 3. select node | [`select`] | the bound node, or a new one (a hop), or `on_all_down` |
//! | 4. forward | [`outbound`], [`forward`] ([`retry`]), [`websocket`] | attempts until a node answers |
//! | 5. respond | [`response`]; failures: [`respond`](mod@respond) | the client's answer |
//! | 6. log | [`access`] | metrics and the access log line |
//!
//! Every failure is a [`ProxyError`] and becomes an answer in [`respond::render`] and nowhere
//! else. Streams both ways; bodies are never buffered whole.

pub(crate) mod access;
pub(crate) mod body;
pub(crate) mod client_body;
pub(crate) mod context;
pub mod deadline;
pub mod error;
pub(crate) mod expect;
pub(crate) mod forward;
pub(crate) mod grpc;
pub(crate) mod grpc_call;
pub mod guard;
pub(crate) mod h2;
pub mod h2_frames;
pub mod h2_penalty;
pub(crate) mod h2_stream;
pub mod h2_watch;
pub mod head;
pub(crate) mod headers;
pub(crate) mod hop_clock;
pub mod http1;
pub(crate) mod identify;
pub mod node_request;
pub(crate) mod outbound;
pub mod respond;
pub(crate) mod response;
pub(crate) mod retry;
pub(crate) mod route;
pub(crate) mod select;
pub(crate) mod send_error;
pub mod upstream;
pub(crate) mod websocket;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::{Limits, Protocol};
use crate::drain;
use crate::hopper::{ConnIds, Hopper};
use crate::metrics::Metrics;
use crate::registry::NodeRuntime;
use crate::routing::reload::Routing;
use crate::selection::version;

pub use access::LogCtx;
use context::{Kind, RequestCtx};
pub use error::ProxyError;
use head::Present;
use http1::node_fields::Answer;
use respond::render;

/// Boxed error for bodies (the cause of a failed body frame; read with `downcast_ref`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body type on both sides of the proxy: streamed [`Bytes`] frames (data and trailers),
/// never buffered whole.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Per-downstream-connection state shared by its requests.
#[derive(Debug)]
pub struct DownstreamConn {
    /// The client's address (the TCP peer).
    pub peer: SocketAddr,
    /// The client as `X-Forwarded-For` names it, formatted once.
    pub forwarded_peer: headers::Peer,
    /// For h2 connections without an affinity header: the connection's own conn id (SPEC section 5).
    pub conn_id: OnceLock<crate::hopper::ConnId>,
    /// The node this h2 connection is bound to; the server sends GOAWAY when it drains.
    pub bound: watch::Sender<Option<Arc<NodeRuntime>>>,
    /// What the TLS handshake settled; `None` on the cleartext listener (SPEC section 10).
    pub tls: Option<crate::tls::server::TlsInfo>,
}

impl DownstreamConn {
    /// State for a new connection from `peer`.
    pub fn new(peer: SocketAddr) -> Self {
        DownstreamConn {
            peer,
            forwarded_peer: headers::Peer::new(peer),
            conn_id: OnceLock::new(),
            bound: watch::channel(None).0,
            tls: None,
        }
    }

    /// The same connection, marked as having come over TLS with what its handshake settled.
    pub fn with_tls(mut self, tls: Option<crate::tls::server::TlsInfo>) -> Self {
        self.tls = tls;
        self
    }
}

/// Settings the proxy reads per request (from the startup config; reloads change routes only).
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// The header that carries the conn id (SPEC section 4 `[affinity] header`, default `X-Conn-Id`).
    pub affinity_header: HeaderName,
    /// Peers whose `X-Forwarded-For` is extended rather than replaced (SPEC section 4
    /// `trusted_proxies`); `None` trusts nobody.
    pub trusted: Option<Vec<ipnet::IpNet>>,
    /// Request limits: head size, body rate and idle time, WebSocket message size (SPEC section 4 `[limits]`).
    pub limits: Limits,
    /// True if every finished request writes an access log line (SPEC section 8).
    pub access_log: bool,
    /// The gateway's zone, preferred by zone-aware selection (SPEC section 7); `None`: no preference.
    pub zone: Option<Arc<str>>,
}

/// The data-plane handler: one per data-plane worker (`--workers`), shared by the worker's
/// connection tasks; the workers' handlers share everything but [`Proxy::upstream`].
#[derive(Debug)]
pub struct Proxy {
    /// Owns the live route table (loaded once per request; swapped whole on reload).
    pub routing: Arc<Routing>,
    /// Owns the conn id bindings and the hop decision.
    pub hopper: Arc<Hopper>,
    /// Validates client conn ids and issues new ones (SPEC section 4 `[affinity] ids`).
    pub ids: ConnIds,
    /// The client to nodes: HTTP/1.1 pools and one multiplexed h2 connection per node, the
    /// worker's own (its pooled connections are driven by the worker's runtime).
    pub upstream: Arc<upstream::Upstream>,
    /// The Prometheus families (SPEC section 9).
    pub metrics: Arc<Metrics>,
    /// The worker's recently used `gateway_requests_total` counters (its own, like `upstream`).
    pub(crate) counters: crate::metrics::RequestCounters,
    /// Per-request settings from the startup config.
    pub settings: ProxySettings,
    /// Shutdown signal for long-lived connections.
    pub shutdown: drain::Watch,
}

/// What the driver that read a request knows of it beside the `Request` itself.
pub struct Handover {
    /// Given by the gateway's own HTTP/1.1 driver for an upgrade head: where a WebSocket takes
    /// the client's socket once the `101` went out ([`http1::upgrade`]); `None` takes hyper's
    /// upgrade.
    pub on_upgrade: Option<http1::upgrade::OnUpgrade>,
    /// Which looked-up fields the request can hold (that driver's parser saw the names).
    pub present: Present,
}

impl Handover {
    /// A request hyper read (HTTP/2): its upgrade is hyper's, any field may be there.
    pub const HYPER: Handover = Handover {
        on_upgrade: None,
        present: Present::UNKNOWN,
    };
}

impl Proxy {
    /// Handles one downstream request from `dc` served by hyper (HTTP/2, where an RFC 8441
    /// WebSocket takes hyper's upgrade); never fails (a failure becomes the answer that
    /// [`respond::render`] makes of it for the request's protocol).
    pub async fn handle(
        self: Arc<Self>,
        req: Request<ProxyBody>,
        dc: Arc<DownstreamConn>,
    ) -> Result<Response<ProxyBody>, std::convert::Infallible> {
        let answer = self.serve(req, &dc, Handover::HYPER).await?;
        // An HTTP/2 request asks its node with `raw_answer: false` (forward.rs): every field of
        // the answer is in the map.
        debug_assert!(answer.node_fields.is_none());
        Ok(answer.response)
    }

    /// Handles one downstream request from `dc`, as [`Proxy::handle`], with what the driver that
    /// read it knows beside it (`handed`: [`Handover`]).
    /// Returns the answer with an HTTP/1.x node's fields as bytes beside it when the client
    /// speaks HTTP/1.x ([`Answer`]).
    ///
    /// An `async` block, not an `async fn`: an `async fn`'s future holds its arguments twice
    /// (captured, and moved into the body's locals on the first poll; issue 16: a 240-byte
    /// `Request` at every level of the request path). The block takes them as captured; nothing
    /// runs before it, so making the future stays a few stores the caller's state takes in place.
    #[allow(clippy::manual_async_fn)]
    pub fn serve<'a>(
        self: &'a Arc<Self>,
        req: Request<ProxyBody>,
        dc: &'a Arc<DownstreamConn>,
        handed: Handover,
    ) -> impl Future<Output = Result<Answer<ProxyBody>, std::convert::Infallible>> + 'a {
        async move {
            let start = Instant::now();
            let kind = context::kind_of(&req, handed.present);
            let upgrade = match handed.present.upgrade {
                true => req.headers().get(header::UPGRADE),
                false => None,
            };
            // An HTTP/1.1 upgrade that is not accepted ends the connection: what follows its head may
            // not be HTTP/1.x (CASE-13).
            let h1_upgrade = req.version() <= http::Version::HTTP_11 && upgrade.is_some();
            let mut log = LogCtx {
                method: Some(req.method().clone()),
                uri: Some(req.uri().clone()),
                client: Some(dc.peer),
                protocol: access::protocol(&req, kind == Kind::Grpc, upgrade),
                // Read only for the access line ([`Proxy::finish`] writes none when it is off).
                trace_id: if self.settings.access_log {
                    access::trace_id(req.headers())
                } else {
                    None
                },
                client_subject: dc.tls.as_ref().and_then(|t| t.client_subject.clone()),
                ..LogCtx::default()
            };
            let mut resp = match self.phases(req, kind, dc, start, &mut log, handed).await {
                Ok(resp) => resp,
                Err(err) => Answer::from(self.fail(&err, kind, start, &mut log)),
            };
            if h1_upgrade && resp.response.status() != http::StatusCode::SWITCHING_PROTOCOLS {
                resp.response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(resp)
        }
    }

    /// The phases in order (module docs); `Err` is answered by [`Proxy::fail`]. An `async`
    /// block for the reason [`Proxy::serve`] gives.
    #[allow(clippy::manual_async_fn)]
    fn phases<'a>(
        self: &'a Arc<Self>,
        mut req: Request<ProxyBody>,
        kind: Kind,
        dc: &'a Arc<DownstreamConn>,
        start: Instant,
        log: &'a mut LogCtx,
        handed: Handover,
    ) -> impl Future<Output = Result<Answer<ProxyBody>, ProxyError>> + 'a {
        async move {
            let Handover {
                on_upgrade,
                present,
            } = handed;
            guard::check_head(&req, &self.settings.limits)?;
            let table = self.routing.table();
            let matched = route::match_route(&table, &req, start)?;
            log.route = Some(matched.route.id.clone());
            log.table = Some(table.clone());
            let h2 = req.version() == http::Version::HTTP_2;
            let id = identify::identify(self, req.headers(), kind, h2, dc)?;
            log.conn_id = id.conn_id.clone();
            guard::check_declared_body(&req, matched.route.config.max_body)?;
            let wanted = matched
                .route
                .config
                .canary
                .as_ref()
                .map(|c| version::wanted(c, req.headers(), req.uri().query()))
                .unwrap_or_default();
            let mut ctx = RequestCtx {
                kind,
                h2,
                route: matched.route,
                table,
                conn_id: id.conn_id,
                issued: id.issued,
                wanted,
                zone: self.settings.zone.clone(),
                start,
                hop_seen: None,
                present,
            };
            let node = select::select(self, &mut ctx, dc, log).await?;
            // A WebSocket handshake is HTTP/1.1 whatever the cluster's protocol (RFC 6455 section 4.1).
            let h1_node = kind == Kind::WebSocket || node.settings.protocol == Protocol::Http1;
            let (up_headers, forwarded) = outbound::node_headers(
                self,
                req.headers_mut(),
                dc,
                &ctx,
                matched.host.as_ref(),
                h1_node,
            );
            if kind == Kind::WebSocket {
                // The socket may live for days: its log context must not keep hyper's read buffer
                // (which the parsed target shares) alive, so the target is copied.
                log.uri = log.uri.as_ref().and_then(|u| u.to_string().parse().ok());
                let upgrade = match on_upgrade {
                    Some(own) => websocket::ClientUpgrade::Own(own),
                    None => websocket::ClientUpgrade::Hyper(hyper::upgrade::on(&mut req)),
                };
                // A hop counted at placement is served again once the node answers the upgrade.
                let _clock = hop_clock::HopClock::new(&self.metrics, ctx.hop_seen);
                let target = matched.path_and_query;
                return websocket::proxy(
                    self.clone(),
                    ctx,
                    node,
                    req,
                    up_headers,
                    target,
                    upgrade,
                    log,
                )
                .await
                .map(Answer::from);
            }
            forward::forward(
                self,
                ctx,
                node,
                req,
                outbound::Outbound {
                    headers: up_headers,
                    forwarded,
                    host: matched.host,
                    target: matched.path_and_query,
                },
                log,
            )
            .await
        }
    }

    /// The gateway's own answer to a request head from `dc` that [`http1::request`] refused
    /// (`err` is the refusal's error: 400, 414 or 431), logged and counted like every failure,
    /// with what `seen` of its request line (method, path and protocol, `-` where not known).
    pub(crate) fn refused(
        &self,
        err: ProxyError,
        dc: &DownstreamConn,
        seen: http1::request::LineSeen,
    ) -> Response<ProxyBody> {
        let mut log = LogCtx {
            method: seen.method,
            uri: seen.uri,
            protocol: access::version_protocol(seen.version),
            client: Some(dc.peer),
            client_subject: dc.tls.as_ref().and_then(|t| t.client_subject.clone()),
            ..LogCtx::default()
        };
        self.fail(&err, Kind::Http, Instant::now(), &mut log)
    }

    /// The gateway's own answer to `err` for a request of `kind` (phase 5 for failures), logged
    /// and counted (phase 6) with the failure's HTTP status.
    fn fail(
        &self,
        err: &ProxyError,
        kind: Kind,
        start: Instant,
        log: &mut LogCtx,
    ) -> Response<ProxyBody> {
        let answer = render(err, kind.dialect());
        log.reason = Some(err.reason());
        if kind == Kind::Grpc {
            // gRPC clients read grpc-status, not HTTP bodies (STYLE section 4).
            log.grpc_status.track();
            log.grpc_status.set(answer.grpc_status);
        }
        if err.is_node_fault() {
            tracing::warn!(error = %err, route = log.route.as_deref().unwrap_or("-"), "request failed");
        }
        // The gateway's own answers are whole in memory: their length is known.
        let bytes_out = hyper::body::Body::size_hint(answer.response.body())
            .exact()
            .unwrap_or(0);
        self.finish(log, answer.status.as_u16(), start, 0, bytes_out);
        answer.response
    }
}
