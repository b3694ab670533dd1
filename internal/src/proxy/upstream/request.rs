//! The request to a node, one attempt at a time: its head ([`NodeRequest`], borrowed from the
//! parts made once per request, [`NodeRequestParts`]) as the upstream client sends it on each
//! attempt ([`super::client`], [`super::http1::conn`]; an h2 node's request is [`h2_request`]), and
//! how one attempt to send it failed ([`SendError`]), as the retry rule needs to know it (SPEC
//! section 4): nothing sent (connect failed, or the request handed back), or failed after sending;
//! and how such a failure reads in logs and 502 bodies.

use http::uri::{Authority, PathAndQuery, Scheme};
use http::{header, HeaderMap, HeaderValue, Method, Request, Uri};

use crate::config::Protocol;
use crate::proxy::body::{BoxError, ProxyBody};
use crate::proxy::error::describe;
use crate::proxy::expect::ContinueGate;
use crate::registry::Node;
use crate::tls::client as tls;

/// One attempt's request head for a node, borrowed from the request's attempts: the fields are
/// made once per request ([`crate::proxy::node_headers::node_headers`]) and every attempt sends
/// them again without a copy (an HTTP/1.1 node's head is encoded straight from them; an h2 node's
/// request takes a copy, [`h2_request`]).
#[derive(Debug, Clone, Copy)]
pub struct NodeRequest<'a> {
    /// The request method.
    pub(crate) method: &'a Method,
    /// The request target in origin form: path and query (RFC 9112 section 3.2.1).
    pub(crate) target: &'a PathAndQuery,
    /// The fields as the node gets them.
    pub(crate) headers: &'a HeaderMap,
    /// The gateway's `X-Forwarded-*` fields when they are not in `headers`: an HTTP/1.1 node's
    /// head gets them as lines after the map's fields, an h2 node's request adds them to its copy.
    pub(crate) forwarded: Option<&'a ForwardedFields>,
    /// The request's host as the route phase settled it (the client's `Host`, else its
    /// `:authority`): an h2 node's `:authority` ([`h2_request`]) and, with
    /// `forwarded`, the `X-Forwarded-Host` value; an HTTP/1.1 node reads `Host` from `headers`.
    pub(crate) host: Option<&'a HeaderValue>,
    /// For `Expect: 100-continue` to an HTTP/1.1 node: the gate the node's `100` opens (CASE-15).
    pub(crate) gate: Option<&'a ContinueGate>,
    /// The client speaks HTTP/1.x: an HTTP/1.1 node's answer may keep its fields as bytes for the
    /// client's writer ([`super::http1::head::ResponseHead::into_parts`]).
    pub(crate) raw_answer: bool,
}

/// The `X-Forwarded-*` fields of a request whose client sent no forwarding field (SPEC section 4;
/// [`crate::proxy::headers::Seen`]): with none to keep or drop, the gateway's own three are the
/// whole rewrite, so for an HTTP/1.1 node they are written as head lines after the map's fields
/// ([`super::http1::request_head::encode_request`]) instead of being hashed into the map.
/// `X-Forwarded-Host` is the request's host ([`NodeRequest::host`]), kept once.
#[derive(Debug, Clone)]
pub(crate) struct ForwardedFields {
    /// `X-Forwarded-For`: the peer's IP, formatted once per connection.
    pub(crate) peer: HeaderValue,
    /// `X-Forwarded-Proto`: `https` on a TLS listener, else `http`.
    pub(crate) proto: &'static str,
}

impl ForwardedFields {
    /// Adds the fields to `headers` (which holds no field of these names), `X-Forwarded-Host`
    /// when the request has a `host`.
    pub(crate) fn insert_into(&self, headers: &mut HeaderMap, host: Option<&HeaderValue>) {
        use crate::proxy::headers::{X_FORWARDED_FOR, X_FORWARDED_HOST, X_FORWARDED_PROTO};
        headers.insert(X_FORWARDED_FOR, self.peer.clone());
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(self.proto));
        if let Some(h) = host {
            headers.insert(X_FORWARDED_HOST, h.clone());
        }
    }
}

