//! Core data-plane scenarios (the project's core issue): affinity and balancing, hops on a killed
//! node, health ejection and recovery, `on_all_down`, header rewriting, streaming memory bounds,
//! stale pooled connections, conn id validation, `--check-config`, admin basics and retries.
//!
//! Every test starts real `mock-backend` and `hopping-gateway` processes on ephemeral ports.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use integration_tests::{
    cluster_toml, find, get, read_head, request, wait_until, Gateway, Mock, FAST_HEALTH,
};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

const HDR: &str = "X-Conn-Id";
/// The SPEC's default fallback body.
const DEFAULT_FALLBACK: &str = r#"{"code":-1,"message":"service temporarily unavailable"}"#;
/// Probe interval of [`FAST_HEALTH`].
const PROBE_INTERVAL: Duration = Duration::from_millis(200);

// ---------------------------------------------------------------------------------------------
// helpers

/// A gateway config: `top` (extra tables before `[health]`), FAST_HEALTH unless `health` is given,
/// one cluster `c` over `nodes`, and one route `api` for `/` with `route` lines appended.
fn config(top: &str, health: Option<&str>, nodes: &[&Mock], route: &str) -> String {
    let nodes: Vec<(&str, String)> = nodes.iter().map(|m| (m.id.as_str(), m.addr())).collect();
    format!(
        "{top}\n{}\n{}\n[[routes]]\nid = \"api\"\ncluster = \"c\"\n{route}\n",
        health.unwrap_or(FAST_HEALTH),
        cluster_toml("c", &nodes, "")
    )
}

/// Health settings that never move a node within a test: it stays "healthy" after being killed.
fn slow_health() -> &'static str {
    "[health]\ninterval = \"60s\"\ntimeout = \"1s\"\nslow_start = \"0s\"\n"
}

fn node_of(r: &integration_tests::Resp) -> String {
    r.header("x-node-id")
        .unwrap_or_else(|| panic!("no x-node-id on {} {}", r.status, r.text()))
}

/// Sum of every `hopping_count_total{...}` series.
async fn hops_total(gw: &Gateway) -> f64 {
    let text = get(&gw.admin("/metrics"), &[])
        .await
        .expect("metrics")
        .text();
    text.lines()
        .filter(|l| l.starts_with("hopping_count_total{"))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// The paths a mock saw since its last reset, excluding `/health` probes. Asserts the mock's
/// bounded path list is complete (so nothing was missed).
async fn non_probe_paths(m: &Mock) -> Vec<String> {
    let stats = get(&format!("{}/control/stats", m.url()), &[])
        .await
        .expect("stats")
        .json();
    let paths: Vec<String> = stats["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .map(|p| p.as_str().expect("str").to_string())
        .collect();
    assert_eq!(
        stats["requests"].as_u64().expect("requests"),
        paths.len() as u64,
        "stats path list truncated: {stats}"
    );
    paths.into_iter().filter(|p| p != "/health").collect()
}

/// A header from the mock's `/echo` JSON: every value of `name`, in order.
fn echo_header(echo: &serde_json::Value, name: &str) -> Vec<String> {
    echo["headers"]
        .as_array()
        .expect("headers array")
        .iter()
        .filter(|p| p[0] == name)
        .map(|p| p[1].as_str().expect("value").to_string())
        .collect()
}

/// A response read off a raw TCP exchange.
#[derive(Debug)]
struct RawResp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl RawResp {
    fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&self.body)))
    }
}

async fn fill(s: &mut TcpStream, buf: &mut Vec<u8>, need: usize) {
    while buf.len() < need {
        let mut chunk = [0u8; 8192];
        let n = s.read(&mut chunk).await.expect("read");
        assert!(
            n > 0,
            "connection closed after {} of {need} bytes: {:?}",
            buf.len(),
            String::from_utf8_lossy(buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Writes `req` as is to `port` and reads one response (Content-Length, chunked, or until EOF).
async fn raw_exchange(port: u16, req: &[u8]) -> RawResp {
    let fut = async {
        let mut s = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        s.write_all(req).await.expect("write");
        let mut buf = Vec::new();
        let head_end = loop {
            if let Some(p) = find(&buf, b"\r\n\r\n") {
                break p + 4;
            }
            let need = buf.len() + 1;
            fill(&mut s, &mut buf, need).await;
        };
        let head = String::from_utf8(buf[..head_end].to_vec()).expect("ascii head");
        let mut lines = head.split("\r\n");
        let status: u16 = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|c| c.parse().ok())
            .expect("status line");
        let headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (k, v) = l.split_once(':').expect("header line");
                (k.trim().to_ascii_lowercase(), v.trim().to_string())
            })
            .collect();
        let hv = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let mut rest = buf[head_end..].to_vec();
        let body = if let Some(cl) = hv("content-length") {
            let cl: usize = cl.parse().expect("content-length");
            fill(&mut s, &mut rest, cl).await;
            rest.truncate(cl);
            rest
        } else if hv("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            let mut body = Vec::new();
            let mut pos = 0;
            loop {
                let line_end = loop {
                    if let Some(p) = find(&rest[pos..], b"\r\n") {
                        break pos + p;
                    }
                    let need = rest.len() + 1;
                    fill(&mut s, &mut rest, need).await;
                };
                let size_str = String::from_utf8_lossy(&rest[pos..line_end]).to_string();
                let size =
                    usize::from_str_radix(size_str.split(';').next().expect("size").trim(), 16)
                        .expect("chunk size");
                pos = line_end + 2;
                fill(&mut s, &mut rest, pos + size + 2).await;
                body.extend_from_slice(&rest[pos..pos + size]);
                pos += size + 2;
                if size == 0 {
                    break body;
                }
            }
        } else {
            s.read_to_end(&mut rest).await.expect("read to end");
            rest
        };
        RawResp {
            status,
            headers,
            body,
        }
    };
    tokio::time::timeout(Duration::from_secs(10), fut)
        .await
        .expect("raw exchange within 10 s")
}

/// An HTTP/1.1 connection opened with hyper's low-level client, for streaming bodies.
async fn h1_conn<B>(port: u16) -> hyper::client::conn::http1::SendRequest<B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    send
}

