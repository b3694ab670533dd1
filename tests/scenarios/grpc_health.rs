//! gRPC health probes (`health.kind = "grpc"`, SPEC section 3; mock-backend's
//! `grpc.health.v1.Health/Check`, section 9): SERVING keeps a node healthy, every other
//! answer walks the weight ladder to ejection, and a node whose HTTP `/health` is fine but whose
//! gRPC health says NOT_SERVING is ejected.

use std::time::Duration;

use integration_tests::h2c::{self, grpc_headers, grpc_messages};
use integration_tests::{Gateway, Mock, FAST_HEALTH};
use mock_backend::grpc::{encode_frame, proto, HEALTH_CHECK_PATH};
use tokio::time::Instant;

/// How many times mock `m` served `path` since its last stats reset (its `/control/stats` path
/// list, SPEC section 9).
async fn served(m: &Mock, path: &str) -> usize {
    m.stats().await["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .filter(|p| *p == path)
        .count()
}

/// One h2c cluster `c` of `nodes` (id, addr) probed with `health_kind`, one catch-all route.
fn config(health_kind: &str, nodes: &[(&str, String)]) -> String {
    let mut s = format!(
        "{FAST_HEALTH}kind = \"{health_kind}\"\n[[clusters]]\nname = \"c\"\nprotocol = \"h2c\"\n"
    );
    for (id, addr) in nodes {
        s.push_str(&format!(
            "  [[clusters.nodes]]\n  id = \"{id}\"\n  addr = \"{addr}\"\n"
        ));
    }
    s.push_str("[[routes]]\nid = \"r\"\nmatch = { path_prefix = \"/\" }\ncluster = \"c\"\n");
    s
}

/// The mock's own `Health/Check` answer (status 1 SERVING, 2 NOT_SERVING) and its `GET /health`
/// status, both asked directly on its gRPC port.
async fn mock_health(m: &Mock) -> (i32, u16) {
    let mut conn = h2c::connect(&m.grpc_addr()).await;
    let body = encode_frame(&proto::HealthCheckRequest {
        service: String::new(),
    });
    let req = conn.request("POST", HEALTH_CHECK_PATH, &grpc_headers(&[]), body);
    let r = conn.fetch(req).await.expect("Health/Check answers");
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"));
    let msgs = grpc_messages::<proto::HealthCheckResponse>(&r.body);
    assert_eq!(msgs.len(), 1, "one health message");
    let http = conn.get("/health", &[]).await.expect("GET /health");
    (msgs[0].status, http.status)
}

/// Polls node `id` until `state`; returns the time since `since`.
async fn time_to(gw: &Gateway, id: &str, state: &str, since: Instant) -> Duration {
    gw.wait_node_state(id, state, Duration::from_secs(10)).await;
    since.elapsed()
}

/// The gRPC probe: a SERVING node is healthy with no failed probe after several rounds, a
/// node that starts NOT_SERVING is ejected and recovers once SERVING, and NOT_SERVING set with
/// `/control/health` walks the ladder (degraded, then ejected) within the timing promise.
#[tokio::test]
async fn grpc_probe_serving_is_healthy_not_serving_walks_the_ladder_to_ejected() {
    let a = Mock::start_with("a", &["--grpc"]).await;
    let b = Mock::start_with("b", &["--grpc"]).await;
    b.control("/control/grpc-health?state=down").await;
    assert_eq!(mock_health(&a).await, (1, 200), "a answers SERVING");
    assert_eq!(mock_health(&b).await, (2, 200), "b answers NOT_SERVING");
    let gw = Gateway::start(&config(
        "grpc",
        &[("a", a.grpc_addr()), ("b", b.grpc_addr())],
    ))
    .await;
    gw.wait_node_state("b", "ejected", Duration::from_secs(5))
        .await;
    // Several rounds later the SERVING node has not failed a single probe, and its probes were
    // gRPC health calls (the mock records every path it serves).
    integration_tests::wait_until(
        Duration::from_secs(5),
        "a to serve 3 health calls",
        || async { served(&a, HEALTH_CHECK_PATH).await >= 3 },
    )
    .await;
    let na = gw.node("a").await;
    assert_eq!(na["state"], "healthy", "{na}");
    assert_eq!(na["consecutive_failures"], 0, "{na}");
    assert_eq!(na["weight"], 100.0, "{na}");
    let nb = gw.node("b").await;
    assert_eq!(nb["weight"], 0.0, "{nb}");
    gw.logs
        .wait_for(
            &["node state changed", "node=b", "NOT_SERVING"],
            Duration::from_secs(2),
        )
        .await;

    b.control("/control/grpc-health?state=up").await;
    gw.wait_node_state("b", "healthy", Duration::from_secs(5))
        .await;

    // NOT_SERVING through the main health switch: degraded first, then ejected, in time.
    a.control("/control/health?state=down").await;
    let t0 = Instant::now();
    let degraded = time_to(&gw, "a", "degraded", t0).await;
    let ejected = time_to(&gw, "a", "ejected", t0).await;
    // Seed 001 with FAST_HEALTH: degrade within 2 intervals, eject within 3 intervals plus one
    // timeout; 400 ms of slack for a loaded machine.
    let interval = Duration::from_millis(200);
    let slack = Duration::from_millis(400);
    eprintln!("grpc probe: degraded after {degraded:?}, ejected after {ejected:?}");
    assert!(
        degraded <= interval * 2 + slack,
        "degraded after {degraded:?}"
    );
    assert!(ejected <= interval * 4 + slack, "ejected after {ejected:?}");
    assert_eq!(gw.node("a").await["weight"], 0.0);
    assert_eq!(gw.node("b").await["state"], "healthy");
}

/// An "alive but useless" gRPC node: with gRPC health alone NOT_SERVING (HTTP `/health`
/// still 200 on the same port), a gateway probing `kind = "grpc"` ejects the node within the
/// timing promise while a gateway probing `kind = "http"` keeps it healthy.
#[tokio::test]
async fn grpc_node_with_good_http_health_but_not_serving_is_ejected() {
    let a = Mock::start_with("a", &["--grpc"]).await;
    let b = Mock::start_with("b", &["--grpc"]).await;
    let nodes = [("a", a.grpc_addr()), ("b", b.grpc_addr())];
    let by_grpc = Gateway::start(&config("grpc", &nodes)).await;
    let by_http = Gateway::start(&config("http", &nodes)).await;
    for gw in [&by_grpc, &by_http] {
        gw.wait_node_state("a", "healthy", Duration::from_secs(5))
            .await;
    }

    a.control("/control/grpc-health?state=down").await;
    let t0 = Instant::now();
    assert_eq!(
        mock_health(&a).await,
        (2, 200),
        "alive on HTTP, NOT_SERVING on gRPC"
    );
    let ejected = time_to(&by_grpc, "a", "ejected", t0).await;
    eprintln!("alive-but-useless gRPC node ejected after {ejected:?}");
    assert!(
        ejected <= Duration::from_millis(200) * 4 + Duration::from_millis(400),
        "ejected after {ejected:?}"
    );
    // Five more HTTP probe rounds on the node (only the HTTP-probing gateway asks `/health`):
    // that gateway never saw a failure.
    a.control("/control/reset-stats").await;
    integration_tests::wait_until(Duration::from_secs(5), "5 HTTP probes of a", || async {
        served(&a, "/health").await >= 5
    })
    .await;
    let n = by_http.node("a").await;
    assert_eq!(n["state"], "healthy", "{n}");
    assert_eq!(n["consecutive_failures"], 0, "{n}");
    assert_eq!(by_grpc.node("b").await["state"], "healthy");
}
