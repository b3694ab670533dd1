//! Every [`ProxyError`] kind rendered in every [`Dialect`]: HTTP status, JSON body, gRPC
//! Trailers-Only code and message, WebSocket close code and reason, and the close flag.

use std::time::Duration;

use http::{header, StatusCode};
use http_body_util::BodyExt;

use super::*;
use crate::config::Fallback;
use crate::hopper::IdError;
use crate::proxy::client_body::ClientBodyError;

/// One kind with what every dialect must make of it.
struct Case {
    err: ProxyError,
    status: u16,
    grpc: u32,
    ws: u16,
    close: bool,
}

fn case(err: ProxyError, status: u16, grpc: u32, ws: u16, close: bool) -> Case {
    Case {
        err,
        status,
        grpc,
        ws,
        close,
    }
}

fn fallback() -> Fallback {
    Fallback {
        status: StatusCode::SERVICE_UNAVAILABLE,
        content_type: "application/json".into(),
        body: r#"{"code":-1,"message":"service temporarily unavailable"}"#.into(),
    }
}

/// Every kind of the enum, one sample each (the match in `kinds_are_all_covered` keeps it complete).
///
/// Kept as one function: a table, one row per kind.
fn cases() -> Vec<Case> {
    let node = || "n1".to_string();
    vec![
        case(
            ProxyError::BadConnId {
                header: "x-conn-id".into(),
                source: IdError::Empty,
            },
            400,
            13,
            1011,
            false,
        ),
        case(ProxyError::BadRequest("two hosts"), 400, 13, 1011, true),
        case(
            ProxyError::NoRoute {
                method: "GET".into(),
                path: "/x".into(),
            },
            404,
            12,
            1011,
            false,
        ),
        case(
            ProxyError::NoHealthyNode {
                cluster: "c".into(),
                fallback: fallback(),
            },
            503,
            14,
            1011,
            false,
        ),
        case(
            ProxyError::VersionRejected {
                cluster: "c".into(),
                version: "v9".into(),
            },
            503,
            14,
            1011,
            false,
        ),
        case(ProxyError::BodyTooLarge { limit: 10 }, 413, 8, 1011, true),
        case(
            ProxyError::Connect {
                node: node(),
                detail: "connect: refused".into(),
                cause: None,
            },
            502,
            14,
            1011,
            false,
        ),
        case(
            ProxyError::Upstream {
                node: node(),
                detail: "reset".into(),
                cause: None,
            },
            502,
            14,
            1011,
            false,
        ),
        case(
            ProxyError::Timeout {
                node: node(),
                timeout_ms: 30,
            },
            504,
            4,
            1011,
            false,
        ),
        case(ProxyError::UriTooLong { limit: 8 }, 414, 8, 1011, true),
        case(
            ProxyError::HeadersTooLarge {
                limit: "100 fields".into(),
            },
            431,
            8,
            1011,
            true,
        ),
        case(ProxyError::ShuttingDown, 503, 14, 1001, true),
        case(
            ProxyError::ClientBody(ClientBodyError::Idle(Duration::from_secs(1))),
            408,
            4,
            1011,
            true,
        ),
        case(
            ProxyError::ClientBody(ClientBodyError::BelowMinRate {
                min: 100,
                bytes: 3,
                window: Duration::from_secs(1),
            }),
            408,
            4,
            1011,
            true,
        ),
        case(
            ProxyError::ClientBody(ClientBodyError::Broken("eof".into())),
            400,
            13,
            1011,
            true,
        ),
        case(ProxyError::Idle, 408, 4, 1001, true),
        case(ProxyError::DrainDeadline, 503, 14, 1001, true),
        case(ProxyError::MessageTooBig { limit: 64 }, 413, 8, 1009, true),
        case(
            ProxyError::FrameProtocol("unmasked client frame"),
            400,
            13,
            1002,
            true,
        ),
        case(ProxyError::NodeGone, 502, 14, 1011, true),
    ]
}

#[test]
fn kinds_are_all_covered() {
    // A new kind fails to compile here until it has a case above.
    for c in cases() {
        match c.err {
            ProxyError::BadConnId { .. }
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
            | ProxyError::ShuttingDown
            | ProxyError::ClientBody(_)
            | ProxyError::Idle
            | ProxyError::DrainDeadline
            | ProxyError::MessageTooBig { .. }
            | ProxyError::FrameProtocol(_)
            | ProxyError::NodeGone => {}
        }
    }
    assert_eq!(cases().len(), 20);
}

