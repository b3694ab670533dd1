//! Hot reload with zero downtime (SPEC section 3 `[routes.warmup]`, section 6; CASE-01, CASE-02,
//! CASE-17 reload part): atomic swap under load, coalesced triggers (latest file wins), pre-swap
//! connect probe, invalid files, warm-up ramp and automatic rollback, the rollback endpoint, node
//! state and bindings carried over by node id, and drain of removed nodes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration_tests::{free_port, get, request, wait_until, Gateway, Mock, Resp, FAST_HEALTH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// `[[clusters]]` named `name` with `nodes` as `(id, addr, metadata TOML or "")`.
fn cluster(name: &str, nodes: &[(&str, &str, &str)], extra: &str) -> String {
    let mut s = format!("[[clusters]]\nname = \"{name}\"\n{extra}\n");
    for (id, addr, meta) in nodes {
        s.push_str(&format!(
            "  [[clusters.nodes]]\n  id = \"{id}\"\n  addr = \"{addr}\"\n"
        ));
        if !meta.is_empty() {
            s.push_str(&format!("  metadata = {meta}\n"));
        }
    }
    s
}

/// A `[[routes]]` block: `prefix` to `cluster`, stripping `strip`, plus `extra` lines.
fn route(id: &str, prefix: &str, cluster: &str, strip: &str, extra: &str) -> String {
    format!("[[routes]]\nid = \"{id}\"\nmatch = {{ path_prefix = \"{prefix}\" }}\ncluster = \"{cluster}\"\nstrip_prefix = \"{strip}\"\n{extra}\n")
}

async fn admin_post(gw: &Gateway, path: &str) -> Resp {
    request("POST", &gw.admin(path), &[], Vec::new())
        .await
        .expect("admin call")
}

async fn generation(gw: &Gateway) -> u64 {
    gw.admin_json("/admin/routes").await["generation"]
        .as_u64()
        .expect("generation")
}

async fn route_ids(gw: &Gateway) -> Vec<String> {
    let v = gw.admin_json("/admin/routes").await;
    v["routes"]
        .as_array()
        .expect("routes")
        .iter()
        .map(|r| r["id"].as_str().expect("id").to_string())
        .collect()
}

/// `GET path` on a fresh connection (`Connection: close`): status and `x-node-id`.
async fn fresh_get(port: u16, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: app.example.test\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf))
        .await
        .expect("answer within 10 s")
        .expect("read");
    let text = String::from_utf8_lossy(&buf);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let node = text
        .lines()
        .find_map(|l| l.strip_prefix("x-node-id: "))
        .unwrap_or("-")
        .trim()
        .to_string();
    (status, node)
}

/// One request of a load run: status, serving node, whether it asked for `x-version: v2`.
type Outcome = (u16, String, bool);

/// Background load: `tasks` loops, each one request per `every`, until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    handles: Vec<tokio::task::JoinHandle<Vec<Outcome>>>,
}

impl Load {
    /// Each spec is `(path, v2, fresh)`: `x-version: v2` or not, fresh connection or pooled keep-alive.
    fn start(gw: &Gateway, specs: &[(&str, bool, bool)], every: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let handles = specs
            .iter()
            .map(|&(path, v2, fresh)| {
                let (stop, url, port, path) =
                    (stop.clone(), gw.url(path), gw.port, path.to_string());
                tokio::spawn(async move {
                    let headers: &[(&str, &str)] = if v2 { &[("x-version", "v2")] } else { &[] };
                    let mut tick = tokio::time::interval(every);
                    let mut out = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        tick.tick().await;
                        let (status, node) = if fresh {
                            fresh_get(port, &path, headers).await
                        } else {
                            let r = get(&url, headers).await.expect("request");
                            (
                                r.status,
                                r.header("x-node-id").unwrap_or_else(|| "-".into()),
                            )
                        };
                        out.push((status, node, v2));
                    }
                    out
                })
            })
            .collect();
        Load { stop, handles }
    }

    async fn finish(self) -> Vec<Outcome> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for h in self.handles {
            all.extend(h.await.expect("load task"));
        }
        all
    }
}

