//! Streams through a drain (SPEC section 5): h2 GOAWAY, streams closed at the drain deadline (gRPC:
//! `grpc-status: 14`), and a stream on another node left untouched.

use super::*;

/// Opens an h2c connection to the gateway and starts an endless `Ticks` stream on it; returns
/// the connection, the stream and the node of its first tick.
async fn ticks_stream(gw: &Gateway) -> (h2c::H2Conn, Stream, String, u64) {
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let req = c.ticks(0);
    let mut s = Stream::new(c.send(req).await.expect("Ticks head"));
    assert_eq!(s.status, 200);
    let (tick, _) = s
        .next_message::<proto::Tick>()
        .await
        .expect("alive")
        .expect("a tick");
    (c, s, tick.node, tick.seq)
}

/// An h2 client whose connection is tied to a draining node gets a GOAWAY and its next connection lands elsewhere.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn h2_client_gets_goaway_when_its_node_drains() {
    let (a, b, gw) = two_nodes("", "").await;
    let gw_addr = format!("127.0.0.1:{}", gw.port);

    // A connection without X-Conn-Id is its own affinity key: every request lands on one node.
    let mut c = h2c::connect(&gw_addr).await;
    let r = c.get("/echo", &[]).await.expect("first request");
    let first = r.header("x-node-id").expect("x-node-id");
    let issued = r
        .header("x-conn-id")
        .expect("the connection's conn id is returned");
    for _ in 0..4 {
        assert_eq!(
            c.get("/echo", &[])
                .await
                .expect("request")
                .header("x-node-id")
                .as_deref(),
            Some(first.as_str())
        );
    }
    let (slow_node, other) = if first == "node-a" {
        (&a, "node-b")
    } else {
        (&b, "node-a")
    };

    // A slow request in flight on that node, then the node drains.
    slow_node.delay(1000).await;
    let req = c.request("GET", "/echo/slow", &[], Bytes::new());
    let mut send = c.send.clone();
    let slow = tokio::spawn(async move {
        send.ready().await?;
        h2c::read_all(send.send_request(req).await?).await
    });
    wait_until(
        Duration::from_secs(5),
        "the slow request in flight",
        || async { gw.node(&first).await["inflight"] == 1 },
    )
    .await;
    assert_eq!(
        gw.admin_post(&format!("/admin/nodes/{first}/drain?period=5s"))
            .await
            .status,
        202
    );

    // GOAWAY: the connection takes no new streams ...
    gw.logs
        .wait_for(&["sending GOAWAY"], Duration::from_secs(2))
        .await;
    let what = "the client connection to refuse new streams";
    wait_until(Duration::from_secs(2), what, || async {
        c.send.is_closed()
    })
    .await;
    let refused = c.get("/echo", &[]).await;
    assert!(
        refused.is_err(),
        "a new stream on a GOAWAY'd connection succeeded: {:?}",
        refused.map(|r| r.status)
    );
    // ... while the in-flight stream finishes, then the connection ends.
    let r = slow
        .await
        .expect("join")
        .expect("the in-flight request completes");
    assert_eq!(
        (r.status, r.header("x-node-id")),
        (200, Some(first.clone()))
    );
    tokio::time::timeout(Duration::from_secs(2), &mut c.conn)
        .await
        .expect("the connection ends after its last stream")
        .expect("join")
        .expect("clean close");
    // The drained connection's binding is gone with it.
    assert_eq!(
        get(&gw.admin(&format!("/admin/conns/{issued}")), &[])
            .await
            .expect("admin")
            .status,
        404
    );

    // The client's next connection is bound to a healthy node.
    let mut c2 = h2c::connect(&gw_addr).await;
    for _ in 0..3 {
        let r = c2
            .get("/echo", &[])
            .await
            .expect("request on the new connection");
        assert_eq!(r.header("x-node-id").as_deref(), Some(other));
    }
}

/// A gRPC stream still open on a draining node ends with `grpc-status: 14` at the drain deadline.
#[tokio::test]
async fn grpc_stream_ends_with_unavailable_at_the_drain_deadline() {
    let (_a, _b, gw) = two_grpc_nodes("").await;
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let req = c.ticks(0);
    let mut s = Stream::new(c.send(req).await.expect("Ticks head"));
    let (tick, _) = s
        .next_message::<proto::Tick>()
        .await
        .expect("alive")
        .expect("a tick");
    let node = tick.node.clone();
    let r = gw
        .admin_post(&format!("/admin/nodes/{node}/drain?period=1s"))
        .await;
    let deadline = Instant::now() + Duration::from_secs(1);
    assert_eq!(r.status, 202);
    // Ticks keep flowing until the deadline, then UNAVAILABLE trailers end the stream.
    let mut last = tick.seq;
    let ended = loop {
        match s
            .next_message::<proto::Tick>()
            .await
            .expect("the stream ends with trailers, not a reset")
        {
            Some((t, _)) => {
                assert_eq!((t.node.as_str(), t.seq), (node.as_str(), last + 1));
                last = t.seq;
            }
            None => break Instant::now(),
        }
    };
    assert!(
        ended + Duration::from_millis(50) >= deadline,
        "stream ended {:?} before the deadline",
        deadline - ended
    );
    assert!(
        ended < deadline + Duration::from_millis(500),
        "stream ended {:?} after the deadline",
        ended - deadline
    );
    assert!(last >= 5, "only {last} ticks before the deadline");
    assert_eq!(s.trailer("grpc-status").as_deref(), Some("14"));
    assert!(s
        .trailer("grpc-message")
        .is_some_and(|m| m.contains("drain")));
    gw.logs
        .wait_for(
            &[
                "access",
                "path=/hopping.test.v1.Echo/Ticks",
                "grpc_status=14",
            ],
            Duration::from_secs(2),
        )
        .await;
    wait_until(
        Duration::from_secs(1),
        "no stream left on the drained node",
        || async { gw.node(&node).await["inflight"] == 0 },
    )
    .await;
    assert_eq!(gw.node(&node).await["state"], "draining");
}

