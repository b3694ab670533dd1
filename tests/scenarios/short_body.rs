//! Bodies that end before (or run past) their framing (CASE-38; SPEC section 4; RFC 9112 section
//! 6.3 rule 5 and section 8, RFC 9113 section 8.1.1): the request is aborted toward the node — the
//! node never sees it complete and the connection that carried it is closed, never pooled — and the
//! client gets `400` (or a reset on HTTP/2), never a `2xx`, `502` or `504`.

use std::time::Duration;

use integration_tests::check::json_error;
use integration_tests::h2raw::{self, *};
use integration_tests::raw::Raw;
use integration_tests::recorder::{
    own_answer, path_and_length, single, Recorder, MARKER, SMUGGLED,
};
use integration_tests::Gateway;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

/// node-a never saw a complete `/upload`, every connection that carried one is closed within 2 s,
/// and `GET /next` gets node-a's own answer on another connection.
async fn aborted_and_not_reused(a: &Recorder, gw: &Gateway) {
    a.wait(
        Duration::from_secs(2),
        "the /upload connection closed",
        |conns| {
            conns
                .iter()
                .filter(|c| c.requests.iter().any(|r| r.path() == "/upload"))
                .all(|c| c.ended.is_some())
        },
    )
    .await;
    own_answer(gw, "/next").await;
    for c in a.conns() {
        // Requests before an `/upload` may share its connection (pooled); none may follow it.
        if let Some(at) = c.requests.iter().position(|r| r.path() == "/upload") {
            assert!(!c.requests[at].complete, "node-a saw a complete /upload");
            assert_eq!(at + 1, c.requests.len(), "the broken connection was reused");
        }
    }
}

/// CASE-38 a: `Content-Length: 100`, 10 octets, then FIN: a JSON `400` or a close without an
/// answer, never `2xx`/`502`/`504`, then the close; the node request is aborted.
#[tokio::test]
async fn case_38_a_short_http1_body_is_aborted_upstream_and_answered_400() {
    let (a, gw) = single(path_and_length).await;
    let mut c = Raw::connect(gw.port).await;
    c.send(
        b"POST /upload HTTP/1.1\r\nHost: app.example.test\r\nContent-Length: 100\r\n\r\n0123456789",
    )
    .await;
    // The worst case: the gateway already streams the request to node-a when the client stops.
    a.wait(
        Duration::from_secs(5),
        "node-a got the head and 10 octets",
        |conns| {
            conns
                .iter()
                .any(|c| c.octets.ends_with(b"\r\n\r\n0123456789"))
        },
    )
    .await;
    c.s.shutdown().await.expect("FIN");
    if let Some(h) = c.head(Duration::from_secs(5)).await {
        assert_eq!(h.status, 400);
        json_error(&c.body(&h).await);
    }
    assert!(c.closed_within(Duration::from_secs(3)).await, "left open");
    aborted_and_not_reused(&a, &gw).await;
}

/// How an h2c `POST /upload` with `content-length: declared` and one DATA(END_STREAM) frame of
/// `payload` ends.
async fn h2_upload(gw: &Gateway, declared: &str, payload: &[u8]) -> StreamEnd {
    let (mut rd, mut wr) = h2raw::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let mut block = hb("POST", "/upload");
    block.extend(hpack_literal("content-length", declared.as_bytes()));
    let mut b = frame(HEADERS, END_HEADERS, 1, &block);
    b.extend(frame(DATA, END_STREAM, 1, payload));
    wr.write_all(&b).await.expect("write");
    rd.stream_end(1, Instant::now() + Duration::from_secs(5))
        .await
}

/// CASE-38 b: `content-length: 100` with 10 octets and END_STREAM; c: `content-length: 10` with
/// 10 octets and a smuggled request in the same frame. Both are malformed: reset (or GOAWAY) with
/// PROTOCOL_ERROR, never a `2xx`; node-a never sees a complete `/upload`, in c never more than the
/// 10 announced octets nor the marker; `GET /next` gets node-a's own answer.
#[tokio::test]
async fn case_38_bc_h2_body_short_or_long_of_content_length_is_malformed() {
    let (a, gw) = single(path_and_length).await;
    let end = h2_upload(&gw, "100", b"0123456789").await;
    assert!(end.malformed(false), "b: {end:?}");
    aborted_and_not_reused(&a, &gw).await;

    let mut long = b"0123456789".to_vec();
    long.extend_from_slice(SMUGGLED);
    let end = h2_upload(&gw, "10", &long).await;
    assert!(end.malformed(false), "c: {end:?}");
    aborted_and_not_reused(&a, &gw).await;
    assert!(
        !a.saw(MARKER) && !a.saw(b"/smuggled"),
        "smuggled octets reached node-a"
    );
    for r in a.requests().iter().filter(|r| r.path() == "/upload") {
        assert!(
            r.body.len() <= 10,
            "node-a got {} body octets",
            r.body.len()
        );
    }
}
