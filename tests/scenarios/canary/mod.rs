//! Canary and version routing (SPEC section 3 `[routes.canary]`, section 6): version header and query,
//! weights without a version, no-match fallback (WARN + counter) or reject, hash-bucket splits,
//! affinity re-binding on version, and zone affinity.

mod balance;
mod split;
mod version;

use integration_tests::{get, Gateway, Mock, FAST_HEALTH};
use integration_tests::{Cluster, Config, Health, Route};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// Node ids and their versions in the canary cluster.
const NODES: [(&str, &str, u32); 4] = [
    ("v1-a", "v1", 100),
    ("v1-b", "v1", 100),
    ("v2-a", "v2", 50),
    ("v2-b", "v2", 50),
];

fn version_of(node: &str) -> &'static str {
    NODES
        .iter()
        .find(|(id, _, _)| *id == node)
        .map(|(_, v, _)| *v)
        .unwrap_or_else(|| panic!("unknown node {node}"))
}

/// Starts the four mocks and a gateway with three routes on cluster `svc`: `/strict` (no_match =
/// reject), `/split` (30 % of `x-user-id` buckets to v2) and `/` (plain canary block).
async fn canary_setup() -> (Vec<Mock>, Gateway) {
    let mut mocks = Vec::new();
    let mut toml = format!("{FAST_HEALTH}\n[[clusters]]\nname = \"svc\"\n");
    for (id, version, weight) in NODES {
        let m = Mock::start_with(id, &["--version", version]).await;
        toml.push_str(&format!("  [[clusters.nodes]]\n  id = \"{id}\"\n  addr = \"{}\"\n  weight = {weight}\n  metadata = {{ version = \"{version}\" }}\n", m.addr()));
        mocks.push(m);
    }
    // `/strict` and `/split` strip their prefix; each has its own `[routes.canary]` lines.
    let split = r#"split = [{ by = "header:x-user-id", percent = 30, version = "v2" }]"#;
    for (id, canary) in [("strict", r#"no_match = "reject""#), ("split", split)] {
        let prefix = format!("/{id}");
        let lines = format!("strip_prefix = \"{prefix}\"\n  [routes.canary]\n  {canary}");
        toml.push_str(&Route::prefix(id, &prefix, "svc").line(&lines).toml());
    }
    let plain =
        "  [routes.canary]\n  version_header = \"x-version\"\n  version_query = \"version\"";
    toml.push_str(&Route::prefix("api", "/", "svc").line(plain).toml());
    let gw = Gateway::start(&toml).await;
    (mocks, gw)
}

/// Sends `n` `GET path` with `headers` from 8 concurrent tasks; returns the serving node ids.
async fn fan_out(gw: &Gateway, path: &str, headers: &[(&str, &str)], n: usize) -> Vec<String> {
    let url = gw.url(path);
    let headers: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let tasks = (0..8).map(|t| {
        let (url, headers) = (url.clone(), headers.clone());
        async move {
            let h: Vec<(&str, &str)> = headers
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let mut seen = Vec::new();
            for _ in (t..n).step_by(8) {
                let r = get(&url, &h).await.expect("request");
                assert_eq!(r.status, 200, "{}", r.text());
                seen.push(r.header("x-node-id").expect("x-node-id"));
            }
            seen
        }
    });
    futures_util::future::join_all(tasks)
        .await
        .into_iter()
        .flatten()
        .collect()
}

fn count(ids: &[String]) -> HashMap<&str, usize> {
    let mut m = HashMap::new();
    for id in ids {
        *m.entry(id.as_str()).or_insert(0) += 1;
    }
    m
}

/// A gateway over cluster `svc` of `nodes` `(mock, weight, version)` with `lb` and one catch-all
/// route carrying `route_extra`.
async fn one_cluster(nodes: &[(&Mock, u32, &str)], lb: &str, route_extra: &str) -> Gateway {
    let cluster = nodes.iter().fold(
        Cluster::new("svc").line(&format!("lb = \"{lb}\"")),
        |c, (m, weight, version)| {
            c.node_with(
                &m.id,
                &m.addr(),
                &format!("weight = {weight}\nmetadata = {{ version = \"{version}\" }}"),
            )
        },
    );
    let toml = Config::new()
        .health(Health::http_fast())
        .with_cluster(cluster)
        .route(Route::prefix("api", "/", "svc").line(route_extra))
        .toml();
    Gateway::start(&toml).await
}