async fn body_of(resp: Response<ProxyBody>) -> Vec<u8> {
    resp.into_body()
        .collect()
        .await
        .expect("whole body")
        .to_bytes()
        .to_vec()
}

fn connection_close(resp: &Response<ProxyBody>) -> bool {
    resp.headers()
        .get(header::CONNECTION)
        .is_some_and(|v| v == "close")
}

#[tokio::test]
async fn http_and_websocket_handshake_answers_are_json_with_the_status() {
    for dialect in [Dialect::Http, Dialect::WebSocket] {
        for c in cases() {
            let a = render(&c.err, dialect);
            let what = format!("{:?} in {dialect:?}", c.err);
            assert_eq!(a.status.as_u16(), c.status, "{what}");
            assert_eq!(a.response.status().as_u16(), c.status, "{what}");
            assert_eq!(a.close, c.close, "{what}");
            assert_eq!(connection_close(&a.response), c.close, "{what}");
            let ct = a.response.headers().get(header::CONTENT_TYPE).cloned();
            let body = body_of(a.response).await;
            assert_eq!(
                ct.as_ref().map(|v| v.as_bytes()),
                Some(&b"application/json"[..]),
                "{what}"
            );
            let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON body");
            match &c.err {
                ProxyError::NoHealthyNode { .. } => assert_eq!(
                    v["message"], "service temporarily unavailable",
                    "{what}: the route's fallback body"
                ),
                e => assert_eq!(v["message"], e.to_string(), "{what}"),
            }
            assert_eq!(v["code"], -1, "{what}");
        }
    }
}

#[tokio::test]
async fn grpc_answers_are_trailers_only_with_the_mapped_code() {
    for c in cases() {
        let a = render(&c.err, Dialect::Grpc);
        let what = format!("{:?}", c.err);
        assert_eq!(
            a.status.as_u16(),
            c.status,
            "{what}: metrics keep the HTTP status"
        );
        assert_eq!(a.grpc_status, c.grpc, "{what}");
        assert_eq!(a.close, c.close, "{what}");
        let h = a.response.headers();
        assert_eq!(a.response.status(), StatusCode::OK, "{what}");
        assert_eq!(h["content-type"], "application/grpc", "{what}");
        assert_eq!(h["grpc-status"], c.grpc.to_string().as_str(), "{what}");
        assert_eq!(
            h["grpc-message"],
            grpc::encode_message(&c.err.to_string()).as_str(),
            "{what}"
        );
        assert_eq!(connection_close(&a.response), c.close, "{what}");
        assert!(
            body_of(a.response).await.is_empty(),
            "{what}: Trailers-Only"
        );
    }
}

#[test]
fn live_websockets_close_with_the_kind_code_and_reason() {
    for c in cases() {
        let (code, reason) = render(&c.err, Dialect::WebSocket).ws_close;
        assert_eq!(code, c.ws, "{:?}", c.err);
        match &c.err {
            ProxyError::ShuttingDown => assert_eq!(reason, "gateway shutting down"),
            ProxyError::FrameProtocol(what) => assert_eq!(reason, *what),
            e => assert_eq!(reason, e.to_string()),
        }
    }
    let (_, reason) = render(&ProxyError::MessageTooBig { limit: 64 }, Dialect::WebSocket).ws_close;
    assert_eq!(reason, "message over 64 bytes (websocket_max_message)");
    let (_, reason) = render(&ProxyError::Idle, Dialect::WebSocket).ws_close;
    assert_eq!(reason, "idle timeout");
    let (_, reason) = render(&ProxyError::DrainDeadline, Dialect::WebSocket).ws_close;
    assert_eq!(reason, "node drained");
    let (_, reason) = render(&ProxyError::NodeGone, Dialect::WebSocket).ws_close;
    assert_eq!(reason, "node went away");
}

#[test]
fn the_fallback_answer_keeps_its_status_type_and_retry_after() {
    let mut fb = fallback();
    fb.status = StatusCode::OK;
    fb.content_type = "text/plain".into();
    let a = render(
        &ProxyError::NoHealthyNode {
            cluster: "c".into(),
            fallback: fb,
        },
        Dialect::Http,
    );
    assert_eq!(a.status, StatusCode::OK);
    assert_eq!(a.response.headers()["content-type"], "text/plain");
    assert_eq!(a.response.headers()["retry-after"], "1");
}
