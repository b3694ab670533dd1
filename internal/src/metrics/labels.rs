//! The label sets of the SPEC section 8 metrics; every value is bounded (config names, HTTP codes,
//! fixed enums), never a conn id.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;

/// `{reason}` of `hopping_count_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    /// Hop reason (`ejected`, `draining`, `connect_error`, `reset`, `version`, `removed`, ...).
    pub reason: &'static str,
}

/// `{route,node,code}` of `gateway_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Route id, or `-` when none matched.
    pub route: Arc<str>,
    /// Node id, or `-` when none served it.
    pub node: Arc<str>,
    /// HTTP status code.
    pub code: u16,
}

/// `{protocol}` of `gateway_active_connections`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProtocolLabel {
    /// `http1`, `h2`, `websocket`.
    pub protocol: &'static str,
}

/// `{cluster,node}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeLabels {
    /// Cluster name.
    pub cluster: Arc<str>,
    /// Node id.
    pub node: Arc<str>,
}

/// `{cluster,node,state}` of `gateway_node_state`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeStateLabels {
    /// `{cluster,node}`, encoded first.
    #[prometheus(flatten)]
    pub node: NodeLabels,
    /// State name.
    pub state: &'static str,
}

/// `{result}` of `gateway_reloads_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `ok`, `invalid`, `probe_failed`, `rolled_back`, `rollback`.
    pub result: &'static str,
}

/// `{op}` of `gateway_affinity_store_errors_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabel {
    /// `get`, `bind`, `hop`, `remove`, `subscribe`, `writeback`.
    pub op: &'static str,
}

/// `{cluster}` of `gateway_canary_fallback_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClusterLabel {
    /// Cluster name.
    pub cluster: Arc<str>,
}

/// `{cluster,node,to}` of `gateway_health_transitions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    /// `{cluster,node}`, encoded first.
    #[prometheus(flatten)]
    pub node: NodeLabels,
    /// State entered (`healthy`, `degraded`, `ejected`).
    pub to: &'static str,
}

/// `{route,reason}` of `gateway_retries_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RetryLabels {
    /// Route id.
    pub route: Arc<str>,
    /// `connect_error`, `stale_connection`, `reset`, `goaway`.
    pub reason: &'static str,
}

/// `{version}` of `gateway_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct VersionLabel {
    /// The crate version (`hopping-gateway --version`).
    pub version: &'static str,
}

/// `name` label of a certificate (its first server name, or its file).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NameLabel {
    /// Certificate name.
    pub name: String,
}

/// `{kind}` of `gateway_upgrade_moved_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// `listener`, `websocket`, `http1`.
    pub kind: &'static str,
}
