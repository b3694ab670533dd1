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
    RouteTable::build(Arc::new(cfg), registry, previous.map_or(1, |p| p.generation + 1), previous)
}

fn registry() -> Registry {
    Registry::new(Arc::new(Metrics::new()))
}

fn route(id: &str, m: &str) -> String {
    format!("[[routes]]\nid = \"{id}\"\ncluster = \"c\"\nmatch = {{ {m} }}\n")
}

fn matched(t: &RouteTable, method: &str, host: Option<&str>, path: &str, headers: &[(&str, &str)], roll: f64) -> String {
    let mut h = http::HeaderMap::new();
    for (k, v) in headers {
        h.append(http::HeaderName::from_bytes(k.as_bytes()).expect("name"), v.parse().expect("value"));
    }
    let m = http::Method::from_bytes(method.as_bytes()).expect("method");
    let head = RequestHead { method: &m, host, path, headers: &h };
    t.match_route(&head, Instant::now(), roll).map_or_else(|| "-".to_string(), |r| r.id.to_string())
}

#[test]
fn most_specific_route_wins_regardless_of_file_order() {
    let routes = [
        route("all", ""),
        route("api", "path_prefix = \"/api\""),
        route("api-v2", "path_prefix = \"/api/v2\""),
        route("ping", "path = \"/api/ping\""),
        route("api-host", "path_prefix = \"/api\", host = \"app.example.test\""),
        route("api-hdr", "path_prefix = \"/api\", host = \"app.example.test\", headers = { x-version = \"v2\" }"),
        route("api-post", "path_prefix = \"/api\", methods = [\"POST\"]"),
        route("host-only", "host = \"other.test\""),
    ]
    .concat();
    let reg = registry();
    let t = table(&routes, None, &reg);
    assert_eq!(matched(&t, "GET", None, "/x", &[], 0.0), "all");
    assert_eq!(matched(&t, "GET", None, "/api/x", &[], 0.0), "api");
    assert_eq!(matched(&t, "GET", None, "/api/v2/x", &[], 0.0), "api-v2");
    // Exact path beats the longer prefix and every host/header route.
    assert_eq!(matched(&t, "GET", Some("app.example.test"), "/api/ping", &[("x-version", "v2")], 0.0), "ping");
    assert_eq!(matched(&t, "GET", Some("app.example.test"), "/api/x", &[], 0.0), "api-host");
    assert_eq!(matched(&t, "GET", Some("app.example.test"), "/api/x", &[("x-version", "v2")], 0.0), "api-hdr");
    assert_eq!(matched(&t, "GET", Some("app.example.test"), "/api/x", &[("x-version", "v1")], 0.0), "api-host");
    assert_eq!(matched(&t, "POST", None, "/api/x", &[], 0.0), "api-post");
    // A host-only route is as specific as prefix "/" plus a host: it beats the catch-all.
    assert_eq!(matched(&t, "GET", Some("other.test"), "/x", &[], 0.0), "host-only");
    // Longer prefix beats host.
    assert_eq!(matched(&t, "GET", Some("app.example.test"), "/api/v2/x", &[], 0.0), "api-v2");
}

#[test]
fn ties_keep_file_order() {
    let routes = [route("first", "path_prefix = \"/a\", headers = { x-a = \"1\" }"), route("second", "path_prefix = \"/a\", headers = { x-b = \"1\" }")].concat();
    let reg = registry();
    let t = table(&routes, None, &reg);
    assert_eq!(matched(&t, "GET", None, "/a", &[("x-a", "1"), ("x-b", "1")], 0.0), "first");
    assert_eq!(matched(&t, "GET", None, "/a", &[("x-b", "1")], 0.0), "second");
    assert_eq!(matched(&t, "GET", None, "/b", &[], 0.0), "-");
}

#[test]
fn new_route_in_warmup_takes_its_share_and_counts_outcomes() {
    let warm = "[routes.warmup]\ninitial_percent = 10\nduration = \"60s\"\nmax_error_rate = 0.05\n";
    let old = route("api", "path_prefix = \"/api\"");
    let reg = registry();
    let first = table(&format!("{old}{}{warm}", route("new", "path_prefix = \"/api/new\"")), None, &reg);
    // The first table never warms up.
    assert!(!first.has_warmup);
    assert_eq!(matched(&first, "GET", None, "/api/new/x", &[], 99.0), "new");

    let v1 = table(&old, None, &reg);
    let v2 = table(&format!("{old}{}{warm}", route("new", "path_prefix = \"/api/new\"")), Some(&v1), &reg);
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
    assert_eq!((b.subject.as_str(), b.outcomes.requests, b.outcomes.errors), ("route new", 20, 19));
    // Outcomes of the old route do not count.
    v2.record_outcome(Some("api"), Some("n1"), 500, now);
    assert_eq!(v2.warmup_breach(now, 20).map(|b| b.outcomes.requests), Some(20));
    // After the window nothing breaches.
    assert_eq!(v2.warmup_breach(now + Duration::from_secs(61), 20), None);
}

#[test]
fn new_node_under_a_warmup_route_ramps() {
    let reg = registry();
    let warm = "[routes.warmup]\ninitial_percent = 20\nduration = \"100s\"\n";
    let v1 = table(&format!("{}{warm}", route("api", "path_prefix = \"/\"")), None, &reg);
    let text = format!("{CLUSTERS}  [[clusters.nodes]]\n  id = \"n2\"\n  addr = \"127.0.0.1:2\"\n{}{warm}", route("api", "path_prefix = \"/\""));
    let cfg = load_str(&text, "t.toml").expect("valid");
    let v2 = RouteTable::build(Arc::new(cfg), &reg, 2, Some(&v1));
    let now = v2.created;
    assert_eq!(v2.node_warmup_percent("n2", now), 20);
    assert_eq!(v2.node_warmup_percent("n2", now + Duration::from_secs(50)), 60);
    assert_eq!(v2.node_warmup_percent("n1", now), 100);
    // The route itself is not new: it takes all of its matches.
    assert_eq!(matched(&v2, "GET", None, "/x", &[], 99.9), "api");
    // Runtime state is shared by id across tables.
    assert!(Arc::ptr_eq(&v1.node("n1").expect("n1").runtime, &v2.node("n1").expect("n1").runtime));
}
