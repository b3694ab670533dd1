use std::num::NonZeroU32;
use std::time::Duration;

use tokio::time::Instant;

use super::passive::passive_backoff;
use super::*;
use crate::config::{load_str, Config, ProbeKind};

fn health(degrade: u32, eject: u32, recover: u32) -> HealthConfig {
    let mut h = Config::go_defaults().clusters[0].health.clone();
    h.degrade_after = degrade;
    h.eject_after = eject;
    h.recover_after = recover;
    h.slow_start = Some(Duration::from_secs(30));
    h.interval = Duration::from_millis(200);
    h
}

fn runtime() -> NodeRuntime {
    NodeRuntime::new(Arc::from("n"), Arc::from("c"), None)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn ladder_degrades_then_ejects_then_ramps_back() {
    let h = health(2, 3, 2);
    let rt = runtime();
    let t0 = Instant::now();
    assert_eq!(rt.record_probe(&h, false, "503", t0), None);
    assert_eq!(rt.health_percent(&h, t0), 100);
    assert_eq!(
        rt.record_probe(&h, false, "503", t0),
        Some(NodeState::Degraded)
    );
    assert_eq!(rt.health_percent(&h, t0), 20);
    assert_eq!(
        rt.record_probe(&h, false, "503", t0),
        Some(NodeState::Ejected)
    );
    assert_eq!(rt.health_percent(&h, t0), 0);
    assert!(!rt.signal().usable);
    assert_eq!(rt.record_probe(&h, true, "200", t0), None);
    let t1 = t0 + Duration::from_secs(1);
    assert_eq!(
        rt.record_probe(&h, true, "200", t1),
        Some(NodeState::Healthy)
    );
    assert_eq!(rt.health_percent(&h, t1), 20);
    assert_eq!(rt.health_percent(&h, t1 + Duration::from_secs(15)), 60);
    assert_eq!(rt.health_percent(&h, t1 + Duration::from_secs(31)), 100);
}

/// One step of a ladder case: `P` pass, `F` failure (status/body/connect), `T` timeout.
fn step(c: char) -> ProbeResult {
    match c {
        'P' => ProbeResult::Pass,
        'F' => ProbeResult::Fail,
        'T' => ProbeResult::Timeout,
        other => panic!("bad step {other}"),
    }
}

/// State letter after each step: `h` healthy, `d` degraded, `e` ejected.
fn letter(s: NodeState) -> char {
    match s {
        NodeState::Healthy => 'h',
        NodeState::Degraded => 'd',
        NodeState::Ejected => 'e',
        other => panic!("unexpected {other}"),
    }
}

#[test]
fn ladder_table() {
    // (degrade_after, eject_after, recover_after, hold timeouts, probe results, state after each, why)
    let cases: &[(u32, u32, u32, bool, &str, &str, &str)] = &[
        (
            2,
            3,
            2,
            false,
            "FPFPFPFPFPFPFPFPFPFP",
            "hhhhhhhhhhhhhhhhhhhh",
            "alternating 503/200 from healthy: no transition",
        ),
        (
            3,
            3,
            2,
            false,
            "PFPFPFPFPFPFPFPFPFPF",
            "hhhhhhhhhhhhhhhhhhhh",
            "alternating 200/503 with eject 3: no transition",
        ),
        (
            2,
            3,
            2,
            false,
            "FFF",
            "hde",
            "degrade after 2, eject after 3",
        ),
        (
            3,
            3,
            2,
            false,
            "FFF",
            "hhe",
            "degrade_after = eject_after skips the degraded step",
        ),
        (1, 1, 1, false, "FP", "eh", "eject and recover after one"),
        (2, 3, 2, false, "FFFPP", "hdeeh", "two successes recover"),
        (
            2,
            3,
            2,
            false,
            "FFFPFPFP",
            "hdeeeeee",
            "alternating while ejected never recovers",
        ),
        (
            2,
            3,
            2,
            false,
            "FFPFFF",
            "hdddde",
            "a degraded node needs the full eject count again",
        ),
        (
            2,
            3,
            2,
            false,
            "FFPP",
            "hddh",
            "a degraded node recovers after recover_after",
        ),
        (
            2,
            3,
            2,
            false,
            "TTT",
            "hde",
            "timeouts eject like any failure without the guard",
        ),
        (
            2,
            3,
            2,
            true,
            "TTTTT",
            "hdddd",
            "held by the last-node rule: stays degraded",
        ),
        (
            2,
            3,
            2,
            true,
            "TFT",
            "hde",
            "a streak with a real failure is not timeouts alone",
        ),
        (
            2,
            3,
            2,
            true,
            "FTT",
            "hde",
            "a streak starting with a real failure is not timeouts alone",
        ),
        (
            2,
            3,
            2,
            true,
            "TTTPP",
            "hdddh",
            "held node recovers normally",
        ),
    ];
    for (degrade, eject, recover, hold, steps, want, why) in cases {
        let h = health(*degrade, *eject, *recover);
        let rt = runtime();
        let mut now = Instant::now();
        let mut got = String::new();
        let mut transitions = 0;
        for c in steps.chars() {
            let r = step(c);
            let hold = *hold && r == ProbeResult::Timeout;
            let effect = rt.record_probe_result(&h, r, hold, "x", now);
            transitions += usize::from(effect.changed.is_some());
            got.push(letter(rt.state()));
            now += h.interval;
        }
        assert_eq!(&got, want, "{why}");
        let expected_transitions = want.as_bytes().windows(2).filter(|w| w[0] != w[1]).count()
            + usize::from(want.starts_with(['d', 'e']));
        assert_eq!(
            transitions, expected_transitions,
            "{why}: one transition per change"
        );
    }
}

#[test]
fn passive_errors_eject_at_the_limit() {
    let mut h = health(2, 3, 2);
    h.passive_consecutive_errors = NonZeroU32::new(3);
    let rt = runtime();
    let now = Instant::now();
    assert_eq!(rt.record_passive_error(&h, "reset", now), None);
    assert_eq!(rt.record_passive_error(&h, "reset", now), None);
    rt.record_passive_success();
    assert_eq!(rt.record_passive_error(&h, "reset", now), None);
    assert_eq!(rt.record_passive_error(&h, "reset", now), None);
    assert_eq!(
        rt.record_passive_error(&h, "reset", now),
        Some(NodeState::Ejected)
    );
    assert_eq!(
        rt.record_passive_error(&h, "reset", now),
        None,
        "already ejected"
    );
}

#[test]
fn connect_errors_of_connects_begun_before_a_success_are_not_counted() {
    let mut h = health(2, 3, 2);
    h.passive_consecutive_errors = NonZeroU32::new(2);
    let rt = runtime();
    let now = Instant::now();
    // A burst: three connects begin together; one succeeds, then the other two time out.
    let burst = rt.passive_mark();
    rt.record_passive_success();
    assert_eq!(
        rt.record_connect_error(&h, "connect timed out", burst, now),
        None
    );
    assert_eq!(
        rt.record_connect_error(&h, "connect timed out", burst, now),
        None
    );
    assert_eq!(
        rt.state(),
        NodeState::Healthy,
        "outdated errors are not counted"
    );
    // Connects begun after the node's last success count as usual.
    let later = rt.passive_mark();
    assert_eq!(rt.record_connect_error(&h, "refused", later, now), None);
    assert_eq!(
        rt.record_connect_error(&h, "refused", later, now),
        Some(NodeState::Ejected)
    );
}

#[test]
fn passive_backoff_doubles_and_caps() {
    // (prior passive ejections, interval, backoff)
    let cases = [
        (0, ms(200), ms(1_000)),
        (1, ms(200), ms(2_000)),
        (2, ms(200), ms(4_000)),
        (4, ms(200), ms(16_000)),
        (5, ms(200), ms(30_000)),
        (40, ms(200), ms(30_000)),
        (0, ms(10_000), ms(10_000)),
        (3, ms(10_000), ms(10_000)),
        (0, ms(60_000), ms(60_000)),
    ];
    for (prior, interval, want) in cases {
        assert_eq!(
            passive_backoff(prior, interval),
            want,
            "prior {prior}, interval {interval:?}"
        );
    }
}

/// Ejects `rt` passively at `now` and returns the instant probes first bring it back (probing every interval).
fn eject_and_recover(rt: &NodeRuntime, h: &HealthConfig, now: Instant) -> Instant {
    for _ in 0..3 {
        rt.record_passive_error(h, "status 502", now);
    }
    assert_eq!(rt.state(), NodeState::Ejected);
    let mut t = now;
    loop {
        t += h.interval;
        if rt.record_probe(h, true, "ok", t) == Some(NodeState::Healthy) {
            return t;
        }
        assert!(t < now + Duration::from_secs(120), "never recovered");
    }
}

#[test]
fn passive_ejection_backs_off_before_recovery() {
    let mut h = health(2, 3, 2);
    h.passive_consecutive_errors = NonZeroU32::new(3);
    let rt = runtime();
    let t0 = Instant::now();
    // First passive ejection: probes pass from the next interval on, but 1 s of backoff holds it out.
    let back = eject_and_recover(&rt, &h, t0);
    assert_eq!(back - t0, ms(1_000));
    // Ejected again soon after: 2 s, then 4 s.
    let t1 = back + ms(500);
    let back = eject_and_recover(&rt, &h, t1);
    assert_eq!(back - t1, ms(2_000));
    let t2 = back + ms(500);
    let back = eject_and_recover(&rt, &h, t2);
    assert_eq!(back - t2, ms(4_000));
    // Healthy for a stable period: the backoff starts over at 1 s.
    let t3 = back + passive::STABLE_RECOVERY;
    let back = eject_and_recover(&rt, &h, t3);
    assert_eq!(back - t3, ms(1_000));
}

#[test]
fn passive_backoff_never_shorter_than_recover_after_probes() {
    let mut h = health(2, 3, 4);
    h.passive_consecutive_errors = NonZeroU32::new(1);
    let rt = runtime();
    let t0 = Instant::now();
    let back = eject_and_recover(&rt, &h, t0);
    // 4 successes at 200 ms = 800 ms < 1 s backoff: the backoff decides.
    assert_eq!(back - t0, ms(1_000));
    h.interval = ms(400);
    let t1 = back + passive::STABLE_RECOVERY;
    let back = eject_and_recover(&rt, &h, t1);
    // 4 successes at 400 ms = 1.6 s > 1 s backoff: the probes decide.
    assert_eq!(back - t1, ms(1_600));
}

#[test]
fn passive_off_when_unset() {
    let mut h = health(2, 3, 2);
    h.passive_consecutive_errors = None;
    let rt = runtime();
    for _ in 0..100 {
        assert_eq!(rt.record_passive_error(&h, "reset", Instant::now()), None);
    }
    assert_eq!(rt.state(), NodeState::Healthy);
}

#[test]
fn drain_makes_node_unusable_until_undrained() {
    let h = health(2, 3, 2);
    let rt = runtime();
    let now = Instant::now();
    rt.start_drain(now + Duration::from_secs(5));
    assert_eq!(rt.state(), NodeState::Draining);
    assert_eq!(rt.health_percent(&h, now), 0);
    assert_eq!(
        rt.signal().drain_deadline,
        Some(now + Duration::from_secs(5))
    );
    rt.undrain();
    assert_eq!(rt.state(), NodeState::Healthy);
    assert!(rt.signal().usable);
}

#[test]
fn transitions_are_counted_per_cluster_node_and_state() {
    let metrics = Arc::new(Metrics::new());
    let reg = Registry::new(metrics.clone());
    let cfg = NodeConfig {
        id: "n1".into(),
        addr: "127.0.0.1:1".into(),
        weight: 100,
        metadata: Default::default(),
    };
    let h = health(2, 3, 2);
    let (node, fresh) = reg.node(
        &Arc::from("c1"),
        &cfg,
        NodeSettings {
            health: h.clone(),
            protocol: Protocol::Http1,
            tls: None,
        },
    );
    assert!(fresh);
    let now = Instant::now();
    for ok in [false, false, false, true, true] {
        node.runtime.record_probe(&h, ok, "x", now);
    }
    let text = metrics.encode();
    for to in ["degraded", "ejected", "healthy"] {
        let series =
            format!("gateway_health_transitions_total{{cluster=\"c1\",node=\"n1\",to=\"{to}\"}} 1");
        assert!(text.contains(&series), "missing {series} in\n{text}");
    }
}

#[test]
fn cluster_health_overrides_every_key() {
    let text = r#"
[health]
kind = "http"
path = "/health"
interval = "2s"
timeout = "1s"
expect_status = [200, 299]
degrade_after = 2
degraded_percent = 20
eject_after = 3
recover_after = 2
slow_start = "30s"
passive_consecutive_errors = 5

[[clusters]]
name = "over"
health = { kind = "tcp", path = "/actuator/health/business", interval = "250ms", timeout = "100ms", expect_status = [200, 500], expect_json = { pointer = "/business", equals = "UP" }, degrade_after = 4, degraded_percent = 50, eject_after = 6, recover_after = 3, slow_start = "0s", passive_consecutive_errors = 0 }
  [[clusters.nodes]]
  id = "a"
  addr = "127.0.0.1:1"

[[clusters]]
name = "partial"
health = { interval = "500ms", eject_after = 4 }
  [[clusters.nodes]]
  id = "b"
  addr = "127.0.0.1:2"

[[clusters]]
name = "plain"
  [[clusters.nodes]]
  id = "c"
  addr = "127.0.0.1:3"

[[routes]]
id = "r"
match = { path_prefix = "/" }
cluster = "over"
"#;
    let cfg = load_str(text, "t.toml").expect("valid");
    let by = |name: &str| {
        cfg.clusters
            .iter()
            .find(|c| c.name == name)
            .expect("cluster")
            .health
            .clone()
    };
    let over = by("over");
    assert_eq!(over.kind, ProbeKind::Tcp);
    assert_eq!(over.path, "/actuator/health/business");
    assert_eq!(over.interval, ms(250));
    assert_eq!(over.timeout, ms(100));
    assert_eq!(over.expect_status, 200..=500);
    assert_eq!(
        over.expect_json
            .as_ref()
            .map(|j| (j.pointer.as_str(), j.equals.as_str())),
        Some(("/business", "UP"))
    );
    assert_eq!(
        (
            over.degrade_after,
            over.degraded_percent,
            over.eject_after,
            over.recover_after
        ),
        (4, 50, 6, 3)
    );
    assert_eq!(over.slow_start, None);
    assert_eq!(over.passive_consecutive_errors, None);

    let partial = by("partial");
    assert_eq!(partial.interval, ms(500));
    assert_eq!(partial.eject_after, 4);
    assert_eq!(partial.timeout, ms(1_000), "not overridden: global value");
    assert_eq!(partial.kind, ProbeKind::Http);
    assert_eq!(partial.slow_start, Some(Duration::from_secs(30)));
    assert_eq!(partial.passive_consecutive_errors, NonZeroU32::new(5));

    let plain = by("plain");
    assert_eq!(plain.interval, Duration::from_secs(2));
    assert_eq!(plain.timeout, ms(1_000));
    assert_eq!(plain.expect_json, None);
}

#[test]
fn cluster_override_errors_name_the_cluster_key() {
    let text = r#"
[[clusters]]
name = "x"
health = { degraded_percent = 0, interval = "soon" }
  [[clusters.nodes]]
  id = "a"
  addr = "127.0.0.1:1"

[[routes]]
id = "r"
match = { path_prefix = "/" }
cluster = "x"
"#;
    let err = load_str(text, "t.toml").expect_err("invalid");
    let keys: Vec<&str> = err.issues.iter().map(|i| i.key.as_str()).collect();
    assert!(
        keys.contains(&"clusters[0].health.degraded_percent"),
        "{keys:?}"
    );
    assert!(keys.contains(&"clusters[0].health.interval"), "{keys:?}");
}

/// A probe failure that degrades and a passive error that ejects, racing on two threads: the
/// passive ejection must never be overwritten by the probe's older decision, whatever the
/// interleaving (transitions are applied under the counters lock). A stress test: the window it
/// guards is narrow, so a regression shows up as an occasional failure, not every run.
#[test]
fn concurrent_probe_degrade_never_undoes_a_passive_ejection() {
    let mut h = health(2, 3, 2);
    h.passive_consecutive_errors = NonZeroU32::new(1);
    let mut lost = 0;
    for _ in 0..5_000 {
        let rt = Arc::new(runtime());
        let now = Instant::now();
        // One failure so far: the next probe failure degrades.
        assert_eq!(
            rt.record_probe_result(&h, ProbeResult::Fail, false, "status 500", now)
                .changed,
            None
        );
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let probe = {
            let (rt, h, barrier) = (rt.clone(), h.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                rt.record_probe_result(&h, ProbeResult::Fail, false, "status 500", now)
            })
        };
        barrier.wait();
        rt.record_passive_error(&h, "reset", now);
        probe.join().expect("probe thread");
        if rt.state() != NodeState::Ejected {
            lost += 1;
        }
    }
    assert_eq!(lost, 0, "passive ejections lost to a racing probe");
}
