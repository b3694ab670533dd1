//! The hardening issue's HTTP/1.1 field cases (shared/acceptance/CASES.md): CASE-10, 11, 12 (HTTP/1.1
//! part), 13, 14, 15, 16, 17, 19, 20, 21, 22, 23, signed conn ids, and a chaos run.
//!
//! Framing cases write exact bytes over a raw TCP socket and read the answer back, so nothing in a
//! client library normalises what the gateway sees. "Nothing forwarded" is the node's own request
//! count: these gateways probe by TCP connect, which the mock does not count.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use integration_tests::{cluster_toml, find, get, read_head, request, Gateway, Mock, Redis, Resp};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

const HDR: &str = "X-Conn-Id";
/// The SPEC's default fallback body.
const DEFAULT_FALLBACK: &str = r#"{"code":-1,"message":"service temporarily unavailable"}"#;
/// Fast probes by TCP connect only: a mock's request count is then real traffic alone.
const TCP_HEALTH: &str = "[health]\nkind = \"tcp\"\ninterval = \"200ms\"\ntimeout = \"200ms\"\ndegrade_after = 2\neject_after = 3\nrecover_after = 2\nslow_start = \"0s\"\n";
/// Fast HTTP probes (`GET /health`), for cases where a node is alive but failing.
const HTTP_HEALTH: &str = "[health]\ninterval = \"200ms\"\ntimeout = \"200ms\"\ndegrade_after = 2\neject_after = 3\nrecover_after = 2\nslow_start = \"0s\"\n";
/// Probes that never move a node within a test: a killed node stays "healthy" until traffic finds out.
const SLOW_HEALTH: &str =
    "[health]\nkind = \"tcp\"\ninterval = \"60s\"\ntimeout = \"1s\"\nslow_start = \"0s\"\n";

// ---------------------------------------------------------------------------------------------
// helpers

/// `top` tables, then `health`, one cluster `c` over `nodes` and one catch-all route `api` with
/// `route` lines appended.
fn config(top: &str, health: &str, nodes: &[&Mock], route: &str) -> String {
    let nodes: Vec<(&str, String)> = nodes.iter().map(|m| (m.id.as_str(), m.addr())).collect();
    config_addrs(top, health, &nodes, route)
}

fn config_addrs(top: &str, health: &str, nodes: &[(&str, String)], route: &str) -> String {
    format!(
        "{top}\n{health}\n{}\n[[routes]]\nid = \"api\"\ncluster = \"c\"\n{route}\n",
        cluster_toml("c", nodes, "")
    )
}

fn node_of(r: &Resp) -> String {
    r.header("x-node-id")
        .unwrap_or_else(|| panic!("no x-node-id on {} {}", r.status, r.text()))
}

/// Every value of header `name` the node received, from the mock's `/echo` JSON.
fn echo_header(echo: &serde_json::Value, name: &str) -> Vec<String> {
    echo["headers"]
        .as_array()
        .expect("headers array")
        .iter()
        .filter(|p| p[0] == name)
        .map(|p| p[1].as_str().expect("value").to_string())
        .collect()
}

/// Asserts `body` is the SPEC error shape; returns its message.
fn json_error(body: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(body)));
    assert_eq!(v["code"], -1, "{v}");
    let msg = v["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message in {v}"))
        .to_string();
    assert!(!msg.is_empty(), "{v}");
    msg
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

/// The paths a mock saw since its last reset, `/health` probes excluded; asserts the mock's
/// bounded path list is complete.
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

/// A `POST /control/<knob>` on a mock.
async fn knob(m: &Mock, path: &str) {
    let r = request(
        "POST",
        &format!("{}/control/{path}", m.url()),
        &[],
        Vec::new(),
    )
    .await
    .expect("control call");
    assert_eq!(r.status, 200, "{path}: {}", r.text());
}

/// Binds a conn id to `node` and returns it: `id` itself, or the first `id~N` that lands there.
/// New ids are placed by rendezvous hashing (SPEC section 7), so an id that lands elsewhere always
/// would; a variant of it is tried instead (each miss is unbound again).
async fn bind_to(gw: &Gateway, id: &str, node: &str) -> String {
    for n in 0..64 {
        let id = if n == 0 {
            id.to_string()
        } else {
            format!("{id}~{n}")
        };
        let r = get(&gw.url("/echo/bind"), &[(HDR, &id)])
            .await
            .expect("get");
        assert_eq!(r.status, 200, "{}", r.text());
        if node_of(&r) == node {
            return id;
        }
        let r = request(
            "DELETE",
            &gw.admin(&format!("/admin/conns/{id}")),
            &[],
            Vec::new(),
        )
        .await
        .expect("delete");
        assert_eq!(r.status, 204);
    }
    panic!("could not bind {id} to {node}");
}

/// A deterministic byte pattern (xorshift) of `len` bytes.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn sha_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_micros() as u64
}

/// One response head read off a raw socket.
#[derive(Debug)]
struct Head {
    status: u16,
    version: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A raw HTTP/1.1 client socket: exact bytes out, parsed responses in.
struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Raw {
    async fn connect(port: u16) -> Raw {
        Raw {
            s: TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect"),
            buf: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).await.expect("write");
    }

    /// Reads more bytes; 0 on EOF or reset.
    async fn more(&mut self) -> usize {
        let mut chunk = [0u8; 16 * 1024];
        match self.s.read(&mut chunk).await {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                n
            }
            Err(_) => 0,
        }
    }

    /// The next response head within `t`; `None` if the connection ends first.
    async fn head(&mut self, t: Duration) -> Option<Head> {
        let fut = async {
            loop {
                if let Some(p) = find(&self.buf, b"\r\n\r\n") {
                    let head = String::from_utf8(self.buf[..p].to_vec()).expect("ascii head");
                    self.buf.drain(..p + 4);
                    let mut lines = head.split("\r\n");
                    let status_line = lines.next().expect("status line");
                    let mut parts = status_line.splitn(3, ' ');
                    let version = parts.next().expect("version").to_string();
                    let status = parts
                        .next()
                        .and_then(|c| c.parse().ok())
                        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
                    let headers = lines
                        .map(|l| {
                            let (k, v) = l
                                .split_once(':')
                                .unwrap_or_else(|| panic!("bad header line {l:?}"));
                            (k.trim().to_ascii_lowercase(), v.trim().to_string())
                        })
                        .collect();
                    return Some(Head {
                        status,
                        version,
                        headers,
                    });
                }
                if self.more().await == 0 {
                    return None;
                }
            }
        };
        timeout(t, fut).await.expect("a response head in time")
    }

    async fn fill(&mut self, need: usize) {
        while self.buf.len() < need {
            assert!(
                self.more().await > 0,
                "connection ended after {} of {need} body bytes",
                self.buf.len()
            );
        }
    }

    /// The body of a response with head `h` (Content-Length, chunked, or up to EOF).
    async fn body(&mut self, h: &Head) -> Vec<u8> {
        let fut = async {
            if let Some(cl) = h.get("content-length") {
                let cl: usize = cl.parse().expect("content-length");
                self.fill(cl).await;
                return self.buf.drain(..cl).collect();
            }
            if h.get("transfer-encoding")
                .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
            {
                let mut body = Vec::new();
                loop {
                    let line_end = loop {
                        if let Some(p) = find(&self.buf, b"\r\n") {
                            break p;
                        }
                        let need = self.buf.len() + 1;
                        self.fill(need).await;
                    };
                    let size_str = String::from_utf8_lossy(&self.buf[..line_end]).to_string();
                    let size =
                        usize::from_str_radix(size_str.split(';').next().expect("size").trim(), 16)
                            .expect("chunk size");
                    self.fill(line_end + 2 + size + 2).await;
                    body.extend_from_slice(&self.buf[line_end + 2..line_end + 2 + size]);
                    self.buf.drain(..line_end + 2 + size + 2);
                    if size == 0 {
                        return body;
                    }
                }
            }
            while self.more().await > 0 {}
            std::mem::take(&mut self.buf)
        };
        timeout(Duration::from_secs(10), fut)
            .await
            .expect("a response body in time")
    }

    /// The next whole response within `t`.
    async fn response(&mut self, t: Duration) -> (Head, Vec<u8>) {
        let h = self
            .head(t)
            .await
            .expect("a response before the connection ended");
        let b = self.body(&h).await;
        (h, b)
    }

