//! Phase 5, respond: a node's answer as the client gets it ([`respond`]), and the gateway's own
//! answer to a failure ([`render`]).
//!
//! The one place where a failure becomes an answer (STYLE section 4): [`render`] maps a
//! [`ProxyError`] and the protocol at hand ([`Dialect`]) to one [`GatewayAnswer`] carrying the HTTP
//! status, the gRPC code, the WebSocket close code and reason, whether the client connection must
//! close, and the response to send — a JSON body in the SPEC section 4 shape
//! (`{"code":-1,"message":"..."}`), or for gRPC a Trailers-Only answer (HTTP 200, `grpc-status`,
//! `grpc-message`). The gateway never answers with an empty 502.
//!
//! Model: linkerd2-proxy `linkerd/app/core/src/errors/respond.rs` (one value, every protocol).

use std::sync::Arc;

use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use tokio::time::Instant;

use super::body::{full, BodyTap, ProxyBody, ResponseBody};
use super::client_body::ClientBodyError;
use super::context::{Kind, RequestCtx};
use super::error::ProxyError;
use super::headers;
use super::http1_codec::fields::NodeAnswer;
use super::types::Proxy;
use super::upstream::client::NodeAnswerBody;
use super::upstream::grpc;
use super::upstream::grpc_call::CallBody;
use crate::registry::{InflightGuard, Node};

/// The protocol a failure is answered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// HTTP/1.x or HTTP/2: a JSON body with the failure's status.
    Http,
    /// gRPC (`content-type: application/grpc…`): Trailers-Only, HTTP 200 (gRPC `PROTOCOL-HTTP2.md`).
    Grpc,
    /// A WebSocket: before the upgrade, the JSON HTTP answer; once upgraded, a Close frame
    /// ([`GatewayAnswer::ws_close`], RFC 6455 section 7.4).
    WebSocket,
}

impl Kind {
    /// The protocol its failures are answered in ([`render`]); here, beside [`Dialect`], so the
    /// context does not import the phase that answers.
    pub(crate) fn dialect(self) -> Dialect {
        match self {
            Kind::Http => Dialect::Http,
            Kind::Grpc => Dialect::Grpc,
            Kind::WebSocket => Dialect::WebSocket,
        }
    }
}

/// A failure rendered for one protocol (see the module docs).
#[derive(Debug)]
pub struct GatewayAnswer {
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
pub fn render(err: &ProxyError, dialect: Dialect) -> GatewayAnswer {
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
    GatewayAnswer {
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
        // Exhaustive (STYLE section 4): a new kind must choose its close code here.
        ProxyError::NodeGone
        | ProxyError::BadConnId { .. }
        | ProxyError::BadRequest(_)
        | ProxyError::NoRoute { .. }
        | ProxyError::NoHealthyNode { .. }
        | ProxyError::VersionRejected { .. }
        | ProxyError::BodyTooLarge { .. }
        | ProxyError::Connect { .. }
        | ProxyError::Upstream { .. }
        | ProxyError::Timeout { .. }
        | ProxyError::UriTooLong { .. }
        | ProxyError::HeadersTooLarge { .. }
        | ProxyError::ClientBody(_) => (CloseCode::INTERNAL_ERROR, err.to_string()),
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

/// What a node answered, with what [`respond`] (phase 5) needs of the attempt that got it
/// ([`super::forward::forward`]).
pub(crate) struct Forwarded {
    /// The node that answered.
    pub node: Arc<Node>,
    /// The gRPC call's deadline, which bounds its response stream too; `None` without one.
    pub call_deadline: Option<Instant>,
    /// The node's answer.
    pub answer: NodeAnswer<NodeAnswerBody>,
    /// The node's in-flight count, held until the response body ends.
    pub inflight: InflightGuard,
    /// The client's body as sent (its byte count goes in the access log).
    pub tap: BodyTap,
}

/// The node's answer in `forwarded` made the client's, ending the request of `ctx`: hop-by-hop
/// fields and `TE` removed (RFC 9110 section 7.6.1), a framed 204's framing dropped (CASE-27),
/// the conn id the gateway issued added; the body relayed frame by frame, cut at the node's drain
/// deadline (SPEC section 5) and, for gRPC, at the call's deadline; when it ends the request is
/// logged (phase 6) from `ctx` with the bytes of the client's body and of the response (an
/// HTTP/1.1 node's connection goes back to the pool by itself, [`super::upstream::http1::body`]).
pub(crate) fn respond(
    p: &Arc<Proxy>,
    mut ctx: RequestCtx,
    forwarded: Forwarded,
) -> NodeAnswer<ProxyBody> {
    let Forwarded {
        node,
        call_deadline,
        answer: sent,
        inflight,
        tap,
    } = forwarded;
    let NodeAnswer {
        response: sent,
        mut node_fields,
    } = sent;
    let (mut parts, incoming) = sent.into_parts();
    // Relayed frame by frame; cut at the node's drain deadline (gRPC: grpc-status 14), SPEC section 5.
    let is_grpc = grpc::is_grpc(&parts.headers);
    let incoming = grpc::relay(
        &parts.headers,
        is_grpc,
        incoming,
        &node,
        &mut ctx.log.grpc_status,
    );
    let grpc_status = ctx.log.grpc_status.clone();
    // CASE-27, RFC 9112 section 6.3 rule 1: a 204 ends at its head. Framing fields on it are the
    // node's mistake (RFC 9110 section 8.6): never passed on (nor is its connection pooled,
    // [`super::upstream::http1::head`]).
    // An HTTP/1.x node's fields kept as bytes had these rules applied as they were parsed
    // ([`super::http1_codec::fields`]); the map then holds only what the gateway adds.
    if node_fields.is_none() {
        if parts.status == http::StatusCode::NO_CONTENT {
            parts.headers.remove(header::CONTENT_LENGTH);
        }
        headers::strip_hop_by_hop(&mut parts.headers);
        // TE is a request header; a node has no business sending it back.
        parts.headers.remove(header::TE);
    }
    if let Some(v) = ctx.issued_id() {
        // Set, not added: a node's field of the same name is not passed on.
        if let Some(node) = node_fields.as_mut() {
            node.drop_named(p.settings.affinity_header.as_str().as_bytes());
        }
        parts.headers.insert(p.settings.affinity_header.clone(), v);
    }
    let status = parts.status.as_u16();
    let proxy = p.clone();
    let done = move |bytes_out| {
        drop(inflight);
        proxy.finish(&ctx, status, tap.bytes_in(), bytes_out, None);
    };
    let body = if is_grpc {
        let call = CallBody::new(incoming, call_deadline, grpc_status);
        ResponseBody::new(call, done).boxed_unsync()
    } else {
        ResponseBody::new(incoming, done).boxed_unsync()
    };
    NodeAnswer {
        response: Response::from_parts(parts, body),
        node_fields,
    }
}

#[cfg(test)]
#[path = "respond_tests.rs"]
mod tests;
