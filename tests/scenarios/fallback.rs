//! No healthy node (SPEC section 3 `on_all_down` and `fallback`, section 4): the route's fallback
//! (or the default JSON 503) is answered fast and touches no node, even for a bound id or a
//! WebSocket upgrade; `fail_open` is opt-in and still reaches the nodes; traffic returns with the
//! first recovered node.

use std::collections::HashMap;
use std::time::Duration;

use integration_tests::check::{bind_to, node_of, non_probe_paths, DEFAULT_FALLBACK, HDR};
use integration_tests::raw::refused;
use integration_tests::{get, Config, Gateway, Health, Mock, Route};
use tokio::time::Instant;

/// Sets nodes `a` and `b` (node-a, node-b) down and waits until `gw` has ejected both.
async fn all_down(gw: &Gateway, a: &Mock, b: &Mock) {
    a.set_down().await;
    b.set_down().await;
    for n in ["node-a", "node-b"] {
        gw.wait_node_state(n, "ejected", Duration::from_secs(5))
            .await;
    }
}

/// CASE-19: no healthy node answers the route's fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_nodes_down_answers_the_route_fallback() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let custom = Route::prefix("custom", "/custom", "c").line(
        r#"fallback = { status = 502, content_type = "text/plain", body = "maintenance, back soon" }"#,
    );
    let toml = Config::single(Health::http_fast(), &[&a, &b], custom)
        .route(Route::api())
        .toml();
    let gw = Gateway::start(&toml).await;
    all_down(&gw, &a, &b).await;

    let r = get(&gw.url("/data"), &[]).await.expect("get");
    assert_eq!(r.status, 503);
    assert_eq!(r.text(), DEFAULT_FALLBACK);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json")
    );
    let r = get(&gw.url("/data"), &[(HDR, "down-1")])
        .await
        .expect("get");
    assert_eq!((r.status, r.text()), (503, DEFAULT_FALLBACK.to_string()));

    let r = get(&gw.url("/custom/x"), &[]).await.expect("get");
    assert_eq!(
        (r.status, r.text()),
        (502, "maintenance, back soon".to_string())
    );
    assert_eq!(r.header("content-type").as_deref(), Some("text/plain"));
}

/// CASE-19: `on_all_down = "fail_open"` is opt-in, still reaches the nodes and is visible in
/// `gateway_fail_open_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_open_sends_to_nodes_when_all_are_down() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(
        &Config::single(
            Health::http_fast(),
            &[&a, &b],
            Route::api().line("on_all_down = \"fail_open\""),
        )
        .toml(),
    )
    .await;
    all_down(&gw, &a, &b).await;
    let before = gw.metric("gateway_fail_open_total{cluster=\"c\"}").await;
    let mut nodes: HashMap<String, u32> = HashMap::new();
    for _ in 0..10 {
        let r = get(&gw.url("/data"), &[]).await.expect("get");
        assert_eq!(
            r.status,
            200,
            "fail_open must still reach a node: {}",
            r.text()
        );
        assert!(r.text().starts_with("Data from Node "), "{}", r.text());
        *nodes.entry(node_of(&r)).or_default() += 1;
    }
    assert_eq!(
        gw.metric("gateway_fail_open_total{cluster=\"c\"}").await - before,
        10.0
    );
    assert_eq!(
        nodes.len(),
        2,
        "fail_open spreads over every node: {nodes:?}"
    );
}

/// CASE-19: with every node down the default fallback answers within 100 ms, for bound ids and
/// upgrades too, and no node is touched; a recovered node takes all traffic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case19_all_nodes_down_answer_the_fallback_fast_and_touch_no_node() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let c = Mock::start("node-c").await;
    let gw =
        Gateway::start(&Config::single(Health::http_fast(), &[&a, &b, &c], Route::api()).toml())
            .await;
    let c19 = bind_to(&gw, "c-19", "node-c").await;
    a.kill().await;
    b.kill().await;
    c.set_down().await;
    c.hang().await;
    for n in ["node-a", "node-b", "node-c"] {
        gw.wait_node_state(n, "ejected", Duration::from_secs(5))
            .await;
    }
    c.reset_stats().await;

    let mut slowest = Duration::ZERO;
    for i in 0..20 {
        let t0 = Instant::now();
        let r = get(&gw.url("/api/x"), &[]).await.expect("get");
        slowest = slowest.max(t0.elapsed());
        assert_eq!(r.status, 503, "GET {i}");
        assert_eq!(r.text(), DEFAULT_FALLBACK);
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("application/json")
        );
        assert_eq!(r.header("retry-after").as_deref(), Some("1"));
    }
    assert!(
        slowest < Duration::from_millis(100),
        "slowest fallback {slowest:?}"
    );
    let t0 = Instant::now();
    let r = get(&gw.url("/api/x"), &[(HDR, c19.as_str())])
        .await
        .expect("get");
    let bound_took = t0.elapsed();
    assert_eq!((r.status, r.text()), (503, DEFAULT_FALLBACK.to_string()));
    assert!(
        bound_took < Duration::from_millis(100),
        "bound request {bound_took:?}"
    );
    // A WebSocket upgrade: 503 too, never 101, and the connection ends.
    let t0 = Instant::now();
    let (h, body) = refused(gw.port, b"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").await;
    assert_eq!(h.status, 503);
    assert_eq!(String::from_utf8_lossy(&body), DEFAULT_FALLBACK);
    assert!(t0.elapsed() < Duration::from_millis(200));
    // No request reached the hanging node (its probes aside).
    assert_eq!(non_probe_paths(&c).await, Vec::<String>::new());

    // node-b recovers: all traffic goes to it.
    b.restart().await;
    gw.wait_node_state("node-b", "healthy", Duration::from_secs(10))
        .await;
    for _ in 0..10 {
        let r = get(&gw.url("/data"), &[]).await.expect("get");
        assert_eq!((r.status, node_of(&r)), (200, "node-b".to_string()));
    }
    let r = get(&gw.url("/data"), &[(HDR, c19.as_str())])
        .await
        .expect("get");
    assert_eq!((r.status, node_of(&r)), (200, "node-b".to_string()));
    eprintln!("FIGURE case19 slowest fallback {slowest:?}, bound {bound_took:?}");
}
