//! Large gRPC metadata from an h2c node (SPEC sections 4 and 5: `h2_max_header_list` applies to
//! trailers too, both directions): response heads and trailers under the limit pass on the one
//! shared upstream connection; trailers over it end that stream alone with a definite status.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use integration_tests::nodes::hand_node;
use tokio::task::JoinHandle;

use super::*;

/// The client's header list limit: far above the gateway's, so only the gateway's limit applies.
const CLIENT_MAX_HEADER_LIST: u32 = 1024 * 1024;

/// Connections a hand-made gRPC node accepted (h2 handshakes) and saw end.
#[derive(Default)]
struct Conns {
    opened: AtomicUsize,
    ended: AtomicUsize,
}

impl Conns {
    /// Asserts that the node saw exactly one h2 connection and that it is still open.
    fn assert_one_open(&self) {
        let opened = self.opened.load(Ordering::SeqCst);
        let ended = self.ended.load(Ordering::SeqCst);
        assert_eq!(
            (opened, ended),
            (1, 0),
            "upstream connections opened, ended"
        );
    }
}

/// A request header of the node's knobs as a number (0 without it).
fn knob(req: &http::Request<h2::RecvStream>, name: &str) -> usize {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0)
}

/// Answers one call: `200` with `content-type: application/grpc` and an `x-big` field of
/// `x-head-bytes` bytes, one `WhoReply` message, then trailers `grpc-status` (`x-grpc-status`,
/// default 0) and a `grpc-status-details-bin` of `x-trailer-bytes` bytes.
async fn answer(req: http::Request<h2::RecvStream>, mut respond: h2::server::SendResponse<Bytes>) {
    let (head_bytes, trailer_bytes) = (knob(&req, "x-head-bytes"), knob(&req, "x-trailer-bytes"));
    let status = knob(&req, "x-grpc-status");
    let mut body = req.into_body();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let mut head = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc");
    if head_bytes > 0 {
        head = head.header("x-big", "h".repeat(head_bytes));
    }
    let Ok(mut send) = respond.send_response(head.body(()).expect("head"), false) else {
        return;
    };
    let reply = encode_frame(&proto::WhoReply {
        node: "node-m".into(),
    });
    let _ = send.send_data(reply, false);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", status.into());
    if trailer_bytes > 0 {
        let details = "A".repeat(trailer_bytes);
        let value = http::HeaderValue::from_str(&details).expect("base64 characters");
        trailers.insert("grpc-status-details-bin", value);
    }
    let _ = send.send_trailers(trailers);
}

/// A hand-made h2c gRPC node `node-m` answering every call with [`answer`]; counts its h2
/// connections (a TCP probe is not one).
async fn metadata_node() -> (String, Arc<Conns>, JoinHandle<()>) {
    let conns = Arc::new(Conns::default());
    let seen = conns.clone();
    let (addr, task) = hand_node(move |s| {
        let seen = seen.clone();
        async move {
            let Ok(mut conn) = h2::server::handshake(s).await else {
                return;
            };
            seen.opened.fetch_add(1, Ordering::SeqCst);
            while let Some(Ok((req, respond))) = conn.accept().await {
                tokio::spawn(answer(req, respond));
            }
            seen.ended.fetch_add(1, Ordering::SeqCst);
        }
    })
    .await;
    (addr, conns, task)
}

/// A gateway over `node-m` at `addr` as a `protocol = "h2c"` cluster, and an h2c client to it
/// that accepts large metadata.
async fn gateway_and_client(addr: &str) -> (Gateway, h2c::H2Conn) {
    let gw = h2c_gateway(TCP_HEALTH, "node-m", addr.to_string(), "").await;
    let authority = format!("127.0.0.1:{}", gw.port);
    let c = h2c::connect_with_header_list(&authority, CLIENT_MAX_HEADER_LIST).await;
    (gw, c)
}

/// One `Who` call with the node knobs `knobs`, read whole.
async fn call(c: &mut h2c::H2Conn, knobs: &[(&str, &str)]) -> h2c::H2Resp {
    let req = c.request(
        "POST",
        WHO_PATH,
        &grpc_headers(knobs),
        encode_frame(&proto::WhoRequest {}),
    );
    c.fetch(req).await.expect("gRPC call")
}

/// SPEC 4/5: a 12 KiB trailer and a 20 KiB response head, both under the 64 KiB
/// `h2_max_header_list`, reach the client whole, and the node's one h2 connection carries every
/// call: no second connection, none ended.
#[tokio::test]
async fn large_legal_metadata_keeps_the_one_upstream_connection() {
    let (addr, conns, node) = metadata_node().await;
    let (_gw, mut c) = gateway_and_client(&addr).await;

    let r = call(&mut c, &[("x-trailer-bytes", "12288")]).await;
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"), "{r:?}");
    let details = r.trailer("grpc-status-details-bin").expect("details");
    assert_eq!(details.len(), 12288);

    let r = call(&mut c, &[("x-head-bytes", "20480")]).await;
    assert_eq!(r.header("x-big").map(|v| v.len()), Some(20480));
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"), "{r:?}");

    for _ in 0..3 {
        let r = call(&mut c, &[]).await;
        assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"), "{r:?}");
    }
    conns.assert_one_open();
    node.abort();
}

/// SPEC 4/5: trailers over `h2_max_header_list` (a 100 KiB `grpc-status-details-bin` after the
/// node's `grpc-status: 3`) never reach the client cut short: the call ends with trailers
/// `grpc-status: 13` (INTERNAL) and a `grpc-message`; that stream alone fails, and the next call
/// runs on the same upstream connection.
#[tokio::test]
async fn grpc_trailers_over_the_limit_end_the_call_with_a_definite_status() {
    let (addr, conns, node) = metadata_node().await;
    let (_gw, mut c) = gateway_and_client(&addr).await;

    let r = call(
        &mut c,
        &[("x-trailer-bytes", "102400"), ("x-grpc-status", "3")],
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("13"), "{r:?}");
    let message = r.trailer("grpc-message").expect("grpc-message");
    assert!(message.contains("h2_max_header_list"), "{message}");
    assert_eq!(r.trailer("grpc-status-details-bin"), None);

    let r = call(&mut c, &[]).await;
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"), "{r:?}");
    conns.assert_one_open();
    node.abort();
}
