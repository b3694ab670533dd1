//! WebSocket upgrades (RFC 6455, SPEC section 5).
//!
//! The handshake goes to the chosen node on a fresh HTTP/1.1 connection with `Connection: Upgrade`
//! and `Upgrade: websocket` set once, and every `Sec-WebSocket-*` header untouched (CASE-03, CASE-04);
//! a connect failure moves on to another node (nothing was sent). The node's 101 is relayed verbatim
//! (accept key, protocol, extensions), a non-101 answer is relayed as an ordinary response.
//!
//! After the 101 one spawned task per socket ([`relay`]) relays frames both ways ([`frame`]),
//! re-dials another node when the route's mode is `hop` ([`hop`]), and ends sockets with the right
//! close code ([`close`]). The task holds the proxy (and so its drain watch), which makes server
//! shutdown wait for it; it ends on close, shutdown or error.
//! This module never answers or swallows a control frame of a live socket.

mod close;
mod frame;
mod hop;
mod message;
mod node;
mod pass;
mod relay;

use std::sync::Arc;

use http::header::{
    SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_EXTENSIONS, SEC_WEBSOCKET_KEY, SEC_WEBSOCKET_PROTOCOL,
};
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

use super::context::RequestCtx;
use super::error::ProxyError;
use super::headers::is_extended_connect;
use super::hop_clock::HopClock;
use super::{headers, LogCtx, Proxy, ProxyBody};
use crate::hopper::{Follow, HopReason};
use crate::registry::{Node, NodeId};
use crate::routing::RouteTable;
use crate::selection;

/// The upgraded stream of either leg.
type Stream = TokioIo<Upgraded>;

/// Header naming the node a re-dialled socket came from (SPEC section 5).
const HOPPED_FROM: HeaderName = HeaderName::from_static("x-hopped-from");

/// What the gateway needs to open, and later re-open, the upstream leg.
#[derive(Debug, Clone)]
pub(super) struct Handshake {
    method: Method,
    path_and_query: String,
    /// Upstream request headers: the client's minus hop-by-hop, plus `X-Forwarded-*`, the affinity
    /// header and the upgrade pair. Replayed on every re-dial (cookies and `Authorization` included).
    headers: HeaderMap,
}

/// What the first node agreed to; a re-dialled node must agree to the same.
#[derive(Debug, Clone)]
pub(super) struct Negotiated {
    /// The node's `Sec-WebSocket-Protocol`, if any.
    protocol: Option<HeaderValue>,
    /// True if the node accepted an extension: frames then carry per-socket state (e.g.
    /// permessage-deflate's context), so the socket cannot move to another node.
    extensions: bool,
}

