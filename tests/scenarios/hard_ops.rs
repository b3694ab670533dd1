//! Issue 13, operations side: every config error at once (CLI and admin reload), reloads that
//! leave long-lived connections alone (CASE-29), the passive-ejection cap (CASE-32) and a
//! recovered node's own slow-start ramp across reloads (CASE-33).

use std::time::Duration;

use tokio::time::Instant;

use futures_util::{SinkExt, StreamExt};
use integration_tests::{cluster_toml, get, request, wait_until, Gateway, Mock};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

const TCP_HEALTH: &str = "[health]\nkind = \"tcp\"\ninterval = \"200ms\"\ntimeout = \"200ms\"\n";

/// A file with a bad duration on line 8, a wrongly typed value on line 14 and an unknown key on
/// line 20 (and nothing else wrong).
fn three_errors_file() -> String {
    let mut lines = vec![String::new(); 22];
    lines[0] = "[[clusters]]".into();
    lines[1] = "name = \"c\"".into();
    lines[2] = "  [[clusters.nodes]]".into();
    lines[3] = "  id = \"a\"".into();
    lines[4] = "  addr = \"127.0.0.1:1\"".into();
    lines[6] = "[health]".into();
    lines[7] = "interval = \"2 parsecs\"".into();
    lines[13] = "eject_after = \"three\"".into();
    lines[15] = "[[routes]]".into();
    lines[16] = "id = \"r\"".into();
    lines[17] = "cluster = \"c\"".into();
    lines[19] = "bogus_key = 1".into();
    lines.join("\n")
}

/// The (line, column, key, message start) of each error [`three_errors_file`] must report, in order.
const THREE_ERRORS: [(usize, usize, &str, &str); 3] = [
    (8, 1, "health.interval", "invalid duration \"2 parsecs\""),
    (
        14,
        1,
        "health.eject_after",
        "invalid type: string \"three\", expected u32",
    ),
    (
        20,
        1,
        "routes[0].bogus_key",
        "unknown field `bogus_key`, expected one of",
    ),
];

/// Issue 13 defect (config errors): `--check-config` reports the serde-level errors (unknown key,
/// wrong type) and the semantic ones (bad duration) of one file together, sorted by line, exit 2.
#[test]
fn check_config_reports_every_error_sorted_by_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("three.toml");
    std::fs::write(&path, three_errors_file()).expect("write");
    let out = std::process::Command::new(integration_tests::bin("hopping-gateway"))
        .arg("--check-config")
        .arg(&path)
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    let file = path.display().to_string();
    for (got, (line, col, key, msg)) in lines.iter().zip(THREE_ERRORS) {
        let prefix = format!("{file}:{line}:{col}: {key}: {msg}");
        assert!(
            got.starts_with(&prefix),
            "{got:?} should start with {prefix:?}"
        );
    }
}

/// Issue 13 defect (config errors): `POST /admin/reload` of the same file answers 422 with all
/// three errors, sorted by line, and the live table stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_reload_reports_every_error_sorted_by_line() {
    let a = Mock::start("node-a").await;
    let good = format!(
        "{TCP_HEALTH}\n{}\n[[routes]]\nid = \"r\"\ncluster = \"c\"\n",
        cluster_toml("c", &[("node-a", a.addr())], "")
    );
    let gw = Gateway::start(&good).await;
    let generation = gw.admin_json("/admin/routes").await["generation"].clone();
    gw.write_config(&three_errors_file());
    let r = request("POST", &gw.admin("/admin/reload"), &[], vec![])
        .await
        .expect("reload");
    assert_eq!(r.status, 422, "{}", r.text());
    let errors = r.json()["errors"].as_array().expect("errors").clone();
    assert_eq!(errors.len(), 3, "{errors:?}");
    for (e, (line, col, key, msg)) in errors.iter().zip(THREE_ERRORS) {
        assert_eq!(e["line"], line, "{e}");
        assert_eq!(e["column"], col, "{e}");
        assert_eq!(e["key"], key, "{e}");
        assert!(
            e["message"].as_str().expect("message").starts_with(msg),
            "{e}"
        );
    }
    assert_eq!(
        gw.admin_json("/admin/routes").await["generation"],
        generation
    );
    let r = get(&gw.url("/data"), &[]).await.expect("still served");
    assert_eq!(r.status, 200);
}

