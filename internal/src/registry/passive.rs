//! Passive health: errors seen on real traffic (connect errors, resets, 5xx, timeouts), reported by
//! the proxy (SPEC section 3 `passive_consecutive_errors`).
//!
//! `passive_consecutive_errors` such errors in a row eject a node at once, without waiting for a
//! probe. A passively ejected node then sits out a backoff before probes may bring it back:
//! `max(interval, 1 s x 2^k)` capped at [`MAX_PASSIVE_BACKOFF`], where `k` counts its passive
//! ejections since its last stable recovery (healthy for [`STABLE_RECOVERY`]). So a node that keeps
//! failing real traffic while passing its probes is tried again ever more rarely, not every
//! `recover_after` intervals.
//!
//! A connect error is evidence about the moment the connect began, not the moment it failed: a
//! connect that times out after 1 s says the node did not accept at its start. When the node
//! answered real traffic after that start, the error is outdated and not counted
//! ([`NodeRuntime::record_connect_error`]). Without this rule a burst of connects (a hop storm of
//! re-dialled WebSockets overflowing a node's accept queue) ejects a node that is serving the rest of
//! the burst. Spawns nothing; state lives in [`NodeRuntime`].

use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use super::{ChangeReason, NodeRuntime, NodeState, HEALTH_EJECTED};
use crate::config::HealthConfig;
use crate::metrics::ClusterLabel;

/// First passive backoff; doubles with every passive ejection that follows without a stable recovery.
pub(crate) const BASE_PASSIVE_BACKOFF: Duration = Duration::from_secs(1);
/// Longest passive backoff: a node that fails real traffic is still retried at least this often.
pub(crate) const MAX_PASSIVE_BACKOFF: Duration = Duration::from_secs(30);
/// A node healthy this long since its last recovery starts again from [`BASE_PASSIVE_BACKOFF`].
pub(crate) const STABLE_RECOVERY: Duration = Duration::from_secs(30);

/// The backoff of a passive ejection: `max(interval, 1 s x 2^prior)` capped at 30 s (but never below
/// one probe `interval`, since recovery needs probes anyway). `prior` = earlier passive ejections
/// since the last stable recovery.
pub(crate) fn passive_backoff(prior: u32, interval: Duration) -> Duration {
    let exp =
        BASE_PASSIVE_BACKOFF.saturating_mul(1u32.checked_shl(prior.min(16)).unwrap_or(u32::MAX));
    exp.min(MAX_PASSIVE_BACKOFF).max(interval)
}

/// The nodes of one cluster, shared by their runtimes, so a passive ejection can see how many of
/// them are out (CASE-32, `max_ejection_percent`).
#[derive(Debug)]
pub(crate) struct Peers {
    nodes: Vec<Weak<NodeRuntime>>,
    /// Held from the cap check to the ejection, so two nodes never both pass the cap.
    eject: Mutex<()>,
}

impl Peers {
    /// The cluster of `nodes`.
    pub(crate) fn new(nodes: Vec<Weak<NodeRuntime>>) -> Self {
        Peers {
            nodes,
            eject: Mutex::new(()),
        }
    }

    /// Why ejecting `node` now would break the cap, if it would: more than `percent` of the
    /// cluster's nodes ejected at once (by probes or passively; floor of the share, as Envoy counts
    /// it), or no other node left ready (neither ejected nor draining).
    fn capped(&self, node: &NodeRuntime, percent: u8) -> Option<&'static str> {
        let mut total = 0usize;
        let mut ejected = 0usize;
        let mut ready_others = 0usize;
        for peer in self.nodes.iter().filter_map(Weak::upgrade) {
            total += 1;
            if std::ptr::eq(&*peer, node) {
                continue;
            }
            if peer.health.load(Ordering::Acquire) == HEALTH_EJECTED {
                ejected += 1;
            } else if !peer.is_draining() {
                ready_others += 1;
            }
        }
        if ready_others == 0 {
            return Some("it is the cluster's last ready node");
        }
        if (ejected + 1) * 100 > total * usize::from(percent) {
            return Some("max_ejection_percent of the cluster is ejected already");
        }
        None
    }
}

/// How many good answers a node had given when a connect to it began
/// ([`NodeRuntime::passive_mark`]); compared when the connect fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PassiveMark(u64);

