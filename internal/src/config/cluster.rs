//! The validated form of `[[clusters]]` and `[health]` (SPEC section 3): probes, protocols, pickers, nodes.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

/// Probe kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeKind {
    /// `GET <path>` over the cluster's protocol.
    Http,
    /// TCP connect only.
    Tcp,
    /// `grpc.health.v1.Health/Check` over the cluster's HTTP/2 protocol; `SERVING` passes.
    Grpc,
}

/// JSON body check: the value at `pointer` must equal `equals`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectJson {
    /// RFC 6901 pointer.
    pub pointer: String,
    /// Expected string.
    pub equals: String,
}

/// Health settings of one cluster (`[health]` merged with its overrides).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthConfig {
    /// Probe kind.
    pub kind: ProbeKind,
    /// `kind = Grpc`: the service name asked about; empty = the whole server.
    pub grpc_service: String,
    /// Probe path.
    pub path: String,
    /// Probe interval.
    pub interval: Duration,
    /// Probe timeout.
    pub timeout: Duration,
    /// Accepted statuses.
    pub expect_status: RangeInclusive<u16>,
    /// Optional body check.
    pub expect_json: Option<ExpectJson>,
    /// Failures before degraded.
    pub degrade_after: u32,
    /// Degraded weight percent (1-100).
    pub degraded_percent: u8,
    /// Failures before ejected.
    pub eject_after: u32,
    /// Successes before recovery.
    pub recover_after: u32,
    /// Slow-start ramp; `None` = none.
    pub slow_start: Option<Duration>,
    /// Passive errors that eject; `None` = passive ejection off.
    pub passive_consecutive_errors: Option<NonZeroU32>,
    /// Passive ejection never takes more than this percent (0-100) of the cluster's nodes at
    /// once, counting nodes ejected by probes, nor its last ready node (CASE-32).
    pub max_ejection_percent: u8,
}

/// The protocol a cluster's nodes speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1.
    Http1,
    /// HTTP/2 cleartext, prior knowledge.
    H2c,
    /// HTTP/2 over TLS, negotiated by ALPN `h2` (needs `tls`).
    H2,
}

impl Protocol {
    /// True for the HTTP/2 protocols (`h2c`, `h2`).
    pub fn is_h2(self) -> bool {
        matches!(self, Protocol::H2c | Protocol::H2)
    }
}

/// Picker (`lb`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Picker {
    /// Round robin over effective weights (smooth weighted when weights differ).
    RoundRobin,
    /// Uniform random among selectable nodes.
    Random,
    /// Weighted random by effective weight.
    Weighted,
    /// Power of two choices on in-flight requests.
    LeastRequest,
}

/// One cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Name.
    pub name: String,
    /// The protocol its nodes speak.
    pub protocol: Protocol,
    /// TLS to the nodes (`tls`), loaded; `None` = cleartext.
    pub tls: Option<std::sync::Arc<crate::tls::client::ClusterTls>>,
    /// Health settings.
    pub health: HealthConfig,
    /// Picker.
    pub lb: Picker,
    /// Nodes: the static list, or (with `discovery`) the last good DNS answer filled in by routing.
    pub nodes: Vec<NodeConfig>,
    /// DNS discovery of the nodes (SPEC section 12); `None` = the static `nodes`.
    pub discovery: Option<DiscoveryConfig>,
}

/// `clusters[].discovery`: the cluster's nodes are the A/AAAA records of `name` (SPEC section 12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryConfig {
    /// DNS name to resolve.
    pub name: String,
    /// Port of every node (`<ip>:<port>` is also its id).
    pub port: u16,
    /// Re-resolution interval (at least [`MIN_DISCOVERY_INTERVAL`]; a shorter record TTL wins).
    pub interval: Duration,
    /// Configured weight of every discovered node (0-10000).
    pub weight: u32,
    /// Metadata of every discovered node.
    pub metadata: BTreeMap<String, String>,
    /// Drain period of a node whose record disappeared.
    pub drain_period: Duration,
}

/// One node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// Unique id.
    pub id: String,
    /// `host:port`, resolved at connect time.
    pub addr: String,
    /// Configured weight (0-10000).
    pub weight: u32,
    /// Metadata (`version`, `zone`, ...).
    pub metadata: BTreeMap<String, String>,
}
