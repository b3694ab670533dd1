//! WebSocket scenarios (SPEC section 5; CASE-03, CASE-04, CASE-05, CASE-06, the upgrade part of
//! CASE-19): handshake pass-through, live hop on node death and drain, reconnect hints, close-code
//! relay, control frames, idle timeout and gateway shutdown (at once, or spread with
//! `shutdown_spread`); hops of sockets with permessage-deflate
//! and subprotocols between third-party peers (Python `websockets`, headless Chromium).

mod close_and_hint;
mod frames;
mod handshake;
mod hop;
mod peers;
mod peers_browser;
mod shutdown_spread;

use futures_util::{SinkExt, StreamExt};
use integration_tests::check::Ws;
use integration_tests::ws::{next_by, next_text};
use integration_tests::{cluster_toml, wait_until, Gateway, Mock, FAST_HEALTH};
use integration_tests::{Cluster, Config, Health, Route};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, timeout_at, Instant};
use tokio_tungstenite::connect_async;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::{Bytes, Message};

const GAUGE: &str = "gateway_active_connections{protocol=\"websocket\"}";

/// A gateway config with one cluster `c` of `nodes` and one catch-all route in WebSocket `mode`.
fn config(mode: &str, nodes: &[&Mock], extra: &str) -> String {
    Config::new()
        .raw_top(extra)
        .health(Health::http_fast())
        .cluster("c", nodes)
        .route(ws_route(mode))
        .toml()
}

/// Route `ws` for every path (`path_prefix = "/"`) to cluster `c` with `websocket = "<mode>"`.
fn ws_route(mode: &str) -> Route {
    Route::prefix("ws", "/", "c").line(&format!("websocket = \"{mode}\""))
}

async fn try_connect(
    gw: &Gateway,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<Ws, tokio_tungstenite::tungstenite::Error> {
    let mut req = format!("ws://127.0.0.1:{}{path}", gw.port)
        .into_client_request()
        .expect("request");
    for (k, v) in headers {
        req.headers_mut().append(
            HeaderName::from_bytes(k.as_bytes()).expect("name"),
            HeaderValue::from_str(v).expect("value"),
        );
    }
    let (ws, resp) = timeout(Duration::from_secs(5), connect_async(req))
        .await
        .expect("handshake in time")?;
    assert_eq!(resp.status(), 101);
    Ok(ws)
}

async fn connect(gw: &Gateway, path: &str, headers: &[(&str, &str)]) -> Ws {
    try_connect(gw, path, headers)
        .await
        .expect("upgrade accepted")
}

/// The next message of any kind within `t`.
async fn next(ws: &mut Ws, t: Duration) -> Message {
    timeout(t, ws.next())
        .await
        .expect("a message in time")
        .expect("socket open")
        .expect("no socket error")
}

/// Starts node-a and node-b and a gateway over them with `websocket = "<mode>"` ([`config`]).
async fn two_nodes(mode: &str) -> (Mock, Mock, Gateway) {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config(mode, &[&a, &b], "")).await;
    (a, b, gw)
}

/// Opens `path` with `X-Conn-Id: id` and reads the node's hello (within 2 s); returns the socket and
/// the id of the node serving it.
async fn open_on(gw: &Gateway, path: &str, id: &str) -> (Ws, String) {
    let mut ws = connect(gw, path, &[("X-Conn-Id", id)]).await;
    let node = hello(&mut ws, Duration::from_secs(2)).await["node"]
        .as_str()
        .expect("node")
        .to_string();
    (ws, node)
}

/// The node's hello message (first message of every mock socket).
async fn hello(ws: &mut Ws, t: Duration) -> Value {
    let text = next_text(ws, t).await;
    let v: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("hello is JSON ({e}): {text}"));
    assert!(v["node"].is_string(), "not a hello: {text}");
    v
}

/// Sends text `text` on `ws` and expects it echoed back within 2 s ([`next_text`]).
async fn echo_back(ws: &mut Ws, text: &str) {
    ws.send(Message::text(text)).await.expect("client send");
    assert_eq!(next_text(ws, Duration::from_secs(2)).await, text);
}

