//! WebSocket scenarios (SPEC section 5; CASE-03, CASE-04, CASE-05, CASE-06, the upgrade part of
//! CASE-19): handshake pass-through, live hop on node death and drain, reconnect hints, close-code
//! relay, control frames, idle timeout and gateway shutdown.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use integration_tests::{cluster_toml, get, request, wait_until, Gateway, Mock, FAST_HEALTH};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, timeout_at, Instant};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::{Bytes, Message};
use tokio_tungstenite::{connect_async, MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

const GAUGE: &str = "gateway_active_connections{protocol=\"websocket\"}";

/// A gateway config with one cluster `c` of `nodes` and one catch-all route in WebSocket `mode`.
fn config(mode: &str, nodes: &[&Mock], extra: &str) -> String {
    let list: Vec<(&str, String)> = nodes.iter().map(|m| (m.id.as_str(), m.addr())).collect();
    format!(
        "{FAST_HEALTH}{extra}\n{}\n[[routes]]\nid = \"ws\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\nwebsocket = \"{mode}\"\n",
        cluster_toml("c", &list, "")
    )
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

/// The next text message within `t`, skipping control frames; a Close fails the test.
async fn next_text(ws: &mut Ws, t: Duration) -> String {
    let deadline = Instant::now() + t;
    loop {
        let m = timeout_at(deadline, ws.next())
            .await
            .expect("a text message in time")
            .expect("socket open")
            .expect("no socket error");
        match m {
            Message::Text(s) => return s.to_string(),
            Message::Close(c) => panic!("the client saw a Close: {c:?}"),
            _ => {}
        }
    }
}

/// The node's hello message (first message of every mock socket).
async fn hello(ws: &mut Ws, t: Duration) -> Value {
    let text = next_text(ws, t).await;
    let v: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("hello is JSON ({e}): {text}"));
    assert!(v["node"].is_string(), "not a hello: {text}");
    v
}

/// Reads until a Close arrives within `t`; returns its code and reason.
async fn close_of(ws: &mut Ws, t: Duration) -> (u16, String) {
    let deadline = Instant::now() + t;
    loop {
        let m = timeout_at(deadline, ws.next())
            .await
            .expect("a Close in time")
            .expect("socket open until the Close")
            .expect("no socket error");
        if let Message::Close(c) = m {
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
    let text = get(&gw.admin("/metrics"), &[])
        .await
        .expect("metrics")
        .text();
    text.lines()
        .filter(|l| l.starts_with("hopping_count_total{"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .sum()
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

/// CASE-05 (`websocket = "hop"`): the node dies under an open WebSocket; the client's socket stays
/// open and keeps flowing on a healthy node (SPEC 5 hop rules).
#[tokio::test]
async fn ws_hops_without_closing_client() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let gw = Gateway::start(&config("hop", &[&a, &b], "")).await;
    let mut ws = connect(
        &gw,
        "/ws",
        &[
            ("X-Conn-Id", "c-hop-1"),
            ("Authorization", "Bearer t0k"),
            ("Cookie", "s=1"),
        ],
    )
    .await;
    let first = hello(&mut ws, Duration::from_secs(2)).await;
    let first_node = first["node"].as_str().expect("node").to_string();
    assert_eq!(
        first,
        json!({"node": first_node, "conn_id": "c-hop-1", "hopped_from": null})
    );
    let other = other_of(&first_node);
    let hops_before = hops(&gw).await;
    let latency_before = gw.metric("hopping_latency_seconds_count").await;

    kill(&mut a, &mut b, &first_node).await;
    let t0 = Instant::now();
    ws.send(Message::text("sent-during-hop"))
        .await
        .expect("client send");
    // next_text fails the test on any Close: the client's socket stays open.
    let h = hello(&mut ws, Duration::from_secs(2)).await;
    assert_eq!(
        h,
        json!({"node": other, "conn_id": "c-hop-1", "hopped_from": first_node})
    );
    assert_eq!(
        next_text(&mut ws, Duration::from_secs(2)).await,
        "sent-during-hop"
    );
    let took = t0.elapsed();
    assert!(took < Duration::from_secs(2), "hop took {took:?}");

    wait_until(
        Duration::from_secs(2),
        "hopping_count_total to rise",
        || async { hops(&gw).await > hops_before },
    )
    .await;
    assert_eq!(
        gw.metric("hopping_latency_seconds_count").await,
        latency_before + 1.0
    );
    let sum = gw.metric("hopping_latency_seconds_sum").await;
    println!(
        "hop latency observed: {:.1} ms (client saw the new hello after {took:?})",
        sum * 1000.0
    );
    assert_eq!(gw.admin_json("/admin/conns/c-hop-1").await["node"], other);
    gw.logs
        .wait_for(
            &[
                "Hopping triggered for conn c-hop-1 from",
                first_node.as_str(),
                other,
            ],
            Duration::from_secs(2),
        )
        .await;

    ws.send(Message::text("still-here"))
        .await
        .expect("client send");
    assert_eq!(
        next_text(&mut ws, Duration::from_secs(2)).await,
        "still-here"
    );
    ws.close(None).await.expect("close");
    wait_gauge(&gw, 0.0).await;
    // One access-log line when the socket ends: 101, the last node, the hop count and byte counts.
    let line = gw
        .logs
        .wait_for(
            &["access", "status=101", "c-hop-1", "hops=1"],
            Duration::from_secs(2),
        )
        .await;
    assert!(
        line.contains(other) && !line.contains("bytes_out=0"),
        "{line}"
    );
}

#[tokio::test]
async fn ws_hops_when_node_drains() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config("hop", &[&a, &b], "")).await;
    let mut ws = connect(&gw, "/ws", &[("X-Conn-Id", "c-drain-1")]).await;
    let first = hello(&mut ws, Duration::from_secs(2)).await;
    let first_node = first["node"].as_str().expect("node").to_string();
    let other = other_of(&first_node);

    let r = request(
        "POST",
        &gw.admin(&format!("/admin/nodes/{first_node}/drain?period=2s")),
        &[],
        Vec::new(),
    )
    .await
    .expect("drain call");
    assert_eq!(r.status, 202);
    let t0 = Instant::now();
    let h = hello(&mut ws, Duration::from_secs(3)).await;
    let took = t0.elapsed();
    assert_eq!(
        h,
        json!({"node": other, "conn_id": "c-drain-1", "hopped_from": first_node})
    );
    assert!(
        took < Duration::from_millis(2200),
        "hopped after {took:?}, past the 2 s drain period"
    );
    ws.send(Message::text("on-the-new-node"))
        .await
        .expect("send");
    assert_eq!(
        next_text(&mut ws, Duration::from_secs(2)).await,
        "on-the-new-node"
    );
    assert!(gw.metric("hopping_count_total{reason=\"draining\"}").await >= 1.0);
}

#[tokio::test]
async fn ws_hint_mode_closes_1012_and_reconnect_lands_on_healthy_node() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let gw = Gateway::start(&config("hint", &[&a, &b], "")).await;
    let mut ws = connect(&gw, "/ws", &[("X-Conn-Id", "c-hint-1")]).await;
    let first_node = hello(&mut ws, Duration::from_secs(2)).await["node"]
        .as_str()
        .expect("node")
        .to_string();
    kill(&mut a, &mut b, &first_node).await;
    let (code, reason) = close_of(&mut ws, Duration::from_secs(2)).await;
    assert_eq!(code, 1012);
    let hint: Value = serde_json::from_str(&reason).expect("reason is JSON");
    assert_eq!(hint["reconnect"], true);
    assert!(hint["retry_ms"].as_u64().is_some(), "retry_ms in {reason}");
    expect_end(&mut ws, Duration::from_secs(2)).await;

    let mut again = connect(&gw, "/ws", &[("X-Conn-Id", "c-hint-1")]).await;
    let h = hello(&mut again, Duration::from_secs(2)).await;
    assert_eq!(h["node"], other_of(&first_node));
    assert_eq!(h["conn_id"], "c-hint-1");
}

#[tokio::test]
async fn ws_hint_mode_spreads_hints_over_the_drain_period() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config("hint", &[&a, &b], "")).await;
    let mut on_a = Vec::new();
    // New ids are placed by rendezvous hashing (SPEC section 7): open sockets until 5 are on node-a.
    for i in 0..40 {
        if on_a.len() == 5 {
            break;
        }
        let id = format!("c-spread-{i}");
        let mut ws = connect(&gw, "/ws", &[("X-Conn-Id", &id)]).await;
        if hello(&mut ws, Duration::from_secs(2)).await["node"] == "node-a" {
            on_a.push(ws);
        }
    }
    assert_eq!(on_a.len(), 5, "5 of up to 40 new ids land on node-a");
    let r = request(
        "POST",
        &gw.admin("/admin/nodes/node-a/drain?period=2s"),
        &[],
        Vec::new(),
    )
    .await
    .expect("drain call");
    assert_eq!(r.status, 202);
    let t0 = Instant::now();
    let waits = on_a.iter_mut().map(|ws| async move {
        let (code, _) = close_of(ws, Duration::from_secs(3)).await;
        assert_eq!(code, 1012);
        t0.elapsed()
    });
    let times = futures_util::future::join_all(waits).await;
    let first = times.iter().min().expect("some");
    let last = times.iter().max().expect("some");
    assert!(
        *last < Duration::from_millis(2300),
        "hints must come within the period: {times:?}"
    );
    assert!(
        *last - *first > Duration::from_millis(200),
        "hints must be spread, not sent at once: {times:?}"
    );
}