    /// True if the peer ends the connection (FIN or reset) within `t` and sends nothing more.
    async fn closed_within(&mut self, t: Duration) -> bool {
        let deadline = Instant::now() + t;
        loop {
            let mut chunk = [0u8; 1024];
            match tokio::time::timeout_at(deadline, self.s.read(&mut chunk)).await {
                Err(_) => return false,
                Ok(Ok(0)) | Ok(Err(_)) => return self.buf.is_empty(),
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Like [`Raw::closed_within`], but true only for a clean FIN (no reset).
    async fn fin_within(&mut self, t: Duration) -> bool {
        let mut chunk = [0u8; 1024];
        matches!(timeout(t, self.s.read(&mut chunk)).await, Ok(Ok(0)))
    }
}

/// Sends `wire` on a fresh connection; returns the answer and asserts the gateway then closed it.
async fn refused(port: u16, wire: &[u8]) -> (Head, Vec<u8>) {
    let mut c = Raw::connect(port).await;
    c.send(wire).await;
    let (h, b) = c.response(Duration::from_secs(5)).await;
    assert!(
        c.closed_within(Duration::from_secs(2)).await,
        "connection left open after {} for {:?}",
        h.status,
        String::from_utf8_lossy(wire)
    );
    (h, b)
}

/// (requests, failures, slowest) of a [`prober`].
type ProbeResult = (u32, Vec<String>, Duration);

/// Polls `GET /data` every 100 ms until stopped; returns (requests, failures, slowest).
fn prober(gw: &Gateway) -> (Arc<AtomicBool>, JoinHandle<ProbeResult>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let url = gw.url("/data");
    let task = tokio::spawn(async move {
        let (mut n, mut bad, mut slowest) = (0, Vec::new(), Duration::ZERO);
        while !flag.load(Ordering::Relaxed) {
            let t0 = Instant::now();
            match timeout(Duration::from_secs(5), get(&url, &[])).await {
                Ok(Ok(r)) if r.status == 200 => {}
                Ok(Ok(r)) => bad.push(format!("{} {}", r.status, r.text())),
                Ok(Err(e)) => bad.push(e.to_string()),
                Err(_) => bad.push("no answer in 5 s".into()),
            }
            slowest = slowest.max(t0.elapsed());
            n += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (n, bad, slowest)
    });
    (stop, task)
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

// ---------------------------------------------------------------------------------------------
// CASE-10: h2c upgrade is never forwarded

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case10_h2c_upgrade_is_stripped_and_answered_as_plain_http11() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "")).await;
    let mut c = Raw::connect(gw.port).await;
    c.send(b"GET /echo/h2c HTTP/1.1\r\nHost: h2c.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n").await;
    let (h, body) = c.response(Duration::from_secs(5)).await;
    assert_eq!(
        (h.version.as_str(), h.status),
        ("HTTP/1.1", 200),
        "never 101: {h:?}"
    );
    assert_eq!(h.get("upgrade"), None);
    // An upgrade the gateway did not perform ends the connection (the framing watch stopped at it).
    assert_eq!(h.get("connection"), Some("close"));
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo JSON");
    assert_eq!(echo["version"], "HTTP/1.1");
    assert_eq!(echo["method"], "GET");
    for name in ["upgrade", "http2-settings", "connection"] {
        assert_eq!(
            echo_header(&echo, name),
            Vec::<String>::new(),
            "node received {name}: {echo}"
        );
    }
    assert_eq!(echo_header(&echo, "host"), ["h2c.test"]);
    assert!(c.closed_within(Duration::from_secs(2)).await);
}

// ---------------------------------------------------------------------------------------------
// CASE-11: X-Forwarded-For lines

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case11_forwarded_for_lines_are_joined_or_replaced_by_trust() {
    let a = Mock::start("node-a").await;
    let incoming = [
        ("host", "app.test"),
        ("x-forwarded-for", "10.0.0.1"),
        ("x-forwarded-for", "127.0.0.1"),
        ("forwarded", "for=192.0.2.1"),
        ("x-real-ip", "10.0.0.2"),
        ("x-forwarded-proto", "https"),
    ];
    // No trusted_proxies: append (Go-compatible), one line.
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "")).await;
    let echo = get(&gw.url("/echo/ip"), &incoming)
        .await
        .expect("get")
        .json();
    assert_eq!(
        echo_header(&echo, "x-forwarded-for"),
        ["10.0.0.1, 127.0.0.1, 127.0.0.1"]
    );
    assert_eq!(echo_header(&echo, "x-forwarded-proto"), ["http"]);
    assert_eq!(echo_header(&echo, "x-forwarded-host"), ["app.test"]);
    assert_eq!(echo_header(&echo, "forwarded"), ["for=192.0.2.1"]);
    drop(gw);

    // Peer outside trusted_proxies: dropped and replaced.
    let gw = Gateway::start(&config(
        "[server]\ntrusted_proxies = [\"10.0.0.0/8\"]\n",
        TCP_HEALTH,
        &[&a],
        "",
    ))
    .await;
    let echo = get(&gw.url("/echo/ip"), &incoming)
        .await
        .expect("get")
        .json();
    assert_eq!(echo_header(&echo, "x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(echo_header(&echo, "forwarded"), Vec::<String>::new());
    assert_eq!(echo_header(&echo, "x-real-ip"), Vec::<String>::new());
    assert_eq!(echo_header(&echo, "x-forwarded-proto"), ["http"]);
    assert_eq!(echo_header(&echo, "x-forwarded-host"), ["app.test"]);
    drop(gw);

    // Peer inside: kept, the peer appended.
    let gw = Gateway::start(&config(
        "[server]\ntrusted_proxies = [\"127.0.0.0/8\"]\n",
        TCP_HEALTH,
        &[&a],
        "",
    ))
    .await;
    let echo = get(
        &gw.url("/echo/ip"),
        &[("host", "app.test"), ("x-forwarded-for", "203.0.113.7")],
    )
    .await
    .expect("get")
    .json();
    assert_eq!(
        echo_header(&echo, "x-forwarded-for"),
        ["203.0.113.7, 127.0.0.1"]
    );
}

// ---------------------------------------------------------------------------------------------
// CASE-12 (HTTP/1.1): Host handling

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case12_host_passes_through_once_and_two_hosts_are_400() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "")).await;
    let r = get(&gw.url("/echo/index.html"), &[("host", "app.example.test")])
        .await
        .expect("get");
    assert_eq!(r.status, 200);
    let echo = r.json();
    assert_eq!(echo["path"], "/echo/index.html");
    assert_eq!(echo_header(&echo, "host"), ["app.example.test"]);
    assert_eq!(echo_header(&echo, "x-forwarded-host"), ["app.example.test"]);
    a.reset_stats().await;
    // Two Host lines: RFC 9112 section 3.2 says 400; nothing forwarded.
    let (h, body) = refused(
        gw.port,
        b"GET /echo/x HTTP/1.1\r\nHost: app.example.test\r\nHost: evil.test\r\n\r\n",
    )
    .await;
    assert_eq!(h.status, 400);
    json_error(&body);
    assert_eq!(a.requests().await, 0);
}

// ---------------------------------------------------------------------------------------------
// CASE-13: Content-Length with Transfer-Encoding, and other framing variants

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case13_cl_with_te_is_400_and_nothing_forwarded() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "")).await;
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
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "")).await;
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

// ---------------------------------------------------------------------------------------------
// CASE-14: obs-fold and colon-less lines

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case14_obs_fold_and_colonless_lines_are_400_and_nothing_forwarded() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "")).await;
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

