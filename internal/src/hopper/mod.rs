//! The hopper: owns bindings (conn id -> node) and decides hops (SPEC section 4, 7).
//!
//! For a request with a conn id it answers "which node": the bound node while it is selectable and
//! satisfies the request's version; otherwise a freshly selected node, rebound by compare-and-set,
//! and the hop is counted and logged with the Go original's line. Spawns nothing.

pub mod affinity;
pub mod ids;

use std::sync::Arc;

use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::registry::{Node, NodeState};
use crate::routing::{Cluster, RouteTable};
use crate::selection::{self, Criteria, VersionMiss};

pub use affinity::AffinityStore;
pub use ids::{ConnIds, IdError};

/// Where a request goes.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The chosen node; `None` when no node is selectable.
    pub node: Option<Arc<Node>>,
    /// Set when the request hopped: the old node id and the reason.
    pub hopped_from: Option<(Arc<str>, &'static str)>,
    /// Version-filter miss to report.
    pub version_miss: Option<VersionMiss>,
}

/// Owns the affinity store and the hop decision.
#[derive(Debug)]
pub struct Hopper {
    store: AffinityStore,
    metrics: Arc<Metrics>,
}

/// Why a bound node can no longer serve its conn id.
fn unusable_reason(node: Option<&Arc<Node>>, c: &Criteria<'_>, now: Instant) -> Option<&'static str> {
    let Some(node) = node else { return Some("removed") };
    if c.exclude.contains(&node.id) {
        return Some("connect_error");
    }
    match node.state() {
        NodeState::Draining => return Some("draining"),
        NodeState::Ejected => return Some("ejected"),
        _ => {}
    }
    if !node.is_selectable(now) {
        return Some("ejected");
    }
    if !selection::satisfies(node, c) {
        return Some("version");
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
    pub async fn place(&self, conn: Option<&str>, table: &RouteTable, cluster: &Cluster, c: &Criteria<'_>, now: Instant) -> Placement {
        let Some(conn) = conn else {
            let s = selection::select(table, cluster, c, now);
            return Placement { node: s.node, hopped_from: None, version_miss: s.version_miss };
        };
        let bound = self.store.get(conn).await;
        let bound_node = bound.as_deref().and_then(|id| cluster.node(id));
        if bound.is_some() && unusable_reason(bound_node, c, now).is_none() {
            return Placement { node: bound_node.cloned(), hopped_from: None, version_miss: None };
        }
        let s = selection::select(table, cluster, c, now);
        let Some(chosen) = s.node else {
            return Placement { node: None, hopped_from: None, version_miss: s.version_miss };
        };
        let Some(old) = bound else {
            let winner = self.store.bind(conn, &chosen.id).await;
            // Another replica bound it first: follow it if usable there.
            let node = match cluster.node(&winner) {
                Some(n) if winner != chosen.id && unusable_reason(Some(n), c, now).is_none() => n.clone(),
                _ => chosen,
            };
            return Placement { node: Some(node), hopped_from: None, version_miss: s.version_miss };
        };
        let reason = unusable_reason(bound_node, c, now).unwrap_or("rebalance");
        let node = self.hop(conn, &old, chosen, cluster, c, reason, now).await;
        Placement { node: Some(node), hopped_from: Some((old, reason)), version_miss: s.version_miss }
    }

    /// Rebinds `conn` from `old` to `to` (compare-and-set), logs and counts the hop, and returns the
    /// node the id ends up on (a racing replica's choice when it won and is usable).
    #[allow(clippy::too_many_arguments)]
    pub async fn hop(&self, conn: &str, old: &str, to: Arc<Node>, cluster: &Cluster, c: &Criteria<'_>, reason: &'static str, now: Instant) -> Arc<Node> {
        let winner = self.store.hop(conn, old, &to.id).await;
        let node = match cluster.node(&winner) {
            Some(n) if winner != to.id && unusable_reason(Some(n), c, now).is_none() => n.clone(),
            _ => to,
        };
        if winner == node.id {
            self.metrics.hop(reason);
            tracing::info!(conn_id = conn, from = old, to = %node.id, reason, "Hopping triggered for conn {} from {} to {}", conn, old, node.id);
        }
        node
    }

    /// Records that `conn` now lives on `node` after a retry moved it away from `old`.
    pub async fn moved(&self, conn: &str, old: &str, node: &Arc<Node>, reason: &'static str) {
        let winner = self.store.hop(conn, old, &node.id).await;
        if winner == node.id {
            self.metrics.hop(reason);
            tracing::info!(conn_id = conn, from = old, to = %node.id, reason, "Hopping triggered for conn {} from {} to {}", conn, old, node.id);
        }
    }
}
