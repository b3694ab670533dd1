//! Hops (SPEC section 7, section 8 metrics): a conn id bound to a killed or refusing node moves
//! once to a healthy node with no failed request, new ids spread again when the node returns, and
//! every counted hop records one latency observation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration_tests::check::{bind_to, hops_total, node_of, HDR};
use integration_tests::{get, wait_until, Config, Gateway, Health, Mock, Route};
use tokio::time::Instant;

/// Probe interval of [`Health::http_fast`].
const PROBE_INTERVAL: Duration = Duration::from_millis(200);

/// CASE-17: a bound node killed (connections refused) moves its conn id to a healthy node without a
/// failed request.
/// Long on purpose: the GET loop runs through the kill, so the kill, the hop and the checks after
/// it are one sequence.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_node_hops_conn_id_and_loses_no_request() {
    let (mut mocks, gw) =
        Gateway::over_node_a_and_b(Health::http_fast(), Route::api().retries(2)).await;

    let first = get(&gw.url("/data"), &[(HDR, "hop-1")]).await.expect("get");
    assert_eq!(first.status, 200);
    let old = node_of(&first);
    let (victim, other) = if old == "node-a" {
        (0, "node-b")
    } else {
        (1, "node-a")
    };
    let hops_before = hops_total(&gw).await;

    // A loop of plain GETs running through the kill: with retries none may fail.
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let loop_task = {
        let (stop, done, url) = (stop.clone(), done.clone(), gw.url("/data"));
        tokio::spawn(async move {
            let (mut ok, mut failures) = (0u32, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                done.fetch_add(1, Ordering::Relaxed);
                match get(&url, &[]).await {
                    Ok(r) if r.status == 200 => ok += 1,
                    Ok(r) => failures.push(format!("{} {}", r.status, r.text())),
                    Err(e) => failures.push(e.to_string()),
                }
            }
            (ok, failures)
        })
    };
    wait_until(Duration::from_secs(5), "the GET loop to run", || {
        let n = done.load(Ordering::Relaxed);
        async move { n >= 5 }
    })
    .await;

    let killed_at = Instant::now();
    mocks[victim].kill().await;
    let hop_ms = loop {
        let r = get(&gw.url("/data"), &[(HDR, "hop-1")])
            .await
            .expect("get after kill");
        assert_eq!(
            r.status,
            200,
            "conn id request after the kill: {}",
            r.text()
        );
        if node_of(&r) == other {
            break killed_at.elapsed().as_millis();
        }
        assert!(
            killed_at.elapsed() < 2 * PROBE_INTERVAL,
            "still served by the killed node"
        );
    };
    eprintln!("FIGURE hop time after kill -9: {hop_ms} ms");
    assert!(
        hop_ms < 2 * PROBE_INTERVAL.as_millis(),
        "hop took {hop_ms} ms, want < two probe intervals"
    );

    let line = gw
        .logs
        .wait_for(
            &[&format!(
                "Hopping triggered for conn hop-1 from {old} to {other}"
            )],
            Duration::from_secs(5),
        )
        .await;
    assert!(line.contains("INFO"), "hop line must be INFO: {line}");
    gw.wait_node_state(&old, "ejected", Duration::from_secs(5))
        .await;
    for _ in 0..20 {
        let r = get(&gw.url("/data"), &[(HDR, "hop-1")]).await.expect("get");
        assert_eq!((r.status, node_of(&r)), (200, other.to_string()));
    }
    stop.store(true, Ordering::Relaxed);
    let (ok, failures) = loop_task.await.expect("loop task");
    assert!(
        failures.is_empty(),
        "GETs failed through the kill: {failures:?}"
    );
    assert!(ok > 10, "the loop ran only {ok} requests");

    assert_eq!(hops_total(&gw).await - hops_before, 1.0, "exactly one hop");
    let conn = gw.admin_json("/admin/conns/hop-1").await;
    assert_eq!(conn["conn_id"], "hop-1");
    assert_eq!(conn["node"], other);
    assert_eq!(
        gw.logs
            .matching(&["Hopping triggered for conn hop-1"])
            .len(),
        1,
        "one hop line"
    );
}

