//! Protocols over the TLS listener: ALPN for HTTP/1.1 and HTTP/2, gRPC, `wss://` and RFC
//! 8441 WebSockets that hop.

use super::*;
use integration_tests::check::kill_one_of;
use integration_tests::ws::next_text;

async fn hello<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>) -> Value {
    let text = next_text(ws, Duration::from_secs(3)).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("hello is JSON ({e}): {text}"))
}

/// Sends and reads back messages, then kills the socket's node and checks the same socket is
/// re-dialled to the other node (its hello names `hopped_from`) and keeps echoing.
async fn exchange_and_hop<S>(ws: &mut WebSocketStream<S>, a: &mut Mock, b: &mut Mock)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let first = hello(ws).await;
    let node = first["node"].as_str().expect("node").to_string();
    for i in 0..3 {
        ws.send(Message::text(format!("m{i}"))).await.expect("send");
        assert_eq!(next_text(ws, Duration::from_secs(3)).await, format!("m{i}"));
    }
    let other = kill_one_of(&node, a, b).await;
    ws.send(Message::text("during-hop")).await.expect("send");
    let h = hello(ws).await;
    assert_eq!(h["node"], other, "{h}");
    assert_eq!(h["hopped_from"], node.as_str(), "{h}");
    assert_eq!(h["conn_id"], first["conn_id"], "{h}");
    assert_eq!(next_text(ws, Duration::from_secs(3)).await, "during-hop");
    ws.send(Message::text("after")).await.expect("send");
    assert_eq!(next_text(ws, Duration::from_secs(3)).await, "after");
}

/// ALPN: an h2 client gets HTTP/2 and an http/1.1-only client HTTP/1.1 on the same TLS
/// port, both with `X-Forwarded-Proto: https`; `curl --http2 --cacert` works.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
#[tokio::test]
async fn tls_alpn_gives_h2_and_http11_clients_their_protocol() {
    let a = Mock::start("node-a").await;
    let front = Front::start("alpn test CA", &mock_nodes(&[&a]), "").await;
    let (port, gw) = (front.port, &front.gw);

    let s = front
        .connect(&["h2", "http/1.1"])
        .await
        .expect("h2 handshake");
    assert_eq!(tls::alpn(&s).as_deref(), Some("h2"));
    let mut c = tls::h2(s, &format!("localhost:{port}")).await;
    let r = c.get("/echo", &[]).await.expect("h2 GET");
    assert_eq!(r.status, 200);
    let echo = r.json();
    let proto: Vec<&Value> = echo["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .filter(|p| p[0] == "x-forwarded-proto")
        .collect();
    assert_eq!(proto.len(), 1, "{echo}");
    assert_eq!(proto[0][1], "https");

    let s = front.connect(&["http/1.1"]).await.expect("h1 handshake");
    assert_eq!(tls::alpn(&s).as_deref(), Some("http/1.1"));
    let mut send = tls::http1(s).await.expect("h1");
    let (status, version, body) = tls::h1_get(&mut send, "localhost", "/echo")
        .await
        .expect("h1 GET");
    assert_eq!((status, version), (200, http::Version::HTTP_11));
    let echo: Value = serde_json::from_str(&body).expect("JSON");
    assert!(forwarded_proto(&echo, "https"), "{echo}");
    // The cleartext port still says http.
    let plain = integration_tests::get(&gw.url("/echo"), &[])
        .await
        .expect("cleartext")
        .json();
    assert!(forwarded_proto(&plain, "http"), "{plain}");

    let ca_file = &front.ca.cert;
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--http2", "--cacert"])
        .arg(ca_file)
        .args([
            "-w",
            "\n%{http_version}",
            &format!("https://localhost:{port}/data"),
        ])
        .output()
        .await
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text,
        format!("Data from Node node-a (Port {})\n2", a.port),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(handshakes(gw, "ok").await >= 3.0);
}

/// gRPC over TLS (downstream half): unary `Who` and server-streaming `Ticks` over an
/// h2 TLS connection to a `protocol = "h2c"` cluster end with their messages and `grpc-status: 0`.
#[tokio::test]
async fn tls_grpc_unary_and_streaming_reach_an_h2c_cluster() {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let grpc_addr = a.grpc_addr();
    let front = Front::start(
        "grpc test CA",
        &[("node-a", grpc_addr)],
        "protocol = \"h2c\"",
    )
    .await;
    let port = front.port;
    let s = front.connect(&["h2"]).await.expect("handshake");
    let mut c = tls::h2(s, &format!("localhost:{port}")).await;
    let req = c.request(
        "POST",
        WHO_PATH,
        &grpc_headers(&[]),
        encode_frame(&proto::WhoRequest {}),
    );
    let r = c.fetch(req).await.expect("Who");
    assert_eq!(r.status, 200);
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"));
    let who: Vec<proto::WhoReply> = grpc_messages(&r.body);
    assert_eq!(
        who,
        [proto::WhoReply {
            node: "node-a".into()
        }]
    );
    let req = c.ticks(3);
    let r = c.fetch(req).await.expect("Ticks");
    let ticks: Vec<proto::Tick> = grpc_messages(&r.body);
    assert_eq!(ticks.iter().map(|t| t.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"));
}

/// A `wss://` socket hops when its node is killed and stays open: a WebSocket
/// over TLS (HTTP/1.1) exchanges messages, and when its node dies it is re-dialled to the other
/// node with the client's socket untouched.
#[tokio::test]
async fn tls_wss_socket_hops_when_its_node_is_killed() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let front = Front::start("wss test CA", &mock_nodes(&[&a, &b]), "").await;
    let port = front.port;
    let s = front.connect(&["http/1.1"]).await.expect("handshake");
    let (mut ws, resp) = tokio_tungstenite::client_async(format!("wss://localhost:{port}/ws"), s)
        .await
        .expect("wss upgrade");
    assert_eq!(resp.status(), 101);
    exchange_and_hop(&mut ws, &mut a, &mut b).await;
}

/// RFC 8441: an h2 client opens a WebSocket with an extended CONNECT over TLS (200, no
/// accept key), exchanges messages, and the socket hops to the other node when its node is killed.
#[tokio::test]
async fn tls_rfc8441_websocket_over_h2_exchanges_messages_and_hops() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let front = Front::start("rfc8441 test CA", &mock_nodes(&[&a, &b]), "").await;
    let (port, gw) = (front.port, &front.gw);
    let s = front.connect(&["h2"]).await.expect("handshake");
    assert_eq!(tls::alpn(&s).as_deref(), Some("h2"));
    let (mut ws, head) = h2ws::open(s, &format!("localhost:{port}"), "/ws", &[])
        .await
        .expect("extended CONNECT");
    assert!(
        head.headers.get("sec-websocket-accept").is_none(),
        "{:?}",
        head.headers
    );
    assert!(
        head.headers.get("x-conn-id").is_some(),
        "an issued conn id: {:?}",
        head.headers
    );
    exchange_and_hop(&mut ws, &mut a, &mut b).await;
    // The one socket is still counted open after its hop.
    assert_eq!(
        gw.metric("gateway_active_connections{protocol=\"websocket\"}")
            .await,
        1.0
    );
}

/// Whether the echoed request `echo` carried `x-forwarded-proto: <proto>`.
fn forwarded_proto(echo: &Value, proto: &str) -> bool {
    echo["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .any(|p| p[0] == "x-forwarded-proto" && p[1] == proto)
}
