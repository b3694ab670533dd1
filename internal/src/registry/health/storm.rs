//! The guard against a gateway-side timeout storm (see the [`super`] module docs): the last-node rule
//! and the per-cluster probe view it decides on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::super::probe::ProbeOutcome;
use super::super::{Node, NodeId, NodeRuntime, ProbeResult};
use crate::config::HealthConfig;

/// Feeds one probe outcome to the node's ladder, applying the last-node rule to timeouts.
pub(super) fn observe(node: &Node, view: &ClusterView, outcome: &ProbeOutcome, now: Instant) {
    let h = &node.settings.health;
    let (result, detail) = match outcome {
        ProbeOutcome::Pass => (ProbeResult::Pass, "ok".to_string()),
        ProbeOutcome::Fail(why) => (ProbeResult::Fail, why.clone()),
        ProbeOutcome::Timeout(t) => (ProbeResult::Timeout, format!("timeout after {t:?}")),
    };
    if result != ProbeResult::Pass {
        tracing::debug!(node = %node.id, cluster = %node.cluster, reason = %detail, "probe failed");
    }
    let timeout = result == ProbeResult::Timeout;
    if !timeout {
        view.warned.store(false, Ordering::Relaxed);
    }
    let (effect, nodes) = view.record(&node.id, LastProbe { at: now, timeout }, |peers| {
        let hold = timeout && hold_last_node(peers, now, storm_window(h));
        (
            node.runtime
                .record_probe_result(h, result, hold, &detail, now),
            peers.len() + 1,
        )
    });
    if effect.held && !view.warned.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            cluster = %node.cluster,
            node = %node.id,
            nodes,
            "every node of the cluster failed its probes by timeout in the same interval; treating it as a gateway-side problem and keeping the last node (not ejected on timeouts alone)"
        );
    }
}

/// The latest probe of one node, as the timeout-storm guard sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LastProbe {
    /// When the probe finished.
    pub at: Instant,
    /// True if it failed by timeout.
    pub timeout: bool,
}

/// One other node of the cluster, as the timeout-storm guard sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Peer {
    /// False when ejected or draining.
    pub usable: bool,
    /// Its latest probe, if any.
    pub last: Option<LastProbe>,
}

/// How recent a peer's timeout must be to count as "the same interval": two probe intervals (one
/// for the jittered schedule, one for a permit wait) plus one probe timeout.
pub(super) fn storm_window(h: &HealthConfig) -> Duration {
    h.interval * 2 + h.timeout
}

/// The last-node rule (module docs): true if a node whose probe just timed out must not be ejected,
/// because every other node of its cluster (`peers`) is unusable and timed out on its latest probe
/// within `window` of `now`. With no peers it is the cluster's only node: true.
pub(super) fn hold_last_node(peers: &[Peer], now: Instant, window: Duration) -> bool {
    peers.iter().all(|p| {
        !p.usable
            && p.last
                .is_some_and(|l| l.timeout && now.saturating_duration_since(l.at) <= window)
    })
}

/// A cluster member: its runtime and latest probe.
type Member = (Arc<NodeRuntime>, Option<LastProbe>);

/// The probe view of one cluster shared by its nodes' tasks (for the last-node rule).
#[derive(Debug, Default)]
pub(super) struct ClusterView {
    pub(super) members: Mutex<HashMap<NodeId, Member>>,
    /// Set once the storm WARN was logged; cleared when any probe of the cluster ends otherwise.
    pub(super) warned: AtomicBool,
}

impl ClusterView {
    /// Records `id`'s latest probe and runs `decide` with its peers as they stand, under the view's
    /// lock, so two nodes of one cluster cannot both decide they are not the last one.
    pub(super) fn record<T>(
        &self,
        id: &NodeId,
        last: LastProbe,
        decide: impl FnOnce(&[Peer]) -> T,
    ) -> T {
        let mut m = self
            .members
            .lock()
            .expect("cluster view mutex is never poisoned: no panics while held");
        if let Some(entry) = m.get_mut(id) {
            entry.1 = Some(last);
        }
        let peers: Vec<Peer> = m
            .iter()
            .filter(|(k, _)| *k != id)
            .map(|(_, (rt, last))| Peer {
                usable: rt.signal().usable,
                last: *last,
            })
            .collect();
        decide(&peers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(usable: bool, last: Option<(u64, bool)>, t0: Instant) -> Peer {
        Peer {
            usable,
            last: last.map(|(ms, timeout)| LastProbe {
                at: t0 + Duration::from_millis(ms),
                timeout,
            }),
        }
    }

    #[test]
    fn last_node_rule_table() {
        let t0 = Instant::now();
        let now = t0 + Duration::from_millis(1_000);
        let window = Duration::from_millis(600);
        // (peers, expected hold, why)
        let cases: Vec<(Vec<Peer>, bool, &str)> = vec![
            (vec![], true, "only node of its cluster"),
            (
                vec![peer(false, Some((900, true)), t0)],
                true,
                "peer ejected and timed out just now",
            ),
            (
                vec![peer(true, Some((900, true)), t0)],
                false,
                "peer still usable: not the last node",
            ),
            (
                vec![peer(false, Some((900, false)), t0)],
                false,
                "peer failed by status: not a timeout storm",
            ),
            (
                vec![peer(false, Some((300, true)), t0)],
                false,
                "peer's timeout is older than the window",
            ),
            (vec![peer(false, None, t0)], false, "peer never probed"),
            (
                vec![
                    peer(false, Some((950, true)), t0),
                    peer(false, Some((800, true)), t0),
                ],
                true,
                "all peers ejected by recent timeouts",
            ),
            (
                vec![
                    peer(false, Some((950, true)), t0),
                    peer(true, Some((800, true)), t0),
                ],
                false,
                "one peer still usable",
            ),
        ];
        for (peers, want, why) in cases {
            assert_eq!(hold_last_node(&peers, now, window), want, "{why}");
        }
    }
}
