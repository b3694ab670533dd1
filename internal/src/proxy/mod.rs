//! The proxy handler: the per-request entry point of the data plane (the Go original's
//! `internal/handler/proxy.go`), as named phases over one [`context::RequestCtx`] — the same for
//! HTTP/1.1, HTTP/2, gRPC and WebSocket, which differ only inside the phases that must differ.
//! This file is the driver only; the phases are the files beside it:
//!
//! | phase | file | what it settles |
//! |---|---|---|
//! | guard | [`downstream::guard`], [`http1_codec::head`] ([`downstream::http1`]) | the head is well-formed and within limits (SPEC section 4) |
//! | 1. match route | [`route`] | route, host, the node's request target |
//! | 2. identify | [`identify`] | the conn id (client's, validated; or issued) |
//! | 3. select node | [`select`] | the bound node, or a new one (a hop), or `on_all_down` |
//! | 4. forward | [`node_headers`], [`forward`] ([`retry`]), [`websocket`] | attempts until a node answers |
//! | 5. respond | [`respond`](mod@respond): [`respond::respond`]; failures: [`respond::render`] | the client's answer |
//! | 6. log | [`access`] | metrics and the access log line |
//!
//! By side: [`downstream`] is the client side (HTTP/1.1 server codec, h2 limits, head guards),
//! [`upstream`] the node side (the client to nodes, HTTP/1.1 client codec, h2, gRPC); neither
//! imports the other. What both use sits at the top: [`types`] (the shared types), [`body`],
//! [`headers`], [`http1_codec`] (what both HTTP/1.1 halves share), [`error`], [`expect`],
//! [`client_body`], [`deadline`], [`hop_clock`]. The phases and [`websocket`] use both sides.
//!
//! Every failure is a [`ProxyError`] and becomes an answer in [`respond::render`] and nowhere
//! else. Streams both ways; bodies are never buffered whole.

pub(crate) mod access;
pub mod body;
pub(crate) mod client_body;
pub(crate) mod context;
pub mod deadline;
pub mod downstream;
pub mod error;
pub(crate) mod expect;
pub(crate) mod forward;
pub(crate) mod headers;
pub(crate) mod hop_clock;
pub mod http1_codec;
pub(crate) mod identify;
#[cfg(test)]
pub(crate) mod loopback;
pub mod moving;
pub(crate) mod node_headers;
pub mod respond;
pub(crate) mod retry;
pub(crate) mod route;
pub(crate) mod select;
pub mod types;
pub mod upstream;
pub(crate) mod websocket;

use std::future::Future;
use std::sync::Arc;

use http::uri::PathAndQuery;
use http::{header, HeaderMap, HeaderValue, Request, Response};
use tokio::time::Instant;

use crate::config::Protocol;
use crate::registry::Node;

// The API the server uses, by the names it always had.
pub use access::LogCtx;
pub use body::ProxyBody;
pub use error::ProxyError;
pub use types::{DownstreamConn, Proxy, ProxySettings};

use context::{Kind, RequestCtx};
use downstream::{guard, Handover};
use http1_codec::fields::NodeAnswer;
use respond::render;

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
    /// speaks HTTP/1.x ([`NodeAnswer`]).
    ///
    /// An `async` block, not an `async fn`: an `async fn`'s future holds its arguments twice
    /// (captured, and moved into the body's locals on the first poll; a 240-byte
    /// `Request` at every level of the request path). The block takes them as captured; nothing
    /// runs before it, so making the future stays a few stores the caller's state takes in place.
    #[allow(clippy::manual_async_fn)]
    pub fn serve<'a>(
        self: &'a Arc<Self>,
        req: Request<ProxyBody>,
        dc: &'a Arc<DownstreamConn>,
        handed: Handover,
    ) -> impl Future<Output = Result<NodeAnswer<ProxyBody>, std::convert::Infallible>> + 'a {
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
                Err(err) => NodeAnswer::from(self.fail(&err, kind, start, &mut log)),
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
    ) -> impl Future<Output = Result<NodeAnswer<ProxyBody>, ProxyError>> + 'a {
        async move {
            guard::check_head(&req, &self.settings.limits)?;
            let table = self.routing.table();
            let matched = route::match_route(&table, &req, start)?;
            log.route = Some(matched.route.id.clone());
            log.table = Some(table.clone());
            let h2 = req.version() == http::Version::HTTP_2;
            let id = identify::identify(self, req.headers(), kind, h2, dc)?;
            log.conn_id = id.conn_id.clone();
            guard::check_declared_body(&req, matched.route.config.max_body)?;
            let wanted = context::wanted(&matched.route, &req);
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
                present: handed.present,
            };
            let node = select::select(self, &mut ctx, dc, log).await?;
            // A WebSocket handshake is HTTP/1.1 whatever the cluster's protocol (RFC 6455 section 4.1).
            let h1_node = kind == Kind::WebSocket || node.settings.protocol == Protocol::Http1;
            let (up_headers, forwarded) = node_headers::node_headers(
                self,
                req.headers_mut(),
                dc,
                &ctx,
                matched.host.as_ref(),
                h1_node,
            );
            if kind == Kind::WebSocket {
                let target = matched.path_and_query;
                return self
                    .websocket(req, ctx, node, up_headers, target, handed.on_upgrade, log)
                    .await;
            }
            forward::forward(
                self,
                ctx,
                node,
                req,
                upstream::request::NodeRequestParts {
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

    /// Phase 4 for a WebSocket: the upgrade of `req` (on `node`, with `up_headers` and `target`)
    /// relayed until either side closes; `on_upgrade` is the gateway's own HTTP/1.1 driver's
    /// hand-on of the client's socket ([`Handover::on_upgrade`]), `None` takes hyper's upgrade.
    /// An `async` block for the reason [`Proxy::serve`] gives.
    // The upgrade needs every piece the phases settled; a struct for one call site would only
    // rename them.
    #[allow(clippy::manual_async_fn, clippy::too_many_arguments)]
    fn websocket<'a>(
        self: &'a Arc<Self>,
        mut req: Request<ProxyBody>,
        ctx: RequestCtx,
        node: Arc<Node>,
        up_headers: HeaderMap,
        target: PathAndQuery,
        on_upgrade: Option<downstream::http1::upgrade::OnUpgrade>,
        log: &'a mut LogCtx,
    ) -> impl Future<Output = Result<NodeAnswer<ProxyBody>, ProxyError>> + 'a {
        async move {
            let upgrade = match on_upgrade {
                Some(own) => websocket::ClientUpgrade::Own(own),
                None => websocket::ClientUpgrade::Hyper(hyper::upgrade::on(&mut req)),
            };
            // A hop counted at placement is served again once the node answers the upgrade.
            let _clock = hop_clock::HopClock::new(&self.metrics, ctx.hop_seen);
            websocket::proxy(
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
            .map(NodeAnswer::from)
        }
    }

    /// The gateway's own answer to a request head from `dc` that [`downstream::http1::request`]
    /// refused (`err` is the refusal's error: 400, 414 or 431), logged and counted like every
    /// failure, with what `seen` of its request line (method, path and protocol, `-` where not
    /// known).
    pub(crate) fn refused(
        &self,
        err: ProxyError,
        dc: &DownstreamConn,
        seen: downstream::http1::request::LineSeen,
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