/// CASE-05 (`websocket = "close"`): node-a's own Close 1001 "going away" is relayed as is, a FIN
/// or an RST without a Close becomes 1011 (never 1005/1006), each within ~1 s, then TCP closes and
/// the active-connection gauge returns to its baseline.
#[tokio::test]
async fn ws_close_mode_relays_node_close_code_and_1011_when_node_vanishes() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config("close", &[&a, &b], "")).await;
    let baseline = gw.metric(GAUGE).await;

    let mut ws = connect(
        &gw,
        "/ws?tick_ms=100&close_after_ms=300&close_code=1001&close_reason=going%20away",
        &[("X-Conn-Id", "c-2002")],
    )
    .await;
    hello(&mut ws, Duration::from_secs(2)).await;
    assert_eq!(gw.metric(GAUGE).await, baseline + 1.0);
    let t0 = Instant::now();
    assert_eq!(
        close_of(&mut ws, Duration::from_secs(2)).await,
        (1001, "going away".to_string())
    );
    assert!(t0.elapsed() < Duration::from_millis(1300));
    expect_end(&mut ws, Duration::from_secs(2)).await;
    wait_gauge(&gw, baseline).await;

    // FIN, then RST (the mock closes with SO_LINGER 0), without a Close frame: 1011, never 1005/1006.
    for (knob, id) in [
        ("drop_after_ms=300", "c-2003"),
        ("reset_after_ms=300", "c-2005"),
    ] {
        let path = format!("/ws?tick_ms=100&{knob}");
        let mut ws = connect(&gw, &path, &[("X-Conn-Id", id)]).await;
        hello(&mut ws, Duration::from_secs(2)).await;
        let t0 = Instant::now();
        let (code, _) = close_of(&mut ws, Duration::from_secs(2)).await;
        assert_eq!(code, 1011, "{knob}");
        assert!(t0.elapsed() < Duration::from_millis(1300), "{knob}");
        expect_end(&mut ws, Duration::from_secs(2)).await;
        wait_gauge(&gw, baseline).await;
    }
}