/// A loopback address whose TCP connect hangs: a listener with a full accept queue drops SYNs.
/// Keep the returned sockets alive while the address is in use.
async fn hanging_addr() -> (String, tokio::net::TcpListener, Vec<TcpStream>) {
    let sock = tokio::net::TcpSocket::new_v4().expect("socket");
    sock.bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let listener = sock.listen(1).expect("listen");
    let addr = listener.local_addr().expect("local addr");
    let mut fill = Vec::new();
    for _ in 0..8 {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await
        {
            fill.push(s);
        }
    }
    let probe = tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr)).await;
    assert!(
        probe.is_err(),
        "the accept queue of {addr} is full, so a connect hangs"
    );
    (addr.to_string(), listener, fill)
}

/// CASE-01: a slow reload (a new node whose TCP probe hangs) under 50+ req/s on `/a/x`: when the
/// reload call returns, 20 `GET /b/x` all answer 200 from node-b, `/a/x` stays 200 throughout,
/// admin and metric show generation 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case01_slow_reload_is_live_when_the_call_returns() {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let (slow, _listener, _fill) = hanging_addr().await;
    let v1 = format!(
        "{FAST_HEALTH}{}{}",
        cluster("ca", &[("node-a", &a.addr(), "")], ""),
        route("a", "/a", "ca", "/a", "")
    );
    let gw = Gateway::start(&v1).await;
    assert_eq!(generation(&gw).await, 1);
    let v2 = format!(
        "{v1}{}{}",
        cluster(
            "cb",
            &[("node-b", &b.addr(), ""), ("node-slow", &slow, "")],
            ""
        ),
        route("b", "/b", "cb", "/b", "")
    );

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
    let r = admin_post(&gw, "/admin/reload").await;
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
    assert_eq!(gw.metric("gateway_reloads_total{result=\"ok\"}").await, 1.0);
    eprintln!(
        "case01: {} /a requests at {rate:.0} req/s, reload call {reload_took:?}",
        outcomes.len()
    );
}

/// CASE-02: ~200 req/s of `/api/ping` (half `x-version: v2`, keep-alive and fresh connections)
/// through 20 reloads: zero non-2xx, no v2 request on default nodes; a reload naming a missing
/// cluster is refused with every error (key, line, column) and the old table keeps serving.
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
    let specs = [
        ("/api/echo/ping", false, false),
        ("/api/echo/ping", true, false),
        ("/api/echo/ping", false, true),
        ("/api/echo/ping", true, true),
    ];
    let load = Load::start(&gw, &specs, Duration::from_millis(20));
    for i in 0..20 {
        std::fs::write(
            &gw.config_path,
            if i % 2 == 0 { &with_new } else { &original },
        )
        .expect("write");
        let r = admin_post(&gw, "/admin/reload").await;
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
    std::fs::write(&gw.config_path, &bad).expect("write bad");
    let r = admin_post(&gw, "/admin/reload").await;
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
    assert_eq!(
        gw.metric("gateway_reloads_total{result=\"invalid\"}").await,
        1.0
    );
    let non_2xx: Vec<_> = outcomes
        .iter()
        .filter(|o| !(200..300).contains(&o.0))
        .collect();
    assert!(
        non_2xx.is_empty(),
        "{} of {} requests failed: {:?}",
        non_2xx.len(),
        outcomes.len(),
        &non_2xx[..non_2xx.len().min(5)]
    );
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
        let r = admin_post(&gw, "/admin/reload").await;
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
    let ok = gw.metric("gateway_reloads_total{result=\"ok\"}").await;
    assert!(ok >= 5.0, "5 rounds ran {ok} reloads");
    eprintln!("coalescing: 5 rounds of 4 triggers (2 file writes, SIGHUP, admin) ran {ok} swaps");
}

