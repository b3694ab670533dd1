//! Health and drain transitions of a [`NodeRuntime`] (SPEC section 3 `[health]`, section 8 drains):
//! probe results, ejection on reload, the one `apply` that logs, counts and publishes a change.

use std::sync::atomic::Ordering;

use tokio::time::Instant;

use super::*;

impl NodeRuntime {
    /// Records one active probe result (`ok` = passed); see [`NodeRuntime::record_probe_result`].
    /// A failure given here is never treated as a timeout. Returns the new state if it changed.
    pub fn record_probe(
        &self,
        h: &HealthConfig,
        ok: bool,
        detail: &str,
        now: Instant,
    ) -> Option<NodeState> {
        let result = if ok {
            ProbeResult::Pass
        } else {
            ProbeResult::Fail
        };
        self.record_probe_result(h, result, false, detail, now)
            .changed
    }

    /// Records one active probe result and moves the node only at the configured counts
    /// (SPEC section 3 `[health]`):
    ///
    /// - `degrade_after` failures in a row: degraded (weight x `degraded_percent`);
    /// - `eject_after` failures in a row: ejected (weight 0), unless `hold_timeout_eject` is set and
    ///   every failure of the streak was a [`ProbeResult::Timeout`]: then the node stays degraded
    ///   (the caller's guard against a gateway-side timeout storm, see [`health`]);
    /// - `recover_after` successes in a row: healthy again, ramping over `slow_start`; a node
    ///   ejected by passive errors also waits out its backoff ([`passive`]).
    pub fn record_probe_result(
        &self,
        h: &HealthConfig,
        result: ProbeResult,
        hold_timeout_eject: bool,
        detail: &str,
        now: Instant,
    ) -> ProbeEffect {
        let mut c = self
            .counters
            .lock()
            .expect("counters mutex is never poisoned: no panics while held");
        self.probed.store(true, Ordering::Release);
        let before = self.health.load(Ordering::Acquire);
        let mut after = before;
        let mut held = false;
        if result == ProbeResult::Pass {
            c.consecutive_failures = 0;
            c.consecutive_successes = c.consecutive_successes.saturating_add(1);
            let backoff_over = c.backoff_until.is_none_or(|t| now >= t);
            if before != HEALTH_HEALTHY
                && c.consecutive_successes >= h.recover_after
                && backoff_over
            {
                after = HEALTH_HEALTHY;
                self.passive_errors.store(0, Ordering::Relaxed);
                c.backoff_until = None;
                c.recovered_at = Some(now);
            }
        } else {
            let timeout = result == ProbeResult::Timeout;
            c.consecutive_successes = 0;
            c.timeout_streak = if c.consecutive_failures == 0 {
                timeout
            } else {
                c.timeout_streak && timeout
            };
            c.consecutive_failures = c.consecutive_failures.saturating_add(1);
            if c.consecutive_failures >= h.eject_after {
                if before != HEALTH_EJECTED && hold_timeout_eject && c.timeout_streak {
                    held = true;
                    after = HEALTH_DEGRADED;
                } else {
                    after = HEALTH_EJECTED;
                }
            } else if c.consecutive_failures >= h.degrade_after && before == HEALTH_HEALTHY {
                after = HEALTH_DEGRADED;
            }
        }
        self.consecutive_failures
            .store(c.consecutive_failures, Ordering::Relaxed);
        c.last_reason = detail.to_string();
        // Applied under the counters lock: a passive ejection decided meanwhile must not be
        // overwritten by this older decision (the state and its logged transitions stay in step).
        let changed = self.apply(before, after, ChangeReason::Probe, detail, now);
        drop(c);
        ProbeEffect { changed, held }
    }

    /// Marks the node ejected outright (a reload's failed connect probe).
    pub fn eject(&self, h: &HealthConfig, detail: &str, now: Instant) -> Option<NodeState> {
        let mut c = self
            .counters
            .lock()
            .expect("counters mutex is never poisoned: no panics while held");
        c.consecutive_successes = 0;
        c.consecutive_failures = h.eject_after;
        self.consecutive_failures
            .store(c.consecutive_failures, Ordering::Relaxed);
        let before = self.health.load(Ordering::Acquire);
        let changed = self.apply(before, HEALTH_EJECTED, ChangeReason::Reload, detail, now);
        drop(c);
        changed
    }

    /// Moves the health state from `before` to `after` (logged and counted once). Callers hold the
    /// counters lock, so `before` is still current and two decisions never interleave.
    pub(super) fn apply(
        &self,
        before: u8,
        after: u8,
        reason: ChangeReason,
        detail: &str,
        now: Instant,
    ) -> Option<NodeState> {
        if before == after {
            return None;
        }
        self.health.store(after, Ordering::Release);
        if after == HEALTH_HEALTHY {
            let ms = now.saturating_duration_since(self.epoch).as_millis() as u64;
            self.ramp_started_ms.store(ms.max(1), Ordering::Release);
        } else {
            self.ramp_started_ms.store(0, Ordering::Release);
        }
        self.publish();
        let to = health_name(after);
        let cluster = self.cluster();
        if let Some(m) = &self.metrics {
            m.health_transitions
                .get_or_create(&TransitionLabels {
                    node: NodeLabels {
                        cluster: cluster.clone(),
                        node: self.id.clone(),
                    },
                    to,
                })
                .inc();
        }
        tracing::info!(cluster = %cluster, node = %self.id, from = health_name(before), to, reason = reason.as_str(), detail, "node state changed");
        Some(self.state())
    }

    /// Starts draining: no new work; long-lived connections get until `deadline` (SPEC section 5).
    pub fn start_drain(&self, deadline: Instant) {
        self.draining.store(true, Ordering::Release);
        self.mark_usable(false);
        self.signal.send_modify(|s| {
            s.usable = false;
            s.drain_deadline = Some(deadline);
        });
        tracing::info!(node = %self.id, "node draining");
        if let Some(m) = &self.metrics {
            m.events.publish(crate::events::Event::Drain {
                id: self.id.clone(),
                deadline_ms: crate::events::unix_ms_at(deadline),
            });
        }
    }

    /// Ends a drain: the node takes work again if healthy.
    pub fn undrain(&self) {
        self.draining.store(false, Ordering::Release);
        self.signal.send_modify(|s| s.drain_deadline = None);
        self.publish();
        tracing::info!(node = %self.id, "node undrained");
    }

    /// True while draining.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }
}
