//! CASE-29, reloads that keep a connection's route and node (SPEC section 5, `/admin/reload`)
//! leave its open WebSocket and h2c connections alone: no close, no re-dial, no hop.

use std::time::Duration;

use futures_util::SinkExt;
use integration_tests::check::ws_text;
use integration_tests::{Cluster, Config, Gateway, Health, Mock, Route};
use tokio::time::{timeout, Instant};
use tokio_tungstenite::tungstenite::Message;

/// The CASE-29 table: `/ws` on cluster W (TCP probes every `w_interval`), `/data` on cluster G,
/// `/api` on cluster A (with cluster line `a_health`, may be empty), then the `extra` routes.
fn case29_config(
    w: &Mock,
    g: &Mock,
    a: &Mock,
    w_interval: &str,
    a_health: &str,
    extra: &[Route],
) -> String {
    let w_health = format!("health = {{ kind = \"tcp\", interval = \"{w_interval}\" }}");
    let config = Config::new()
        .health(Health::tcp_200ms())
        .with_cluster(Cluster::new("W").line(&w_health).mocks(&[w]))
        .cluster("G", &[g])
        .with_cluster(Cluster::new("A").line(a_health).mocks(&[a]))
        .route(Route::prefix("ws", "/ws", "W"))
        .route(Route::prefix("g", "/data", "G"))
        .route(Route::prefix("api", "/api", "A"));
    extra.iter().fold(config, |c, r| c.route(r.clone())).toml()
}

/// CASE-29: reloads that keep a connection's route and node (an added route, another cluster's
/// health, W's own probe interval) never close or re-dial an open WebSocket or h2c connection,
/// count no hop, and return promptly while those streams are open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case29_reload_leaves_surviving_websocket_and_h2_connections_alone() {
    let w = Mock::start("node-w").await;
    let g = Mock::start("node-g").await;
    let a = Mock::start("node-api").await;
    let gw = Gateway::start(&case29_config(&w, &g, &a, "200ms", "", &[])).await;
    let (mut ws, _) = timeout(
        Duration::from_secs(5),
        tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{}/ws", gw.port)),
    )
    .await
    .expect("in time")
    .expect("101");
    let hello = ws_text(&mut ws, Duration::from_secs(5)).await;
    assert!(hello.contains("\"node\":\"node-w\""), "{hello}");
    let mut h2 = integration_tests::h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    assert_eq!(h2.get("/data", &[]).await.expect("h2 get").status, 200);
    let w_requests = w.requests().await;
    let reloads = [
        case29_config(&w, &g, &a, "200ms", "", &[Route::prefix("r1", "/r1", "A")]),
        case29_config(
            &w,
            &g,
            &a,
            "200ms",
            "health = { kind = \"tcp\", interval = \"300ms\" }",
            &[],
        ),
        case29_config(&w, &g, &a, "250ms", "", &[]),
    ];
    for (i, toml) in reloads.iter().enumerate() {
        let before = gw.admin_json("/admin/routes").await["generation"]
            .as_u64()
            .expect("generation");
        gw.write_config(toml);
        let t0 = Instant::now();
        let r = gw.admin_post("/admin/reload").await;
        let took = t0.elapsed();
        assert_eq!(r.status, 200, "reload {i}: {}", r.text());
        assert!(
            took < Duration::from_secs(3),
            "reload {i} took {took:?} with streams open"
        );
        assert!(r.json()["generation"].as_u64().expect("generation") > before);
        // The same WebSocket echoes: no close, and no new hello (which a re-dial would bring).
        let msg = format!("after-reload-{i}");
        ws.send(Message::text(msg.clone())).await.expect("ws send");
        assert_eq!(
            ws_text(&mut ws, Duration::from_secs(5)).await,
            msg,
            "reload {i}"
        );
        // The same h2 connection serves: no GOAWAY ended it.
        assert!(!h2.conn.is_finished(), "reload {i}: h2 connection ended");
        assert_eq!(
            h2.get("/data", &[]).await.expect("h2 get").status,
            200,
            "reload {i}"
        );
    }
    assert_eq!(w.requests().await, w_requests, "no re-dial reached node-w");
    let text = gw.metrics_text().await;
    assert!(
        !text.lines().any(|l| l.starts_with("hopping_count_total{")),
        "no hop: {text}"
    );
}
