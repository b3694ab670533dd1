//! Unbuffered streams (CASE-24): SSE and gRPC server streams that outlive the route timeout, cancels
//! that reach the node, and gRPC deadlines and statuses.

use super::*;

/// An HTTP/1.1 request on a fresh connection; returns the streaming response.
async fn h1_stream(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> (
    hyper::client::conn::http1::SendRequest<http_body_util::Empty<Bytes>>,
    Stream,
) {
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut b = http::Request::builder()
        .uri(path)
        .header("host", "app.example.test");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = send
        .send_request(b.body(http_body_util::Empty::new()).expect("req"))
        .await
        .expect("response head");
    (send, Stream::new(resp))
}

/// CASE-24: SSE head within 200 ms and before any event, each event within 100 ms, no
/// Content-Length, not compressed, not cut by the route timeout; the upstream connection closes
/// within 1 s of the client leaving.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn sse_events_flow_unbuffered_past_the_route_timeout_and_client_exit_closes_upstream() {
    let a = Mock::start("node-a").await;
    let health = &Health::tcp_never().toml();
    let gw = Gateway::start(&config(
        health,
        &[("node-a", a.addr())],
        "",
        "timeout = \"1s\"",
    ))
    .await;
    let sent_at = Instant::now();
    let (send, mut s) = h1_stream(
        gw.port,
        "/sse",
        &[
            ("accept", "text/event-stream"),
            ("accept-encoding", "gzip, br"),
        ],
    )
    .await;
    assert_eq!(s.status, 200);
    assert!(
        s.head_at - sent_at < Duration::from_millis(200),
        "head took {:?}",
        s.head_at - sent_at
    );
    assert_eq!(
        s.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    assert_eq!(s.header("content-length"), None);
    assert_eq!(s.header("content-encoding"), None);
    // 25 events = 2.5 s, well past the 1 s route timeout; event k is sent 100 ms * k after the head.
    let mut pending = String::new();
    let mut seen = 0u64;
    while seen < 25 {
        let (chunk, at) = s
            .next_chunk()
            .await
            .expect("stream alive")
            .expect("stream not ended");
        pending.push_str(std::str::from_utf8(&chunk).expect("utf8"));
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            seen += 1;
            assert_eq!(event, format!("data: node-a {seen}\n\n"));
            let scheduled = s.head_at + Duration::from_millis(100 * seen);
            assert!(
                at < scheduled + Duration::from_millis(100),
                "event {seen} arrived {:?} after it was due",
                at - scheduled
            );
            if seen == 1 {
                assert!(
                    at - s.head_at > Duration::from_millis(50),
                    "the head was held back until the first event"
                );
            }
        }
    }
    assert_eq!(inflight(&gw, "node-a").await, 1);
    assert_eq!(
        established_to(&gw, a.port),
        1,
        "one upstream connection carries the stream"
    );
    // The client leaves: the upstream connection closes within 1 s.
    let left = Instant::now();
    drop(s);
    drop(send);
    wait_until(
        Duration::from_secs(1),
        "upstream SSE connection closed",
        || async { established_to(&gw, a.port) == 0 },
    )
    .await;
    wait_until(
        Duration::from_secs(1),
        "node-a in-flight back to 0",
        || async { inflight(&gw, "node-a").await == 0 },
    )
    .await;
    assert!(left.elapsed() < Duration::from_secs(2));
    gw.logs
        .wait_for(
            &["access", "path=/sse", "status=200"],
            Duration::from_secs(2),
        )
        .await;
}

