//! A `Content-Length` given as a list of one value or on several lines (RFC 9110 section 8.6: a
//! recipient may replace it with one instance of the value; RFC 9112 section 6.3 rule 5 lets the
//! next recipient refuse the list): the gateway frames the message by that value and passes it on
//! once, on one line, in both directions. Different values stay refused (`framing.rs`, and the
//! node-side unit tests of `proxy/upstream/http1/head.rs`).

use std::time::Duration;

use integration_tests::nodes::{read_body, reporting_node, request_head};
use integration_tests::raw::Raw;
use integration_tests::{Config, Gateway, Health, Route};
use tokio::io::AsyncWriteExt;

/// The `content-length` lines of a head, in order (values trimmed).
fn lengths(headers: &[(String, String)]) -> Vec<&str> {
    headers
        .iter()
        .filter(|(k, _)| k == "content-length")
        .map(|(_, v)| v.as_str())
        .collect()
}

/// A node whose answers repeat their length: by path, `Content-Length: 4, 4` (`/list`), two
/// `Content-Length: 4` lines (`/twice`), or a plain one (any other path); `HEAD /list` answers
/// `Content-Length: 7, 7` with no body. Reports each request head (lower case) and the body bytes
/// that came with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_length_given_as_a_list_or_twice_passes_once_in_both_directions() {
    let (addr, mut seen, _accepting) =
        reporting_node(16, |mut s, tx: tokio::sync::mpsc::Sender<(String, usize)>| async move {
            while let Some(h) = request_head(&mut s).await {
                let (got, _) = read_body(&mut s, h.early, h.declared).await;
                let head = h.head.clone();
                let answer: &[u8] = if head.starts_with("head /list ") {
                    b"HTTP/1.1 200 OK\r\nContent-Length: 7, 7\r\nX-A: 1\r\n\r\n"
                } else if head.starts_with("get /list ") {
                    b"HTTP/1.1 200 OK\r\nContent-Length: 4, 4\r\nX-A: 1\r\n\r\npong"
                } else if head.starts_with("get /twice ") {
                    b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\nX-A: 1\r\nContent-Length: 4\r\n\r\npong"
                } else {
                    b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nfine"
                };
                let _ = tx.send((head, got)).await;
                if s.write_all(answer).await.is_err() {
                    return;
                }
            }
        })
        .await;
    let gw = Gateway::start(
        &Config::single_addrs(Health::tcp_fast(), &[("node-a", addr)], Route::api()).toml(),
    )
    .await;
    let t = Duration::from_secs(5);
    let mut c = Raw::connect(gw.port).await;

    // Node to client: one line with the one value, the body framed by it, the connection kept.
    for path in ["/list", "/twice"] {
        c.send(format!("GET {path} HTTP/1.1\r\nHost: app.example.test\r\n\r\n").as_bytes())
            .await;
        let (r, body) = c.response(t).await;
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(lengths(&r.headers), ["4"], "{path}: one length line");
        assert_eq!(
            r.get("x-a"),
            Some("1"),
            "{path}: the node's other fields pass"
        );
        assert_eq!(body, b"pong", "{path}");
        assert_eq!(r.get("connection"), None, "{path}: connection kept");
        let (head, _) = seen.recv().await.expect("the node saw the request");
        assert!(head.starts_with(&format!("get {path} ")), "{head}");
    }
    // A HEAD answer keeps the length it announces, once.
    c.send(b"HEAD /list HTTP/1.1\r\nHost: app.example.test\r\n\r\n")
        .await;
    let r = c.head(t).await.expect("a HEAD answer");
    assert_eq!((r.status, lengths(&r.headers)), (200, vec!["7"]));
    seen.recv().await.expect("the node saw the HEAD");

    // Client to node: two lines of one value reach the node as one, with the body they frame.
    c.send(
        b"POST /upload HTTP/1.1\r\nHost: app.example.test\r\nContent-Length: 5\r\nX-B: 2\r\ncontent-length: 5\r\n\r\nhello",
    )
    .await;
    let (r, body) = c.response(t).await;
    assert_eq!((r.status, body.as_slice()), (200, &b"fine"[..]));
    let (head, got) = seen.recv().await.expect("the node saw the POST");
    assert_eq!(
        head.lines()
            .filter(|l| l.starts_with("content-length:"))
            .collect::<Vec<_>>(),
        ["content-length: 5"],
        "{head}"
    );
    assert!(head.contains("\r\nx-b: 2\r\n"), "{head}");
    assert_eq!(got, 5);

    // An HTTP/2 client gets the one value too.
    let mut h = integration_tests::h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let req = h.request("GET", "/list", &[], bytes::Bytes::new());
    let r = h.fetch(req).await.expect("h2 GET");
    assert_eq!(r.status, 200);
    let values: Vec<_> = r.headers.get_all("content-length").iter().collect();
    assert_eq!(values, ["4"]);
    assert_eq!(&r.body[..], b"pong");
}
