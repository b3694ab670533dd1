//! The in-memory affinity store and the drain states move with an upgrade (SPEC section 13): 1,000
//! ids bound before are bound to the same node after, with their remaining TTLs; a drained node
//! stays draining with the same deadline.

use std::collections::HashMap;

use integration_tests::upgrade::Upgradable;
use integration_tests::{get, node_in};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::gateway;

/// Ids bound before the upgrade.
const IDS: usize = 1000;

/// Requests in flight while binding or reading.
const PARALLEL: usize = 16;

/// `(node, ttl_ms)` of every id, read from `GET /admin/conns/{id}`.
async fn bindings(gw: &Upgradable) -> HashMap<String, (String, u64)> {
    let mut set = JoinSet::new();
    for part in 0..PARALLEL {
        let base = gw.admin("/admin/conns/");
        set.spawn(async move {
            let mut out = Vec::new();
            for i in (part..IDS).step_by(PARALLEL) {
                let id = format!("upg-{i}");
                let r = get(&format!("{base}{id}"), &[]).await.expect("admin conns");
                assert_eq!(r.status, 200, "{id}: {}", r.text());
                let v = r.json();
                let node = v["node"].as_str().expect("node").to_string();
                out.push((id, (node, v["ttl_ms"].as_u64().expect("ttl_ms"))));
            }
            out
        });
    }
    let mut all = HashMap::new();
    while let Some(part) = set.join_next().await {
        all.extend(part.expect("reader"));
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_bindings_keep_their_node_and_ttl_across_an_upgrade() {
    let (_mocks, mut gw) = gateway("", &[]).await;
    let mut set = JoinSet::new();
    for part in 0..PARALLEL {
        let url = gw.url("/data");
        set.spawn(async move {
            for i in (part..IDS).step_by(PARALLEL) {
                let id = format!("upg-{i}");
                let r = get(&url, &[("X-Conn-Id", &id)]).await.expect("bind");
                assert_eq!(r.status, 200, "{id}: {}", r.text());
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("binder");
    }
    let before = bindings(&gw).await;
    let read_at = Instant::now();
    assert_eq!(before.len(), IDS);
    let per_node =
        |b: &HashMap<String, (String, u64)>, n: &str| b.values().filter(|v| v.0 == n).count();
    assert!(per_node(&before, "node-a") > 0 && per_node(&before, "node-b") > 0);

    gw.upgrade().await;
    let after = bindings(&gw).await;
    let elapsed = read_at.elapsed().as_millis() as u64;
    for (id, (node, ttl)) in &before {
        let (node2, ttl2) = &after[id];
        assert_eq!(node2, node, "{id} moved node");
        // The remaining TTL went down by the time that passed (not reset to the full TTL),
        // within a tolerance for the reads themselves.
        assert!(
            *ttl2 <= ttl + 50,
            "{id}: ttl {ttl} ms before, {ttl2} ms after"
        );
        assert!(
            ttl2 + elapsed + 2_000 >= *ttl,
            "{id}: ttl {ttl} ms before, {ttl2} ms after {elapsed} ms"
        );
    }
    // A request with a moved id lands on its node.
    for i in (0..IDS).step_by(97) {
        let id = format!("upg-{i}");
        let r = get(&gw.url("/data"), &[("X-Conn-Id", &id)])
            .await
            .expect("get");
        let node = &before[&id].0;
        assert!(
            r.text().contains(&format!("Node {node} ")),
            "{id}: {}",
            r.text()
        );
    }
}

/// Node `id` as `GET /admin/nodes` shows it.
async fn node(gw: &Upgradable, id: &str) -> serde_json::Value {
    let nodes = get(&gw.admin("/admin/nodes"), &[])
        .await
        .expect("nodes")
        .json();
    node_in(&nodes, id)
}

#[tokio::test]
async fn upgrade_keeps_operator_drains_with_their_deadline() {
    let (_mocks, mut gw) = gateway("", &[]).await;
    let r = gw.admin_post("/admin/nodes/node-b/drain?period=60s").await;
    assert_eq!(r.status, 202, "{}", r.text());
    let before = node(&gw, "node-b").await;
    assert_eq!(before["state"], "draining");
    assert!(before["drain_deadline_ms"].as_u64().is_some(), "{before}");
    gw.upgrade().await;
    let after = node(&gw, "node-b").await;
    assert_eq!(after["state"], "draining", "{after}");
    assert_eq!(after["drain_deadline_ms"], before["drain_deadline_ms"]);
    assert_eq!(node(&gw, "node-a").await["state"], "healthy");
}
