//! Dialling a node for a WebSocket (RFC 6455 section 4.1, always HTTP/1.1): the first handshake
//! with its connect-failure retries ([`first`]), and the re-dial of a hop ([`redial_node`]), which
//! must get the same subprotocol and extensions the first node agreed to.

use std::sync::Arc;

use http::header::{
    SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_EXTENSIONS, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL,
};
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use super::stored::StoredHeaders;
use super::Stream;
use crate::hopper::{Follow, HopReason};
use crate::proxy::context::RequestCtx;
use crate::proxy::error::ProxyError;
use crate::proxy::hop_clock::HopClock;
use crate::proxy::{LogCtx, Proxy, ProxyBody};
use crate::registry::{Node, NodeId};
use crate::routing::RouteTable;
use crate::selection;

/// Header naming the node a re-dialled socket came from (SPEC section 5).
const HOPPED_FROM: HeaderName = HeaderName::from_static("x-hopped-from");

/// What the gateway needs to open, and later re-open, the node side.
#[derive(Debug, Clone)]
pub(super) struct Handshake {
    pub(super) method: Method,
    pub(super) path_and_query: String,
    /// Upstream request headers: the client's minus hop-by-hop, plus `X-Forwarded-*`, the affinity
    /// header and the upgrade pair. Replayed on every re-dial (cookies and `Authorization` included).
    /// One compact block per socket ([`StoredHeaders`]).
    pub(super) headers: StoredHeaders,
}

/// What the first node agreed to; a re-dialled node must agree to the same.
#[derive(Debug, Clone)]
pub(super) struct Negotiated {
    /// The node's `Sec-WebSocket-Protocol`, if any.
    pub(super) protocol: Option<HeaderValue>,
    /// True if the node accepted an extension: frames then carry per-socket state (e.g.
    /// permessage-deflate's context), so the socket cannot move to another node.
    pub(super) extensions: bool,
}

impl Negotiated {
    /// What a node's 101 answer `head` agreed to.
    pub(super) fn of(head: &HeaderMap) -> Self {
        Negotiated {
            // Copied, not shared: a shared value would pin the node connection's read buffer.
            protocol: head
                .get(SEC_WEBSOCKET_PROTOCOL)
                .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok()),
            extensions: head
                .get_all(SEC_WEBSOCKET_EXTENSIONS)
                .iter()
                .any(|v| !v.as_bytes().trim_ascii().is_empty()),
        }
    }
}

/// Why opening an node side failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum DialError {
    /// TCP connect (or the TLS handshake) failed or timed out: nothing was sent.
    #[error("{}", crate::proxy::upstream::connect_detail(.0))]
    Connect(#[source] std::io::Error),
    /// The HTTP/1.1 exchange failed after the request went out.
    #[error("handshake: {}", crate::proxy::upstream::describe(.0))]
    Handshake(#[source] hyper::Error),
    /// A re-dialled node answered, but not with a matching 101.
    #[error("node refused the re-dial: {0}")]
    Refused(String),
}

/// Sends the handshake `hs` of the request in `ctx` to `node`, and on a connect failure to other
/// nodes (moving a bound id along, a `connect_error` hop), until one answers; returns that node and
/// its answer (101 or not).
///
/// # Errors
/// [`ProxyError::Connect`] when no node accepted a connection, [`ProxyError::Upstream`] when the
/// handshake failed after it was sent, [`ProxyError::Timeout`] past the route timeout.
pub(super) async fn first(
    p: &Proxy,
    ctx: &RequestCtx,
    mut node: Arc<Node>,
    hs: &Handshake,
    log: &mut LogCtx,
) -> Result<(Arc<Node>, Response<Incoming>), ProxyError> {
    let deadline = ctx.deadline();
    let mut tried: Vec<NodeId> = Vec::new();
    // One hopping_latency_seconds observation per counted connect_error hop, from the first
    // failed dial to the node's answer (or to giving up), as in forward.rs (issue 13).
    let mut clock = HopClock::new(p.metrics.clone(), None);
    let mut failure_seen: Option<Instant> = None;
    loop {
        log.node = Some(node.id.clone());
        let mark = node.runtime.passive_mark();
        let err = match tokio::time::timeout_at(deadline, dial(p, &node, hs, None)).await {
            Err(_) => {
                return Err(ProxyError::Timeout {
                    node: node.id.to_string(),
                    timeout_ms: ctx.route.config.timeout.as_millis(),
                })
            }
            Ok(Ok(resp)) => {
                // Served again: a node answered the handshake.
                drop(clock);
                return Ok((node, resp));
            }
            Ok(Err(e)) => e,
        };
        let (h, detail, now) = (&node.settings.health, err.to_string(), Instant::now());
        let DialError::Connect(_) = err else {
            node.runtime.record_passive_error(h, &detail, now);
            return Err(ProxyError::Upstream {
                node: node.id.to_string(),
                detail,
                cause: Some(Box::new(err)),
            });
        };
        node.runtime.record_connect_error(h, &detail, mark, now);
        let seen = *failure_seen.get_or_insert(now);
        tried.push(node.id.clone());
        let Some(next) = pick_other(ctx, &p.routing.table(), &tried) else {
            return Err(ProxyError::Connect {
                node: node.id.to_string(),
                detail,
                cause: Some(Box::new(err)),
            });
        };
        tracing::info!(route = %ctx.route.id, from = %node.id, to = %next.id, detail, "websocket handshake: retrying on another node");
        if let Some(conn) = &ctx.conn_id {
            let now = Instant::now();
            let hop = p.hopper.hop(
                conn,
                &node.id,
                next.clone(),
                Follow::No,
                HopReason::ConnectError,
                now,
            );
            if hop.await.1 {
                clock.push(seen);
            }
            log.hops += 1;
        }
        node = next;
    }
}

/// Turns the headers of an RFC 8441 request into those of an RFC 6455 handshake: a fresh
/// `Sec-WebSocket-Key` (HTTP/2 clients send none) and `Sec-WebSocket-Version: 13`.
pub(super) fn h1_handshake_from_h2(h: &mut HeaderMap) {
    use base64::Engine as _;
    let key = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 16]>());
    h.insert(
        SEC_WEBSOCKET_KEY,
        HeaderValue::from_str(&key).expect("base64 is a valid header value"),
    );
    h.insert(
        header::SEC_WEBSOCKET_VERSION,
        HeaderValue::from_static("13"),
    );
}

