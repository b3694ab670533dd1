//! CASE-32 (passive-ejection cap) and CASE-33 (a node's own ramp, untouched by its peers).

use std::num::NonZeroU32;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::config::{Config, Protocol};

fn health(percent: u8) -> HealthConfig {
    let mut h = Config::go_defaults().clusters[0].health.clone();
    h.passive_consecutive_errors = NonZeroU32::new(2);
    h.max_ejection_percent = percent;
    h.slow_start = Some(Duration::from_secs(30));
    h
}

/// A cluster of `ids` in `reg`, peers set as a table build does.
fn cluster(reg: &Registry, ids: &[&str], h: &HealthConfig) -> Vec<Arc<Node>> {
    let nodes: Vec<Arc<Node>> = ids
        .iter()
        .map(|id| {
            let cfg = NodeConfig {
                id: (*id).into(),
                addr: "127.0.0.1:1".into(),
                weight: 100,
                metadata: Default::default(),
            };
            let settings = NodeSettings {
                health: h.clone(),
                protocol: Protocol::Http1,
                tls: None,
            };
            reg.node(&Arc::from("c"), &cfg, settings).0
        })
        .collect();
    reg.set_peers(&nodes);
    nodes
}

/// Two passive errors in a row on `n` (the limit in [`health`]).
fn fail(n: &Node, h: &HealthConfig) {
    let now = Instant::now();
    n.runtime.record_passive_error(h, "status 503", now);
    n.runtime.record_passive_error(h, "status 503", now);
}

/// A registry with cluster `c` of nodes `a` and `b`, under [`health`] with `percent`.
fn pair(percent: u8) -> (Registry, HealthConfig, Vec<Arc<Node>>) {
    let reg = Registry::new(Arc::new(Metrics::new()));
    let h = health(percent);
    let nodes = cluster(&reg, &["a", "b"], &h);
    (reg, h, nodes)
}

/// `count` probe results on `n` at `at`: passes (`ok`) or 503s.
fn probes(n: &Node, h: &HealthConfig, ok: bool, count: usize, at: Instant) {
    for _ in 0..count {
        n.runtime
            .record_probe(h, ok, if ok { "ok" } else { "503" }, at);
    }
}

fn ejected(nodes: &[Arc<Node>]) -> usize {
    nodes
        .iter()
        .filter(|n| n.state() == NodeState::Ejected)
        .count()
}

/// CASE-32 a/b/c: with every node failing, passive ejection takes at most floor(n x 50 %) nodes
/// and never the last ready one; suppressed ejections are counted.
#[test]
fn case32_passive_ejection_respects_the_cap_and_the_last_ready_node() {
    for (size, percent, most) in [
        (3, 50, 1),
        (2, 50, 1),
        (1, 50, 0),
        (4, 50, 2),
        (2, 100, 1),
        (3, 0, 0),
    ] {
        let metrics = Arc::new(Metrics::new());
        let reg = Registry::new(metrics.clone());
        let h = health(percent);
        let ids: Vec<String> = (0..size).map(|i| format!("n{i}")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let nodes = cluster(&reg, &ids, &h);
        for _ in 0..3 {
            for n in &nodes {
                fail(n, &h);
            }
        }
        assert_eq!(ejected(&nodes), most, "{size} nodes at {percent} %");
        let suppressed = metrics
            .ejections_suppressed
            .get_or_create(&crate::metrics::ClusterLabel {
                cluster: Arc::from("c"),
            })
            .get();
        assert!(
            suppressed > 0,
            "{size} nodes at {percent} %: suppressions counted"
        );
    }
}

/// CASE-32: a draining node is not ready, so the one other node is the last ready node.
#[test]
fn case32_draining_peers_do_not_count_as_ready() {
    let (_reg, h, nodes) = pair(100);
    nodes[0]
        .runtime
        .start_drain(Instant::now() + Duration::from_secs(30));
    fail(&nodes[1], &h);
    assert_eq!(nodes[1].state(), NodeState::Healthy);
    nodes[0].runtime.undrain();
    fail(&nodes[1], &h);
    assert_eq!(nodes[1].state(), NodeState::Ejected);
}

/// CASE-33: a recovered node ramps from its own recovery instant; another node joining (a reload
/// building the cluster again with a new peer) or leaving neither restarts nor ends the ramp.
#[test]
fn case33_ramp_is_not_reset_by_peers_joining_or_leaving() {
    let (reg, h, nodes) = pair(50);
    let a = &nodes[0];
    let t0 = Instant::now();
    probes(a, &h, false, 3, t0);
    assert_eq!(a.health_percent(t0), 0);
    probes(a, &h, true, 2, t0);
    // Climbs from degraded_percent (20) to 100 over 30 s, linearly.
    assert_eq!(a.health_percent(t0), 20);
    let t10 = t0 + Duration::from_secs(10);
    let before = a.health_percent(t10);
    // A reload adds node c: the cluster is built again, a's runtime is reused.
    let rebuilt = cluster(&reg, &["a", "b", "c"], &h);
    assert!(Arc::ptr_eq(&rebuilt[0].runtime, &a.runtime));
    assert_eq!(rebuilt[0].health_percent(t10), before);
    let t15 = t0 + Duration::from_secs(15);
    assert_eq!(rebuilt[0].health_percent(t15), 60, "half way: 20 + 80 / 2");
    // Node b leaves.
    let shrunk = cluster(&reg, &["a", "c"], &h);
    assert_eq!(shrunk[0].health_percent(t15), 60);
    assert_eq!(shrunk[0].health_percent(t0 + Duration::from_secs(30)), 100);
    // The new node c starts healthy at full weight (new nodes warm up only under a route's
    // [routes.warmup]); b is untouched by a's ramp.
    assert_eq!(shrunk[1].health_percent(t15), 100);
}

/// CASE-33 step 2: two failed probes degrade to 20 %; the node's own successes bring it back
/// through the ramp, never leaving it at 20 % once the ramp is over.
#[test]
fn case33_degraded_node_recovers_through_its_own_ramp() {
    let (_reg, h, nodes) = pair(50);
    let a = &nodes[0];
    let t0 = Instant::now();
    probes(a, &h, false, 2, t0);
    assert_eq!(a.state(), NodeState::Degraded);
    assert_eq!(a.health_percent(t0), 20);
    probes(a, &h, true, 2, t0);
    assert_eq!(a.state(), NodeState::Healthy);
    let mut last = 0;
    for s in 0..=30 {
        let p = a.health_percent(t0 + Duration::from_secs(s));
        assert!(p >= last, "monotonic ramp: {p} after {last} at {s} s");
        last = p;
    }
    assert_eq!(last, 100);
}