/// CASE-05 (`websocket = "hop"`), FIN and RST variants: node-a ends the TCP connection without a
/// Close frame while the process lives on; the client's socket stays open, the next hello comes
/// from a node with `hopped_from` set, and messages keep being echoed.
#[tokio::test]
async fn ws_hop_mode_survives_a_node_ending_the_socket_by_fin_or_rst() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config("hop", &[&a, &b], "")).await;
    for (knob, id) in [
        ("drop_after_ms=300", "c-fin-1"),
        ("reset_after_ms=300", "c-rst-1"),
    ] {
        let mut ws = connect(&gw, &format!("/ws?{knob}"), &[("X-Conn-Id", id)]).await;
        let first = hello(&mut ws, Duration::from_secs(2)).await;
        let first_node = first["node"].as_str().expect("node").to_string();
        // The hop replays the handshake (knob included), so the next leg ends the same way: every
        // leg is served about 300 ms and every hello names the node left.
        let next = hello(&mut ws, Duration::from_secs(3)).await;
        assert_eq!(next["conn_id"], id, "{knob}");
        assert_eq!(next["hopped_from"], first_node.as_str(), "{knob}");
        ws.send(Message::text("after-the-hop"))
            .await
            .expect("client send");
        assert_eq!(
            next_text(&mut ws, Duration::from_secs(2)).await,
            "after-the-hop",
            "{knob}"
        );
        ws.close(None).await.expect("close");
    }
}

/// CASE-05 (`websocket = "close"`): node-a killed (kill -9: the kernel ends its sockets) gives the
/// client 1011 within 1 s, TCP closes, the gauge returns to 0, and a new connect with the same id
/// lands on the healthy node at once.
#[tokio::test]
async fn ws_close_mode_node_killed_gets_1011_and_reconnect_lands_on_healthy_node() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let gw = Gateway::start(&config("close", &[&a, &b], "")).await;
    let mut ws = connect(&gw, "/ws?tick_ms=100", &[("X-Conn-Id", "c-2004")]).await;
    let first_node = hello(&mut ws, Duration::from_secs(2)).await["node"]
        .as_str()
        .expect("node")
        .to_string();
    kill(&mut a, &mut b, &first_node).await;
    let t0 = Instant::now();
    let (code, _) = close_of(&mut ws, Duration::from_secs(2)).await;
    assert_eq!(code, 1011);
    assert!(t0.elapsed() < Duration::from_secs(1));
    expect_end(&mut ws, Duration::from_secs(2)).await;
    wait_gauge(&gw, 0.0).await;
    // At once, before probes eject the dead node: the refused connect moves on to the healthy one.
    let mut again = connect(&gw, "/ws", &[("X-Conn-Id", "c-2004")]).await;
    assert_eq!(
        hello(&mut again, Duration::from_secs(2)).await["node"],
        other_of(&first_node)
    );
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

fn header_values<'a>(headers: &'a [(String, String)], name: &str) -> Vec<&'a str> {
    headers
        .iter()
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .collect()
}

