//! Warm-up ramps for routes and nodes new in a table, and the error counts that decide an automatic
//! rollback (SPEC section 3 `[routes.warmup]`, section 6).
//!
//! A [`Warmup`] lives inside one immutable route table. The proxy counts each finished request on
//! the warm-ups it touched ([`Warmup::record`], relaxed atomics, no lock); the warm-up watcher in
//! [`super::reload`] reads the counts every [`WARMUP_CHECK_INTERVAL`] and rolls the table back when
//! the error rate of any warm-up passes its `max_error_rate` with at least [`MIN_ROLLBACK_SAMPLE`]
//! requests seen.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::WarmupConfig;

/// How often the watcher compares warm-up error rates with `max_error_rate`: fast enough that a
/// bad table serves for well under a second past its sample, cheap enough to be invisible.
pub(crate) const WARMUP_CHECK_INTERVAL: Duration = Duration::from_millis(250);

/// Requests a warm-up must have seen before its error rate can roll the table back: one early
/// error out of 3 requests is noise, not a verdict.
pub(crate) const MIN_ROLLBACK_SAMPLE: u64 = 20;

/// A linear ramp from `initial_percent` to 100 % over `duration`, starting when the table went
/// live, with the outcomes of the requests served under it during that window.
#[derive(Debug)]
pub struct Warmup {
    /// The route's warm-up settings.
    pub config: WarmupConfig,
    /// Ramp start.
    pub started: Instant,
    requests: AtomicU64,
    errors: AtomicU64,
}

/// Counts of one warm-up window so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcomes {
    /// Finished requests.
    pub requests: u64,
    /// Of which errors (5xx, including the gateway's own 502/503/504).
    pub errors: u64,
}

impl Outcomes {
    /// `errors / requests` (0 with no requests).
    pub fn rate(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.errors as f64 / self.requests as f64
        }
    }
}

/// True if a finished request with `status` counts as an error for warm-up (any 5xx: the node's
/// own or the gateway's 502/503/504 on its behalf).
pub(crate) fn is_error(status: u16) -> bool {
    (500..600).contains(&status)
}

impl Warmup {
    /// A ramp starting at `started` with zero counts.
    pub fn new(config: WarmupConfig, started: Instant) -> Self {
        Warmup {
            config,
            started,
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    /// Percent (0-100) of its full share at `now`.
    pub fn percent(&self, now: Instant) -> u32 {
        let elapsed = now.saturating_duration_since(self.started);
        ramp(self.config.initial_percent, self.config.duration, elapsed)
    }

    /// True while the ramp has not reached 100 % (the window in which errors count).
    pub fn active(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.started) < self.config.duration
    }

    /// Counts one finished request with HTTP `status` if `now` is inside the window.
    pub fn record(&self, status: u16, now: Instant) {
        if !self.active(now) {
            return;
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        if is_error(status) {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counts so far.
    pub fn outcomes(&self) -> Outcomes {
        // Errors first: a racing record can only make the rate look lower, never above 1.
        let errors = self.errors.load(Ordering::Relaxed);
        let requests = self.requests.load(Ordering::Relaxed);
        Outcomes {
            requests: requests.max(errors),
            errors,
        }
    }

    /// `Some(outcomes)` if at least `min_sample` requests were seen and the error rate is above
    /// `max_error_rate`: the table should be rolled back.
    pub fn breached(&self, min_sample: u64) -> Option<Outcomes> {
        let o = self.outcomes();
        (o.requests >= min_sample && o.rate() > self.config.max_error_rate).then_some(o)
    }
}

/// `initial` percent ramping linearly to 100 over `duration`, `elapsed` in.
pub(crate) fn ramp(initial: f64, duration: Duration, elapsed: Duration) -> u32 {
    if duration.is_zero() || elapsed >= duration {
        return 100;
    }
    let f = elapsed.as_secs_f64() / duration.as_secs_f64();
    (initial + (100.0 - initial) * f).round().clamp(0.0, 100.0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(rate: f64) -> WarmupConfig {
        WarmupConfig {
            initial_percent: 10.0,
            duration: Duration::from_secs(60),
            max_error_rate: rate,
        }
    }

    #[test]
    fn ramps_linearly() {
        let d = Duration::from_secs(100);
        assert_eq!(ramp(10.0, d, Duration::ZERO), 10);
        assert_eq!(ramp(10.0, d, Duration::from_secs(50)), 55);
        assert_eq!(ramp(10.0, d, d), 100);
    }

    #[test]
    fn breach_needs_sample_and_rate() {
        let now = Instant::now();
        let w = Warmup::new(cfg(0.05), now);
        for _ in 0..10 {
            w.record(500, now);
        }
        assert_eq!(
            w.breached(MIN_ROLLBACK_SAMPLE),
            None,
            "10 requests are below the sample"
        );
        for _ in 0..190 {
            w.record(200, now);
        }
        // 10 / 200 = 0.05: not above the limit.
        assert_eq!(w.breached(MIN_ROLLBACK_SAMPLE), None);
        w.record(502, now);
        assert_eq!(
            w.breached(MIN_ROLLBACK_SAMPLE),
            Some(Outcomes {
                requests: 201,
                errors: 11
            })
        );
    }

    #[test]
    fn outside_the_window_nothing_counts() {
        let now = Instant::now();
        let w = Warmup::new(cfg(0.0), now);
        w.record(500, now + Duration::from_secs(61));
        assert_eq!(
            w.outcomes(),
            Outcomes {
                requests: 0,
                errors: 0
            }
        );
        w.record(404, now);
        assert_eq!(
            w.outcomes(),
            Outcomes {
                requests: 1,
                errors: 0
            }
        );
    }
}