/// Sends the handshake to `node` on a new connection; `hopped_from` adds `X-Hopped-From`.
async fn dial(
    p: &Proxy,
    node: &Node,
    hs: &Handshake,
    hopped_from: Option<&str>,
) -> Result<Response<Incoming>, DialError> {
    let body: ProxyBody = Empty::new().map_err(|never| match never {}).boxed_unsync();
    let tcp = p.upstream.connect(node).await.map_err(DialError::Connect)?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(DialError::Handshake)?;
    // Ends with the connection: when the upgrade is taken, or when the node closes it.
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "upstream websocket handshake connection ended");
        }
    });
    let mut headers = hs.headers.to_map();
    if let Some(from) = hopped_from.and_then(|f| HeaderValue::from_str(f).ok()) {
        headers.insert(HOPPED_FROM, from);
    }
    if !headers.contains_key(header::HOST) {
        if let Ok(h) = HeaderValue::from_str(&node.addr) {
            headers.insert(header::HOST, h);
        }
    }
    // A WebSocket handshake is HTTP/1.1 whatever the cluster's protocol (RFC 6455 section 4.1).
    let mut req = Request::new(body);
    *req.method_mut() = hs.method.clone();
    *req.uri_mut() = hs
        .path_and_query
        .parse()
        .unwrap_or_else(|_| http::Uri::from_static("/"));
    *req.headers_mut() = headers;
    send.send_request(req).await.map_err(DialError::Handshake)
}

/// Re-dials `node` for a hop: the original handshake plus `X-Hopped-From: <from>`, without an
/// extension offer when none was accepted the first time. The node must answer 101 with a valid
/// accept key and the same subprotocol, or the dial counts as failed.
pub(super) async fn redial_node(
    p: &Proxy,
    node: &Node,
    hs: &Handshake,
    negotiated: &Negotiated,
    from: &str,
) -> Result<Stream, DialError> {
    let mut hs = hs.clone();
    if !negotiated.extensions {
        hs.headers = hs.headers.without(&SEC_WEBSOCKET_EXTENSIONS);
    }
    let mut resp = dial(p, node, &hs, Some(from)).await?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Err(DialError::Refused(format!(
            "status {}",
            resp.status().as_u16()
        )));
    }
    let expected = hs.headers.get(&SEC_WEBSOCKET_KEY).map(derive_accept_key);
    let accept = resp
        .headers()
        .get(SEC_WEBSOCKET_ACCEPT)
        .and_then(|v| v.to_str().ok());
    if expected.as_deref() != accept {
        return Err(DialError::Refused(
            "Sec-WebSocket-Accept does not match the key".into(),
        ));
    }
    if resp.headers().get(SEC_WEBSOCKET_PROTOCOL) != negotiated.protocol.as_ref() {
        return Err(DialError::Refused(
            "the node selected a different subprotocol".into(),
        ));
    }
    if !negotiated.extensions && resp.headers().contains_key(SEC_WEBSOCKET_EXTENSIONS) {
        return Err(DialError::Refused(
            "the node accepted an extension that was not offered".into(),
        ));
    }
    let up = hyper::upgrade::on(&mut resp)
        .await
        .map_err(DialError::Handshake)?;
    Ok(TokioIo::new(up))
}

/// Picks a node of the route's cluster other than those in `exclude`, from the live table (the
/// socket may outlive the table it started with).
pub(super) fn pick_other(
    ctx: &RequestCtx,
    live: &RouteTable,
    exclude: &[NodeId],
) -> Option<Arc<Node>> {
    let cluster = live
        .clusters
        .get(&ctx.route.cluster.name)
        .cloned()
        .unwrap_or_else(|| ctx.route.cluster.clone());
    let c = ctx.criteria(exclude);
    selection::select(live, &cluster, &c, Instant::now()).node
}
