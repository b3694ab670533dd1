//! The request context: what the phases of [`super::types::Proxy::handle`] learn about one request,
//! the access-log fields among it ([`LogFields`]). Created once, from the request head, before the
//! first phase; the route phase moves it into its routed form (the same value, its route slot
//! filled: [`RequestCtx::routed`]); the later phases fill it in (identify → select → forward) and
//! the last one consumes it (respond, or the relay of a WebSocket, writes the access-log line from
//! it). Model: pingora-proxy's per-request `Session` + `CTX`.

use std::sync::Arc;

use http::uri::PathAndQuery;
use http::Uri;

use tokio::time::Instant;

use super::http1_codec::head::Present;
use super::types::DownstreamConn;
use crate::hopper::ConnId;
use crate::registry::NodeId;
use crate::routing::{Route, RouteTable};
use crate::selection::version::{self, Wanted};
use crate::selection::Criteria;

/// What a request is; the phases that must differ (identify, forward) branch on it, no other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Plain HTTP request/response over HTTP/1.x or HTTP/2.
    Http,
    /// A gRPC call (`content-type: application/grpc…`).
    Grpc,
    /// A WebSocket: HTTP/1.1 upgrade (RFC 6455) or extended CONNECT (RFC 8441).
    WebSocket,
}

/// What `req` is: a WebSocket (an HTTP/1.1 `Upgrade: websocket` or an RFC 8441 extended
/// CONNECT), else gRPC by its `content-type`, else plain HTTP. Fields `present` says are absent
/// are not looked up.
pub(crate) fn kind_of<B>(req: &http::Request<B>, present: Present) -> Kind {
    if super::headers::is_extended_connect(req)
        || (present.connection
            && present.upgrade
            && super::headers::is_websocket_upgrade(req.headers()))
    {
        Kind::WebSocket
    } else if present.content_type && super::upstream::grpc::is_grpc(req.headers()) {
        Kind::Grpc
    } else {
        Kind::Http
    }
}

/// The canary version `req` asks for on `route` (SPEC section 7); the default when the route has
/// no canary.
pub(crate) fn wanted<B>(route: &Route, req: &http::Request<B>) -> Wanted {
    route
        .config
        .canary
        .as_ref()
        .map(|c| version::wanted(c, req.headers(), req.uri().query()))
        .unwrap_or_default()
}

/// The access-log fields of a request's context gathered along the way (SPEC section 8); route,
/// route table and conn id are the context's own ([`RequestCtx`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct LogFields {
    /// Method; `None` (logged `-`) for a refused head whose method did not parse.
    pub method: Option<http::Method>,
    /// The target's path and query as received, a cheap reference-counted copy: the log shows
    /// its path (as [`http::Uri::path`] gives it, [`LogFields::shown_path`]). `None` when the target
    /// has none: an authority-form target (logged empty) or, with `target_seen` false, a refused
    /// head whose request line did not parse (logged `-`).
    pub path: Option<PathAndQuery>,
    /// False only for a refused head whose request line did not parse.
    pub target_seen: bool,
    /// Node id or `-`.
    pub node: Option<Arc<str>>,
    /// Hops during this request.
    pub hops: u32,
    /// The gRPC status the response ended with, when it is gRPC (CASE-07).
    pub grpc_status: super::upstream::grpc::GrpcStatus,
    /// Client address.
    pub client: Option<std::net::SocketAddr>,
    /// `http/1.0`, `http/1.1`, `h2`, `ws` or `grpc` ([`super::access::protocol`]); `-` for a
    /// refused head whose request line did not parse ([`super::access::version_protocol`]).
    pub protocol: &'static str,
    /// Trace id of a valid W3C `traceparent` (the header itself is forwarded untouched).
    pub trace_id: Option<Box<str>>,
    /// The verified client certificate's subject (mTLS, SPEC section 10).
    pub client_subject: Option<Arc<str>>,
}

impl LogFields {
    /// The log fields read off a request head from `dc`: its `method` and target `uri` (`None`
    /// where its request line did not parse) and its `protocol` as the log names it; the node,
    /// hops and trace id are filled in later.
    pub(crate) fn of_head(
        method: Option<http::Method>,
        uri: Option<&Uri>,
        protocol: &'static str,
        dc: &DownstreamConn,
    ) -> LogFields {
        LogFields {
            method,
            // No path and query: authority-form, whose path `Uri::path` gives as "".
            path: uri.and_then(Uri::path_and_query).cloned(),
            target_seen: uri.is_some(),
            client: Some(dc.peer),
            protocol,
            client_subject: dc.tls.as_ref().and_then(|t| t.client_subject.clone()),
            ..LogFields::default()
        }
    }

    /// What the log shows of the target: its path, "" for authority-form, `-` when not known.
    pub(crate) fn shown_path(&self) -> &str {
        match &self.path {
            Some(pq) => pq.path(),
            None if self.target_seen => "",
            None => "-",
        }
    }
}

/// The route slot of a [`RequestCtx`] before the route phase matched one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NoRoute;