/// Reads until a Close arrives within `t`; returns its code and reason.
async fn close_of(ws: &mut Ws, t: Duration) -> (u16, String) {
    let deadline = Instant::now() + t;
    loop {
        if let Message::Close(c) = next_by(ws, deadline, "a Close").await {
            let c = c.expect("the Close carries a code");
            return (u16::from(c.code), c.reason.to_string());
        }
    }
}

/// After a Close, the gateway closes TCP: the stream ends.
async fn expect_end(ws: &mut Ws, t: Duration) {
    let deadline = Instant::now() + t;
    loop {
        match timeout_at(deadline, ws.next())
            .await
            .expect("TCP closed in time")
        {
            None | Some(Err(_)) => return,
            Some(Ok(Message::Close(_))) => {}
            Some(Ok(m)) => panic!("data after the Close: {m:?}"),
        }
    }
}

/// Sum of `hopping_count_total` over every reason.
async fn hops(gw: &Gateway) -> f64 {
    gw.metric_series("hopping_count_total{").await.0
}

async fn wait_gauge(gw: &Gateway, value: f64) {
    wait_until(
        Duration::from_secs(3),
        &format!("websocket gauge at {value}"),
        || async move { gw.metric(GAUGE).await == value },
    )
    .await;
}

fn other_of(node: &str) -> &'static str {
    if node == "node-a" {
        "node-b"
    } else {
        "node-a"
    }
}

async fn kill(a: &mut Mock, b: &mut Mock, id: &str) {
    if id == "node-a" {
        a.kill().await;
    } else {
        b.kill().await;
    }
}