fn rss_kib_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// Samples the RSS of `pid` every 10 ms until stopped; returns the maximum seen (KiB).
fn rss_sampler(pid: u32) -> (Arc<AtomicBool>, tokio::task::JoinHandle<u64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let task = tokio::spawn(async move {
        let mut max = 0;
        while !flag.load(Ordering::Relaxed) {
            max = max.max(rss_kib_of(pid));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        max.max(rss_kib_of(pid))
    });
    (stop, task)
}

// ---------------------------------------------------------------------------------------------
// 1. affinity and balancing

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conn_id_pins_one_node_and_plain_requests_spread() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config("", None, &[&a, &b], "")).await;

    let mut seen: HashMap<String, u32> = HashMap::new();
    for _ in 0..50 {
        let r = get(&gw.url("/data"), &[(HDR, "sticky-1")])
            .await
            .expect("get");
        assert_eq!(r.status, 200, "{}", r.text());
        let node = node_of(&r);
        assert_eq!(
            r.text(),
            format!(
                "Data from Node {node} (Port {})",
                if node == "node-a" { a.port } else { b.port }
            )
        );
        *seen.entry(node).or_default() += 1;
    }
    assert_eq!(seen.len(), 1, "one conn id must stay on one node: {seen:?}");
    let bound = seen.keys().next().expect("one").clone();
    assert_eq!(
        gw.admin_json("/admin/conns/sticky-1").await["node"],
        bound.as_str()
    );

    let mut spread: HashMap<String, u32> = HashMap::new();
    for _ in 0..200 {
        let r = get(&gw.url("/data"), &[]).await.expect("get");
        assert_eq!(r.status, 200);
        *spread.entry(node_of(&r)).or_default() += 1;
    }
    for id in ["node-a", "node-b"] {
        let n = spread.get(id).copied().unwrap_or(0);
        assert!(
            n >= 60,
            "{id} got {n} of 200 plain requests (want >= 30 %): {spread:?}"
        );
    }
    // Plain requests are balanced, not bound: the id's binding is untouched.
    assert_eq!(
        gw.admin_json("/admin/conns/sticky-1").await["node"],
        bound.as_str()
    );
}

// ---------------------------------------------------------------------------------------------
// 2. hop on a killed node

/// CASE-17: a bound node killed (connections refused) moves its conn id to a healthy node without a
/// failed request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_node_hops_conn_id_and_loses_no_request() {
    let mut mocks = [Mock::start("node-a").await, Mock::start("node-b").await];
    let gw = Gateway::start(&config("", None, &[&mocks[0], &mocks[1]], "retries = 2")).await;

    let first = get(&gw.url("/data"), &[(HDR, "hop-1")]).await.expect("get");
    assert_eq!(first.status, 200);
    let old = node_of(&first);
    let (victim, other) = if old == "node-a" {
        (0, "node-b")
    } else {
        (1, "node-a")
    };
    let hops_before = hops_total(&gw).await;

    // A loop of plain GETs running through the kill: with retries none may fail.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let loop_task = {
        let (stop, done, url) = (stop.clone(), done.clone(), gw.url("/data"));
        tokio::spawn(async move {
            let (mut ok, mut failures) = (0u32, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                done.fetch_add(1, Ordering::Relaxed);
                match get(&url, &[]).await {
                    Ok(r) if r.status == 200 => ok += 1,
                    Ok(r) => failures.push(format!("{} {}", r.status, r.text())),
                    Err(e) => failures.push(e.to_string()),
                }
            }
            (ok, failures)
        })
    };
    wait_until(Duration::from_secs(5), "the GET loop to run", || {
        let n = done.load(Ordering::Relaxed);
        async move { n >= 5 }
    })
    .await;

    let killed_at = Instant::now();
    mocks[victim].kill().await;
    let hop_ms = loop {
        let r = get(&gw.url("/data"), &[(HDR, "hop-1")])
            .await
            .expect("get after kill");
        assert_eq!(
            r.status,
            200,
            "conn id request after the kill: {}",
            r.text()
        );
        if node_of(&r) == other {
            break killed_at.elapsed().as_millis();
        }
        assert!(
            killed_at.elapsed() < 2 * PROBE_INTERVAL,
            "still served by the killed node"
        );
    };
    eprintln!("FIGURE hop time after kill -9: {hop_ms} ms");
    assert!(
        hop_ms < 2 * PROBE_INTERVAL.as_millis(),
        "hop took {hop_ms} ms, want < two probe intervals"
    );

    let line = gw
        .logs
        .wait_for(
            &[&format!(
                "Hopping triggered for conn hop-1 from {old} to {other}"
            )],
            Duration::from_secs(5),
        )
        .await;
    assert!(line.contains("INFO"), "hop line must be INFO: {line}");
    gw.wait_node_state(&old, "ejected", Duration::from_secs(5))
        .await;
    for _ in 0..20 {
        let r = get(&gw.url("/data"), &[(HDR, "hop-1")]).await.expect("get");
        assert_eq!((r.status, node_of(&r)), (200, other.to_string()));
    }
    stop.store(true, Ordering::Relaxed);
    let (ok, failures) = loop_task.await.expect("loop task");
    assert!(
        failures.is_empty(),
        "GETs failed through the kill: {failures:?}"
    );
    assert!(ok > 10, "the loop ran only {ok} requests");

    assert_eq!(hops_total(&gw).await - hops_before, 1.0, "exactly one hop");
    let conn = gw.admin_json("/admin/conns/hop-1").await;
    assert_eq!(conn["conn_id"], "hop-1");
    assert_eq!(conn["node"], other);
    assert_eq!(
        gw.logs
            .matching(&["Hopping triggered for conn hop-1"])
            .len(),
        1,
        "one hop line"
    );
}

