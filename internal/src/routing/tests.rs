//! Unit tests of the route table: matching order, warm-up fall-through and outcome counting.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::table::{RequestHead, RouteTable};
use crate::config::load_str;
use crate::metrics::Metrics;
use crate::registry::Registry;

const CLUSTERS: &str = r#"
[[clusters]]
name = "c"
  [[clusters.nodes]]
  id = "n1"
  addr = "127.0.0.1:1"
"#;

fn table(routes: &str, previous: Option<&RouteTable>, registry: &Registry) -> RouteTable {
    let cfg = load_str(&format!("{CLUSTERS}\n{routes}"), "t.toml").expect("valid test config");
    RouteTable::build(
        Arc::new(cfg),
        registry,
        previous.map_or(1, |p| p.generation + 1),
        previous,
    )
}

fn registry() -> Registry {
    Registry::new(Arc::new(Metrics::new()))
}

fn route(id: &str, m: &str) -> String {
    format!("[[routes]]\nid = \"{id}\"\ncluster = \"c\"\nmatch = {{ {m} }}\n")
}

fn matched(
    t: &RouteTable,
    method: &str,
    host: Option<&str>,
    path: &str,
    headers: &[(&str, &str)],
    roll: f64,
) -> String {
    let mut h = http::HeaderMap::new();
    for (k, v) in headers {
        h.append(
            http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
            v.parse().expect("value"),
        );
    }
    let m = http::Method::from_bytes(method.as_bytes()).expect("method");
    let head = RequestHead {
        method: &m,
        host,
        path,
        headers: &h,
    };
    t.match_route(&head, Instant::now(), roll)
        .map_or_else(|| "-".to_string(), |r| r.id.to_string())
}

#[test]
fn most_specific_route_wins_regardless_of_file_order() {
    let routes = [
        route("all", ""),
        route("api", "path_prefix = \"/api\""),
        route("api-v2", "path_prefix = \"/api/v2\""),
        route("ping", "path = \"/api/ping\""),
        route(
            "api-host",
            "path_prefix = \"/api\", host = \"app.example.test\"",
        ),
        route(
            "api-hdr",
            "path_prefix = \"/api\", host = \"app.example.test\", headers = { x-version = \"v2\" }",
        ),
        route("api-post", "path_prefix = \"/api\", methods = [\"POST\"]"),
        route("host-only", "host = \"other.test\""),
    ]
    .concat();
    let reg = registry();
    let t = table(&routes, None, &reg);
    const APP: Option<&str> = Some("app.example.test");
    /// Method, host, path and headers of a request, then the id of the route it must match.
    type Case = (
        &'static str,
        Option<&'static str>,
        &'static str,
        &'static [(&'static str, &'static str)],
        &'static str,
    );
    let cases: [Case; 10] = [
        ("GET", None, "/x", &[], "all"),
        ("GET", None, "/api/x", &[], "api"),
        ("GET", None, "/api/v2/x", &[], "api-v2"),
        // Exact path beats the longer prefix and every host/header route.
        ("GET", APP, "/api/ping", &[("x-version", "v2")], "ping"),
        ("GET", APP, "/api/x", &[], "api-host"),
        ("GET", APP, "/api/x", &[("x-version", "v2")], "api-hdr"),
        ("GET", APP, "/api/x", &[("x-version", "v1")], "api-host"),
        ("POST", None, "/api/x", &[], "api-post"),
        // A host-only route is as specific as prefix "/" plus a host: it beats the catch-all.
        ("GET", Some("other.test"), "/x", &[], "host-only"),
        // Longer prefix beats host.
        ("GET", APP, "/api/v2/x", &[], "api-v2"),
    ];
    for (method, host, path, headers, want) in cases {
        assert_eq!(
            matched(&t, method, host, path, headers, 0.0),
            want,
            "{method} {host:?} {path} {headers:?}"
        );
    }
}

#[test]
fn ties_keep_file_order() {
    let routes = [
        route("first", "path_prefix = \"/a\", headers = { x-a = \"1\" }"),
        route("second", "path_prefix = \"/a\", headers = { x-b = \"1\" }"),
    ]
    .concat();
    let reg = registry();
    let t = table(&routes, None, &reg);
    assert_eq!(
        matched(&t, "GET", None, "/a", &[("x-a", "1"), ("x-b", "1")], 0.0),
        "first"
    );
    assert_eq!(
        matched(&t, "GET", None, "/a", &[("x-b", "1")], 0.0),
        "second"
    );
    assert_eq!(matched(&t, "GET", None, "/b", &[], 0.0), "-");
}

