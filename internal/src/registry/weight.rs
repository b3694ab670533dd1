//! Weight arithmetic: slow-start ramp and effective weight (SPEC section 6).

use std::time::Duration;

/// Percent (degraded_percent..=100) a recovered node gets `elapsed` into a `ramp`-long slow start:
/// a straight line from `degraded_percent` to 100 (SPEC section 3 `slow_start`).
pub(crate) fn slow_start_percent(degraded_percent: u8, ramp: Duration, elapsed: Duration) -> u32 {
    if ramp.is_zero() || elapsed >= ramp {
        return 100;
    }
    let start = f64::from(degraded_percent);
    let frac = elapsed.as_secs_f64() / ramp.as_secs_f64();
    (start + (100.0 - start) * frac).round().clamp(start, 100.0) as u32
}

/// Effective weight = configured weight x health % x warm-up % (SPEC section 6), in units of
/// 1/10000 of a configured weight point so integer math keeps precision. 0 = not selectable.
pub(crate) fn effective(configured: u32, health_percent: u32, warmup_percent: u32) -> u64 {
    u64::from(configured) * u64::from(health_percent) * u64::from(warmup_percent)
}

/// [`effective`] scaled back to configured-weight units, for display (`GET /admin/nodes`, `gateway_node_weight`).
pub(crate) fn display(effective: u64) -> f64 {
    effective as f64 / 10_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramp_is_linear_from_degraded_to_full() {
        let r = Duration::from_secs(30);
        assert_eq!(slow_start_percent(20, r, Duration::ZERO), 20);
        assert_eq!(slow_start_percent(20, r, Duration::from_secs(15)), 60);
        assert_eq!(slow_start_percent(20, r, Duration::from_secs(30)), 100);
        assert_eq!(slow_start_percent(20, Duration::ZERO, Duration::ZERO), 100);
    }

    #[test]
    fn effective_weight_multiplies() {
        assert_eq!(effective(100, 100, 100), 1_000_000);
        assert_eq!(display(effective(100, 20, 100)), 20.0);
        assert_eq!(effective(100, 0, 100), 0);
    }
}
