//! WebSocket framing written byte by byte (SPEC section 5, CASE-28 c, d, f) and the latency
//! owed by every counted WebSocket hop: a 64-bit length with its top bit set gets
//! Close 1002 and reaches no node; an announced length past `websocket_max_message` gets Close
//! 1009 at once without allocating it; a node dying in the middle of a fragmented message it sends
//! ends the client leg with 1012/1011 and never splices another node's frames into it (RFC 6455
//! section 5.4); each counted hop records one `hopping_latency_seconds` observation.

use std::time::Duration;

use integration_tests::{cluster_toml, get, Gateway, Mock, FAST_HEALTH};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

/// The masking key of every frame these tests write.
const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];
/// Probes every 2 s: a node killed during a test is neither degraded nor ejected for seconds.
const SLOW_HEALTH: &str = "[health]\ninterval = \"2s\"\ntimeout = \"1s\"\ndegrade_after = 2\neject_after = 3\nrecover_after = 2\nslow_start = \"0s\"\n";

/// A gateway config: `health`, one cluster `c` of `nodes`, one catch-all route in WebSocket `mode`.
fn config(health: &str, mode: &str, nodes: &[&Mock]) -> String {
    let list: Vec<(&str, String)> = nodes.iter().map(|m| (m.id.as_str(), m.addr())).collect();
    format!(
        "{health}\n{}\n[[routes]]\nid = \"ws\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\nwebsocket = \"{mode}\"\n",
        cluster_toml("c", &list, "")
    )
}

/// A raw client socket after a hand-made upgrade: the stream, bytes read past the 101 head, and
/// the conn id the gateway answered with.
struct Raw {
    tcp: TcpStream,
    buf: Vec<u8>,
    conn_id: String,
}

/// Upgrades `path` by hand (optional extra header `line`); asserts 101.
async fn raw_upgrade(gw: &Gateway, path: &str, line: Option<&str>) -> Raw {
    let mut tcp = TcpStream::connect(("127.0.0.1", gw.port))
        .await
        .expect("connect");
    let extra = line.map(|l| format!("{l}\r\n")).unwrap_or_default();
    let head = format!("GET {path} HTTP/1.1\r\nHost: app.example.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n");
    tcp.write_all(head.as_bytes()).await.expect("write head");
    let mut buf = Vec::new();
    let end = timeout(
        Duration::from_secs(5),
        integration_tests::read_head(&mut tcp, &mut buf),
    )
    .await
    .expect("101 in time")
    .expect("a response head");
    let text = String::from_utf8_lossy(&buf[..end]).to_string();
    assert!(text.starts_with("HTTP/1.1 101"), "{text}");
    let conn_id = text
        .split("\r\n")
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("x-conn-id")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    buf.drain(..end);
    Raw { tcp, buf, conn_id }
}