// ---------------------------------------------------------------------------------------------
// 3. ejection by probes and recovery

/// CASE-17 (probe variant): a node failing its probes past `eject_after` gets no traffic, bound ids
/// move, and it returns after recovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_node_is_ejected_gets_nothing_and_returns() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config("", None, &[&a, &b], "")).await;
    gw.wait_node_state("node-b", "healthy", Duration::from_secs(5))
        .await;

    b.set_down().await;
    gw.wait_node_state("node-b", "ejected", Duration::from_secs(5))
        .await;
    assert_eq!(gw.node("node-b").await["weight"].as_f64(), Some(0.0));
    b.reset_stats().await;
    for _ in 0..50 {
        let r = get(&gw.url("/data"), &[]).await.expect("get");
        assert_eq!((r.status, node_of(&r)), (200, "node-a".to_string()));
    }
    assert_eq!(
        non_probe_paths(&b).await,
        Vec::<String>::new(),
        "an ejected node got traffic"
    );

    b.set_up().await;
    gw.wait_node_state("node-b", "healthy", Duration::from_secs(5))
        .await;
    let mut to_b = 0;
    for _ in 0..20 {
        let r = get(&gw.url("/data"), &[]).await.expect("get");
        assert_eq!(r.status, 200);
        to_b += u32::from(node_of(&r) == "node-b");
    }
    assert!(
        (6..=14).contains(&to_b),
        "recovered node-b got {to_b} of 20"
    );
    assert_eq!(non_probe_paths(&b).await.len(), to_b as usize);
}

// ---------------------------------------------------------------------------------------------
// 4. every node down

/// CASE-19: no healthy node answers the route's fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_nodes_down_answers_the_route_fallback() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let nodes: Vec<(&str, String)> = vec![("node-a", a.addr()), ("node-b", b.addr())];
    let toml = format!(
        "{FAST_HEALTH}\n{}\n[[routes]]\nid = \"custom\"\ncluster = \"c\"\nmatch = {{ path_prefix = \"/custom\" }}\n\
         fallback = {{ status = 502, content_type = \"text/plain\", body = \"maintenance, back soon\" }}\n\
         [[routes]]\nid = \"api\"\ncluster = \"c\"\n",
        cluster_toml("c", &nodes, "")
    );
    let gw = Gateway::start(&toml).await;
    a.set_down().await;
    b.set_down().await;
    gw.wait_node_state("node-a", "ejected", Duration::from_secs(5))
        .await;
    gw.wait_node_state("node-b", "ejected", Duration::from_secs(5))
        .await;

    let r = get(&gw.url("/data"), &[]).await.expect("get");
    assert_eq!(r.status, 503);
    assert_eq!(r.text(), DEFAULT_FALLBACK);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json")
    );
    let r = get(&gw.url("/data"), &[(HDR, "down-1")])
        .await
        .expect("get");
    assert_eq!((r.status, r.text()), (503, DEFAULT_FALLBACK.to_string()));

    let r = get(&gw.url("/custom/x"), &[]).await.expect("get");
    assert_eq!(
        (r.status, r.text()),
        (502, "maintenance, back soon".to_string())
    );
    assert_eq!(r.header("content-type").as_deref(), Some("text/plain"));
}

