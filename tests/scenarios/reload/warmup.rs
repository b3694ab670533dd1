//! Warm-up and rollback (SPEC section 3 `[routes.warmup]`): new routes and nodes ramp from their
//! initial share, a high error rate rolls back automatically, and the rollback endpoint.

use super::*;

/// Node-b's share of `GET url` answers between `t0 + from` and `t0 + to`, from 4 concurrent
/// keep-alive loops; returns (share 0..=1, requests). Every answer must be 200.
async fn node_b_share(url: String, t0: Instant, from: Duration, to: Duration) -> (f64, u32) {
    tokio::time::sleep_until(t0 + from).await;
    let tasks = (0..4).map(|_| {
        let url = url.clone();
        async move {
            let (mut new, mut all) = (0u32, 0u32);
            while Instant::now() < t0 + to {
                let r = get(&url, &[]).await.expect("request");
                assert_eq!(r.status, 200);
                all += 1;
                new += u32::from(r.header("x-node-id").as_deref() == Some("node-b"));
            }
            (new, all)
        }
    });
    let (new, all) = futures_util::future::join_all(tasks)
        .await
        .into_iter()
        .fold((0, 0), |s, x| (s.0 + x.0, s.1 + x.1));
    (f64::from(new) / f64::from(all.max(1)), all)
}

/// [`node_b_share`] of `GET /api/echo/n` on `gw` in each of three windows (ms after `t0`), in order.
async fn shares(gw: &Gateway, t0: Instant, windows: [(u64, u64); 3]) -> [(f64, u32); 3] {
    let mut out = [(0.0, 0); 3];
    for (o, (from, to)) in out.iter_mut().zip(windows) {
        let (from, to) = (Duration::from_millis(from), Duration::from_millis(to));
        *o = node_b_share(gw.url("/api/echo/n"), t0, from, to).await;
    }
    out
}

/// `v1` plus cluster `cb` over node-b `b` and route `id` for `prefix` to it, stripping `strip`,
/// with warm-up lines `warm` ([`route`]).
fn plus_route_to_b(v1: &str, b: &Mock, id: &str, prefix: &str, strip: &str, warm: &str) -> String {
    format!(
        "{v1}{}{}",
        cluster("cb", &[("node-b", &b.addr(), "")], ""),
        route(id, prefix, "cb", strip, warm)
    )
}

/// A new route with `[routes.warmup]` starts at its initial share of traffic and ramps up to all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warmup_ramps_a_new_route_from_its_initial_share() {
    let (_a, b, v1, gw) = on_node_a("ca").await;
    let warm =
        "  [routes.warmup]\n  initial_percent = 10\n  duration = \"3s\"\n  max_error_rate = 0.5\n";
    let v2 = plus_route_to_b(&v1, &b, "new", "/api/echo/n", "/api", warm);
    std::fs::write(&gw.config_path, v2).expect("write");
    let r = gw.admin_post("/admin/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let t0 = Instant::now();
    let routes = gw.admin_json("/admin/routes").await;
    assert_eq!(routes["routes"][0]["id"], "new", "more specific first");
    assert_eq!(routes["routes"][0]["warming"], true);

    // Share of node-b (the new route) per window, from 4 concurrent keep-alive loops.
    let [(first, n1), (late, n2), (after, n3)] =
        shares(&gw, t0, [(0, 1000), (2000, 2900), (3100, 3600)]).await;
    eprintln!("warm-up share of the new route: first second {first:.3} ({n1} req), 2.0-2.9 s {late:.3} ({n2} req), after {after:.3} ({n3} req)");
    // Ramp 10 % -> 40 % over the first second: about 25 % expected.
    assert!((0.05..=0.35).contains(&first), "first second: {first:.3}");
    // Ramp 70 % -> 97 % between 2.0 and 2.9 s: about 84 % expected.
    assert!(late >= 0.65 && late > first + 0.3, "2.0-2.9 s: {late:.3}");
    assert_eq!(
        after, 1.0,
        "after the window the new route takes all its matches"
    );
    assert_eq!(reloads(&gw, "rolled_back").await, 0.0);
}

