//! One attempt's request head for a node ([`NodeRequest`]): what the upstream client sends on
//! each attempt of a request, borrowed from the request's attempts (a leaf of the request path:
//! [`super::upstream`], [`super::http1::node_conn`] and [`super::outbound`] all take it).

use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Method};

use super::expect::ContinueGate;

/// One attempt's request head for a node, borrowed from the request's attempts: the fields are
/// made once per request ([`super::outbound::node_headers`]) and every attempt sends them again
/// without a copy (an HTTP/1.1 node's head is encoded straight from them; an h2 node's request
/// takes a copy, [`super::outbound::build`]).
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
    /// `:authority`): an h2 node's `:authority` ([`super::outbound::build`]) and, with
    /// `forwarded`, the `X-Forwarded-Host` value; an HTTP/1.1 node reads `Host` from `headers`.
    pub(crate) host: Option<&'a HeaderValue>,
    /// For `Expect: 100-continue` to an HTTP/1.1 node: the gate the node's `100` opens (CASE-15).
    pub(crate) gate: Option<&'a ContinueGate>,
    /// The client speaks HTTP/1.x: an HTTP/1.1 node's answer may keep its fields as bytes for the
    /// client's writer ([`super::http1::node_head::ResponseHead::into_parts`]).
    pub(crate) raw_answer: bool,
}

/// The `X-Forwarded-*` fields of a request whose client sent no forwarding field (SPEC section 4;
/// [`super::headers::Seen`]): with none to keep or drop, the gateway's own three are the whole
/// rewrite, so for an HTTP/1.1 node they are written as head lines after the map's fields
/// ([`super::http1::node_head::encode_request`]) instead of being hashed into the map.
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
        use super::headers::{X_FORWARDED_FOR, X_FORWARDED_HOST, X_FORWARDED_PROTO};
        headers.insert(X_FORWARDED_FOR, self.peer.clone());
        headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(self.proto));
        if let Some(h) = host {
            headers.insert(X_FORWARDED_HOST, h.clone());
        }
    }
}
