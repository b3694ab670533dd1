//! CASE-24, responses stream as the node writes them (SPEC section 4): a chunked NDJSON response
//! that runs on past the route timeout reaches the client line by line, with no Content-Length
//! or encoding added, and the client leaving closes the upstream connection.

use std::time::Duration;

use http_body_util::BodyExt;
use integration_tests::load::{h1_get, unix_us};
use integration_tests::nodes::reporting_node;
use integration_tests::{read_head, Config, Gateway, Health, Route};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

/// A hand-made node writing one NDJSON line (`{"seq":N,"sent_us":T}`) every 100 ms, chunked,
/// for as long as the connection lasts. Reports when each connection it answered ended.
async fn ndjson_node() -> (String, mpsc::Receiver<Instant>, JoinHandle<()>) {
    reporting_node(4, move |mut s, closed_tx| async move {
        let mut buf = Vec::new();
        if read_head(&mut s, &mut buf).await.is_none() {
            return; // a TCP probe
        }
        let head = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n";
        if s.write_all(head).await.is_err() {
            return;
        }
        let (mut rd, mut wr) = s.into_split();
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.tick().await;
        let mut seq = 0u64;
        loop {
            let mut chunk = [0u8; 64];
            tokio::select! {
                r = rd.read(&mut chunk) => if matches!(r, Ok(0) | Err(_)) {
                    let _ = closed_tx.send(Instant::now()).await;
                    return;
                },
                _ = tick.tick() => {
                    seq += 1;
                    let line = format!("{{\"seq\":{seq},\"sent_us\":{}}}\n", unix_us());
                    let frame = format!("{:x}\r\n{line}\r\n", line.len());
                    if wr.write_all(frame.as_bytes()).await.is_err() {
                        let _ = closed_tx.send(Instant::now()).await;
                        return;
                    }
                }
            }
        }
    })
    .await
}

/// CASE-24 (chunked NDJSON): a node writing one JSON line every 100 ms, on and on past the 1 s
/// route timeout, reaches the client line by line, each within 100 ms of the node writing it,
/// chunked with no Content-Length added; when the client leaves, the node's connection is closed
/// within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case24_chunked_ndjson_flows_line_by_line_and_client_exit_closes_upstream() {
    let (addr, mut closed_rx, node) = ndjson_node().await;
    let gw = Gateway::start(
        &Config::single_addrs(
            Health::tcp_fast(),
            &[("node-n", addr)],
            Route::api().timeout("1s"),
        )
        .toml(),
    )
    .await;
    let headers = [
        ("host", "app.example.test"),
        ("accept-encoding", "gzip, br"),
    ];
    let (send, resp) = h1_get(gw.port, "/stream.ndjson", &headers).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers().get("content-length"), None);
    assert_eq!(resp.headers().get("content-encoding"), None);
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/x-ndjson")
    );
    let mut body = resp.into_body();
    let (mut pending, mut seen, mut worst_us) = (String::new(), 0u64, 0u64);
    let t0 = Instant::now();
    while seen < 15 {
        let frame = timeout(Duration::from_secs(2), body.frame())
            .await
            .expect("a line within 2 s")
            .expect("stream not ended")
            .expect("frame");
        let Some(d) = frame.data_ref() else { continue };
        let now = unix_us();
        pending.push_str(std::str::from_utf8(d).expect("utf8"));
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            let v: serde_json::Value = serde_json::from_str(line.trim()).expect("JSON line");
            seen += 1;
            assert_eq!(v["seq"], seen, "{line}");
            let late = now.saturating_sub(v["sent_us"].as_u64().expect("sent_us"));
            worst_us = worst_us.max(late);
            assert!(
                late < 100_000,
                "line {seen} arrived {late} us after the node wrote it"
            );
        }
    }
    assert!(
        t0.elapsed() > Duration::from_millis(1200),
        "past the 1 s route timeout"
    );
    // The client leaves: the node sees its connection closed within 1 s.
    let left = Instant::now();
    drop(body);
    drop(send);
    let closed_at = timeout(Duration::from_secs(2), closed_rx.recv())
        .await
        .expect("the node's connection closed")
        .expect("report");
    let took = closed_at.saturating_duration_since(left);
    assert!(
        took < Duration::from_secs(1),
        "upstream closed {took:?} after the client left"
    );
    node.abort();
    eprintln!("FIGURE case24 NDJSON: 15 lines, worst delay {worst_us} us; upstream closed {took:?} after the client left");
}
