//! The one place where a failure becomes an answer (STYLE section 4): [`render`] maps a
//! [`ProxyError`] and the protocol at hand ([`Dialect`]) to one [`Answer`] carrying the HTTP status,
//! the gRPC code, the WebSocket close code and reason, whether the client connection must close,
//! and the response to send — a JSON body in the SPEC section 4 shape
//! (`{"code":-1,"message":"..."}`), or for gRPC a Trailers-Only answer (HTTP 200, `grpc-status`,
//! `grpc-message`). The gateway never answers with an empty 502.
//!
//! Model: linkerd2-proxy `linkerd/app/core/src/errors/respond.rs` (one value, every protocol).

use http::{header, HeaderValue, Response, StatusCode};

pub use super::body::full;
use super::client_body::ClientBodyError;
pub use super::error::ProxyError;
use super::grpc;
use super::ProxyBody;

/// The protocol a failure is answered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// HTTP/1.x or HTTP/2: a JSON body with the failure's status.
    Http,
    /// gRPC (`content-type: application/grpc…`): Trailers-Only, HTTP 200 (gRPC `PROTOCOL-HTTP2.md`).
    Grpc,
    /// A WebSocket: before the upgrade, the JSON HTTP answer; once upgraded, a Close frame
    /// ([`Answer::ws_close`], RFC 6455 section 7.4).
    WebSocket,
}

/// A failure rendered for one protocol (see the module docs).
#[derive(Debug)]
pub struct Answer {
    /// The failure's HTTP status; metrics and the access log keep it even when the client gets
    /// gRPC's HTTP 200.
    pub status: StatusCode,
    /// The gRPC status code ([`grpc::code_for_http`]); sent as `grpc-status` in [`Dialect::Grpc`].
    pub grpc_status: u32,
    /// The WebSocket close code and reason (reason at most 123 bytes once framed, RFC 6455 section 5.5).
    pub ws_close: (u16, String),
    /// True if the client connection must close after the answer (`Connection: close` on HTTP/1.1).
    pub close: bool,
    /// The response to send over HTTP.
    pub response: Response<ProxyBody>,
}

/// Renders `err` for `dialect`; see the module docs. Never fails.
pub fn render(err: &ProxyError, dialect: Dialect) -> Answer {
    let (mut response, close) = http_answer(err);
    if close {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let status = response.status();
    let grpc_status = grpc::code_for_http(status);
    if dialect == Dialect::Grpc {
        response = grpc::trailers_only(grpc_status, &err.to_string(), close);
    }
    Answer {
        status,
        grpc_status,
        ws_close: ws_close(err),
        close,
        response,
    }
}

/// The Close frame a live WebSocket ends with for `err` (RFC 6455 section 7.4.1): 1009 for a
/// message over the limit, 1002 for a broken frame, 1011 when the node went away, 1001 ("going
/// away") for shutdown, idle and drain; 1011 with the message for any other failure.
fn ws_close(err: &ProxyError) -> (u16, String) {
    let (code, reason) = match err {
        ProxyError::MessageTooBig { .. } => (CloseCode::MESSAGE_TOO_BIG, err.to_string()),
        ProxyError::FrameProtocol(what) => (CloseCode::PROTOCOL_ERROR, (*what).to_string()),
        ProxyError::ShuttingDown => (CloseCode::GOING_AWAY, "gateway shutting down".to_string()),
        ProxyError::Idle | ProxyError::DrainDeadline => (CloseCode::GOING_AWAY, err.to_string()),
        _ => (CloseCode::INTERNAL_ERROR, err.to_string()),
    };
    (code.0, reason)
}

/// A WebSocket close code (RFC 6455 section 7.4.1). The codes the gateway sends or reads are named
/// here, the one place they are written as numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseCode(pub u16);

impl CloseCode {
    /// 1001: the endpoint is going away (gateway shutdown, idle timeout, drain; from a node, the
    /// node leaving).
    pub const GOING_AWAY: CloseCode = CloseCode(1001);
    /// 1002: the peer broke the protocol.
    pub const PROTOCOL_ERROR: CloseCode = CloseCode(1002);
    /// 1009: a message too big to process (`limits.websocket_max_message`).
    pub const MESSAGE_TOO_BIG: CloseCode = CloseCode(1009);
    /// 1011: an unexpected condition (the node went away in `close` mode, any other failure).
    pub const INTERNAL_ERROR: CloseCode = CloseCode(1011);
    /// 1012: service restart; the gateway's reconnect hint goes with it (SPEC section 5).
    pub const SERVICE_RESTART: CloseCode = CloseCode(1012);
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

/// The HTTP answer to `err` and whether the client connection must close (SPEC section 4).
fn http_answer(err: &ProxyError) -> (Response<ProxyBody>, bool) {
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
        ProxyError::Idle => (json_error(StatusCode::REQUEST_TIMEOUT, &msg), true),
        ProxyError::DrainDeadline => (json_error(StatusCode::SERVICE_UNAVAILABLE, &msg), true),
        ProxyError::MessageTooBig { .. } => (json_error(StatusCode::PAYLOAD_TOO_LARGE, &msg), true),
        ProxyError::FrameProtocol(_) => (json_error(StatusCode::BAD_REQUEST, &msg), true),
        ProxyError::NodeGone => (json_error(StatusCode::BAD_GATEWAY, &msg), true),
    }
}

#[cfg(test)]
#[path = "respond_tests.rs"]
mod tests;
