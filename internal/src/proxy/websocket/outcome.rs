//! What dialling a node for a WebSocket gives besides the stream: what the first node agreed to
//! ([`Negotiated`], which every re-dialled node must agree to as well) and why a dial failed
//! ([`DialError`]). Shared by the first dial ([`super::dial`]) and the re-dial ([`super::redial`]).

use http::header::{SEC_WEBSOCKET_EXTENSIONS, SEC_WEBSOCKET_PROTOCOL};
use http::{HeaderMap, HeaderValue};

pub(crate) use super::deflate::Agreed;

/// What the client agreed to through the first node's answer (as relayed to it); every
/// re-dialled node must select the same subprotocol, and its extensions must be ones the gateway
/// can keep valid for the client ([`super::deflate`]).
#[derive(Debug, Clone)]
pub(crate) struct Negotiated {
    /// The node's `Sec-WebSocket-Protocol`, if any.
    pub(super) protocol: Option<HeaderValue>,
    /// The extensions as the client has them: a `permessage-deflate` with the parameters the
    /// client was told, or another extension (whose state cannot move: the socket gets the
    /// reconnect hint instead of a hop).
    pub(super) extensions: Agreed,
}

impl Negotiated {
    /// What a node's 101 answer `head` agreed to.
    pub(super) fn of(head: &HeaderMap) -> Self {
        Negotiated {
            // Copied, not shared: a shared value would pin the node connection's read buffer.
            protocol: head
                .get(SEC_WEBSOCKET_PROTOCOL)
                .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok()),
            extensions: Agreed::of(
                head.get_all(SEC_WEBSOCKET_EXTENSIONS)
                    .iter()
                    .map(HeaderValue::as_bytes),
            ),
        }
    }

    /// For a socket that may hop: a `permessage-deflate` client must not compress with context
    /// takeover (a new node has not seen its history), so the answer relayed to the client
    /// imposes `client_no_context_takeover` (RFC 7692 section 7.1.1.1). `answer` is the node's
    /// `Sec-WebSocket-Extensions` value; returns the value the client must get instead, the node's
    /// with the parameter appended, if it changes.
    pub(super) fn impose_for_hop(&mut self, answer: &HeaderValue) -> Option<HeaderValue> {
        let Agreed::Deflate(p) = self.extensions else {
            return None;
        };
        if p.client_no_context_takeover {
            return None;
        }
        self.extensions = Agreed::Deflate(p.for_hopping_client());
        let mut imposed = answer.as_bytes().trim_ascii().to_vec();
        imposed.extend_from_slice(b"; client_no_context_takeover");
        HeaderValue::from_bytes(&imposed).ok()
    }

    /// True if an extension other than `permessage-deflate` was agreed: its state cannot move.
    pub(super) fn pins_node(&self) -> bool {
        matches!(self.extensions, Agreed::Other)
    }
}

/// Why opening a node side failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DialError {
    /// TCP connect (or the TLS handshake) failed or timed out: nothing was sent.
    #[error("{}", crate::proxy::upstream::request::connect_detail(.0))]
    Connect(#[source] std::io::Error),
    /// The HTTP/1.1 exchange failed after the request went out (the upstream client's error,
    /// [`crate::proxy::upstream::http1::io::NodeError`]).
    #[error("handshake: {}", crate::proxy::error::describe(&**.0))]
    Handshake(#[source] crate::proxy::body::BoxError),
    /// A re-dial's exchange failed after the request went out (reset, closed before the answer).
    #[error("handshake: {0}")]
    Exchange(#[source] std::io::Error),
    /// A re-dialled node answered, but not with a matching 101.
    #[error("node refused the re-dial: {0}")]
    Refused(String),
}
