use std::num::NonZeroU32;
use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::config::{Config, Protocol};

pub(super) fn health(degrade: u32, eject: u32, recover: u32) -> HealthConfig {
    let mut h = Config::go_defaults().clusters[0].health.clone();
    h.degrade_after = degrade;
    h.eject_after = eject;
    h.recover_after = recover;
    h.slow_start = Some(Duration::from_secs(30));
    h.interval = Duration::from_millis(200);
    h
}

pub(super) fn runtime() -> NodeRuntime {
    NodeRuntime::new(Arc::from("n"), Arc::from("c"), None)
}

pub(super) fn ms(n: u64) -> Duration {
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

/// Longer than 80 lines on purpose: a table of cases, one row per ladder rule, run by one loop.
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

/// Hop storms: a storm of re-dials to one node holds at most [`REDIALS_IN_FLIGHT`]
/// slots at once, every waiter gets one in the end, and they are handed out in the order asked.
#[tokio::test]
async fn redial_slots_admit_at_most_the_limit_at_once_all_in_the_order_asked() {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex as StdMutex;

    let rt = Arc::new(runtime());
    let storm = REDIALS_IN_FLIGHT * 3 + 5;
    let held = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let order = Arc::new(StdMutex::new(Vec::new()));
    // The first holders keep their slots until every task has asked (a storm arriving at once).
    let (go, released) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for i in 0..storm {
        let (rt, held, peak, order) = (rt.clone(), held.clone(), peak.clone(), order.clone());
        let mut released = released.clone();
        tasks.push(tokio::spawn(async move {
            let _slot = rt.redial_slot().await;
            order.lock().expect("not poisoned").push(i);
            let now = held.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            released.wait_for(|r| *r).await.expect("the sender lives");
            // Hold the slot across a scheduler turn, as a connect and a handshake would.
            tokio::task::yield_now().await;
            held.fetch_sub(1, Ordering::SeqCst);
        }));
        // Each asks in turn: the spawned task has queued on the semaphore before the next spawns.
        tokio::task::yield_now().await;
    }
    assert_eq!(held.load(Ordering::SeqCst), REDIALS_IN_FLIGHT);
    go.send(true).expect("receivers live");
    for t in tasks {
        t.await.expect("the task ran");
    }
    assert_eq!(peak.load(Ordering::SeqCst), REDIALS_IN_FLIGHT);
    let order = order.lock().expect("not poisoned").clone();
    assert_eq!(order, (0..storm).collect::<Vec<_>>());
}