/// CASE-24 (gRPC server streaming): ticks flow on time past the route timeout; a client cancel
/// resets the upstream stream within 1 s.
#[tokio::test]
async fn grpc_server_stream_flows_promptly_and_cancel_resets_upstream() {
    let (_a, gw, mut c) = grpc_node(FAST_HEALTH, "timeout = \"1s\"").await;

    // A bounded stream: three ticks, then status 0 trailers.
    let req = c.ticks(3);
    let r = c.fetch(req).await.expect("Ticks(3)");
    let ticks: Vec<proto::Tick> = grpc_messages(&r.body);
    assert_eq!(ticks.iter().map(|t| t.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"));
    gw.logs
        .wait_for(
            &[
                "access",
                "path=/hopping.test.v1.Echo/Ticks",
                "grpc_status=0",
            ],
            Duration::from_secs(5),
        )
        .await;

    // An endless stream outlives the 1 s route timeout, each tick on time.
    let req = c.ticks(0);
    let mut s = Stream::new(c.send(req).await.expect("Ticks(0) head"));
    assert_eq!(s.status, 200);
    for seq in 1..=20u64 {
        let (tick, at) = s
            .next_message::<proto::Tick>()
            .await
            .expect("stream alive")
            .expect("a tick");
        assert_eq!((tick.node.as_str(), tick.seq), ("node-a", seq));
        let scheduled = s.head_at + Duration::from_millis(100 * seq);
        assert!(
            at < scheduled + Duration::from_millis(100),
            "tick {seq} arrived {:?} after it was due",
            at - scheduled
        );
    }
    assert_eq!(inflight(&gw, "node-a").await, 1);
    // The client cancels (RST_STREAM): the upstream stream is reset within 1 s.
    drop(s);
    wait_until(
        Duration::from_secs(1),
        "node-a in-flight back to 0 after cancel",
        || async { inflight(&gw, "node-a").await == 0 },
    )
    .await;
    // The connection itself stays usable.
    let req = c.request(
        "POST",
        WHO_PATH,
        &grpc_headers(&[]),
        encode_frame(&proto::WhoRequest {}),
    );
    assert_eq!(
        c.fetch(req)
            .await
            .expect("Who after cancel")
            .trailer("grpc-status")
            .as_deref(),
        Some("0")
    );
}

/// A `grpc-timeout` replaces the route timeout, and errors the gateway makes for gRPC calls are gRPC statuses.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
#[tokio::test]
async fn grpc_deadline_replaces_route_timeout_and_gateway_errors_are_grpc_statuses() {
    let (a, gw, mut c) = grpc_node(TCP_HEALTH, "timeout = \"1s\"").await;
    let who = encode_frame(&proto::WhoRequest {});
    a.delay(1500).await;

    // The client's grpc-timeout (5 s) replaces the 1 s route timeout for the head.
    let req = c.request(
        "POST",
        WHO_PATH,
        &grpc_headers(&[("grpc-timeout", "5S")]),
        who.clone(),
    );
    let r = c.fetch(req).await.expect("slow call within its deadline");
    assert_eq!(
        r.trailer("grpc-status").as_deref(),
        Some("0"),
        "{:?} {:?}",
        r.headers,
        r.trailers
    );

    // Without grpc-timeout the route timeout bounds the head: a gRPC error, not a JSON 504.
    let started = Instant::now();
    let req = c.request("POST", WHO_PATH, &grpc_headers(&[]), who.clone());
    let r = c.fetch(req).await.expect("timed out call");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_millis(1450),
        "answered after {took:?}"
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/grpc")
    );
    // CASE-30 c: a deadline the gateway enforced is DEADLINE_EXCEEDED (4).
    assert_eq!(r.header("grpc-status").as_deref(), Some("4"));
    assert!(
        r.header("grpc-message")
            .is_some_and(|m| m.contains("did not answer within 1000 ms")),
        "{:?}",
        r.headers
    );
    assert_eq!((r.data_frames, r.trailers.is_none()), (0, true));
    gw.logs
        .wait_for(
            &[
                "access",
                "path=/hopping.test.v1.Echo/Who",
                "status=504",
                "grpc_status=4",
            ],
            Duration::from_secs(2),
        )
        .await;

    // No healthy node: the fallback becomes UNAVAILABLE.
    a.delay(0).await;
    drop(a);
    wait_until(Duration::from_secs(5), "node-a ejected", || async {
        gw.node("node-a").await["state"] == "ejected"
    })
    .await;
    // The ejection sent GOAWAY to the connection bound to node-a: the client reconnects.
    wait_until(
        Duration::from_secs(2),
        "GOAWAY on the connection bound to node-a",
        || async { c.send.is_closed() },
    )
    .await;
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let req = c.request("POST", WHO_PATH, &grpc_headers(&[]), who);
    let r = c.fetch(req).await.expect("call with no healthy node");
    assert_eq!(
        (r.status, r.header("grpc-status").as_deref()),
        (200, Some("14"))
    );
}
