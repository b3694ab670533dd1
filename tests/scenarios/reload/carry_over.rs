//! What a reload carries over by node id: node state and bindings survive an unrelated reload, and a
//! removed node drains its in-flight request (CASE-17, reload part).

use super::*;

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
    let r = gw.admin_post("/admin/reload").await;
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

/// A reload that leaves a node in place keeps that node's health state and its bound ids (carried over by node id).
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
    let r = gw.admin_post("/admin/reload").await;
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
