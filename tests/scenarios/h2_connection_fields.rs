//! Connection-specific fields on HTTP/2 and h2c upgrades on HTTP/1.1 (CASE-40; SPEC section 4;
//! RFC 9113 sections 3.1 and 8.2.2, RFC 9110 sections 7.6.1 and 7.8): an HTTP/2 request carrying
//! one is malformed and never reaches a node; `te: trailers` passes; an HTTP/1.1 `Upgrade: h2c`
//! reaches the node as a plain request and never switches the client connection.

use std::time::Duration;

use integration_tests::h2raw::{self, *};
use integration_tests::raw::Raw;
use integration_tests::recorder::{path_and_length, single, Reply, Req};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

const SETTINGS64: &str = "AAMAAABkAARAAAAAAAIAAAAA";

/// node-a of CASE-40: would accept `Upgrade: h2c` with a `101`, answers everything else `200`.
fn accepts_h2c(r: &Req) -> Reply {
    if r.head.to_ascii_lowercase().contains("\r\nupgrade: h2c\r\n") {
        Reply::now(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n",
        )
        .then_raw()
    } else {
        path_and_length(r)
    }
}

/// Sends `HEADERS(END_STREAM|END_HEADERS) HB(GET path)` plus `fields` on stream `id` and returns
/// how the stream ended within 5 s.
async fn get(
    rd: &mut Reader,
    wr: &mut tokio::net::tcp::OwnedWriteHalf,
    id: u32,
    path: &str,
    fields: &[(&str, &str)],
) -> StreamEnd {
    let mut block = hb("GET", path);
    for (k, v) in fields {
        block.extend(hpack_literal(k, v.as_bytes()));
    }
    wr.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, id, &block))
        .await
        .expect("write");
    rd.stream_end(id, Instant::now() + Duration::from_secs(5))
        .await
}

/// CASE-40 a: `GET /x` with each connection-specific field (a1–a8) is malformed and node-a gets
/// nothing of it; where only the stream was reset, `GET /ok` on the same connection is served;
/// `http2-settings` alone (a9) is refused or passes without it; `te: trailers` passes.
#[tokio::test]
async fn case_40_a_connection_specific_fields_on_h2_are_malformed() {
    let (a, gw) = single(accepts_h2c).await;
    let addr = format!("127.0.0.1:{}", gw.port);
    let cases: [(&str, &[(&str, &str)]); 8] = [
        (
            "a1",
            &[
                ("connection", "Upgrade, HTTP2-Settings"),
                ("upgrade", "h2c"),
                ("http2-settings", SETTINGS64),
            ],
        ),
        ("a2", &[("upgrade", "h2c")]),
        ("a3", &[("upgrade", "websocket")]),
        ("a4", &[("connection", "keep-alive")]),
        ("a5", &[("te", "gzip")]),
        ("a6", &[("transfer-encoding", "chunked")]),
        ("a7", &[("keep-alive", "timeout=5")]),
        ("a8", &[("proxy-connection", "keep-alive")]),
    ];
    let (mut rd, mut wr) = h2raw::connect(&addr).await;
    let mut id = 1;
    for (case, fields) in cases {
        let end = get(&mut rd, &mut wr, id, "/x", fields).await;
        assert!(end.malformed(true), "{case}: {end:?}");
        if matches!(end, StreamEnd::GoAway { .. }) {
            (rd, wr) = h2raw::connect(&addr).await;
            id = 1;
            continue;
        }
        let end = get(&mut rd, &mut wr, id + 2, "/ok", &[]).await;
        assert!(
            matches!(end, StreamEnd::Answer { status: 200, .. }),
            "{case}: GET /ok: {end:?}"
        );
        id += 4;
    }
    for (case, fields) in [
        ("a9", ("http2-settings", SETTINGS64)),
        ("control", ("te", "trailers")),
    ] {
        let end = get(&mut rd, &mut wr, id, "/x", &[fields]).await;
        let passed = matches!(end, StreamEnd::Answer { status: 200, .. });
        assert!(
            passed || (case == "a9" && end.malformed(true)),
            "{case}: {end:?}"
        );
        id += 2;
    }
    let seen = a.requests();
    assert!(seen
        .iter()
        .all(|r| r.path() != "/x" || !r.head.to_ascii_lowercase().contains("upgrade")));
    assert!(
        seen.iter().filter(|r| r.path() == "/x").count() <= 2,
        "{:?}",
        a.paths()
    );
    for r in seen.iter().filter(|r| r.path() == "/x") {
        let head = r.head.to_ascii_lowercase();
        assert!(
            !head.contains("\r\nhttp2-settings:") && !head.contains("\r\nconnection:"),
            "{head}"
        );
    }
}

/// CASE-40 b: an HTTP/1.1 `Upgrade: h2c` (named in `Connection`, then not) is never switched: the
/// request reaches node-a without `Upgrade`, `HTTP2-Settings` or `Connection` tokens naming them,
/// the client gets node-a's `200`, and the HTTP/2 preface sent next is answered `400`/`505` or
/// closes the connection, never reaching a node.
#[tokio::test]
async fn case_40_b_h2c_upgrade_on_http1_reaches_the_node_as_a_plain_request() {
    let (a, gw) = single(accepts_h2c).await;
    for connection in ["Upgrade, HTTP2-Settings", "HTTP2-Settings"] {
        let mut c = Raw::connect(gw.port).await;
        c.send(
            format!(
                "GET / HTTP/1.1\r\nHost: app.example.test\r\nConnection: {connection}\r\nUpgrade: h2c\r\nHTTP2-Settings: {SETTINGS64}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await;
        let (h, body) = c.response(Duration::from_secs(5)).await;
        assert_eq!(
            h.status,
            200,
            "{connection}: {}",
            String::from_utf8_lossy(&body)
        );
        let _ = c.s.write_all(PREFACE).await;
        if let Some(h) = c.head(Duration::from_secs(3)).await {
            assert!(
                [400, 505].contains(&h.status),
                "{connection}: preface answered {}",
                h.status
            );
        }
        assert!(
            c.closed_within(Duration::from_secs(3)).await,
            "{connection}: left open"
        );
    }
    assert!(!a.saw(b"PRI * HTTP/2.0"), "the preface reached node-a");
    assert_eq!(a.paths(), ["/", "/"]);
    for r in a.requests() {
        let head = r.head.to_ascii_lowercase();
        assert!(
            !head.contains("\r\nupgrade:") && !head.contains("\r\nhttp2-settings:"),
            "{head}"
        );
        for l in head.lines().filter(|l| l.starts_with("connection:")) {
            assert!(
                !l.contains("upgrade") && !l.contains("http2-settings"),
                "{head}"
            );
        }
    }
}