#[test]
fn new_route_in_warmup_takes_its_share_and_counts_outcomes() {
    let warm = "[routes.warmup]\ninitial_percent = 10\nduration = \"60s\"\nmax_error_rate = 0.05\n";
    let old = route("api", "path_prefix = \"/api\"");
    let reg = registry();
    let first = table(
        &format!("{old}{}{warm}", route("new", "path_prefix = \"/api/new\"")),
        None,
        &reg,
    );
    // The first table never warms up.
    assert!(!first.has_warmup);
    assert_eq!(matched(&first, "GET", None, "/api/new/x", &[], 99.0), "new");

    let v1 = table(&old, None, &reg);
    let v2 = table(
        &format!("{old}{}{warm}", route("new", "path_prefix = \"/api/new\"")),
        Some(&v1),
        &reg,
    );
    assert!(v2.has_warmup);
    // 10 % share: rolls below 10 take the new route, the rest fall through to the older one.
    assert_eq!(matched(&v2, "GET", None, "/api/new/x", &[], 5.0), "new");
    assert_eq!(matched(&v2, "GET", None, "/api/new/x", &[], 50.0), "api");
    // n1 was in v1: not warming.
    assert_eq!(v2.node_warmup_percent("n1", Instant::now()), 100);

    let now = Instant::now();
    for _ in 0..19 {
        v2.record_outcome(Some("new"), Some("n1"), 500, now);
    }
    assert_eq!(v2.warmup_breach(now, 20), None, "below the minimum sample");
    v2.record_outcome(Some("new"), Some("n1"), 200, now);
    let b = v2.warmup_breach(now, 20).expect("95 % errors breach 5 %");
    assert_eq!(
        (b.subject.as_str(), b.outcomes.requests, b.outcomes.errors),
        ("route new", 20, 19)
    );
    // Outcomes of the old route do not count.
    v2.record_outcome(Some("api"), Some("n1"), 500, now);
    assert_eq!(
        v2.warmup_breach(now, 20).map(|b| b.outcomes.requests),
        Some(20)
    );
    // After the window nothing breaches.
    assert_eq!(v2.warmup_breach(now + Duration::from_secs(61), 20), None);
}

#[test]
fn new_node_under_a_warmup_route_ramps() {
    let reg = registry();
    let warm = "[routes.warmup]\ninitial_percent = 20\nduration = \"100s\"\n";
    let v1 = table(
        &format!("{}{warm}", route("api", "path_prefix = \"/\"")),
        None,
        &reg,
    );
    let text = format!(
        "{CLUSTERS}  [[clusters.nodes]]\n  id = \"n2\"\n  addr = \"127.0.0.1:2\"\n{}{warm}",
        route("api", "path_prefix = \"/\"")
    );
    let cfg = load_str(&text, "t.toml").expect("valid");
    let v2 = RouteTable::build(Arc::new(cfg), &reg, 2, Some(&v1));
    let now = v2.created;
    assert_eq!(v2.node_warmup_percent("n2", now), 20);
    assert_eq!(
        v2.node_warmup_percent("n2", now + Duration::from_secs(50)),
        60
    );
    assert_eq!(v2.node_warmup_percent("n1", now), 100);
    // The route itself is not new: it takes all of its matches.
    assert_eq!(matched(&v2, "GET", None, "/x", &[], 99.9), "api");
    // Runtime state is shared by id across tables.
    assert!(Arc::ptr_eq(
        &v1.node("n1").expect("n1").runtime,
        &v2.node("n1").expect("n1").runtime
    ));
}

mod reloads {
    use super::*;
    use crate::config::Config;
    use crate::registry::NodeState;
    use crate::routing::reload::{ReloadError, ReloadTrigger, Routing};

    fn text(routes: &[&str], extra_nodes: &[(&str, String)]) -> String {
        let mut t = CLUSTERS.to_string();
        for (id, addr) in extra_nodes {
            t.push_str(&format!(
                "  [[clusters.nodes]]\n  id = \"{id}\"\n  addr = \"{addr}\"\n"
            ));
        }
        for r in routes {
            t.push_str(&route(r, &format!("path_prefix = \"/{r}\"")));
        }
        t
    }