/// CASE-19: `on_all_down = "fail_open"` is opt-in, still reaches the nodes and is visible in
/// `gateway_fail_open_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_sends_to_nodes_when_all_are_down() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config("", None, &[&a, &b], "on_all_down = \"fail_open\"")).await;
    a.set_down().await;
    b.set_down().await;
    gw.wait_node_state("node-a", "ejected", Duration::from_secs(5))
        .await;
    gw.wait_node_state("node-b", "ejected", Duration::from_secs(5))
        .await;
    let before = gw.metric("gateway_fail_open_total{cluster=\"c\"}").await;
    let mut nodes: HashMap<String, u32> = HashMap::new();
    for _ in 0..10 {
        let r = get(&gw.url("/data"), &[]).await.expect("get");
        assert_eq!(
            r.status,
            200,
            "fail_open must still reach a node: {}",
            r.text()
        );
        assert!(r.text().starts_with("Data from Node "), "{}", r.text());
        *nodes.entry(node_of(&r)).or_default() += 1;
    }
    assert_eq!(
        gw.metric("gateway_fail_open_total{cluster=\"c\"}").await - before,
        10.0
    );
    assert_eq!(
        nodes.len(),
        2,
        "fail_open spreads over every node: {nodes:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// 5. header rewriting

/// CASE-10/CASE-11 (SPEC 4): hop-by-hop headers, and every header named in `Connection`, are
/// removed; `X-Forwarded-*` set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_headers_are_stripped_and_forwarded_headers_set() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", None, &[&a], "")).await;
    let req = "GET /echo?q=1 HTTP/1.1\r\n\
               Host: app.example.test\r\n\
               Connection: keep-alive, X-Custom-Hop\r\n\
               Keep-Alive: timeout=5\r\n\
               TE: trailers, deflate\r\n\
               Upgrade: h2c\r\n\
               Proxy-Authorization: Basic Zm9vOmJhcg==\r\n\
               Proxy-Connection: keep-alive\r\n\
               X-Custom-Hop: secret\r\n\
               X-Forwarded-For: 1.2.3.4\r\n\
               X-Keep: yes\r\n\
               \r\n";
    let r = raw_exchange(gw.port, req.as_bytes()).await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    let echo = r.json();
    for gone in [
        "connection",
        "keep-alive",
        "upgrade",
        "proxy-authorization",
        "proxy-connection",
        "x-custom-hop",
        "transfer-encoding",
    ] {
        assert_eq!(
            echo_header(&echo, gone),
            Vec::<String>::new(),
            "{gone} must not reach the node"
        );
    }
    assert_eq!(echo_header(&echo, "te"), ["trailers"]);
    assert_eq!(
        echo_header(&echo, "x-forwarded-for"),
        ["1.2.3.4, 127.0.0.1"]
    );
    assert_eq!(echo_header(&echo, "x-forwarded-proto"), ["http"]);
    assert_eq!(echo_header(&echo, "x-forwarded-host"), ["app.example.test"]);
    assert_eq!(echo_header(&echo, "host"), ["app.example.test"]);
    assert_eq!(echo_header(&echo, "x-keep"), ["yes"]);
    assert_eq!(
        (
            echo["method"].as_str(),
            echo["path"].as_str(),
            echo["query"].as_str()
        ),
        (Some("GET"), Some("/echo"), Some("q=1"))
    );

    // Without a prior X-Forwarded-For, the peer alone; TE without trailers is dropped.
    let req =
        "GET /echo HTTP/1.1\r\nHost: other.test:8080\r\nTE: gzip\r\nConnection: close\r\n\r\n";
    let echo = raw_exchange(gw.port, req.as_bytes()).await.json();
    assert_eq!(echo_header(&echo, "x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(echo_header(&echo, "te"), Vec::<String>::new());
    assert_eq!(echo_header(&echo, "connection"), Vec::<String>::new());
    assert_eq!(echo_header(&echo, "host"), ["other.test:8080"]);
    assert_eq!(echo_header(&echo, "x-forwarded-host"), ["other.test:8080"]);
}

// ---------------------------------------------------------------------------------------------
// 6. streaming with bounded memory

const BIG: usize = 64 * 1024 * 1024;
const CHUNK: usize = 64 * 1024;
const RSS_BUDGET_KIB: u64 = 16 * 1024;

/// Upload chunk `i`: a fixed pseudo-random block rotated by `i`, so order matters to the digest.
fn upload_chunk(block: &[u8], i: usize) -> Bytes {
    let k = (i * 7919) % block.len();
    let mut v = Vec::with_capacity(block.len());
    v.extend_from_slice(&block[k..]);
    v.extend_from_slice(&block[..k]);
    Bytes::from(v)
}

/// CASE-23: large uploads and downloads stream with bounded gateway memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_upload_and_download_stream_with_bounded_memory() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", None, &[&a], "timeout = \"60s\"")).await;
    let pid = gw.pid().expect("running");
    // Warm up so pools and buffers exist before the baseline.
    for _ in 0..5 {
        assert_eq!(get(&gw.url("/data"), &[]).await.expect("get").status, 200);
    }
    let baseline = rss_kib_of(pid);

    // Upload, streamed from the client in 64 KiB chunks (chunked encoding, no Content-Length).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let block: Vec<u8> = (0..CHUNK)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut sha = Sha256::new();
    for i in 0..BIG / CHUNK {
        sha.update(upload_chunk(&block, i));
    }
    let want_sha = hex::encode(sha.finalize());
    let block = Arc::new(block);
    let stream = futures_util::stream::iter((0..BIG / CHUNK).map({
        let block = block.clone();
        move |i| Ok::<_, Infallible>(Frame::data(upload_chunk(&block, i)))
    }));
    let (stop, sampler) = rss_sampler(pid);
    let started = Instant::now();
    let mut send = h1_conn(gw.port).await;
    let req = http::Request::post("/echo")
        .header("host", "big.test")
        .body(StreamBody::new(stream))
        .expect("request");
    let resp = send.send_request(req).await.expect("upload response");
    assert_eq!(resp.status(), 200);
    let body = resp
        .into_body()
        .collect()
        .await
        .expect("echo body")
        .to_bytes();
    let up_secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let up_max = sampler.await.expect("sampler");
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo JSON");
    assert_eq!(echo["body_len"], BIG as u64);
    assert_eq!(echo["body_sha256"], want_sha.as_str());

    // Download, read as a stream and checked byte by byte (byte i is i % 251).
    let (stop, sampler) = rss_sampler(pid);
    let started = Instant::now();
    let mut send = h1_conn::<Empty<Bytes>>(gw.port).await;
    let req = http::Request::get(format!("/download?bytes={BIG}"))
        .header("host", "big.test")
        .body(Empty::new())
        .expect("request");
    let resp = send.send_request(req).await.expect("download response");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got: u64 = 0;
    while let Some(frame) = body.frame().await {
        let frame = frame.expect("download frame");
        if let Some(d) = frame.data_ref() {
            for (j, byte) in d.iter().enumerate() {
                assert_eq!(
                    u64::from(*byte),
                    (got + j as u64) % 251,
                    "download byte {}",
                    got + j as u64
                );
            }
            got += d.len() as u64;
        }
    }
    let down_secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let down_max = sampler.await.expect("sampler");
    assert_eq!(got, BIG as u64);

    let (up_growth, down_growth) = (
        up_max.saturating_sub(baseline),
        down_max.saturating_sub(baseline),
    );
    eprintln!(
        "FIGURE rss baseline {baseline} KiB; 64 MiB upload: max {up_max} KiB (+{up_growth} KiB) in {up_secs:.2} s; \
         64 MiB download: max {down_max} KiB (+{down_growth} KiB) in {down_secs:.2} s"
    );
    assert!(
        up_growth < RSS_BUDGET_KIB,
        "upload grew the gateway RSS by {up_growth} KiB"
    );
    assert!(
        down_growth < RSS_BUDGET_KIB,
        "download grew the gateway RSS by {down_growth} KiB"
    );
}

// ---------------------------------------------------------------------------------------------
// 7. stale pooled connections

async fn idle_closed_pooled_connection_is_not_a_502(advertise: bool) {
    let a = Mock::start("node-a").await;
    // One node: a retry "on another node" cannot hide a stale-connection failure.
    let gw = Gateway::start(&config("", None, &[&a], "")).await;
    let knob = if advertise {
        "/control/keepalive?idle_ms=300&advertise=1"
    } else {
        "/control/keepalive?idle_ms=300"
    };
    let r = request("POST", &format!("{}{knob}", a.url()), &[], Vec::new())
        .await
        .expect("knob");
    assert_eq!(r.status, 200);
    let mut failures = Vec::new();
    for i in 0..20 {
        let r = get(&gw.url("/data"), &[]).await.expect("get");
        assert_eq!(r.status, 200, "first GET {i}: {}", r.text());
        if advertise {
            assert_eq!(r.header("keep-alive"), None, "Keep-Alive is hop-by-hop");
        }
        // The scenario itself: idle past the node's 300 ms keep-alive so it closes the pooled socket.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let r = get(&gw.url("/data"), &[]).await.expect("get");
        if r.status != 200 {
            failures.push(format!("round {i}: {} {}", r.status, r.text()));
        }
    }
    assert!(
        failures.is_empty(),
        "stale pooled connections became errors: {failures:?}"
    );
}

/// CASE-21: a node closing idle keep-alive connections never costs a GET a 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_closed_pooled_connection_is_retried_not_502() {
    idle_closed_pooled_connection_is_not_a_502(false).await;
}