/// Reads one unmasked frame from the gateway; returns opcode and payload.
async fn raw_frame(tcp: &mut TcpStream, buf: &mut Vec<u8>) -> (u8, Vec<u8>) {
    loop {
        if buf.len() >= 2 {
            let (len, at) = match buf[1] & 0x7f {
                126 if buf.len() >= 4 => (usize::from(u16::from_be_bytes([buf[2], buf[3]])), 4),
                127 if buf.len() >= 10 => (
                    usize::try_from(u64::from_be_bytes(buf[2..10].try_into().expect("8 bytes")))
                        .expect("fits"),
                    10,
                ),
                n @ 0..=125 => (usize::from(n), 2),
                _ => (usize::MAX, 0),
            };
            assert_eq!(buf[1] & 0x80, 0, "frames to the client are unmasked");
            if len != usize::MAX && buf.len() >= at + len {
                let op = buf[0] & 0x0f;
                let payload = buf[at..at + len].to_vec();
                buf.drain(..at + len);
                return (op, payload);
            }
        }
        let mut chunk = [0u8; 4096];
        let n = timeout(Duration::from_secs(3), tcp.read(&mut chunk))
            .await
            .expect("frame in time")
            .expect("read");
        assert!(n > 0, "closed before a whole frame");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Writes one masked text frame.
async fn raw_send_text(tcp: &mut TcpStream, text: &str) {
    let key = [0x11u8, 0x22, 0x33, 0x44];
    let mut f = vec![0x81, 0x80 | u8::try_from(text.len()).expect("short text")];
    f.extend_from_slice(&key);
    f.extend(text.bytes().enumerate().map(|(i, b)| b ^ key[i % 4]));
    tcp.write_all(&f).await.expect("write frame");
}

/// CASE-03: `Connection`/`Upgrade` header variants (token order, case, two `Connection` lines,
/// `Upgrade: WebSocket`) give 101 with `Connection: Upgrade` and the node's accept key unchanged;
/// the node gets one `Upgrade: websocket` and a `Connection` with `Upgrade` and no `keep-alive`;
/// the binding picks the node; frames flow both ways.
#[tokio::test]
async fn ws_upgrade_header_variants_reach_the_node_once_case03() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config("hop", &[&a, &b], "")).await;
    let variants: [&[&str]; 5] = [
        &["Connection: keep-alive, Upgrade", "Upgrade: websocket"],
        &["connection: upgrade", "upgrade: websocket"],
        &["Connection: Upgrade, keep-alive", "Upgrade: websocket"],
        &[
            "Connection: keep-alive",
            "Connection: Upgrade",
            "Upgrade: websocket",
        ],
        &["Connection: Upgrade", "Upgrade: WebSocket"],
    ];
    let mut nodes = Vec::new();
    for v in variants {
        let mut lines = v.to_vec();
        lines.push("X-Conn-Id: c-1001");
        let (mut tcp, status, headers, mut buf) =
            raw_upgrade(&gw, "/ws?echo_headers=1", &lines).await;
        assert_eq!(status, 101, "{v:?}: {headers:?}");
        let upgrade = header_values(&headers, "upgrade");
        assert!(
            upgrade.len() == 1 && upgrade[0].eq_ignore_ascii_case("websocket"),
            "{v:?}: {headers:?}"
        );
        assert_eq!(header_values(&headers, "connection"), ["Upgrade"], "{v:?}");
        assert_eq!(
            header_values(&headers, "sec-websocket-accept"),
            ["s3pPLMBiTxaQ9kYGzzhZRbK+xOo="],
            "{v:?}"
        );

        let (op, payload) = raw_frame(&mut tcp, &mut buf).await;
        assert_eq!(op, 1);
        let hello: Value = serde_json::from_slice(&payload).expect("hello JSON");
        let seen: Vec<(String, String)> =
            serde_json::from_value(hello["headers"].clone()).expect("headers echoed");
        assert_eq!(
            header_values(&seen, "upgrade"),
            ["websocket"],
            "{v:?}: node saw {seen:?}"
        );
        let conn = header_values(&seen, "connection");
        assert_eq!(conn.len(), 1, "{v:?}: node saw {seen:?}");
        assert!(
            conn[0]
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade")),
            "{v:?}: {conn:?}"
        );
        assert!(
            !conn[0].to_ascii_lowercase().contains("keep-alive"),
            "{v:?}: {conn:?}"
        );
        assert_eq!(
            header_values(&seen, "sec-websocket-key"),
            ["dGhlIHNhbXBsZSBub25jZQ=="]
        );
        assert_eq!(hello["conn_id"], "c-1001");
        nodes.push(hello["node"].as_str().expect("node").to_string());

        raw_send_text(&mut tcp, "ping-through").await;
        let (op, payload) = raw_frame(&mut tcp, &mut buf).await;
        assert_eq!((op, payload.as_slice()), (1, b"ping-through".as_slice()));
    }
    // The id's binding picks the node as for plain HTTP: every variant went to the bound node.
    let bound = gw.admin_json("/admin/conns/c-1001").await["node"]
        .as_str()
        .expect("bound")
        .to_string();
    assert!(
        nodes.iter().all(|n| *n == bound),
        "{nodes:?} vs binding {bound}"
    );
}

