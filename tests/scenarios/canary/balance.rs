//! Node choice within a cluster (SPEC section 6): zone affinity, weights and `least_request`.

use super::*;

/// Zone affinity prefers nodes in the gateway's zone and falls back to others when none is left.
#[tokio::test]
async fn zone_affinity_prefers_local_nodes_and_falls_back() {
    let hz = Mock::start_with("hz-a", &["--zone", "hz"]).await;
    let sh = Mock::start_with("sh-a", &["--zone", "sh"]).await;
    let none = Mock::start("nozone").await;
    let zone = |z: &str| format!("metadata = {{ zone = \"{z}\" }}");
    let nodes = Cluster::new("z")
        .node_with("hz-a", &hz.addr(), &zone("hz"))
        .node_with("sh-a", &sh.addr(), &zone("sh"))
        .node("nozone", &none.addr());
    let toml = Config::new()
        .table("server", "zone = \"hz\"")
        .raw_top(FAST_HEALTH)
        .with_cluster(nodes)
        .route(Route::prefix("api", "/", "z"))
        .toml();
    let gw = Gateway::start(&toml).await;
    let hz_a_becomes =
        |state: &'static str| gw.wait_node_state("hz-a", state, Duration::from_secs(3));
    let ids = fan_out(&gw, "/data", &[], 80).await;
    assert!(
        ids.iter().all(|id| id == "hz-a"),
        "same-zone node only: {:?}",
        count(&ids)
    );

    hz.set_down().await;
    hz_a_becomes("ejected").await;
    let ids = fan_out(&gw, "/data", &[], 80).await;
    let c = count(&ids);
    assert!(!c.contains_key("hz-a"), "{c:?}");
    assert_eq!(
        (c.get("sh-a"), c.get("nozone")),
        (Some(&40), Some(&40)),
        "all other nodes when none is healthy in the zone"
    );

    hz.set_up().await;
    hz_a_becomes("healthy").await;
    let ids = fan_out(&gw, "/data", &[], 80).await;
    assert!(
        ids.iter().all(|id| id == "hz-a"),
        "back to the zone: {:?}",
        count(&ids)
    );
}

/// Weights 95/5 give about 95% of 10,000 requests to the heavy node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_95_5_gives_95_percent_over_10000_requests() {
    let a = Mock::start("heavy").await;
    let b = Mock::start("light").await;
    let gw = one_cluster(&[(&a, 95, "v1"), (&b, 5, "v1")], "weighted", "").await;
    let ids = fan_out(&gw, "/data", &[], 10_000).await;
    let c = count(&ids);
    let heavy = *c.get("heavy").unwrap_or(&0) as f64 / ids.len() as f64;
    eprintln!("weighted 95/5: heavy share {heavy:.4} ({c:?})");
    assert_eq!(ids.len(), 10_000);
    assert!(
        (heavy - 0.95).abs() <= 0.02,
        "heavy share {heavy:.4} ({c:?})"
    );
    assert!(c.contains_key("light"), "the light node is used too: {c:?}");
}

/// `least_request` balancing sends fewer requests to a slow node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_request_sends_fewer_requests_to_a_slow_node() {
    let fast = Mock::start("fast").await;
    let slow = Mock::start("slow").await;
    let gw = one_cluster(
        &[(&fast, 100, "v1"), (&slow, 100, "v1")],
        "least_request",
        "",
    )
    .await;
    slow.delay(100).await;
    // 8 concurrent loops: requests pile up on the slow node, so it has more in flight.
    let ids = fan_out(&gw, "/data", &[], 800).await;
    let c = count(&ids);
    let (f, s) = (*c.get("fast").unwrap_or(&0), *c.get("slow").unwrap_or(&0));
    eprintln!("least_request: fast {f}, slow {s} of {}", ids.len());
    assert_eq!(f + s, 800);
    assert!(
        (s as f64) < 0.2 * 800.0 && f > 4 * s,
        "slow node got clearly fewer: {c:?}"
    );
}
