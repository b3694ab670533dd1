//! Passive ejection (SPEC section 8): errors in real traffic eject a hung node before probes do, and
//! the last-node guard holds through a timeout storm.

use super::*;

/// Passive errors from real traffic eject a hung node long before the active probes would.
#[tokio::test]
async fn passive_errors_eject_a_hung_node_long_before_probes() {
    let a = Mock::start("a").await;
    let b = Mock::start("b").await;
    let health = "interval = \"10s\"\ntimeout = \"1s\"\ndegrade_after = 2\neject_after = 3\npassive_consecutive_errors = 3\n";
    let gw = Gateway::start(&config(
        health,
        "",
        &[("a", a.addr()), ("b", b.addr())],
        "timeout = \"300ms\"\nretries = 0\n",
    ))
    .await;
    let warm = spread(&gw, 10, 1).await;
    assert_eq!(warm.len(), 2, "both nodes serve: {warm:?}");

    b.hang().await;
    let t0 = Instant::now();
    let mut statuses = Vec::new();
    while view(&gw, "b").await.0 != "ejected" {
        assert!(
            statuses.len() < 20,
            "b not ejected after {} requests: {statuses:?}",
            statuses.len()
        );
        let r = get(&gw.url("/data"), &[]).await.expect("request");
        statuses.push((r.status, r.header("x-node-id")));
    }
    let took = t0.elapsed();
    let timeouts = statuses.iter().filter(|(s, _)| *s == 504).count();
    eprintln!(
        "passive ejection after {} requests ({timeouts} timed out) in {took:?}",
        statuses.len()
    );
    assert_eq!(
        timeouts, 3,
        "exactly passive_consecutive_errors timeouts: {statuses:?}"
    );
    assert!(statuses.len() <= 8, "a handful of requests: {statuses:?}");
    assert!(
        took < Duration::from_secs(5),
        "well before the 10 s probe could eject it: {took:?}"
    );
    change_logged(&gw, "b", "ejected", "passive").await;
    assert_eq!(transitions_to(&gw, "b", "ejected").await, 1.0);

    // All traffic moved to a, promptly.
    let t1 = Instant::now();
    let after = spread(&gw, 40, 4).await;
    assert_eq!(after.get("a"), Some(&40), "{after:?}");
    assert!(
        t1.elapsed() < Duration::from_secs(3),
        "no request waited on the hung node: {:?}",
        t1.elapsed()
    );
}

/// A timeout storm on every node never ejects the last node left serving.
#[tokio::test]
async fn timeout_storm_keeps_the_last_node() {
    let health = "interval = \"200ms\"\ntimeout = \"200ms\"\ndegrade_after = 2\neject_after = 3\nrecover_after = 2\nslow_start = \"0s\"\npassive_consecutive_errors = 0\n";
    let (a, b, gw) = nodes_ab(health).await;
    // Both nodes stop answering (probes included): every probe of the cluster times out.
    a.hang().await;
    b.hang().await;
    gw.logs
        .wait_for(
            &["WARN", "timeout in the same interval", "cluster=c"],
            Duration::from_secs(5),
        )
        .await;
    let states = || async { (view(&gw, "a").await.0, view(&gw, "b").await.0) };
    let (sa, sb) = states().await;
    let mut pair = [sa, sb];
    pair.sort();
    assert_eq!(
        pair,
        ["degraded".to_string(), "ejected".to_string()],
        "one node ejected, the last one kept degraded"
    );
    // It stays that way over many more timed-out probes, and the WARN is logged once.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1_200) {
        let (sa, sb) = states().await;
        assert!(
            sa == "degraded" || sb == "degraded",
            "last node ejected: {sa} {sb}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        gw.logs.matching(&["timeout in the same interval"]).len(),
        1,
        "WARN once per storm"
    );
    // Unhang: both come back.
    for m in [&a, &b] {
        m.control("/control/unhang").await;
    }
    gw.wait_node_state("a", "healthy", Duration::from_secs(3))
        .await;
    gw.wait_node_state("b", "healthy", Duration::from_secs(3))
        .await;
}
