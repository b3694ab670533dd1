//! The weight ladder and slow start (SPEC section 8): a degraded node's share, a flapping node within
//! the ladder's bounds, and a recovered node's share rising over slow start.

use super::*;

/// Every `/admin/nodes` (state, weight) of node `id` seen while `load` runs, sampled every 20 ms;
/// and the load's result.
async fn sample_while<T>(
    gw: &Gateway,
    id: &str,
    load: impl std::future::Future<Output = T>,
) -> (Vec<(String, f64)>, T) {
    let done = std::sync::atomic::AtomicBool::new(false);
    let sampler = async {
        let mut samples = Vec::new();
        while !done.load(std::sync::atomic::Ordering::Relaxed) {
            samples.push(view(gw, id).await);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        samples
    };
    let load = async {
        let out = load.await;
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        out
    };
    tokio::join!(sampler, load)
}

/// The distinct states in `samples`, in order, without repeats.
fn state_runs(samples: &[(String, f64)]) -> Vec<String> {
    let mut runs: Vec<String> = Vec::new();
    for (s, _) in samples {
        if runs.last() != Some(s) {
            runs.push(s.clone());
        }
    }
    runs
}

/// Transitions of node `id` counted by `gateway_health_transitions_total`, per target state.
async fn transitions(gw: &Gateway, id: &str) -> [f64; 3] {
    let mut out = [0.0; 3];
    for (i, to) in ["healthy", "degraded", "ejected"].iter().enumerate() {
        out[i] = transitions_to(gw, id, to).await;
    }
    out
}

/// A degraded node gets the degraded percentage of its normal traffic share.
#[tokio::test]
async fn degraded_node_gets_degraded_percent_of_its_share() {
    // A huge eject_after keeps the node degraded while traffic is measured.
    let health = "interval = \"200ms\"\ntimeout = \"200ms\"\ndegrade_after = 2\ndegraded_percent = 20\neject_after = 100000\npassive_consecutive_errors = 0\n";
    let (a, _b, gw) = nodes_ab(health).await;
    let even = spread(&gw, 200, 8).await;
    assert_eq!(
        (even.get("a"), even.get("b")),
        (Some(&100), Some(&100)),
        "equal weights alternate exactly"
    );

    a.set_down().await;
    gw.wait_node_state("a", "degraded", Duration::from_secs(3))
        .await;
    assert_eq!(view(&gw, "a").await.1, 20.0);
    // /data still answers 200 on a set-down node: only its share changes. 20 vs 100 -> 1/6.
    let counts = spread(&gw, 600, 8).await;
    let share = *counts.get("a").unwrap_or(&0) as f64 / 600.0;
    eprintln!("degraded share of a: {share:.3} ({counts:?})");
    assert!(
        (share - 1.0 / 6.0).abs() <= 0.05,
        "share {share:.3}, want 0.167 +- 0.05 ({counts:?})"
    );
    assert_eq!(view(&gw, "a").await.0, "degraded");
}

/// A flapping node moves along the weight ladder and its traffic share stays within the ladder's bounds.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flapping_node_keeps_its_share_within_the_ladder_bounds() {
    // A 1 s probe timeout so a probe slowed by a loaded machine never adds a failure of its own:
    // the failures are exactly the mock's pattern.
    let health = business_health("1s", "passive_consecutive_errors = 0\n");
    let (a, _b, gw) = nodes_ab(&health).await;

    // 1. Down, up, down, up... on every probe: never `degrade_after` failures in a row, so the
    //    node never moves and its traffic never changes: equal weights alternate exactly.
    a.reset_stats().await;
    a.flap(1, 1).await;
    let (samples, counts) = sample_while(&gw, "a", async { spread(&gw, 400, 4).await }).await;
    let (samples2, _) = sample_while(&gw, "a", async {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
    })
    .await;
    let samples: Vec<_> = samples.into_iter().chain(samples2).collect();
    let probes = a.requests().await - *counts.get("a").unwrap_or(&0) as u64;
    eprintln!(
        "flap 1/1: {} weight samples, states {:?}, {probes} probes, traffic {counts:?}",
        samples.len(),
        state_runs(&samples)
    );
    assert!(
        probes >= 5,
        "the flapping ran over several probes ({probes})"
    );
    assert_eq!(state_runs(&samples), ["healthy"]);
    assert!(
        samples.iter().all(|(_, w)| *w == 100.0),
        "weight stays 100: {samples:?}"
    );
    assert_eq!((counts.get("a"), counts.get("b")), (Some(&200), Some(&200)));
    assert_eq!(transitions(&gw, "a").await, [0.0, 0.0, 0.0]);

    // Start the next pattern right after a passing probe, so its first two failures are the only
    // ones in a row.
    a.set_up().await;
    integration_tests::wait_until(Duration::from_secs(3), "a passing probe", || async {
        gw.node("a").await["consecutive_failures"] == 0
    })
    .await;

    // 2. Two down, two up, repeating: degraded after two failures, recovered after two successes
    //    — but slow start resumes from degraded_percent, so the weight stays near the bottom of
    //    the ladder instead of jumping 20 -> 100 -> 20 every cycle; and never 0 (no eject_after run).
    a.flap(2, 2).await;
    let until = Instant::now() + Duration::from_millis(3_000);
    let (samples, counts) = sample_while(&gw, "a", async { load_until(&gw, 4, until).await }).await;
    let share = share_of(&counts, "a");
    let [healthy, degraded, ejected] = transitions(&gw, "a").await;
    // From the first degrade on (before it, the node was still at full weight).
    let flapping: Vec<f64> = samples
        .iter()
        .skip_while(|(s, _)| s != "degraded")
        .map(|(_, w)| *w)
        .collect();
    let max = flapping.iter().copied().fold(0.0, f64::max);
    let min = flapping.iter().copied().fold(100.0, f64::min);
    let states = state_runs(&samples);
    eprintln!("flap 2/2: weights {min}..{max} over {} samples, states {states:?}, share of a {share:.3} ({counts:?}), transitions healthy {healthy} degraded {degraded} ejected {ejected}", flapping.len());
    assert!(
        degraded >= 2.0 && healthy >= 1.0,
        "the node did flap between degraded and healthy: {states:?}"
    );
    assert_eq!(ejected, 0.0, "never eject_after failures in a row");
    assert!(
        !states.iter().any(|s| s == "ejected"),
        "never ejected: {states:?}"
    );
    assert!(
        min >= 20.0,
        "never below degraded_percent: {min} ({flapping:?})"
    );
    // Two up probes of ~200 ms into a 3 s ramp: ~20 + 80 x 0.4 / 3 = 31. Allow for slow probes.
    assert!(
        max <= 50.0,
        "no cliff back to full weight: {max} ({flapping:?})"
    );
    // Weights 20..50 against b's 100 (and full weight before the first degrade): a's share is
    // between 1/6 and 1/3.
    assert!(
        (0.10..=0.34).contains(&share),
        "share {share:.3} within the ladder's bounds ({counts:?})"
    );
    // Each change was logged once, with its reason, and counted once. Stop the flapping first
    // so no change happens between counting and reading the log.
    a.set_up().await;
    gw.wait_node_state("a", "healthy", Duration::from_secs(3))
        .await;
    let [healthy, degraded, ejected] = transitions(&gw, "a").await;
    let counted = (healthy + degraded + ejected) as usize;
    assert!(counted >= 3, "{counted} changes");
    integration_tests::wait_until(
        Duration::from_secs(2),
        "every counted change logged",
        || async { gw.logs.matching(&["node state changed", "node=a"]).len() >= counted },
    )
    .await;
    let logged = gw.logs.matching(&["node state changed", "node=a"]);
    assert_eq!(
        logged.len(),
        counted,
        "one log line per counted change: {logged:#?}"
    );
    assert!(
        logged.iter().all(
            |l| (l.contains("reason=probe") || l.contains("reason=\"probe\""))
                && l.contains("detail=")
        ),
        "{logged:#?}"
    );
    // Every degrade names the failed body check; every recovery the passing probe.
    assert_eq!(
        logged
            .iter()
            .filter(|l| l.contains("body /business"))
            .count() as f64,
        degraded,
        "{logged:#?}"
    );
}

