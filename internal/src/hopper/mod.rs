//! The hopper: owns bindings (conn id -> node) and decides hops (SPEC section 4, 7).
//!
//! For a request with a conn id it answers "which node": the bound node while it is selectable and
//! satisfies the request's version; otherwise a freshly selected node, rebound by compare-and-set,
//! and the hop is counted and logged with the Go original's line. Spawns nothing.

pub(crate) mod affinity;
pub mod ids;

use std::sync::Arc;

use tokio::time::Instant;

pub(crate) use crate::events::HopReason;
use crate::events::{unix_ms, Event};
use crate::metrics::Metrics;
use crate::registry::{Node, NodeState};
use crate::routing::{Cluster, RouteTable};
use crate::selection::{self, Criteria, VersionMiss};

pub(crate) use affinity::AffinityStore;
pub use ids::{ConnId, ConnIds, IdError};

/// Whether a hop follows a racing move of the same id ([`Hopper::hop`]).
#[derive(Debug, Clone, Copy)]
pub enum Follow<'a> {
    /// Follow the winner of a lost compare-and-set when it is a usable node of this cluster under
    /// these criteria.
    Winner(&'a Cluster, &'a Criteria<'a>),
    /// Stay on `to`: the caller is already connected there.
    No,
}

/// Where a request goes.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The chosen node; `None` when no node is selectable.
    pub node: Option<Arc<Node>>,
    /// Set when the request hopped: the old node id and the reason.
    pub hopped_from: Option<(Arc<str>, HopReason)>,
    /// Version-filter miss to report.
    pub(crate) version_miss: Option<VersionMiss>,
    /// Set when this request counted a hop: when the failure behind it was first seen (the bound
    /// node's ejection or drain, else the hop decision itself), the start of the hop's
    /// `hopping_latency_seconds` observation.
    pub hop_seen: Option<Instant>,
}

/// Owns the affinity store and the hop decision.
#[derive(Debug)]
pub struct Hopper {
    store: AffinityStore,
    metrics: Arc<Metrics>,
}

/// Why a bound node can no longer serve its conn id.
fn unusable_reason(node: Option<&Arc<Node>>, c: &Criteria<'_>, now: Instant) -> Option<HopReason> {
    let Some(node) = node else {
        return Some(HopReason::Removed);
    };
    if c.exclude.contains(&node.id) {
        return Some(HopReason::ConnectError);
    }
    match node.state() {
        NodeState::Draining => return Some(HopReason::Draining),
        NodeState::Ejected => return Some(HopReason::Ejected),
        _ => {}
    }
    if !node.is_selectable(now) {
        return Some(HopReason::Ejected);
    }
    if !selection::satisfies(node, c) {
        return Some(HopReason::Version);
    }
    None
}

impl Hopper {
    /// A hopper over `store`.
    pub fn new(store: AffinityStore, metrics: Arc<Metrics>) -> Self {
        Hopper { store, metrics }
    }

    /// The affinity store (admin API).
    pub fn store(&self) -> &AffinityStore {
        &self.store
    }

    /// Places a request. Without `conn`, a plain selection (not bound). With it: the bound node if
    /// usable; else select, bind or hop, and count and log the hop.
    pub async fn place(
        &self,
        conn: Option<&ConnId>,
        table: &RouteTable,
        cluster: &Cluster,
        c: &Criteria<'_>,
        now: Instant,
    ) -> Placement {
        let Some(conn) = conn else {
            let s = selection::select(table, cluster, c, now);
            return Placement {
                node: s.node,
                hopped_from: None,
                version_miss: s.version_miss,
                hop_seen: None,
            };
        };
        let bound = self.store.get(conn).await;
        let bound_node = bound.as_deref().and_then(|id| cluster.node(id));
        let bound_reason = bound.as_ref().map(|_| unusable_reason(bound_node, c, now));
        if bound_reason == Some(None) {
            return Placement {
                node: bound_node.cloned(),
                hopped_from: None,
                version_miss: None,
                hop_seen: None,
            };
        }
        let s = selection::select(table, cluster, c, now);
        // Bound to a usable node that lacks the requested version, and no node has it: the request
        // falls back to all candidates anyway, so the binding stays (no hop on every such request).
        if bound_reason == Some(Some(HopReason::Version)) && s.version_miss.is_some() {
            return Placement {
                node: bound_node.cloned(),
                hopped_from: None,
                version_miss: s.version_miss,
                hop_seen: None,
            };
        }
        let Some(chosen) = s.node else {
            return Placement {
                node: None,
                hopped_from: None,
                version_miss: s.version_miss,
                hop_seen: None,
            };
        };
        let Some(old) = bound else {
            let winner = self.store.bind(conn, &chosen.id).await;
            // Another replica bound it first: follow it if usable there.
            let node = match cluster.node(&winner) {
                Some(n) if winner != chosen.id && unusable_reason(Some(n), c, now).is_none() => {
                    n.clone()
                }
                _ => chosen,
            };
            return Placement {
                node: Some(node),
                hopped_from: None,
                version_miss: s.version_miss,
                hop_seen: None,
            };
        };
        let reason = unusable_reason(bound_node, c, now).unwrap_or(HopReason::Rebalance);
        let (node, counted) = self
            .hop(conn, &old, chosen, Follow::Winner(cluster, c), reason, now)
            .await
            .logged();
        let seen = bound_node
            .and_then(|n| n.runtime.unusable_since())
            .filter(|t| *t <= now)
            .unwrap_or(now);
        Placement {
            node: Some(node),
            hopped_from: Some((old, reason)),
            version_miss: s.version_miss,
            hop_seen: counted.then_some(seen),
        }
    }

