//! HTTP/2 connections: a node's graceful GOAWAY (CASE-09), h2c probes and GOAWAY (CASE-18), one
//! upstream connection per burst, and the connection as its own affinity key.

use super::*;

/// CASE-09: node-a sends GOAWAY(NO_ERROR) every 3 streams; 30 sequential and 30 concurrent GETs and
/// 10 POSTs with 1 KiB bodies bound by `c-4004` all succeed on node-a, no passive penalty, binding
/// kept, client connection untouched.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn h2c_node_goaway_every_three_streams_costs_nothing() {
    let (a, _b, gw) = two_nodes(FAST_HEALTH, "protocol = \"h2c\"").await;
    // Bind c-4004 to node-a: node-b drains while the binding is made.
    assert_eq!(
        gw.admin_post("/admin/nodes/node-b/drain?period=60s")
            .await
            .status,
        202
    );
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let r = c
        .get("/echo/bind", &[("x-conn-id", "c-4004")])
        .await
        .expect("bind");
    assert_eq!(r.header("x-node-id").as_deref(), Some("node-a"));
    assert_eq!(
        gw.admin_post("/admin/nodes/node-b/undrain").await.status,
        200
    );
    gw.wait_node_state("node-b", "healthy", Duration::from_secs(5))
        .await;
    let r = a.control("/control/goaway?after=3").await;
    assert_eq!(r.status, 200);
    let hops_before = gw.metric("hopping_count_total{reason=\"draining\"}").await;

    let check = |r: &h2c::H2Resp, what: &str| {
        assert_eq!(r.status, 200, "{what}: {}", r.text());
        assert_eq!(r.header("x-node-id").as_deref(), Some("node-a"), "{what}");
    };
    for i in 0..30 {
        let r = c
            .get(&format!("/echo/r?seq={i}"), &[("x-conn-id", "c-4004")])
            .await
            .expect("sequential GET");
        check(&r, &format!("sequential GET {i}"));
    }
    let mut calls = Vec::new();
    for i in 0..30 {
        let mut send = c.send.clone();
        let req = c.request(
            "GET",
            &format!("/echo/r?par={i}"),
            &[("x-conn-id", "c-4004")],
            Bytes::new(),
        );
        calls.push(tokio::spawn(async move {
            send.ready().await?;
            h2c::read_all(send.send_request(req).await?).await
        }));
    }
    for (i, call) in calls.into_iter().enumerate() {
        let r = call.await.expect("join").expect("concurrent GET");
        check(&r, &format!("concurrent GET {i}"));
    }
    let payload: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
    let sha = hex::encode(Sha256::digest(&payload));
    for i in 0..10 {
        let req = c.request(
            "POST",
            &format!("/echo/r?post={i}"),
            &[
                ("x-conn-id", "c-4004"),
                ("content-type", "application/octet-stream"),
            ],
            payload.clone(),
        );
        let r = c.fetch(req).await.expect("POST");
        check(&r, &format!("POST {i}"));
        assert_eq!(r.json()["body_len"], 1024);
        assert_eq!(r.json()["body_sha256"], sha.as_str());
    }
    // The node paid no passive-health penalty and kept the binding; the client connection is intact.
    let n = gw.node("node-a").await;
    assert_eq!(n["state"], "healthy", "{n}");
    assert_eq!(n["consecutive_failures"], 0, "{n}");
    assert_eq!(gw.admin_json("/admin/conns/c-4004").await["node"], "node-a");
    assert_eq!(
        gw.metric("hopping_count_total{reason=\"draining\"}").await,
        hops_before
    );
    assert!(
        !c.send.is_closed() && !c.conn.is_finished(),
        "the client's h2 connection was closed"
    );
    let paths = get(&format!("{}/control/stats", a.url()), &[])
        .await
        .expect("stats")
        .json();
    assert!(
        paths["requests"].as_u64().expect("requests") >= 71,
        "{paths}"
    );
}