/// CASE-04: subprotocol offers (one line or two) and extension offers reach the node in order; the
/// node's choice (`v10.stomp`, none, or the unoffered `mqtt`) is relayed, never rewritten.
#[tokio::test]
async fn ws_subprotocols_and_extensions_pass_through_case04() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("hop", &[&a], "")).await;
    let ext = "permessage-deflate; client_max_window_bits";

    let offer = [
        "Connection: Upgrade",
        "Upgrade: websocket",
        "Sec-WebSocket-Protocol: v10.stomp, v11.stomp",
    ];
    let mut lines = offer.to_vec();
    let ext_line = format!("Sec-WebSocket-Extensions: {ext}");
    lines.push(&ext_line);
    let (mut tcp, status, headers, mut buf) = raw_upgrade(&gw, "/ws?echo_headers=1", &lines).await;
    assert_eq!(status, 101);
    assert_eq!(
        header_values(&headers, "sec-websocket-protocol"),
        ["v10.stomp"]
    );
    // The mock accepts no extension; the gateway must not invent one.
    assert!(
        header_values(&headers, "sec-websocket-extensions").is_empty(),
        "{headers:?}"
    );
    let (_, payload) = raw_frame(&mut tcp, &mut buf).await;
    let seen: Vec<(String, String)> = serde_json::from_value(
        serde_json::from_slice::<Value>(&payload).expect("hello")["headers"].clone(),
    )
    .expect("headers");
    assert_eq!(
        header_values(&seen, "sec-websocket-protocol"),
        ["v10.stomp, v11.stomp"]
    );
    assert_eq!(header_values(&seen, "sec-websocket-extensions"), [ext]);

    // The offer split over two lines reaches the node as two lines, in order.
    let lines = [
        "Connection: Upgrade",
        "Upgrade: websocket",
        "Sec-WebSocket-Protocol: v10.stomp",
        "Sec-WebSocket-Protocol: v11.stomp",
    ];
    let (mut tcp, status, headers, mut buf) = raw_upgrade(&gw, "/ws?echo_headers=1", &lines).await;
    assert_eq!(status, 101);
    assert_eq!(
        header_values(&headers, "sec-websocket-protocol"),
        ["v10.stomp"]
    );
    let (_, payload) = raw_frame(&mut tcp, &mut buf).await;
    let seen: Vec<(String, String)> = serde_json::from_value(
        serde_json::from_slice::<Value>(&payload).expect("hello")["headers"].clone(),
    )
    .expect("headers");
    assert_eq!(
        header_values(&seen, "sec-websocket-protocol"),
        ["v10.stomp", "v11.stomp"]
    );

    // The node selects nothing: no protocol header, and the socket works.
    let (mut tcp, status, headers, mut buf) = raw_upgrade(&gw, "/ws?protocol=", &offer).await;
    assert_eq!(status, 101);
    assert!(
        header_values(&headers, "sec-websocket-protocol").is_empty(),
        "{headers:?}"
    );
    assert_eq!(raw_frame(&mut tcp, &mut buf).await.0, 1);

    // The node selects something not offered: relayed as is, never rewritten.
    let (mut tcp, status, headers, mut buf) = raw_upgrade(&gw, "/ws?protocol=mqtt", &offer).await;
    assert_eq!(status, 101);
    assert_eq!(header_values(&headers, "sec-websocket-protocol"), ["mqtt"]);
    assert_eq!(raw_frame(&mut tcp, &mut buf).await.0, 1);
}

/// CASE-06: the client's Ping reaches the node and the only Pong is the node's; a silent socket
/// stays open (no WebSocket idle limit by default) and then delivers the node's text; node pings
/// reach the client.
#[tokio::test]
async fn ws_control_frames_come_from_the_node_and_idle_sockets_stay_open_case06() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("hop", &[&a], "")).await;
    let mut ws = connect(
        &gw,
        "/ws?report_pings=1&tick_ms=4000",
        &[("X-Conn-Id", "c-ping")],
    )
    .await;
    hello(&mut ws, Duration::from_secs(2)).await;
    ws.send(Message::Ping(Bytes::from_static(b"hb-1")))
        .await
        .expect("ping");
    let mut pongs = Vec::new();
    let mut reported = false;
    while !reported || pongs.is_empty() {
        match next(&mut ws, Duration::from_secs(2)).await {
            Message::Pong(p) => pongs.push(p),
            Message::Text(t) => {
                assert_eq!(
                    t.as_str(),
                    "ping hb-1",
                    "the node reports the ping it received"
                );
                reported = true;
            }
            m => panic!("unexpected {m:?}"),
        }
    }
    assert_eq!(pongs, [Bytes::from_static(b"hb-1")]);
    // Nothing else: the gateway did not answer the ping itself (that would be a second Pong).
    assert!(
        timeout(Duration::from_millis(500), ws.next())
            .await
            .is_err(),
        "a second answer to one ping"
    );

    // Silent for ~3 s (no idle limit configured): the socket stays open and delivers the node's text.
    let t0 = Instant::now();
    assert_eq!(
        next_text(&mut ws, Duration::from_secs(6)).await,
        "tick node-a 1"
    );
    assert!(t0.elapsed() > Duration::from_secs(2));

    // Node pings reach the client.
    let mut ws = connect(&gw, "/ws?ping_every_ms=200", &[]).await;
    hello(&mut ws, Duration::from_secs(2)).await;
    assert_eq!(
        next(&mut ws, Duration::from_secs(2)).await,
        Message::Ping(Bytes::from_static(b"mock-ping"))
    );
}

/// CASE-06: the WebSocket idle limit is its own setting (`limits.websocket_idle_timeout`), and when
/// it fires the client gets Close 1001 first.
#[tokio::test]
async fn ws_idle_timeout_sends_1001() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(
        "hop",
        &[&a],
        "[limits]\nwebsocket_idle_timeout = \"1s\"\n",
    ))
    .await;
    let mut ws = connect(&gw, "/ws", &[]).await;
    hello(&mut ws, Duration::from_secs(2)).await;
    let t0 = Instant::now();
    let (code, _) = close_of(&mut ws, Duration::from_secs(3)).await;
    assert_eq!(code, 1001);
    let idle = t0.elapsed();
    assert!(
        idle > Duration::from_millis(800) && idle < Duration::from_millis(2000),
        "closed after {idle:?}"
    );
    expect_end(&mut ws, Duration::from_secs(2)).await;
}

