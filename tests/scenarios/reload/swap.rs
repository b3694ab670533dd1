//! Reloads that are live when the call returns (CASE-01): a slow reload's new route answers at once,
//! repeated 50 times, and triggers fired together coalesce with the latest file winning.

use super::*;

/// `v1` plus cluster `cb` of node-b `b` and `node-slow` at `slow`, and route `b` for `/b` to it.
fn with_b_route(v1: &str, b: &Mock, slow: &str) -> String {
    format!(
        "{v1}{}{}",
        cluster(
            "cb",
            &[("node-b", &b.addr(), ""), ("node-slow", slow, "")],
            ""
        ),
        route("b", "/b", "cb", "/b", "")
    )
}

/// The first table of the swap scenarios: [`FAST_HEALTH`], cluster `ca` of node-a `a` and route
/// `a` for `/a` to it.
fn a_file(a: &Mock) -> String {
    format!(
        "{FAST_HEALTH}{}{}",
        cluster("ca", &[("node-a", &a.addr(), "")], ""),
        route("a", "/a", "ca", "/a", "")
    )
}

/// CASE-01: a slow reload (a new node whose TCP probe hangs) under 50+ req/s on `/a/x`: when the
/// reload call returns, 20 `GET /b/x` all answer 200 from node-b, `/a/x` stays 200 throughout,
/// admin and metric show generation 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case01_slow_reload_is_live_when_the_call_returns() {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let (slow, _listener, _fill) = hanging_addr().await;
    let v1 = a_file(&a);
    let gw = Gateway::start(&v1).await;
    assert_eq!(generation(&gw).await, 1);
    let v2 = with_b_route(&v1, &b, &slow);

    // 4 keep-alive loops, one request every 10 ms each: ~400 req/s offered.
    let load = Load::start(
        &gw,
        &[("/a/echo/x", false, false); 4],
        Duration::from_millis(10),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Written just before the call: the admin reload reads it first; the file watch then sees
    // content already read and does nothing.
    std::fs::write(&gw.config_path, &v2).expect("write v2");
    let t0 = Instant::now();
    let r = gw.admin_post("/admin/reload").await;
    let reload_took = t0.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["generation"], 2);
    for _ in 0..20 {
        let r = get(&gw.url("/b/echo/x"), &[]).await.expect("GET /b");
        assert_eq!(
            (r.status, r.header("x-node-id").as_deref()),
            (200, Some("node-b")),
            "{}",
            r.text()
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = t0 - Duration::from_millis(300);
    let outcomes = load.finish().await;
    let secs = started.elapsed().as_secs_f64();
    let bad: Vec<_> = outcomes
        .iter()
        .filter(|o| o.0 != 200 || o.1 != "node-a")
        .collect();
    assert!(
        bad.is_empty(),
        "every /a/x answered 200 from node-a: {bad:?}"
    );
    let rate = outcomes.len() as f64 / secs;
    assert!(rate >= 50.0, "load ran at {rate:.0} req/s");
    // The probe of the hanging node took its bounded time, and that node starts ejected.
    assert!(
        reload_took >= Duration::from_millis(900) && reload_took < Duration::from_secs(5),
        "reload took {reload_took:?}"
    );
    assert_eq!(gw.node("node-slow").await["state"], "ejected");
    assert_eq!(generation(&gw).await, 2);
    assert_eq!(gw.metric("gateway_route_table_generation").await, 2.0);
    assert_eq!(reloads(&gw, "ok").await, 1.0);
    eprintln!(
        "case01: {} /a requests at {rate:.0} req/s, reload call {reload_took:?}",
        outcomes.len()
    );
}

/// 50 times over, a slow reload's new route answers on a fresh connection as soon as the reload call returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reload_race_new_route_answers_when_the_call_returns_50_times() {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let (slow, _listener, _fill) = hanging_addr().await;
    let v1 = a_file(&a);
    // The slow node is new in every v2 (v1 removes it), so every v2 reload waits for its hanging
    // connect probe (bounded at 1 s), then goes live with it ejected.
    let v2 = with_b_route(&v1, &b, &slow);
    let gw = Gateway::start(&v1).await;
    // Requests arrive the whole time, on the old route and on the one being added.
    let load_a = Load::start(
        &gw,
        &[("/a/echo/x", false, false), ("/a/echo/x", false, true)],
        Duration::from_millis(10),
    );
    let load_b = Load::start(
        &gw,
        &[("/b/echo/x", false, false)],
        Duration::from_millis(10),
    );
    let mut misses = Vec::new();
    let mut slowest = Duration::ZERO;
    for rep in 0..50 {
        gw.write_config(&v2);
        let t0 = Instant::now();
        let r = gw.admin_post("/admin/reload").await;
        slowest = slowest.max(t0.elapsed());
        assert_eq!(r.status, 200, "rep {rep}: {}", r.text());
        // The very first request after the call returns must see the new route.
        let (status, node) = fresh_get(gw.port, "/b/echo/x", &[]).await;
        if (status, node.as_str()) != (200, "node-b") {
            misses.push((rep, status, node));
        }
        gw.write_config(&v1);
        let r = gw.admin_post("/admin/reload").await;
        assert_eq!(r.status, 200, "rep {rep} back to v1: {}", r.text());
        let (status, _) = fresh_get(gw.port, "/b/echo/x", &[]).await;
        assert_eq!(status, 404, "rep {rep}: /b is gone with v1");
    }
    let (on_a, on_b) = (load_a.finish().await, load_b.finish().await);
    eprintln!(
        "race: 50 slow reloads (slowest call {slowest:?}), {} misses, {} + {} background requests",
        misses.len(),
        on_a.len(),
        on_b.len()
    );
    assert!(
        misses.is_empty(),
        "new route missing after the call returned: {misses:?}"
    );
    assert!(
        slowest >= Duration::from_millis(900),
        "the reload was slow on purpose: {slowest:?}"
    );
    // /a never failed; /b answered 200 from node-b (v2 live) or the gateway's 404 (v1 live).
    let a_bad: Vec<_> = on_a
        .iter()
        .filter(|o| (o.0, o.1.as_str()) != (200, "node-a"))
        .collect();
    assert!(a_bad.is_empty(), "{:?}", &a_bad[..a_bad.len().min(5)]);
    let b_bad: Vec<_> = on_b
        .iter()
        .filter(|o| !matches!((o.0, o.1.as_str()), (200, "node-b") | (404, "-")))
        .collect();
    assert!(b_bad.is_empty(), "{:?}", &b_bad[..b_bad.len().min(5)]);
    assert!(on_b.iter().any(|o| o.0 == 200), "/b was live at times");
}

