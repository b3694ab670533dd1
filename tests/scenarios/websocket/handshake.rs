//! The WebSocket upgrade handshake (CASE-03, CASE-04, the upgrade part of CASE-19): header variants,
//! subprotocols and extensions pass through, mixed-case answers, and 503 when every node is down.

use super::*;

/// CASE-03: `Connection`/`Upgrade` header variants (token order, case, two `Connection` lines,
/// `Upgrade: WebSocket`) give 101 with `Connection: Upgrade` and the node's accept key unchanged;
/// the node gets one `Upgrade: websocket` and a `Connection` with `Upgrade` and no `keep-alive`;
/// the binding picks the node; frames flow both ways.
#[tokio::test]
async fn ws_upgrade_header_variants_reach_the_node_once_case03() {
    let (_a, _b, gw) = two_nodes("hop").await;
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
    let (head, _) = timeout(Duration::from_secs(2), node)
        .await
        .expect("node done")
        .expect("node task");
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    assert!(head.contains("\r\nupgrade: websocket\r\n"), "{head}");
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
    let seen = echoed_headers(&payload);
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
    let seen = echoed_headers(&payload);
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

/// CASE-19: with every node down a WebSocket upgrade gets the route's 503 JSON fallback promptly,
/// never 101.
#[tokio::test]
async fn ws_upgrade_with_all_nodes_down_gets_503_never_101() {
    let (mut a, mut b, gw) = two_nodes("hop").await;
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
        read_some(&mut tcp, &mut body, Duration::from_secs(2), "the body").await;
    }
    let body: Value = serde_json::from_slice(&body[..len]).expect("JSON fallback");
    assert_eq!(
        body,
        json!({"code": -1, "message": "service temporarily unavailable"})
    );
}
