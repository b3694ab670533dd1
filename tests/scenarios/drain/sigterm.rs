//! Graceful shutdown on SIGTERM (SPEC section 5): in-flight work finishes (with `shutdown_spread`,
//! within `shutdown_timeout` after the spread), endless gRPC streams end with `grpc-status: 14`, and
//! the exit code is 0.

use super::*;

/// Starts a gateway over `node-a` at `addr` (cluster lines `cluster_extra`, see [`config`]) whose
/// `server.shutdown_timeout` is `timeout` (a TOML duration such as `"5s"`, SPEC section 5).
async fn shutting_down_in(timeout: &str, addr: String, cluster_extra: &str) -> Gateway {
    let top = format!("[server]\nshutdown_timeout = \"{timeout}\"\n");
    Gateway::start(&config(&[("node-a", addr)], cluster_extra, &top)).await
}

/// A `GET /data` through `gw` that `node-a` (`a`) answers `delay_ms` after it arrives, returned
/// once the node counts it in flight.
async fn in_flight(
    gw: &Gateway,
    a: &Mock,
    delay_ms: u64,
) -> tokio::task::JoinHandle<anyhow::Result<integration_tests::Resp>> {
    a.delay(delay_ms).await;
    let url = gw.url("/data");
    let slow = tokio::spawn(async move { get(&url, &[]).await });
    wait_until(Duration::from_secs(5), "a request in flight", || async {
        gw.node("node-a").await["inflight"] == 1
    })
    .await;
    slow
}

/// SIGTERM lets in-flight requests finish and the gateway exits with code 0.
#[tokio::test]
async fn sigterm_finishes_in_flight_work_and_exits_zero() {
    let a = Mock::start("node-a").await;
    let mut gw = shutting_down_in("5s", a.addr(), "").await;
    let mut idle_h2 = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    assert_eq!(
        idle_h2.get("/data", &[]).await.expect("h2 request").status,
        200
    );
    let slow = in_flight(&gw, &a, 1000).await;
    let term_at = Instant::now();
    gw.signal("TERM");
    // Every h2 connection gets GOAWAY and ends (it has no streams left).
    tokio::time::timeout(Duration::from_secs(2), &mut idle_h2.conn)
        .await
        .expect("h2 connection closed after SIGTERM")
        .expect("join")
        .expect("clean GOAWAY close");
    // New connections are refused.
    wait_until(Duration::from_secs(2), "the listener to close", || async {
        TcpStream::connect(("127.0.0.1", gw.port)).await.is_err()
    })
    .await;
    // The in-flight request completes.
    let r = slow.await.expect("join").expect("in-flight request");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), format!("Data from Node node-a (Port {})", a.port));
    let code = gw.wait_exit(Duration::from_secs(5)).await;
    assert_eq!(code, Some(0));
    let took = term_at.elapsed();
    assert!(took < Duration::from_secs(5), "shutdown took {took:?}");
}

/// SIGTERM closes an endless gRPC stream with `grpc-status: 14` and the gateway exits with code 0.
#[tokio::test]
async fn sigterm_closes_an_endless_grpc_stream_with_unavailable_and_exits_zero() {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let mut gw = shutting_down_in("2s", a.grpc_addr(), "protocol = \"h2c\"").await;
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let req = c.ticks(0);
    let mut s = Stream::new(c.send(req).await.expect("Ticks head"));
    s.next_message::<proto::Tick>()
        .await
        .expect("alive")
        .expect("a tick");
    let term_at = Instant::now();
    gw.signal("TERM");
    // The stream is in-flight work: it keeps flowing until the end of shutdown_timeout, then ends
    // with UNAVAILABLE trailers rather than a dropped connection.
    let mut ticks = 0;
    while s
        .next_message::<proto::Tick>()
        .await
        .expect("the stream ends with trailers, not a reset")
        .is_some()
    {
        ticks += 1;
    }
    let ended = term_at.elapsed();
    assert!(ticks >= 10, "only {ticks} ticks after SIGTERM");
    assert!(
        ended >= Duration::from_millis(1500) && ended < Duration::from_millis(2300),
        "stream ended {ended:?} after SIGTERM"
    );
    assert_eq!(s.trailer("grpc-status").as_deref(), Some("14"));
    assert_eq!(gw.wait_exit(Duration::from_secs(3)).await, Some(0));
    assert!(
        term_at.elapsed() < Duration::from_secs(3),
        "exit took {:?}",
        term_at.elapsed()
    );
}

/// With `shutdown_spread` the wait for in-flight work comes after the spread (SPEC section 5;
/// README "Shutdown"): under `shutdown_spread = "2s"` and `shutdown_timeout = "1s"` a request the
/// node answers about 1.5 s after SIGTERM still finishes with 200 (past `shutdown_timeout` alone),
/// and the gateway exits with code 0 once it has, before the two periods are over.
#[tokio::test]
async fn sigterm_with_shutdown_spread_waits_for_in_flight_work_after_the_spread() {
    let a = Mock::start("node-a").await;
    let top = "[server]\nshutdown_timeout = \"1s\"\nshutdown_spread = \"2s\"\n";
    let mut gw = Gateway::start(&config(&[("node-a", a.addr())], "", top)).await;
    let slow = in_flight(&gw, &a, 1500).await;
    let term_at = Instant::now();
    gw.signal("TERM");
    let r = slow.await.expect("join").expect("in-flight request");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(gw.wait_exit(Duration::from_secs(5)).await, Some(0));
    let took = term_at.elapsed();
    assert!(
        took >= Duration::from_millis(1000) && took < Duration::from_millis(2800),
        "exit {took:?} after SIGTERM"
    );
}