// ---------------------------------------------------------------------------------------------
// CASE-16: over-long request line and header block

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case16_long_target_and_header_block_get_414_431_and_control_passes_byte_for_byte() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "")).await;

    // Past hyper's own URI limit (65,534 bytes): still the gateway's JSON 414, judged before
    // hyper reads the head.
    let target = format!("/echo?q={}", "a".repeat(70_000 - 8));
    let (h, body) = refused(
        gw.port,
        format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(h.status, 414);
    assert_eq!(json_error(&body), "request line longer than 16384 bytes");
    // Past the 16 KiB request-line limit: the gateway's JSON 414.
    let target = format!("/echo?q={}", "a".repeat(17 * 1024));
    let (h, body) = refused(
        gw.port,
        format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(h.status, 414);
    assert_eq!(json_error(&body), "request line longer than 16384 bytes");
    // A 64 KiB cookie: 431.
    let (h, body) = refused(
        gw.port,
        format!(
            "GET /echo HTTP/1.1\r\nHost: x\r\nCookie: c={}\r\n\r\n",
            "b".repeat(64 * 1024)
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(h.status, 431);
    assert_eq!(
        json_error(&body),
        "request header block larger than 32768 bytes"
    );
    // 200 header fields: 431.
    let fields: String = (0..200).map(|i| format!("X-F{i}: v\r\n")).collect();
    let (h, body) = refused(
        gw.port,
        format!("GET /echo HTTP/1.1\r\nHost: x\r\n{fields}\r\n").as_bytes(),
    )
    .await;
    assert_eq!(h.status, 431);
    assert_eq!(
        json_error(&body),
        "request header block larger than 100 fields"
    );
    assert_eq!(a.requests().await, 0, "nothing forwarded");

    // Positive control: an 8,000-byte target and a ~15 KiB header block pass byte for byte.
    let query: String = (0..8000 - "/echo/ctl?q=".len())
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let target = format!("/echo/ctl?q={query}");
    assert_eq!(target.len(), 8000);
    let values: Vec<String> = (0..10)
        .map(|i| {
            pattern(1500, i + 1)
                .iter()
                .map(|b| (b'!' + b % 90) as char)
                .collect()
        })
        .collect();
    let mut wire = format!("GET {target} HTTP/1.1\r\nHost: x\r\n");
    for (i, v) in values.iter().enumerate() {
        wire.push_str(&format!("X-Fill-{i}: {v}\r\n"));
    }
    wire.push_str("\r\n");
    let mut c = Raw::connect(gw.port).await;
    c.send(wire.as_bytes()).await;
    let (h, body) = c.response(Duration::from_secs(5)).await;
    assert_eq!(h.status, 200);
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo");
    assert_eq!(
        format!(
            "{}?{}",
            echo["path"].as_str().expect("path"),
            echo["query"].as_str().expect("query")
        ),
        target
    );
    for (i, v) in values.iter().enumerate() {
        assert_eq!(
            echo_header(&echo, &format!("x-fill-{i}")),
            std::slice::from_ref(v)
        );
    }
    assert_eq!(a.requests().await, 1);
}

// ---------------------------------------------------------------------------------------------
// CASE-15: Expect: 100-continue

/// CASE-15: a node answering 401 (bad bearer token) or 413 at once to `Expect: 100-continue` with
/// a 100 MiB Content-Length: the client gets that answer promptly, no 100 before it, no reset, and
/// the body is never pulled upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case15_early_401_reaches_the_client_without_100_and_no_body_moves() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "")).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case15_node_100_is_relayed_once_then_the_final_status() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "")).await;
    let body = pattern(4 * 1024 * 1024, 15);
    let mut c = Raw::connect(gw.port).await;
    let t0 = Instant::now();
    c.send(format!("PUT /echo/bucket/big.bin HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n", body.len()).as_bytes()).await;
    let h = c
        .head(Duration::from_secs(3))
        .await
        .expect("interim answer");
    let took = t0.elapsed();
    assert_eq!(h.status, 100);
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
async fn silent_expect_node() -> (
    String,
    tokio::sync::mpsc::Receiver<(bool, usize, u128)>,
    tokio::task::JoinHandle<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let Some(head_end) = read_head(&mut s, &mut buf).await else {
                    return; // a TCP probe, or the gateway gave up
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                let expect = head.contains("\r\nexpect: 100-continue\r\n");
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().expect("cl"))
                    .unwrap_or(0);
                let head_at = Instant::now();
                let mut got = buf.len() - head_end;
                let mut first: Option<Instant> = (got > 0).then(Instant::now);
                while got < len {
                    let mut chunk = [0u8; 65536];
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            first.get_or_insert_with(Instant::now);
                            got += n;
                        }
                    }
                }
                let _ = s
                    .write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
                    .await;
                let wait = first.map_or(u128::MAX, |f| f.duration_since(head_at).as_millis());
                let _ = tx.send((expect, got, wait)).await;
            });
        }
    });
    (addr, rx, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case15_node_ignoring_expect_gets_the_body_after_the_gateways_own_100_within_1s() {
    let (addr, mut reports, node) = silent_expect_node().await;
    let gw = Gateway::start(&config_addrs("", TCP_HEALTH, &[("node-z", addr)], "")).await;
    let body = pattern(256 * 1024, 16);
    let mut c = Raw::connect(gw.port).await;
    let t0 = Instant::now();
    c.send(format!("PUT /bucket/big.bin HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n", body.len()).as_bytes()).await;
    let h = c
        .head(Duration::from_secs(3))
        .await
        .expect("interim answer");
    let took = t0.elapsed();
    assert_eq!(h.status, 100);
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

// ---------------------------------------------------------------------------------------------
// CASE-17: a binding to a node that is gone

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case17_binding_to_a_refusing_node_moves_once_and_new_ids_spread_again() {
    let a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let c = Mock::start("node-c").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a, &b, &c], "retries = 2")).await;
    let c3003 = bind_to(&gw, "c-3003", "node-b").await;
    let c3004 = bind_to(&gw, "c-3004", "node-b").await;
    let hops0 = hops_total(&gw).await;

    b.kill().await;
    // At once, and again: a refused connect sent nothing, so it is retried elsewhere.
    let r = get(&gw.url("/echo/s"), &[(HDR, c3003.as_str())])
        .await
        .expect("get");
    assert_eq!(r.status, 200, "{}", r.text());
    let new_node = node_of(&r);
    assert_ne!(new_node, "node-b");
    let r = get(&gw.url("/echo/s"), &[(HDR, c3003.as_str())])
        .await
        .expect("get");
    assert_eq!((r.status, node_of(&r)), (200, new_node.clone()));
    // Ten at once for c-3003 (already moved), and ten at once for c-3004, whose first requests
    // since the kill race each other to move it.
    let burst = |id: &str| {
        let (url, id) = (gw.url("/echo/s"), id.to_string());
        async move {
            let (url, id) = (&url, id.as_str());
            futures_util::future::join_all(
                (0..10).map(|_| async move { get(url, &[(HDR, id)]).await }),
            )
            .await
        }
    };
    let (r3, r4) = tokio::join!(burst(c3003.as_str()), burst(c3004.as_str()));
    let nodes3: Vec<(u16, String)> = r3
        .into_iter()
        .map(|r| r.expect("get"))
        .map(|r| (r.status, node_of(&r)))
        .collect();
    let nodes4: Vec<(u16, String)> = r4
        .into_iter()
        .map(|r| r.expect("get"))
        .map(|r| (r.status, node_of(&r)))
        .collect();
    assert!(
        nodes3.iter().all(|n| *n == (200, new_node.clone())),
        "c-3003 burst: {nodes3:?}"
    );
    let moved4 = nodes4[0].1.clone();
    assert_ne!(moved4, "node-b");
    assert!(
        nodes4.iter().all(|n| *n == (200, moved4.clone())),
        "c-3004 burst all on one new node: {nodes4:?}"
    );
    assert_eq!(
        hops_total(&gw).await - hops0,
        2.0,
        "each binding moved exactly once"
    );
    assert_eq!(
        gw.admin_json(&format!("/admin/conns/{c3003}")).await["node"],
        new_node.as_str()
    );
    assert_eq!(
        gw.admin_json(&format!("/admin/conns/{c3004}")).await["node"],
        moved4.as_str()
    );

    // node-b comes back: the moved binding stays, new ids spread over all three nodes.
    b.restart().await;
    gw.wait_node_state("node-b", "healthy", Duration::from_secs(10))
        .await;
    for _ in 0..3 {
        let r = get(&gw.url("/echo/s"), &[(HDR, c3003.as_str())])
            .await
            .expect("get");
        assert_eq!((r.status, node_of(&r)), (200, new_node.clone()));
    }
    let mut spread: HashMap<String, u32> = HashMap::new();
    for i in 0..30 {
        let r = get(&gw.url("/echo/s"), &[(HDR, &format!("c-new-{i}"))])
            .await
            .expect("get");
        assert_eq!(r.status, 200);
        *spread.entry(node_of(&r)).or_default() += 1;
    }
    for n in ["node-a", "node-b", "node-c"] {
        assert!(
            spread.get(n).copied().unwrap_or(0) >= 5,
            "30 new ids over three nodes: {spread:?}"
        );
    }
    assert_eq!(hops_total(&gw).await - hops0, 2.0);
    eprintln!("FIGURE case17 new ids spread {spread:?}");
}

// ---------------------------------------------------------------------------------------------
// CASE-19: no healthy node

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case19_all_nodes_down_answer_the_fallback_fast_and_touch_no_node() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let c = Mock::start("node-c").await;
    let gw = Gateway::start(&config("", HTTP_HEALTH, &[&a, &b, &c], "")).await;
    let c19 = bind_to(&gw, "c-19", "node-c").await;
    a.kill().await;
    b.kill().await;
    c.set_down().await;
    c.hang().await;
    for n in ["node-a", "node-b", "node-c"] {
        gw.wait_node_state(n, "ejected", Duration::from_secs(5))
            .await;
    }
    c.reset_stats().await;

    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let t0 = Instant::now();
        let r = get(&gw.url("/api/x"), &[]).await.expect("get");
        slowest = slowest.max(t0.elapsed());
        assert_eq!(r.status, 503, "GET {i}");
        assert_eq!(r.text(), DEFAULT_FALLBACK);
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("application/json")
        );
        assert_eq!(r.header("retry-after").as_deref(), Some("1"));
    }
    assert!(
        slowest < Duration::from_millis(100),
        "slowest fallback {slowest:?}"
    );
    let t0 = Instant::now();
    let r = get(&gw.url("/api/x"), &[(HDR, c19.as_str())])
        .await
        .expect("get");
    let bound_took = t0.elapsed();
    assert_eq!((r.status, r.text()), (503, DEFAULT_FALLBACK.to_string()));
    assert!(
        bound_took < Duration::from_millis(100),
        "bound request {bound_took:?}"
    );
    // A WebSocket upgrade: 503 too, never 101, and the connection ends.
    let t0 = Instant::now();
    let (h, body) = refused(gw.port, b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").await;
    assert_eq!(h.status, 503);
    assert_eq!(String::from_utf8_lossy(&body), DEFAULT_FALLBACK);
    assert!(t0.elapsed() < Duration::from_millis(200));
    // No request reached the hanging node (its probes aside).
    assert_eq!(non_probe_paths(&c).await, Vec::<String>::new());

    // node-b recovers: all traffic goes to it.
    b.restart().await;
    gw.wait_node_state("node-b", "healthy", Duration::from_secs(10))
        .await;
    for _ in 0..10 {
        let r = get(&gw.url("/data"), &[]).await.expect("get");
        assert_eq!((r.status, node_of(&r)), (200, "node-b".to_string()));
    }
    let r = get(&gw.url("/data"), &[(HDR, c19.as_str())])
        .await
        .expect("get");
    assert_eq!((r.status, node_of(&r)), (200, "node-b".to_string()));
    eprintln!("FIGURE case19 slowest fallback {slowest:?}, bound {bound_took:?}");
}

