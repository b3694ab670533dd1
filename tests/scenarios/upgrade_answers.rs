//! Answers to WebSocket handshakes and upgrades nobody asked for (CASE-41; SPEC sections 4 and 5;
//! RFC 9110 sections 7.8 and 15.2.2, RFC 6455 section 4): the node decides, only a `101` to the
//! upgrade the client offered switches, any other `101` is the node's protocol error (502, node
//! connection closed), and a request with WebSocket fields but no upgrade pair is a plain request.

use std::time::Duration;

use integration_tests::check::json_error;
use integration_tests::raw::Raw;
use integration_tests::recorder::{
    admin_and_rest, path_and_length, Recorder, Reply, Req, MARKER, SMUGGLED,
};

use integration_tests::recorder::handshake;

/// node-a of CASE-41: answers by the request's `X-Case` field.
fn node_a(r: &Req) -> Reply {
    match r.case() {
        "a1" => Reply::now(
            "HTTP/1.1 200 OK\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 5\r\n\r\nplain",
        ),
        "a2" => Reply::now(
            "HTTP/1.1 426 Upgrade Required\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 0\r\n\r\n",
        ),
        "b" => Reply::now(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x05hello".to_vec(),
        )
        .then_raw(),
        // The accept key is right (RFC 6455 section 1.3): only the protocol is wrong.
        "b2" => Reply::now(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n",
        )
        .then_raw(),
        _ => path_and_length(r),
    }
}

/// A masked text frame "hi" (RFC 6455 section 5.3) followed by the smuggled request.
fn frame_and_request() -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut b = vec![0x81, 0x82];
    b.extend_from_slice(&mask);
    b.extend(b"hi".iter().zip(mask).map(|(c, m)| c ^ m));
    b.extend_from_slice(SMUGGLED);
    b
}

/// CASE-41 a: a `200` (a1) or `426` (a2) to a handshake reaches the client as a plain answer with
/// the node's body, never a `101` or `502`; the frame and request the client writes next are
/// answered `400` then closed, or the connection is closed: node-a never receives the marker and
/// node-b never receives `/admin/secret`.
#[tokio::test]
async fn case_41_a_refused_handshake_is_a_plain_answer_and_switches_nothing() {
    let (a, b, gw) = admin_and_rest(node_a).await;
    for (case, status, body) in [("a1", 200, &b"plain"[..]), ("a2", 426, &b""[..])] {
        let mut c = Raw::connect(gw.port).await;
        c.send(&handshake(case)).await;
        let (h, got) = c.response(Duration::from_secs(5)).await;
        assert_eq!((h.status, got.as_slice()), (status, body), "{case}");
        // The gateway may already have closed the connection: the write may fail.
        let _ = tokio::io::AsyncWriteExt::write_all(&mut c.s, &frame_and_request()).await;
        if let Some(h) = c.head(Duration::from_secs(3)).await {
            assert_eq!(h.status, 400, "{case}: what followed is not a request");
            json_error(&c.body(&h).await);
        }
        assert!(
            c.closed_within(Duration::from_secs(3)).await,
            "{case}: left open"
        );
    }
    assert!(!a.saw(MARKER), "the smuggled request reached node-a");
    assert!(b.paths().is_empty(), "node-b got {:?}", b.paths());
    assert_eq!(a.paths(), ["/ws", "/ws"]);
}

/// Sends `wire` then, on the same connection, `GET /again`: the first answer is the gateway's
/// JSON `502`; `/again` is answered by node-a on another node connection, or the client connection
/// is closed. The node connection that sent the `101` is closed within 2 s and never receives
/// `/again`.
async fn unasked_101_fails(a: &Recorder, port: u16, wire: &[u8]) {
    let mut c = Raw::connect(port).await;
    c.send(wire).await;
    let (h, body) = c.response(Duration::from_secs(5)).await;
    assert_eq!(h.status, 502, "{}", String::from_utf8_lossy(&body));
    json_error(&body);
    let _ = tokio::io::AsyncWriteExt::write_all(
        &mut c.s,
        b"GET /again HTTP/1.1\r\nHost: app.example.test\r\n\r\n",
    )
    .await;
    if let Some(h) = c.head(Duration::from_secs(3)).await {
        let v: serde_json::Value = serde_json::from_slice(&c.body(&h).await).expect("JSON");
        assert_eq!((h.status, v["path"].as_str()), (200, Some("/again")), "{v}");
    }
    a.wait(
        Duration::from_secs(2),
        "the switched node connection closed",
        |conns| {
            conns
                .iter()
                .filter(|c| c.requests.iter().any(|r| r.case().starts_with('b')))
                .all(|c| c.ended.is_some())
        },
    )
    .await;
    for conn in a.conns() {
        let again = conn.requests.iter().any(|r| r.path() == "/again");
        let switched = conn.requests.iter().any(|r| r.case().starts_with('b'));
        assert!(
            !(again && switched),
            "/again went into the switched connection"
        );
    }
}

/// CASE-41 b: a node's `101` to a plain `GET /plain` (b), and a `101` with `Upgrade: h2c` to a
/// WebSocket handshake (b2, a protocol the client did not offer), fail with the gateway's JSON
/// `502`, not the `101` nor the node's frame; the node connection is closed and never pooled.
#[tokio::test]
async fn case_41_b_a_101_nobody_asked_for_fails_with_502() {
    let (a, b, gw) = admin_and_rest(node_a).await;
    unasked_101_fails(
        &a,
        gw.port,
        b"GET /plain HTTP/1.1\r\nHost: app.example.test\r\nX-Case: b\r\n\r\n",
    )
    .await;
    unasked_101_fails(&a, gw.port, &handshake("b2")).await;
    assert!(b.paths().is_empty(), "node-b got {:?}", b.paths());
}

/// CASE-41 c: `Sec-WebSocket-Version`/`-Key` without `Connection: Upgrade` and `Upgrade` is a
/// plain request: node-a gets `GET /ws` with neither upgrade field nor a gateway-issued
/// `X-Conn-Id`, and the client gets node-a's `200`.
#[tokio::test]
async fn case_41_c_websocket_fields_without_the_upgrade_pair_are_a_plain_request() {
    let (a, _b, gw) = admin_and_rest(node_a).await;
    let mut c = Raw::connect(gw.port).await;
    c.send(b"GET /ws HTTP/1.1\r\nHost: app.example.test\r\nSec-WebSocket-Version: 7\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").await;
    let (h, body) = c.response(Duration::from_secs(5)).await;
    assert_eq!(h.status, 200, "{}", String::from_utf8_lossy(&body));
    let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(v["path"], "/ws");
    assert_eq!(h.get("x-conn-id"), None);
    let seen = a.requests();
    assert_eq!(seen.len(), 1);
    let head = seen[0].head.to_ascii_lowercase();
    assert!(!head.contains("\r\nupgrade:"), "{head}");
    assert!(!head.contains("\r\nx-conn-id:"), "{head}");
    for l in head.lines().filter(|l| l.starts_with("connection:")) {
        assert!(!l.contains("upgrade"), "{head}");
    }
}