/// CASE-18: h2c probes answered by a node that sends GOAWAY after every stream never move it out of
/// healthy (a probe refused by GOAWAY is retried, not counted); real 503s still eject, and that one
/// transition is logged once, at info.
#[tokio::test]
async fn h2c_probes_never_count_a_node_goaway_as_failure() {
    let a = Mock::start("node-a").await;
    let r = a.control("/control/goaway?after=1").await;
    assert_eq!(r.status, 200);
    let health = "[health]\ninterval = \"200ms\"\ntimeout = \"2s\"\ndegrade_after = 1\neject_after = 1\nrecover_after = 1\nslow_start = \"0s\"\n";
    let gw = one_h2c_node(health, &a).await;
    let probes_at_start = a.requests().await;
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let n = gw.node("node-a").await;
        assert_eq!(n["state"], "healthy", "node left healthy on a GOAWAY: {n}");
        assert_eq!(n["consecutive_failures"], 0, "{n}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let probes = a.requests().await - probes_at_start;
    assert!(probes >= 15, "only {probes} h2c probes in 5 s");
    assert_eq!(
        gw.logs.matching(&["node state changed"]),
        Vec::<String>::new(),
        "no transition while the node only sent GOAWAYs"
    );
    // Real failures still count: 503s eject at once with eject_after = 1.
    a.set_down().await;
    gw.wait_node_state("node-a", "ejected", Duration::from_secs(2))
        .await;
    // The transition is logged once, at info.
    let line = gw
        .logs
        .wait_for(
            &["node state changed", "node-a", "ejected"],
            Duration::from_secs(2),
        )
        .await;
    assert!(line.contains("INFO"), "{line}");
    assert_eq!(
        gw.logs.matching(&["node state changed"]).len(),
        1,
        "{:?}",
        gw.logs.matching(&["node state changed"])
    );
}

/// A burst of h2c requests to a fresh node shares one upstream connection per worker instead of
/// opening one each: with `--workers 2` (the kernel spreads the 40 client connections over both
/// workers' sockets), exactly two.
#[tokio::test]
async fn h2c_burst_to_a_fresh_node_shares_one_connection_per_worker() {
    let a = Mock::start("node-a").await;
    let health = &Health::tcp_never().toml();
    let gw = Gateway::start_with(
        &config(health, &[("node-a", a.addr())], "protocol = \"h2c\"", ""),
        &["--workers", "2"],
    )
    .await;
    a.delay(500).await;
    let calls: Vec<_> = (0..40)
        .map(|i| {
            let url = gw.url(&format!("/echo?i={i}"));
            tokio::spawn(async move { get(&url, &[]).await })
        })
        .collect();
    wait_until(
        Duration::from_secs(5),
        "40 requests in flight on node-a",
        || async { inflight(&gw, "node-a").await == 40 },
    )
    .await;
    assert_eq!(
        established_to(&gw, a.port),
        2,
        "the burst must share one h2c connection per worker"
    );
    for call in calls {
        let r = call.await.expect("join").expect("request");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["version"], "HTTP/2.0");
    }
}

/// An HTTP/2 connection without an id keeps its streams on one node until it closes.
#[tokio::test]
async fn h2_connection_is_its_own_affinity_key_until_it_closes() {
    let (_a, _b, gw) = two_nodes(TCP_HEALTH, "").await;
    let gw_addr = format!("127.0.0.1:{}", gw.port);
    let mut ids = Vec::new();
    let mut nodes = std::collections::HashSet::new();
    // Issued ids are placed by rendezvous hashing (SPEC 7): open connections (4 at least, 24 at
    // most) until both nodes have one.
    while ids.len() < 4 || (nodes.len() < 2 && ids.len() < 24) {
        let mut c = h2c::connect(&gw_addr).await;
        let first = c.get("/echo", &[]).await.expect("request");
        let id = first.header("x-conn-id").expect("an issued conn id");
        let node = first.header("x-node-id").expect("x-node-id");
        // Every request of the connection goes to its node, carrying the same id upstream.
        for _ in 0..5 {
            let r = c.get("/echo", &[]).await.expect("request");
            assert_eq!(r.header("x-node-id").as_deref(), Some(node.as_str()));
            assert_eq!(echo_header(&r.json(), "x-conn-id"), [id.as_str()]);
        }
        assert_eq!(
            gw.admin_json(&format!("/admin/conns/{id}")).await["node"],
            node.as_str()
        );
        // Closing the connection forgets its binding.
        drop(c);
        wait_until(
            Duration::from_secs(2),
            "the closed connection's binding to go",
            || async {
                get(&gw.admin(&format!("/admin/conns/{id}")), &[])
                    .await
                    .expect("admin")
                    .status
                    == 404
            },
        )
        .await;
        ids.push(id);
        nodes.insert(node);
    }
    let opened = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), opened, "each connection gets its own id");
    assert_eq!(
        nodes.len(),
        2,
        "connections are balanced across nodes: {nodes:?}"
    );
}
