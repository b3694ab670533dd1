//! Request framing the gateway judges before any node sees it (RFC 9112 sections 6 and 5, SPEC
//! section 4): Content-Length with Transfer-Encoding, repeated or odd framing fields, obs-fold,
//! colon-less lines and heads hyper would refuse by itself all get the gateway's JSON 400 and a
//! closed connection; a tab after `chunked` is plain chunked.
//!
//! Cases write exact bytes over a raw TCP socket. "Nothing forwarded" is the node's own request
//! count: these gateways probe by TCP connect, which the mock does not count.

use std::time::Duration;

use integration_tests::check::{echo_header, json_error};
use integration_tests::load::sha_hex;
use integration_tests::raw::{read_while_writing, refused, Raw};
use integration_tests::{Gateway, Health};

/// CASE-13: Content-Length with Transfer-Encoding and every framing variant is a JSON 400, nothing
/// forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case13_cl_with_te_is_400_and_nothing_forwarded() {
    let (a, gw) = Gateway::one_node(Health::tcp_fast()).await;
    let smuggle = "0\r\n\r\nGET /admin HTTP/1.1\r\nHost: x\r\nX-Pad: aaaaaaa\r\n\r\n";
    // (wire, status, gateway's JSON body expected)
    let cases: Vec<(String, u16, bool)> = vec![
        (format!("POST /echo/submit HTTP/1.1\r\nHost: x\r\nContent-Length: 52\r\nTransfer-Encoding: chunked\r\n\r\n{smuggle}"), 400, true),
        (
            "POST /echo/submit HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n42\r\nGET /admin HTTP/1.1\r\nHost: x\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n0\r\n\r\n".to_string(),
            400,
            true,
        ),
        (format!("POST /echo/submit HTTP/1.1\r\nHost: x\r\nContent-Length: 52\r\nTransfer-Encoding: chunked\t\r\n\r\n{smuggle}"), 400, true),
        (format!("POST /echo/submit HTTP/1.1\r\nHost: x\r\nContent-Length: 52\r\nTransfer-Encoding: chunked, chunked\r\n\r\n{smuggle}"), 400, true),
        (format!("POST /echo/submit HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n{smuggle}"), 400, true),
        (format!("POST /echo/submit HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n{smuggle}"), 400, true),
        // hyper's parser would refuse these by itself; the gateway judges the head first and
        // answers with its JSON body (SPEC section 4).
        (format!("POST /echo/submit HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n{smuggle}"), 400, true),
        (format!("POST /echo/submit HTTP/1.1\r\nHost: x\r\nContent-Length: 52\r\nTransfer-Encoding: xchunked\r\n\r\n{smuggle}"), 400, true),
        ("POST /echo/submit HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!".to_string(), 400, true),
        ("POST /echo/submit HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\nhello".to_string(), 400, true),
        ("POST /echo/submit HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello".to_string(), 400, true),
    ];
    for (wire, status, ours) in &cases {
        let (h, body) = refused(gw.port, wire.as_bytes()).await;
        assert_eq!(h.status, *status, "{wire:?}");
        if *ours {
            let msg = json_error(&body);
            assert!(msg.starts_with("bad request: "), "{msg}");
        } else {
            assert!(
                body.is_empty(),
                "hyper's own answer has no body: {:?}",
                String::from_utf8_lossy(&body)
            );
        }
    }
    assert_eq!(a.requests().await, 0, "no node saw any request");
    assert_eq!(
        gw.metric("gateway_requests_total{route=\"-\",node=\"-\",code=\"400\"}")
            .await,
        11.0
    );
}

/// A tab after `chunked` is optional whitespace (RFC 9110 section 5.5), which hyper's parser trims:
/// the request is plainly chunked. It is forwarded with framing the gateway computed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case13_tab_after_chunked_is_plain_chunked_and_reframed() {
    let (a, gw) = Gateway::one_node(Health::tcp_fast()).await;
    let mut c = Raw::connect(gw.port).await;
    c.send(b"POST /echo/submit HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\t\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /echo/second HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let (h, body) = c.response(Duration::from_secs(5)).await;
    assert_eq!(h.status, 200);
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo");
    assert_eq!(echo["body_len"], 5);
    assert_eq!(echo["body_sha256"], sha_hex(b"hello"));
    assert_eq!(echo_header(&echo, "transfer-encoding"), ["chunked"]);
    assert_eq!(echo_header(&echo, "content-length"), Vec::<String>::new());
    // The pipelined request after it is an ordinary second request.
    let (h, body) = c.response(Duration::from_secs(5)).await;
    assert_eq!(h.status, 200);
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo");
    assert_eq!(echo["path"], "/echo/second");
    assert_eq!(a.requests().await, 2);
}