impl Raw {
    /// The next frame from the gateway within `t`: first octet (FIN, opcode) and payload; `None`
    /// when TCP closed (or reset) first.
    async fn frame(&mut self, t: Duration) -> Option<(u8, Vec<u8>)> {
        let deadline = Instant::now() + t;
        loop {
            if let Some(f) = self.parse() {
                return Some(f);
            }
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout_at(deadline, self.tcp.read(&mut chunk))
                .await
                .expect("a frame or the end of the stream in time");
            match n {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    fn parse(&mut self) -> Option<(u8, Vec<u8>)> {
        let b = &self.buf;
        if b.len() < 2 {
            return None;
        }
        assert_eq!(b[1] & 0x80, 0, "frames to the client are unmasked");
        let (len, at) = integration_tests::ws::frame_len(b)?;
        if b.len() < at + len {
            return None;
        }
        let f = (b[0], b[at..at + len].to_vec());
        self.buf.drain(..at + len);
        Some(f)
    }

    /// The node's hello (first frame: one whole text message) as JSON.
    async fn hello(&mut self) -> Value {
        let (b0, payload) = self.frame(Duration::from_secs(5)).await.expect("hello");
        assert_eq!(b0, 0x81, "hello is one whole text frame");
        serde_json::from_slice(&payload).expect("hello JSON")
    }

    /// Writes `bytes` as they are; false when the gateway has closed the socket.
    async fn write(&mut self, bytes: &[u8]) -> bool {
        self.tcp.write_all(bytes).await.is_ok()
    }
}

/// The close code of a Close frame's payload.
fn code(payload: &[u8]) -> u16 {
    assert!(payload.len() >= 2, "the Close carries a code");
    u16::from_be_bytes([payload[0], payload[1]])
}

/// One masked single-frame text message.
fn masked_text(text: &str) -> Vec<u8> {
    let mut f = vec![0x81, 0x80 | u8::try_from(text.len()).expect("short text")];
    f.extend_from_slice(&MASK);
    f.extend(text.bytes().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
    f
}

/// `ws_messages` of `GET /control/stats`: data messages the node's sockets received.
async fn ws_messages(m: &Mock) -> u64 {
    let r = get(&format!("{}/control/stats", m.url()), &[])
        .await
        .expect("stats");
    r.json()["ws_messages"].as_u64().expect("ws_messages")
}

/// (sum of `hopping_count_total` over every reason, `hopping_latency_seconds_count`).
async fn hop_figures(gw: &Gateway) -> (f64, f64) {
    let text = gw.metrics_text().await;
    let hops = text
        .lines()
        .filter(|l| l.starts_with("hopping_count_total{"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .sum();
    let latency = integration_tests::metric_value(&text, "hopping_latency_seconds_count");
    (hops, latency)
}

/// Opens another socket and has `text` echoed on it: once it is back, the node has handled
/// everything the gateway wrote to it before, so `ws_messages` is final.
async fn echo_on_new_socket(gw: &Gateway, text: &str) {
    let mut raw = raw_upgrade(gw, "/ws", None).await;
    raw.hello().await;
    assert!(raw.write(&masked_text(text)).await, "write");
    let (b0, payload) = raw.frame(Duration::from_secs(5)).await.expect("echo");
    assert_eq!((b0, payload.as_slice()), (0x81, text.as_bytes()));
}

/// CASE-28 c: a binary frame whose 64-bit length has the most significant bit set gets Close
/// 1002 and TCP closes; no data frame reaches the client, and the node received no message
/// (its only message is a later socket's, echoed).
#[tokio::test]
async fn length_with_the_top_bit_set_gets_1002_and_reaches_no_node() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(FAST_HEALTH, "hop", &[&a])).await;
    let mut raw = raw_upgrade(&gw, "/ws", None).await;
    assert_eq!(raw.hello().await["node"], "node-a");
    let mut frame = vec![0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0x01];
    frame.extend_from_slice(&MASK);
    frame.push(MASK[0]);
    assert!(raw.write(&frame).await, "write the frame");
    let (b0, payload) = raw
        .frame(Duration::from_secs(5))
        .await
        .expect("a Close before TCP closes");
    assert_eq!(b0, 0x88, "a Close frame, nothing else first");
    assert_eq!(code(&payload), 1002);
    let end = raw.frame(Duration::from_secs(5)).await;
    assert!(end.is_none(), "TCP closes after the Close, got {end:?}");
    echo_on_new_socket(&gw, "after").await;
    assert_eq!(ws_messages(&a).await, 1, "only the later socket's message");
}

/// CASE-28 d: a frame announcing 2^63-1 octets, its payload trickled one octet per second, gets
/// Close 1009 within 1 s of its header and TCP closes within 5 s; the gateway's RSS grows by
/// less than 4 MiB and the node received no message.
#[tokio::test]
async fn announced_length_past_the_limit_gets_1009_at_once_without_allocating() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(FAST_HEALTH, "hop", &[&a])).await;
    let mut raw = raw_upgrade(&gw, "/ws", None).await;
    raw.hello().await;
    let rss_before = gw.rss_kib();
    let mut header = vec![0x82, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF];
    header.extend_from_slice(&MASK);
    let t0 = Instant::now();
    assert!(raw.write(&header).await, "write the header");
    let (b0, payload) = raw
        .frame(Duration::from_secs(1))
        .await
        .expect("a Close within 1 s");
    let took = t0.elapsed();
    assert_eq!(b0, 0x88, "a Close frame, nothing else first");
    assert_eq!(code(&payload), 1009);
    let reason = String::from_utf8_lossy(&payload[2..]).to_string();
    assert!(reason.contains("websocket_max_message"), "{reason}");
    // Trickle on, one octet per second, until the gateway has closed the connection.
    let mut closed = false;
    for i in 0..5u8 {
        if !raw.write(&[i ^ MASK[usize::from(i) % 4]]).await {
            closed = true;
            break;
        }
        match timeout(Duration::from_secs(1), raw.tcp.read(&mut [0u8; 64])).await {
            Ok(Ok(0) | Err(_)) => {
                closed = true;
                break;
            }
            Ok(Ok(n)) => panic!("{n} more bytes after the Close"),
            Err(_) => {}
        }
    }
    assert!(closed, "TCP still open 5 s after the Close");
    let grown = gw.rss_kib().saturating_sub(rss_before);
    assert!(grown < 4096, "RSS grew by {grown} KiB");
    echo_on_new_socket(&gw, "after").await;
    assert_eq!(ws_messages(&a).await, 1, "only the later socket's message");
    eprintln!("CASE-28 d: Close 1009 after {took:?}, RSS grew by {grown} KiB");
}

/// CASE-28 f (node to client, hop mode): the socket's node is killed after the client got
/// fragment 10 of its 64-fragment message; the client then gets only that node's remaining
/// fragments in order and Close 1012 (hint) or 1011, never a frame of the other node, which a
/// reconnect with the conn id reaches; the hint's hop records one latency observation.
#[tokio::test]
async fn node_dying_mid_message_closes_the_client_without_splicing() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let gw = Gateway::start(&config(FAST_HEALTH, "hop", &[&a, &b])).await;
    let mut raw = raw_upgrade(&gw, "/ws?fragments=64&fragment_ms=100", None).await;
    let on = raw.hello().await["node"]
        .as_str()
        .expect("node")
        .to_string();
    let (dying, other) = if on == "node-a" {
        (&mut a, "node-b")
    } else {
        (&mut b, "node-a")
    };
    let (hops0, lat0) = hop_figures(&gw).await;
    let mut got = 0u32;
    let close = loop {
        let (b0, payload) = raw
            .frame(Duration::from_secs(5))
            .await
            .expect("a fragment or a Close before TCP closes");
        if b0 & 0x0f == 0x8 {
            break payload;
        }
        got += 1;
        let want_b0 = match got {
            1 => 0x02,
            64 => 0x80,
            _ => 0x00,
        };
        assert_eq!(b0, want_b0, "fragment {got}: first octet");
        assert_eq!(
            payload,
            format!("frag-{got};").into_bytes(),
            "fragment {got}"
        );
        assert!(
            got < 64,
            "the whole message passed: the node was not killed in time"
        );
        if got == 10 {
            dying.kill().await;
        }
    };
    assert!(got >= 10, "{got} fragments before the Close");
    let code = code(&close);
    assert!(code == 1012 || code == 1011, "close code {code}");
    let end = raw.frame(Duration::from_secs(5)).await;
    assert!(end.is_none(), "nothing after the Close, got {end:?}");
    // The hint moved the binding: one counted hop, one latency observation.
    let (hops1, lat1) = hop_figures(&gw).await;
    assert_eq!(hops1 - hops0, 1.0, "one hop counted");
    assert_eq!(lat1 - lat0, 1.0, "one latency observation per hop");
    assert!(
        !raw.conn_id.is_empty(),
        "the 101 carries the issued conn id"
    );
    let line = format!("X-Conn-Id: {}", raw.conn_id);
    let mut again = raw_upgrade(&gw, "/ws", Some(&line)).await;
    assert_eq!(again.hello().await["node"], other);
}

/// A WebSocket whose bound node refuses the first dial's connection is retried on
/// the other node; that hop (reason `connect_error`) counts once and records exactly one
/// `hopping_latency_seconds` observation.
#[tokio::test]
async fn first_dial_connect_error_hop_records_one_latency_observation() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let gw = Gateway::start(&config(SLOW_HEALTH, "hop", &[&a, &b])).await;
    let line = "X-Conn-Id: c-dial-1";
    let mut first = raw_upgrade(&gw, "/ws", Some(line)).await;
    let on = first.hello().await["node"]
        .as_str()
        .expect("node")
        .to_string();
    // End the first socket cleanly, so the kill below costs it no hop of its own.
    let mut close = vec![0x88, 0x82];
    close.extend_from_slice(&MASK);
    close.extend([0x03 ^ MASK[0], 0xE8 ^ MASK[1]]);
    assert!(first.write(&close).await, "write Close");
    let reply = first
        .frame(Duration::from_secs(5))
        .await
        .expect("Close reply");
    assert_eq!(reply.0, 0x88);
    assert!(first.frame(Duration::from_secs(5)).await.is_none());
    let (dying, other) = if on == "node-a" {
        (&mut a, "node-b")
    } else {
        (&mut b, "node-a")
    };
    dying.kill().await;
    let (hops0, lat0) = hop_figures(&gw).await;
    let mut again = raw_upgrade(&gw, "/ws", Some(line)).await;
    assert_eq!(again.hello().await["node"], other);
    let (hops1, lat1) = hop_figures(&gw).await;
    assert_eq!(
        gw.metric("hopping_count_total{reason=\"connect_error\"}")
            .await,
        1.0
    );
    assert_eq!(hops1 - hops0, 1.0, "one hop counted");
    assert_eq!(
        lat1 - lat0,
        hops1 - hops0,
        "one latency observation per hop"
    );
}

/// In `hint` mode a node killed under a socket moves the binding (one counted hop)
/// and sends Close 1012; that hop records exactly one `hopping_latency_seconds` observation.
#[tokio::test]
async fn hint_mode_hop_records_one_latency_observation() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let gw = Gateway::start(&config(FAST_HEALTH, "hint", &[&a, &b])).await;
    let mut raw = raw_upgrade(&gw, "/ws", Some("X-Conn-Id: c-hint-lat")).await;
    let on = raw.hello().await["node"]
        .as_str()
        .expect("node")
        .to_string();
    let (hops0, lat0) = hop_figures(&gw).await;
    if on == "node-a" {
        a.kill().await
    } else {
        b.kill().await
    }
    let (b0, payload) = raw.frame(Duration::from_secs(5)).await.expect("a Close");
    assert_eq!((b0, code(&payload)), (0x88, 1012));
    let (hops1, lat1) = hop_figures(&gw).await;
    assert_eq!(hops1 - hops0, 1.0, "one hop counted");
    assert_eq!(
        lat1 - lat0,
        hops1 - hops0,
        "one latency observation per hop"
    );
}
