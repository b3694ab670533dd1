//! The request context: what the phases of [`super::types::Proxy::handle`] learn about one request,
//! created once after the route phase and passed through the rest (identify → select → forward →
//! respond → log). Model: pingora-proxy's per-request `Session` + `CTX`.

use std::sync::Arc;

use tokio::time::Instant;

use super::http1_codec::head::Present;
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

/// One request's context after its route matched (see the module docs). Cheap to clone (a
/// WebSocket's relay task keeps one for the socket's life).
#[derive(Debug, Clone)]
pub(crate) struct RequestCtx {
    /// What the request is.
    pub kind: Kind,
    /// True if it came over HTTP/2 (its connection has a conn id of its own, SPEC section 5).
    pub h2: bool,
    /// Matched route.
    pub route: Arc<Route>,
    /// The table snapshot the request uses throughout.
    pub table: Arc<RouteTable>,
    /// Conn id (validated, or issued by the gateway), if any (SPEC section 5).
    pub conn_id: Option<ConnId>,
    /// True if the gateway issued the id (it is returned to the client).
    pub issued: bool,
    /// Version decision (SPEC section 7).
    pub wanted: Wanted,
    /// The gateway's zone, for zone-aware selection.
    pub zone: Option<Arc<str>>,
    /// Request start.
    pub start: Instant,
    /// When the failure behind a hop counted while selecting the node was first seen
    /// ([`crate::hopper::Placement::hop_seen`]); set by the select phase.
    pub hop_seen: Option<Instant>,
    /// Which of the looked-up fields the request holds, as its parser saw them.
    pub present: Present,
}

impl RequestCtx {
    /// The selection criteria of this request with `exclude` (nodes already tried) left out: the
    /// one place they are built (SPEC section 7: version, splits, zone, stable key).
    pub(crate) fn criteria<'a>(&'a self, exclude: &'a [NodeId]) -> Criteria<'a> {
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
            zone: self.zone.as_deref(),
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
