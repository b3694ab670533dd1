//! Stable selection across replicas (SPEC section 7): a new conn id's node comes from
//! weighted rendezvous hashing of the id over the node ids and weights, so two gateways that share
//! nothing (memory stores) and list the same nodes in different orders bind every new id to the
//! same node, and a binding that is lost comes back to the same node.

use std::collections::HashMap;

use integration_tests::check::unbind;
use integration_tests::{cluster_toml, get, Gateway, Mock, FAST_HEALTH};

/// New ids placed on both gateways.
const IDS: usize = 200;

fn config(nodes: &[(&str, String)]) -> String {
    format!(
        "{FAST_HEALTH}\n{}\n[[routes]]\nid = \"r\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\n",
        cluster_toml("c", nodes, "")
    )
}

/// The node that served `GET /data` for `id` (from the mock's body), asserting a 200.
async fn node_for(gw: &Gateway, id: &str) -> String {
    let r = get(&gw.url("/data"), &[("x-conn-id", id)])
        .await
        .expect("request");
    assert_eq!(r.status, 200, "{id}: {}", r.text());
    let body = r.text();
    body.strip_prefix("Data from Node ")
        .and_then(|s| s.split(' ').next())
        .unwrap_or_else(|| panic!("unexpected body {body}"))
        .to_string()
}

/// Stable selection: two gateways listing four nodes in different orders, with
/// separate memory stores, bind each of 200 new ids to the same node; the ids spread over every
/// node; and an id whose binding is deleted returns to the same node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_with_reordered_nodes_agree_on_every_new_id() {
    let mut mocks = Vec::new();
    for i in 1..=4 {
        mocks.push(Mock::start(&format!("node-{i}")).await);
    }
    let entry = |i: usize| (["node-1", "node-2", "node-3", "node-4"][i], mocks[i].addr());
    let a = Gateway::start(&config(&[entry(0), entry(1), entry(2), entry(3)])).await;
    let b = Gateway::start(&config(&[entry(3), entry(1), entry(0), entry(2)])).await;
    // Requests without an id on one replica must not shift where the next new id lands.
    for _ in 0..3 {
        assert_eq!(
            get(&b.url("/data"), &[]).await.expect("request").status,
            200
        );
    }
    let mut differ = Vec::new();
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for i in 0..IDS {
        let id = format!("stable-{i}");
        let (on_a, on_b) = (node_for(&a, &id).await, node_for(&b, &id).await);
        if on_a != on_b {
            differ.push((id.clone(), on_a.clone(), on_b));
        }
        *per_node.entry(on_a).or_default() += 1;
    }
    assert!(
        differ.is_empty(),
        "{} of {IDS} ids differ: {differ:?}",
        differ.len()
    );
    assert_eq!(per_node.len(), 4, "every node gets ids: {per_node:?}");
    for (node, n) in &per_node {
        assert!(*n >= 20, "{node} got only {n} of {IDS} ids: {per_node:?}");
    }
    // A lost binding (deleted here; gone with Redis in production) comes back to the same node.
    for i in 0..20 {
        let id = format!("stable-{i}");
        let before = node_for(&a, &id).await;
        assert_eq!(unbind(&a, &id).await, 204);
        assert_eq!(
            node_for(&a, &id).await,
            before,
            "{id} rebinds to the same node"
        );
    }
    // The README walk-through's ids: demo-2 lands on node-1 and demo-1 on node-2 of those two.
    let c = Gateway::start(&config(&[entry(1), entry(0)])).await;
    assert_eq!(node_for(&c, "demo-2").await, "node-1");
    assert_eq!(node_for(&c, "demo-1").await, "node-2");
}