/// CASE-21: with `Keep-Alive: timeout=N` advertised, the node's timeout caps the pool's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_closed_pooled_connection_with_advertised_keepalive_is_not_502() {
    idle_closed_pooled_connection_is_not_a_502(true).await;
}

/// CASE-21's race: the gateway reuses a pooled connection just as the node closes it, so the
/// request may be written into a socket the node already closed. Still zero errors: a reused
/// connection failing before any response byte is retried once on a new connection to the same node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_connection_closed_at_reuse_time_is_retried_on_the_same_node() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", None, &[&a], "")).await;
    let r = request(
        "POST",
        &format!("{}/control/keepalive?idle_ms=300", a.url()),
        &[],
        Vec::new(),
    )
    .await
    .expect("knob");
    assert_eq!(r.status, 200);
    let mut failures = Vec::new();
    for (i, wait_ms) in (280..=320).step_by(2).enumerate() {
        let r = get(&gw.url("/data"), &[]).await.expect("get");
        assert_eq!(r.status, 200, "first GET {i}: {}", r.text());
        // The scenario itself: reuse right around the node's idle close.
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        for (method, body) in [("GET", Vec::new()), ("PUT", b"small".to_vec())] {
            let r = request(method, &gw.url("/echo"), &[], body)
                .await
                .expect("request");
            if r.status != 200 {
                failures.push(format!(
                    "{method} after {wait_ms} ms: {} {}",
                    r.status,
                    r.text()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "reuse racing the node's close became errors: {failures:?}"
    );
}

/// A node that answers the first request on each connection (keep-alive) and closes the connection
/// unanswered when a second request arrives on it: every reused pooled connection fails after the
/// request was written, before any response byte. Returns its port and a count of answered requests.
async fn closes_on_reuse_node() -> (u16, Arc<AtomicU64>, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let answered = Arc::new(AtomicU64::new(0));
    let count = answered.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let Some(head_end) = read_head(&mut s, &mut buf).await else {
                    return; // a TCP probe, or the gateway gave up
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                let cl: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().expect("content-length"));
                while buf.len() < head_end + cl {
                    let mut chunk = [0u8; 4096];
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                count.fetch_add(1, Ordering::Relaxed);
                let body = "fresh connection";
                let resp = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nx-node-id: flaky\r\n\r\n{body}",
                    body.len()
                );
                if s.write_all(resp.as_bytes()).await.is_err() {
                    return;
                }
                // Wait for the next request's first bytes, then drop the connection unanswered.
                let mut chunk = [0u8; 4096];
                let _ = s.read(&mut chunk).await;
            });
        }
    });
    (port, answered, task)
}

