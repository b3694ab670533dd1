//! What dialling a node for a WebSocket gives besides the stream: what the first node agreed to
//! ([`Negotiated`], which every re-dialled node must agree to as well) and why a dial failed
//! ([`DialError`]). Shared by the first dial ([`super::dial`]) and the re-dial ([`super::redial`]).

use http::header::{SEC_WEBSOCKET_EXTENSIONS, SEC_WEBSOCKET_PROTOCOL};
use http::{HeaderMap, HeaderValue};

/// What the first node agreed to; a re-dialled node must agree to the same.
#[derive(Debug, Clone)]
pub(crate) struct Negotiated {
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

/// Why opening a node side failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DialError {
    /// TCP connect (or the TLS handshake) failed or timed out: nothing was sent.
    #[error("{}", crate::proxy::upstream::connect_detail(.0))]
    Connect(#[source] std::io::Error),
    /// The HTTP/1.1 exchange failed after the request went out (the upstream client's error,
    /// [`crate::proxy::http1::node_conn::NodeError`]).
    #[error("handshake: {}", crate::proxy::upstream::describe(&**.0))]
    Handshake(#[source] crate::proxy::BoxError),
    /// A re-dial's exchange failed after the request went out (reset, closed before the answer).
    #[error("handshake: {0}")]
    Exchange(#[source] std::io::Error),
    /// A re-dialled node answered, but not with a matching 101.
    #[error("node refused the re-dial: {0}")]
    Refused(String),
}
