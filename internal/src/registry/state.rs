//! The states a node goes through and the signals about them (SPEC section 8 `GET /admin/nodes`,
//! section 3 `[health]`).

use std::fmt;

use tokio::time::Instant;

pub(super) fn health_name(h: u8) -> &'static str {
    match h {
        HEALTH_HEALTHY => "healthy",
        HEALTH_DEGRADED => "degraded",
        _ => "ejected",
    }
}

/// Health/operator state of a node as shown by `GET /admin/nodes` (SPEC section 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeState {
    /// Full weight (possibly still ramping in slow start).
    Healthy,
    /// `degrade_after` consecutive failures: weight x degraded_percent.
    Degraded,
    /// `eject_after` failures or passive ejection: weight 0.
    Ejected,
    /// Operator drain or removal: no new work.
    Draining,
    /// New in the table and still in warm-up.
    Warming,
}

impl NodeState {
    /// The SPEC's lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Healthy => "healthy",
            NodeState::Degraded => "degraded",
            NodeState::Ejected => "ejected",
            NodeState::Draining => "draining",
            NodeState::Warming => "warming",
        }
    }

    /// Every state, for exporting one gauge per state.
    pub const ALL: [NodeState; 5] = [
        NodeState::Healthy,
        NodeState::Degraded,
        NodeState::Ejected,
        NodeState::Draining,
        NodeState::Warming,
    ];
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

pub(super) const HEALTH_HEALTHY: u8 = 0;
pub(super) const HEALTH_DEGRADED: u8 = 1;
pub(super) const HEALTH_EJECTED: u8 = 2;

/// Why a node's state changed; logged with every transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeReason {
    /// Active probe results.
    Probe,
    /// Errors on real traffic.
    Passive,
    /// Failed the pre-swap connect probe of a reload.
    Reload,
}

impl ChangeReason {
    /// Lower-case name for logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ChangeReason::Probe => "probe",
            ChangeReason::Passive => "passive",
            ChangeReason::Reload => "reload",
        }
    }
}

/// One active probe's result as the weight ladder sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeResult {
    /// Passed every check.
    Pass,
    /// Failed by status, body or connect error: the node answered (or refused) for itself.
    Fail,
    /// No answer within the probe's `timeout`: may be the node, may be the gateway (see [`super::health`]).
    Timeout,
}

/// What [`super::NodeRuntime::record_probe_result`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProbeEffect {
    /// The new state, if it changed.
    pub changed: Option<NodeState>,
    /// True if the node reached `eject_after` on timeouts alone and was kept (degraded) because
    /// the caller's timeout-storm guard asked for it.
    pub held: bool,
}

/// Signals a node's long-lived connections watch: usable or not, and the drain deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeSignal {
    /// False once ejected or draining: bound connections should hop.
    pub usable: bool,
    /// Set while draining: what is left is closed at this instant.
    pub drain_deadline: Option<Instant>,
}
