//! Per-cluster `[clusters.health]` overrides of the global `[health]` block (SPEC section 3): every key
//! overrides, and a bad override names its cluster key.

use std::num::NonZeroU32;
use std::time::Duration;

use super::text::{catch_all_route_text, cluster_text};
use super::{load_str, ProbeKind};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Longer than 80 lines on purpose: one config with every `[health]` key set twice, then one
/// assertion per key.
#[test]
fn cluster_health_overrides_every_key() {
    let health = r#"
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
"#
    .to_string();
    let over_health = r#"health = { kind = "tcp", path = "/actuator/health/business", interval = "250ms", timeout = "100ms", expect_status = [200, 500], expect_json = { pointer = "/business", equals = "UP" }, degrade_after = 4, degraded_percent = 50, eject_after = 6, recover_after = 3, slow_start = "0s", passive_consecutive_errors = 0 }"#;
    let partial_health = r#"health = { interval = "500ms", eject_after = 4 }"#;
    let text = [
        health,
        cluster_text("over", over_health, &[("a", "127.0.0.1:1")]),
        cluster_text("partial", partial_health, &[("b", "127.0.0.1:2")]),
        cluster_text("plain", "", &[("c", "127.0.0.1:3")]),
        catch_all_route_text("r", "over"),
    ]
    .join("\n");
    let cfg = load_str(&text, "t.toml").expect("valid");
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
    let health = r#"health = { degraded_percent = 0, interval = "soon" }"#;
    let text = [
        cluster_text("x", health, &[("a", "127.0.0.1:1")]),
        catch_all_route_text("r", "x"),
    ]
    .join("\n");
    let err = load_str(&text, "t.toml").expect_err("invalid");
    let keys: Vec<&str> = err.issues.iter().map(|i| i.key.as_str()).collect();
    assert!(
        keys.contains(&"clusters[0].health.degraded_percent"),
        "{keys:?}"
    );
    assert!(keys.contains(&"clusters[0].health.interval"), "{keys:?}");
}