/// CASE-06: a socket kept alive only by node pings survives the WebSocket idle limit: with
/// `websocket_idle_timeout = "1s"` and a node ping every 300 ms, the socket stays open for 3.5 s
/// (over three idle periods), every ping reaches the client and no Close comes. (The case's
/// 20 s / 5 min is scaled to 300 ms / 3.5 s against a 1 s limit.)
#[tokio::test]
async fn ws_node_pings_keep_a_socket_open_past_the_idle_limit_case06() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(
        "hop",
        &[&a],
        "[limits]\nwebsocket_idle_timeout = \"1s\"\n",
    ))
    .await;
    let mut ws = connect(&gw, "/ws?ping_every_ms=300", &[]).await;
    hello(&mut ws, Duration::from_secs(2)).await;
    let t0 = Instant::now();
    let mut pings = 0;
    while t0.elapsed() < Duration::from_millis(3500) {
        match next(&mut ws, Duration::from_secs(1)).await {
            Message::Ping(p) => {
                assert_eq!(p, Bytes::from_static(b"mock-ping"));
                pings += 1;
            }
            m => panic!(
                "only node pings expected, got {m:?} after {:?}",
                t0.elapsed()
            ),
        }
    }
    assert!(pings >= 9, "{pings} pings in 3.5 s");
}

#[tokio::test]
async fn ws_gateway_shutdown_sends_1001() {
    let a = Mock::start("node-a").await;
    let mut gw = Gateway::start(&config("hop", &[&a], "")).await;
    let mut ws = connect(&gw, "/ws?tick_ms=100", &[]).await;
    hello(&mut ws, Duration::from_secs(2)).await;
    gw.signal("TERM");
    let (code, _) = close_of(&mut ws, Duration::from_secs(3)).await;
    assert_eq!(code, 1001);
    expect_end(&mut ws, Duration::from_secs(2)).await;
    assert_eq!(gw.wait_exit(Duration::from_secs(5)).await, Some(0));
}

/// CASE-19: with every node down a WebSocket upgrade gets the route's 503 JSON fallback promptly,
/// never 101.
#[tokio::test]
async fn ws_upgrade_with_all_nodes_down_gets_503_never_101() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let gw = Gateway::start(&config("hop", &[&a, &b], "")).await;
    a.kill().await;
    b.kill().await;
    gw.wait_node_state("node-a", "ejected", Duration::from_secs(5))
        .await;
    gw.wait_node_state("node-b", "ejected", Duration::from_secs(5))
        .await;
    let t0 = Instant::now();
    match try_connect(&gw, "/ws", &[("X-Conn-Id", "c-down")]).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 503),
        Err(e) => panic!("expected a 503 answer, got {e}"),
        Ok(_) => panic!("upgraded with every node down"),
    }
    assert!(t0.elapsed() < Duration::from_millis(500));
    // The same upgrade on a raw socket: the route's fallback body, and no 101 ever.
    let (mut tcp, status, headers, mut body) = raw_upgrade(
        &gw,
        "/ws",
        &[
            "Connection: Upgrade",
            "Upgrade: websocket",
            "X-Conn-Id: c-down",
        ],
    )
    .await;
    assert_eq!(status, 503);
    assert_eq!(
        header_values(&headers, "content-type"),
        ["application/json"]
    );
    let len: usize = header_values(&headers, "content-length")
        .first()
        .and_then(|v| v.parse().ok())
        .expect("content-length");
    while body.len() < len {
        let mut chunk = [0u8; 1024];
        let n = timeout(Duration::from_secs(2), tcp.read(&mut chunk))
            .await
            .expect("body in time")
            .expect("read");
        assert!(n > 0, "closed before the body");
        body.extend_from_slice(&chunk[..n]);
    }
    let body: Value = serde_json::from_slice(&body[..len]).expect("JSON fallback");
    assert_eq!(
        body,
        json!({"code": -1, "message": "service temporarily unavailable"})
    );
}

/// As [`config`], with TCP probes so `/control/delay` slows the WebSocket handshake but not probes.
fn config_tcp_probe(mode: &str, nodes: &[&Mock]) -> String {
    let list: Vec<(&str, String)> = nodes.iter().map(|m| (m.id.as_str(), m.addr())).collect();
    format!(
        "{FAST_HEALTH}\n{}\n[[routes]]\nid = \"ws\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\nwebsocket = \"{mode}\"\n",
        cluster_toml("c", &list, "health = { kind = \"tcp\" }")
    )
}

