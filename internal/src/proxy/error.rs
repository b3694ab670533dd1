//! The one error type of the data plane: why the gateway answers (or ends a live WebSocket)
//! itself instead of relaying a node's answer. Each variant is a kind with the facts its answer
//! needs; a node failure keeps its cause ([`std::error::Error::source`]). [`super::respond`]
//! renders any of them for the protocol at hand (JSON HTTP answer, gRPC Trailers-Only, WebSocket
//! close frame) — the only place a failure becomes an answer (STYLE section 4).
//!
//! Model: hyper's `src/error.rs` (kept cause, predicates) with linkerd2-proxy's
//! `errors/respond.rs` (one rendering per protocol).

use super::body::{BodyError, BoxError};
use super::client_body::ClientBodyError;
use crate::config::Fallback;
use crate::hopper::IdError;

/// Why the gateway answered instead of a node (SPEC section 4 "Errors").
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The conn id header broke a rule (or was forged in signed mode). 400.
    #[error("invalid {header} header: {source}")]
    BadConnId {
        /// Header name.
        header: String,
        /// Which rule.
        #[source]
        source: IdError,
    },
    /// A malformed request the gateway refuses to forward. 400, connection closed.
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    /// No route matches. 404.
    #[error("no route matches {method} {path}")]
    NoRoute {
        /// Method.
        method: String,
        /// Path.
        path: String,
    },
    /// No selectable node and the route falls back: the route's fallback answer.
    #[error("no healthy node in cluster {cluster}")]
    NoHealthyNode {
        /// Cluster name.
        cluster: String,
        /// The route's fallback answer.
        fallback: Fallback,
    },
    /// A version was requested that no node has, with `no_match = "reject"`. 503.
    #[error("no node of version {version:?} in cluster {cluster}")]
    VersionRejected {
        /// Cluster name.
        cluster: String,
        /// Requested version.
        version: String,
    },
    /// The request body is larger than the route's `max_body`. 413, connection closed.
    #[error("request body larger than {limit} bytes")]
    BodyTooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// Could not connect to any node tried: nothing was sent. 502.
    #[error("could not connect to node {node}: {detail}")]
    Connect {
        /// Last node tried.
        node: String,
        /// The failure as the 502 body names it (a TLS handshake error as is, else `connect: …`).
        detail: String,
        /// The failure itself.
        #[source]
        cause: Option<BoxError>,
    },
    /// The node failed after the request was sent and it could not be retried. 502.
    #[error("node {node} failed: {detail}")]
    Upstream {
        /// Node.
        node: String,
        /// The failure with its cause chain, as the 502 body names it.
        detail: String,
        /// The failure itself.
        #[source]
        cause: Option<BoxError>,
    },
    /// The node did not answer within the route timeout (or the call's gRPC deadline). 504.
    #[error("node {node} did not answer within {timeout_ms} ms")]
    Timeout {
        /// Node.
        node: String,
        /// The bound that ran out, in ms.
        timeout_ms: u128,
    },
    /// The request target is longer than the request-line limit (SPEC section 4: 414).
    #[error("request line longer than {limit} bytes")]
    UriTooLong {
        /// The limit in bytes.
        limit: usize,
    },
    /// The header block is larger, or has more fields, than allowed (SPEC section 4: 431).
    #[error("request header block larger than {limit}")]
    HeadersTooLarge {
        /// The limit broken, e.g. `32768 bytes` or `100 fields`.
        limit: String,
    },
    /// The gateway is shutting down. 503, connection closed; a live WebSocket gets 1001.
    #[error("gateway is shutting down")]
    ShuttingDown,
    /// The client's request body stalled, trickled below the minimum rate, or broke off
    /// (CASE-22: 408, or 400 when the client broke off; the node is not at fault).
    #[error(transparent)]
    ClientBody(#[from] ClientBodyError),
    /// A live WebSocket carried no frame either way for `limits.websocket_idle_timeout`:
    /// Close 1001 "idle timeout" (SPEC section 5).
    #[error("idle timeout")]
    Idle,
    /// The node's drain deadline passed while a WebSocket was still on it: Close 1001
    /// "node drained" (SPEC section 5).
    #[error("node drained")]
    DrainDeadline,
    /// A WebSocket message over `limits.websocket_max_message` bytes: Close 1009 (RFC 6455
    /// section 7.4.1); over HTTP, 413.
    #[error("message over {limit} bytes (websocket_max_message)")]
    MessageTooBig {
        /// The limit in bytes.
        limit: u64,
    },
    /// A WebSocket frame broke RFC 6455 section 5 (unmasked client frame, reserved opcode, …):
    /// Close 1002 with the rule as reason.
    #[error("{0}")]
    FrameProtocol(&'static str),
    /// A live WebSocket's node went away and the route does not hop: Close 1011
    /// "node went away" (SPEC section 5 `mode = "close"`).
    #[error("node went away")]
    NodeGone,
}

impl ProxyError {
    /// The access log's `reason` code for this gateway-made answer (SPEC section 8).
    pub fn reason(&self) -> &'static str {
        match self {
            ProxyError::BadConnId { .. } => "bad_conn_id",
            ProxyError::BadRequest(_) => "bad_request",
            ProxyError::NoRoute { .. } => "no_route",
            ProxyError::NoHealthyNode { .. } => "no_healthy_node",
            ProxyError::VersionRejected { .. } => "version_rejected",
            ProxyError::BodyTooLarge { .. } => "body_too_large",
            ProxyError::Connect { .. } => "connect_failed",
            ProxyError::Upstream { .. } => "upstream_failed",
            ProxyError::Timeout { .. } => "upstream_timeout",
            ProxyError::UriTooLong { .. } => "uri_too_long",
            ProxyError::HeadersTooLarge { .. } => "headers_too_large",
            ProxyError::ShuttingDown => "shutting_down",
            ProxyError::ClientBody(_) => "client_body",
            ProxyError::Idle => "idle_timeout",
            ProxyError::DrainDeadline => "drain_deadline",
            ProxyError::MessageTooBig { .. } => "message_too_big",
            ProxyError::FrameProtocol(_) => "frame_protocol",
            ProxyError::NodeGone => "node_gone",
        }
    }

    /// True if the node is at fault (a WARN line; passive health was charged where it failed).
    pub fn is_node_fault(&self) -> bool {
        self.is_connect() || self.is_timeout() || matches!(self, ProxyError::Upstream { .. })
    }

    /// True for a node that did not answer within its bound ([`ProxyError::Timeout`]).
    pub fn is_timeout(&self) -> bool {
        matches!(self, ProxyError::Timeout { .. })
    }

    /// True when no node could be connected to: nothing of the request was sent.
    pub fn is_connect(&self) -> bool {
        matches!(self, ProxyError::Connect { .. })
    }

    /// True when the client may send the same request again unchanged, to this gateway or
    /// another, with a fair chance: nothing reached a node's application (no node, no
    /// connection, shutting down) — gRPC's UNAVAILABLE (gRPC `doc/statuscodes.md`).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ProxyError::Connect { .. }
                | ProxyError::NoHealthyNode { .. }
                | ProxyError::ShuttingDown
                | ProxyError::DrainDeadline
        )
    }

    /// True when the client caused it (a 4xx): the request or its body broke a rule.
    pub fn is_client_fault(&self) -> bool {
        matches!(
            self,
            ProxyError::BadConnId { .. }
                | ProxyError::BadRequest(_)
                | ProxyError::NoRoute { .. }
                | ProxyError::BodyTooLarge { .. }
                | ProxyError::UriTooLong { .. }
                | ProxyError::HeadersTooLarge { .. }
                | ProxyError::ClientBody(_)
                | ProxyError::MessageTooBig { .. }
                | ProxyError::FrameProtocol(_)
        )
    }
}