// ---------------------------------------------------------------------------------------------
// CASE-20: retries and request bodies

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case20_retries_respect_methods_and_bodies() {
    let mut a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config("", SLOW_HEALTH, &[&a, &b], "retries = 2")).await;
    let c20 = bind_to(&gw, "c-20", "node-a").await;
    let c20b = bind_to(&gw, "c-20b", "node-a").await;
    a.reset_stats().await;
    b.reset_stats().await;
    let order = br#"{"sku":"X1","qty":1}"#.to_vec();
    assert_eq!(order.len(), 20);
    let retries = |reason: &'static str| {
        let gw = &gw;
        async move {
            gw.metric(&format!(
                "gateway_retries_total{{route=\"api\",reason=\"{reason}\"}}"
            ))
            .await
        }
    };
    let (reset0, connect0) = (retries("reset").await, retries("connect_error").await);

    // (a) node-a reads the POST, then resets: not retried, 502 JSON.
    knob(&a, "abort-all").await;
    let r = request(
        "POST",
        &gw.url("/echo/orders"),
        &[(HDR, c20.as_str()), ("content-type", "application/json")],
        order.clone(),
    )
    .await
    .expect("post");
    assert_eq!(r.status, 502);
    let msg = json_error(&r.body);
    assert!(msg.starts_with("node node-a failed: "), "{msg}");
    assert_eq!(non_probe_paths(&a).await, ["/echo/orders"]);
    assert_eq!(non_probe_paths(&b).await, Vec::<String>::new());

    // (d) PUT 10 MiB, node-a resets after 1 MiB: the streamed body was not kept, so no retry.
    knob(&a, "abort-all?after_bytes=1048576").await;
    a.reset_stats().await;
    let big = pattern(10 * 1024 * 1024, 20);
    let s = TcpStream::connect(("127.0.0.1", gw.port))
        .await
        .expect("connect");
    let (mut rd, mut wr) = s.into_split();
    let head = format!(
        "PUT /echo/files/f1 HTTP/1.1\r\nHost: x\r\nX-Conn-Id: {c20}\r\nContent-Length: {}\r\n\r\n",
        big.len()
    );
    let writer = tokio::spawn(async move {
        if wr.write_all(head.as_bytes()).await.is_ok() {
            let _ = wr.write_all(&big).await;
        }
        wr
    });
    let mut raw = Vec::new();
    let _ = timeout(Duration::from_secs(10), rd.read_to_end(&mut raw))
        .await
        .expect("answer and close within 10 s");
    let text = String::from_utf8_lossy(&raw).to_string();
    assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
    let body_at = text.find("\r\n\r\n").expect("head end") + 4;
    assert!(json_error(&raw[body_at..]).starts_with("node node-a failed: "));
    drop(writer.await);
    assert_eq!(non_probe_paths(&a).await, ["/echo/files/f1"]);
    assert_eq!(non_probe_paths(&b).await, Vec::<String>::new());
    assert_eq!(
        retries("reset").await,
        reset0,
        "(a) and (d) were not retried"
    );

    // (c) GET, node-a resets after reading it: retried on node-b, 200.
    knob(&a, "abort-all").await;
    a.reset_stats().await;
    let r = get(&gw.url("/echo/orders/1"), &[(HDR, c20.as_str())])
        .await
        .expect("get");
    assert_eq!((r.status, node_of(&r)), (200, "node-b".to_string()));
    assert_eq!(non_probe_paths(&a).await, ["/echo/orders/1"]);
    assert_eq!(retries("reset").await, reset0 + 1.0);
    gw.logs
        .wait_for(
            &["retrying on another node", "node-a", "node-b", "reset"],
            Duration::from_secs(2),
        )
        .await;

    // (b) node-a refuses the connect: the POST is retried on node-b with its body intact.
    knob(&a, "abort-all?state=off").await;
    a.kill().await;
    b.reset_stats().await;
    let r = request(
        "POST",
        &gw.url("/echo/orders"),
        &[(HDR, c20b.as_str()), ("content-type", "application/json")],
        order.clone(),
    )
    .await
    .expect("post");
    assert_eq!(r.status, 200, "{}", r.text());
    let echo = r.json();
    assert_eq!(echo["node"], "node-b");
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["body_len"], 20);
    assert_eq!(echo["body_sha256"], sha_hex(&order));
    assert_eq!(echo_header(&echo, "content-length"), ["20"]);
    assert_eq!(non_probe_paths(&b).await, ["/echo/orders"]);
    assert_eq!(retries("connect_error").await, connect0 + 1.0);
    gw.logs
        .wait_for(
            &[
                "retrying on another node",
                "node-a",
                "node-b",
                "connect_error",
            ],
            Duration::from_secs(2),
        )
        .await;
}

// ---------------------------------------------------------------------------------------------
// CASE-21: the first request after idle on a closed pooled socket