/// Why opening an upstream leg failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum DialError {
    /// TCP connect (or the TLS handshake) failed or timed out: nothing was sent.
    #[error("{}", super::upstream::connect_detail(.0))]
    Connect(#[source] std::io::Error),
    /// The HTTP/1.1 exchange failed after the request went out.
    #[error("handshake: {}", super::upstream::describe(.0))]
    Handshake(#[source] hyper::Error),
    /// A re-dialled node answered, but not with a matching 101.
    #[error("node refused the re-dial: {0}")]
    Refused(String),
}

/// Proxies a WebSocket handshake to `node` (or another node if it refuses the connection) and, on
/// 101, spawns the relay task over both upgraded streams. Returns the node's answer for the client.
///
/// # Errors
/// [`ProxyError::Connect`] when no node accepted a connection, [`ProxyError::Upstream`] when the
/// handshake failed after it was sent, [`ProxyError::Timeout`] past the route timeout.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn proxy(
    p: Arc<Proxy>,
    ctx: RequestCtx,
    mut node: Arc<Node>,
    req: Request<Incoming>,
    mut up_headers: HeaderMap,
    path_and_query: String,
    downstream: OnUpgrade,
    log: &mut LogCtx,
) -> Result<Response<ProxyBody>, ProxyError> {
    headers::set_websocket_upgrade(&mut up_headers);
    // RFC 8441 section 5: the node gets an HTTP/1.1 handshake, which needs a key of its own.
    let over_h2 = is_extended_connect(&req);
    if over_h2 {
        h1_handshake_from_h2(&mut up_headers);
    }
    let hs = Handshake {
        method: if over_h2 {
            Method::GET
        } else {
            req.method().clone()
        },
        path_and_query,
        headers: owned(&up_headers),
    };
    drop(up_headers);
    drop(req);
    let deadline = ctx.start + ctx.route.config.timeout;
    let mut tried: Vec<NodeId> = Vec::new();
    // One hopping_latency_seconds observation per counted connect_error hop, from the first
    // failed dial to the node's answer (or to giving up), as in forward.rs (issue 13).
    let mut clock = HopClock::new(p.metrics.clone(), None);
    let mut failure_seen: Option<Instant> = None;
    let mut resp = loop {
        log.node = Some(node.id.clone());
        let mark = node.runtime.passive_mark();
        let err = match tokio::time::timeout_at(deadline, dial(&p, &node, &hs, None)).await {
            Err(_) => {
                return Err(ProxyError::Timeout {
                    node: node.id.to_string(),
                    timeout_ms: ctx.route.config.timeout.as_millis(),
                })
            }
            Ok(Ok(resp)) => break resp,
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
        let Some(next) = pick_other(&ctx, &p.routing.table(), &tried) else {
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
    };
    // Served again: a node answered the handshake.
    drop(clock);
    let upgraded = resp.status() == StatusCode::SWITCHING_PROTOCOLS;
    if upgraded {
        node.runtime.record_passive_success();
    }
    let upstream_upgrade = upgraded.then(|| hyper::upgrade::on(&mut resp));
    let (mut parts, up_body) = resp.into_parts();
    if upgraded {
        // Keep the upgrade pair; drop other hop-by-hop headers. Accept, protocol and extensions stay verbatim.
        let upgrade = parts.headers.get(header::UPGRADE).cloned();
        headers::strip_hop_by_hop(&mut parts.headers);
        parts
            .headers
            .insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        parts.headers.insert(
            header::UPGRADE,
            upgrade.unwrap_or(HeaderValue::from_static("websocket")),
        );
    } else {
        headers::strip_hop_by_hop(&mut parts.headers);
    }
    if upgraded && over_h2 {
        // RFC 8441 section 5: a 2xx accepts an extended CONNECT; the HTTP/1.1 upgrade fields and
        // the accept key (which answers the gateway's key, not the client's) stay on the node leg.
        parts.status = StatusCode::OK;
        for name in [header::CONNECTION, header::UPGRADE, SEC_WEBSOCKET_ACCEPT] {
            parts.headers.remove(name);
        }
    }
    if ctx.issued {
        if let Some(id) = &ctx.conn_id {
            if let Ok(v) = HeaderValue::from_str(id) {
                parts.headers.insert(p.settings.affinity_header.clone(), v);
            }
        }
    }
    let Some(upstream_upgrade) = upstream_upgrade else {
        // The node refused the upgrade: relay its answer as an ordinary response.
        p.finish(log, parts.status.as_u16(), ctx.start, 0, 0);
        return Ok(Response::from_parts(
            parts,
            up_body.map_err(Into::into).boxed_unsync(),
        ));
    };
    let negotiated = Negotiated {
        // Copied, not shared: a shared value would pin the node connection's read buffer.
        protocol: parts
            .headers
            .get(SEC_WEBSOCKET_PROTOCOL)
            .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok()),
        extensions: parts
            .headers
            .get_all(SEC_WEBSOCKET_EXTENSIONS)
            .iter()
            .any(|v| !v.as_bytes().trim_ascii().is_empty()),
    };
    let session = relay::Session {
        p: p.clone(),
        ctx,
        hs,
        negotiated,
        log: log.clone(),
    };
    let gauge = p.metrics.connection("websocket");
    let inflight = node.runtime.start_request();
    // Boxed: the task then carries 8 bytes of session while it waits for the upgrades, and the
    // relay moves it into its own heap block (issue 16: memory per idle WebSocket).
    let session = Box::new(session);
    tokio::spawn(async move {
        let _gauge = gauge;
        let (Ok(down), Ok(up)) = (downstream.await, upstream_upgrade.await) else {
            tracing::debug!(node = %node.id, "websocket upgrade did not complete");
            return;
        };
        session
            .relay(
                TokioIo::new(down),
                relay::Leg::new(node, TokioIo::new(up), inflight),
            )
            .await;
    });
    Ok(Response::from_parts(
        parts,
        super::body::full(bytes::Bytes::new()),
    ))
}

/// Turns the headers of an RFC 8441 request into those of an RFC 6455 handshake: a fresh
/// `Sec-WebSocket-Key` (HTTP/2 clients send none) and `Sec-WebSocket-Version: 13`.
fn h1_handshake_from_h2(h: &mut HeaderMap) {
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

/// A compact copy of `headers` whose values own their bytes. hyper hands out header values that
/// share the connection's read buffer (8 to 16 KiB); a socket keeps its handshake for re-dials, and
/// a shared value would keep that whole buffer alive for the socket's life (issue 7: memory per
/// idle WebSocket).
fn owned(headers: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let mut v = HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| value.clone());
        v.set_sensitive(value.is_sensitive());
        out.append(name.clone(), v);
    }
    out
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
    let mut headers = hs.headers.clone();
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
async fn redial_node(
    p: &Proxy,
    node: &Node,
    hs: &Handshake,
    negotiated: &Negotiated,
    from: &str,
) -> Result<Stream, DialError> {
    let mut hs = hs.clone();
    if !negotiated.extensions {
        hs.headers.remove(SEC_WEBSOCKET_EXTENSIONS);
    }
    let mut resp = dial(p, node, &hs, Some(from)).await?;
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return Err(DialError::Refused(format!(
            "status {}",
            resp.status().as_u16()
        )));
    }
    let expected = hs
        .headers
        .get(SEC_WEBSOCKET_KEY)
        .map(|k| derive_accept_key(k.as_bytes()));
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
fn pick_other(ctx: &RequestCtx, live: &RouteTable, exclude: &[NodeId]) -> Option<Arc<Node>> {
    let cluster = live
        .clusters
        .get(&ctx.route.cluster.name)
        .cloned()
        .unwrap_or_else(|| ctx.route.cluster.clone());
    let c = ctx.criteria(exclude);
    selection::select(live, &cluster, &c, Instant::now()).node
}