/// The stale-pool race made deterministic: every reused connection is closed by the node after the
/// request went out. An idempotent request is replayed once on a new connection to the same node
/// (the only node); a POST is not replayed and gets a 502 JSON naming the failure.
///
/// CASE-21 (deterministic race)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_connection_closed_after_send_replays_idempotent_requests_on_the_same_node() {
    let (port, answered, node) = closes_on_reuse_node().await;
    let toml = format!(
        "{}\n{}\n[[routes]]\nid = \"api\"\ncluster = \"c\"\n",
        slow_health(),
        cluster_toml("c", &[("flaky", format!("127.0.0.1:{port}"))], "")
    );
    let gw = Gateway::start(&toml).await;
    let series = "gateway_retries_total{route=\"api\",reason=\"stale_connection\"}";
    let r = get(&gw.url("/x"), &[]).await.expect("get");
    assert_eq!((r.status, r.text()), (200, "fresh connection".to_string()));
    for i in 0..10 {
        let (method, body) = if i % 2 == 0 {
            ("GET", Vec::new())
        } else {
            ("PUT", b"replayable".to_vec())
        };
        let r = request(method, &gw.url("/x"), &[], body)
            .await
            .expect("request");
        assert_eq!(
            (r.status, r.text()),
            (200, "fresh connection".to_string()),
            "{method} {i} on a reused connection"
        );
    }
    assert_eq!(
        gw.metric(series).await,
        10.0,
        "each request replayed exactly once"
    );
    assert_eq!(
        gw.node("flaky").await["state"],
        "healthy",
        "a stale pooled connection is no node fault"
    );
    let before = answered.load(Ordering::Relaxed);
    let r = request("POST", &gw.url("/x"), &[], b"not idempotent".to_vec())
        .await
        .expect("post");
    assert_eq!(r.status, 502, "{}", r.text());
    let msg = r.json()["message"].as_str().expect("message").to_string();
    assert!(msg.starts_with("node flaky failed: "), "{msg}");
    assert_eq!(
        answered.load(Ordering::Relaxed),
        before,
        "the POST was not replayed"
    );
    node.abort();
}

// ---------------------------------------------------------------------------------------------
// 8. conn id validation and --check-config

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_conn_ids_get_400_json_and_128_bytes_pass() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", None, &[&a], "")).await;

    let ok = "k".repeat(128);
    let r = get(&gw.url("/data"), &[(HDR, &ok)]).await.expect("get");
    assert_eq!((r.status, node_of(&r)), (200, "node-a".to_string()));

    let long = "k".repeat(129);
    let r = get(&gw.url("/data"), &[(HDR, &long)]).await.expect("get");
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        serde_json::json!({"code": -1, "message": "invalid x-conn-id header: conn id longer than 128 bytes"})
    );
    assert_eq!(r.header("x-node-id"), None, "a bad id never reaches a node");

    for (what, id) in [
        ("tab", "ab\tcd"),
        ("space", "ab cd"),
        ("obs-text", "ab\u{e9}cd"),
    ] {
        let req =
            format!("GET /data HTTP/1.1\r\nHost: t\r\n{HDR}: {id}\r\nConnection: close\r\n\r\n");
        let r = raw_exchange(gw.port, req.as_bytes()).await;
        assert_eq!(r.status, 400, "{what}");
        assert!(
            r.headers
                .iter()
                .any(|(k, v)| k == "content-type" && v == "application/json"),
            "{what}: {:?}",
            r.headers
        );
        assert_eq!(
            r.json(),
            serde_json::json!({"code": -1, "message": "invalid x-conn-id header: conn id has characters outside visible ASCII"}),
            "{what}"
        );
    }
    // Control characters never get past the HTTP/1.1 parser (RFC 9110 section 5.5): a plain 400
    // from the parser, the connection closed, nothing forwarded.
    for (what, id) in [("DEL", "ab\x7fcd"), ("SOH", "ab\x01cd")] {
        let req = format!("GET /data HTTP/1.1\r\nHost: t\r\n{HDR}: {id}\r\n\r\n");
        let r = raw_exchange(gw.port, req.as_bytes()).await;
        assert_eq!(r.status, 400, "{what}");
    }
    assert_eq!(
        non_probe_paths(&a).await,
        ["/data"],
        "only the 128-byte id reached the node"
    );
}

fn check_config(name: &str, toml: &str) -> (i32, String, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(name);
    std::fs::write(&path, toml).expect("write");
    let out = std::process::Command::new(integration_tests::bin("hopping-gateway"))
        .arg("--check-config")
        .arg(&path)
        .output()
        .expect("run");
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        path.display().to_string(),
    )
}