/// What the node gets of one request, made once at the start of phase 4 and sent again by every
/// attempt ([`NodeRequest`] borrows it per attempt).
#[derive(Debug)]
pub(crate) struct NodeRequestParts {
    /// The node's fields ([`crate::proxy::node_headers::node_headers`]).
    pub(crate) headers: HeaderMap,
    /// The `X-Forwarded-*` fields kept beside `headers`, if any ([`ForwardedFields`]).
    pub(crate) forwarded: Option<ForwardedFields>,
    /// The host the route phase settled: an h2 node's `:authority` ([`h2_request`]).
    pub(crate) host: Option<HeaderValue>,
    /// The request target in origin form (RFC 9112 section 3.2.1), `strip_prefix` applied.
    pub(crate) target: PathAndQuery,
}

/// The request for an h2 `node` (whose client takes it whole): `head` (its fields copied) and
/// `body`, with an absolute URI whose authority is the request's host ([`NodeRequest::host`];
/// RFC 9113 section 8.3.1; the node's address when there is no valid one), and no `Host` field
/// (an HTTP/1.1 client's `Host`, or one an HTTP/2 client sent, is removed from the copy; the host
/// the route phase settled for an HTTP/2 client is never added as one,
/// [`crate::proxy::node_headers::node_headers`]).
pub(crate) fn h2_request(
    head: NodeRequest<'_>,
    node: &Node,
    body: ProxyBody,
) -> Request<ProxyBody> {
    let mut req = Request::new(body);
    *req.method_mut() = head.method.clone();
    *req.headers_mut() = head.headers.clone();
    if let Some(f) = head.forwarded {
        f.insert_into(req.headers_mut(), head.host);
    }
    *req.version_mut() = http::Version::HTTP_2;
    // Built from its parts: formatting the URI and parsing it back cost a tenth of the
    // gateway's own work per gRPC call (bench/README).
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

/// Why an upstream attempt failed.
#[derive(Debug)]
pub enum SendError {
    /// TCP connect or handshake failed: nothing was sent; the request's body is handed back.
    Connect(std::io::Error, ProxyBody),
    /// The connection failed before the request was written; the request's body is handed back.
    NotSent(BoxError, ProxyBody),
    /// Failed after (part of) the request was written.
    Sent(BoxError),
    /// A reused pooled HTTP/1.1 connection failed after the request was written and before a
    /// response head arrived: the node closed it while it sat idle (CASE-21). Not a node fault;
    /// the request may be replayed on a new connection to the same node when it is idempotent.
    Stale(BoxError),
}

impl SendError {
    /// Text for logs and the 502 body.
    pub fn detail(&self) -> String {
        match self {
            SendError::Connect(e, _) => connect_detail(e),
            SendError::NotSent(e, _) => format!("connection closed before sending: {e}"),
            SendError::Sent(e) => describe(&**e),
            SendError::Stale(e) => {
                format!("pooled connection closed by the node: {}", describe(&**e))
            }
        }
    }
}

/// A failed connect for logs and the 502 body: a TLS handshake error as is (it names the alert or
/// the verification error, SPEC section 10), anything else as `connect: <error>`.
pub fn connect_detail(e: &std::io::Error) -> String {
    match tls::handshake_error(e) {
        Some(hs) => hs.to_string(),
        None => format!("connect: {e}"),
    }
}

/// True if an h2 error says the node did not process the stream (GOAWAY above its last stream id,
/// or REFUSED_STREAM), so any request may be replayed (RFC 9113 section 8.7).
pub fn is_unprocessed(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut src = Some(e);
    while let Some(err) = src {
        if let Some(h2e) = err.downcast_ref::<h2::Error>() {
            return h2e.reason() == Some(h2::Reason::REFUSED_STREAM)
                || (h2e.is_go_away() && h2e.reason() == Some(h2::Reason::NO_ERROR));
        }
        src = err.source();
    }
    false
}

/// True if an h2 error is the node's RST_STREAM(REFUSED_STREAM) for this stream: nothing was
/// processed, and the node itself declined, so another node should take it (SPEC section 5).
pub fn is_refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut src = Some(e);
    while let Some(err) = src {
        if let Some(h2e) = err.downcast_ref::<h2::Error>() {
            return h2e.is_reset() && h2e.reason() == Some(h2::Reason::REFUSED_STREAM);
        }
        src = err.source();
    }
    false
}
