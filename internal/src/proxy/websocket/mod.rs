//! WebSocket upgrades (RFC 6455, SPEC section 5).
//!
//! The handshake goes to the chosen node on a fresh HTTP/1.1 connection with `Connection: Upgrade`
//! and `Upgrade: websocket` set once, and every `Sec-WebSocket-*` header untouched (CASE-03, CASE-04);
//! a connect failure moves on to another node (nothing was sent). The node's 101 is relayed verbatim
//! (accept key, protocol, extensions), a non-101 answer is relayed as an ordinary response.
//!
//! After the 101 one spawned task per socket ([`relay`]) relays frames both ways, byte for byte
//! ([`pump`] while busy, [`pass`] frame by frame; [`frame`], [`io`]),
//! re-dials another node when the route's mode is `hop` ([`hop`]), and ends sockets with the right
//! close code ([`close`]). The task holds the proxy (and so its drain watch), which makes server
//! shutdown wait for it; it ends on close, shutdown or error.
//! This module never answers or swallows a control frame of a live socket.

mod close;
mod dial;
mod frame;
mod hop;
mod io;
mod message;
mod node;
mod outcome;
mod pass;
mod pump;
mod redial;
mod relay;
mod stream;

use dial::{h1_handshake_from_h2, FirstHandshake, Handshake, Negotiated};
pub(crate) use stream::ClientUpgrade;
use stream::Stream;

use std::sync::Arc;

use http::header::SEC_WEBSOCKET_ACCEPT;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;

use super::context::RequestCtx;
use super::error::ProxyError;
use super::headers::is_extended_connect;
use super::http1::node_conn::Handshook;
use super::http1::rewind::Rewind;
use super::{headers, LogCtx, Proxy, ProxyBody};
use crate::registry::Node;

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
    node: Arc<Node>,
    req: Request<ProxyBody>,
    mut up_headers: HeaderMap,
    path_and_query: String,
    downstream: ClientUpgrade,
    log: &mut LogCtx,
) -> Result<Response<ProxyBody>, ProxyError> {
    headers::set_websocket_upgrade(&mut up_headers);
    // RFC 8441 section 5: the node gets an HTTP/1.1 handshake, which needs a key of its own.
    let over_h2 = is_extended_connect(&req);
    if over_h2 {
        h1_handshake_from_h2(&mut up_headers);
    }
    let hs = FirstHandshake {
        method: if over_h2 {
            Method::GET
        } else {
            req.method().clone()
        },
        path_and_query,
        headers: up_headers,
    };
    drop(req);
    let (node, dialled) = dial::first(&p, &ctx, node, &hs, log).await?;
    let (mut parts, up) = match dialled {
        Handshook::Switched { head, io, early } => (head, Stream::Node(Rewind::new(early, io))),
        Handshook::Answer(resp) => {
            // The node refused the upgrade: relay its answer as an ordinary response.
            let (mut parts, up_body) = resp.into_parts();
            client_head(&p, &ctx, &mut parts.headers, false);
            p.finish(log, parts.status.as_u16(), ctx.start, 0, 0);
            return Ok(Response::from_parts(parts, up_body.boxed_unsync()));
        }
    };
    node.runtime.record_passive_success();
    client_head(&p, &ctx, &mut parts.headers, true);
    if over_h2 {
        // RFC 8441 section 5: a 2xx accepts an extended CONNECT.
        parts.status = StatusCode::OK;
    }
    let negotiated = Negotiated::of(&parts.headers);
    // Kept as one block of bytes: no map, and no value sharing the connection's read buffer
    // (issue 7: memory per idle WebSocket).
    let hs = Handshake::replay(&hs.method, &hs.path_and_query, &hs.headers, &negotiated);
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
        // Boxed: the wait for the client's upgrade is larger than the relay's resting state, and the
        // task cell is sized for its largest state for the socket's whole life (issue 16).
        let upgrade = Box::pin(downstream.take());
        let Some(down) = upgrade.await else {
            tracing::debug!(node = %node.id, "websocket upgrade did not complete");
            return;
        };
        session
            .relay(down, relay::NodeSide::new(node, up, inflight))
            .await;
    });
    Ok(Response::from_parts(
        parts,
        super::body::full(bytes::Bytes::new()),
    ))
}

/// The node's handshake answer head `head` as the client gets them: hop-by-hop fields dropped but,
/// on an `upgraded` HTTP/1.1 answer, the upgrade pair (accept key, protocol and extensions stay
/// verbatim, RFC 6455 section 4.2.2); for an RFC 8441 client none of the HTTP/1.1 upgrade fields;
/// the conn id the gateway issued added.
fn client_head(p: &Proxy, ctx: &RequestCtx, head: &mut HeaderMap, upgraded: bool) {
    if upgraded {
        // Keep the upgrade pair; drop other hop-by-hop headers. Accept, protocol and extensions stay verbatim.
        let upgrade = head.get(header::UPGRADE).cloned();
        headers::strip_hop_by_hop(head);
        head.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        head.insert(
            header::UPGRADE,
            upgrade.unwrap_or(HeaderValue::from_static("websocket")),
        );
    } else {
        headers::strip_hop_by_hop(head);
    }
    if upgraded && ctx.h2 {
        // RFC 8441 section 5: the HTTP/1.1 upgrade fields and the accept key (which answers the
        // gateway's key, not the client's) stay on the node side.
        for name in [header::CONNECTION, header::UPGRADE, SEC_WEBSOCKET_ACCEPT] {
            head.remove(name);
        }
    }
    if let Some(v) = ctx.issued_id() {
        head.insert(p.settings.affinity_header.clone(), v);
    }
}
