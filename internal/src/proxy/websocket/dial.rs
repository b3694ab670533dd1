//! Dialling a node for a WebSocket (RFC 6455 section 4.1, always HTTP/1.1): the first handshake
//! with its connect-failure retries ([`first`], through the gateway's own HTTP/1.1 client,
//! [`crate::proxy::upstream::http1::conn::handshake`]: a `101` hands the node's stream over, any other
//! answer is relayed to the client as an ordinary response), what the first node agreed to
//! ([`Negotiated`]), and the node choice of a re-dial ([`pick_other`]). The re-dial itself is
//! [`super::redial`].

use std::sync::Arc;

use http::header::SEC_WEBSOCKET_KEY;
use http::uri::PathAndQuery;
use http::{header, HeaderMap, HeaderValue, Method};
use tokio::time::Instant;

use crate::hopper::{Follow, HopReason};
use crate::proxy::context::RequestCtx;
use crate::proxy::error::ProxyError;
use crate::proxy::hop_clock::HopClock;
use crate::proxy::types::Proxy;
use crate::proxy::upstream::http1::conn::Handshook;
use crate::proxy::upstream::request::{NodeRequest, SendError};
use crate::registry::{Node, NodeId};
use crate::selection;

pub(crate) use super::outcome::{DialError, Negotiated};
pub(crate) use super::redial::Handshake;

/// What the gateway sends the first node; kept for the socket's life as a [`Handshake`].
#[derive(Debug)]
pub(super) struct FirstHandshake {
    pub(super) method: Method,
    pub(super) path_and_query: PathAndQuery,
    /// Upstream request headers: the client's minus hop-by-hop, plus `X-Forwarded-*`, the affinity
    /// header and the upgrade pair. Replayed on every re-dial (cookies and `Authorization` included).
    pub(super) headers: HeaderMap,
}

/// Sends the handshake `hs` of the request in `ctx` to `node`, and on a connect failure to other
/// nodes (moving a bound id along, a `connect_error` hop, counted in `ctx`'s log fields), until one
/// answers; returns that node and
/// its answer (a `101` with the node's stream, or any other answer).
///
/// # Errors
/// [`ProxyError::Connect`] when no node accepted a connection, [`ProxyError::Upstream`] when the
/// handshake failed after it was sent, [`ProxyError::Timeout`] past the route timeout.
pub(super) async fn first(
    p: &Proxy,
    ctx: &mut RequestCtx,
    mut node: Arc<Node>,
    hs: &FirstHandshake,
) -> Result<(Arc<Node>, Handshook), ProxyError> {
    let deadline = ctx.deadline();
    let mut tried: Vec<NodeId> = Vec::new();
    // One hopping_latency_seconds observation per counted connect_error hop, from the first
    // failed dial to the node's answer (or to giving up), as in forward.rs.
    let mut clock = HopClock::new(&p.metrics, None);
    let mut failure_seen: Option<Instant> = None;
    loop {
        ctx.log.node = Some(node.id.clone());
        let mark = node.runtime.passive_mark();
        let err = match tokio::time::timeout_at(deadline, dial(p, &node, hs)).await {
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
        let Some(next) = pick_other(p, ctx, &tried) else {
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
            if hop.await.logged().1 {
                clock.push(seen);
            }
            ctx.log.hops += 1;
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

/// Sends the handshake to `node` on a new connection.
async fn dial(p: &Proxy, node: &Node, hs: &FirstHandshake) -> Result<Handshook, DialError> {
    let with_host;
    let headers = if hs.headers.contains_key(header::HOST) {
        &hs.headers
    } else {
        let mut h = hs.headers.clone();
        if let Ok(v) = HeaderValue::from_str(&node.addr) {
            h.insert(header::HOST, v);
        }
        with_host = h;
        &with_host
    };
    // A WebSocket handshake is HTTP/1.1 whatever the cluster's protocol (RFC 6455 section 4.1).
    let head = NodeRequest {
        raw_answer: false,
        method: &hs.method,
        target: &hs.path_and_query,
        headers,
        forwarded: None,
        host: None,
        gate: None,
    };
    p.upstream.handshake(node, head).await.map_err(|e| match e {
        SendError::Connect(e, _) => DialError::Connect(e),
        SendError::NotSent(e, _) | SendError::Sent(e) | SendError::Stale(e) => {
            DialError::Handshake(e)
        }
    })
}

/// Picks a node of the route's cluster other than those in `exclude`, from `p`'s live table (the
/// socket may outlive the table it started with).
pub(super) fn pick_other(p: &Proxy, ctx: &RequestCtx, exclude: &[NodeId]) -> Option<Arc<Node>> {
    let live = p.routing.table();
    let cluster = live
        .clusters
        .get(&ctx.route.cluster.name)
        .cloned()
        .unwrap_or_else(|| ctx.route.cluster.clone());
    let c = ctx.criteria(p.settings.zone.as_deref(), exclude);
    selection::select(&live, &cluster, &c, Instant::now()).node
}