/// A recovered node's traffic share rises gradually over the slow-start period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovered_node_traffic_share_rises_over_slow_start() {
    let health = "interval = \"200ms\"\ntimeout = \"1s\"\ndegrade_after = 2\ndegraded_percent = 20\neject_after = 3\nrecover_after = 2\nslow_start = \"4s\"\npassive_consecutive_errors = 0\n";
    let (a, _b, gw) = nodes_ab(health).await;
    a.set_down().await;
    gw.wait_node_state("a", "ejected", Duration::from_secs(5))
        .await;
    a.set_up().await;
    let t0 = Instant::now();
    let (to_healthy, first) = time_to_state(&gw, "a", "healthy", t0, Duration::from_secs(5)).await;
    let t1 = Instant::now();
    // Expected weight of a: 20 + 80 x t / 4 s; b stays at 100.
    let early = load_until(&gw, 4, t1 + Duration::from_millis(1_000)).await;
    tokio::time::sleep_until(t1 + Duration::from_millis(2_000)).await;
    let mid = load_until(&gw, 4, t1 + Duration::from_millis(3_000)).await;
    tokio::time::sleep_until(t1 + Duration::from_millis(4_300)).await;
    let full = load_until(&gw, 4, t1 + Duration::from_millis(5_000)).await;
    let (e, m, f) = (
        share_of(&early, "a"),
        share_of(&mid, "a"),
        share_of(&full, "a"),
    );
    eprintln!("slow start: healthy after {to_healthy:?} at weight {first}; share of a 0-1 s {e:.3} ({early:?}), 2-3 s {m:.3} ({mid:?}), after {f:.3} ({full:?})");
    // 0-1 s: weights 20..40 -> share ~0.20; 2-3 s: 60..80 -> ~0.41; after: 0.5.
    assert!((0.08..=0.32).contains(&e), "first second: {e:.3}");
    assert!(m >= e + 0.08 && (0.28..=0.50).contains(&m), "2-3 s: {m:.3}");
    assert!((0.45..=0.55).contains(&f), "after slow start: {f:.3}");
    assert_eq!(view(&gw, "a").await, ("healthy".to_string(), 100.0));
}