/// Sends a raw upgrade request; returns the socket, status, response headers (lower-case names)
/// and bytes read past the head.
async fn raw_upgrade(
    gw: &Gateway,
    path: &str,
    lines: &[&str],
) -> (TcpStream, u16, Vec<(String, String)>, Vec<u8>) {
    let mut tcp = TcpStream::connect(("127.0.0.1", gw.port))
        .await
        .expect("connect");
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: app.example.test\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n");
    for l in lines {
        head.push_str(l);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    tcp.write_all(head.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    let end = loop {
        let mut chunk = [0u8; 4096];
        let n = timeout(Duration::from_secs(5), tcp.read(&mut chunk))
            .await
            .expect("response in time")
            .expect("read");
        assert!(
            n > 0,
            "connection closed before the response head: {}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
    };
    let text = String::from_utf8(buf[..end].to_vec()).expect("ascii head");
    let mut lines = text.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    (tcp, status, headers, buf[end + 4..].to_vec())
}

/// The request headers a node echoed in its hello (`?echo_headers=1`), from the frame `payload`.
fn echoed_headers(payload: &[u8]) -> Vec<(String, String)> {
    serde_json::from_value(
        serde_json::from_slice::<Value>(payload).expect("hello")["headers"].clone(),
    )
    .expect("headers")
}

fn header_values<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// Appends what one read of `tcp` gives within `t` to `buf`; panics if none comes in time, the
/// read fails or the connection closes before `what` (e.g. "a whole frame") arrived.
async fn read_some(tcp: &mut TcpStream, buf: &mut Vec<u8>, t: Duration, what: &str) {
    let mut chunk = [0u8; 4096];
    let n = timeout(t, tcp.read(&mut chunk))
        .await
        .unwrap_or_else(|_| panic!("{what} in time"))
        .expect("read");
    assert!(n > 0, "closed before {what}");
    buf.extend_from_slice(&chunk[..n]);
}

/// Reads one unmasked frame from the gateway; returns opcode and payload.
async fn raw_frame(tcp: &mut TcpStream, buf: &mut Vec<u8>) -> (u8, Vec<u8>) {
    loop {
        if buf.len() >= 2 {
            let (len, at) = integration_tests::ws::frame_len(buf).unwrap_or((usize::MAX, 0));
            assert_eq!(buf[1] & 0x80, 0, "frames to the client are unmasked");
            if len != usize::MAX && buf.len() >= at + len {
                let op = buf[0] & 0x0f;
                let payload = buf[at..at + len].to_vec();
                buf.drain(..at + len);
                return (op, payload);
            }
        }
        read_some(tcp, buf, Duration::from_secs(3), "a whole frame").await;
    }
}

/// Writes one masked text frame.
async fn raw_send_text(tcp: &mut TcpStream, text: &str) {
    raw_send(tcp, 0x81, text.as_bytes()).await;
}

/// Writes one masked frame whose first byte (FIN, RSV, opcode) is `b0`, with a short `payload`.
async fn raw_send(tcp: &mut TcpStream, b0: u8, payload: &[u8]) {
    let key = [0x11u8, 0x22, 0x33, 0x44];
    let mut f = vec![
        b0,
        0x80 | u8::try_from(payload.len()).expect("short payload"),
    ];
    f.extend_from_slice(&key);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    tcp.write_all(&f).await.expect("write frame");
}

/// As [`config`], with TCP probes so `/control/delay` slows the WebSocket handshake but not probes.
fn config_tcp_probe(mode: &str, nodes: &[&Mock]) -> String {
    Config::new()
        .health(Health::http_fast())
        .with_cluster(
            Cluster::new("c")
                .line("health = { kind = \"tcp\" }")
                .mocks(nodes),
        )
        .route(ws_route(mode))
        .toml()
}

/// A one-socket WebSocket node in the test: accepts the upgrade with `extensions`, sends the
/// `first` frame bytes as they are, echoes one client frame with its first byte (FIN, RSV bits,
/// opcode) kept and the mask removed, then closes TCP without a Close frame. Its task returns the
/// upgrade request's head and the frame it echoed (as it sent it back).
async fn fake_node(
    upgrade: &'static str,
    extensions: &'static str,
    first: Vec<u8>,
) -> (String, tokio::task::JoinHandle<(Vec<u8>, Vec<u8>)>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let task = tokio::spawn(async move {
        loop {
            let (mut tcp, _) = listener.accept().await.expect("accept");
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            // TCP probes connect and leave: skip them.
            while !head.ends_with(b"\r\n\r\n") {
                match tcp.read(&mut byte).await {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            if !head.ends_with(b"\r\n\r\n") {
                continue;
            }
            let text = String::from_utf8_lossy(&head).to_string();
            let key = text
                .lines()
                .find_map(|l| {
                    l.strip_prefix("sec-websocket-key: ")
                        .or_else(|| l.strip_prefix("Sec-WebSocket-Key: "))
                })
                .expect("key")
                .trim()
                .to_string();
            let accept =
                tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
            let ext_line = if extensions.is_empty() {
                String::new()
            } else {
                format!("Sec-WebSocket-Extensions: {extensions}\r\n")
            };
            let resp = format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: {upgrade}\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n{ext_line}\r\n");
            tcp.write_all(resp.as_bytes()).await.expect("101");
            tcp.write_all(&first).await.expect("first frame");
            let mut hdr = [0u8; 6];
            tcp.read_exact(&mut hdr).await.expect("client frame header");
            let len = usize::from(hdr[1] & 0x7f);
            let mut payload = vec![0u8; len];
            tcp.read_exact(&mut payload).await.expect("client payload");
            for (i, b) in payload.iter_mut().enumerate() {
                *b ^= hdr[2 + i % 4];
            }
            let mut echo = vec![hdr[0], u8::try_from(len).expect("short")];
            echo.extend_from_slice(&payload);
            // The gateway may be gone already (it closed this side after a Close).
            let _ = tcp.write_all(&echo).await;
            // Give the echo time to leave, then vanish without a Close frame.
            let mut rest = [0u8; 64];
            let _ = timeout(Duration::from_millis(300), tcp.read(&mut rest)).await;
            return (text.into_bytes(), echo);
        }
    });
    (addr, task)
}
