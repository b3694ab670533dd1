//! The request head as the node sees it (start of phase 4, forward): the client's fields minus
//! hop-by-hop (RFC 9110 section 7.6.1), plus `X-Forwarded-*` (SPEC section 4), the conn id the
//! gateway issued, and `Host` for an HTTP/2 client whose node speaks HTTP/1.1 (an h2 node gets
//! the host as `:authority` instead, RFC 9113 section 8.3.1).

use http::uri::{Authority, PathAndQuery, Scheme};
use http::{header, HeaderMap, HeaderValue, Request, Uri};

use super::node_request::{ForwardedFields, NodeRequest};
use super::ProxyBody;
use crate::config::Protocol;
use crate::registry::Node;

use super::context::{Kind, RequestCtx};
use super::{headers, DownstreamConn, Proxy};

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

/// What the node gets of one request, made once at the start of phase 4 and sent again by every
/// attempt ([`NodeRequest`] borrows it per attempt).
#[derive(Debug)]
pub(crate) struct Outbound {
    /// The node's fields ([`node_headers`]).
    pub(crate) headers: HeaderMap,
    /// The `X-Forwarded-*` fields kept beside `headers`, if any ([`ForwardedFields`]).
    pub(crate) forwarded: Option<ForwardedFields>,
    /// The host the route phase settled: an h2 node's `:authority` ([`build`]).
    pub(crate) host: Option<HeaderValue>,
    /// The request target in origin form (RFC 9112 section 3.2.1), `strip_prefix` applied.
    pub(crate) target: PathAndQuery,
}

/// The request for an h2 `node` (whose client takes it whole): `head` (its fields copied) and
/// `body`, with an absolute URI whose authority is the request's host ([`NodeRequest::host`];
/// RFC 9113 section 8.3.1; the node's address when there is no valid one), and no `Host` field
/// (an HTTP/1.1 client's `Host`, or one an HTTP/2 client sent, is removed from the copy; the host
/// the route phase settled for an HTTP/2 client is never added as one, [`node_headers`]).
pub(crate) fn build(head: NodeRequest<'_>, node: &Node, body: ProxyBody) -> Request<ProxyBody> {
    let mut req = Request::new(body);
    *req.method_mut() = head.method.clone();
    *req.headers_mut() = head.headers.clone();
    if let Some(f) = head.forwarded {
        f.insert_into(req.headers_mut(), head.host);
    }
    *req.version_mut() = http::Version::HTTP_2;
    // Built from its parts: formatting the URI and parsing it back cost a tenth of the
    // gateway's own work per gRPC call (issue 16, bench/README).
    let mut uri = http::uri::Parts::default();
    uri.scheme = Some(if node.settings.protocol == Protocol::H2 {
        Scheme::HTTPS
    } else {
        Scheme::HTTP
    });
    uri.authority = head
        .host
        .and_then(|h| Authority::try_from(h.as_bytes()).ok())
        .or_else(|| Authority::try_from(node.addr.as_str()).ok());
    uri.path_and_query = Some(head.target.clone());
    *req.uri_mut() = Uri::from_parts(uri).unwrap_or_else(|_| Uri::from_static("/"));
    req.headers_mut().remove(header::HOST);
    req
}