/// `tasks` loops of `rounds` x (request, idle 280-320 ms, request); returns (status counts).
async fn idle_rounds(gw: &Gateway, tasks: usize, rounds: usize, post: bool) -> HashMap<u16, u32> {
    let runs = (0..tasks).map(|t| {
        let url = gw.url(if post { "/echo/idle" } else { "/data" });
        async move {
            let mut seen: HashMap<u16, u32> = HashMap::new();
            let send = |url: String| async move {
                if post {
                    request(
                        "POST",
                        &url,
                        &[("content-type", "text/plain")],
                        b"small order body".to_vec(),
                    )
                    .await
                } else {
                    get(&url, &[]).await
                }
            };
            for i in 0..rounds {
                let r = send(url.clone()).await.expect("request");
                *seen.entry(r.status).or_default() += 1;
                if r.status != 200 {
                    json_error(&r.body);
                }
                // 280-320 ms: around the node's 300 ms idle close.
                tokio::time::sleep(Duration::from_millis(280 + ((t * 13 + i * 7) % 41) as u64))
                    .await;
                let r = send(url.clone()).await.expect("request");
                *seen.entry(r.status).or_default() += 1;
                if r.status != 200 {
                    json_error(&r.body);
                }
            }
            seen
        }
    });
    let mut total: HashMap<u16, u32> = HashMap::new();
    for m in futures_util::future::join_all(runs).await {
        for (k, v) in m {
            *total.entry(k).or_default() += v;
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case21_gets_after_the_nodes_idle_close_never_502() {
    let mut a = Mock::start("node-a").await;
    // One node: a retry "on another node" cannot hide a stale-connection failure.
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "")).await;
    knob(&a, "keepalive?idle_ms=300").await;
    let seen = idle_rounds(&gw, 4, 50, false).await;
    assert_eq!(
        seen,
        HashMap::from([(200, 400)]),
        "200 rounds of GET, idle, GET"
    );
    // Every answer came from exactly one delivered request: nothing was sent twice.
    assert_eq!(a.requests().await, 400);
    // The node restarts between two requests: the pooled socket is dead, the GET still succeeds.
    for i in 0..5 {
        assert_eq!(get(&gw.url("/data"), &[]).await.expect("get").status, 200);
        a.restart().await;
        let r = get(&gw.url("/data"), &[]).await.expect("get");
        assert_eq!(r.status, 200, "after restart {i}: {}", r.text());
    }
}

/// CASE-21, RST variant: the node ends idle keep-alive connections with RST instead of FIN
/// (`SO_LINGER` 0); a GET on such a pooled socket is still never a 502. Delivered once, except
/// in the race where the node answers a request just as it resets the idle socket: the RST may
/// discard that answer, and the GET (idempotent) is retried, so the node may count one more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case21_gets_after_the_nodes_idle_reset_never_502() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "")).await;
    knob(&a, "keepalive?idle_ms=300&reset=1").await;
    let seen = idle_rounds(&gw, 4, 25, false).await;
    assert_eq!(
        seen,
        HashMap::from([(200, 200)]),
        "100 rounds of GET, idle, GET"
    );
    let delivered = a.requests().await;
    assert!((200..=202).contains(&delivered), "{delivered} deliveries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case21_advertised_keepalive_and_small_posts_are_never_sent_twice() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "")).await;
    knob(&a, "keepalive?idle_ms=300&advertise=1").await;
    let seen = idle_rounds(&gw, 4, 25, false).await;
    assert_eq!(
        seen,
        HashMap::from([(200, 200)]),
        "100 rounds with Keep-Alive advertised"
    );
    assert_eq!(a.requests().await, 200);
    a.reset_stats().await;
    // POSTs: replayed only when the write itself failed, so a POST the node received is never
    // sent again; one caught by the close exactly while written is a 502, never a duplicate.
    let seen = idle_rounds(&gw, 4, 10, true).await;
    let ok = seen.get(&200).copied().unwrap_or(0);
    assert_eq!(
        ok + seen.get(&502).copied().unwrap_or(0),
        80,
        "only 200 or 502: {seen:?}"
    );
    assert_eq!(
        a.requests().await,
        u64::from(ok),
        "each 200 is one delivery, no POST delivered twice"
    );
    eprintln!("FIGURE case21 POSTs after idle: {seen:?}");
}

// ---------------------------------------------------------------------------------------------
// CASE-22: slow or silent clients

/// Short limits so the slow-client rules fire within a second or two.
const SHORT_LIMITS: &str = "[limits]\nheader_read_timeout = \"1s\"\nbody_idle_timeout = \"1s\"\nbody_min_rate = 1024\nbody_rate_window = \"1s\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case22_silent_body_and_trickled_heads_are_closed_while_gets_keep_answering() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(SHORT_LIMITS, TCP_HEALTH, &[&a], "")).await;
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
    let s = TcpStream::connect(("127.0.0.1", gw.port))
        .await
        .expect("connect");
    let (mut rd, mut wr) = s.into_split();
    let t0 = Instant::now();
    let head = format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n");
    let writer = tokio::spawn(async move {
        if wr.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        for _ in 0..50 {
            if wr.write_all(b"x").await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let mut raw = Vec::new();
    let _ = timeout(Duration::from_secs(8), rd.read_to_end(&mut raw))
        .await
        .expect("cut and closed within 8 s");
    let took = t0.elapsed();
    writer.abort();
    (raw, took)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case22_trickled_body_is_cut_by_the_minimum_rate_and_a_steady_upload_passes() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(SHORT_LIMITS, TCP_HEALTH, &[&a], "")).await;
    let (stop, probe) = prober(&gw);

    // (c) 1,000,000 bytes announced, one byte every 200 ms: never idle for 1 s, but far below 1 KiB/s.
    let (raw, cut_after) = trickled_upload(&gw, "/echo/upload").await;
    let text = String::from_utf8_lossy(&raw).to_string();
    assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
    let msg = json_error(&raw[text.find("\r\n\r\n").expect("head") + 4..]);
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

// ---------------------------------------------------------------------------------------------
// CASE-23: streaming instead of buffering

/// 64 KiB upload chunk `i`: `block` with its first 8 bytes replaced by `i`.
fn upload_chunk(block: &[u8], i: usize) -> Bytes {
    let mut v = block.to_vec();
    v[..8].copy_from_slice(&(i as u64).to_le_bytes());
    Bytes::from(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case23_large_put_to_a_slow_node_streams_with_bounded_memory() {
    const CHUNK: usize = 64 * 1024;
    const TOTAL: usize = 256 * 1024 * 1024;
    const READ_RATE: usize = 64 * 1024 * 1024;
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "timeout = \"60s\"")).await;
    let pid = gw.pid().expect("running");
    for _ in 0..5 {
        assert_eq!(get(&gw.url("/data"), &[]).await.expect("get").status, 200);
    }
    let baseline = rss_kib_of(pid);
    let block = Arc::new(pattern(CHUNK, 23));
    let mut sha = Sha256::new();
    for i in 0..TOTAL / CHUNK {
        sha.update(upload_chunk(&block, i));
    }
    let want = hex::encode(sha.finalize());
    let first_sent = Arc::new(AtomicU64::new(0));
    let stream = futures_util::stream::iter(0..TOTAL / CHUNK).map({
        let (block, first_sent) = (block.clone(), first_sent.clone());
        move |i| {
            if i == 0 {
                first_sent.store(unix_us(), Ordering::Relaxed);
            }
            Ok::<_, Infallible>(Frame::data(upload_chunk(&block, i)))
        }
    });
    let (stop, sampler) = rss_sampler(pid);
    let t0 = Instant::now();
    let mut send = h1_conn(gw.port).await;
    let req = http::Request::put(format!("/echo/big.bin?read_rate={READ_RATE}"))
        .header("host", "big.test")
        .header("content-length", TOTAL.to_string())
        .body(StreamBody::new(stream))
        .expect("request");
    let resp = send.send_request(req).await.expect("response");
    assert_eq!(resp.status(), 200);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let max = sampler.await.expect("sampler");
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo");
    assert_eq!(echo["body_len"], TOTAL as u64);
    assert_eq!(echo["body_sha256"], want.as_str());
    assert_eq!(echo_header(&echo, "content-length"), [TOTAL.to_string()]);
    let first_ms = (echo["first_byte_unix_us"]
        .as_u64()
        .expect("first byte time") as f64
        - first_sent.load(Ordering::Relaxed) as f64)
        / 1000.0;
    let growth = max.saturating_sub(baseline);
    eprintln!("FIGURE case23 256 MiB PUT to a 64 MiB/s reader: {took:?}, node's first body byte after {first_ms:.1} ms, RSS {baseline} -> {max} KiB (+{growth} KiB)");
    // The node's pace held the client back (nothing was buffered ahead of it)...
    assert!(
        took >= Duration::from_millis(3500),
        "{took:?}: faster than the node reads"
    );
    // ...memory stayed bounded, and the first bytes were not held back either.
    assert!(growth < 16 * 1024, "gateway RSS grew by {growth} KiB");
    assert!(
        first_ms < 100.0,
        "node saw the first body byte after {first_ms:.1} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case23_slow_download_and_concurrent_chunked_uploads_keep_memory_bounded() {
    const DOWN: u64 = 128 * 1024 * 1024;
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "timeout = \"60s\"")).await;
    let pid = gw.pid().expect("running");
    for _ in 0..5 {
        assert_eq!(get(&gw.url("/data"), &[]).await.expect("get").status, 200);
    }
    let baseline = rss_kib_of(pid);

    // A 128 MiB download read at 32 MiB/s: the node is held back, the gateway holds nothing.
    let (stop, sampler) = rss_sampler(pid);
    let t0 = Instant::now();
    let mut send = h1_conn::<Empty<Bytes>>(gw.port).await;
    let resp = send
        .send_request(
            http::Request::get(format!("/download?bytes={DOWN}"))
                .header("host", "big.test")
                .body(Empty::new())
                .expect("request"),
        )
        .await
        .expect("response");
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got: u64 = 0;
    while let Some(frame) = body.frame().await {
        if let Some(d) = frame.expect("frame").data_ref() {
            for (j, byte) in d.iter().enumerate() {
                assert_eq!(
                    u64::from(*byte),
                    (got + j as u64) % 251,
                    "download byte {}",
                    got + j as u64
                );
            }
            got += d.len() as u64;
            tokio::time::sleep_until(
                t0 + Duration::from_secs_f64(got as f64 / (32.0 * 1024.0 * 1024.0)),
            )
            .await;
        }
    }
    let down_took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let down_max = sampler.await.expect("sampler");
    assert_eq!(got, DOWN);

    // 16 concurrent chunked uploads of 8 MiB each.
    let (stop, sampler) = rss_sampler(pid);
    let t0 = Instant::now();
    let uploads = (0..16u64).map(|k| {
        let port = gw.port;
        async move {
            let block = pattern(64 * 1024, 100 + k);
            let mut sha = Sha256::new();
            for i in 0..128 {
                sha.update(upload_chunk(&block, i));
            }
            let want = hex::encode(sha.finalize());
            let stream = futures_util::stream::iter(
                (0..128).map(move |i| Ok::<_, Infallible>(Frame::data(upload_chunk(&block, i)))),
            );
            let mut send = h1_conn(port).await;
            let resp = send
                .send_request(
                    http::Request::post(format!("/echo/up-{k}"))
                        .header("host", "big.test")
                        .body(StreamBody::new(stream))
                        .expect("request"),
                )
                .await
                .expect("response");
            assert_eq!(resp.status(), 200);
            let echo: serde_json::Value =
                serde_json::from_slice(&resp.into_body().collect().await.expect("body").to_bytes())
                    .expect("echo");
            assert_eq!(echo["body_len"], 8 * 1024 * 1024);
            assert_eq!(echo["body_sha256"], want.as_str());
            assert_eq!(echo_header(&echo, "transfer-encoding"), ["chunked"]);
        }
    });
    futures_util::future::join_all(uploads).await;
    let up_took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let up_max = sampler.await.expect("sampler");
    let (down_growth, up_growth) = (
        down_max.saturating_sub(baseline),
        up_max.saturating_sub(baseline),
    );
    eprintln!("FIGURE case23 128 MiB download at 32 MiB/s: {down_took:?}, RSS +{down_growth} KiB; 16 x 8 MiB chunked uploads: {up_took:?}, RSS +{up_growth} KiB (baseline {baseline} KiB)");
    assert!(
        down_took >= Duration::from_millis(3500),
        "client pace held: {down_took:?}"
    );
    assert!(
        down_growth < 16 * 1024,
        "download grew RSS by {down_growth} KiB"
    );
    assert!(
        up_growth < 24 * 1024,
        "16 concurrent uploads grew RSS by {up_growth} KiB"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case23_max_body_is_413_up_front_for_a_known_length_and_at_the_limit_for_chunked() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "max_body = 1048576")).await;

    // Known length over the limit: 413 before a byte of body is sent, nothing forwarded.
    let mut c = Raw::connect(gw.port).await;
    let t0 = Instant::now();
    c.send(b"PUT /echo/f HTTP/1.1\r\nHost: x\r\nContent-Length: 2097152\r\n\r\n")
        .await;
    let (h, body) = c.response(Duration::from_secs(2)).await;
    assert_eq!(h.status, 413);
    assert_eq!(json_error(&body), "request body larger than 1048576 bytes");
    assert!(t0.elapsed() < Duration::from_millis(500));
    assert!(c.closed_within(Duration::from_secs(2)).await);
    assert_eq!(a.requests().await, 0);

    // Chunked over the limit: streamed up to the limit, then cut with 413.
    let s = TcpStream::connect(("127.0.0.1", gw.port))
        .await
        .expect("connect");
    let (mut rd, mut wr) = s.into_split();
    let writer = tokio::spawn(async move {
        if wr
            .write_all(b"PUT /echo/f HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
        let chunk = vec![b'z'; 64 * 1024];
        for _ in 0..32 {
            let mut frame = format!("{:x}\r\n", chunk.len()).into_bytes();
            frame.extend_from_slice(&chunk);
            frame.extend_from_slice(b"\r\n");
            if wr.write_all(&frame).await.is_err() {
                return;
            }
        }
        let _ = wr.write_all(b"0\r\n\r\n").await;
    });
    let mut raw = Vec::new();
    let _ = timeout(Duration::from_secs(5), rd.read_to_end(&mut raw))
        .await
        .expect("answered and closed");
    writer.abort();
    let text = String::from_utf8_lossy(&raw).to_string();
    assert!(text.starts_with("HTTP/1.1 413 "), "{text}");
    assert_eq!(
        json_error(&raw[text.find("\r\n\r\n").expect("head") + 4..]),
        "request body larger than 1048576 bytes"
    );
    // Whether the node's handler saw the head before the abort is a race; it never sees a second
    // request, and the cut body never completes there.
    let seen = a.requests().await;
    assert!(
        seen <= 1,
        "at most the one aborted upstream request reaches the node, got {seen}"
    );

    // Under the limit: passes whole.
    let body = pattern(512 * 1024, 231);
    let r = request("PUT", &gw.url("/echo/f"), &[], body.clone())
        .await
        .expect("put");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["body_sha256"], sha_hex(&body));
}

// ---------------------------------------------------------------------------------------------
// Signed conn ids (`[affinity] ids = "signed"`)

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

/// The next text message within `t`, skipping control frames.
async fn ws_text(ws: &mut Ws, t: Duration) -> String {
    use tokio_tungstenite::tungstenite::Message;
    let deadline = Instant::now() + t;
    loop {
        match tokio::time::timeout_at(deadline, ws.next())
            .await
            .expect("a message in time")
        {
            Some(Ok(Message::Text(s))) => return s.to_string(),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("expected text, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_ids_are_issued_on_upgrade_and_forged_ones_get_400_touching_no_binding() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let toml = config("[affinity]\nids = \"signed\"\n", TCP_HEALTH, &[&a, &b], "");
    let gw = Gateway::start_with_env(&toml, &[], &[("HOPGW_SECRET", "case-signed-key-1")]).await;

    // An upgrade without an id gets a signed one, sent to the node and back to the client.
    let (mut ws, resp) = timeout(
        Duration::from_secs(5),
        tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{}/ws", gw.port)),
    )
    .await
    .expect("in time")
    .expect("101");
    let id = resp
        .headers()
        .get("x-conn-id")
        .and_then(|v| v.to_str().ok())
        .expect("issued id")
        .to_string();
    let (uuid, tag) = id.rsplit_once('.').expect("<uuid>.<tag>");
    assert_eq!(uuid.len(), 36, "{id}");
    assert!(
        tag.len() == 64 && tag.bytes().all(|c| c.is_ascii_hexdigit()),
        "{id}"
    );
    assert!(id.len() <= 128);
    let hello: serde_json::Value =
        serde_json::from_str(&ws_text(&mut ws, Duration::from_secs(3)).await).expect("hello JSON");
    assert_eq!(hello["conn_id"], id.as_str());
    let node = hello["node"].as_str().expect("node").to_string();
    ws.close(None).await.expect("close");

    // The issued id is accepted on plain requests and pins the node.
    for _ in 0..3 {
        let r = get(&gw.url("/echo/s"), &[(HDR, &id)]).await.expect("get");
        assert_eq!((r.status, node_of(&r)), (200, node.clone()));
    }
    assert_eq!(
        gw.admin_json(&format!("/admin/conns/{id}")).await["node"],
        node.as_str()
    );
    // A plain request without an id is served and gets no id.
    let r = get(&gw.url("/echo/s"), &[]).await.expect("get");
    assert_eq!((r.status, r.header("x-conn-id")), (200, None));

    // Forged, truncated, re-tagged and unsigned ids: 400 JSON, and no binding is made or moved.
    let forged = [
        format!("{uuid}.{}", "0".repeat(64)),
        id[..id.len() - 2].to_string(),
        format!("{}.{tag}", "0b1f9a3e-6d2c-4f7a-9e41-3c5d8b7a2f10"),
        "c-1001".to_string(),
    ];
    a.reset_stats().await;
    b.reset_stats().await;
    for f in &forged {
        let r = get(&gw.url("/echo/s"), &[(HDR, f)]).await.expect("get");
        assert_eq!(r.status, 400, "{f}");
        assert_eq!(
            json_error(&r.body),
            "invalid x-conn-id header: conn id signature does not verify"
        );
        let r = get(&gw.admin(&format!("/admin/conns/{f}")), &[])
            .await
            .expect("admin");
        assert_eq!(r.status, 404, "{f}: {}", r.text());
    }
    // A forged id on an upgrade: 400, never 101.
    let (h, body) = refused(gw.port, format!("GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nX-Conn-Id: {}\r\n\r\n", forged[0]).as_bytes()).await;
    assert_eq!(h.status, 400);
    json_error(&body);
    assert_eq!(
        (a.requests().await, b.requests().await),
        (0, 0),
        "nothing forwarded"
    );
    assert_eq!(
        gw.admin_json(&format!("/admin/conns/{id}")).await["node"],
        node.as_str()
    );
}

// ---------------------------------------------------------------------------------------------
// Chaos: kill -9 and restart each node in turn, and Redis once, under mixed traffic

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_kill_and_restart_each_node_and_redis() {
    use tokio_tungstenite::tungstenite::Message;
    let started = Instant::now();
    let mut redis = Redis::start().await;
    let mut mocks = [
        Mock::start("node-a").await,
        Mock::start("node-b").await,
        Mock::start("node-c").await,
    ];
    let toml = config(
        "",
        HTTP_HEALTH,
        &mocks.iter().collect::<Vec<_>>(),
        "retries = 2\nwebsocket = \"hop\"",
    );
    let gw = Gateway::start_with(&toml, &["--redis-url", &redis.url()]).await;
    let stop = Arc::new(AtomicBool::new(false));

    // Steady HTTP traffic: GETs with and without bound ids.
    let mut http = tokio::task::JoinSet::new();
    for t in 0..4 {
        let (stop, url) = (stop.clone(), gw.url("/data"));
        http.spawn(async move {
            let (mut n, mut failed) = (0u32, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                let id = format!("c-chaos-{}", (n as usize * 4 + t) % 12);
                let headers: Vec<(&str, &str)> = if n % 2 == 0 {
                    vec![(HDR, id.as_str())]
                } else {
                    vec![]
                };
                match get(&url, &headers).await {
                    Ok(r) if r.status == 200 => {}
                    Ok(r) => failed.push(format!("{} {}", r.status, r.text())),
                    Err(e) => failed.push(e.to_string()),
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (n, failed)
        });
    }
    // Five WebSockets in hop mode, each echoing a message every 200 ms. A message the node took
    // just before it was killed dies with it (a hop re-sends only what the client sent after the
    // failure was seen, SPEC section 5): its loss is excused when a kill came within 3 s after
    // it was sent, and the socket goes on; any other missing echo breaks the socket.
    let kills = Arc::new(std::sync::Mutex::new(Vec::<Instant>::new()));
    let mut sockets = tokio::task::JoinSet::new();
    for i in 0..5 {
        let (stop, kills) = (stop.clone(), kills.clone());
        let url = format!("ws://127.0.0.1:{}/ws", gw.port);
        let mut req =
            tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(url)
                .expect("request");
        req.headers_mut()
            .insert(HDR, format!("ws-chaos-{i}").parse().expect("value"));
        let (mut ws, _) = timeout(
            Duration::from_secs(5),
            tokio_tungstenite::connect_async(req),
        )
        .await
        .expect("in time")
        .expect("101");
        sockets.spawn(async move {
            let (mut sent, mut failed, mut hellos, mut lost) = (0u32, Vec::new(), 0u32, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                sent += 1;
                let msg = format!("m-{i}-{sent}");
                let sent_at = Instant::now();
                if let Err(e) = ws.send(Message::text(msg.clone())).await {
                    failed.push(format!("send {msg}: {e}"));
                    break;
                }
                // Hellos from the node (first, and after each hop) are skipped.
                let echoed = timeout(Duration::from_secs(3), async {
                    loop {
                        match ws.next().await {
                            Some(Ok(Message::Text(t))) if t.as_str() == msg => return Ok(()),
                            Some(Ok(Message::Text(t))) if t.starts_with('{') => {
                                hellos += 1;
                                continue;
                            }
                            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                            other => return Err(format!("{other:?}")),
                        }
                    }
                })
                .await;
                match echoed {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        failed.push(format!("{msg}: {e}"));
                        break;
                    }
                    Err(_) => {
                        let killed_in_flight = kills
                            .lock()
                            .expect("kills")
                            .iter()
                            .any(|k| *k >= sent_at && *k <= sent_at + Duration::from_secs(3));
                        if !killed_in_flight {
                            failed.push(format!("{msg}: no echo in 3 s"));
                            break;
                        }
                        lost.push(msg);
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            (sent, failed, hellos, lost)
        });
    }

    for m in mocks.iter_mut() {
        let id = m.id.clone();
        m.kill().await;
        kills.lock().expect("kills").push(Instant::now());
        gw.wait_node_state(&id, "ejected", Duration::from_secs(5))
            .await;
        m.restart().await;
        gw.wait_node_state(&id, "healthy", Duration::from_secs(5))
            .await;
    }
    redis.kill().await;
    tokio::time::sleep(Duration::from_millis(1500)).await; // traffic keeps flowing on the local cache
    redis.restart().await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);

    let (mut requests, mut failed) = (0, Vec::new());
    while let Some(r) = http.join_next().await {
        let (n, f) = r.expect("http task");
        requests += n;
        failed.extend(f);
    }
    let (mut messages, mut ws_failed, mut ws_hops, mut ws_lost) =
        (0, Vec::new(), Vec::new(), Vec::new());
    while let Some(r) = sockets.join_next().await {
        let (n, f, hellos, lost) = r.expect("ws task");
        messages += n;
        ws_failed.extend(f);
        // At most one message in flight per socket at each of the three node kills.
        assert!(lost.len() <= 3, "messages lost at kills: {lost:?}");
        ws_lost.extend(lost);
        // The node's hello comes first and again after each hop.
        ws_hops.push(hellos.saturating_sub(1));
    }
    let hops = hops_total(&gw).await;
    eprintln!("FIGURE chaos: {requests} GETs, {} failed; {messages} WebSocket echoes, {} failed, lost in flight at a kill {ws_lost:?}, hops per socket {ws_hops:?}; {hops} hops; {:?} total", failed.len(), ws_failed.len(), started.elapsed());
    assert!(failed.is_empty(), "idempotent requests failed: {failed:?}");
    assert!(ws_failed.is_empty(), "WebSockets broke: {ws_failed:?}");
    assert!(
        requests > 200 && messages > 50,
        "{requests} requests, {messages} messages"
    );
    // Each of the five sockets sat on a node that was killed at some point, so each hopped live.
    assert!(
        ws_hops.iter().all(|h| *h >= 1),
        "WebSocket hops per socket: {ws_hops:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(40));
}

// ---------------------------------------------------------------------------------------------
// Path normalisation for route matching (README "Routing")

/// `..`, `%2e%2e`, `%2F`, `//` and `\`: a request is routed by the path the node will resolve. Dot
/// segments are removed before matching and the node receives the path that was matched; a path
/// whose encoded slashes or empty segments a node could read as another route's path is refused
/// with 400, nothing forwarded. Route `admin` (`/echo/admin`) goes to node-b, the rest to node-a.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_normalisation_never_lets_a_node_resolve_another_routes_path() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let toml = format!(
        "{TCP_HEALTH}\n{}\n{}\n[[routes]]\nid = \"admin\"\ncluster = \"adm\"\nmatch = {{ path_prefix = \"/echo/admin\" }}\n\n[[routes]]\nid = \"api\"\ncluster = \"c\"\n",
        cluster_toml("c", &[("node-a", a.addr())], ""),
        cluster_toml("adm", &[("node-b", b.addr())], ""),
    );
    let gw = Gateway::start(&toml).await;
    // (raw target, node, path the node receives)
    let routed = [
        ("/echo/api/../admin/x", "node-b", "/echo/admin/x"),
        ("/echo/api/%2e%2e/admin/x", "node-b", "/echo/admin/x"),
        ("/echo/api/%2E%2E/%2e/admin/x", "node-b", "/echo/admin/x"),
        ("/../../echo/admin/x", "node-b", "/echo/admin/x"),
        ("/echo/admin/../api/x", "node-a", "/echo/api/x"),
        ("/echo/admin/%2e%2e/api/x", "node-a", "/echo/api/x"),
        // Encoded slashes and `//` that every reading routes the same way pass untouched.
        ("/echo/api/a%2Fb", "node-a", "/echo/api/a%2Fb"),
        ("/echo/api//x", "node-a", "/echo/api//x"),
        ("/echo/admin%2Fx", "node-b", "/echo/admin%2Fx"),
    ];
    for (target, node, path) in routed {
        let mut c = Raw::connect(gw.port).await;
        c.send(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await;
        let (h, body) = c.response(Duration::from_secs(5)).await;
        assert_eq!(
            h.status,
            200,
            "{target}: {}",
            String::from_utf8_lossy(&body)
        );
        let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo");
        assert_eq!(
            (echo["node"].as_str(), echo["path"].as_str()),
            (Some(node), Some(path)),
            "{target}"
        );
    }
    a.reset_stats().await;
    b.reset_stats().await;
    // A node decoding `%2F` or merging `//` would resolve these under /echo/admin, which the
    // gateway would have sent to node-b: refused, so neither node ever sees them.
    for target in [
        "/echo/api%2F..%2Fadmin/x",
        "/echo/api%2f%2e%2e%2fadmin/x",
        "/echo/api/..%2Fadmin/x",
        "/echo/api%5C..%5Cadmin/x",
        "/echo//admin/x",
        "//echo/admin/x",
    ] {
        let (h, body) = refused(
            gw.port,
            format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(h.status, 400, "{target}");
        assert_eq!(
            json_error(&body),
            "bad request: path with encoded slashes or empty segments that a node could resolve to another route",
            "{target}"
        );
    }
    // A raw backslash is not a valid target character: 400 (hyper's parser), nothing forwarded.
    let (h, _) = refused(
        gw.port,
        b"GET /echo/api\\..\\admin/x HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    assert_eq!(h.status, 400);
    assert_eq!(
        (a.requests().await, b.requests().await),
        (0, 0),
        "nothing forwarded"
    );
}

// ---------------------------------------------------------------------------------------------
// Signed conn ids: key rotation

/// The conn id the gateway issues to a WebSocket upgrade without one.
async fn issued_id(gw: &Gateway) -> String {
    let (mut ws, resp) = timeout(
        Duration::from_secs(5),
        tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{}/ws", gw.port)),
    )
    .await
    .expect("in time")
    .expect("101");
    let id = resp
        .headers()
        .get("x-conn-id")
        .and_then(|v| v.to_str().ok())
        .expect("issued id")
        .to_string();
    ws.close(None).await.expect("close");
    id
}

/// Key rotation (`affinity.old_secrets_env`): an id signed with the previous key is accepted while
/// that key is listed in `HOPGW_OLD_SECRETS` and binds as usual; once the key is dropped the same id
/// is forged (400 JSON, no binding made). New ids are always signed with the current key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_ids_from_a_rotated_key_pass_only_while_the_key_is_listed() {
    let a = Mock::start("node-a").await;
    let toml = config("[affinity]\nids = \"signed\"\n", TCP_HEALTH, &[&a], "");
    let gw = Gateway::start_with_env(&toml, &[], &[("HOPGW_SECRET", "rotate-key-1")]).await;
    let old = issued_id(&gw).await;
    drop(gw);

    let gw = Gateway::start_with_env(
        &toml,
        &[],
        &[
            ("HOPGW_SECRET", "rotate-key-2"),
            ("HOPGW_OLD_SECRETS", "rotate-key-0, rotate-key-1"),
        ],
    )
    .await;
    let r = get(&gw.url("/echo/s"), &[(HDR, &old)]).await.expect("get");
    assert_eq!((r.status, node_of(&r)), (200, "node-a".to_string()));
    assert_eq!(
        gw.admin_json(&format!("/admin/conns/{old}")).await["node"],
        "node-a"
    );
    let new = issued_id(&gw).await;
    assert_ne!(new, old);
    drop(gw);

    // Only the current key: the old id no longer verifies; the new one does.
    let gw = Gateway::start_with_env(&toml, &[], &[("HOPGW_SECRET", "rotate-key-2")]).await;
    a.reset_stats().await;
    let r = get(&gw.url("/echo/s"), &[(HDR, &old)]).await.expect("get");
    assert_eq!(r.status, 400);
    assert_eq!(
        json_error(&r.body),
        "invalid x-conn-id header: conn id signature does not verify"
    );
    let r = get(&gw.admin(&format!("/admin/conns/{old}")), &[])
        .await
        .expect("admin");
    assert_eq!(r.status, 404, "no binding for a refused id");
    assert_eq!(a.requests().await, 0, "nothing forwarded");
    let r = get(&gw.url("/echo/s"), &[(HDR, &new)]).await.expect("get");
    assert_eq!((r.status, node_of(&r)), (200, "node-a".to_string()));
}

// ---------------------------------------------------------------------------------------------
// Connection limit

/// `[limits] max_connections`: when every permit is taken the gateway logs it once at WARN with
/// the limit, further connections wait in the accept queue (not refused, not served), and a
/// waiting connection is served as soon as one closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_full_logs_once_and_new_connections_wait_for_a_free_slot() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(
        "[limits]\nmax_connections = 2\n",
        TCP_HEALTH,
        &[&a],
        "",
    ))
    .await;
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut c = Raw::connect(gw.port).await;
        c.send(b"GET /data HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let (h, _) = c.response(Duration::from_secs(5)).await;
        assert_eq!(h.status, 200);
        open.push(c);
    }
    gw.logs
        .wait_for(
            &[
                "connection limit reached; new connections wait",
                "max_connections=2",
            ],
            Duration::from_secs(2),
        )
        .await;
    // A third connection: accepted by the kernel, but the gateway takes no request from it.
    let mut third = Raw::connect(gw.port).await;
    third.send(b"GET /data HTTP/1.1\r\nHost: x\r\n\r\n").await;
    let mut byte = [0u8; 1];
    assert!(
        timeout(Duration::from_millis(800), third.s.read(&mut byte))
            .await
            .is_err(),
        "a connection past max_connections was served"
    );
    // One closes: the waiting one is served.
    drop(open.remove(0));
    let t0 = Instant::now();
    let (h, body) = third.response(Duration::from_secs(5)).await;
    assert_eq!(h.status, 200);
    assert_eq!(
        String::from_utf8_lossy(&body),
        format!("Data from Node node-a (Port {})", a.port)
    );
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(
        gw.logs
            .matching(&["connection limit reached; new connections wait"])
            .len(),
        1,
        "logged once per time the limit is reached"
    );
}

// ---------------------------------------------------------------------------------------------
// CASE-16 (h2): an over-long :path

/// CASE-16 (h2): a `:path` past the request-line limit gets the gateway's JSON 414 on its stream;
/// a 60,000-byte `:path` (past the h2 header list limit too) is refused on its stream only (414,
/// 431 or a stream reset), never 502; nothing is forwarded and the connection keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case16_h2_long_path_is_refused_on_its_stream_only() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("", TCP_HEALTH, &[&a], "")).await;
    let mut c = integration_tests::h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let long = format!("/echo?q={}", "a".repeat(20_000));
    let r = c.get(&long, &[]).await.expect("an answer on the stream");
    assert_eq!(r.status, 414, "{}", r.text());
    assert_eq!(json_error(&r.body), "request line longer than 16384 bytes");
    // `http::Uri` (hyper's and this client's) caps a target at 65,534 bytes, so a 70,000-byte
    // `:path` cannot even be built here; hyper's h2 server refuses one on its stream before the
    // gateway runs. 60,000 bytes is past the gateway's h2 header list limit (48 KiB) too.
    let huge = format!("/echo?q={}", "a".repeat(60_000 - 8));
    match c.get(&huge, &[]).await {
        Ok(r) => assert!(
            matches!(r.status, 414 | 431),
            "60,000-byte :path got {} {}",
            r.status,
            r.text()
        ),
        // A stream-level refusal (RST_STREAM), or the client itself declining to send a header
        // list past the gateway's advertised limit: either way that stream only.
        Err(e) => eprintln!("FIGURE case16 h2 60,000-byte :path refused on its stream: {e}"),
    }
    let r = c.get("/echo/after", &[]).await.expect("the next stream");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        !c.send.is_closed() && !c.conn.is_finished(),
        "the connection was closed"
    );
    assert_eq!(
        a.requests().await,
        1,
        "only the control request was forwarded"
    );
}

// ---------------------------------------------------------------------------------------------
// CASE-24 (chunked NDJSON)

/// CASE-24 (chunked NDJSON): a node writing one JSON line every 100 ms, on and on past the 1 s
/// route timeout, reaches the client line by line, each within 100 ms of the node writing it,
/// chunked with no Content-Length added; when the client leaves, the node's connection is closed
/// within 1 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case24_chunked_ndjson_flows_line_by_line_and_client_exit_closes_upstream() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (closed_tx, mut closed_rx) = tokio::sync::mpsc::channel::<Instant>(4);
    let node = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let closed_tx = closed_tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while find(&buf, b"\r\n\r\n").is_none() {
                    let mut chunk = [0u8; 4096];
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return, // a TCP probe
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
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
            });
        }
    });
    let gw = Gateway::start(&config_addrs(
        "",
        TCP_HEALTH,
        &[("node-n", addr)],
        "timeout = \"1s\"",
    ))
    .await;
    let mut send = h1_conn::<Empty<Bytes>>(gw.port).await;
    let resp = send
        .send_request(
            http::Request::get("/stream.ndjson")
                .header("host", "app.example.test")
                .header("accept-encoding", "gzip, br")
                .body(Empty::new())
                .expect("request"),
        )
        .await
        .expect("response head");
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

