//! The `/admin/events` stream (SPEC section 11, issue 17): each kind delivered, and a reader that stops
//! reading dropped.

use super::*;

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().expect("object").keys().cloned().collect()
}

fn set(k: &[&str]) -> BTreeSet<String> {
    k.iter().map(|s| s.to_string()).collect()
}

/// Issue 17 / SPEC 11: `/admin/events` delivers `drain`, `node`, `hop` and `reload` events as
/// they happen, each with exactly the SPEC's fields.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
#[tokio::test]
async fn admin_events_deliver_each_kind() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let toml = two_nodes(&a, &b);
    let gw = Gateway::start(&toml).await;
    let mut sse = Sse::connect(gw.admin_port, false).await;

    let conn = "events-conn-1";
    assert_eq!(
        get(&gw.url("/data"), &[("X-Conn-Id", conn)])
            .await
            .expect("bind")
            .status,
        200
    );
    let from = gw.admin_json(&format!("/admin/conns/{conn}")).await["node"]
        .as_str()
        .expect("node")
        .to_string();
    let to = if from == "node-a" { "node-b" } else { "node-a" };
    let before = integration_tests::http::get(&gw.admin("/admin/status"), &[])
        .await
        .expect("status")
        .json()["now_ms"]
        .as_u64()
        .expect("now_ms");
    let r = gw
        .admin_post(&format!("/admin/nodes/{from}/drain?period=60s"))
        .await;
    assert_eq!(r.status, 202);

    let drain = sse.next("drain", |v| v["id"] == from.as_str()).await;
    assert_eq!(keys(&drain), set(&["id", "deadline_ms"]));
    let deadline = drain["deadline_ms"].as_u64().expect("deadline_ms");
    assert!(
        deadline >= before + 59_000 && deadline <= before + 65_000,
        "deadline {deadline} vs now {before}"
    );
    let node = sse.next("node", |v| v["id"] == from.as_str()).await;
    assert_eq!(keys(&node), set(&["id", "cluster", "state", "weight"]));
    assert_eq!(node["state"], "draining");
    assert_eq!(node["cluster"], "provider-service");
    assert_eq!(node["weight"].as_f64(), Some(0.0));

    let r = get(&gw.url("/data"), &[("X-Conn-Id", conn)])
        .await
        .expect("after drain");
    assert!(r.text().contains(to), "{}", r.text());
    let hop = sse.next("hop", |v| v["conn"] == conn).await;
    assert_eq!(keys(&hop), set(&["conn", "from", "to", "reason", "at_ms"]));
    assert_eq!(
        (
            hop["from"].as_str(),
            hop["to"].as_str(),
            hop["reason"].as_str()
        ),
        (Some(from.as_str()), Some(to), Some("draining"))
    );
    assert!(hop["at_ms"].as_u64().expect("at_ms") >= before);

    let r = gw.admin_post(&format!("/admin/nodes/{from}/undrain")).await;
    assert_eq!(r.status, 200);
    let node = sse.next("node", |v| v["id"] == from.as_str()).await;
    assert_eq!(node["state"], "healthy");
    assert_eq!(node["weight"].as_f64(), Some(100.0));

    gw.write_config(&toml.replace("timeout = \"300ms\"", "timeout = \"250ms\""));
    let r = gw.admin_post("/admin/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let reload = sse.next("reload", |v| v["result"] == "ok").await;
    assert_eq!(keys(&reload), set(&["generation", "result"]));
    assert_eq!(reload["generation"], 2);
    gw.write_config("not toml [");
    let r = gw.admin_post("/admin/reload").await;
    assert_eq!(r.status, 422);
    let reload = sse.next("reload", |v| v["result"] == "invalid").await;
    assert_eq!(reload["generation"], 2, "the live generation stays");
}

/// Issue 17 / SPEC 11: a subscriber that stops reading is dropped (never buffered without bound):
/// the subscriber count goes to zero while events keep coming, what it gets when it reads again
/// is bounded and ends the stream, and the gateway's RSS stays bounded.
#[tokio::test]
async fn admin_events_drop_a_reader_that_stops_reading() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&two_nodes(&a, &b)).await;
    let mut slow = Sse::connect(gw.admin_port, true).await;
    let status = gw.admin("/admin/status");
    assert_eq!(
        get(&status, &[]).await.expect("status").json()["subscribers"],
        1
    );
    let rss_before = gw.rss_kib();
    // Each drain call publishes one `drain` event of about 90 bytes; every call asks for another
    // period, so a repeated drain with the same deadline (same millisecond) is never skipped.
    const EVENTS: usize = 30_000;
    let drain = |n: usize| gw.admin(&format!("/admin/nodes/node-a/drain?period={}s", 3_600 + n));
    let mut dropped_after = None;
    let mut sent = 0;
    let t0 = Instant::now();
    // At least EVENTS, and on until the drop is seen (how much the socket buffers absorb first
    // depends on the kernel's autotuning), bounded by MAX_EVENTS and the time check below.
    const MAX_EVENTS: usize = 300_000;
    while sent < EVENTS || (dropped_after.is_none() && sent < MAX_EVENTS) {
        let urls: Vec<String> = (0..8).map(|i| drain(sent + i)).collect();
        let batch: Vec<_> = urls
            .iter()
            .map(|u| request("POST", u, &[], Vec::new()))
            .collect();
        for r in futures_util::future::join_all(batch).await {
            assert_eq!(r.expect("drain").status, 202);
        }
        sent += 8;
        if dropped_after.is_none()
            && sent % 400 == 0
            && get(&status, &[]).await.expect("status").json()["subscribers"] == 0
        {
            dropped_after = Some(sent);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "event generation too slow: {sent} in {:?}",
            t0.elapsed()
        );
    }
    let dropped_after = dropped_after.expect("the reader that stopped reading was dropped");
    let rss_after = gw.rss_kib();
    eprintln!("dropped after {dropped_after} events; RSS {rss_before} -> {rss_after} KiB");
    assert!(
        rss_after < rss_before + 20 * 1024,
        "RSS grew from {rss_before} to {rss_after} KiB"
    );
    // Reading again: what was queued, then the end of the stream (chunked terminator).
    let deadline = Instant::now() + Duration::from_secs(20);
    while find(&slow.buf, b"\r\n0\r\n\r\n").is_none() {
        assert!(
            Instant::now() < deadline,
            "stream did not end; {} bytes read",
            slow.buf.len()
        );
        slow.read_some().await;
    }
    let got = slow.buf.len();
    assert!(find(&slow.buf, b": dropped").is_some() || got > 0);
    // Nothing published after the drop reaches it: at most what was sent until then (about
    // 90 bytes an event; the drop is checked every 400 events).
    assert!(
        got <= (dropped_after + 1_000) * 100,
        "a dropped reader gets a bounded amount: {got} bytes, dropped after {dropped_after} of {sent} events"
    );
    gw.logs
        .wait_for(&["event subscriber", "dropped"], Duration::from_secs(5))
        .await;
}
