//! Reloads under load cost nothing (CASE-02): 20 reloads under canary load, 200 reloads with a route
//! that follows its node, and resident memory after 1,000 reloads.

use super::*;

/// CASE-02: ~200 req/s of `/api/ping` (half `x-version: v2`, keep-alive and fresh connections)
/// through 20 reloads: zero non-2xx, no v2 request on default nodes; a reload naming a missing
/// cluster is refused with every error (key, line, column) and the old table keeps serving.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case02_twenty_reloads_under_canary_load_cost_nothing() {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let c = Mock::start_with("node-c", &["--version", "v2"]).await;
    let nodes = [
        ("node-a", a.addr(), "{ version = \"v1\" }"),
        ("node-b", b.addr(), "{ version = \"v1\" }"),
        ("node-c", c.addr(), "{ version = \"v2\" }"),
    ];
    let nodes: Vec<(&str, &str, &str)> =
        nodes.iter().map(|(i, a, m)| (*i, a.as_str(), *m)).collect();
    let base = format!("{FAST_HEALTH}{}", cluster("main", &nodes, ""));
    let api = route(
        "api",
        "/api",
        "main",
        "/api",
        "  [routes.canary]\n  version_header = \"x-version\"\n",
    );
    let original = format!("{base}{api}");
    let with_new = format!("{original}{}", route("new", "/new", "main", "/new", ""));
    let gw = Gateway::start(&original).await;

    // ~200 req/s: half with x-version: v2; keep-alive and fresh connections.
    let specs = [(false, false), (true, false), (false, true), (true, true)]
        .map(|(v2, fresh)| ("/api/echo/ping", v2, fresh));
    let load = Load::start(&gw, &specs, Duration::from_millis(20));
    for i in 0..20 {
        // Write-then-rename: the file watch never reads a half-written file (a truncated file
        // read between truncate and write would be one more generation, serving 404s).
        gw.write_config(if i % 2 == 0 { &with_new } else { &original });
        let r = gw.admin_post("/admin/reload").await;
        assert_eq!(r.status, 200, "{}", r.text());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let g = generation(&gw).await;
    assert_eq!(g, 21, "20 reloads, one generation each");
    assert_eq!(
        route_ids(&gw).await,
        ["api"],
        "the last reload wrote the original"
    );

    // A route naming a missing cluster (and a bad timeout): refused with every error.
    let bad = format!(
        "{original}{}",
        route("broken", "/broken", "nope", "", "timeout = \"soon\"")
    );
    gw.write_config(&bad);
    let r = gw.admin_post("/admin/reload").await;
    assert_eq!(r.status, 422, "{}", r.text());
    let errors = r.json()["errors"].as_array().expect("errors").clone();
    let keys: Vec<&str> = errors
        .iter()
        .map(|e| e["key"].as_str().expect("key"))
        .collect();
    assert_eq!(
        keys,
        ["routes[1].cluster", "routes[1].timeout"],
        "{errors:?}"
    );
    // Line and column of the offending key (`cluster = "nope"` starts at column 1).
    let cluster_line = bad
        .lines()
        .position(|l| l.starts_with("cluster = \"nope\""))
        .expect("line")
        + 1;
    assert_eq!(
        (errors[0]["line"].as_u64(), errors[0]["column"].as_u64()),
        (Some(cluster_line as u64), Some(1)),
        "{errors:?}"
    );
    assert_eq!(
        errors[1]["line"].as_u64(),
        Some(cluster_line as u64 + 2),
        "timeout is two lines below: {errors:?}"
    );
    assert!(errors[0]["message"]
        .as_str()
        .expect("message")
        .contains("nope"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let outcomes = load.finish().await;

    assert_eq!(
        generation(&gw).await,
        g,
        "the refused file left the table alone"
    );
    assert_eq!(reloads(&gw, "invalid").await, 1.0);
    assert_all_2xx(&outcomes);
    let v2_elsewhere: Vec<_> = outcomes.iter().filter(|o| o.2 && o.1 != "node-c").collect();
    assert!(
        v2_elsewhere.is_empty(),
        "v2 requests served by default nodes: {v2_elsewhere:?}"
    );
    assert!(
        outcomes.len() >= 300,
        "only {} requests ran",
        outcomes.len()
    );
    eprintln!(
        "case02: {} requests over 20 reloads, all 2xx",
        outcomes.len()
    );
}

/// Through 200 reloads the shared route never fails and the `/b` route always follows the node the latest file names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_reloads_keep_the_shared_route_and_b_route_follows_b() {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let base = format!(
        "{FAST_HEALTH}{}{}",
        cluster(
            "main",
            &[("node-a", &a.addr(), ""), ("node-b", &b.addr(), "")],
            ""
        ),
        route("shared", "/shared", "main", "/shared", "")
    );
    let config_a = base.clone();
    let config_b = format!(
        "{base}{}",
        route("only-b", "/only-b", "main", "/only-b", "")
    );
    let gw = Gateway::start(&config_a).await;
    // Keep-alive and fresh connections on the shared route for the whole test.
    let specs = [false, false, true, true].map(|fresh| ("/shared/echo/x", false, fresh));
    let load = Load::start(&gw, &specs, Duration::from_millis(5));
    let mut misses = Vec::new();
    for i in 1..=200u64 {
        let b_live = i % 2 == 1;
        gw.write_config(if b_live { &config_b } else { &config_a });
        let r = gw.admin_post("/admin/reload").await;
        assert_eq!(
            (r.status, r.json()["generation"].as_u64()),
            (200, Some(i + 1)),
            "reload {i}: {}",
            r.text()
        );
        // The B-only route answers exactly when B is live.
        let (status, _) = fresh_get(gw.port, "/only-b/echo/y", &[]).await;
        let want = if b_live { 200 } else { 404 };
        if status != want {
            misses.push((i, status));
        }
        // Let the load run on every generation.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let outcomes = load.finish().await;
    let non_2xx = not_2xx(&outcomes);
    eprintln!(
        "200 reloads: {} shared-route requests, {} non-2xx, {} B-route misses",
        outcomes.len(),
        non_2xx.len(),
        misses.len()
    );
    assert_all_2xx(&outcomes);
    assert!(misses.is_empty(), "B-only route vs live table: {misses:?}");
    assert!(outcomes.len() >= 300, "load ran: {}", outcomes.len());
    assert_eq!(generation(&gw).await, 201);
    assert_eq!(reloads(&gw, "ok").await, 200.0);
}

/// Resident memory after 1,000 reloads stays near the figure after 10 (no leak per reload).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rss_after_1000_reloads_stays_near_rss_after_10() {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let base = api_file(
        "main",
        &[("node-a", &a.addr(), ""), ("node-b", &b.addr(), "")],
        "",
    );
    let with_extra = format!("{base}{}", route("extra", "/extra", "main", "/extra", ""));
    let gw = Gateway::start(&base).await;
    let reload = |i: u64| {
        let file = if i % 2 == 1 { &with_extra } else { &base };
        gw.write_config(file);
        let gw = &gw;
        async move {
            let r = gw.admin_post("/admin/reload").await;
            assert_eq!(r.status, 200, "reload {i}: {}", r.text());
            // A little traffic per table so request paths touch every generation.
            let r = get(&gw.url("/api/echo/x"), &[]).await.expect("request");
            assert_eq!(r.status, 200);
        }
    };
    for i in 1..=10 {
        reload(i).await;
    }
    let rss_10 = gw.rss_kib();
    for i in 11..=1_000 {
        reload(i).await;
    }
    let rss_1000 = gw.rss_kib();
    eprintln!("rss after 10 reloads {rss_10} KiB, after 1000 {rss_1000} KiB");
    assert_eq!(generation(&gw).await, 1_001);
    assert!(
        rss_1000 <= rss_10 + 4 * 1024,
        "RSS grew {} KiB over 990 reloads",
        rss_1000.saturating_sub(rss_10)
    );
}

/// The outcomes whose status is not 2xx.
fn not_2xx(outcomes: &[Outcome]) -> Vec<&Outcome> {
    outcomes
        .iter()
        .filter(|o| !(200..300).contains(&o.0))
        .collect()
}

/// Every outcome is a 2xx; the message names the first five that are not.
fn assert_all_2xx(outcomes: &[Outcome]) {
    let non_2xx = not_2xx(outcomes);
    assert!(
        non_2xx.is_empty(),
        "{} of {} requests failed: {:?}",
        non_2xx.len(),
        outcomes.len(),
        &non_2xx[..non_2xx.len().min(5)]
    );
}