/// A plain HTTP stream still open on a draining node is cut at the drain deadline.
#[tokio::test]
async fn plain_stream_is_cut_at_the_drain_deadline() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(&[("node-a", a.addr())], "", "")).await;
    let tcp = TcpStream::connect(("127.0.0.1", gw.port))
        .await
        .expect("connect");
    let (mut send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let req = http::Request::get("/sse")
        .header("host", "app.example.test")
        .body(http_body_util::Empty::<Bytes>::new())
        .expect("req");
    let mut s = Stream::new(send.send_request(req).await.expect("head"));
    s.next_chunk().await.expect("alive").expect("an event");
    assert_eq!(
        gw.admin_post("/admin/nodes/node-a/drain?period=500ms")
            .await
            .status,
        202
    );
    let deadline = Instant::now() + Duration::from_millis(500);
    let err = loop {
        match s.next_chunk().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream ended cleanly; a cut stream must not look complete"),
            Err(e) => break e,
        }
    };
    let now = Instant::now();
    assert!(
        now + Duration::from_millis(50) >= deadline && now < deadline + Duration::from_millis(500),
        "cut at {:?} from the deadline",
        now.checked_duration_since(deadline)
    );
    // HTTP/1.1: the chunked body stops without its last chunk, so the client sees a failed read.
    assert!(
        err.is_incomplete_message()
            || err.is_body_write_aborted()
            || err.to_string().contains("body"),
        "unexpected error: {err}"
    );
}

/// A gRPC stream on one node is untouched by the drain of another node.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn grpc_stream_survives_the_drain_of_another_node_untouched() {
    let (_a, _b, gw) = two_grpc_nodes("").await;
    // One stream on each node (each h2 connection is bound to the node of its first stream).
    let mut on_a = None;
    let mut on_b = None;
    for _ in 0..10 {
        let (c, s, node, seq) = ticks_stream(&gw).await;
        match node.as_str() {
            "node-a" if on_a.is_none() => on_a = Some((c, s, seq)),
            "node-b" if on_b.is_none() => on_b = Some((c, s, seq)),
            _ => {}
        }
        if on_a.is_some() && on_b.is_some() {
            break;
        }
    }
    let (Some((mut keep_c, mut keep, mut last)), Some((_drained_c, mut drained, _))) = (on_a, on_b)
    else {
        panic!("10 connections did not spread over both nodes");
    };

    let period = Duration::from_secs(1);
    assert_eq!(
        gw.admin_post("/admin/nodes/node-b/drain?period=1s")
            .await
            .status,
        202
    );
    let deadline = Instant::now() + period;
    // The stream on node-b is ended at the drain deadline with UNAVAILABLE ...
    let cut = tokio::spawn(async move {
        while drained
            .next_message::<proto::Tick>()
            .await
            .expect("the drained stream ends with trailers, not a reset")
            .is_some()
        {}
        (drained.trailer("grpc-status"), Instant::now())
    });
    // ... while node-a's stream goes on untouched through the deadline and past it: every tick in
    // order, from node-a, at its 100 ms pace.
    let until = deadline + Duration::from_millis(1500);
    let mut prev_at = Instant::now();
    let mut seen = 0;
    while Instant::now() < until {
        let (t, at) =
            tokio::time::timeout(Duration::from_secs(2), keep.next_message::<proto::Tick>())
                .await
                .expect("a tick within 2 s")
                .expect("the stream on node-a is not reset")
                .expect("the stream on node-a does not end");
        assert_eq!((t.node.as_str(), t.seq), ("node-a", last + 1));
        assert!(
            at - prev_at < Duration::from_millis(900),
            "a {:?} gap in node-a's ticks",
            at - prev_at
        );
        last = t.seq;
        prev_at = at;
        seen += 1;
    }
    assert!(seen >= 15, "only {seen} ticks in 2.5 s");
    let (status, ended) = cut.await.expect("join");
    assert_eq!(status.as_deref(), Some("14"));
    assert!(
        ended + Duration::from_millis(50) >= deadline,
        "node-b's stream ended before the deadline"
    );
    // No GOAWAY for the connection on node-a: it takes new streams, still on node-a.
    assert!(
        !keep_c.send.is_closed(),
        "node-a's connection was told to go away"
    );
    let body = encode_frame(&proto::WhoRequest {});
    let who = keep_c
        .fetch(keep_c.request("POST", WHO_PATH, &grpc_headers(&[]), body))
        .await
        .expect("a unary call on the same connection");
    assert_eq!(who.trailer("grpc-status").as_deref(), Some("0"));
    let replies: Vec<proto::WhoReply> = h2c::grpc_messages(&who.body);
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].node, "node-a");
    assert_eq!(gw.node("node-a").await["state"], "healthy");
    wait_until(
        Duration::from_secs(2),
        "only the ticking stream in flight on node-a",
        || async { gw.node("node-a").await["inflight"] == 1 },
    )
    .await;
    assert_eq!(gw.node("node-b").await["state"], "draining");
}
