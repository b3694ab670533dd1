//! Helpers shared by the Redis store scenarios (`redis_outage`, `redis_sentinel`, `redis_cluster`):
//! three mock nodes behind one route, gateways on a given Redis URL, and small probes.

use std::time::Duration;

use tokio::time::Instant;

use integration_tests::{get, Gateway, Mock, FAST_HEALTH};

/// The mock nodes every store scenario starts.
pub(crate) const NODE_IDS: [&str; 3] = ["node-a", "node-b", "node-c"];

/// Starts the three mocks; returns them with a gateway TOML for cluster `svc` behind route `/`
/// using the Redis store at `url`, with `affinity.redis_timeout = timeout`.
pub(crate) async fn setup(url: &str, timeout: &str) -> (Vec<Mock>, String) {
    setup_with(url, &format!("redis_timeout = \"{timeout}\"\n")).await
}

/// [`setup`] with `affinity_extra` (whole lines, or nothing) after `redis_url` in `[affinity]`
/// instead of the `redis_timeout` line.
pub(crate) async fn setup_with(url: &str, affinity_extra: &str) -> (Vec<Mock>, String) {
    let mut mocks = Vec::new();
    let mut toml = format!(
        "[affinity]\nstore = \"redis\"\nredis_url = \"{url}\"\n{affinity_extra}\n{FAST_HEALTH}\n[[clusters]]\nname = \"svc\"\n"
    );
    for id in NODE_IDS {
        let m = Mock::start(id).await;
        toml.push_str(&format!(
            "  [[clusters.nodes]]\n  id = \"{id}\"\n  addr = \"{}\"\n",
            m.addr()
        ));
        mocks.push(m);
    }
    toml.push_str(
        "\n[[routes]]\nid = \"api\"\nmatch = { path_prefix = \"/\" }\ncluster = \"svc\"\n",
    );
    (mocks, toml)
}

/// Waits until `gw` sees every node healthy.
pub(crate) async fn all_healthy(gw: &Gateway) {
    for id in NODE_IDS {
        gw.wait_node_state(id, "healthy", Duration::from_secs(15))
            .await;
    }
}

/// `GET /echo` with `X-Conn-Id: conn`: the status, the serving node (empty if none) and the time it took.
pub(crate) async fn call(gw: &Gateway, conn: &str) -> (u16, String, Duration) {
    let started = Instant::now();
    let r = get(&gw.url("/echo"), &[("x-conn-id", conn)])
        .await
        .expect("request");
    let took = started.elapsed();
    (r.status, r.header("x-node-id").unwrap_or_default(), took)
}

/// `GET /echo` with `X-Conn-Id: conn`; asserts 200 and returns the serving node.
pub(crate) async fn node_for(gw: &Gateway, conn: &str) -> String {
    let (status, node, _) = call(gw, conn).await;
    assert_eq!(status, 200, "{conn}");
    node
}

/// Sum of every series of the family `name` (e.g. `gateway_affinity_store_errors_total`).
pub(crate) async fn family_sum(gw: &Gateway, name: &str) -> f64 {
    let text = gw.metrics_text().await;
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Sum of `gateway_affinity_store_errors_total` over every op.
pub(crate) async fn store_errors(gw: &Gateway) -> f64 {
    family_sum(gw, "gateway_affinity_store_errors_total").await
}

/// `PUBSUB NUMSUB channel` on `c`.
pub(crate) async fn numsub(c: &mut redis::aio::MultiplexedConnection, channel: &str) -> i64 {
    let v: Vec<redis::Value> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(c)
        .await
        .expect("PUBSUB NUMSUB");
    match v.get(1) {
        Some(redis::Value::Int(n)) => *n,
        _ => 0,
    }
}

/// `GET key` on `c` (any connection type).
pub(crate) async fn redis_get(
    c: &mut impl redis::aio::ConnectionLike,
    key: &str,
) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(c)
        .await
        .expect("GET")
}