    fn routing(dir: &std::path::Path, first: &str) -> (Arc<Routing>, std::path::PathBuf) {
        let path = dir.join("gw.toml");
        std::fs::write(&path, first).expect("write");
        let cfg: Config = load_str(first, "gw.toml").expect("valid");
        let metrics = Arc::new(Metrics::new());
        let registry = Arc::new(Registry::new(metrics.clone()));
        (
            Arc::new(Routing::new(
                cfg,
                Some(path.clone()),
                Box::new(|_| {}),
                registry,
                metrics,
            )),
            path,
        )
    }

    fn ids(r: &Routing) -> Vec<String> {
        r.table().routes.iter().map(|r| r.id.to_string()).collect()
    }

    fn tempdir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("hopgw-routing-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("temp dir");
        d
    }

    #[tokio::test]
    async fn concurrent_reloads_coalesce_and_repeated_content_is_not_reapplied() {
        let dir = tempdir("coalesce");
        let (r, path) = routing(&dir, &text(&["a"], &[]));
        std::fs::write(&path, text(&["b"], &[])).expect("write");
        let results = futures_util::future::join_all((0..16).map(|_| r.reload())).await;
        assert!(results.iter().all(|g| matches!(g, Ok(2))), "{results:?}");
        assert_eq!((r.table().generation, ids(&r)), (2, vec!["b".to_string()]));

        std::fs::write(&path, text(&["c"], &[])).expect("write");
        assert_eq!(
            r.reload_from(ReloadTrigger::File).await.expect("applied"),
            3
        );
        assert_eq!(
            r.reload_from(ReloadTrigger::File)
                .await
                .expect("same content"),
            3
        );
        assert_eq!(
            r.reload_from(ReloadTrigger::Signal)
                .await
                .expect("already live"),
            3
        );

        // After a rollback the watcher does not re-apply the unchanged file; an explicit reload does.
        assert_eq!(r.rollback("rollback").await.expect("rolled back"), 4);
        assert_eq!(ids(&r), ["b"]);
        assert_eq!(
            r.reload_from(ReloadTrigger::File)
                .await
                .expect("file unchanged"),
            4
        );
        assert_eq!(r.reload().await.expect("explicit"), 5);
        assert_eq!(ids(&r), ["c"]);

        // Invalid content: refused, the table stays; a repeated file event does not count it twice.
        std::fs::write(&path, "[[routes]]\nid = 1\n").expect("write");
        assert!(matches!(
            r.reload_from(ReloadTrigger::File).await,
            Err(ReloadError::Invalid(_))
        ));
        assert_eq!(
            r.reload_from(ReloadTrigger::File).await.expect("unchanged"),
            5
        );
        assert_eq!(ids(&r), ["c"]);
        r.shutdown().await;
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn probe_refuses_a_majority_of_dead_new_nodes_and_ejects_a_minority() {
        let dir = tempdir("probe");
        let (r, _) = routing(&dir, &text(&["a"], &[]));
        let live = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let live_addr = live.local_addr().expect("addr").to_string();
        let dead = || {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            l.local_addr().expect("addr").to_string()
        };
        let refused = load_str(
            &text(
                &["a"],
                &[("ok", live_addr.clone()), ("d1", dead()), ("d2", dead())],
            ),
            "t",
        )
        .expect("valid");
        match r.apply(refused).await {
            Err(ReloadError::ProbeFailed {
                failed: 2,
                total: 3,
                issues,
            }) => {
                assert_eq!(
                    issues.iter().map(|i| i.key.as_str()).collect::<Vec<_>>(),
                    ["clusters[0].nodes[2]", "clusters[0].nodes[3]"]
                );
            }
            other => panic!("expected a probe refusal, got {other:?}"),
        }
        assert_eq!(r.table().generation, 1);
        let live2 = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let live2_addr = live2.local_addr().expect("addr").to_string();
        let accepted = load_str(
            &text(
                &["a"],
                &[("ok", live_addr), ("ok2", live2_addr), ("d1", dead())],
            ),
            "t",
        )
        .expect("valid");
        assert_eq!(r.apply(accepted).await.expect("accepted"), 2);
        let t = r.table();
        let now = Instant::now();
        assert_eq!(
            t.node_state(t.node("d1").expect("d1"), now),
            NodeState::Ejected
        );
        assert_eq!(
            t.node_state(t.node("ok2").expect("ok2"), now),
            NodeState::Healthy
        );
        r.shutdown().await;
        let _ = std::fs::remove_dir_all(dir);
    }
}
