//! The request head as the node sees it (start of phase 4, forward): the client's fields minus
//! hop-by-hop (RFC 9110 section 7.6.1), plus `X-Forwarded-*` (SPEC section 4), the conn id the
//! gateway issued, and `Host` for an HTTP/2 client whose node speaks HTTP/1.1 (an h2 node gets
//! the host as `:authority` instead, RFC 9113 section 8.3.1).

use http::{header, HeaderMap, HeaderValue};

use super::context::{Kind, RequestCtx};
use super::headers;
use super::types::{DownstreamConn, Proxy};
use super::upstream::request::ForwardedFields;

/// The node's header map for a request with `client` headers (taken, or copied for a WebSocket,
/// whose handshake headers are replayed on every re-dial), on `dc`, in `ctx`, whose route phase
/// settled `host`; `h1_node` says the node gets an HTTP/1.1 head (an `http1` cluster, or any
/// WebSocket handshake), which then carries `host` as its `Host` field (RFC 9112 section 3.2) when
/// the client spoke HTTP/2. A conn id the gateway issued is added ([`RequestCtx::issued_id`]); the
/// client's own affinity header stays as sent (or away, when the client nominated it in
/// `Connection`).
///
/// Returns the map, and the `X-Forwarded-*` fields when they are not in it: a forwarded (not
/// upgraded) request to an HTTP/1.1 node whose client sent no forwarding field gets them as head
/// lines ([`ForwardedFields`]); every other request has them in the map.
pub(crate) fn node_headers(
    p: &Proxy,
    client: &mut HeaderMap,
    dc: &DownstreamConn,
    ctx: &RequestCtx,
    host: Option<&HeaderValue>,
    h1_node: bool,
) -> (HeaderMap, Option<ForwardedFields>) {
    let mut up = if ctx.kind == Kind::WebSocket {
        client.clone()
    } else {
        std::mem::take(client)
    };
    let seen = headers::strip_hop_by_hop(&mut up);
    let proto = if dc.tls.is_some() { "https" } else { "http" };
    let mut lines = None;
    if seen.forwarding {
        // Fields to keep, join or drop (CASE-11): the map's own rewrite.
        headers::set_forwarded(
            &mut up,
            &dc.forwarded_peer,
            host,
            p.settings.trusted.as_deref(),
        );
        if dc.tls.is_some() {
            up.insert(headers::X_FORWARDED_PROTO, HeaderValue::from_static(proto));
        }
    } else {
        let fields = ForwardedFields {
            peer: dc.forwarded_peer.text.clone(),
            proto,
        };
        if h1_node && ctx.kind != Kind::WebSocket {
            lines = Some(fields);
        } else {
            fields.insert_into(&mut up, host);
        }
    }
    if let Some(v) = ctx.issued_id() {
        up.insert(p.settings.affinity_header.clone(), v);
    }
    if ctx.h2 && h1_node {
        if let Some(h) = host {
            up.insert(header::HOST, h.clone());
        }
    }
    (up, lines)
}
