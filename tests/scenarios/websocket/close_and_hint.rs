//! WebSocket hint and close modes (CASE-05, SPEC section 5): 1012 hints spread over the drain period,
//! node close codes relayed, 1011 when the node vanishes, the drain deadline and gateway shutdown (1001).

use super::*;

/// In hint mode a killed node's sockets are closed with 1012 and the hint, and a reconnect lands on the healthy node.
#[tokio::test]
async fn ws_hint_mode_closes_1012_and_reconnect_lands_on_healthy_node() {
    let (mut a, mut b, gw) = two_nodes("hint").await;
    let (mut ws, first_node) = open_on(&gw, "/ws", "c-hint-1").await;
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

/// In hint mode the 1012 hints of a draining node are spread over the drain period, not sent at once.
#[tokio::test]
async fn ws_hint_mode_spreads_hints_over_the_drain_period() {
    let (_a, _b, gw) = two_nodes("hint").await;
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
    let r = gw.admin_post("/admin/nodes/node-a/drain?period=2s").await;
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
    let (_a, _b, gw) = two_nodes("close").await;
    let baseline = gw.metric(GAUGE).await;

    let (mut ws, _) = open_on(
        &gw,
        "/ws?tick_ms=100&close_after_ms=300&close_code=1001&close_reason=going%20away",
        "c-2002",
    )
    .await;
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

/// CASE-05 (`websocket = "close"`): node-a killed (kill -9: the kernel ends its sockets) gives the
/// client 1011 within 1 s, TCP closes, the gauge returns to 0, and a new connect with the same id
/// lands on the healthy node at once.
#[tokio::test]
async fn ws_close_mode_node_killed_gets_1011_and_reconnect_lands_on_healthy_node() {
    let (mut a, mut b, gw) = two_nodes("close").await;
    let (mut ws, first_node) = open_on(&gw, "/ws?tick_ms=100", "c-2004").await;
    kill(&mut a, &mut b, &first_node).await;
    let t0 = Instant::now();
    let (code, _) = close_of(&mut ws, Duration::from_secs(2)).await;
    assert_eq!(code, 1011);
    assert!(t0.elapsed() < Duration::from_secs(1));
    expect_end(&mut ws, Duration::from_secs(2)).await;
    wait_gauge(&gw, 0.0).await;
    // At once, before probes eject the dead node: the refused connect moves on to the healthy one.
    lands_on(&gw, "c-2004", other_of(&first_node)).await;
}

/// In close mode a socket on a draining node is closed at the drain deadline.
#[tokio::test]
async fn ws_close_mode_socket_is_closed_at_the_drain_deadline() {
    let (_a, _b, gw) = two_nodes("close").await;
    let (mut ws, first_node) = open_on(&gw, "/ws", "c-deadline").await;
    let r = gw
        .admin_post(&format!("/admin/nodes/{first_node}/drain?period=1s"))
        .await;
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
    lands_on(&gw, "c-deadline", other_of(&first_node)).await;
}

/// A gateway shutting down closes its WebSockets with 1001.
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

/// A new socket to `/ws` with conn id `id` says hello from node `node` within 2 s.
async fn lands_on(gw: &Gateway, id: &str, node: &str) {
    let mut again = connect(gw, "/ws", &[("X-Conn-Id", id)]).await;
    assert_eq!(
        hello(&mut again, Duration::from_secs(2)).await["node"],
        node
    );
}

/// A gateway in `websocket = "close"` mode over the one-socket node `fake_node` sending `first`
/// after the upgrade; returns the gateway, the node's task and the client's raw socket with the
/// bytes read past its 101.
async fn over_fake_node(
    first: Vec<u8>,
) -> (
    Gateway,
    tokio::task::JoinHandle<(Vec<u8>, Vec<u8>)>,
    TcpStream,
    Vec<u8>,
) {
    let (addr, node) = fake_node("websocket", "", first).await;
    let toml = format!(
        "{FAST_HEALTH}\n{}\n[[routes]]\nid = \"ws\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\nwebsocket = \"close\"\n",
        cluster_toml("c", &[("node-x", addr)], "health = { kind = \"tcp\" }")
    );
    let gw = Gateway::start(&toml).await;
    let lines = ["Connection: Upgrade", "Upgrade: websocket"];
    let (tcp, status, headers, buf) = raw_upgrade(&gw, "/ws", &lines).await;
    assert_eq!(status, 101, "{headers:?}");
    (gw, node, tcp, buf)
}

/// The close code of a Close frame's `payload`.
fn code_of(payload: &[u8]) -> u16 {
    u16::from_be_bytes([payload[0], payload[1]])
}

/// RFC 6455 section 7.4.1, SPEC 5: a client's Close carrying a code the RFC reserves for local use
/// (1005, 1006, 1015) never goes on the wire: the node is told 1002 and the client is answered
/// 1002.
#[tokio::test]
async fn ws_client_close_with_a_reserved_code_is_answered_1002_both_ways() {
    for code in [1005u16, 1006, 1015] {
        let (_gw, node, mut tcp, mut buf) = over_fake_node(vec![0x81, 0x02, b'h', b'i']).await;
        assert_eq!(raw_frame(&mut tcp, &mut buf).await, (1, b"hi".to_vec()));
        raw_send(&mut tcp, 0x88, &code.to_be_bytes()).await;
        let (op, payload) = raw_frame(&mut tcp, &mut buf).await;
        assert_eq!((op, code_of(&payload)), (8, 1002), "client sent {code}");
        let (_, to_node) = timeout(Duration::from_secs(2), node)
            .await
            .expect("node done")
            .expect("node task");
        assert_eq!(
            to_node[0], 0x88,
            "the node got a Close (client sent {code})"
        );
        assert_eq!(code_of(&to_node[2..]), 1002, "client sent {code}");
    }
}

/// RFC 6455 section 7.4.1, SPEC 5: a node's Close carrying a reserved code (1006) never reaches
/// the client: the node is answered 1002, and the client (`close` mode) gets 1011 as for a node
/// that vanished without a close code.
#[tokio::test]
async fn ws_node_close_with_a_reserved_code_is_answered_1002_and_never_relayed() {
    let (_gw, node, mut tcp, mut buf) = over_fake_node(vec![0x88, 0x02, 0x03, 0xee]).await;
    let (op, payload) = raw_frame(&mut tcp, &mut buf).await;
    assert_eq!((op, code_of(&payload)), (8, 1011));
    let (_, to_node) = timeout(Duration::from_secs(2), node)
        .await
        .expect("node done")
        .expect("node task");
    assert_eq!(to_node[0], 0x88, "the node got a Close");
    assert_eq!(code_of(&to_node[2..]), 1002);
}