#[test]
fn check_config_reports_file_line_column_key() {
    let valid = "[[clusters]]\nname = \"c\"\n  [[clusters.nodes]]\n  id = \"a\"\n  addr = \"127.0.0.1:1\"\n\n[[routes]]\nid = \"r\"\ncluster = \"c\"\n";
    let (code, _, err, _) = check_config("ok.toml", valid);
    assert_eq!(code, 0, "valid file: {err}");
    assert_eq!(err, "");

    let unknown = "[server]\nzone = \"hz\"\n  bogus_key = 1\n";
    let (code, _, err, path) = check_config("unknown.toml", unknown);
    assert_eq!(code, 2);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with(&format!(
            "{path}:3:3: server.bogus_key: unknown field `bogus_key`"
        )),
        "{err}"
    );

    let duration = format!("{valid}timeout = \"3 parsecs\"\n");
    let (code, _, err, path) = check_config("duration.toml", &duration);
    assert_eq!(code, 2);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with(&format!(
            "{path}:10:1: routes[0].timeout: invalid duration \"3 parsecs\""
        )),
        "{err}"
    );

    // Every error is reported, one a line, in file order.
    let many = "[health]\ninterval = \"2x\"\n[[clusters]]\nname = \"c\"\nlb = \"fastest\"\n  \
                [[clusters.nodes]]\n  id = \"a\"\n  addr = \"127.0.0.1:1\"\n[[routes]]\nid = \"r\"\n\
                cluster = \"nope\"\n";
    let (code, _, err, path) = check_config("many.toml", many);
    assert_eq!(code, 2);
    let prefixes: Vec<String> = err
        .lines()
        .map(|l| l.splitn(3, ": ").take(2).collect::<Vec<_>>().join(": "))
        .collect();
    assert_eq!(
        prefixes,
        [
            format!("{path}:2:1: health.interval"),
            format!("{path}:5:1: clusters[0].lb"),
            format!("{path}:11:1: routes[0].cluster")
        ],
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// 9. no route, admin basics

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_is_404_json_and_admin_conns_lifecycle() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(
        "",
        None,
        &[&a],
        "match = { path_prefix = \"/api\" }",
    ))
    .await;

    let r = get(&gw.url("/other"), &[]).await.expect("get");
    assert_eq!(r.status, 404);
    assert_eq!(
        r.json(),
        serde_json::json!({"code": -1, "message": "no route matches GET /other"})
    );
    // The access log counts the gateway's own answer's body.
    gw.logs
        .wait_for(
            &[
                "access",
                "path=/other",
                "status=404",
                &format!("bytes_out={}", r.body.len()),
            ],
            Duration::from_secs(2),
        )
        .await;

    let r = get(&gw.admin("/admin/conns/nope"), &[])
        .await
        .expect("admin");
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["code"], -1);

    let r = get(&gw.url("/api/x"), &[(HDR, "adm-1")])
        .await
        .expect("get");
    assert_eq!(r.header("x-node-id").as_deref(), Some("node-a"));
    let conn = gw.admin_json("/admin/conns/adm-1").await;
    assert_eq!(
        (conn["conn_id"].as_str(), conn["node"].as_str()),
        (Some("adm-1"), Some("node-a"))
    );
    let ttl = conn["ttl_ms"].as_u64().expect("ttl_ms");
    assert!(
        ttl > 3_500_000 && ttl <= 3_600_000,
        "sliding TTL of 1h, got {ttl} ms"
    );

    let r = request("DELETE", &gw.admin("/admin/conns/adm-1"), &[], Vec::new())
        .await
        .expect("delete");
    assert_eq!((r.status, r.body.len()), (204, 0));
    let r = get(&gw.admin("/admin/conns/adm-1"), &[])
        .await
        .expect("admin");
    assert_eq!(r.status, 404);
    let r = request("DELETE", &gw.admin("/admin/conns/adm-1"), &[], Vec::new())
        .await
        .expect("delete");
    assert_eq!(r.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_token_is_required_when_set() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(
        "[server]\nadmin_token = \"s3cret\"\n",
        None,
        &[&a],
        "",
    ))
    .await;
    for path in ["/admin/nodes", "/admin/routes", "/metrics"] {
        let r = get(&gw.admin(path), &[]).await.expect("admin");
        assert_eq!(r.status, 401, "{path} without a token");
        assert_eq!(r.json()["code"], -1);
        let r = get(&gw.admin(path), &[("authorization", "Bearer wrong")])
            .await
            .expect("admin");
        assert_eq!(r.status, 401, "{path} with a wrong token");
        let r = get(&gw.admin(path), &[("authorization", "Bearer s3cret")])
            .await
            .expect("admin");
        assert_eq!(r.status, 200, "{path} with the token");
    }
    let r = get(
        &gw.admin("/admin/nodes"),
        &[("authorization", "Bearer s3cret")],
    )
    .await
    .expect("admin");
    assert_eq!(r.json()[0]["id"], "node-a");
    // Liveness and readiness stay open for orchestrator probes.
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            get(&gw.admin(path), &[]).await.expect("admin").status,
            200,
            "{path}"
        );
    }
    // The data plane never asks for the admin token.
    assert_eq!(get(&gw.url("/data"), &[]).await.expect("get").status, 200);
}

// ---------------------------------------------------------------------------------------------
// 10. retries

