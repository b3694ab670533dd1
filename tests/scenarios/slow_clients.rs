//! CASE-22, slow or silent clients (SPEC section 3 `[limits]`): a body that never comes, heads
//! trickled line by line and bodies trickled below the minimum rate are cut with 408 while other
//! clients keep being served; a steady slow upload passes; the node never gets the cut request
//! complete and its upstream connection is aborted.

use std::sync::atomic::Ordering;
use std::time::Duration;

use integration_tests::check::json_error;
use integration_tests::load::{pattern, prober, sha_hex};
use integration_tests::nodes::{read_body, reporting_node, request_head};
use integration_tests::raw::{body_of, read_while_writing, Raw};
use integration_tests::{Config, Gateway, Health, Mock, Route};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

/// `[limits]` lines short enough that the slow-client rules fire within a second or two.
const SHORT_LIMITS: &str = "header_read_timeout = \"1s\"\nbody_idle_timeout = \"1s\"\nbody_min_rate = 1024\nbody_rate_window = \"1s\"";

/// A gateway with [`SHORT_LIMITS`] and fast TCP probes over node `a`.
async fn short_limits_gateway(a: &Mock) -> Gateway {
    let config =
        Config::single(Health::tcp_fast(), &[a], Route::api()).table("limits", SHORT_LIMITS);
    Gateway::start(&config.toml()).await
}

/// CASE-22 (a, b): a body that never comes gets 408 at the idle timeout and 20 trickled heads are
/// closed within the header timeout, while normal GETs keep answering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case22_silent_body_and_trickled_heads_are_closed_while_gets_keep_answering() {
    let a = Mock::start("node-a").await;
    let gw = short_limits_gateway(&a).await;
    let (stop, probe) = prober(&gw);

    // (a) Content-Length: 10 and no body: 408 at the body idle timeout, connection closed.
    let mut c = Raw::connect(gw.port).await;
    let t0 = Instant::now();
    c.send(b"POST /echo/upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
        .await;
    let (h, body) = c.response(Duration::from_secs(5)).await;
    let silent_took = t0.elapsed();
    assert_eq!(h.status, 408);
    assert_eq!(json_error(&body), "request body idle for 1s");
    assert!(
        silent_took >= Duration::from_millis(900) && silent_took < Duration::from_millis(2500),
        "{silent_took:?}"
    );
    assert!(c.closed_within(Duration::from_secs(2)).await);
    assert_eq!(
        gw.metric("gateway_requests_total{route=\"api\",node=\"node-a\",code=\"408\"}")
            .await,
        1.0
    );

    // (b) Heads trickled one line every 300 ms, never finished, on 20 connections.
    let port = gw.port;
    let trickles = (0..20).map(|i| async move {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
        let t0 = Instant::now();
        s.write_all(b"GET /data HTTP/1.1\r\n").await.expect("write");
        let mut got = Vec::new();
        let mut line = 0;
        loop {
            let mut chunk = [0u8; 1024];
            tokio::select! {
                r = s.read(&mut chunk) => match r {
                    Ok(0) | Err(_) => return (t0.elapsed(), got),
                    Ok(n) => got.extend_from_slice(&chunk[..n]),
                },
                () = tokio::time::sleep(Duration::from_millis(300)) => {
                    line += 1;
                    assert!(t0.elapsed() < Duration::from_secs(5), "trickle {i} still open after 5 s");
                    let _ = s.write_all(format!("X-Slow-{line}: v\r\n").as_bytes()).await;
                }
            }
        }
    });
    let closed = futures_util::future::join_all(trickles).await;
    for (took, got) in &closed {
        assert!(
            *took >= Duration::from_millis(900) && *took < Duration::from_millis(2500),
            "trickled head closed after {took:?}"
        );
        assert!(
            got.is_empty() || got.starts_with(b"HTTP/1.1 408"),
            "{:?}",
            String::from_utf8_lossy(got)
        );
    }
    stop.store(true, Ordering::Relaxed);
    let (n, bad, slowest) = probe.await.expect("prober");
    assert!(bad.is_empty(), "normal GETs failed meanwhile: {bad:?}");
    assert!(
        n >= 10 && slowest < Duration::from_secs(1),
        "{n} GETs, slowest {slowest:?}"
    );
    let latest = closed.iter().map(|(t, _)| *t).max().expect("20");
    eprintln!("FIGURE case22 silent body 408 after {silent_took:?}; 20 trickled heads closed by {latest:?}; {n} normal GETs, slowest {slowest:?}");
}