/// A node added by a reload with warm-up starts at its initial share and ramps up over the warm-up period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warmup_ramps_a_new_node_from_its_initial_share() {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let warm =
        "  [routes.warmup]\n  initial_percent = 10\n  duration = \"3s\"\n  max_error_rate = 0.5\n";
    let v1 = api_file("ca", &[("node-a", &a.addr(), "")], warm);
    let gw = Gateway::start(&v1).await;
    let v2 = api_file(
        "ca",
        &[("node-a", &a.addr(), ""), ("node-b", &b.addr(), "")],
        warm,
    );
    gw.write_config(&v2);
    let r = gw.admin_post("/admin/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let t0 = Instant::now();
    let n = gw.node("node-b").await;
    assert_eq!(n["state"], "warming", "{n}");
    assert!(
        n["weight"].as_f64().expect("weight") <= 25.0,
        "starts near initial_percent: {n}"
    );
    assert_eq!(gw.node("node-a").await["state"], "healthy");

    let [(first, n1), (late, n2), (after, n3)] =
        shares(&gw, t0, [(0, 800), (2_000, 2_900), (3_300, 4_000)]).await;
    eprintln!("warm-up share of the new node: 0-0.8 s {first:.3} ({n1} req), 2.0-2.9 s {late:.3} ({n2} req), after {after:.3} ({n3} req)");
    // Weight 10 -> 34 of 100 over the first 0.8 s: share ~0.16; 70 -> 97: ~0.46; then 0.5.
    assert!((0.03..=0.28).contains(&first), "first: {first:.3}");
    assert!(late >= first + 0.12, "2.0-2.9 s: {late:.3}");
    assert!(
        (0.45..=0.55).contains(&after),
        "full share after duration: {after:.3}"
    );
    assert_eq!(gw.node("node-b").await["state"], "healthy");
    assert_eq!(reloads(&gw, "rolled_back").await, 0.0);
}

/// An error rate above the warm-up limit rolls the reload back automatically to the previous table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warmup_error_rate_above_limit_rolls_back_automatically() {
    let (_a, b, v1, gw) = on_node_a("ca").await;
    let warm = "  [routes.warmup]\n  initial_percent = 50\n  duration = \"30s\"\n  max_error_rate = 0.05\n";
    // The new route sends /api/x/status/500 to node-b's /status/500 (500); the old route sends it
    // to node-a's /x/status/500 (404: not an error, so node-a stays healthy).
    let v2 = plus_route_to_b(&v1, &b, "new", "/api/x", "/api/x", warm);
    std::fs::write(&gw.config_path, v2).expect("write");
    let r = gw.admin_post("/admin/reload").await;
    assert_eq!((r.status, generation(&gw).await), (200, 2), "{}", r.text());
    let mut sent = 0;
    wait_until(Duration::from_secs(10), "automatic rollback", || {
        sent += 1;
        let (url, gw) = (gw.url("/api/x/status/500"), &gw);
        async move {
            let _ = get(&url, &[]).await.expect("request");
            reloads(gw, "rolled_back").await >= 1.0
        }
    })
    .await;
    assert_eq!(reloads(&gw, "rolled_back").await, 1.0);
    assert_eq!(
        generation(&gw).await,
        3,
        "the rollback is a swap of its own"
    );
    assert_eq!(gw.metric("gateway_route_table_generation").await, 3.0);
    assert_eq!(route_ids(&gw).await, ["api"]);
    let line = gw
        .logs
        .wait_for(
            &["warm-up error rate above max_error_rate", "route new"],
            Duration::from_secs(2),
        )
        .await;
    assert!(line.contains("generation=2"), "{line}");
    gw.logs
        .wait_for(
            &["route table rolled back", "rolled_back"],
            Duration::from_secs(2),
        )
        .await;
    // The route is gone: node-a answers everything now, and nothing rolls back again.
    for _ in 0..30 {
        let r = get(&gw.url("/api/x/status/500"), &[])
            .await
            .expect("request");
        assert_eq!(
            (r.status, r.header("x-node-id").as_deref()),
            (404, Some("node-a"))
        );
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(generation(&gw).await, 3);
    eprintln!("rollback after {sent} requests");
}

/// `POST /admin/rollback` restores the previous route table and its generation.
#[tokio::test]
async fn rollback_endpoint_restores_the_previous_table() {
    let a = Mock::start("node-a").await;
    let v1 = api_file("ca", &[("node-a", &a.addr(), "")], "");
    let gw = Gateway::start(&v1).await;
    let r = gw.admin_post("/admin/rollback").await;
    assert_eq!(r.status, 422, "nothing to roll back to: {}", r.text());
    assert!(r.json()["errors"][0]["message"]
        .as_str()
        .expect("message")
        .contains("no previous"));

    std::fs::write(
        &gw.config_path,
        format!("{v1}{}", route("new", "/new", "ca", "/new", "")),
    )
    .expect("write");
    assert_eq!(gw.admin_post("/admin/reload").await.json()["generation"], 2);
    assert_eq!(
        route_ids(&gw).await,
        ["api", "new"],
        "equally specific: file order"
    );
    assert_eq!(status_of(&gw, "/new/echo").await, 200);

    let r = gw.admin_post("/admin/rollback").await;
    assert_eq!(
        (r.status, r.json()["generation"].as_u64()),
        (200, Some(3)),
        "{}",
        r.text()
    );
    assert_eq!(route_ids(&gw).await, ["api"]);
    assert_eq!(status_of(&gw, "/new/echo").await, 404);
    assert_eq!(gw.metric("gateway_route_table_generation").await, 3.0);
    assert_eq!(reloads(&gw, "rollback").await, 1.0);
    // A second rollback undoes the first.
    assert_eq!(
        gw.admin_post("/admin/rollback").await.json()["generation"],
        4
    );
    assert_eq!(
        route_ids(&gw).await,
        ["api", "new"],
        "equally specific: file order"
    );
}
