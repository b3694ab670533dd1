use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::config::Config;

fn health(degrade: u32, eject: u32, recover: u32) -> HealthConfig {
    let mut h = Config::go_defaults().clusters[0].health.clone();
    h.degrade_after = degrade;
    h.eject_after = eject;
    h.recover_after = recover;
    h.slow_start = Some(Duration::from_secs(30));
    h
}

#[test]
fn ladder_degrades_then_ejects_then_ramps_back() {
    let h = health(2, 3, 2);
    let rt = NodeRuntime::new(Arc::from("n"));
    let t0 = Instant::now();
    assert_eq!(rt.record_probe(&h, false, "503", t0), None);
    assert_eq!(rt.health_percent(&h, t0), 100);
    assert_eq!(rt.record_probe(&h, false, "503", t0), Some(NodeState::Degraded));
    assert_eq!(rt.health_percent(&h, t0), 20);
    assert_eq!(rt.record_probe(&h, false, "503", t0), Some(NodeState::Ejected));
    assert_eq!(rt.health_percent(&h, t0), 0);
    assert!(!rt.signal().usable);
    assert_eq!(rt.record_probe(&h, true, "200", t0), None);
    let t1 = t0 + Duration::from_secs(1);
    assert_eq!(rt.record_probe(&h, true, "200", t1), Some(NodeState::Healthy));
    assert_eq!(rt.health_percent(&h, t1), 20);
    assert_eq!(rt.health_percent(&h, t1 + Duration::from_secs(15)), 60);
    assert_eq!(rt.health_percent(&h, t1 + Duration::from_secs(31)), 100);
}

#[test]
fn alternating_results_never_transition() {
    let h = health(3, 3, 2);
    let rt = NodeRuntime::new(Arc::from("n"));
    let now = Instant::now();
    for i in 0..20 {
        assert_eq!(rt.record_probe(&h, i % 2 == 0, "x", now), None, "probe {i}");
    }
    assert_eq!(rt.state(), NodeState::Healthy);
}

#[test]
fn passive_errors_eject_at_the_limit() {
    let mut h = health(2, 3, 2);
    h.passive_consecutive_errors = NonZeroU32::new(3);
    let rt = NodeRuntime::new(Arc::from("n"));
    let now = Instant::now();
    assert_eq!(rt.record_passive_error(&h, "reset", now), None);
    assert_eq!(rt.record_passive_error(&h, "reset", now), None);
    rt.record_passive_success();
    assert_eq!(rt.record_passive_error(&h, "reset", now), None);
    assert_eq!(rt.record_passive_error(&h, "reset", now), None);
    assert_eq!(rt.record_passive_error(&h, "reset", now), Some(NodeState::Ejected));
}

#[test]
fn drain_makes_node_unusable_until_undrained() {
    let h = health(2, 3, 2);
    let rt = NodeRuntime::new(Arc::from("n"));
    let now = Instant::now();
    rt.start_drain(now + Duration::from_secs(5));
    assert_eq!(rt.state(), NodeState::Draining);
    assert_eq!(rt.health_percent(&h, now), 0);
    assert_eq!(rt.signal().drain_deadline, Some(now + Duration::from_secs(5)));
    rt.undrain();
    assert_eq!(rt.state(), NodeState::Healthy);
    assert!(rt.signal().usable);
}