/// The CASE-29 table: `/ws` on cluster W, `/data` on cluster G, `/api` on cluster A, plus
/// `extra` (added routes) and `a_health` (cluster A's own health block).
fn case29_config(
    w: &Mock,
    g: &Mock,
    a: &Mock,
    w_interval: &str,
    a_health: &str,
    extra: &str,
) -> String {
    format!(
        "{TCP_HEALTH}\n{}\n{}\n{}\n[[routes]]\nid = \"ws\"\ncluster = \"W\"\nmatch = {{ path_prefix = \"/ws\" }}\n[[routes]]\nid = \"g\"\ncluster = \"G\"\nmatch = {{ path_prefix = \"/data\" }}\n[[routes]]\nid = \"api\"\ncluster = \"A\"\nmatch = {{ path_prefix = \"/api\" }}\n{extra}\n",
        cluster_toml("W", &[("node-w", w.addr())], &format!("health = {{ kind = \"tcp\", interval = \"{w_interval}\" }}")),
        cluster_toml("G", &[("node-g", g.addr())], ""),
        cluster_toml("A", &[("node-api", a.addr())], a_health),
    )
}

/// CASE-29: reloads that keep a connection's route and node (an added route, another cluster's
/// health, W's own probe interval) never close or re-dial an open WebSocket or h2c connection,
/// count no hop, and return promptly while those streams are open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case29_reload_leaves_surviving_websocket_and_h2_connections_alone() {
    let w = Mock::start("node-w").await;
    let g = Mock::start("node-g").await;
    let a = Mock::start("node-api").await;
    let gw = Gateway::start(&case29_config(&w, &g, &a, "200ms", "", "")).await;
    let (mut ws, _) = timeout(
        Duration::from_secs(5),
        tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{}/ws", gw.port)),
    )
    .await
    .expect("in time")
    .expect("101");
    let hello = next_text(&mut ws).await;
    assert!(hello.contains("\"node\":\"node-w\""), "{hello}");
    let mut h2 = integration_tests::h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    assert_eq!(h2.get("/data", &[]).await.expect("h2 get").status, 200);
    let w_requests = w.requests().await;
    let reloads = [
        case29_config(
            &w,
            &g,
            &a,
            "200ms",
            "",
            "[[routes]]\nid = \"r1\"\ncluster = \"A\"\nmatch = { path_prefix = \"/r1\" }\n",
        ),
        case29_config(
            &w,
            &g,
            &a,
            "200ms",
            "health = { kind = \"tcp\", interval = \"300ms\" }",
            "",
        ),
        case29_config(&w, &g, &a, "250ms", "", ""),
    ];
    for (i, toml) in reloads.iter().enumerate() {
        let before = gw.admin_json("/admin/routes").await["generation"]
            .as_u64()
            .expect("generation");
        gw.write_config(toml);
        let t0 = Instant::now();
        let r = request("POST", &gw.admin("/admin/reload"), &[], vec![])
            .await
            .expect("reload");
        let took = t0.elapsed();
        assert_eq!(r.status, 200, "reload {i}: {}", r.text());
        assert!(
            took < Duration::from_secs(3),
            "reload {i} took {took:?} with streams open"
        );
        assert!(r.json()["generation"].as_u64().expect("generation") > before);
        // The same WebSocket echoes: no close, and no new hello (which a re-dial would bring).
        let msg = format!("after-reload-{i}");
        ws.send(Message::text(msg.clone())).await.expect("ws send");
        assert_eq!(next_text(&mut ws).await, msg, "reload {i}");
        // The same h2 connection serves: no GOAWAY ended it.
        assert!(!h2.conn.is_finished(), "reload {i}: h2 connection ended");
        assert_eq!(
            h2.get("/data", &[]).await.expect("h2 get").status,
            200,
            "reload {i}"
        );
    }
    assert_eq!(w.requests().await, w_requests, "no re-dial reached node-w");
    let text = get(&gw.admin("/metrics"), &[])
        .await
        .expect("metrics")
        .text();
    assert!(
        !text.lines().any(|l| l.starts_with("hopping_count_total{")),
        "no hop: {text}"
    );
}

async fn next_text<S>(ws: &mut S) -> String
where
    S: StreamExt<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        let m = timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("a message within 5 s")
            .expect("socket open")
            .expect("no error");
        match m {
            Message::Text(t) => return t.to_string(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// The admin view: (state, health_percent) of every node of `gw`.
async fn states(gw: &Gateway) -> Vec<(String, String, u64)> {
    gw.admin_json("/admin/nodes")
        .await
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            (
                n["id"].as_str().expect("id").to_string(),
                n["state"].as_str().expect("state").to_string(),
                n["health_percent"].as_u64().expect("health_percent"),
            )
        })
        .collect()
}

const PASSIVE_HEALTH: &str =
    "[health]\ninterval = \"200ms\"\ntimeout = \"200ms\"\npassive_consecutive_errors = 5\n";