// ---------------------------------------------------------------------------------------------
// CASE-09 (error variant): GOAWAY with an error code

/// A hand-made h2c node `node-f`: answers every request `200 ok` with `x-node-id: node-f`, except
/// paths ending in `/boom`: it reads those whole, then sends GOAWAY(INTERNAL_ERROR) whose last
/// stream id covers them (they may have been processed) and closes the connection. Counts them.
async fn goaway_error_node() -> (String, Arc<AtomicU64>, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let booms = Arc::new(AtomicU64::new(0));
    let count = booms.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((s, _)) = listener.accept().await else {
                return;
            };
            let count = count.clone();
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(s).await else {
                    return; // a TCP probe
                };
                let (boom_tx, mut boom_rx) =
                    tokio::sync::mpsc::channel::<h2::server::SendResponse<Bytes>>(4);
                loop {
                    tokio::select! {
                        next = conn.accept() => {
                            let Some(Ok((req, mut respond))) = next else { return };
                            let (boom_tx, count) = (boom_tx.clone(), count.clone());
                            tokio::spawn(async move {
                                let boom = req.uri().path().ends_with("/boom");
                                let mut body = req.into_body();
                                while let Some(Ok(chunk)) = body.data().await {
                                    let _ = body.flow_control().release_capacity(chunk.len());
                                }
                                if boom {
                                    count.fetch_add(1, Ordering::SeqCst);
                                    // Kept open (not reset) until the GOAWAY is out.
                                    let _ = boom_tx.send(respond).await;
                                    return;
                                }
                                let resp = http::Response::builder()
                                    .status(200)
                                    .header("x-node-id", "node-f")
                                    .body(())
                                    .expect("response");
                                if let Ok(mut send) = respond.send_response(resp, false) {
                                    let _ = send.send_data(Bytes::from_static(b"ok"), true);
                                }
                            });
                        }
                        Some(held) = boom_rx.recv() => {
                            conn.abrupt_shutdown(h2::Reason::INTERNAL_ERROR);
                            let _ = std::future::poll_fn(|cx| conn.poll_closed(cx)).await;
                            drop(held);
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, booms, task)
}

/// CASE-09 (error variant): a GOAWAY with an error code whose last stream id covers the request
/// means it may have been processed: a POST is not replayed and gets a 502 JSON (the node saw it
/// once, no other node saw it); an idempotent GET in the same position is retried on another node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case09_goaway_with_an_error_code_is_502_for_a_post_and_a_retry_for_a_get() {
    let (addr, booms, node) = goaway_error_node().await;
    let b = Mock::start("node-b").await;
    let toml = format!(
        "{SLOW_HEALTH}\n{}\n[[routes]]\nid = \"api\"\ncluster = \"c\"\nretries = 2\n",
        cluster_toml(
            "c",
            &[("node-f", addr), ("node-b", b.addr())],
            "protocol = \"h2c\""
        ),
    );
    let gw = Gateway::start(&toml).await;
    let c4005 = bind_to(&gw, "c-4005", "node-f").await;
    let c4006 = bind_to(&gw, "c-4006", "node-f").await;
    b.reset_stats().await;

    let r = request(
        "POST",
        &gw.url("/echo/boom"),
        &[
            (HDR, c4005.as_str()),
            ("content-type", "application/octet-stream"),
        ],
        vec![b'p'; 1024],
    )
    .await
    .expect("post");
    assert_eq!(r.status, 502, "{}", r.text());
    let msg = json_error(&r.body);
    assert!(msg.starts_with("node node-f failed: "), "{msg}");
    assert_eq!(booms.load(Ordering::SeqCst), 1, "node-f saw the POST once");
    assert_eq!(non_probe_paths(&b).await, Vec::<String>::new());

    let r = get(&gw.url("/echo/boom"), &[(HDR, c4006.as_str())])
        .await
        .expect("get");
    assert_eq!(
        (r.status, node_of(&r)),
        (200, "node-b".to_string()),
        "{}",
        r.text()
    );
    assert_eq!(booms.load(Ordering::SeqCst), 2);
    assert_eq!(non_probe_paths(&b).await, ["/echo/boom"]);
    node.abort();
}

// ---------------------------------------------------------------------------------------------
// CASE-22: what the node sees of a silent or trickled body

/// A hand-made node that reads one request head and then its body until the connection ends;
/// reports (declared Content-Length, body bytes received, when the connection ended) and never
/// answers, so only the gateway can end the upstream request.
async fn body_watching_node() -> (
    String,
    tokio::sync::mpsc::Receiver<(usize, usize, Instant)>,
    JoinHandle<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let Some(head_end) = read_head(&mut s, &mut buf).await else {
                    return; // a TCP probe, or the gateway gave up
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                let declared: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().expect("cl"))
                    .unwrap_or(0);
                let mut got = buf.len() - head_end;
                loop {
                    let mut chunk = [0u8; 65536];
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got += n,
                    }
                }
                let _ = tx.send((declared, got, Instant::now())).await;
            });
        }
    });
    (addr, rx, task)
}

/// CASE-22 (a) and (c), node side: a body that never comes (`Content-Length: 10`, nothing sent)
/// and a body trickled far below the minimum rate both end with 408 to the client, and the node
/// never gets a complete request: its upstream connection is closed with the body short, within
/// about a second of the 408.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case22_silent_and_trickled_bodies_never_complete_at_the_node_and_upstream_is_aborted() {
    let (addr, mut reports, node) = body_watching_node().await;
    let gw = Gateway::start(&config_addrs(
        SHORT_LIMITS,
        TCP_HEALTH,
        &[("node-w", addr)],
        "",
    ))
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