/// CASE-14: obs-fold and colon-less field lines are a JSON 400, nothing forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case14_obs_fold_and_colonless_lines_are_400_and_nothing_forwarded() {
    let (a, gw) = Gateway::one_node(Health::tcp_fast()).await;
    let cases = [
        "POST /echo/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n 6\r\n\r\nhello!",
        "POST /echo/upload HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n 6\r\n\r\nhello!",
        "POST /echo/upload HTTP/1.1\r\nHost: x\r\nContent-Length:\r\n\t6\r\n\r\nhello!",
        "POST /echo/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n6\r\n\r\nhello!",
        "POST /echo/upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "POST /echo/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nX-Note: a\r\n b\r\n\r\nhello",
        "GET /echo/upload HTTP/1.1\r\nHost: x\r\nX-Broken-Line\r\n\r\n",
    ];
    for wire in cases {
        let (h, body) = refused(gw.port, wire.as_bytes()).await;
        assert_eq!(h.status, 400, "{wire:?}");
        let msg = json_error(&body);
        assert!(msg.starts_with("bad request: "), "{wire:?}: {msg}");
    }
    assert_eq!(a.requests().await, 0, "no node saw any request");
}

/// Heads hyper refuses by itself: each refused form gets the gateway's JSON
/// answer with its exact message, the connection closes, and nothing reaches the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_heads_get_json_answers_and_reach_no_node() {
    let (a, gw) = Gateway::one_node(Health::tcp_200ms()).await;
    let long = format!(
        "GET /echo?q={} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(70_000)
    );
    // Three control characters in field values, all with one message; then one case a line.
    let control: [&[u8]; 3] = [
        b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Conn-Id: a\x01b\r\n\r\n",
        b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Conn-Id: a\x7fb\r\n\r\n",
        b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Note: a\rb\r\n\r\n",
    ];
    let mut cases: Vec<(Vec<u8>, u16, &str)> = control
        .iter()
        .map(|w| {
            (
                w.to_vec(),
                400,
                "bad request: control character in a field value",
            )
        })
        .collect();
    cases.extend([
        (b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Note: a\r\n b\r\n\r\n".to_vec(), 400, "bad request: obs-fold: a field line starts with whitespace"),
        (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n".to_vec(), 400, "bad request: invalid Content-Length"),
        (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!".to_vec(), 400, "bad request: conflicting Content-Length values"),
        (b"GET /echo HTTP/1.1\r\nHost: x\r\nNo-Colon-Here\r\n\r\n".to_vec(), 400, "bad request: field line without a colon"),
        (b"GET /echo HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n".to_vec(), 400, "bad request: invalid field name"),
        (b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec(), 400, "bad request: Transfer-Encoding other than a single \"chunked\""),
        (b"POST /echo HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(), 400, "bad request: Transfer-Encoding in an HTTP/1.0 request"),
        (b"GET /echo HTTP/1.7\r\nHost: x\r\n\r\n".to_vec(), 400, "bad request: unsupported HTTP version in the request line"),
        (b"G@T /echo HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), 400, "bad request: invalid method in the request line"),
        (long.into_bytes(), 414, "request line longer than 16384 bytes"),
    ]);
    for (wire, status, message) in &cases {
        let mut c = Raw::connect(gw.port).await;
        c.send(wire).await;
        let (h, body) = c.response(Duration::from_secs(5)).await;
        let shown = String::from_utf8_lossy(&wire[..wire.len().min(80)]).into_owned();
        assert_eq!(h.status, *status, "{shown:?}");
        assert_eq!(json_error(&body), *message, "{shown:?}");
        // Answered in the version the request line named.
        let version = match shown.contains(" HTTP/1.0\r\n") {
            true => "HTTP/1.0",
            false => "HTTP/1.1",
        };
        assert_eq!(h.version, version, "{shown:?}");
        assert_eq!(h.get("connection"), Some("close"), "{shown:?}");
        assert!(
            c.closed_within(Duration::from_secs(2)).await,
            "connection left open: {shown:?}"
        );
    }
    assert_eq!(a.requests().await, 0, "no node saw any request");
}

/// A refused head is answered as its request line asked: an HTTP/1.0 request line gets an
/// HTTP/1.0 status line (RFC 9110 section 6.2), and a refused `HEAD` gets the head of the JSON
/// answer without its body (RFC 9110 section 9.3.2); nothing reaches the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_heads_answer_in_the_request_lines_version_and_head_gets_no_body() {
    let (a, gw) = Gateway::one_node(Health::tcp_200ms()).await;
    let (h, body) = refused(gw.port, b"GET /echo HTTP/1.0\r\nBad Name: 1\r\n\r\n").await;
    assert_eq!((h.status, h.version.as_str()), (400, "HTTP/1.0"));
    assert_eq!(json_error(&body), "bad request: invalid field name");

    for version in ["HTTP/1.1", "HTTP/1.0"] {
        let wire = format!("HEAD /echo {version}\r\nHost: x\r\nBad Name: 1\r\n\r\n");
        let (raw, _) = read_while_writing(gw.port, Duration::from_secs(5), |mut wr| async move {
            let _ = tokio::io::AsyncWriteExt::write_all(&mut wr, wire.as_bytes()).await;
            std::future::pending::<()>().await;
        })
        .await;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let end = text.find("\r\n\r\n").expect("a whole head") + 4;
        assert!(text.starts_with(&format!("{version} 400 ")), "{text:?}");
        assert_eq!(end, raw.len(), "no body after the head: {text:?}");
        let length: usize = text
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(str::to_string)
            })
            .and_then(|v| v.trim().parse().ok())
            .expect("the JSON answer's length");
        assert!(length > 0, "{text:?}");
    }
    assert_eq!(a.requests().await, 0, "no node saw any request");
}