/// CASE-20 (b): a POST to a node refusing the connect is retried on another node with its body byte
/// for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_to_a_refusing_node_is_retried_with_its_body_intact() {
    let mut mocks = [Mock::start("node-a").await, Mock::start("node-b").await];
    // Slow probes: the killed node stays "healthy", so requests are still sent to it.
    let gw = Gateway::start(&config(
        "",
        Some(slow_health()),
        &[&mocks[0], &mocks[1]],
        "retries = 2",
    ))
    .await;
    let first = get(&gw.url("/data"), &[(HDR, "post-1")])
        .await
        .expect("get");
    let old = node_of(&first);
    let (victim, other) = if old == "node-a" {
        (0, "node-b")
    } else {
        (1, "node-a")
    };
    mocks[victim].kill().await;
    let series = "gateway_retries_total{route=\"api\",reason=\"connect_error\"}";
    let before = gw.metric(series).await;
    let body: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let want_sha = hex::encode(Sha256::digest(&body));
    let check = |r: &integration_tests::Resp| {
        assert_eq!(r.status, 200, "{}", r.text());
        let echo = r.json();
        assert_eq!(echo["node"], other);
        assert_eq!(echo["body_len"], body.len() as u64);
        assert_eq!(echo["body_sha256"], want_sha.as_str());
        assert_eq!(
            echo_header(&echo, "content-length"),
            [body.len().to_string()]
        );
    };
    // Bound to the refusing node: refused, then sent to the other node with the same body.
    let r = request(
        "POST",
        &gw.url("/echo"),
        &[
            (HDR, "post-1"),
            ("content-type", "application/octet-stream"),
        ],
        body.clone(),
    )
    .await
    .expect("post");
    check(&r);
    assert_eq!(
        gw.metric(series).await - before,
        1.0,
        "exactly one connect-error retry"
    );
    assert_eq!(gw.admin_json("/admin/conns/post-1").await["node"], other);
    assert_eq!(
        gw.node(&old).await["state"],
        "healthy",
        "probes have not run: only the retry saved the POST"
    );
    // Plain POSTs: whichever node the picker chooses, every one arrives intact at the live node.
    for _ in 0..3 {
        let r = request(
            "POST",
            &gw.url("/echo"),
            &[("content-type", "application/octet-stream")],
            body.clone(),
        )
        .await
        .expect("post");
        check(&r);
    }
}

/// CASE-20 (a, c): a node resetting after reading: POST gets 502 JSON and is not retried; GET is
/// retried on another node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_is_502_json_post_not_retried_get_retried_on_each_other_node() {
    let mocks = [
        Mock::start("node-a").await,
        Mock::start("node-b").await,
        Mock::start("node-c").await,
    ];
    let gw = Gateway::start(&config(
        "",
        Some(slow_health()),
        &[&mocks[0], &mocks[1], &mocks[2]],
        "retries = 2",
    ))
    .await;
    let sum = || async {
        let mut per = Vec::new();
        for m in &mocks {
            per.push(
                non_probe_paths(m)
                    .await
                    .into_iter()
                    .filter(|p| p == "/abort")
                    .count(),
            );
        }
        per
    };

    let r = request("POST", &gw.url("/abort"), &[], b"payload".to_vec())
        .await
        .expect("post");
    assert_eq!(r.status, 502);
    let j = r.json();
    assert_eq!(j["code"], -1);
    let msg = j["message"].as_str().expect("message");
    assert!(
        msg.starts_with("node node-") && msg.contains(" failed: "),
        "precise message naming the node: {msg}"
    );
    let per = sum().await;
    assert_eq!(per.iter().sum::<usize>(), 1, "POST is not retried: {per:?}");
    let failed_node = format!(
        "node-{}",
        ["a", "b", "c"][per.iter().position(|n| *n == 1).expect("one")]
    );
    assert_eq!(
        msg,
        format!("node {failed_node} failed: connection closed before message completed")
    );
    for m in &mocks {
        m.reset_stats().await;
    }

    let r = get(&gw.url("/abort"), &[]).await.expect("get");
    assert_eq!(r.status, 502);
    let j = r.json();
    assert_eq!(j["code"], -1);
    assert!(
        j["message"]
            .as_str()
            .expect("message")
            .contains(" failed: "),
        "{j}"
    );
    assert_eq!(
        sum().await,
        [1, 1, 1],
        "GET tried once and retried twice, each on another node"
    );
    drop(gw);

    // retries = 1: two attempts in all, on two different nodes.
    for m in &mocks {
        m.reset_stats().await;
    }
    let toml = config(
        "",
        Some(slow_health()),
        &[&mocks[0], &mocks[1], &mocks[2]],
        "retries = 1",
    );
    let gw = Gateway::start(&toml).await;
    let r = get(&gw.url("/abort"), &[]).await.expect("get");
    assert_eq!(r.status, 502);
    let mut per = sum().await;
    per.sort_unstable();
    assert_eq!(per, [0, 1, 1], "one try plus one retry on another node");
}

// ---------------------------------------------------------------------------------------------
// throughput figure (not an assertion)

async fn keepalive_rps(port: u16, tasks: usize, secs: f64) -> f64 {
    let count = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let count = count.clone();
        set.spawn(async move {
            let mut send = h1_conn::<Empty<Bytes>>(port).await;
            while Instant::now() < deadline {
                send.ready().await.expect("ready");
                let req = http::Request::get("/data")
                    .header("host", "bench.test")
                    .body(Empty::new())
                    .expect("request");
                let resp = send.send_request(req).await.expect("response");
                assert_eq!(resp.status(), 200);
                resp.into_body().collect().await.expect("body");
                count.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    while set.join_next().await.is_some() {}
    count.load(Ordering::Relaxed) as f64 / secs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a throughput measurement (direct vs gateway req/s), not a pass/fail check; make bench measures it properly; run with --ignored"]
async fn throughput_direct_vs_gateway() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start_with(&config("", None, &[&a], ""), &["--access-log", "off"]).await;
    let direct = keepalive_rps(a.port, 4, 3.0).await;
    let via = keepalive_rps(gw.port, 4, 3.0).await;
    eprintln!("FIGURE keep-alive GET /data, 4 tasks x 3 s: direct {direct:.0} req/s, via gateway {via:.0} req/s ({:.0} %)", via / direct * 100.0);
}
