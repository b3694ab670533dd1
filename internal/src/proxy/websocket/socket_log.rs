//! What a relayed socket keeps of its request for its one access-log line at the end (SPEC
//! section 8): the request's context itself ([`socket_ctx`]), which may stay idle for days
//! (memory per idle WebSocket); and the socket's span ([`socket_span`]). Spawns nothing.

use crate::proxy::context::RequestCtx;

/// The request context `ctx` of an accepted upgrade as its socket keeps it: every field as it
/// is, but the target in the log fields copied out of the connection's read buffer it may share
/// (a socket that stays open must not keep that buffer alive).
pub(super) fn socket_ctx(mut ctx: RequestCtx) -> RequestCtx {
    if let Some(path) = ctx.log.path.as_mut() {
        // Parsing text copies it; a target that parsed once parses again.
        if let Ok(own) = http::uri::PathAndQuery::try_from(path.as_str()) {
            *path = own;
        }
    }
    ctx
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
    use std::sync::Arc;

    use super::*;
    use crate::config::{load_str, test_fixtures::two_versions, IdMode};
    use crate::hopper::ConnIds;
    use crate::metrics::Metrics;
    use crate::proxy::context::Kind;
    use crate::proxy::context::LogFields;
    use crate::proxy::types::DownstreamConn;
    use crate::registry::Registry;
    use crate::routing::RouteTable;
    use http::Method;
    use tokio::time::Instant;

    #[test]
    fn the_socket_keeps_every_field_and_a_target_of_its_own() {
        let registry = Registry::new(Arc::new(Metrics::new()));
        let cfg = Arc::new(load_str(&two_versions("version"), "t.toml").expect("valid"));
        let table = Arc::new(RouteTable::build(cfg, &registry, 1, None));
        let conn = ConnIds::new(IdMode::Client, Vec::new())
            .parse(b"user-7")
            .expect("id");
        // The target shares a larger buffer, as one parsed from a connection's read buffer does.
        let buffer = bytes::Bytes::from_static(b"GET /ws/chat?room=1 HTTP/1.1\r\n\r\n");
        let uri = http::Uri::from_maybe_shared(buffer.slice(4..19)).expect("uri");
        let dc = DownstreamConn::new("127.0.0.1:4000".parse().expect("addr"));
        let log = LogFields {
            node: Some(Arc::from("a")),
            hops: 2,
            trace_id: Some(Box::from("4bf92f3577b34da6a3ce929d0e0e4736")),
            client_subject: Some(Arc::from("CN=client")),
            ..LogFields::of_head(Some(Method::GET), Some(&uri), "ws", &dc)
        };
        let mut ctx = RequestCtx::new(
            Kind::WebSocket,
            false,
            table.clone(),
            Instant::now(),
            crate::proxy::http1_codec::head::Present::UNKNOWN,
            log,
        )
        .routed(table.routes[0].clone());
        ctx.conn_id = Some(conn);
        let kept = socket_ctx(ctx);
        let line = &kept.log;
        assert_eq!(line.method, Some(Method::GET));
        let path = line.path.as_ref().expect("target kept");
        assert_eq!(path.as_str(), "/ws/chat?room=1");
        assert_eq!(path.path(), "/ws/chat");
        let within = buffer.as_ptr_range().contains(&path.as_str().as_ptr());
        assert!(!within, "the kept target still points into the read buffer");
        assert_eq!(kept.route.id, table.routes[0].id);
        assert!(Arc::ptr_eq(&kept.table, &table));
        assert_eq!(kept.conn_id.as_deref(), Some("user-7"));
        assert_eq!(line.node.as_deref(), Some("a"));
        assert_eq!(line.hops, 2);
        assert_eq!(line.grpc_status.get(), None);
        assert_eq!(line.client, Some("127.0.0.1:4000".parse().expect("addr")));
        assert_eq!(line.protocol, "ws");
        assert_eq!(
            line.trace_id.as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(line.client_subject.as_deref(), Some("CN=client"));
    }
}
