//! One node as a route table sees it ([`Node`]): its config, its cluster's settings, and the
//! shared live state of the registry.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Instant;

use super::{NodeId, NodeRuntime, NodeState};
use crate::config::{HealthConfig, Protocol};

/// Settings a node's runtime needs from its cluster (refreshed on every table build).
#[derive(Debug, Clone)]
pub struct NodeSettings {
    /// Health settings of its cluster.
    pub health: HealthConfig,
    /// The protocol of its cluster.
    pub protocol: Protocol,
    /// TLS to the node (its cluster's `tls`); `None` = cleartext.
    pub tls: Option<Arc<crate::tls::client::ClusterTls>>,
}

/// One node as the current route table sees it: config plus shared runtime.
#[derive(Debug)]
pub struct Node {
    /// Id.
    pub id: NodeId,
    /// Cluster name.
    pub cluster: Arc<str>,
    /// `host:port`.
    pub addr: String,
    /// Configured weight.
    pub weight: u32,
    /// Metadata.
    pub metadata: BTreeMap<String, String>,
    /// Cluster settings.
    pub settings: NodeSettings,
    /// Live state, shared across tables.
    pub runtime: Arc<NodeRuntime>,
}

impl Node {
    /// Health weight in percent (0-100) at `now`: 100 healthy (ramping during slow start),
    /// `degraded_percent` degraded, 0 ejected or draining (SPEC section 3 `[health]`).
    pub fn health_percent(&self, now: Instant) -> u32 {
        self.runtime.health_percent(&self.settings.health, now)
    }

    /// The state shown to operators, not counting warm-up (the route table adds that).
    pub fn state(&self) -> NodeState {
        self.runtime.state()
    }

    /// True if new work may be sent here: not draining and health weight above 0.
    pub fn is_selectable(&self, now: Instant) -> bool {
        self.health_percent(now) > 0
    }
}