/// What a [`RequestCtx`]'s route slot can hold: [`NoRoute`] before the route phase, the matched
/// `Arc<Route>` after it. The access log reads the route's id through it (`-` without one).
pub(crate) trait RouteSlot {
    /// The route's id; `None` before a route matched.
    fn id(&self) -> Option<&Arc<str>>;
}

impl RouteSlot for NoRoute {
    fn id(&self) -> Option<&Arc<str>> {
        None
    }
}

impl RouteSlot for Arc<Route> {
    fn id(&self) -> Option<&Arc<str>> {
        Some(&self.id)
    }
}

/// One request's context (see the module docs): `R` is its route slot, [`NoRoute`] until the
/// route phase matched and `Arc<Route>` (the default, what every later phase sees) from then on.
/// Cheap to clone (a WebSocket's relay task keeps one for the socket's life).
#[derive(Debug, Clone)]
pub(crate) struct RequestCtx<R = Arc<Route>> {
    /// What the request is.
    pub kind: Kind,
    /// True if it came over HTTP/2 (its connection has a conn id of its own, SPEC section 5).
    pub h2: bool,
    /// Matched route (phase 1).
    pub route: R,
    /// The table snapshot the request uses throughout, loaded once with the head.
    pub table: Arc<RouteTable>,
    /// Conn id (validated, or issued by the gateway), if any (phase 2, SPEC section 5).
    pub conn_id: Option<ConnId>,
    /// True if the gateway issued the id (it is returned to the client).
    pub issued: bool,
    /// Version decision (SPEC section 7); set once the route matched.
    pub wanted: Wanted,
    /// Request start.
    pub start: Instant,
    /// Which of the looked-up fields the request holds, as its parser saw them.
    pub present: Present,
    /// The access-log fields (SPEC section 8): those of the head, then the node and hops as the
    /// phases learn them.
    pub log: LogFields,
}

impl RequestCtx<NoRoute> {
    /// The context of a request of `kind` (over HTTP/2 when `h2`) that started at `start`, before
    /// any phase ran: `table` is the route table snapshot it will use throughout, `log` the
    /// access-log fields read off its head.
    pub(crate) fn new(
        kind: Kind,
        h2: bool,
        table: Arc<RouteTable>,
        start: Instant,
        present: Present,
        log: LogFields,
    ) -> Self {
        RequestCtx {
            kind,
            h2,
            route: NoRoute,
            table,
            conn_id: None,
            issued: false,
            wanted: Wanted::default(),
            start,
            present,
            log,
        }
    }

    /// The same context with `route` in its route slot (the route phase matched it).
    pub(crate) fn routed(self, route: Arc<Route>) -> RequestCtx {
        RequestCtx {
            kind: self.kind,
            h2: self.h2,
            route,
            table: self.table,
            conn_id: self.conn_id,
            issued: self.issued,
            wanted: self.wanted,
            start: self.start,
            present: self.present,
            log: self.log,
        }
    }
}

impl RequestCtx {
    /// The selection criteria of this request with `exclude` (nodes already tried) left out, in
    /// the gateway's `zone`: the one place they are built (SPEC section 7: version, splits, zone,
    /// stable key).
    pub(crate) fn criteria<'a>(
        &'a self,
        zone: Option<&'a str>,
        exclude: &'a [NodeId],
    ) -> Criteria<'a> {
        Criteria {
            version: self.wanted.version.as_deref(),
            metadata_key: self
                .route
                .config
                .canary
                .as_ref()
                .map_or("version", |c| c.metadata_key.as_str()),
            avoid_versions: &self.wanted.avoid,
            exclude,
            zone,
            key: self.conn_id.as_deref().or(self.wanted.split_key.as_deref()),
        }
    }

    /// The conn id as a header value when the gateway issued it: sent to the node and returned to
    /// the client (SPEC section 5). `None` for a client's own id (it travels as the client sent
    /// it, or not at all when nominated in `Connection`) and for a request without one.
    pub(crate) fn issued_id(&self) -> Option<http::HeaderValue> {
        let id = self.conn_id.as_ref().filter(|_| self.issued)?;
        http::HeaderValue::from_str(id).ok()
    }

    /// When the route's timeout runs out for a node's response head (SPEC section 4).
    pub(crate) fn deadline(&self) -> Instant {
        super::upstream::grpc_call::head_deadline(self.start, self.route.config.timeout, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_logged_path_is_the_targets_as_uri_gives_it() {
        let dc = DownstreamConn::new("127.0.0.1:4000".parse().expect("addr"));
        for target in [
            "/a/b?c=1",
            "*",
            "http://h.example",
            "http://h.example/x?y",
            "h.example:443",
        ] {
            let uri: Uri = target.parse().expect("uri");
            let log = LogFields::of_head(None, Some(&uri), "h2", &dc);
            assert_eq!(log.shown_path(), uri.path(), "{target}");
        }
        let unknown = LogFields::of_head(None, None, "-", &dc);
        assert_eq!(unknown.shown_path(), "-");
    }
}