/// CASE-17: bindings to a refusing node move exactly once each, even under concurrent bursts; when
/// it returns the moved bindings stay and new ids spread over all nodes.
/// Long on purpose: the node's kill and return are one sequence the bindings are checked across.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case17_binding_to_a_refusing_node_moves_once_and_new_ids_spread_again() {
    let a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let c = Mock::start("node-c").await;
    let gw = Gateway::start(
        &Config::single(Health::tcp_fast(), &[&a, &b, &c], Route::api().retries(2)).toml(),
    )
    .await;
    let c3003 = bind_to(&gw, "c-3003", "node-b").await;
    let c3004 = bind_to(&gw, "c-3004", "node-b").await;
    let hops0 = hops_total(&gw).await;

    b.kill().await;
    // At once, and again: a refused connect sent nothing, so it is retried elsewhere.
    let r = get(&gw.url("/echo/s"), &[(HDR, c3003.as_str())])
        .await
        .expect("get");
    assert_eq!(r.status, 200, "{}", r.text());
    let new_node = node_of(&r);
    assert_ne!(new_node, "node-b");
    let r = get(&gw.url("/echo/s"), &[(HDR, c3003.as_str())])
        .await
        .expect("get");
    assert_eq!((r.status, node_of(&r)), (200, new_node.clone()));
    // Ten at once for c-3003 (already moved), and ten at once for c-3004, whose first requests
    // since the kill race each other to move it.
    let burst = |id: &str| {
        let (url, id) = (gw.url("/echo/s"), id.to_string());
        async move {
            let (url, id) = (&url, id.as_str());
            futures_util::future::join_all(
                (0..10).map(|_| async move { get(url, &[(HDR, id)]).await }),
            )
            .await
        }
    };
    let (r3, r4) = tokio::join!(burst(c3003.as_str()), burst(c3004.as_str()));
    let nodes3: Vec<(u16, String)> = r3
        .into_iter()
        .map(|r| r.expect("get"))
        .map(|r| (r.status, node_of(&r)))
        .collect();
    let nodes4: Vec<(u16, String)> = r4
        .into_iter()
        .map(|r| r.expect("get"))
        .map(|r| (r.status, node_of(&r)))
        .collect();
    assert!(
        nodes3.iter().all(|n| *n == (200, new_node.clone())),
        "c-3003 burst: {nodes3:?}"
    );
    let moved4 = nodes4[0].1.clone();
    assert_ne!(moved4, "node-b");
    assert!(
        nodes4.iter().all(|n| *n == (200, moved4.clone())),
        "c-3004 burst all on one new node: {nodes4:?}"
    );
    assert_eq!(
        hops_total(&gw).await - hops0,
        2.0,
        "each binding moved exactly once"
    );
    assert_eq!(
        gw.admin_json(&format!("/admin/conns/{c3003}")).await["node"],
        new_node.as_str()
    );
    assert_eq!(
        gw.admin_json(&format!("/admin/conns/{c3004}")).await["node"],
        moved4.as_str()
    );

    // node-b comes back: the moved binding stays, new ids spread over all three nodes.
    b.restart().await;
    gw.wait_node_state("node-b", "healthy", Duration::from_secs(10))
        .await;
    for _ in 0..3 {
        let r = get(&gw.url("/echo/s"), &[(HDR, c3003.as_str())])
            .await
            .expect("get");
        assert_eq!((r.status, node_of(&r)), (200, new_node.clone()));
    }
    let mut spread: HashMap<String, u32> = HashMap::new();
    for i in 0..30 {
        let r = get(&gw.url("/echo/s"), &[(HDR, &format!("c-new-{i}"))])
            .await
            .expect("get");
        assert_eq!(r.status, 200);
        *spread.entry(node_of(&r)).or_default() += 1;
    }
    for n in ["node-a", "node-b", "node-c"] {
        assert!(
            spread.get(n).copied().unwrap_or(0) >= 5,
            "30 new ids over three nodes: {spread:?}"
        );
    }
    assert_eq!(hops_total(&gw).await - hops0, 2.0);
    eprintln!("FIGURE case17 new ids spread {spread:?}");
}

/// `hopping_latency_seconds` missed hops: every hop counted in
/// `hopping_count_total` records exactly one latency observation, for the reasons draining,
/// ejected (no failed attempt in the request) and connect_error (a failed attempt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_counted_hop_records_one_latency_observation() {
    let mut mocks = [
        Mock::start("node-a").await,
        Mock::start("node-b").await,
        Mock::start("node-c").await,
    ];
    let refs: Vec<&Mock> = mocks.iter().collect();
    let gw = Gateway::start(&Config::single(Health::http_fast(), &refs, Route::api()).toml()).await;
    let bind = |id: &'static str| {
        let gw = &gw;
        async move {
            let r = get(&gw.url("/data"), &[("X-Conn-Id", id)])
                .await
                .expect("request");
            assert_eq!(r.status, 200, "{id}: {}", r.text());
            gw.admin_json(&format!("/admin/conns/{id}")).await["node"]
                .as_str()
                .expect("bound")
                .to_string()
        }
    };
    // draining: the bound node drains; the next request hops without any failed attempt.
    let d = bind("lat-d").await;
    let r = gw
        .admin_post(&format!("/admin/nodes/{d}/drain?period=30s"))
        .await;
    assert_eq!(r.status, 202);
    assert_ne!(bind("lat-d").await, d);
    let r = gw.admin_post(&format!("/admin/nodes/{d}/undrain")).await;
    assert_eq!(r.status, 200);
    // ejected: the bound node fails its probes until ejected; the next request hops.
    let e = bind("lat-e").await;
    let em = mocks.iter().find(|m| m.id == e).expect("mock");
    em.set_down().await;
    gw.wait_node_state(&e, "ejected", Duration::from_secs(10))
        .await;
    assert_ne!(bind("lat-e").await, e);
    em.set_up().await;
    gw.wait_node_state(&e, "healthy", Duration::from_secs(10))
        .await;
    // connect_error: the bound node dies; the request's connect fails and it is retried elsewhere.
    let k = bind("lat-k").await;
    let km = mocks.iter_mut().find(|m| m.id == k).expect("mock");
    km.kill().await;
    assert_ne!(bind("lat-k").await, k);
    let mut hops = 0.0;
    for reason in ["draining", "ejected", "connect_error"] {
        let n = gw
            .metric(&format!("hopping_count_total{{reason=\"{reason}\"}}"))
            .await;
        assert_eq!(n, 1.0, "one {reason} hop");
        hops += n;
    }
    assert_eq!(gw.metric("hopping_latency_seconds_count").await, hops);
}
