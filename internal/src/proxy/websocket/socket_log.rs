//! The access-log fields a relayed socket keeps for its one line at the end (SPEC section 8):
//! only what its request context ([`RequestCtx`]: route, table, conn id) does not hold already,
//! in compact form, since the socket may stay idle for days (memory per idle
//! WebSocket); and the socket's span ([`socket_span`]). Spawns nothing.

use std::net::SocketAddr;
use std::sync::Arc;

use http::Method;

use crate::proxy::access::LogCtx;
use crate::proxy::context::RequestCtx;

/// A socket's access-log fields, taken from the handshake's [`LogCtx`]; [`SocketLog::line`] gives
/// that context back, equal field for field, when the socket ends.
///
/// Left out because the context holds them: `route` (the route's id), `table` and `conn_id`
/// (both set from the same values as the request context's, [`crate::proxy::types::Proxy::serve`]);
/// because a relayed socket's answer is the node's `101`: `reason` (set only for the gateway's
/// own answers) and `grpc_status` (never tracked for a WebSocket).
#[derive(Debug)]
pub(super) struct SocketLog {
    method: Option<Method>,
    /// The target as text (the handshake's target was already re-parsed from its text so that it
    /// shares no read buffer); parsed again for the line.
    uri: Option<Box<str>>,
    client: Option<SocketAddr>,
    protocol: &'static str,
    trace_id: Option<Box<str>>,
    client_subject: Option<Arc<str>>,
    /// The node serving the socket (changed by a hop).
    pub(super) node: Option<Arc<str>>,
    /// Hops during the socket's life.
    pub(super) hops: u32,
}

impl SocketLog {
    /// The fields of the handshake's `log` that the socket's request context does not hold.
    pub(super) fn of(log: &LogCtx) -> Self {
        SocketLog {
            method: log.method.clone(),
            uri: log.uri.as_ref().map(|u| u.to_string().into_boxed_str()),
            client: log.client,
            protocol: log.protocol,
            trace_id: log.trace_id.as_deref().map(Box::from),
            client_subject: log.client_subject.clone(),
            node: log.node.clone(),
            hops: log.hops,
        }
    }

    /// The access-log context of the socket served for the request in `ctx`: the fields kept here
    /// with route, table and conn id from `ctx` ([`crate::proxy::types::Proxy::finish`] writes it).
    pub(super) fn line(&self, ctx: &RequestCtx) -> LogCtx {
        LogCtx {
            method: self.method.clone(),
            uri: self.uri.as_deref().and_then(|u| u.parse().ok()),
            route: Some(ctx.route.id.clone()),
            node: self.node.clone(),
            conn_id: ctx.conn_id.clone(),
            hops: self.hops,
            grpc_status: Default::default(),
            table: Some(ctx.table.clone()),
            client: self.client,
            protocol: self.protocol,
            trace_id: self.trace_id.as_deref().map(String::from),
            reason: None,
            client_subject: self.client_subject.clone(),
        }
    }
}

/// The span of the socket served for the request in `ctx`: `websocket`, with its conn id (`-`
/// without one), cluster and protocol; the lines written while the relay handles an event carry it.
pub(super) fn socket_span(ctx: &RequestCtx) -> tracing::Span {
    tracing::info_span!(
        "websocket",
        conn_id = ctx.conn_id.as_deref().unwrap_or("-"),
        cluster = %ctx.route.cluster.name,
        protocol = "websocket",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load_str, test_fixtures::two_versions, IdMode};
    use crate::hopper::ConnIds;
    use crate::metrics::Metrics;
    use crate::proxy::context::Kind;
    use crate::registry::Registry;
    use crate::routing::RouteTable;
    use tokio::time::Instant;

    #[test]
    fn the_line_gives_back_every_field_of_the_handshakes_log() {
        let registry = Registry::new(Arc::new(Metrics::new()));
        let cfg = Arc::new(load_str(&two_versions("version"), "t.toml").expect("valid"));
        let table = Arc::new(RouteTable::build(cfg, &registry, 1, None));
        let conn = ConnIds::new(IdMode::Client, Vec::new())
            .parse(b"user-7")
            .expect("id");
        let ctx = RequestCtx {
            kind: Kind::WebSocket,
            h2: false,
            route: table.routes[0].clone(),
            table: table.clone(),
            conn_id: Some(conn.clone()),
            issued: false,
            wanted: Default::default(),
            zone: None,
            start: Instant::now(),
            hop_seen: None,
            present: crate::proxy::http1_codec::head::Present::UNKNOWN,
        };
        let log = LogCtx {
            method: Some(Method::GET),
            uri: Some("/ws/chat?room=1".parse().expect("uri")),
            route: Some(Arc::from("r")),
            node: Some(Arc::from("a")),
            conn_id: Some(conn),
            table: Some(table.clone()),
            client: Some("127.0.0.1:4000".parse().expect("addr")),
            protocol: "ws",
            trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".to_string()),
            client_subject: Some(Arc::from("CN=client")),
            ..LogCtx::default()
        };
        let mut kept = SocketLog::of(&log);
        kept.hops += 2;
        kept.node = Some(Arc::from("b"));
        let line = kept.line(&ctx);
        assert_eq!(line.method, Some(Method::GET));
        assert_eq!(
            line.uri.as_ref().map(|u| u.to_string()).as_deref(),
            Some("/ws/chat?room=1")
        );
        assert_eq!(line.uri.as_ref().map(http::Uri::path), Some("/ws/chat"));
        assert_eq!(line.route.as_deref(), Some("r"));
        assert_eq!(line.node.as_deref(), Some("b"));
        assert_eq!(line.conn_id.as_deref(), Some("user-7"));
        assert_eq!(line.hops, 2);
        assert_eq!(line.grpc_status.get(), None);
        assert!(line.table.as_ref().is_some_and(|t| Arc::ptr_eq(t, &table)));
        assert_eq!(line.client, Some("127.0.0.1:4000".parse().expect("addr")));
        assert_eq!(line.protocol, "ws");
        assert_eq!(
            line.trace_id.as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(line.reason, None);
        assert_eq!(line.client_subject.as_deref(), Some("CN=client"));
    }
}