impl ProxyError {
    /// Attributes a failed upstream attempt to the client's body, if that is what failed.
    /// Returns the error to answer with (408 for idle/slow, 413 past `max_body`, 400 when the client
    /// broke off), or `None` when the node (or the network to it) is at fault.
    pub fn client_fault(e: &(dyn std::error::Error + 'static)) -> Option<ProxyError> {
        // The upstream error itself (hyper's, or the HTTP/1.1 client's `NodeError`) is never the
        // client's: only its causes can be the client's body.
        let mut src = std::error::Error::source(e);
        while let Some(cause) = src {
            if let Some(b) = cause.downcast_ref::<BodyError>() {
                return Some(match b {
                    BodyError::Idle(d) => ProxyError::ClientBody(ClientBodyError::Idle(*d)),
                    BodyError::TooLarge(limit) => ProxyError::BodyTooLarge { limit: *limit },
                });
            }
            if let Some(ClientBodyError::BelowMinRate { min, bytes, window }) =
                cause.downcast_ref::<ClientBodyError>()
            {
                return Some(ProxyError::ClientBody(ClientBodyError::BelowMinRate {
                    min: *min,
                    bytes: *bytes,
                    window: *window,
                }));
            }
            if let Some(ClientBodyError::Broken(why)) = cause.downcast_ref::<ClientBodyError>() {
                // The gateway's own HTTP/1.x server reading the client's body (proxy::downstream::http1).
                return Some(ProxyError::ClientBody(ClientBodyError::Broken(why.clone())));
            }
            if let Some(h) = cause.downcast_ref::<hyper::Error>() {
                // hyper's server reading the client's body (the downstream side).
                return Some(ProxyError::ClientBody(ClientBodyError::Broken(describe(h))));
            }
            src = cause.source();
        }
        None
    }
}

/// An upstream error (h2's, or the HTTP/1.1 client's
/// [`super::upstream::http1::io::NodeError`]) with its cause chain, for a precise 502 message.
pub fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connect() -> ProxyError {
        ProxyError::Connect {
            node: "n1".into(),
            detail: "connect: refused".into(),
            cause: Some(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            ))),
        }
    }

    #[test]
    fn node_failures_keep_their_cause_and_message() {
        let e = connect();
        assert_eq!(
            e.to_string(),
            "could not connect to node n1: connect: refused"
        );
        let cause = std::error::Error::source(&e).expect("cause kept");
        assert_eq!(
            cause.downcast_ref::<std::io::Error>().map(|e| e.kind()),
            Some(std::io::ErrorKind::ConnectionRefused)
        );
    }

    #[test]
    fn predicates_sort_the_kinds() {
        let timeout = ProxyError::Timeout {
            node: "n1".into(),
            timeout_ms: 30,
        };
        assert!(timeout.is_timeout() && timeout.is_node_fault() && !timeout.is_retryable());
        let c = connect();
        assert!(c.is_connect() && c.is_node_fault() && c.is_retryable() && !c.is_timeout());
        let up = ProxyError::Upstream {
            node: "n1".into(),
            detail: "reset".into(),
            cause: None,
        };
        assert!(up.is_node_fault() && !up.is_retryable() && !up.is_connect());
        assert!(ProxyError::ShuttingDown.is_retryable());
        assert!(!ProxyError::ShuttingDown.is_node_fault());
        assert!(ProxyError::BadRequest("x").is_client_fault());
        assert!(!ProxyError::BadRequest("x").is_retryable());
        assert!(ProxyError::MessageTooBig { limit: 1 }.is_client_fault());
        assert!(!ProxyError::NodeGone.is_client_fault());
    }
}
