//! Warm-up ramps for routes and nodes new in a table (SPEC section 6).

use std::time::Duration;

use tokio::time::Instant;

use crate::config::WarmupConfig;

/// A linear ramp from `initial_percent` to 100 % over `duration`, starting when the table went live.
#[derive(Debug, Clone)]
pub struct Warmup {
    /// The route's warm-up settings.
    pub config: WarmupConfig,
    /// Ramp start.
    pub started: Instant,
}

impl Warmup {
    /// A ramp starting at `started`.
    pub fn new(config: WarmupConfig, started: Instant) -> Self {
        Warmup { config, started }
    }

    /// Percent (0-100) of its full share at `now`.
    pub fn percent(&self, now: Instant) -> u32 {
        let elapsed = now.saturating_duration_since(self.started);
        ramp(self.config.initial_percent, self.config.duration, elapsed)
    }

    /// True while the ramp has not reached 100 %.
    pub fn active(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.started) < self.config.duration
    }
}

/// `initial` percent ramping linearly to 100 over `duration`, `elapsed` in.
pub fn ramp(initial: f64, duration: Duration, elapsed: Duration) -> u32 {
    if duration.is_zero() || elapsed >= duration {
        return 100;
    }
    let f = elapsed.as_secs_f64() / duration.as_secs_f64();
    (initial + (100.0 - initial) * f).round().clamp(0.0, 100.0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramps_linearly() {
        let d = Duration::from_secs(100);
        assert_eq!(ramp(10.0, d, Duration::ZERO), 10);
        assert_eq!(ramp(10.0, d, Duration::from_secs(50)), 55);
        assert_eq!(ramp(10.0, d, d), 100);
    }
}
