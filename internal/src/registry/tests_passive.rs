//! Passive health (SPEC section 3 `passive_consecutive_errors`): ejection at the limit, which connect
//! errors count, and the backoff before probes may bring a node back.

use std::num::NonZeroU32;
use std::time::Duration;

use tokio::time::Instant;

use super::passive::passive_backoff;
use super::tests::{health, ms, runtime};
use super::*;

/// A node runtime and the health of its cluster: degraded after 2 failed probes, ejected after 3,
/// back after `recover_after` successes, ejected passively after `errors` errors (0 = off).
fn passive(recover_after: u32, errors: u32) -> (HealthConfig, NodeRuntime) {
    let mut h = health(2, 3, recover_after);
    h.passive_consecutive_errors = NonZeroU32::new(errors);
    (h, runtime())
}

#[test]
fn passive_errors_eject_at_the_limit() {
    let (h, rt) = passive(2, 3);
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
    let (h, rt) = passive(2, 2);
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
    let (h, rt) = passive(2, 3);
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
    let (mut h, rt) = passive(4, 1);
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
    let (h, rt) = passive(2, 0);
    for _ in 0..100 {
        assert_eq!(rt.record_passive_error(&h, "reset", Instant::now()), None);
    }
    assert_eq!(rt.state(), NodeState::Healthy);
}