/// Reload triggers fired together coalesce into few reloads and the last file written is the table that serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_triggers_coalesce_and_the_latest_file_wins() {
    let a = Mock::start("node-a").await;
    let base = format!(
        "{FAST_HEALTH}{}",
        cluster("ca", &[("node-a", &a.addr(), "")], "")
    );
    let file = |marker: &str| {
        format!(
            "{base}{}",
            route(marker, &format!("/{marker}"), "ca", "", "")
        )
    };
    let gw = Gateway::start(&file("start")).await;
    for round in 0..5 {
        let (first, last) = (format!("a{round}"), format!("b{round}"));
        gw.write_config(&file(&first));
        gw.write_config(&file(&last));
        gw.signal("HUP");
        let r = gw.admin_post("/admin/reload").await;
        assert_eq!(r.status, 200, "{}", r.text());
        // The admin call was made after B was written: B is live when it returns.
        assert_eq!(
            route_ids(&gw).await,
            [last.as_str()],
            "round {round}: right after POST /admin/reload"
        );
        // Whatever the file watch and SIGHUP still do, B stays live.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            route_ids(&gw).await,
            [last.as_str()],
            "round {round}: after the other triggers ran"
        );
    }
    let ok = reloads(&gw, "ok").await;
    assert!(ok >= 5.0, "5 rounds ran {ok} reloads");
    eprintln!("coalescing: 5 rounds of 4 triggers (2 file writes, SIGHUP, admin) ran {ok} swaps");
}