#[tokio::test]
async fn ws_hop_holds_client_messages_until_the_new_node_answers() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let gw = Gateway::start(&config_tcp_probe("hop", &[&a, &b])).await;
    let mut ws = connect(&gw, "/ws", &[("X-Conn-Id", "c-hold-1")]).await;
    let first_node = hello(&mut ws, Duration::from_secs(2)).await["node"]
        .as_str()
        .expect("node")
        .to_string();
    let other = other_of(&first_node);
    // The new node takes 400 ms to answer the re-dial: the client's messages wait in the gateway.
    if other == "node-a" {
        a.delay(400).await
    } else {
        b.delay(400).await
    }
    kill(&mut a, &mut b, &first_node).await;
    let t0 = Instant::now();
    for m in ["m1", "m2", "m3"] {
        ws.send(Message::text(m)).await.expect("send");
    }
    let h = hello(&mut ws, Duration::from_secs(3)).await;
    assert_eq!(
        h,
        json!({"node": other, "conn_id": "c-hold-1", "hopped_from": first_node})
    );
    assert!(
        t0.elapsed() >= Duration::from_millis(350),
        "the re-dial cannot finish before the node answers"
    );
    for m in ["m1", "m2", "m3"] {
        assert_eq!(next_text(&mut ws, Duration::from_secs(2)).await, m);
    }
}

#[tokio::test]
async fn ws_hop_gives_a_hint_when_held_messages_pass_the_bound() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let gw = Gateway::start(&config_tcp_probe("hop", &[&a, &b])).await;
    let mut ws = connect(&gw, "/ws", &[("X-Conn-Id", "c-bound-1")]).await;
    let first_node = hello(&mut ws, Duration::from_secs(2)).await["node"]
        .as_str()
        .expect("node")
        .to_string();
    if other_of(&first_node) == "node-a" {
        a.delay(3000).await
    } else {
        b.delay(3000).await
    }
    kill(&mut a, &mut b, &first_node).await;
    // 1100 messages while the re-dial waits: past the 1024-message bound.
    for i in 0..1100 {
        if ws.send(Message::text(format!("m{i}"))).await.is_err() {
            break;
        }
    }
    let (code, reason) = close_of(&mut ws, Duration::from_secs(3)).await;
    assert_eq!(code, 1012);
    assert_eq!(
        serde_json::from_str::<Value>(&reason).expect("JSON reason")["reconnect"],
        true
    );
}

#[tokio::test]
async fn ws_hop_gives_a_hint_when_no_node_takes_the_socket() {
    let mut a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("hop", &[&a], "")).await;
    let mut ws = connect(&gw, "/ws", &[("X-Conn-Id", "c-alone")]).await;
    hello(&mut ws, Duration::from_secs(2)).await;
    a.kill().await;
    let t0 = Instant::now();
    let (code, reason) = close_of(&mut ws, Duration::from_secs(8)).await;
    let waited = t0.elapsed();
    assert_eq!(code, 1012);
    assert_eq!(
        serde_json::from_str::<Value>(&reason).expect("JSON reason")["reconnect"],
        true
    );
    assert!(
        waited > Duration::from_millis(4500) && waited < Duration::from_millis(6500),
        "hint after {waited:?}, expected the 5 s hop deadline"
    );
    expect_end(&mut ws, Duration::from_secs(2)).await;
}

#[tokio::test]
async fn ws_close_mode_socket_is_closed_at_the_drain_deadline() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config("close", &[&a, &b], "")).await;
    let mut ws = connect(&gw, "/ws", &[("X-Conn-Id", "c-deadline")]).await;
    let first_node = hello(&mut ws, Duration::from_secs(2)).await["node"]
        .as_str()
        .expect("node")
        .to_string();
    let r = request(
        "POST",
        &gw.admin(&format!("/admin/nodes/{first_node}/drain?period=1s")),
        &[],
        Vec::new(),
    )
    .await
    .expect("drain call");
    assert_eq!(r.status, 202);
    let t0 = Instant::now();
    // `close` mode keeps serving the socket through the period, then closes what is left with 1001.
    ws.send(Message::text("during-drain")).await.expect("send");
    assert_eq!(
        next_text(&mut ws, Duration::from_secs(1)).await,
        "during-drain"
    );
    let (code, _) = close_of(&mut ws, Duration::from_secs(3)).await;
    let waited = t0.elapsed();
    assert_eq!(code, 1001);
    assert!(
        waited > Duration::from_millis(800) && waited < Duration::from_millis(1800),
        "closed after {waited:?}"
    );
    expect_end(&mut ws, Duration::from_secs(2)).await;
    let mut again = connect(&gw, "/ws", &[("X-Conn-Id", "c-deadline")]).await;
    assert_eq!(
        hello(&mut again, Duration::from_secs(2)).await["node"],
        other_of(&first_node)
    );
}

/// A one-socket WebSocket node in the test: accepts the upgrade with `extensions`, sends the
/// `first` frame bytes as they are, echoes one client frame with its first byte (FIN, RSV bits,
/// opcode) kept and the mask removed, then closes TCP without a Close frame.
async fn fake_node(
    upgrade: &'static str,
    extensions: &'static str,
    first: Vec<u8>,
) -> (String, tokio::task::JoinHandle<Vec<u8>>) {
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
            tcp.write_all(&echo).await.expect("echo");
            // Give the echo time to leave, then vanish without a Close frame.
            let mut rest = [0u8; 64];
            let _ = timeout(Duration::from_millis(300), tcp.read(&mut rest)).await;
            return text.into_bytes();
        }
    });
    (addr, task)
}

