//! Active probes (SPEC section 3 `[health]`, section 8): HTTP probes with a JSON body check, TCP probe
//! overrides, and the timing promise.

use super::*;

/// A node whose business health says down is degraded, then ejected, and ramps back once it is up again.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
#[tokio::test]
async fn business_down_degrades_ejects_and_ramps_back() {
    let (a, _b, gw) = nodes_ab(&business_health("200ms", "")).await;
    assert_eq!(view(&gw, "a").await, ("healthy".to_string(), 100.0));

    // The node still answers 500 {"business":"DOWN"}; the status range admits it, the body check does not.
    let t0 = Instant::now();
    a.set_down().await;
    let (to_degraded, w) = time_to_state(&gw, "a", "degraded", t0, Duration::from_secs(3)).await;
    assert_eq!(w, 20.0, "degraded weight = 100 x 20 %");
    assert_eq!(gw.node("a").await["health_percent"], 20);
    let (to_ejected, w) = time_to_state(&gw, "a", "ejected", t0, Duration::from_secs(3)).await;
    assert_eq!(w, 0.0);
    eprintln!("business DOWN: degraded after {to_degraded:?}, ejected after {to_ejected:?}");
    assert_eq!(
        gw.metric(r#"gateway_node_weight{cluster="c",node="a"}"#)
            .await,
        0.0
    );
    let line = change_logged(&gw, "a", "degraded", "body /business").await;
    assert!(line.contains("INFO"), "{line}");
    change_logged(&gw, "a", "ejected", "body /business").await;
    assert_eq!(transitions_to(&gw, "a", "degraded").await, 1.0);
    assert_eq!(transitions_to(&gw, "a", "ejected").await, 1.0);
    // Every request now goes to b.
    let counts = spread(&gw, 40, 4).await;
    assert_eq!(counts.get("b"), Some(&40), "{counts:?}");

    // Back up: healthy after recover_after probes, then the weight climbs from 20 to 100 over slow_start (3 s).
    let t1 = Instant::now();
    a.set_up().await;
    let (to_healthy, first) = time_to_state(&gw, "a", "healthy", t1, Duration::from_secs(3)).await;
    assert!(
        first < 100.0,
        "starts ramping below full weight, got {first}"
    );
    let mut weights = vec![first];
    let ramp_start = Instant::now();
    while *weights.last().expect("non-empty") < 100.0 {
        assert!(
            ramp_start.elapsed() < Duration::from_secs(6),
            "ramp never reached 100: {weights:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (s, w) = view(&gw, "a").await;
        assert_eq!(s, "healthy");
        weights.push(w);
    }
    let ramp = ramp_start.elapsed();
    eprintln!("business UP: healthy after {to_healthy:?} at weight {first}; full weight {ramp:?} later; weights {weights:?}");
    assert!(
        weights.windows(2).all(|w| w[0] <= w[1]),
        "ramp is monotonic: {weights:?}"
    );
    assert!(
        weights.iter().any(|w| *w > first && *w < 100.0),
        "intermediate weights seen: {weights:?}"
    );
    assert!(
        ramp >= Duration::from_millis(1_500) && ramp <= Duration::from_millis(3_500),
        "ramp took {ramp:?}"
    );
    assert_eq!(transitions_to(&gw, "a", "healthy").await, 1.0);
    assert_eq!(transitions_to(&gw, "b", "degraded").await, 0.0);
    // Each of the three changes was logged exactly once (INFO), none for b.
    integration_tests::wait_until(Duration::from_secs(2), "three change lines", || async {
        gw.logs.matching(&["node state changed", "node=a"]).len() >= 3
    })
    .await;
    let lines = gw.logs.matching(&["node state changed", "node=a"]);
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(
        lines[2].contains("healthy") && lines[2].contains("ok"),
        "{lines:#?}"
    );
    assert!(gw
        .logs
        .matching(&["node state changed", "node=b"])
        .is_empty());
}

/// A node whose business health goes down gets no request after two probe intervals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn business_down_node_gets_no_request_within_two_probe_intervals() {
    let a = Mock::start("a").await;
    let b = Mock::start("b").await;
    // degrade_after = eject_after = 2 skips the degraded step: the seed's promise is "all of its
    // share within eject_after probe intervals" = two intervals here.
    let interval = Duration::from_millis(250);
    let health = "path = \"/actuator/health/business\"\nexpect_status = [200, 599]\nexpect_json = { pointer = \"/business\", equals = \"UP\" }\ninterval = \"250ms\"\ntimeout = \"1s\"\ndegrade_after = 2\neject_after = 2\nrecover_after = 2\nslow_start = \"0s\"\npassive_consecutive_errors = 0\n";
    let gw = gateway_ab(health, &a, &b).await;
    let warm = spread(&gw, 20, 2).await;
    assert_eq!(warm.len(), 2, "both nodes serve: {warm:?}");

    // Four keep-alive loops record when each request was sent and which node served it.
    let t0 = Instant::now();
    let until = t0 + Duration::from_millis(2_000);
    let url = gw.url("/data");
    let loops = (0..4).map(|_| {
        let url = url.clone();
        async move {
            let mut seen = Vec::new();
            while Instant::now() < until {
                let sent = Instant::now();
                let r = get(&url, &[]).await.expect("request");
                assert_eq!(r.status, 200, "{}", r.text());
                seen.push((sent, r.header("x-node-id").expect("x-node-id")));
            }
            seen
        }
    });
    let (down_at, seen) = tokio::join!(
        async {
            tokio::time::sleep(Duration::from_millis(200)).await;
            a.set_down().await;
            Instant::now()
        },
        futures_util::future::join_all(loops)
    );
    let seen: Vec<(Instant, String)> = seen.into_iter().flatten().collect();
    let last_on_a = seen
        .iter()
        .filter(|(sent, node)| node == "a" && *sent >= down_at)
        .map(|(sent, _)| sent.saturating_duration_since(down_at))
        .max()
        .unwrap_or_default();
    let after = seen
        .iter()
        .filter(|(sent, _)| sent.saturating_duration_since(down_at) > last_on_a)
        .count();
    eprintln!(
        "detection time: business DOWN -> last request on the node {last_on_a:?} (two intervals = {:?}); {} requests, {after} after it, all on b",
        interval * 2,
        seen.len()
    );
    assert!(
        seen.iter().any(|(sent, n)| n == "a" && *sent < down_at),
        "a served before it went down"
    );
    // Two intervals, plus slack for the probe round trip and a loaded machine's scheduling.
    assert!(
        last_on_a <= interval * 2 + Duration::from_millis(300),
        "last request on a {last_on_a:?} after business DOWN"
    );
    assert!(after >= 50, "traffic kept flowing to b: {after} requests");
    assert_eq!(view(&gw, "a").await, ("ejected".to_string(), 0.0));
}

/// CASE-18: real 503s in a row eject within `eject_after` intervals (plus one timeout); alternating
/// results causing no transition is the table test in `internal/src/registry/tests.rs`
/// (`ladder_table`).
#[tokio::test]
async fn timing_promise_degrade_and_eject_within_intervals() {
    // Seed 001: interval 200 ms, degrade_after 2, eject_after 3, timeout 200 ms.
    let health = "interval = \"200ms\"\ntimeout = \"200ms\"\ndegrade_after = 2\neject_after = 3\nrecover_after = 2\nslow_start = \"0s\"\n";
    let (a, _b, gw) = nodes_ab(health).await;
    // The probe schedule's phase relative to set_down is random: the bounds hold for any phase.
    let interval = Duration::from_millis(200);
    let slack = Duration::from_millis(300);
    let t0 = Instant::now();
    a.set_down().await;
    let (degraded, _) = time_to_state(&gw, "a", "degraded", t0, Duration::from_secs(3)).await;
    let (ejected, _) = time_to_state(&gw, "a", "ejected", t0, Duration::from_secs(3)).await;
    eprintln!("timing promise: degraded after {degraded:?} (bound {:?}), ejected after {ejected:?} (bound {:?})", interval * 2 + slack, interval * 3 + interval + slack);
    assert!(
        degraded <= interval * 2 + slack,
        "degraded after {degraded:?}"
    );
    assert!(
        ejected <= interval * 3 + interval + slack,
        "ejected after {ejected:?}"
    );
    assert!(ejected > degraded, "degraded first");

    // Recovery (recover_after 2, no slow start): back at full weight within two intervals plus slack.
    let t1 = Instant::now();
    a.set_up().await;
    let (healthy, w) = time_to_state(&gw, "a", "healthy", t1, Duration::from_secs(3)).await;
    eprintln!("timing promise: healthy again after {healthy:?} at weight {w}");
    assert_eq!(w, 100.0);
    assert!(healthy <= interval * 2 + slack, "healthy after {healthy:?}");
}

/// A cluster's TCP probe override ignores business health yet still sees dead nodes.
#[tokio::test]
async fn tcp_probe_override_ignores_business_health_and_sees_dead_nodes() {
    let mut a = Mock::start("a").await;
    let b = Mock::start("b").await;
    // Global [health] is an HTTP business check; cluster c overrides kind (and timings) to TCP.
    let global = "path = \"/actuator/health/business\"\nexpect_json = { pointer = \"/business\", equals = \"UP\" }\ninterval = \"2s\"\n";
    let cluster = "health = { kind = \"tcp\", interval = \"200ms\", timeout = \"200ms\", degrade_after = 1, eject_after = 2, recover_after = 1, slow_start = \"0s\" }";
    let gw = Gateway::start(&config(
        global,
        cluster,
        &[("a", a.addr()), ("b", b.addr())],
        "",
    ))
    .await;
    a.set_down().await;
    // A TCP probe only connects: business DOWN changes nothing over several intervals.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(1_000) {
        assert_eq!(view(&gw, "a").await.0, "healthy");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.kill().await;
    let t1 = Instant::now();
    let (ejected, _) = time_to_state(&gw, "a", "ejected", t1, Duration::from_secs(3)).await;
    eprintln!("tcp probe: killed node ejected after {ejected:?}");
    assert!(
        ejected <= Duration::from_millis(200 * 2 + 200 + 300),
        "{ejected:?}"
    );
    change_logged(&gw, "a", "ejected", "connect").await;
    a.restart().await;
    gw.wait_node_state("a", "healthy", Duration::from_secs(3))
        .await;
    assert_eq!(view(&gw, "a").await.1, 100.0);
}