impl NodeRuntime {
    /// Records an error seen on real traffic (connect error, reset, 5xx, timeout; `detail` says
    /// which). Ejects at once after `passive_consecutive_errors` in a row (SPEC section 3) and starts
    /// the passive backoff (module docs). Returns the new state if it changed.
    pub fn record_passive_error(
        &self,
        h: &HealthConfig,
        detail: &str,
        now: Instant,
    ) -> Option<NodeState> {
        let limit = h.passive_consecutive_errors.map(NonZeroU32::get)?;
        let mut c = self
            .counters
            .lock()
            .expect("counters mutex is never poisoned: no panics while held");
        let errors = self
            .passive_errors
            .load(Ordering::Relaxed)
            .saturating_add(1);
        self.passive_errors.store(errors, Ordering::Relaxed);
        let before = self.health.load(Ordering::Acquire);
        if errors < limit || before == HEALTH_EJECTED {
            return None;
        }
        let peers = self
            .peers
            .lock()
            .expect("peers mutex is never poisoned: no panics while held")
            .clone();
        // Lock order: this node's counters, then its cluster's ejection lock (never another
        // node's counters), so concurrent ejections in one cluster cannot deadlock.
        let _cap = peers.as_ref().map(|p| {
            p.eject
                .lock()
                .expect("eject mutex is never poisoned: no panics while held")
        });
        if let Some(why) = peers
            .as_deref()
            .and_then(|p| p.capped(self, h.max_ejection_percent))
        {
            // The streak starts over: the node is judged again after as many fresh errors.
            self.passive_errors.store(0, Ordering::Relaxed);
            drop(c);
            let cluster = self.cluster();
            if let Some(m) = &self.metrics {
                m.ejections_suppressed
                    .get_or_create(&ClusterLabel {
                        cluster: cluster.clone(),
                    })
                    .inc();
            }
            tracing::info!(cluster = %cluster, node = %self.id, detail, reason = why, "passive ejection suppressed");
            return None;
        }
        if c.recovered_at
            .is_some_and(|r| now.saturating_duration_since(r) >= STABLE_RECOVERY)
        {
            c.passive_ejections = 0;
        }
        let backoff = passive_backoff(c.passive_ejections, h.interval);
        c.passive_ejections = c.passive_ejections.saturating_add(1);
        c.backoff_until = Some(now + backoff);
        self.passive_errors.store(0, Ordering::Relaxed);
        // Recovery needs `recover_after` fresh probe successes, and the backoff to be over.
        c.consecutive_successes = 0;
        c.consecutive_failures = c.consecutive_failures.max(h.eject_after);
        c.timeout_streak = false;
        self.consecutive_failures
            .store(c.consecutive_failures, Ordering::Relaxed);
        let detail = format!("{detail} ({limit} passive errors in a row; backoff {backoff:?})");
        // Under the counters lock, as every transition (see `NodeRuntime::apply`).
        let changed = self.apply(before, HEALTH_EJECTED, ChangeReason::Passive, &detail, now);
        drop(c);
        changed
    }

    /// Clears the passive error streak after a good answer from real traffic (a response below
    /// 500, a WebSocket 101).
    /// Without a streak to clear it takes no lock: one atomic add.
    pub fn record_passive_success(&self) {
        if self.passive_errors.load(Ordering::Relaxed) != 0 {
            let _c = self
                .counters
                .lock()
                .expect("counters mutex is never poisoned: no panics while held");
            self.passive_errors.store(0, Ordering::Relaxed);
        }
        self.passive_successes.fetch_add(1, Ordering::Release);
    }

    /// Marks the start of a connect to this node; hand the mark to [`Self::record_connect_error`]
    /// if the connect fails.
    pub fn passive_mark(&self) -> PassiveMark {
        PassiveMark(self.passive_successes.load(Ordering::Acquire))
    }

    /// Records a connect error (refused, timed out, the handshake failed before anything was
    /// sent) of a connect that began at `mark`, like [`Self::record_passive_error`], unless the
    /// node answered real traffic since `mark`: then the error is outdated (module docs) and is
    /// not counted. Returns the new state if it changed.
    pub fn record_connect_error(
        &self,
        h: &HealthConfig,
        detail: &str,
        mark: PassiveMark,
        now: Instant,
    ) -> Option<NodeState> {
        if self.passive_mark() != mark {
            tracing::debug!(node = %self.id, detail, "connect error not counted: the node answered since the connect began");
            return None;
        }
        self.record_passive_error(h, detail, now)
    }

    /// When a passively ejected node may recover at the earliest; `None` when no backoff is running.
    pub fn passive_backoff_until(&self) -> Option<Instant> {
        self.counters
            .lock()
            .expect("counters mutex is never poisoned: no panics while held")
            .backoff_until
    }
}