/// CASE-04: the node's extension answer (`permessage-deflate`) is relayed verbatim and compressed
/// frames (RSV1) pass unmodified both ways.
#[tokio::test]
async fn ws_extension_frames_relay_unmodified_and_such_sockets_get_a_hint_instead_of_a_hop() {
    // "hello" compressed with raw DEFLATE, in a text frame with RSV1 set (RFC 7692).
    let deflated = [0xf2u8, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00];
    let mut first = vec![0xc1, u8::try_from(deflated.len()).expect("short")];
    first.extend_from_slice(&deflated);
    let ext = "permessage-deflate; server_no_context_takeover; client_max_window_bits=15";
    let (addr, node) = fake_node("websocket", ext, first).await;
    let toml = format!(
        "{FAST_HEALTH}\n{}\n[[routes]]\nid = \"ws\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\nwebsocket = \"hop\"\n",
        cluster_toml("c", &[("node-x", addr)], "health = { kind = \"tcp\" }")
    );
    let gw = Gateway::start(&toml).await;
    let offer = format!(
        "Sec-WebSocket-Extensions: {}",
        "permessage-deflate; client_max_window_bits"
    );
    let (mut tcp, status, headers, mut buf) = raw_upgrade(
        &gw,
        "/ws",
        &[
            "Connection: Upgrade",
            "Upgrade: websocket",
            "X-Conn-Id: c-deflate",
            &offer,
        ],
    )
    .await;
    assert_eq!(status, 101);
    assert_eq!(
        header_values(&headers, "sec-websocket-extensions"),
        [ext],
        "the node's answer, verbatim"
    );
    // The node's compressed frame arrives with RSV1 and payload untouched.
    let mut raw = buf.clone();
    while raw.len() < 2 + deflated.len() {
        let mut chunk = [0u8; 64];
        let n = timeout(Duration::from_secs(2), tcp.read(&mut chunk))
            .await
            .expect("frame in time")
            .expect("read");
        assert!(n > 0);
        raw.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(raw[0], 0xc1, "FIN + RSV1 + text");
    assert_eq!(&raw[2..2 + deflated.len()], deflated);
    buf = raw[2 + deflated.len()..].to_vec();
    // A client frame with RSV1 reaches the node with RSV1 set.
    let key = [1u8, 2, 3, 4];
    let mut f = vec![0xc2, 0x80 | u8::try_from(deflated.len()).expect("short")];
    f.extend_from_slice(&key);
    f.extend(deflated.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    tcp.write_all(&f).await.expect("write");
    while buf.len() < 2 + deflated.len() {
        let mut chunk = [0u8; 64];
        let n = timeout(Duration::from_secs(2), tcp.read(&mut chunk))
            .await
            .expect("echo in time")
            .expect("read");
        assert!(n > 0);
        buf.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(buf[0], 0xc2, "the node saw FIN + RSV1 + binary");
    assert_eq!(&buf[2..2 + deflated.len()], deflated);
    buf.drain(..2 + deflated.len());
    let head = String::from_utf8(node.await.expect("node task")).expect("head");
    assert!(
        head.to_ascii_lowercase()
            .contains("sec-websocket-extensions: permessage-deflate; client_max_window_bits\r\n"),
        "{head}"
    );
    // The node vanished: a compressed socket cannot move (its context lives on the node): 1012 hint.
    let (op, payload) = raw_frame(&mut tcp, &mut buf).await;
    assert_eq!(op, 8);
    assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), 1012);
    let hint: Value = serde_json::from_slice(&payload[2..]).expect("JSON reason");
    assert_eq!(hint["reconnect"], true);
}

/// CASE-03: a node answering `Upgrade: WebSocket` (mixed case) is relayed fine: the client gets 101
/// with an `Upgrade` token equal to websocket ignoring case and the node's accept key, and frames
/// flow both ways.
#[tokio::test]
async fn ws_node_answering_mixed_case_upgrade_token_is_relayed_case03() {
    let (addr, node) = fake_node("WebSocket", "", vec![0x81, 0x02, b'h', b'i']).await;
    let toml = format!(
        "{FAST_HEALTH}\n{}\n[[routes]]\nid = \"ws\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\nwebsocket = \"close\"\n",
        cluster_toml("c", &[("node-x", addr)], "health = { kind = \"tcp\" }")
    );
    let gw = Gateway::start(&toml).await;
    let (mut tcp, status, headers, mut buf) = raw_upgrade(
        &gw,
        "/ws",
        &[
            "Connection: Upgrade",
            "Upgrade: websocket",
            "X-Conn-Id: c-1002",
        ],
    )
    .await;
    assert_eq!(status, 101, "{headers:?}");
    let upgrade = header_values(&headers, "upgrade");
    assert!(
        upgrade.len() == 1 && upgrade[0].eq_ignore_ascii_case("websocket"),
        "{headers:?}"
    );
    assert_eq!(
        header_values(&headers, "sec-websocket-accept"),
        ["s3pPLMBiTxaQ9kYGzzhZRbK+xOo="]
    );
    assert_eq!(raw_frame(&mut tcp, &mut buf).await, (1, b"hi".to_vec()));
    raw_send_text(&mut tcp, "both ways").await;
    assert_eq!(
        raw_frame(&mut tcp, &mut buf).await,
        (1, b"both ways".to_vec())
    );
    let head = timeout(Duration::from_secs(2), node)
        .await
        .expect("node done")
        .expect("node task");
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.contains("\r\nupgrade: websocket\r\n"), "{head}");
}
