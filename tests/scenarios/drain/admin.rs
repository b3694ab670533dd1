//! Admin drain and undrain (SPEC section 5): no new work on a draining node while in-flight work
//! finishes, and bound ids hopping off it.

use super::*;
use integration_tests::check::node_of;

/// A drained node takes no new work while its in-flight request finishes, and undrain gives it traffic again.
#[tokio::test]
async fn drain_takes_no_new_work_finishes_in_flight_and_undrain_restores() {
    let (a, _b, gw) = two_nodes("", "").await;

    assert_eq!(
        gw.admin_post("/admin/nodes/nope/drain?period=1s")
            .await
            .status,
        404
    );
    assert_eq!(gw.admin_post("/admin/nodes/nope/undrain").await.status, 404);

    // A slow request in flight on node-a (every other node-a request is slow as well).
    a.delay(800).await;
    let url = gw.url("/data");
    let slow = tokio::spawn(async move { get(&url, &[("x-conn-id", "slow-1")]).await });
    wait_until(
        Duration::from_secs(5),
        "a request in flight on node-a",
        || async { gw.node("node-a").await["inflight"] == 1 },
    )
    .await;

    let period = Duration::from_millis(1500);
    let r = gw
        .admin_post("/admin/nodes/node-a/drain?period=1500ms")
        .await;
    let deadline = Instant::now() + period;
    assert_eq!(r.status, 202, "{}", r.text());
    assert_eq!(gw.node("node-a").await["state"], "draining");
    assert_eq!(gw.node("node-a").await["weight"].as_f64(), Some(0.0));

    // No new requests go to node-a, at once.
    for _ in 0..10 {
        let r = get(&gw.url("/data"), &[]).await.expect("request");
        assert_eq!((r.status, node_of(&r)), (200, "node-b".to_string()));
    }
    // The in-flight request finishes on node-a.
    let r = slow.await.expect("join").expect("slow request");
    assert_eq!(
        (r.status, node_of(&r)),
        (200, "node-a".to_string()),
        "{}",
        r.text()
    );

    // Past the deadline the node stays draining until undrained.
    tokio::time::sleep_until(deadline + Duration::from_millis(300)).await;
    assert_eq!(gw.node("node-a").await["state"], "draining");
    let r = gw.admin_post("/admin/nodes/node-a/undrain").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(gw.node("node-a").await["state"], "healthy");
    a.delay(0).await;
    let mut seen_a = 0;
    for _ in 0..10 {
        if node_of(&get(&gw.url("/data"), &[]).await.expect("request")) == "node-a" {
            seen_a += 1;
        }
    }
    assert!(
        seen_a >= 3,
        "node-a got {seen_a} of 10 requests after undrain"
    );
}

/// Ids bound to a draining node are re-bound to another node.
#[tokio::test]
async fn bound_ids_hop_off_a_draining_node() {
    let (_a, _b, gw) = two_nodes("", "").await;
    let first = node_of(
        &get(&gw.url("/data"), &[("x-conn-id", "c-drain")])
            .await
            .expect("bind"),
    );
    let other = if first == "node-a" {
        "node-b"
    } else {
        "node-a"
    };
    assert_eq!(
        gw.admin_post(&format!("/admin/nodes/{first}/drain?period=30s"))
            .await
            .status,
        202
    );
    for _ in 0..3 {
        let r = get(&gw.url("/data"), &[("x-conn-id", "c-drain")])
            .await
            .expect("request");
        assert_eq!(node_of(&r), other);
    }
    assert_eq!(
        gw.metric("hopping_count_total{reason=\"draining\"}").await,
        1.0
    );
    assert_eq!(gw.admin_json("/admin/conns/c-drain").await["node"], other);
    gw.logs
        .wait_for(
            &[&format!(
                "Hopping triggered for conn c-drain from {first} to {other}"
            )],
            Duration::from_secs(2),
        )
        .await;
}
