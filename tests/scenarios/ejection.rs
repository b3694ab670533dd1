//! Ejection and recovery (SPEC section 3 `[health]`, section 8): a node failing its probes is
//! ejected and returns; passive ejection by real-traffic errors is capped; a recovered node ramps
//! over its own slow start, through reloads.

use std::time::Duration;

use integration_tests::check::{node_of, non_probe_paths};
use integration_tests::{get, wait_until, Cluster, Config, Gateway, Health, Mock, Route};
use tokio::time::Instant;

/// CASE-17 (probe variant): a node failing its probes past `eject_after` gets no traffic, bound ids
/// move, and it returns after recovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_node_is_ejected_gets_nothing_and_returns() {
    let (_a, b, gw) = Gateway::two_nodes(Health::http_fast()).await;
    gw.wait_node_state("node-b", "healthy", Duration::from_secs(5))
        .await;

    b.set_down().await;
    gw.wait_node_state("node-b", "ejected", Duration::from_secs(5))
        .await;
    assert_eq!(gw.node("node-b").await["weight"].as_f64(), Some(0.0));
    b.reset_stats().await;
    for _ in 0..50 {
        let r = get(&gw.url("/data"), &[]).await.expect("get");
        assert_eq!((r.status, node_of(&r)), (200, "node-a".to_string()));
    }
    assert_eq!(
        non_probe_paths(&b).await,
        Vec::<String>::new(),
        "an ejected node got traffic"
    );

    b.set_up().await;
    gw.wait_node_state("node-b", "healthy", Duration::from_secs(5))
        .await;
    let mut to_b = 0;
    for _ in 0..20 {
        let r = get(&gw.url("/data"), &[]).await.expect("get");
        assert_eq!(r.status, 200);
        to_b += u32::from(node_of(&r) == "node-b");
    }
    assert!(
        (6..=14).contains(&to_b),
        "recovered node-b got {to_b} of 20"
    );
    assert_eq!(non_probe_paths(&b).await.len(), to_b as usize);
}

/// The admin view: (state, health_percent) of every node of `gw`.
async fn states(gw: &Gateway) -> Vec<(String, String, u64)> {
    gw.admin_json("/admin/nodes")
        .await
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            (
                n["id"].as_str().expect("id").to_string(),
                n["state"].as_str().expect("state").to_string(),
                n["health_percent"].as_u64().expect("health_percent"),
            )
        })
        .collect()
}

/// CASE-32 a/b/c: with nodes answering 503 to real traffic (probes still pass), passive ejection
/// never takes more than floor(n x 50 %) nodes at once nor the last ready node; suppressed
/// ejections are counted; a 1-node cluster keeps serving the node's own 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case32_passive_ejection_never_exceeds_its_cap() {
    for (size, failing, most) in [(3usize, 2usize, 1usize), (2, 2, 1), (1, 1, 0)] {
        let mut mocks = Vec::new();
        for i in 0..size {
            mocks.push(Mock::start(&format!("node-{i}")).await);
        }
        for m in &mocks[..failing] {
            m.control("/control/status-all?code=503").await;
        }
        let refs: Vec<&Mock> = mocks.iter().collect();
        let toml = Config::new()
            .health(
                Health::http()
                    .every("200ms", "200ms")
                    .key("passive_consecutive_errors", "5"),
            )
            .cluster("c", &refs)
            .route(Route::catch_all("r", "c").retries(0))
            .toml();
        let gw = Gateway::start(&toml).await;
        let mut most_seen = 0;
        for i in 0..150 {
            let r = get(&gw.url("/data"), &[]).await.expect("request");
            if size == 1 {
                assert_eq!(r.status, 503);
                assert_eq!(
                    r.header("x-node-id").as_deref(),
                    Some("node-0"),
                    "the node's own 503"
                );
            }
            if i % 10 == 9 {
                let ejected = states(&gw)
                    .await
                    .iter()
                    .filter(|(_, s, _)| s == "ejected")
                    .count();
                most_seen = most_seen.max(ejected);
                assert!(ejected <= most, "{size} nodes: {ejected} ejected at once");
            }
        }
        assert_eq!(
            most_seen, most,
            "{size} nodes: the cap is reached, not undershot"
        );
        let suppressed = gw
            .metric("gateway_passive_ejections_suppressed_total{cluster=\"c\"}")
            .await;
        assert!(
            suppressed >= 1.0,
            "{size} nodes: suppressions counted ({suppressed})"
        );
    }
}

/// Node-a's health percent from the admin API, checking that its effective weight is its
/// configured weight (3) times that percent.
async fn ramp(gw: &Gateway) -> u64 {
    let n = gw.node("node-a").await;
    assert_eq!(n["configured_weight"], 3, "{n}");
    let p = n["health_percent"].as_u64().expect("percent");
    let w = n["weight"].as_f64().expect("weight");
    assert!(
        (w - 3.0 * p as f64 / 100.0).abs() < 0.05,
        "effective = configured x health %: {n}"
    );
    p
}

/// CASE-33: a node that recovered ramps over its own slow start; a reload adding a node in the
/// middle of the ramp neither restarts nor ends it, and the admin API shows configured weight,
/// effective weight and ramp progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case33_ramp_continues_through_a_reload_adding_a_node() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let c = Mock::start("node-c").await;
    let config = |cluster: Cluster| {
        Config::new()
            .health(
                Health::http()
                    .every("200ms", "200ms")
                    .key("slow_start", "\"8s\""),
            )
            .with_cluster(cluster)
            .route(Route::catch_all("r", "c"))
            .toml()
    };
    let cluster = Cluster::new("c")
        .node_with("node-a", &a.addr(), "weight = 3")
        .node_with("node-b", &b.addr(), "weight = 1");
    let v1 = config(cluster.clone());
    let v2 = config(cluster.node_with("node-c", &c.addr(), "weight = 1"));
    let gw = Gateway::start(&v1).await;
    a.set_down().await;
    gw.wait_node_state("node-a", "ejected", Duration::from_secs(10))
        .await;
    a.set_up().await;
    gw.wait_node_state("node-a", "healthy", Duration::from_secs(10))
        .await;
    let start = ramp(&gw).await;
    assert!(start < 60, "ramp starts low: {start}");
    // Part way up the ramp, a reload adds node-c.
    wait_until(
        Duration::from_secs(10),
        "node-a part way up its ramp",
        || async { ramp(&gw).await >= 40 },
    )
    .await;
    let before = ramp(&gw).await;
    gw.write_config(&v2);
    let r = gw.admin_post("/admin/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let after = ramp(&gw).await;
    assert!(
        after >= before,
        "the ramp was not restarted: {before} -> {after}"
    );
    assert!(after < 100, "the ramp was not ended: {before} -> {after}");
    // It goes on climbing monotonically to full weight.
    let mut last = after;
    let deadline = Instant::now() + Duration::from_secs(12);
    while last < 100 {
        assert!(
            Instant::now() < deadline,
            "node-a never reached full weight (at {last} %)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let p = ramp(&gw).await;
        assert!(p >= last, "monotonic ramp: {p} after {last}");
        last = p;
    }
    assert_eq!(gw.node("node-c").await["state"], "healthy");
}
