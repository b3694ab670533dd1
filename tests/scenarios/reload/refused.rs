//! Reloads that are refused: the pre-swap connect probe, invalid files seen by the watcher, and
//! errors that name their line while traffic stays untouched.

use super::*;

/// The pre-swap connect probe refuses a reload when most new nodes fail it; otherwise the failing ones start ejected.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
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
    let resp = gw.admin_post("/admin/reload").await;
    assert_eq!(resp.status, 422, "{}", resp.text());
    let keys: Vec<String> = resp.json()["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["key"].as_str().expect("key").to_string())
        .collect();
    assert_eq!(keys, ["-", "clusters[0].nodes[2]", "clusters[0].nodes[3]"]);
    assert_eq!(generation(&gw).await, 1);
    assert_eq!(reloads(&gw, "probe_failed").await, 1.0);
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
    let resp = gw.admin_post("/admin/reload").await;
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

/// An invalid file seen by the file watcher is refused and the old table keeps serving.
#[tokio::test]
async fn invalid_file_seen_by_the_watcher_is_refused_and_the_old_table_serves() {
    let a = Mock::start("node-a").await;
    let v1 = api_file("ca", &[("node-a", &a.addr(), "")], "");
    let gw = Gateway::start(&v1).await;
    gw.write_config(&format!(
        "{v1}[[routes]]\nid = \"x\"\ncluster = \"ca\"\nbogus = 1\n"
    ));
    let deadline = Instant::now() + Duration::from_secs(5);
    while reloads(&gw, "invalid").await < 1.0 {
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
    assert_eq!(reloads(&gw, "invalid").await, 1.0);
}

/// Refused reloads name the key and line of each error, and traffic under load sees no failure meanwhile.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_reloads_name_the_line_and_leave_traffic_untouched() {
    let (a, b, v1, gw) = on_node_a("main").await;
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
        let r = gw.admin_post("/admin/reload").await;
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
    assert_eq!(reloads(&gw, "invalid").await, 3.0);
    // Mostly dead new nodes: refused by the probe, table kept.
    let dead = (
        format!("127.0.0.1:{}", free_port()),
        format!("127.0.0.1:{}", free_port()),
    );
    let mostly_dead = api_file(
        "main",
        &[
            ("node-a", &a.addr(), ""),
            ("node-b", &b.addr(), ""),
            ("dead-1", &dead.0, ""),
            ("dead-2", &dead.1, ""),
        ],
        "",
    );
    gw.write_config(&mostly_dead);
    let r = gw.admin_post("/admin/reload").await;
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
