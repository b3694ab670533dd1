//! WebSocket frames after the handshake (CASE-04, CASE-06): control frames come from the node, the idle
//! limit and node pings, and extension frames relayed unmodified.

use super::*;

/// A 1 s WebSocket idle limit (`limits.websocket_idle_timeout`).
const IDLE_1S: &str = "[limits]\nwebsocket_idle_timeout = \"1s\"\n";

/// CASE-06: the client's Ping reaches the node and the only Pong is the node's; a silent socket
/// stays open (no WebSocket idle limit by default) and then delivers the node's text; node pings
/// reach the client.
#[tokio::test]
async fn ws_control_frames_come_from_the_node_and_idle_sockets_stay_open_case06() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("hop", &[&a], "")).await;
    let (mut ws, _) = open_on(&gw, "/ws?report_pings=1&tick_ms=4000", "c-ping").await;
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

/// node-a behind a hop-mode gateway with a 1 s WebSocket idle limit ([`IDLE_1S`]), and a socket
/// to `path` past its hello: (node-a, the gateway, the socket).
async fn idle_1s_socket(path: &str) -> (Mock, Gateway, Ws) {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config("hop", &[&a], IDLE_1S)).await;
    let mut ws = connect(&gw, path, &[]).await;
    hello(&mut ws, Duration::from_secs(2)).await;
    (a, gw, ws)
}

/// CASE-06: the WebSocket idle limit is its own setting (`limits.websocket_idle_timeout`), and when
/// it fires the client gets Close 1001 first.
#[tokio::test]
async fn ws_idle_timeout_sends_1001() {
    let (_a, _gw, mut ws) = idle_1s_socket("/ws").await;
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
    let (_a, _gw, mut ws) = idle_1s_socket("/ws?ping_every_ms=300").await;
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

/// CASE-04 and SPEC 5 "Extensions and subprotocols", on a `hint` route: the node's extension
/// answer (`permessage-deflate`) is relayed verbatim, compressed frames (RSV1) pass unmodified both
/// ways, and when the node vanishes the client gets the 1012 hint.
#[tokio::test]
async fn ws_extension_frames_relay_unmodified_and_a_hint_route_relays_the_answer_verbatim() {
    let ext = "permessage-deflate; server_no_context_takeover; client_max_window_bits=15";
    let (_gw, mut tcp, mut buf) = deflate_frames_pass("hint", ext, ext).await;
    // The node vanished: the hint route's 1012 reconnect hint.
    let (op, payload) = raw_frame(&mut tcp, &mut buf).await;
    assert_eq!(op, 8);
    assert_eq!(u16::from_be_bytes([payload[0], payload[1]]), 1012);
    let hint: Value = serde_json::from_slice(&payload[2..]).expect("JSON reason");
    assert_eq!(hint["reconnect"], true);
}

/// SPEC 5 "Extensions and subprotocols", on a `hop` route: the client is told
/// `client_no_context_takeover` on top of the node's answer (RFC 7692 section 7.1.1.1), so each of
/// its messages can go to any later node; compressed frames still pass unmodified both ways.
#[tokio::test]
async fn ws_a_hop_route_imposes_client_no_context_takeover_and_frames_pass_unmodified() {
    let ext = "permessage-deflate; server_no_context_takeover; client_max_window_bits=15";
    let told = format!("{ext}; client_no_context_takeover");
    let _ = deflate_frames_pass("hop", ext, &told).await;
}

/// One compressed socket through a gateway route with `websocket = mode` to a node that answers
/// the extension offer with `ext` and vanishes after one echo: asserts the client was told `told`
/// and that compressed frames pass unmodified both ways; returns the gateway, the client's socket
/// and the bytes read past the echo.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
async fn deflate_frames_pass(
    mode: &str,
    ext: &'static str,
    told: &str,
) -> (Gateway, TcpStream, Vec<u8>) {
    // "hello" compressed with raw DEFLATE, in a text frame with RSV1 set (RFC 7692).
    let deflated = [0xf2u8, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00];
    let mut first = vec![0xc1, u8::try_from(deflated.len()).expect("short")];
    first.extend_from_slice(&deflated);
    let (addr, node) = fake_node("websocket", ext, first).await;
    let toml = format!(
        "{FAST_HEALTH}\n{}\n[[routes]]\nid = \"ws\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\nwebsocket = \"{mode}\"\n",
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
        [told],
        "the node's answer, as the route's mode tells the client"
    );
    // The node's compressed frame arrives with RSV1 and payload untouched.
    let mut raw = buf.clone();
    fill_to(&mut tcp, &mut raw, 2 + deflated.len(), "frame in time").await;
    assert_eq!(raw[0], 0xc1, "FIN + RSV1 + text");
    assert_eq!(&raw[2..2 + deflated.len()], deflated);
    buf = raw[2 + deflated.len()..].to_vec();
    // A client frame with RSV1 reaches the node with RSV1 set.
    let key = [1u8, 2, 3, 4];
    let mut f = vec![0xc2, 0x80 | u8::try_from(deflated.len()).expect("short")];
    f.extend_from_slice(&key);
    f.extend(deflated.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    tcp.write_all(&f).await.expect("write");
    fill_to(&mut tcp, &mut buf, 2 + deflated.len(), "echo in time").await;
    assert_eq!(buf[0], 0xc2, "the node saw FIN + RSV1 + binary");
    assert_eq!(&buf[2..2 + deflated.len()], deflated);
    buf.drain(..2 + deflated.len());
    let head = String::from_utf8(node.await.expect("node task").0).expect("head");
    assert!(
        head.to_ascii_lowercase()
            .contains("sec-websocket-extensions: permessage-deflate; client_max_window_bits\r\n"),
        "{head}"
    );
    (gw, tcp, buf)
}

/// Reads from `tcp` onto `buf` until it holds at least `len` bytes, each read within 2 s; panics
/// with `in_time` on a timeout, and on a read error or the end of the stream first.
async fn fill_to(tcp: &mut TcpStream, buf: &mut Vec<u8>, len: usize, in_time: &str) {
    while buf.len() < len {
        let mut chunk = [0u8; 64];
        let n = timeout(Duration::from_secs(2), tcp.read(&mut chunk))
            .await
            .expect(in_time)
            .expect("read");
        assert!(n > 0);
        buf.extend_from_slice(&chunk[..n]);
    }
}