    /// The one hop API: rebinds `conn` from `old` to `to` (compare-and-set) and counts and
    /// publishes the hop. Returns the node the id ends up on and, when this call counted the hop,
    /// its log line, which the caller owes: [`Hopped::logged`] writes it at once; a re-dialled
    /// WebSocket writes it with [`HopLine::served`] once `to` served it again, so the one INFO
    /// line per hop carries the latency. A counted hop also owes one `hopping_latency_seconds`
    /// observation. With [`Follow::Winner`] a racing request or replica that moved the id first
    /// wins and this call follows it there when that node is usable under the criteria (CASE-17:
    /// the binding moves once); with [`Follow::No`] the caller is already on `to` (a re-dialled
    /// WebSocket) and stays.
    pub async fn hop(
        &self,
        conn: &ConnId,
        old: &str,
        to: Arc<Node>,
        follow: Follow<'_>,
        reason: HopReason,
        now: Instant,
    ) -> Hopped {
        let (winner, swapped) = self.store.hop(conn, old, &to.id).await;
        let node = match follow {
            Follow::Winner(cluster, c) => match cluster.node(&winner) {
                Some(n) if winner != to.id && unusable_reason(Some(n), c, now).is_none() => {
                    n.clone()
                }
                _ => to,
            },
            Follow::No => to,
        };
        // Only the request whose compare-and-set changed the binding counts and logs the hop; the
        // others of a racing burst follow it (CASE-17: the binding moves once).
        if !(swapped && winner == node.id) {
            return Hopped { node, line: None };
        }
        self.metrics.hop(reason);
        self.metrics.events.publish(Event::Hop {
            conn: conn.to_string(),
            from: Arc::from(old),
            to: node.id.clone(),
            reason,
            at_ms: unix_ms(),
        });
        let line = HopLine {
            conn: conn.clone(),
            from: Arc::from(old),
            to: node.id.clone(),
            reason,
        };
        Hopped {
            node,
            line: Some(line),
        }
    }
}

/// What [`Hopper::hop`] did: the node the conn id ends up on, and the log line of a hop this call
/// counted.
#[derive(Debug)]
#[must_use = "every counted hop is logged"]
pub struct Hopped {
    /// The node the id is bound to now: the hop's target, or where a racing move took it.
    pub node: Arc<Node>,
    /// The line of a hop this call counted (and published); `None` when a racing move won.
    pub line: Option<HopLine>,
}

impl Hopped {
    /// Logs a counted hop's line at once; returns the node and whether this call counted the hop
    /// (the caller then owes one `hopping_latency_seconds` observation).
    pub fn logged(self) -> (Arc<Node>, bool) {
        let counted = self.line.is_some();
        if let Some(line) = self.line {
            line.now();
        }
        (self.node, counted)
    }
}

/// The log line of a counted hop, owed by the caller of [`Hopper::hop`]: SPEC section 2's
/// `Hopping triggered for conn <id> from <old> to <new>` at INFO. Dropping it unlogged loses a
/// hop's line: call [`HopLine::now`], [`HopLine::served`] or [`HopLine::unserved`].
#[derive(Debug)]
#[must_use = "every counted hop is logged"]
pub struct HopLine {
    conn: ConnId,
    from: Arc<str>,
    to: Arc<str>,
    reason: HopReason,
}

impl HopLine {
    /// Logs the hop now, for a caller that answers on the new node right away.
    pub fn now(self) {
        let (conn, from, to) = (self.conn.as_str(), &*self.from, &self.to);
        tracing::info!(conn_id = conn, from = from, to = %to, reason = self.reason.label(), "Hopping triggered for conn {} from {} to {}", conn, from, to);
    }

    /// Logs the hop once the new node served the connection, `latency` after the failure was
    /// seen: the latency (failure seen to served again) goes in as a structured field.
    pub fn served(self, latency: std::time::Duration) {
        self.later(Some(latency.as_millis() as u64), None);
    }

    /// Logs the hop of a connection that ended before the new node served it.
    pub fn unserved(self) {
        self.later(None, Some(false));
    }

    /// The line of a hop logged after the fact, with `latency_ms` or `served` (a field that is
    /// `None` is left out of the line).
    fn later(self, latency_ms: Option<u64>, served: Option<bool>) {
        let (conn, from, to) = (&self.conn, &self.from, &self.to);
        tracing::info!(conn_id = %conn, from = %from, to = %to, reason = self.reason.label(), latency_ms, served, "Hopping triggered for conn {} from {} to {}", conn, from, to);
    }
}

#[cfg(test)]
mod tests;