/// Announces a 1,000,000-byte body to `path` and trickles one byte every 200 ms (CASE-22 (c));
/// returns what the gateway sent before it closed the connection (within 8 s) and how long after
/// the connect that was.
async fn trickled_upload(gw: &Gateway, path: &str) -> (Vec<u8>, Duration) {
    let head = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n");
    read_while_writing(gw.port, Duration::from_secs(8), |mut wr| async move {
        if wr.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        for _ in 0..50 {
            if wr.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
}

/// CASE-22 (c, d): a body trickled below the minimum rate is cut with 408; a steady 200 KiB/s
/// upload passes whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case22_trickled_body_is_cut_by_the_minimum_rate_and_a_steady_upload_passes() {
    let a = Mock::start("node-a").await;
    let gw = short_limits_gateway(&a).await;
    let (stop, probe) = prober(&gw);

    // (c) 1,000,000 bytes announced, one byte every 200 ms: never idle for 1 s, but far below 1 KiB/s.
    let (raw, cut_after) = trickled_upload(&gw, "/echo/upload").await;
    let text = String::from_utf8_lossy(&raw).to_string();
    assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
    let msg = json_error(body_of(&raw));
    assert!(
        msg.starts_with("request body slower than 1024 bytes/s"),
        "{msg}"
    );
    assert!(
        cut_after >= Duration::from_millis(1500) && cut_after < Duration::from_secs(4),
        "cut after {cut_after:?}"
    );

    // (d) A steady 200 KiB/s upload (600 KiB over 3 s) passes: the rules are idle and rate based.
    let body = pattern(600 * 1024, 22);
    let mut c = Raw::connect(gw.port).await;
    let t0 = Instant::now();
    c.send(
        format!(
            "POST /echo/steady HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await;
    for (i, chunk) in body.chunks(20 * 1024).enumerate() {
        tokio::time::sleep_until(t0 + Duration::from_millis(100 * i as u64)).await;
        c.send(chunk).await;
    }
    let (h, resp) = c.response(Duration::from_secs(5)).await;
    assert_eq!(h.status, 200, "{}", String::from_utf8_lossy(&resp));
    let echo: serde_json::Value = serde_json::from_slice(&resp).expect("echo");
    assert_eq!(echo["body_len"], body.len() as u64);
    assert_eq!(echo["body_sha256"], sha_hex(&body));
    let steady_took = t0.elapsed();

    stop.store(true, Ordering::Relaxed);
    let (n, bad, slowest) = probe.await.expect("prober");
    assert!(bad.is_empty(), "normal GETs failed meanwhile: {bad:?}");
    assert!(slowest < Duration::from_secs(1), "slowest GET {slowest:?}");
    eprintln!("FIGURE case22 trickled body cut after {cut_after:?}; steady 600 KiB upload {steady_took:?}; {n} normal GETs, slowest {slowest:?}");
}

/// A hand-made node that reads one request head and then its body until the connection ends;
/// reports (declared Content-Length, body bytes received, when the connection ended) and never
/// answers, so only the gateway can end the upstream request.
async fn body_watching_node() -> (
    String,
    mpsc::Receiver<(usize, usize, Instant)>,
    JoinHandle<()>,
) {
    reporting_node(8, move |mut s, tx| async move {
        let Some(req) = request_head(&mut s).await else {
            return; // a TCP probe, or the gateway gave up
        };
        let declared = req.declared;
        let (got, _) = read_body(&mut s, req.early, usize::MAX).await;
        let _ = tx.send((declared, got, Instant::now())).await;
    })
    .await
}

/// CASE-22 (a) and (c), node side: a body that never comes (`Content-Length: 10`, nothing sent)
/// and a body trickled far below the minimum rate both end with 408 to the client, and the node
/// never gets a complete request: its upstream connection is closed with the body short, within
/// about a second of the 408.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case22_silent_and_trickled_bodies_never_complete_at_the_node_and_upstream_is_aborted() {
    let (addr, mut reports, node) = body_watching_node().await;
    let gw = Gateway::start(
        &Config::single_addrs(Health::tcp_fast(), &[("node-w", addr)], Route::api())
            .table("limits", SHORT_LIMITS)
            .toml(),
    )
    .await;

    // (a) Content-Length: 10 and no body.
    let mut c = Raw::connect(gw.port).await;
    c.send(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n")
        .await;
    let (h, _) = c.response(Duration::from_secs(5)).await;
    let answered = Instant::now();
    assert_eq!(h.status, 408);
    let (declared, got, ended) = timeout(Duration::from_secs(3), reports.recv())
        .await
        .expect("the node's connection ended")
        .expect("report");
    assert_eq!((declared, got), (10, 0), "the node got a complete request");
    let lag = ended.saturating_duration_since(answered);
    assert!(
        lag < Duration::from_secs(1),
        "upstream closed {lag:?} after the 408"
    );

    // (c) 1,000,000 bytes announced, one byte every 200 ms.
    let (raw, _) = trickled_upload(&gw, "/upload").await;
    let answered = Instant::now();
    assert!(
        raw.starts_with(b"HTTP/1.1 408 "),
        "{}",
        String::from_utf8_lossy(&raw)
    );
    let (declared, got, ended) = timeout(Duration::from_secs(3), reports.recv())
        .await
        .expect("the node's connection ended")
        .expect("report");
    assert_eq!(declared, 1_000_000);
    assert!(got < 100, "the node got {got} of the trickled bytes");
    let lag = ended.saturating_duration_since(answered);
    assert!(
        lag < Duration::from_secs(1),
        "upstream closed {lag:?} after the 408"
    );
    node.abort();
}
