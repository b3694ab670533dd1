//! CASE-15, `Expect: 100-continue` (RFC 9110 section 10.1.1): a node's early final answer reaches
//! the client with no 100 before it and no body moved; a node's own 100 is relayed once; for a
//! node that ignores Expect the gateway sends its own 100 after 1 s.

use std::time::Duration;

use integration_tests::check::echo_header;
use integration_tests::load::{pattern, sha_hex};
use integration_tests::nodes::{read_body, reporting_node, request_head};
use integration_tests::raw::Raw;
use integration_tests::{Config, Gateway, Health, Route};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

/// CASE-15: a node answering 401 (bad bearer token) or 413 at once to `Expect: 100-continue` with
/// a 100 MiB Content-Length: the client gets that answer promptly, no 100 before it, no reset, and
/// the body is never pulled upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case15_early_401_reaches_the_client_without_100_and_no_body_moves() {
    let (a, gw) = Gateway::one_node(Health::tcp_fast()).await;
    let mut took_max = Duration::ZERO;
    for status in [401u16, 413] {
        let mut c = Raw::connect(gw.port).await;
        let t0 = Instant::now();
        // The client would wait up to 3 s before sending the 100 MiB; the node refuses at once.
        c.send(format!("PUT /status/{status} HTTP/1.1\r\nHost: x\r\nContent-Length: 104857600\r\nExpect: 100-continue\r\nAuthorization: Bearer bad\r\n\r\n").as_bytes()).await;
        let (h, body) = c.response(Duration::from_secs(3)).await;
        let took = t0.elapsed();
        took_max = took_max.max(took);
        assert_eq!(h.status, status, "the node's answer, with no 100 before it");
        let j: serde_json::Value = serde_json::from_slice(&body).expect("node JSON");
        assert_eq!(j["node"], "node-a");
        assert!(took < Duration::from_millis(500), "{status} took {took:?}");
        // The unsent body cannot be read as a next request: the gateway ends the connection, cleanly.
        assert!(
            c.fin_within(Duration::from_secs(2)).await,
            "a clean close (FIN, no reset) after the {status}"
        );
    }
    assert_eq!(a.requests().await, 2);
    eprintln!("FIGURE case15 early 401/413 after at most {took_max:?}");
}

/// Sends `PUT path` with `Content-Length: len` and `Expect: 100-continue` (no body yet) on a new
/// connection to `port`; asserts the first answer within 3 s is a 100 and returns the connection
/// and how long after the send the 100 came.
async fn interim_100(port: u16, path: &str, len: usize) -> (Raw, Duration) {
    let mut c = Raw::connect(port).await;
    let t0 = Instant::now();
    c.send(format!("PUT {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len}\r\nExpect: 100-continue\r\n\r\n").as_bytes()).await;
    let h = c
        .head(Duration::from_secs(3))
        .await
        .expect("interim answer");
    let took = t0.elapsed();
    assert_eq!(h.status, 100);
    (c, took)
}

/// CASE-15: a node's own 100 Continue is relayed once, promptly, then its final status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case15_node_100_is_relayed_once_then_the_final_status() {
    let (_a, gw) = Gateway::one_node(Health::tcp_fast()).await;
    let body = pattern(4 * 1024 * 1024, 15);
    let (mut c, took) = interim_100(gw.port, "/echo/bucket/big.bin", body.len()).await;
    // Well before the gateway's own 1 s: this 100 is the node's, relayed.
    assert!(took < Duration::from_millis(500), "100 after {took:?}");
    c.send(&body).await;
    let (h, resp) = c.response(Duration::from_secs(10)).await;
    assert_eq!(h.status, 200, "exactly one 100, then the final status");
    let echo: serde_json::Value = serde_json::from_slice(&resp).expect("echo");
    assert_eq!(echo["body_len"], body.len() as u64);
    assert_eq!(echo["body_sha256"], sha_hex(&body));
    assert_eq!(echo["version"], "HTTP/1.1");
    assert_eq!(echo_header(&echo, "expect"), ["100-continue"]);
    eprintln!("FIGURE case15 node 100 relayed after {took:?}");
}

/// A hand-made node that never sends 100 Continue: it reads the head and waits for the body.
/// Reports (had Expect, body bytes, ms from head to first body byte) per request.
async fn silent_expect_node() -> (String, mpsc::Receiver<(bool, usize, u128)>, JoinHandle<()>) {
    reporting_node(8, move |mut s, tx| async move {
        let Some(req) = request_head(&mut s).await else {
            return; // a TCP probe, or the gateway gave up
        };
        let expect = req.head.contains("\r\nexpect: 100-continue\r\n");
        let len = req.declared;
        let head_at = Instant::now();
        let early: Option<Instant> = (req.early > 0).then(Instant::now);
        let (got, read_at) = read_body(&mut s, req.early, len).await;
        let first = early.or(read_at);
        let _ = s
            .write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
            .await;
        let wait = first.map_or(u128::MAX, |f| f.duration_since(head_at).as_millis());
        let _ = tx.send((expect, got, wait)).await;
    })
    .await
}

/// CASE-15: for a node that ignores Expect the gateway sends its own 100 after about 1 s, and the
/// body follows to the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case15_node_ignoring_expect_gets_the_body_after_the_gateways_own_100_within_1s() {
    let (addr, mut reports, node) = silent_expect_node().await;
    let gw = Gateway::start(
        &Config::single_addrs(Health::tcp_fast(), &[("node-z", addr)], Route::api()).toml(),
    )
    .await;
    let body = pattern(256 * 1024, 16);
    let (mut c, took) = interim_100(gw.port, "/bucket/big.bin", body.len()).await;
    assert!(
        took >= Duration::from_millis(900) && took <= Duration::from_millis(1300),
        "gateway's own 100 after {took:?}"
    );
    c.send(&body).await;
    let (h, resp) = c.response(Duration::from_secs(5)).await;
    assert_eq!((h.status, resp.as_slice()), (201, &b"ok"[..]));
    let (expect, got, wait_ms) = timeout(Duration::from_secs(2), reports.recv())
        .await
        .expect("node report")
        .expect("report");
    assert!(expect, "the node received Expect: 100-continue");
    assert_eq!(got, body.len());
    assert!(
        (900..=1500).contains(&wait_ms),
        "body reached the node {wait_ms} ms after the head"
    );
    node.abort();
    eprintln!("FIGURE case15 gateway's own 100 after {took:?}");
}
