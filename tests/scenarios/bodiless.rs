//! CASE-27, bodiless responses (RFC 9110 sections 9.3.2, 15.3.5 and 15.4.5): answers to HEAD, and
//! 204 and 304 answers, end at their head whatever framing fields the node sent; nothing is
//! awaited, invented or leaked to the client, and both connections stay usable.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration_tests::nodes::hand_node;
use integration_tests::raw::Raw;
use integration_tests::{find, read_head, Config, Gateway, Health, Route};
use tokio::io::AsyncWriteExt;

/// A hand-made node for CASE-27: answers each request by its path with fixed bytes, framing
/// headers included whatever the status. Counts the connections that carried a request, and
/// notes a request arriving on a connection after its stray-byte 204 (it should have been closed).
async fn lying_node() -> (String, Arc<AtomicU64>, Arc<AtomicBool>) {
    let conns = Arc::new(AtomicU64::new(0));
    let reused = Arc::new(AtomicBool::new(false));
    let (counter, flag) = (conns.clone(), reused.clone());
    let serve = move |mut s: tokio::net::TcpStream| {
        let (counter, flag) = (counter.clone(), flag.clone());
        async move {
            let mut buf = Vec::new();
            let mut first = true;
            let mut stray_sent = false;
            while let Some(n) = read_head(&mut s, &mut buf).await {
                if first {
                    counter.fetch_add(1, Ordering::SeqCst);
                    first = false;
                }
                if stray_sent {
                    flag.store(true, Ordering::SeqCst);
                }
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                buf.drain(..n);
                let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                let answer: &[u8] = match path.as_str() {
                    "/files/report.pdf" => b"HTTP/1.1 200 OK\r\nContent-Type: application/pdf\r\nContent-Length: 1048576\r\n\r\n",
                    "/files/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                    "/v2/app/manifests/latest" => b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 157\r\nWWW-Authenticate: Bearer realm=\"http://auth.example.test/token\"\r\n\r\n",
                    "/style-cl.css" => b"HTTP/1.1 304 Not Modified\r\nETag: \"v7\"\r\nContent-Length: 5000\r\n\r\n",
                    "/style-te.css" => b"HTTP/1.1 304 Not Modified\r\nETag: \"v7\"\r\nTransfer-Encoding: chunked\r\n\r\n",
                    "/style.css" => b"HTTP/1.1 304 Not Modified\r\nETag: \"v7\"\r\n\r\n",
                    "/items/9" => {
                        stray_sent = true;
                        b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello"
                    }
                    _ => b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\npong",
                };
                if s.write_all(answer).await.is_err() {
                    return;
                }
            }
        }
    };
    let (addr, _accepting) = hand_node(serve).await;
    (addr, conns, reused)
}

/// CASE-27: HEAD, 204 and 304 responses end at their head whatever framing headers the node
/// sent: no body is awaited or forwarded, HEAD's Content-Length passes unchanged, no chunked
/// framing is invented, the client connection stays usable, and a 204 that carried stray bytes
/// never lets them reach a client.
/// Long on purpose: every case runs on one client connection, which must stay usable from one to
/// the next.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case27_bodiless_responses_with_framing_headers_end_at_their_head() {
    let (addr, conns, reused) = lying_node().await;
    let toml = Config::single_addrs(
        Health::tcp_200ms(),
        &[("node-a", addr)],
        Route::api().timeout("20s"),
    )
    .toml();
    let gw = Gateway::start(&toml).await;
    let mut c = Raw::connect(gw.port).await;
    let cases: [(&str, &str, u16, Option<&str>); 7] = [
        ("HEAD", "/files/report.pdf", 200, Some("1048576")),
        ("HEAD", "/files/chunked", 200, None),
        ("HEAD", "/v2/app/manifests/latest", 401, Some("157")),
        ("GET", "/style-cl.css", 304, None),
        ("GET", "/style-te.css", 304, None),
        ("GET", "/style.css", 304, None),
        ("DELETE", "/items/9", 204, None),
    ];
    for (method, path, status, length) in cases {
        let extra = if method == "GET" {
            "If-None-Match: \"v7\"\r\n"
        } else {
            ""
        };
        c.send(
            format!("{method} {path} HTTP/1.1\r\nHost: app.example.test\r\n{extra}\r\n").as_bytes(),
        )
        .await;
        let r = c
            .head(Duration::from_secs(5))
            .await
            .expect("a response head");
        assert_eq!(r.status, status, "{method} {path}");
        if let Some(len) = length {
            assert_eq!(
                r.get("content-length"),
                Some(len),
                "{method} {path}: length unchanged"
            );
        }
        if status == 204 {
            assert_eq!(
                r.get("content-length"),
                None,
                "204 carries no Content-Length"
            );
        }
        if status == 304 && path != "/style-cl.css" {
            assert_ne!(
                r.get("transfer-encoding"),
                Some("chunked"),
                "{path}: no chunked invented"
            );
        }
        if path == "/style.css" {
            assert_eq!(
                r.get("content-length"),
                None,
                "no Content-Length invented for a 304"
            );
        }
        assert_ne!(
            r.get("connection"),
            Some("close"),
            "{method} {path}: connection kept"
        );
        // The same client connection answers the next request at once: no body bytes came first.
        c.send(b"GET /ping HTTP/1.1\r\nHost: app.example.test\r\n\r\n")
            .await;
        let (r, body) = c.response(Duration::from_secs(5)).await;
        assert_eq!(
            (r.status, body.as_slice()),
            (200, &b"pong"[..]),
            "after {method} {path}"
        );
    }
    assert!(
        find(&c.buf, b"hello").is_none(),
        "stray 204 bytes reached the client"
    );
    // Every bodiless answer reused the upstream connection (the gateway found each message's
    // end); the 204 with stray bytes closed its connection instead of pooling it.
    assert!(
        !reused.load(Ordering::SeqCst),
        "a request followed the stray 204 bytes on one upstream connection"
    );
    assert_eq!(
        conns.load(Ordering::SeqCst),
        2,
        "one upstream connection before the stray 204, one after"
    );
    // f: an h2c client's HEAD gets one HEADERS frame with END_STREAM, no DATA.
    let mut h = integration_tests::h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let req = h.request("HEAD", "/files/report.pdf", &[], bytes::Bytes::new());
    let r = h.fetch(req).await.expect("h2 HEAD");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length").as_deref(), Some("1048576"));
    assert_eq!((r.data_frames, r.body.len()), (0, 0), "no DATA frame");
}
