//! CASE-25 C (honest canceller, upstream leg): the gateway's own long-lived h2c connection to a
//! gRPC node never trips a reset cap of its own (hyperium/h2 #856), however much DATA the node
//! sends for streams the gateway already cancelled (RFC 9113 section 5.1 "closed", 6.4).

use std::time::Duration;

use integration_tests::h2c::{self, grpc_headers, grpc_messages, Stream};
use integration_tests::{request, Gateway, Mock};
use mock_backend::grpc::{encode_frame, proto, TICKS_PATH, WHO_PATH};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::grpc_errors::{config, who_body};

/// Calls opened and cancelled after their first message.
const CALLS: u32 = 400;
/// Calls open at once (below `h2_max_concurrent_streams` = 100).
const AT_ONCE: usize = 90;

/// node-a receives every byte 1.5 s late (a busy event loop) and ticks every 10 ms, so each call
/// the client cancels after its first tick keeps drawing DATA on the gateway's upstream
/// connection for 1.5 s after the gateway reset it upstream. 400 such calls on one client
/// connection (90 at a time, under 100 cancels/s): every call got its first tick, no GOAWAY on
/// either leg (`gateway_h2_goaway_sent_total` absent, the client connection open), node-a saw
/// one gateway connection throughout, and 10 unary calls on the same client connection are served.
/// Long on purpose: the 400 cancelled calls and the unary calls after them share one connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_streams_with_late_data_never_cost_the_upstream_connection() {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    a.control("/control/grpc-read-delay?ms=1500").await;
    let gw = Gateway::start(&config(&[("node-a", a.grpc_addr())], "")).await;
    let c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let started = Instant::now();
    let mut calls = JoinSet::new();
    for i in 0..CALLS {
        while calls.len() >= AT_ONCE {
            calls.join_next().await.expect("a call").expect("call task");
        }
        // Under 100 cancels per second: an honest client by SPEC section 4.
        tokio::time::sleep_until(started + Duration::from_millis(u64::from(i) * 10)).await;
        first_tick_then_cancel(&mut calls, &c, i);
    }
    while let Some(r) = calls.join_next().await {
        r.expect("call task");
    }
    // Let the node see every cancel and the late DATA of the last calls arrive.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    // Ten unary calls at once (each waits out the node's 1.5 s read delay).
    let mut unary = JoinSet::new();
    for i in 0..10 {
        let req = c.request("POST", WHO_PATH, &grpc_headers(&[]), who_body());
        let send = c.send.clone();
        unary.spawn(async move {
            let what = format!("unary {i}");
            let resp = h2c::head_within(send, req, Duration::from_secs(10), &what).await;
            let r = h2c::read_all(resp).await.expect("whole answer");
            assert_eq!(
                r.trailer("grpc-status").as_deref(),
                Some("0"),
                "unary {i}: {r:?}"
            );
            let who: Vec<proto::WhoReply> = grpc_messages(&r.body);
            assert_eq!(who[0].node, "node-a", "unary {i}");
        });
    }
    while let Some(r) = unary.join_next().await {
        r.expect("unary task");
    }
    assert!(!c.conn.is_finished(), "the client connection is still open");
    let metrics = metrics_text(&gw).await;
    assert!(
        !metrics.contains("gateway_h2_goaway_sent_total{"),
        "no GOAWAY for abuse: {}",
        metrics
            .lines()
            .filter(|l| l.contains("goaway"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        a.stats().await["grpc_connections"],
        1,
        "one upstream h2c connection throughout"
    );
}

/// CASE-35 (honest): one client connection runs 450 server-streaming calls at 150 a second, 10 at
/// a time, each cancelled (RST_STREAM(CANCEL)) after its first message (node-a ticks every 10 ms
/// until reset). 150 cancels a second is under `h2_max_resets_per_second` (SPEC section 4), and the
/// limit is a rate, never a lifetime count (hyperium/h2 #856): no GOAWAY on either leg (the client
/// connection open, `gateway_h2_goaway_sent_total` absent, node-a saw one gateway connection),
/// every call got its first message, and every cancel reached node-a: within 2 s of the last one
/// node-a has no `Ticks` stream open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case_35_honest_cancels_reach_the_node_and_cost_no_connection() {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let gw = Gateway::start(&config(&[("node-a", a.grpc_addr())], "")).await;
    let c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let started = Instant::now();
    let mut calls = JoinSet::new();
    for i in 0..450u32 {
        while calls.len() >= 10 {
            calls.join_next().await.expect("a call").expect("call task");
        }
        tokio::time::sleep_until(started + Duration::from_millis(u64::from(i) * 1000 / 150)).await;
        first_tick_then_cancel(&mut calls, &c, i);
    }
    while let Some(r) = calls.join_next().await {
        r.expect("call task");
    }
    let last_cancel = Instant::now();
    loop {
        let open = a.stats().await["grpc_open_ticks"].as_u64();
        if open == Some(0) {
            break;
        }
        assert!(
            last_cancel.elapsed() < Duration::from_secs(2),
            "node-a still streams {open:?} calls 2 s after the last cancel"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!c.conn.is_finished(), "the client connection is still open");
    let metrics = metrics_text(&gw).await;
    assert!(
        !metrics.contains("gateway_h2_goaway_sent_total{"),
        "no GOAWAY for abuse"
    );
    assert_eq!(
        a.stats().await["grpc_connections"],
        1,
        "one upstream h2c connection throughout: no GOAWAY to node-a"
    );
}

/// Spawns call `i` on `c` into `calls`: a `Ticks` stream (a tick every 10 ms until cancelled)
/// whose first message must be node-a's tick 1; the task then drops the stream, which cancels the
/// call (RST_STREAM(CANCEL) to the gateway).
fn first_tick_then_cancel(calls: &mut JoinSet<()>, c: &h2c::H2Conn, i: u32) {
    let req = c.request(
        "POST",
        TICKS_PATH,
        &grpc_headers(&[("x-mock-grpc-tick-ms", "10")]),
        encode_frame(&proto::TicksRequest { count: 0 }),
    );
    let send = c.send.clone();
    calls.spawn(async move {
        let what = format!("call {i}: head");
        let resp = h2c::head_within(send, req, Duration::from_secs(20), &what).await;
        let mut s = Stream::new(resp);
        let (t, _): (proto::Tick, _) = s
            .next_message()
            .await
            .unwrap_or_else(|e| panic!("call {i}: stream: {e}"))
            .unwrap_or_else(|| {
                panic!(
                    "call {i}: a first tick, not grpc-status {:?}/{:?} {:?}",
                    s.header("grpc-status"),
                    s.trailer("grpc-status"),
                    s.header("grpc-message")
                )
            });
        assert_eq!((t.node.as_str(), t.seq), ("node-a", 1), "call {i}");
    });
}

/// The gateway's `/metrics` exposition.
async fn metrics_text(gw: &Gateway) -> String {
    request("GET", &gw.admin("/metrics"), &[], Vec::new())
        .await
        .expect("metrics")
        .text()
}
