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
mod deflate;
mod dial;
mod frame;
mod hop;
mod io;
mod message;
mod node;
mod outcome;
mod pass;
mod phase;
mod pump;
mod redial;
mod relay;
mod side;
mod socket_log;
mod stream;
mod wait;

use dial::{h1_handshake_from_h2, FirstHandshake, Handshake, Negotiated};
pub(crate) use stream::ClientUpgrade;
use stream::Stream;

use std::sync::Arc;

use http::header::SEC_WEBSOCKET_ACCEPT;
use http::uri::PathAndQuery;
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;

use super::body::ProxyBody;
use super::context::RequestCtx;
use super::downstream::http1::rewind::Rewind;
use super::error::ProxyError;
use super::headers;
use super::headers::is_extended_connect;
use super::types::Proxy;
use super::upstream::http1::conn::Handshook;
use crate::registry::Node;

/// How a WebSocket handshake ended ([`handshake`]); [`answer`] makes the client's answer of it.
pub(crate) enum Upgrade {
    /// The node refused the upgrade: its answer, relayed as an ordinary response.
    Refused(Response<ProxyBody>),
    /// The node switched protocols: what the relay starts from.
    Switched(Box<Switched>),
}

/// A node's accepted upgrade, before the relay starts.
pub(crate) struct Switched {
    /// The client's answer head (the node's, as [`client_head`] made it).
    head: http::response::Parts,
    /// The node that accepted and its upgraded stream.
    node: Arc<Node>,
    up: Stream,
    /// The handshake to replay on a hop, and what the node agreed to.
    hs: Handshake,
    negotiated: Negotiated,
    /// The client's side of the upgrade.
    downstream: ClientUpgrade,
}

/// Sends the WebSocket handshake of `req` (the request of `ctx`) to `node`, or another node if it
/// refuses the connection; `up_headers` and `path_and_query` are what the node gets,
/// `downstream` the client's side of the upgrade. Returns how the node answered, for [`answer`].
///
/// # Errors
/// [`ProxyError::Connect`] when no node accepted a connection, [`ProxyError::Upstream`] when the
/// handshake failed after it was sent, [`ProxyError::Timeout`] past the route timeout.
pub(crate) async fn handshake(
    p: &Proxy,
    ctx: &mut RequestCtx,
    node: Arc<Node>,
    req: Request<ProxyBody>,
    mut up_headers: HeaderMap,
    path_and_query: PathAndQuery,
    downstream: ClientUpgrade,
) -> Result<Upgrade, ProxyError> {
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
    let (node, dialled) = dial::first(p, ctx, node, &hs).await?;
    let (mut head, up) = match dialled {
        Handshook::Switched { head, io, early } => (head, Stream::Node(Rewind::new(early, io))),
        Handshook::Answer(resp) => {
            let (mut parts, up_body) = resp.into_parts();
            client_head(p, ctx, &mut parts.headers, false);
            let resp = Response::from_parts(parts, up_body.boxed_unsync());
            return Ok(Upgrade::Refused(resp));
        }
    };
    node.runtime.record_passive_success();
    client_head(p, ctx, &mut head.headers, true);
    if over_h2 {
        // RFC 8441 section 5: a 2xx accepts an extended CONNECT.
        head.status = StatusCode::OK;
    }
    let negotiated = negotiate(ctx, &mut head.headers);
    // Kept as one block of bytes: no map, and no value sharing the connection's read buffer
    // (memory per idle WebSocket).
    let hs = Handshake::replay(
        &hs.method,
        hs.path_and_query.as_str(),
        &hs.headers,
        &negotiated,
    );
    Ok(Upgrade::Switched(Box::new(Switched {
        head,
        node,
        up,
        hs,
        negotiated,
        downstream,
    })))
}

