//! WebSocket hop mode (CASE-05, SPEC section 5): a socket moves to another node on node death, drain,
//! FIN or RST, held client messages wait for the new node, and a hint closes it when no hop is possible.

use super::*;

/// CASE-05 (`websocket = "hop"`): the node dies under an open WebSocket; the client's socket stays
/// open and keeps flowing on a healthy node (SPEC 5 hop rules).
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn ws_hops_without_closing_client() {
    let (mut a, mut b, gw) = two_nodes("hop").await;
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

    echo_back(&mut ws, "still-here").await;
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

/// In hop mode a WebSocket moves to the other node when its node is drained, without closing the client.
#[tokio::test]
async fn ws_hops_when_node_drains() {
    let (_a, _b, gw) = two_nodes("hop").await;
    let mut ws = connect(&gw, "/ws", &[("X-Conn-Id", "c-drain-1")]).await;
    let first = hello(&mut ws, Duration::from_secs(2)).await;
    let first_node = first["node"].as_str().expect("node").to_string();
    let other = other_of(&first_node);

    let r = gw
        .admin_post(&format!("/admin/nodes/{first_node}/drain?period=2s"))
        .await;
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
    echo_back(&mut ws, "on-the-new-node").await;
    assert!(gw.metric("hopping_count_total{reason=\"draining\"}").await >= 1.0);
}

/// CASE-05 (`websocket = "hop"`), FIN and RST variants: node-a ends the TCP connection without a
/// Close frame while the process lives on; the client's socket stays open, the next hello comes
/// from a node with `hopped_from` set, and messages keep being echoed.
#[tokio::test]
async fn ws_hop_mode_survives_a_node_ending_the_socket_by_fin_or_rst() {
    let (_a, _b, gw) = two_nodes("hop").await;
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

/// node-a and node-b behind a hop-mode gateway with TCP probes, a socket with conn id `id`; the
/// other node is made to answer only after `delay_ms` ms, then the socket's node is killed:
/// (node-a, node-b, the gateway, the socket, the killed node's id).
async fn kill_under_slow_redial(id: &str, delay_ms: u64) -> (Mock, Mock, Gateway, Ws, String) {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let gw = Gateway::start(&config_tcp_probe("hop", &[&a, &b])).await;
    let (ws, first_node) = open_on(&gw, "/ws", id).await;
    if other_of(&first_node) == "node-a" {
        a.delay(delay_ms).await
    } else {
        b.delay(delay_ms).await
    }
    kill(&mut a, &mut b, &first_node).await;
    (a, b, gw, ws, first_node)
}

/// During a hop the client's messages are held and delivered, in order, once the new node answers.
#[tokio::test]
async fn ws_hop_holds_client_messages_until_the_new_node_answers() {
    // The new node takes 400 ms to answer the re-dial: the client's messages wait in the gateway.
    let (_a, _b, _gw, mut ws, first_node) = kill_under_slow_redial("c-hold-1", 400).await;
    let other = other_of(&first_node);
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

/// A hop whose held client messages pass the bound gives up and closes the socket with a hint.
#[tokio::test]
async fn ws_hop_gives_a_hint_when_held_messages_pass_the_bound() {
    let (_a, _b, _gw, mut ws, _first_node) = kill_under_slow_redial("c-bound-1", 3000).await;
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

/// A hop with no node left to take the socket closes it with a hint.
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
