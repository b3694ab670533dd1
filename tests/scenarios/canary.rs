//! Canary and version routing (SPEC section 3 `[routes.canary]`, section 6): version header and query,
//! weights without a version, no-match fallback (WARN + counter) or reject, hash-bucket splits,
//! affinity re-binding on version, and zone affinity.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use integration_tests::{get, Gateway, Mock, FAST_HEALTH};

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
    toml.push_str(
        r#"
[[routes]]
id = "strict"
match = { path_prefix = "/strict" }
cluster = "svc"
strip_prefix = "/strict"
  [routes.canary]
  no_match = "reject"

[[routes]]
id = "split"
match = { path_prefix = "/split" }
cluster = "svc"
strip_prefix = "/split"
  [routes.canary]
  split = [{ by = "header:x-user-id", percent = 30, version = "v2" }]

[[routes]]
id = "api"
match = { path_prefix = "/" }
cluster = "svc"
  [routes.canary]
  version_header = "x-version"
  version_query = "version"
"#,
    );
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

#[tokio::test]
async fn version_header_and_query_reach_only_v2_nodes() {
    let (_mocks, gw) = canary_setup().await;
    for (path, headers) in [
        ("/data", &[("x-version", "v2")][..]),
        ("/data?version=v2", &[][..]),
    ] {
        let ids = fan_out(&gw, path, headers, 1_000).await;
        assert_eq!(ids.len(), 1_000);
        let c = count(&ids);
        assert!(ids.iter().all(|id| version_of(id) == "v2"), "{path}: {c:?}");
        assert_eq!(c.len(), 2, "both v2 nodes share the traffic: {c:?}");
        assert!(c.values().all(|n| (400..=600).contains(n)), "{path}: {c:?}");
    }
    assert_eq!(
        gw.metric(r#"gateway_canary_fallback_total{cluster="svc"}"#)
            .await,
        0.0
    );
}

#[tokio::test]
async fn unversioned_requests_follow_weights() {
    let (_mocks, gw) = canary_setup().await;
    let ids = fan_out(&gw, "/data", &[], 1_200).await;
    let c = count(&ids);
    let v2 = ids.iter().filter(|id| version_of(id) == "v2").count() as f64 / ids.len() as f64;
    eprintln!("unversioned: v2 share {v2:.3} ({c:?})");
    // Weights 100 + 100 (v1) vs 50 + 50 (v2): v2 takes 1/3.
    assert!((v2 - 1.0 / 3.0).abs() <= 0.05, "v2 share {v2:.3} ({c:?})");
    assert_eq!(c.len(), 4, "every node serves: {c:?}");
}

#[tokio::test]
async fn unknown_version_falls_back_with_warn_and_counter() {
    let (_mocks, gw) = canary_setup().await;
    let ids = fan_out(&gw, "/data", &[("x-version", "v3")], 40).await;
    let c = count(&ids);
    assert_eq!(c.len(), 4, "served by all candidates: {c:?}");
    let line = gw
        .logs
        .wait_for(
            &["requested_version", "candidates", "matched", "cluster"],
            Duration::from_secs(2),
        )
        .await;
    for part in [
        "WARN",
        "cluster=svc",
        "requested_version=\"v3\"",
        "candidates=4",
        "matched=0",
    ] {
        assert!(
            line.contains(part) || line.contains(&part.replace('"', "")),
            "{part} missing in {line}"
        );
    }
    integration_tests::wait_until(
        Duration::from_secs(2),
        "one WARN per occurrence (40)",
        || async { gw.logs.matching(&["requested_version"]).len() >= 40 },
    )
    .await;
    assert_eq!(
        gw.logs.matching(&["requested_version"]).len(),
        40,
        "one WARN per occurrence"
    );
    assert_eq!(
        gw.metric(r#"gateway_canary_fallback_total{cluster="svc"}"#)
            .await,
        40.0
    );
}

#[tokio::test]
async fn unknown_version_is_rejected_when_configured() {
    let (_mocks, gw) = canary_setup().await;
    let r = get(&gw.url("/strict/data"), &[("x-version", "v3")])
        .await
        .expect("request");
    assert_eq!(r.status, 503, "{}", r.text());
    let body = r.json();
    assert_eq!(body["code"], -1, "{body}");
    assert!(
        body["message"].as_str().is_some_and(|m| m.contains("v3")),
        "{body}"
    );
    // A version that exists is served on the same route; none at all is balanced.
    let ok = get(&gw.url("/strict/data"), &[("x-version", "v2")])
        .await
        .expect("request");
    assert_eq!(ok.status, 200);
    assert_eq!(version_of(&ok.header("x-node-id").expect("node")), "v2");
    assert_eq!(
        get(&gw.url("/strict/data"), &[])
            .await
            .expect("request")
            .status,
        200
    );
    assert_eq!(
        gw.metric(r#"gateway_canary_fallback_total{cluster="svc"}"#)
            .await,
        0.0,
        "a reject is not a fallback"
    );
}

#[tokio::test]
async fn split_keeps_each_user_on_one_version() {
    let (_mocks, gw) = canary_setup().await;
    let url = gw.url("/split/data");
    let users: Vec<String> = (0..100).map(|u| format!("user-{u}")).collect();
    let tasks = users.chunks(13).map(|chunk| {
        let url = url.clone();
        async move {
            let mut out = Vec::new();
            for user in chunk {
                let mut versions = HashSet::new();
                for _ in 0..5 {
                    let r = get(&url, &[("x-user-id", user)]).await.expect("request");
                    assert_eq!(r.status, 200);
                    versions.insert(version_of(&r.header("x-node-id").expect("node")));
                }
                out.push((user.clone(), versions));
            }
            out
        }
    });
    let per_user: Vec<(String, HashSet<&str>)> = futures_util::future::join_all(tasks)
        .await
        .into_iter()
        .flatten()
        .collect();
    assert_eq!(per_user.len(), 100);
    for (user, versions) in &per_user {
        assert_eq!(versions.len(), 1, "{user} saw {versions:?}");
    }
    let on_v2 = per_user.iter().filter(|(_, v)| v.contains("v2")).count();
    eprintln!("split: {on_v2} of 100 users on v2");
    assert!(
        (22..=38).contains(&on_v2),
        "{on_v2} % of users on v2, want 30 +- 8"
    );
    // No user id: outside every bucket, so never on the split version's nodes while v1 is healthy.
    let ids = fan_out(&gw, "/split/data", &[], 80).await;
    assert!(
        ids.iter().all(|id| version_of(id) == "v1"),
        "{:?}",
        count(&ids)
    );
    // An explicit version still wins over the split.
    let ids = fan_out(
        &gw,
        "/split/data",
        &[("x-user-id", "user-1"), ("x-version", "v2")],
        16,
    )
    .await;
    assert!(ids.iter().all(|id| version_of(id) == "v2"));
}

#[tokio::test]
async fn bound_id_rebinds_on_version() {
    let (_mocks, gw) = canary_setup().await;
    let hops = || gw.metric(r#"hopping_count_total{reason="version"}"#);
    let send = |version: Option<&'static str>| {
        let url = gw.url("/data");
        async move {
            let mut h = vec![("x-conn-id", "c-canary-1")];
            if let Some(v) = version {
                h.push(("x-version", v));
            }
            let r = get(&url, &h).await.expect("request");
            assert_eq!(r.status, 200);
            r.header("x-node-id").expect("node")
        }
    };
    let v1_node = send(Some("v1")).await;
    assert_eq!(version_of(&v1_node), "v1");
    for _ in 0..5 {
        assert_eq!(send(None).await, v1_node, "binding holds without a version");
    }
    assert_eq!(hops().await, 0.0);

    let v2_node = send(Some("v2")).await;
    assert_eq!(version_of(&v2_node), "v2");
    assert_eq!(hops().await, 1.0, "re-bound with hop reason version");
    gw.logs
        .wait_for(
            &["Hopping triggered for conn c-canary-1", "version"],
            Duration::from_secs(2),
        )
        .await;
    for v in [Some("v2"), None, Some("v2"), Some("v3")] {
        assert_eq!(send(v).await, v2_node, "stays on its v2 node ({v:?})");
    }
    assert_eq!(
        hops().await,
        1.0,
        "no further hops, not even for a version no node has"
    );
    let conn = gw.admin_json("/admin/conns/c-canary-1").await;
    assert_eq!(conn["node"], v2_node.as_str());
}

#[tokio::test]
async fn zone_affinity_prefers_local_nodes_and_falls_back() {
    let hz = Mock::start_with("hz-a", &["--zone", "hz"]).await;
    let sh = Mock::start_with("sh-a", &["--zone", "sh"]).await;
    let none = Mock::start("nozone").await;
    let toml = format!(
        r#"[server]
zone = "hz"

{FAST_HEALTH}
[[clusters]]
name = "z"
  [[clusters.nodes]]
  id = "hz-a"
  addr = "{}"
  metadata = {{ zone = "hz" }}
  [[clusters.nodes]]
  id = "sh-a"
  addr = "{}"
  metadata = {{ zone = "sh" }}
  [[clusters.nodes]]
  id = "nozone"
  addr = "{}"

[[routes]]
id = "api"
match = {{ path_prefix = "/" }}
cluster = "z"
"#,
        hz.addr(),
        sh.addr(),
        none.addr()
    );
    let gw = Gateway::start(&toml).await;
    let ids = fan_out(&gw, "/data", &[], 80).await;
    assert!(
        ids.iter().all(|id| id == "hz-a"),
        "same-zone node only: {:?}",
        count(&ids)
    );

    hz.set_down().await;
    gw.wait_node_state("hz-a", "ejected", Duration::from_secs(3))
        .await;
    let ids = fan_out(&gw, "/data", &[], 80).await;
    let c = count(&ids);
    assert!(!c.contains_key("hz-a"), "{c:?}");
    assert_eq!(
        (c.get("sh-a"), c.get("nozone")),
        (Some(&40), Some(&40)),
        "all other nodes when none is healthy in the zone"
    );

    hz.set_up().await;
    gw.wait_node_state("hz-a", "healthy", Duration::from_secs(3))
        .await;
    let ids = fan_out(&gw, "/data", &[], 80).await;
    assert!(
        ids.iter().all(|id| id == "hz-a"),
        "back to the zone: {:?}",
        count(&ids)
    );
}

/// A gateway over cluster `svc` of `nodes` `(mock, weight, version)` with `lb` and one catch-all
/// route carrying `route_extra`.
async fn one_cluster(nodes: &[(&Mock, u32, &str)], lb: &str, route_extra: &str) -> Gateway {
    let mut toml = format!("{FAST_HEALTH}\n[[clusters]]\nname = \"svc\"\nlb = \"{lb}\"\n");
    for (m, weight, version) in nodes {
        toml.push_str(&format!(
            "  [[clusters.nodes]]\n  id = \"{}\"\n  addr = \"{}\"\n  weight = {weight}\n  metadata = {{ version = \"{version}\" }}\n",
            m.id,
            m.addr()
        ));
    }
    toml.push_str(&format!(
        "\n[[routes]]\nid = \"api\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"svc\"\n{route_extra}\n"
    ));
    Gateway::start(&toml).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_five_percent_over_ten_thousand_users_is_stable() {
    let v1 = Mock::start_with("v1-a", &["--version", "v1"]).await;
    let v2 = Mock::start_with("v2-a", &["--version", "v2"]).await;
    let gw = one_cluster(
        &[(&v1, 100, "v1"), (&v2, 100, "v2")],
        "round_robin",
        "  [routes.canary]\n  split = [{ by = \"header:x-user-id\", percent = 5, version = \"v2\" }]\n",
    )
    .await;
    let url = gw.url("/data");
    // One request per user for 10,000 distinct users: the node each landed on.
    let first: Vec<(String, String)> = futures_util::future::join_all((0..8).map(|t| {
        let url = url.clone();
        async move {
            let mut out = Vec::new();
            for u in (t..10_000).step_by(8) {
                let user = format!("user-{u}");
                let r = get(&url, &[("x-user-id", &user)]).await.expect("request");
                assert_eq!(r.status, 200);
                out.push((user, r.header("x-node-id").expect("node")));
            }
            out
        }
    }))
    .await
    .into_iter()
    .flatten()
    .collect();
    let on_v2 = first.iter().filter(|(_, n)| n == "v2-a").count();
    let share = on_v2 as f64 / first.len() as f64;
    eprintln!(
        "split 5 %: {on_v2} of {} users on v2 ({share:.4})",
        first.len()
    );
    assert_eq!(first.len(), 10_000);
    assert!((share - 0.05).abs() <= 0.015, "v2 share {share:.4}");

    // 19 more requests each for every v2 user and as many v1 users: all land where they first did.
    // (The bucket function itself is checked for all 10,000 users x 20 in the selection unit tests.)
    let mut sample: Vec<(String, String)> =
        first.iter().filter(|(_, n)| n == "v2-a").cloned().collect();
    sample.extend(
        first
            .iter()
            .filter(|(_, n)| n == "v1-a")
            .take(on_v2)
            .cloned(),
    );
    let moved: Vec<(String, String, String)> =
        futures_util::future::join_all(sample.chunks(sample.len().div_ceil(8)).map(|chunk| {
            let url = url.clone();
            async move {
                let mut moved = Vec::new();
                for (user, node) in chunk {
                    for _ in 0..19 {
                        let r = get(&url, &[("x-user-id", user)]).await.expect("request");
                        let now = r.header("x-node-id").expect("node");
                        if &now != node {
                            moved.push((user.clone(), node.clone(), now));
                        }
                    }
                }
                moved
            }
        }))
        .await
        .into_iter()
        .flatten()
        .collect();
    eprintln!(
        "split 5 %: {} users x 20 requests, {} moved",
        sample.len(),
        moved.len()
    );
    assert!(
        moved.is_empty(),
        "users changed version: {:?}",
        &moved[..moved.len().min(5)]
    );
}

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