/// The client's answer to the WebSocket handshake of `ctx` that ended as `upgrade`, ending the
/// request: a refused upgrade is logged (phase 6) now; on an accepted one the relay task is
/// spawned with `ctx` (it writes the access-log line when the socket ends).
pub(crate) fn answer(p: &Arc<Proxy>, ctx: RequestCtx, upgrade: Upgrade) -> Response<ProxyBody> {
    let s = match upgrade {
        Upgrade::Refused(resp) => {
            p.finish(&ctx, resp.status().as_u16(), 0, 0, None);
            return resp;
        }
        Upgrade::Switched(s) => *s,
    };
    let session = relay::Session {
        p: p.clone(),
        ctx: socket_log::socket_ctx(ctx),
        hs: s.hs,
        negotiated: s.negotiated,
    };
    let gauge = p.metrics.connection("websocket");
    let inflight = s.node.runtime.start_request();
    // The first node's parameters are the client's but for the imposed context reset, which
    // needs no translation: the side plans none.
    let side = relay::NodeSide::new(s.node, s.up, inflight, None);
    tokio::spawn(socket_task(
        gauge,
        s.downstream,
        Box::new(session),
        Box::new(side),
    ));
    Response::from_parts(s.head, super::body::full(bytes::Bytes::new()))
}

/// What the first node agreed to in its answer `headers`; on a `hop` route the answer the client
/// gets imposes the context reset a later node needs.
fn negotiate(ctx: &RequestCtx, headers: &mut HeaderMap) -> Negotiated {
    let mut negotiated = Negotiated::of(headers);
    if ctx.route.config.websocket == crate::config::WsMode::Hop {
        // The client's messages must not depend on history a later node has not seen.
        let answer = headers.get(header::SEC_WEBSOCKET_EXTENSIONS);
        if let Some(imposed) = answer.and_then(|a| negotiated.impose_for_hop(a)) {
            headers.insert(header::SEC_WEBSOCKET_EXTENSIONS, imposed);
        }
    }
    negotiated
}

/// The task of one socket: waits for the client's side of the upgrade, then relays ([`relay`])
/// between it and the node's `side` for the `session`, holding the `websocket` connection `gauge`
/// until the socket ends.
///
/// Session and side come boxed and the wait is boxed: what a task captures stays in its cell for
/// its whole life, and the cell is sized for the largest state, so the relay's resting state (a
/// pointer to the relay block and the wait for the next event) is what an idle socket keeps
/// (memory per idle WebSocket).
async fn socket_task(
    gauge: crate::metrics::ConnectionGauge,
    downstream: ClientUpgrade,
    session: Box<relay::Session>,
    side: Box<relay::NodeSide>,
) {
    let _gauge = gauge;
    let Some(down) = Box::pin(downstream.take()).await else {
        tracing::debug!(node = %side.node.id, "websocket upgrade did not complete");
        return;
    };
    session.relay(down, side).await;
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

#[cfg(test)]
mod size_tests {
    use super::*;

    fn returned<A, B, C, D, R>(_: fn(A, B, C, D) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// What every idle socket keeps in its task cell and relay block (memory per idle
    /// WebSocket): 968 and 1,256 bytes before the handlers were boxed and the log context made
    /// compact; 720 and 1,112 with rustc 1.95; 704 and 1,104 since the resting wait replaced
    /// `select!` and the limits are read from the settings; 1,112 with the node side's pointer to
    /// its deflate translator (`None` unless a hop needs one); 1,104 since the close and drain
    /// state is one enum. The session inside the relay block (the request's context, its log
    /// fields among it): 424 bytes. Bounds, so a compiler's layout changes do not fail it.
    #[test]
    fn an_idle_sockets_task_and_relay_block_stay_small() {
        let task = returned(socket_task as fn(_, _, _, _) -> _);
        assert!(task <= 704, "task cell {task} bytes");
        let relay = std::mem::size_of::<relay::Relay>();
        assert!(relay <= 1104, "relay block {relay} bytes");
        let session = std::mem::size_of::<relay::Session>();
        assert!(session <= 424, "session {session} bytes");
    }
}