/// CASE-32 a/b/c: with nodes answering 503 to real traffic (probes still pass), passive ejection
/// never takes more than floor(n x 50 %) nodes at once nor the last ready node; suppressed
/// ejections are counted; a 1-node cluster keeps serving the node's own 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case32_passive_ejection_never_exceeds_its_cap() {
    for (size, failing, most) in [(3usize, 2usize, 1usize), (2, 2, 1), (1, 1, 0)] {
        let mut mocks = Vec::new();
        for i in 0..size {
            mocks.push(Mock::start(&format!("node-{i}")).await);
        }
        for m in &mocks[..failing] {
            let r = request(
                "POST",
                &format!("{}/control/status-all?code=503", m.url()),
                &[],
                vec![],
            )
            .await
            .expect("knob");
            assert_eq!(r.status, 200);
        }
        let nodes: Vec<(&str, String)> = mocks.iter().map(|m| (m.id.as_str(), m.addr())).collect();
        let toml = format!(
            "{PASSIVE_HEALTH}\n{}\n[[routes]]\nid = \"r\"\ncluster = \"c\"\nretries = 0\n",
            cluster_toml("c", &nodes, "")
        );
        let gw = Gateway::start(&toml).await;
        let mut most_seen = 0;
        for i in 0..150 {
            let r = get(&gw.url("/data"), &[]).await.expect("request");
            if size == 1 {
                assert_eq!(r.status, 503);
                assert_eq!(
                    r.header("x-node-id").as_deref(),
                    Some("node-0"),
                    "the node's own 503"
                );
            }
            if i % 10 == 9 {
                let ejected = states(&gw)
                    .await
                    .iter()
                    .filter(|(_, s, _)| s == "ejected")
                    .count();
                most_seen = most_seen.max(ejected);
                assert!(ejected <= most, "{size} nodes: {ejected} ejected at once");
            }
        }
        assert_eq!(
            most_seen, most,
            "{size} nodes: the cap is reached, not undershot"
        );
        let suppressed = gw
            .metric("gateway_passive_ejections_suppressed_total{cluster=\"c\"}")
            .await;
        assert!(
            suppressed >= 1.0,
            "{size} nodes: suppressions counted ({suppressed})"
        );
    }
}

/// Node-a's health percent from the admin API, checking that its effective weight is its
/// configured weight (3) times that percent.
async fn ramp(gw: &Gateway) -> u64 {
    let n = gw.node("node-a").await;
    assert_eq!(n["configured_weight"], 3, "{n}");
    let p = n["health_percent"].as_u64().expect("percent");
    let w = n["weight"].as_f64().expect("weight");
    assert!(
        (w - 3.0 * p as f64 / 100.0).abs() < 0.05,
        "effective = configured x health %: {n}"
    );
    p
}

/// CASE-33: a node that recovered ramps over its own slow start; a reload adding a node in the
/// middle of the ramp neither restarts nor ends it, and the admin API shows configured weight,
/// effective weight and ramp progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case33_ramp_continues_through_a_reload_adding_a_node() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let c = Mock::start("node-c").await;
    let health = "[health]\ninterval = \"200ms\"\ntimeout = \"200ms\"\nslow_start = \"8s\"\n";
    let node = |id: &str, addr: String, weight: u32| {
        format!("  [[clusters.nodes]]\n  id = \"{id}\"\n  addr = \"{addr}\"\n  weight = {weight}\n")
    };
    let v1 = format!(
        "{health}\n[[clusters]]\nname = \"c\"\n{}{}\n[[routes]]\nid = \"r\"\ncluster = \"c\"\n",
        node("node-a", a.addr(), 3),
        node("node-b", b.addr(), 1)
    );
    let v2 = v1.replace(
        "\n[[routes]]",
        &format!("{}\n[[routes]]", node("node-c", c.addr(), 1)),
    );
    let gw = Gateway::start(&v1).await;
    a.set_down().await;
    gw.wait_node_state("node-a", "ejected", Duration::from_secs(10))
        .await;
    a.set_up().await;
    gw.wait_node_state("node-a", "healthy", Duration::from_secs(10))
        .await;
    let start = ramp(&gw).await;
    assert!(start < 60, "ramp starts low: {start}");
    // Part way up the ramp, a reload adds node-c.
    wait_until(
        Duration::from_secs(10),
        "node-a part way up its ramp",
        || async { ramp(&gw).await >= 40 },
    )
    .await;
    let before = ramp(&gw).await;
    gw.write_config(&v2);
    let r = request("POST", &gw.admin("/admin/reload"), &[], vec![])
        .await
        .expect("reload");
    assert_eq!(r.status, 200, "{}", r.text());
    let after = ramp(&gw).await;
    assert!(
        after >= before,
        "the ramp was not restarted: {before} -> {after}"
    );
    assert!(after < 100, "the ramp was not ended: {before} -> {after}");
    // It goes on climbing monotonically to full weight.
    let mut last = after;
    let deadline = Instant::now() + Duration::from_secs(12);
    while last < 100 {
        assert!(
            Instant::now() < deadline,
            "node-a never reached full weight (at {last} %)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let p = ramp(&gw).await;
        assert!(p >= last, "monotonic ramp: {p} after {last}");
        last = p;
    }
    assert_eq!(gw.node("node-c").await["state"], "healthy");
}
