//! The one place where a failure becomes a response (STYLE section 4): an exhaustive match from
//! [`ProxyError`] to status, JSON body (SPEC section 4: `{"code":-1,"message":"..."}`) and whether the
//! client connection must close. The gateway never answers with an empty 502.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, Full};

use super::client_body::ClientBodyError;
use super::ProxyBody;
use crate::config::Fallback;
use crate::hopper::IdError;

/// Why the gateway answered instead of a node.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The conn id header broke a rule (or was forged in signed mode).
    #[error("invalid {header} header: {source}")]
    BadConnId {
        /// Header name.
        header: String,
        /// Which rule.
        #[source]
        source: IdError,
    },
    /// A malformed request the gateway refuses to forward.
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    /// No route matches.
    #[error("no route matches {method} {path}")]
    NoRoute {
        /// Method.
        method: String,
        /// Path.
        path: String,
    },
    /// No selectable node and the route falls back.
    #[error("no healthy node in cluster {cluster}")]
    NoHealthyNode {
        /// Cluster name.
        cluster: String,
        /// The route's fallback answer.
        fallback: Fallback,
    },
    /// A version was requested that no node has, with `no_match = "reject"`.
    #[error("no node of version {version:?} in cluster {cluster}")]
    VersionRejected {
        /// Cluster name.
        cluster: String,
        /// Requested version.
        version: String,
    },
    /// The request body is larger than the route's `max_body`.
    #[error("request body larger than {limit} bytes")]
    BodyTooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// Could not connect to any node tried.
    #[error("could not connect to node {node}: {detail}")]
    Connect {
        /// Last node tried.
        node: String,
        /// Last error.
        detail: String,
    },
    /// The node failed after the request was sent and it could not be retried.
    #[error("node {node} failed: {detail}")]
    Upstream {
        /// Node.
        node: String,
        /// Error.
        detail: String,
    },
    /// The node did not answer in time.
    #[error("node {node} did not answer within {timeout_ms} ms")]
    Timeout {
        /// Node.
        node: String,
        /// Route timeout in ms.
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
    /// The gateway is shutting down.
    #[error("gateway is shutting down")]
    ShuttingDown,
    /// The client's request body stalled, trickled below the minimum rate, or broke off
    /// (CASE-22: 408, or 400 when the client broke off; the node is not at fault).
    #[error(transparent)]
    ClientBody(#[from] super::client_body::ClientBodyError),
}

impl ProxyError {
    /// The access log's `reason` code for this gateway-made answer (SPEC section 8, issue 17).
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
        }
    }

    /// True if the node is at fault (for passive health).
    pub fn is_node_fault(&self) -> bool {
        matches!(
            self,
            ProxyError::Connect { .. } | ProxyError::Upstream { .. } | ProxyError::Timeout { .. }
        )
    }
}

/// A JSON error body in the SPEC shape.
pub fn json_error(status: StatusCode, message: &str) -> Response<ProxyBody> {
    let body = serde_json::json!({ "code": -1, "message": message }).to_string();
    let mut resp = Response::new(full(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A body from bytes.
pub fn full(b: impl Into<Bytes>) -> ProxyBody {
    Full::new(b.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// Maps `err` to the response and whether to close the client connection.
pub fn respond(err: &ProxyError) -> (Response<ProxyBody>, bool) {
    let msg = err.to_string();
    match err {
        ProxyError::BadConnId { .. } => (json_error(StatusCode::BAD_REQUEST, &msg), false),
        ProxyError::BadRequest(_) => (json_error(StatusCode::BAD_REQUEST, &msg), true),
        ProxyError::NoRoute { .. } => (json_error(StatusCode::NOT_FOUND, &msg), false),
        ProxyError::NoHealthyNode { fallback, .. } => {
            let mut resp = Response::new(full(fallback.body.clone()));
            *resp.status_mut() = fallback.status;
            if let Ok(ct) = HeaderValue::from_str(&fallback.content_type) {
                resp.headers_mut().insert(header::CONTENT_TYPE, ct);
            }
            // Probes run every few seconds: a client retrying after 1 s has a fair chance.
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            (resp, false)
        }
        ProxyError::VersionRejected { .. } => {
            (json_error(StatusCode::SERVICE_UNAVAILABLE, &msg), false)
        }
        ProxyError::BodyTooLarge { .. } => (json_error(StatusCode::PAYLOAD_TOO_LARGE, &msg), true),
        ProxyError::Connect { .. } => (json_error(StatusCode::BAD_GATEWAY, &msg), false),
        ProxyError::Upstream { .. } => (json_error(StatusCode::BAD_GATEWAY, &msg), false),
        ProxyError::Timeout { .. } => (json_error(StatusCode::GATEWAY_TIMEOUT, &msg), false),
        ProxyError::UriTooLong { .. } => (json_error(StatusCode::URI_TOO_LONG, &msg), true),
        ProxyError::HeadersTooLarge { .. } => (
            json_error(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, &msg),
            true,
        ),
        ProxyError::ShuttingDown => (json_error(StatusCode::SERVICE_UNAVAILABLE, &msg), true),
        ProxyError::ClientBody(e) => match e {
            ClientBodyError::Idle(_) | ClientBodyError::BelowMinRate { .. } => {
                (json_error(StatusCode::REQUEST_TIMEOUT, &msg), true)
            }
            ClientBodyError::Broken(_) => (json_error(StatusCode::BAD_REQUEST, &msg), true),
        },
    }
}