#[tokio::test]
async fn probe_refuses_when_most_new_nodes_fail_else_failing_ones_start_ejected() {
    let (a, b, c) = (
        Mock::start("node-a").await,
        Mock::start("node-b").await,
        Mock::start("node-c").await,
    );
    let (closed1, closed2) = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let r = route("api", "/", "main", "", "");
    let gw = Gateway::start(&format!(
        "{FAST_HEALTH}{}{r}",
        cluster("main", &[("node-a", &a.addr(), "")], "")
    ))
    .await;

    let refused = cluster(
        "main",
        &[
            ("node-a", &a.addr(), ""),
            ("node-b", &b.addr(), ""),
            ("dead-1", &closed1, ""),
            ("dead-2", &closed2, ""),
        ],
        "",
    );
    std::fs::write(&gw.config_path, format!("{FAST_HEALTH}{refused}{r}")).expect("write");
    let resp = admin_post(&gw, "/admin/reload").await;
    assert_eq!(resp.status, 422, "{}", resp.text());
    let keys: Vec<String> = resp.json()["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["key"].as_str().expect("key").to_string())
        .collect();
    assert_eq!(keys, ["-", "clusters[0].nodes[2]", "clusters[0].nodes[3]"]);
    assert_eq!(generation(&gw).await, 1);
    assert_eq!(
        gw.metric("gateway_reloads_total{result=\"probe_failed\"}")
            .await,
        1.0
    );
    gw.logs
        .wait_for(
            &["reload refused", "2 of 3 new nodes failed"],
            Duration::from_secs(2),
        )
        .await;

    let accepted = cluster(
        "main",
        &[
            ("node-a", &a.addr(), ""),
            ("node-b", &b.addr(), ""),
            ("node-c", &c.addr(), ""),
            ("dead-1", &closed1, ""),
        ],
        "",
    );
    std::fs::write(&gw.config_path, format!("{FAST_HEALTH}{accepted}{r}")).expect("write");
    let resp = admin_post(&gw, "/admin/reload").await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(
        gw.node("dead-1").await["state"],
        "ejected",
        "ejected before any probe interval passed"
    );
    assert_eq!(gw.node("node-c").await["state"], "healthy");
    for _ in 0..30 {
        let r = get(&gw.url("/echo"), &[]).await.expect("request");
        assert_eq!(r.status, 200);
        assert_ne!(r.header("x-node-id").as_deref(), Some("dead-1"));
    }
    assert_eq!(
        gw.metric("gateway_retries_total{route=\"api\",reason=\"connect_error\"}")
            .await,
        0.0,
        "no request tried the dead node"
    );
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warmup_ramps_a_new_route_from_its_initial_share() {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let v1 = format!(
        "{FAST_HEALTH}{}{}",
        cluster("ca", &[("node-a", &a.addr(), "")], ""),
        route("api", "/api", "ca", "/api", "")
    );
    let gw = Gateway::start(&v1).await;
    let warm =
        "  [routes.warmup]\n  initial_percent = 10\n  duration = \"3s\"\n  max_error_rate = 0.5\n";
    let v2 = format!(
        "{v1}{}{}",
        cluster("cb", &[("node-b", &b.addr(), "")], ""),
        route("new", "/api/echo/n", "cb", "/api", warm)
    );
    std::fs::write(&gw.config_path, v2).expect("write");
    let r = admin_post(&gw, "/admin/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let t0 = Instant::now();
    let routes = gw.admin_json("/admin/routes").await;
    assert_eq!(routes["routes"][0]["id"], "new", "more specific first");
    assert_eq!(routes["routes"][0]["warming"], true);

    // Share of node-b (the new route) per window, from 4 concurrent keep-alive loops.
    let share = |from: Duration, to: Duration| node_b_share(gw.url("/api/echo/n"), t0, from, to);
    let (first, n1) = share(Duration::ZERO, Duration::from_millis(1000)).await;
    let (late, n2) = share(Duration::from_millis(2000), Duration::from_millis(2900)).await;
    let (after, n3) = share(Duration::from_millis(3100), Duration::from_millis(3600)).await;
    eprintln!("warm-up share of the new route: first second {first:.3} ({n1} req), 2.0-2.9 s {late:.3} ({n2} req), after {after:.3} ({n3} req)");
    // Ramp 10 % -> 40 % over the first second: about 25 % expected.
    assert!((0.05..=0.35).contains(&first), "first second: {first:.3}");
    // Ramp 70 % -> 97 % between 2.0 and 2.9 s: about 84 % expected.
    assert!(late >= 0.65 && late > first + 0.3, "2.0-2.9 s: {late:.3}");
    assert_eq!(
        after, 1.0,
        "after the window the new route takes all its matches"
    );
    assert_eq!(
        gw.metric("gateway_reloads_total{result=\"rolled_back\"}")
            .await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warmup_error_rate_above_limit_rolls_back_automatically() {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let v1 = format!(
        "{FAST_HEALTH}{}{}",
        cluster("ca", &[("node-a", &a.addr(), "")], ""),
        route("api", "/api", "ca", "/api", "")
    );
    let gw = Gateway::start(&v1).await;
    let warm = "  [routes.warmup]\n  initial_percent = 50\n  duration = \"30s\"\n  max_error_rate = 0.05\n";
    // The new route sends /api/x/status/500 to node-b's /status/500 (500); the old route sends it
    // to node-a's /x/status/500 (404: not an error, so node-a stays healthy).
    let v2 = format!(
        "{v1}{}{}",
        cluster("cb", &[("node-b", &b.addr(), "")], ""),
        route("new", "/api/x", "cb", "/api/x", warm)
    );
    std::fs::write(&gw.config_path, v2).expect("write");
    let r = admin_post(&gw, "/admin/reload").await;
    assert_eq!((r.status, generation(&gw).await), (200, 2), "{}", r.text());
    let mut sent = 0;
    wait_until(Duration::from_secs(10), "automatic rollback", || {
        sent += 1;
        let (url, gw) = (gw.url("/api/x/status/500"), &gw);
        async move {
            let _ = get(&url, &[]).await.expect("request");
            gw.metric("gateway_reloads_total{result=\"rolled_back\"}")
                .await
                >= 1.0
        }
    })
    .await;
    assert_eq!(
        gw.metric("gateway_reloads_total{result=\"rolled_back\"}")
            .await,
        1.0
    );
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

#[tokio::test]
async fn rollback_endpoint_restores_the_previous_table() {
    let a = Mock::start("node-a").await;
    let v1 = format!(
        "{FAST_HEALTH}{}{}",
        cluster("ca", &[("node-a", &a.addr(), "")], ""),
        route("api", "/api", "ca", "/api", "")
    );
    let gw = Gateway::start(&v1).await;
    let r = admin_post(&gw, "/admin/rollback").await;
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
    assert_eq!(
        admin_post(&gw, "/admin/reload").await.json()["generation"],
        2
    );
    assert_eq!(
        route_ids(&gw).await,
        ["api", "new"],
        "equally specific: file order"
    );
    assert_eq!(
        get(&gw.url("/new/echo"), &[])
            .await
            .expect("request")
            .status,
        200
    );

    let r = admin_post(&gw, "/admin/rollback").await;
    assert_eq!(
        (r.status, r.json()["generation"].as_u64()),
        (200, Some(3)),
        "{}",
        r.text()
    );
    assert_eq!(route_ids(&gw).await, ["api"]);
    assert_eq!(
        get(&gw.url("/new/echo"), &[])
            .await
            .expect("request")
            .status,
        404
    );
    assert_eq!(gw.metric("gateway_route_table_generation").await, 3.0);
    assert_eq!(
        gw.metric("gateway_reloads_total{result=\"rollback\"}")
            .await,
        1.0
    );
    // A second rollback undoes the first.
    assert_eq!(
        admin_post(&gw, "/admin/rollback").await.json()["generation"],
        4
    );
    assert_eq!(
        route_ids(&gw).await,
        ["api", "new"],
        "equally specific: file order"
    );
}

#[tokio::test]
async fn invalid_file_seen_by_the_watcher_is_refused_and_the_old_table_serves() {
    let a = Mock::start("node-a").await;
    let v1 = format!(
        "{FAST_HEALTH}{}{}",
        cluster("ca", &[("node-a", &a.addr(), "")], ""),
        route("api", "/api", "ca", "/api", "")
    );
    let gw = Gateway::start(&v1).await;
    gw.write_config(&format!(
        "{v1}[[routes]]\nid = \"x\"\ncluster = \"ca\"\nbogus = 1\n"
    ));
    let deadline = Instant::now() + Duration::from_secs(5);
    while gw.metric("gateway_reloads_total{result=\"invalid\"}").await < 1.0 {
        assert!(
            Instant::now() < deadline,
            "invalid file not counted within 5 s; gateway log: {:#?}",
            gw.logs.lines()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let line = gw
        .logs
        .wait_for(&["reload refused: invalid config"], Duration::from_secs(2))
        .await;
    assert!(
        line.contains("gateway.toml:") && line.contains("bogus"),
        "{line}"
    );
    assert_eq!(generation(&gw).await, 1);
    let r = get(&gw.url("/api/echo"), &[]).await.expect("request");
    assert_eq!(
        (r.status, r.header("x-node-id").as_deref()),
        (200, Some("node-a"))
    );
    // A valid file afterwards is picked up by the watcher.
    gw.write_config(&format!("{v1}{}", route("new", "/new", "ca", "/new", "")));
    wait_until(Duration::from_secs(5), "valid file applied", || async {
        generation(&gw).await == 2
    })
    .await;
    assert_eq!(
        gw.metric("gateway_reloads_total{result=\"invalid\"}").await,
        1.0
    );
}

/// CASE-17 (reload variant): a node removed by a reload finishes its in-flight request; the next
/// request for the same id lands on a remaining node.
#[tokio::test]
async fn node_removed_by_reload_drains_its_in_flight_request() {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let tcp = "health = { kind = \"tcp\" }";
    let v1 = format!(
        "{FAST_HEALTH}{}{}",
        cluster(
            "main",
            &[("node-a", &a.addr(), ""), ("node-b", &b.addr(), "")],
            tcp
        ),
        route("api", "/", "main", "", "")
    );
    let gw = Gateway::start(&v1).await;
    b.delay(1500).await;
    // Bind a conn id to node-b so the slow request lands there.
    let slow = {
        let url = gw.url("/echo");
        tokio::spawn(async move {
            for i in 0..10 {
                let id = format!("slow-{i}");
                let t = Instant::now();
                let r = get(&url, &[("X-Conn-Id", &id)]).await.expect("request");
                if r.header("x-node-id").as_deref() == Some("node-b") {
                    return (r, t.elapsed(), id);
                }
            }
            panic!("no request reached node-b");
        })
    };
    wait_until(
        Duration::from_secs(10),
        "a request in flight on node-b",
        || async { gw.node("node-b").await["inflight"] == 1 },
    )
    .await;
    let v2 = format!(
        "{FAST_HEALTH}{}{}",
        cluster("main", &[("node-a", &a.addr(), "")], tcp),
        route("api", "/", "main", "", "")
    );
    std::fs::write(&gw.config_path, v2).expect("write");
    let r = admin_post(&gw, "/admin/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    gw.logs
        .wait_for(
            &["node removed by reload; draining", "node-b"],
            Duration::from_secs(2),
        )
        .await;
    let (resp, took, id) = slow.await.expect("slow request");
    assert_eq!(
        (resp.status, resp.header("x-node-id").as_deref()),
        (200, Some("node-b")),
        "{}",
        resp.text()
    );
    assert!(took >= Duration::from_millis(1400), "{took:?}");
    // New work for the same id goes to node-a.
    let r = get(&gw.url("/echo"), &[("X-Conn-Id", &id)])
        .await
        .expect("request");
    assert_eq!(r.header("x-node-id").as_deref(), Some("node-a"));
}

#[tokio::test]
async fn node_state_and_bindings_carry_over_an_unrelated_reload() {
    let (a, mut b, c) = (
        Mock::start("node-a").await,
        Mock::start("node-b").await,
        Mock::start("node-c").await,
    );
    let nodes = [
        ("node-a", a.addr()),
        ("node-b", b.addr()),
        ("node-c", c.addr()),
    ];
    let nodes: Vec<(&str, &str, &str)> = nodes.iter().map(|(i, a)| (*i, a.as_str(), "")).collect();
    let v1 = format!(
        "{FAST_HEALTH}{}{}",
        cluster("main", &nodes, ""),
        route("api", "/", "main", "", "")
    );
    let gw = Gateway::start(&v1).await;
    // Bind 6 ids; remember where each went.
    let mut bound = Vec::new();
    for i in 0..6 {
        let id = format!("keep-{i}");
        let r = get(&gw.url("/echo"), &[("X-Conn-Id", &id)])
            .await
            .expect("request");
        bound.push((id, r.header("x-node-id").expect("node")));
    }
    // Eject node-b (killed), and keep only bindings on node-a / node-c for the check.
    b.kill().await;
    gw.wait_node_state("node-b", "ejected", Duration::from_secs(5))
        .await;
    let hops_before = gw.metric("hopping_count_total{reason=\"ejected\"}").await;

    std::fs::write(
        &gw.config_path,
        format!("{v1}{}", route("other", "/other", "main", "/other", "")),
    )
    .expect("write");
    let r = admin_post(&gw, "/admin/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    // At once, before any probe could re-eject it: still ejected (a fresh runtime would be healthy).
    let n = gw.node("node-b").await;
    assert_eq!(
        (
            n["state"].as_str(),
            n["consecutive_failures"].as_u64().map(|f| f >= 3)
        ),
        (Some("ejected"), Some(true)),
        "{n}"
    );
    for (id, node) in bound.iter().filter(|(_, n)| n != "node-b") {
        let r = get(&gw.url("/echo"), &[("X-Conn-Id", id)])
            .await
            .expect("request");
        assert_eq!(
            r.header("x-node-id").as_ref(),
            Some(node),
            "binding {id} survived the reload"
        );
        assert_eq!(
            gw.admin_json(&format!("/admin/conns/{id}")).await["node"],
            node.as_str()
        );
    }
    assert_eq!(
        gw.metric("hopping_count_total{reason=\"ejected\"}").await,
        hops_before,
        "no hop for surviving bindings"
    );
}

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
    let specs = [
        ("/shared/echo/x", false, false),
        ("/shared/echo/x", false, false),
        ("/shared/echo/x", false, true),
        ("/shared/echo/x", false, true),
    ];
    let load = Load::start(&gw, &specs, Duration::from_millis(5));
    let mut misses = Vec::new();
    for i in 1..=200u64 {
        let b_live = i % 2 == 1;
        gw.write_config(if b_live { &config_b } else { &config_a });
        let r = admin_post(&gw, "/admin/reload").await;
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
    let non_2xx: Vec<_> = outcomes
        .iter()
        .filter(|o| !(200..300).contains(&o.0))
        .collect();
    eprintln!(
        "200 reloads: {} shared-route requests, {} non-2xx, {} B-route misses",
        outcomes.len(),
        non_2xx.len(),
        misses.len()
    );
    assert!(
        non_2xx.is_empty(),
        "{} of {} failed: {:?}",
        non_2xx.len(),
        outcomes.len(),
        &non_2xx[..non_2xx.len().min(5)]
    );
    assert!(misses.is_empty(), "B-only route vs live table: {misses:?}");
    assert!(outcomes.len() >= 300, "load ran: {}", outcomes.len());
    assert_eq!(generation(&gw).await, 201);
    assert_eq!(
        gw.metric("gateway_reloads_total{result=\"ok\"}").await,
        200.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_reload_race_new_route_answers_when_the_call_returns_50_times() {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let (slow, _listener, _fill) = hanging_addr().await;
    let v1 = format!(
        "{FAST_HEALTH}{}{}",
        cluster("ca", &[("node-a", &a.addr(), "")], ""),
        route("a", "/a", "ca", "/a", "")
    );
    // The slow node is new in every v2 (v1 removes it), so every v2 reload waits for its hanging
    // connect probe (bounded at 1 s), then goes live with it ejected.
    let v2 = format!(
        "{v1}{}{}",
        cluster(
            "cb",
            &[("node-b", &b.addr(), ""), ("node-slow", &slow, "")],
            ""
        ),
        route("b", "/b", "cb", "/b", "")
    );
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
        let r = admin_post(&gw, "/admin/reload").await;
        slowest = slowest.max(t0.elapsed());
        assert_eq!(r.status, 200, "rep {rep}: {}", r.text());
        // The very first request after the call returns must see the new route.
        let (status, node) = fresh_get(gw.port, "/b/echo/x", &[]).await;
        if (status, node.as_str()) != (200, "node-b") {
            misses.push((rep, status, node));
        }
        gw.write_config(&v1);
        let r = admin_post(&gw, "/admin/reload").await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_reloads_name_the_line_and_leave_traffic_untouched() {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let v1 = format!(
        "{FAST_HEALTH}{}{}",
        cluster("main", &[("node-a", &a.addr(), "")], ""),
        route("api", "/api", "main", "/api", "")
    );
    let gw = Gateway::start(&v1).await;
    let load = Load::start(
        &gw,
        &[("/api/echo/x", false, false), ("/api/echo/x", false, true)],
        Duration::from_millis(10),
    );
    let line_of = |file: &str, needle: &str| {
        file.lines()
            .position(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("{needle} in {file}"))
            + 1
    };
    // (file, line that must be reported, key reported or None for any)
    let syntax = format!("{v1}[[routes]\nid = \"x\"\n");
    let unknown = format!("{v1}{}", route("x", "/x", "nope", "", ""));
    let duplicate = format!("{v1}{}", cluster("other", &[("node-a", &b.addr(), "")], ""));
    let cases = [
        (
            syntax.clone(),
            syntax
                .lines()
                .position(|l| l == "[[routes]")
                .expect("broken header")
                + 1,
            "-",
        ),
        (
            unknown.clone(),
            line_of(&unknown, "cluster = \"nope\""),
            "routes[1].cluster",
        ),
        (
            duplicate.clone(),
            duplicate
                .lines()
                .enumerate()
                .filter(|(_, l)| l.trim_start().starts_with("id = \"node-a\""))
                .nth(1)
                .map(|(i, _)| i + 1)
                .expect("second node-a"),
            "clusters[1].nodes[0].id",
        ),
    ];
    for (n, (file, line, key)) in cases.iter().enumerate() {
        gw.write_config(file);
        let r = admin_post(&gw, "/admin/reload").await;
        assert_eq!(r.status, 422, "case {n}: {}", r.text());
        let errors = r.json()["errors"].as_array().expect("errors").clone();
        assert!(
            errors
                .iter()
                .any(|e| e["line"].as_u64() == Some(*line as u64)
                    && (*key == "-" || e["key"] == *key)),
            "case {n}: want line {line} key {key}: {errors:?}"
        );
        assert_eq!(generation(&gw).await, 1, "case {n}: live table kept");
    }
    assert_eq!(
        gw.metric("gateway_reloads_total{result=\"invalid\"}").await,
        3.0
    );
    // Mostly dead new nodes: refused by the probe, table kept.
    let dead = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let mostly_dead = format!(
        "{FAST_HEALTH}{}{}",
        cluster(
            "main",
            &[
                ("node-a", &a.addr(), ""),
                ("node-b", &b.addr(), ""),
                ("dead-1", &dead.0, ""),
                ("dead-2", &dead.1, ""),
            ],
            ""
        ),
        route("api", "/api", "main", "/api", "")
    );
    gw.write_config(&mostly_dead);
    let r = admin_post(&gw, "/admin/reload").await;
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(generation(&gw).await, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let outcomes = load.finish().await;
    let bad: Vec<_> = outcomes
        .iter()
        .filter(|o| (o.0, o.1.as_str()) != (200, "node-a"))
        .collect();
    assert!(
        bad.is_empty(),
        "traffic untouched: {:?}",
        &bad[..bad.len().min(5)]
    );
    assert!(outcomes.len() >= 20, "load ran: {}", outcomes.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warmup_ramps_a_new_node_from_its_initial_share() {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let warm =
        "  [routes.warmup]\n  initial_percent = 10\n  duration = \"3s\"\n  max_error_rate = 0.5\n";
    let v1 = format!(
        "{FAST_HEALTH}{}{}",
        cluster("ca", &[("node-a", &a.addr(), "")], ""),
        route("api", "/api", "ca", "/api", warm)
    );
    let gw = Gateway::start(&v1).await;
    let v2 = format!(
        "{FAST_HEALTH}{}{}",
        cluster(
            "ca",
            &[("node-a", &a.addr(), ""), ("node-b", &b.addr(), "")],
            ""
        ),
        route("api", "/api", "ca", "/api", warm)
    );
    gw.write_config(&v2);
    let r = admin_post(&gw, "/admin/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let t0 = Instant::now();
    let n = gw.node("node-b").await;
    assert_eq!(n["state"], "warming", "{n}");
    assert!(
        n["weight"].as_f64().expect("weight") <= 25.0,
        "starts near initial_percent: {n}"
    );
    assert_eq!(gw.node("node-a").await["state"], "healthy");

    let share = |from: Duration, to: Duration| node_b_share(gw.url("/api/echo/n"), t0, from, to);
    let (first, n1) = share(Duration::ZERO, Duration::from_millis(800)).await;
    let (late, n2) = share(Duration::from_millis(2_000), Duration::from_millis(2_900)).await;
    let (after, n3) = share(Duration::from_millis(3_300), Duration::from_millis(4_000)).await;
    eprintln!("warm-up share of the new node: 0-0.8 s {first:.3} ({n1} req), 2.0-2.9 s {late:.3} ({n2} req), after {after:.3} ({n3} req)");
    // Weight 10 -> 34 of 100 over the first 0.8 s: share ~0.16; 70 -> 97: ~0.46; then 0.5.
    assert!((0.03..=0.28).contains(&first), "first: {first:.3}");
    assert!(late >= first + 0.12, "2.0-2.9 s: {late:.3}");
    assert!(
        (0.45..=0.55).contains(&after),
        "full share after duration: {after:.3}"
    );
    assert_eq!(gw.node("node-b").await["state"], "healthy");
    assert_eq!(
        gw.metric("gateway_reloads_total{result=\"rolled_back\"}")
            .await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rss_after_1000_reloads_stays_near_rss_after_10() {
    let (a, b) = (Mock::start("node-a").await, Mock::start("node-b").await);
    let base = format!(
        "{FAST_HEALTH}{}{}",
        cluster(
            "main",
            &[("node-a", &a.addr(), ""), ("node-b", &b.addr(), "")],
            ""
        ),
        route("api", "/api", "main", "/api", "")
    );
    let with_extra = format!("{base}{}", route("extra", "/extra", "main", "/extra", ""));
    let gw = Gateway::start(&base).await;
    let reload = |i: u64| {
        let file = if i % 2 == 1 { &with_extra } else { &base };
        gw.write_config(file);
        let gw = &gw;
        async move {
            let r = admin_post(gw, "/admin/reload").await;
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

/// (method, path, headers, node expected, path the node saw).
type RouteCase<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, &'a str, &'a str);

#[tokio::test]
async fn route_predicates_and_strip_prefix_pick_the_most_specific_route() {
    let ids = [
        "node-exact",
        "node-host",
        "node-hdr",
        "node-post",
        "node-api",
    ];
    let mut mocks = Vec::new();
    let mut toml = FAST_HEALTH.to_string();
    for id in ids {
        let m = Mock::start(id).await;
        toml.push_str(&cluster(id, &[(id, &m.addr(), "")], ""));
        mocks.push(m);
    }
    // In file order least specific first, so the order can't be what decides.
    toml.push_str(
        r#"
[[routes]]
id = "api"
match = { path_prefix = "/api" }
cluster = "node-api"
strip_prefix = "/api"

[[routes]]
id = "post"
match = { path_prefix = "/api", methods = ["POST"] }
cluster = "node-post"
strip_prefix = "/api"

[[routes]]
id = "hdr"
match = { path_prefix = "/api", headers = { x-canary = "1" } }
cluster = "node-hdr"
strip_prefix = "/api"

[[routes]]
id = "host"
match = { path_prefix = "/api", host = "app.example.test" }
cluster = "node-host"
strip_prefix = "/api"

[[routes]]
id = "exact"
match = { path = "/api/echo/ping" }
cluster = "node-exact"
strip_prefix = "/api"
"#,
    );
    let gw = Gateway::start(&toml).await;
    let host = ("host", "app.example.test");
    let cases: [RouteCase<'_>; 8] = [
        ("GET", "/api/echo/x", vec![], "node-api", "/echo/x"),
        ("POST", "/api/echo/x", vec![], "node-post", "/echo/x"),
        (
            "GET",
            "/api/echo/x",
            vec![("x-canary", "1")],
            "node-hdr",
            "/echo/x",
        ),
        (
            "GET",
            "/api/echo/x",
            vec![("x-canary", "2")],
            "node-api",
            "/echo/x",
        ),
        ("GET", "/api/echo/x", vec![host], "node-host", "/echo/x"),
        // host beats headers, headers beat methods (README "Routing").
        (
            "POST",
            "/api/echo/x",
            vec![host, ("x-canary", "1")],
            "node-host",
            "/echo/x",
        ),
        (
            "POST",
            "/api/echo/x",
            vec![("x-canary", "1")],
            "node-hdr",
            "/echo/x",
        ),
        // The exact path beats every prefix route, whatever else the request carries.
        (
            "POST",
            "/api/echo/ping",
            vec![host, ("x-canary", "1")],
            "node-exact",
            "/echo/ping",
        ),
    ];
    for (method, path, headers, node, seen) in &cases {
        let r = request(method, &gw.url(path), headers, Vec::new())
            .await
            .expect("request");
        assert_eq!(r.status, 200, "{method} {path} {headers:?}: {}", r.text());
        assert_eq!(
            (r.header("x-node-id").as_deref(), r.json()["path"].as_str()),
            (Some(*node), Some(*seen)),
            "{method} {path} {headers:?}"
        );
    }
    // An exact path matches only itself; nothing matches outside /api: 404 JSON.
    let r = get(&gw.url("/api/echo/ping/more"), &[])
        .await
        .expect("request");
    assert_eq!(r.header("x-node-id").as_deref(), Some("node-api"));
    let r = get(&gw.url("/other"), &[]).await.expect("request");
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["code"], -1);
}
