//! The proxy handler: the per-request entry point of the data plane (the Go original's
//! `internal/handler/proxy.go`), as named phases over one [`context::RequestCtx`] — the same for
//! HTTP/1.1, HTTP/2, gRPC and WebSocket, which differ only inside the phases that must differ.
//! The driver creates the context from the request head before the first phase, lends it to the
//! phases, and hands it to the one that ends the request (respond, a WebSocket's relay, or the
//! answer to a failure), which writes the access-log line from it.
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
pub use body::ProxyBody;
pub use error::ProxyError;
pub use types::{DownstreamConn, Proxy, ProxySettings};

use context::{Kind, LogFields, NoRoute, RequestCtx, RouteSlot};
use downstream::{guard, Handover};
use http1_codec::fields::NodeAnswer;
use respond::render;

/// What [`Proxy::serve`] read off a request's head for the phases.
#[derive(Debug, Clone, Copy)]
struct Head {
    kind: Kind,
    /// The access log's protocol ([`access::protocol`]).
    protocol: &'static str,
    start: Instant,
}

/// How phase 4 ended when a node answered: what the phase that ends the request gets beside the
/// context.
// Made and moved once per request; boxing the larger variant would allocate per request.
#[allow(clippy::large_enum_variant)]
enum Answered {
    /// An HTTP or gRPC request's node answered ([`respond::respond`]).
    Node(respond::Forwarded),
    /// A WebSocket's handshake ended ([`websocket::answer`]).
    Socket(websocket::Upgrade),
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
    /// speaks HTTP/1.x ([`NodeAnswer`]).
    ///
    /// Kept as one function: the phases are written out in it, since every level of futures on
    /// the request path holds the request once more and is copied into its caller's state
    /// (measured: one level more cost about 1,400 instructions per request, most of them copies).
    ///
    /// An `async` block, not an `async fn`: an `async fn`'s future holds its arguments twice
    /// (captured, and moved into the body's locals on the first poll; a 240-byte
    /// `Request` at every level of the request path). The block takes them as captured; nothing
    /// runs before it, so making the future stays a few stores the caller's state takes in place.
    #[allow(clippy::manual_async_fn)]
    pub fn serve<'a>(
        self: &'a Arc<Self>,
        mut req: Request<ProxyBody>,
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
            let protocol = access::protocol(&req, kind == Kind::Grpc, upgrade);
            let head = Head {
                kind,
                protocol,
                start,
            };
            // The phases in order (module docs) over one context, consumed by the phase that ends
            // the request: respond, a WebSocket's answer, or [`Proxy::fail`] for an error. Written
            // out here, not in a function of their own: each level of futures holds the request
            // once more, and the caller's state copies a future it cannot build in place.
            let mut resp = 'phases: {
                let ctx = self.context(&req, head, dc, handed.present);
                let matched = guard::check_head(&req, &self.settings.limits)
                    .and_then(|()| route::match_route(&ctx.table, &req, ctx.start));
                let matched = match matched {
                    Ok(m) => m,
                    Err(err) => break 'phases NodeAnswer::from(self.fail(&err, ctx)),
                };
                let mut ctx = ctx.routed(matched.route);
                if let Err(err) = self.identify_and_check(&req, &mut ctx, dc) {
                    break 'phases NodeAnswer::from(self.fail(&err, ctx));
                }
                let (node, hop_seen) = match select::select(self, &mut ctx, dc).await {
                    Ok(selected) => selected,
                    Err(err) => break 'phases NodeAnswer::from(self.fail(&err, ctx)),
                };
                // A WebSocket handshake is HTTP/1.1 whatever the cluster's protocol (RFC 6455 section 4.1).
                let h1_node =
                    ctx.kind == Kind::WebSocket || node.settings.protocol == Protocol::Http1;
                let (up_headers, forwarded) = node_headers::node_headers(
                    self,
                    req.headers_mut(),
                    dc,
                    &ctx,
                    matched.host.as_ref(),
                    h1_node,
                );
                let target = matched.path_and_query;
                let found = if ctx.kind == Kind::WebSocket {
                    let on_upgrade = handed.on_upgrade;
                    let node = (node, hop_seen);
                    self.websocket(req, &mut ctx, node, up_headers, target, on_upgrade)
                        .await
                        .map(Answered::Socket)
                } else {
                    let parts = upstream::request::NodeRequestParts {
                        headers: up_headers,
                        forwarded,
                        host: matched.host,
                        target,
                    };
                    forward::forward(self, &mut ctx, (node, hop_seen), req, parts)
                        .await
                        .map(Answered::Node)
                };
                match found {
                    Ok(Answered::Node(forwarded)) => respond::respond(self, ctx, forwarded),
                    Ok(Answered::Socket(upgrade)) => {
                        NodeAnswer::from(websocket::answer(self, ctx, upgrade))
                    }
                    Err(err) => NodeAnswer::from(self.fail(&err, ctx)),
                }
            };
            if h1_upgrade && resp.response.status() != http::StatusCode::SWITCHING_PROTOCOLS {
                resp.response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            Ok(resp)
        }
    }

    /// The context of `req` from `dc` before the first phase: what its `head` says, the route
    /// table snapshot it uses throughout, and the access-log fields read off its head; `present`
    /// says which looked-up fields it can hold.
    fn context(
        &self,
        req: &Request<ProxyBody>,
        head: Head,
        dc: &DownstreamConn,
        present: http1_codec::head::Present,
    ) -> RequestCtx<NoRoute> {
        let mut log = LogFields::of_head(
            Some(req.method().clone()),
            Some(req.uri()),
            head.protocol,
            dc,
        );
        if self.settings.access_log {
            // Read only for the access line ([`Proxy::finish`] writes none when it is off).
            log.trace_id = access::trace_id(req.headers());
        }
        let h2 = req.version() == http::Version::HTTP_2;
        let table = self.routing.table();
        RequestCtx::new(head.kind, h2, table, head.start, present, log)
    }

    /// Phase 2 and what the matched route decides of `req` before a node is selected: the conn
    /// id (client's, validated; or issued), the declared body within the route's `max_body`, the
    /// version wanted (SPEC sections 4, 5 and 7), all into `ctx`.
    ///
    /// # Errors
    /// [`ProxyError::BadConnId`] (400), [`ProxyError::BodyTooLarge`] (413).
    fn identify_and_check(
        &self,
        req: &Request<ProxyBody>,
        ctx: &mut RequestCtx,
        dc: &DownstreamConn,
    ) -> Result<(), ProxyError> {
        let id = identify::identify(self, req.headers(), ctx.kind, ctx.h2, dc)?;
        ctx.conn_id = id.conn_id;
        ctx.issued = id.issued;
        guard::check_declared_body(req, ctx.route.config.max_body)?;
        ctx.wanted = context::wanted(&ctx.route, req);
        Ok(())
    }

    /// Phase 4 for a WebSocket: the upgrade of `req` (on `node`, with `up_headers` and `target`)
    /// up to the node's answer, which ends a hop the selection counted (first seen at
    /// `hop_seen`); `on_upgrade` is the gateway's own HTTP/1.1 driver's hand-on of the client's
    /// socket ([`Handover::on_upgrade`]), `None` takes hyper's upgrade. The relay
    /// starts when the driver hands the context to [`websocket::answer`]. An `async` block for
    /// the reason [`Proxy::serve`] gives.
    ///
    /// # Errors
    /// As [`websocket::handshake`].
    // The upgrade needs every piece the phases settled; a struct for one call site would only
    // rename them.
    #[allow(clippy::manual_async_fn, clippy::too_many_arguments)]
    fn websocket<'a>(
        self: &'a Arc<Self>,
        mut req: Request<ProxyBody>,
        ctx: &'a mut RequestCtx,
        (node, hop_seen): (Arc<Node>, Option<Instant>),
        up_headers: HeaderMap,
        target: PathAndQuery,
        on_upgrade: Option<downstream::http1::upgrade::OnUpgrade>,
    ) -> impl Future<Output = Result<websocket::Upgrade, ProxyError>> + 'a {
        async move {
            let upgrade = match on_upgrade {
                Some(own) => websocket::ClientUpgrade::Own(own),
                None => websocket::ClientUpgrade::Hyper(hyper::upgrade::on(&mut req)),
            };
            // A hop counted at placement is served again once the node answers the upgrade.
            let _clock = hop_clock::HopClock::new(&self.metrics, hop_seen);
            websocket::handshake(self, ctx, node, req, up_headers, target, upgrade).await
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
        let protocol = access::version_protocol(seen.version);
        let log = LogFields::of_head(seen.method, seen.uri.as_ref(), protocol, dc);
        let ctx = RequestCtx::new(
            Kind::Http,
            false,
            self.routing.table(),
            Instant::now(),
            http1_codec::head::Present::UNKNOWN,
            log,
        );
        self.fail(&err, ctx)
    }

    /// The gateway's own answer to `err` for the request of `ctx` (phase 5 for failures), logged
    /// and counted (phase 6) with the failure's HTTP status.
    fn fail<R: RouteSlot>(&self, err: &ProxyError, mut ctx: RequestCtx<R>) -> Response<ProxyBody> {
        let answer = render(err, ctx.kind.dialect());
        if ctx.kind == Kind::Grpc {
            // gRPC clients read grpc-status, not HTTP bodies (STYLE section 4).
            ctx.log.grpc_status.track();
            ctx.log.grpc_status.set(answer.grpc_status);
        }
        if err.is_node_fault() {
            let route = ctx.route.id().map_or("-", |r| &**r);
            tracing::warn!(error = %err, route, "request failed");
        }
        // The gateway's own answers are whole in memory: their length is known.
        let bytes_out = hyper::body::Body::size_hint(answer.response.body())
            .exact()
            .unwrap_or(0);
        let status = answer.status.as_u16();
        self.finish(&ctx, status, 0, bytes_out, Some(err.reason()));
        answer.response
    }
}
