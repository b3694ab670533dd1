//! Configuration: the TOML file of SPEC section 3, CLI overrides, and the Go-compatible defaults.
//!
//! Two layers: [`file`](mod@file) is the serde DTO as written; [`Config`] is the validated, typed form that
//! runtime code sees (durations, socket addresses, enums; never a string compared per request).
//! [`load_str`] parses and validates in one go and reports **every** problem with its dotted key,
//! line and column. This module spawns nothing and never touches the network.

mod collect;
mod discovery;
pub mod file;
pub mod server_tls;
pub mod size;
mod spans;
#[cfg(test)]
mod tls_tests;
mod validate;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::ops::RangeInclusive;
use std::path::Path;
use std::time::Duration;

pub use validate::from_file;

/// Data-plane listen address of the Go original (SPEC section 2).
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8000";
/// Admin on loopback only: the admin API can drain nodes, so it must not face the network by default.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9901";
/// The Go original's affinity header.
pub const DEFAULT_AFFINITY_HEADER: &str = "X-Conn-Id";
/// One hour: long enough to span reconnect storms, short enough that abandoned ids age out.
pub const DEFAULT_AFFINITY_TTL: Duration = Duration::from_secs(3600);
/// One million bindings is ~150 MiB worst case in the memory store; past it the LRU evicts.
pub const DEFAULT_MAX_ENTRIES: usize = 1_000_000;
/// Redis on loopback, database 0.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379/0";
/// Namespaces the keys so one Redis can serve other applications.
pub const DEFAULT_KEY_PREFIX: &str = "hopgw:";
/// A Redis call slower than this is treated as an outage for that request; the local cache serves.
pub const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_millis(250);
/// The Go original probed every 2 s with a 2 s timeout.
pub const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(2);
/// See [`DEFAULT_HEALTH_INTERVAL`].
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
/// The Go original's probe path.
pub const DEFAULT_HEALTH_PATH: &str = "/health";
/// Two failures in a row cut a node to its degraded weight (one failure may be a blip).
pub const DEFAULT_DEGRADE_AFTER: u32 = 2;
/// A degraded node keeps a fifth of its traffic: enough to keep seeing real errors.
pub const DEFAULT_DEGRADED_PERCENT: u8 = 20;
/// Three failures in a row eject: within 6 s at the default interval.
pub const DEFAULT_EJECT_AFTER: u32 = 3;
/// Two successes in a row before recovery starts, so a flapping node does not bounce.
pub const DEFAULT_RECOVER_AFTER: u32 = 2;
/// A recovered node ramps over 30 s so cold caches and JITs are not flooded.
pub const DEFAULT_SLOW_START: Duration = Duration::from_secs(30);
/// Five consecutive real-traffic errors eject at once, well before the next probe.
pub const DEFAULT_PASSIVE_ERRORS: u32 = 5;
/// Envoy's outlier-detection default: a shared fault seen by every node (their common dependency is
/// down) takes at most half of a cluster out through passive ejection, never all of it.
pub const DEFAULT_MAX_EJECTION_PERCENT: u8 = 50;
/// Whole-request timeout: generous for APIs; never applied to WebSocket or streams.
pub const DEFAULT_ROUTE_TIMEOUT: Duration = Duration::from_secs(30);
/// Two retries: with three nodes, every other node is tried once.
pub const DEFAULT_RETRIES: u32 = 2;
/// Time to finish in-flight work on SIGTERM (Kubernetes' default grace period).
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// SPEC section 4: request line limit, 16 KiB.
pub const DEFAULT_MAX_REQUEST_LINE: usize = 16 * 1024;
/// SPEC section 4: header block limit, 32 KiB.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 32 * 1024;
/// SPEC section 4: header field count limit.
pub const DEFAULT_MAX_HEADERS: usize = 100;
/// SPEC section 4: the whole request head must arrive within 10 s of its first byte.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// SPEC section 4: a request body silent for 30 s is abandoned.
pub const DEFAULT_BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Bounded connections: past this, accepts wait (and are logged) rather than exhausting fds.
pub const DEFAULT_MAX_CONNECTIONS: usize = 25_000;
/// A node that cannot accept a TCP connection within 1 s is treated as down for that request.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Idle pooled upstream connections are closed before typical node keep-alive limits (5 s in many servers).
pub const DEFAULT_UPSTREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(4);
/// Apache mod_reqtimeout's body `MinRate` (500 bytes/s): far below any real upload, far above a
/// trickle that exists only to hold a connection (CASE-22).
pub const DEFAULT_BODY_MIN_RATE: u64 = 500;
/// The minimum body rate is averaged over 10 s windows of waiting for the client, the first one
/// being grace, so a client pausing a few seconds (a mobile handover) is not cut.
pub const DEFAULT_BODY_RATE_WINDOW: Duration = Duration::from_secs(10);

/// SPEC section 3's example interval for DNS discovery: new pods are seen within seconds, and a
/// cluster of hundreds of records costs the DNS server one query per cluster every 5 s.
pub const DEFAULT_DISCOVERY_INTERVAL: Duration = Duration::from_secs(5);
/// SPEC section 12: a name is never re-resolved more often than once a second, whatever its TTL.
pub const MIN_DISCOVERY_INTERVAL: Duration = Duration::from_secs(1);
/// A node whose record disappeared drains as long as a node a reload removed (30 s, Kubernetes'
/// default termination grace period), so its WebSockets hop spread over that time.
pub const DEFAULT_DISCOVERY_DRAIN: Duration = Duration::from_secs(30);
/// Weight of a discovered node when `discovery.weight` is absent: the same as a static node's.
pub const DEFAULT_DISCOVERED_WEIGHT: u32 = 100;

/// A config problem: dotted key (`-` for syntax errors), 1-based line and column, and message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ConfigIssue {
    /// Dotted key such as `routes[2].cluster`, or `-`.
    pub key: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

/// A refused config: every problem found (SPEC section 3).
#[derive(Debug, Clone, thiserror::Error)]
pub struct ConfigError {
    /// File name used in the rendered lines.
    pub file: String,
    /// Each problem, in file order.
    pub issues: Vec<ConfigIssue>,
}

impl fmt::Display for ConfigError {
    /// One line per issue: `<file>:<line>:<column>: <key>: <message>` (SPEC section 3).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.issues.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(
                f,
                "{}:{}:{}: {}: {}",
                self.file, e.line, e.column, e.key, e.message
            )?;
        }
        Ok(())
    }
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// `[server]`.
    pub server: ServerConfig,
    /// `[affinity]`.
    pub affinity: AffinityConfig,
    /// `[limits]`.
    pub limits: Limits,
    /// Clusters in file order.
    pub clusters: Vec<ClusterConfig>,
    /// Routes in file order (matching order is decided by the route table).
    pub routes: Vec<RouteConfig>,
}

/// `[server]`.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Data-plane address (HTTP/1.1 + h2c).
    pub listen: SocketAddr,
    /// Admin address.
    pub admin_listen: SocketAddr,
    /// Bearer token for admin calls.
    pub admin_token: Option<String>,
    /// This gateway's zone.
    pub zone: Option<String>,
    /// Trusted proxy ranges; `None` = append to whatever arrives (Go-compatible).
    pub trusted_proxies: Option<Vec<ipnet::IpNet>>,
    /// Grace period on SIGTERM.
    pub shutdown_timeout: Duration,
    /// Access log on/off.
    pub access_log: bool,
    /// Probe-only listener for orchestrators (SPEC section 11); `None` = not opened.
    pub health_listen: Option<SocketAddr>,
    /// DNS server for service discovery (`server.resolver`); `None` = the system resolver.
    pub resolver: Option<SocketAddr>,
    /// `[server.tls]`: the TLS listener, when configured (SPEC section 10).
    pub tls: Option<server_tls::ServerTlsConfig>,
}

/// How conn ids are accepted (SPEC section 3 `ids`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdMode {
    /// Take the client's id as is.
    Client,
    /// Gateway-issued HMAC-signed ids only.
    Signed,
}

/// Which affinity store backs bindings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreKind {
    /// Bounded in-process LRU.
    Memory,
    /// Redis, shared by replicas.
    Redis {
        /// Connection URL (SPEC section 7 schemes).
        url: String,
    },
}

/// `[affinity]`.
#[derive(Debug, Clone)]
pub struct AffinityConfig {
    /// Header name carrying the conn id.
    pub header: http::HeaderName,
    /// Id mode.
    pub ids: IdMode,
    /// Env var with the HMAC key.
    pub secret_env: String,
    /// Env var with older accepted keys (comma separated).
    pub old_secrets_env: String,
    /// Store.
    pub store: StoreKind,
    /// Sliding TTL.
    pub ttl: Duration,
    /// Memory store bound (also bounds the Redis store's local cache).
    pub max_entries: usize,
    /// Redis key prefix.
    pub key_prefix: String,
    /// Timeout per Redis call.
    pub redis_timeout: Duration,
    /// `affinity.redis_ca`: the CA file's PEM bytes for `rediss://` (read and checked at load);
    /// `None` = the system roots.
    pub redis_ca: Option<Vec<u8>>,
}

/// `[limits]`; see README "Limits and hardening".
#[derive(Debug, Clone)]
pub struct Limits {
    /// Request line bytes (414 past it).
    pub max_request_line: usize,
    /// Header block bytes (431 past it).
    pub max_header_bytes: usize,
    /// Header field count (431 past it).
    pub max_headers: usize,
    /// Whole head read timeout.
    pub header_read_timeout: Duration,
    /// Body idle timeout.
    pub body_idle_timeout: Duration,
    /// Concurrent downstream connections.
    pub max_connections: usize,
    /// WebSocket idle timeout; `None` = off.
    pub websocket_idle_timeout: Option<Duration>,
    /// Upstream connect timeout.
    pub connect_timeout: Duration,
    /// Pooled upstream idle timeout.
    pub upstream_idle_timeout: Duration,
    /// Minimum request body rate; `None` = off (`body_min_rate = 0`).
    pub body_min_rate: Option<BodyMinRate>,
    /// HTTP/2 abuse limits (SPEC section 4).
    pub h2: H2Limits,
    /// Largest WebSocket message in bytes (SPEC section 5: Close 1009 past it).
    pub websocket_max_message: u64,
}

/// `[limits] h2_*`: HTTP/2 abuse limits of every downstream h2 connection (SPEC section 4,
/// RFC 9113 section 10.5); the header-list limit also applies to upstream h2 connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct H2Limits {
    /// SETTINGS_MAX_CONCURRENT_STREAMS advertised to clients.
    pub max_concurrent_streams: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE in bytes (header blocks and trailers, both directions).
    pub max_header_list: u32,
    /// Stream resets per second a connection may cause (received, or provoked from the
    /// gateway); bursts of the same size are allowed.
    pub max_resets_per_second: NonZeroU32,
}

/// Default `h2_max_concurrent_streams` (SPEC section 4; RFC 9113 section 6.5.2 recommends at
/// least 100).
pub const DEFAULT_H2_MAX_CONCURRENT_STREAMS: u32 = 100;
/// Default `h2_max_header_list`: 64 KiB (SPEC section 4), above the 32 KiB header block limit
/// so that the gateway's own `431` answers first.
pub const DEFAULT_H2_MAX_HEADER_LIST: u32 = 64 * 1024;
/// Default `h2_max_resets_per_second` (SPEC section 4).
pub const DEFAULT_H2_MAX_RESETS_PER_SECOND: u32 = 200;
/// Default `websocket_max_message`: 16 MiB (SPEC section 5).
pub const DEFAULT_WEBSOCKET_MAX_MESSAGE: u64 = 16 << 20;

/// `limits.body_min_rate` / `limits.body_rate_window`: a request body must bring at least
/// `bytes_per_sec` averaged over each `window` of time the gateway spends waiting for the client
/// (time the node spends not reading does not count); the first window is grace (CASE-22).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyMinRate {
    /// Bytes per second, at least 1.
    pub bytes_per_sec: u64,
    /// Averaging window, more than zero.
    pub window: Duration,
}

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

/// Upstream protocol of a cluster.
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
    /// The config spelling (`protocol` key, SPEC section 3): `http1`, `h2c`, `h2`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Http1 => "http1",
            Protocol::H2c => "h2c",
            Protocol::H2 => "h2",
        }
    }

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

impl Picker {
    /// The config spelling (`lb` key, SPEC section 3): `round_robin`, `random`, `weighted`,
    /// `least_request`.
    pub fn as_str(self) -> &'static str {
        match self {
            Picker::RoundRobin => "round_robin",
            Picker::Random => "random",
            Picker::Weighted => "weighted",
            Picker::LeastRequest => "least_request",
        }
    }
}

/// One cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Name.
    pub name: String,
    /// Upstream protocol.
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

/// WebSocket behaviour when the node goes (SPEC section 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsMode {
    /// Live re-dial.
    Hop,
    /// Close 1012 with a reconnect hint.
    Hint,
    /// Relay the node's close, 1011 if none.
    Close,
}

/// What happens when no node is selectable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnAllDown {
    /// Answer with the route's fallback.
    Fallback,
    /// Send to every node anyway.
    FailOpen,
}

/// A route's fallback answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    /// Status.
    pub status: http::StatusCode,
    /// Content type.
    pub content_type: String,
    /// Body.
    pub body: String,
}

/// Route predicates; all given ones must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteMatch {
    /// Path prefix.
    pub path_prefix: Option<String>,
    /// Exact path.
    pub path: Option<String>,
    /// Host (lower-case, no port).
    pub host: Option<String>,
    /// Methods.
    pub methods: Vec<http::Method>,
    /// Header name -> exact value.
    pub headers: Vec<(http::HeaderName, String)>,
}

/// `no_match` of a canary block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoMatch {
    /// Serve from all candidates and log a WARN.
    FallbackAll,
    /// 503.
    Reject,
}

/// Where a split reads its hash key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitKey {
    /// A request header.
    Header(http::HeaderName),
    /// A cookie.
    Cookie(String),
    /// A query parameter.
    Query(String),
}

/// One hash-bucket split.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// Key source.
    pub by: SplitKey,
    /// Percent of the hash space (0-100).
    pub percent: f64,
    /// Version for that bucket.
    pub version: String,
}

/// `[routes.canary]`.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryConfig {
    /// Version header.
    pub version_header: http::HeaderName,
    /// Version query parameter.
    pub version_query: String,
    /// Metadata key (compared case-insensitively).
    pub metadata_key: String,
    /// No-match behaviour.
    pub no_match: NoMatch,
    /// Splits.
    pub split: Vec<Split>,
}

/// `[routes.warmup]`.
#[derive(Debug, Clone, PartialEq)]
pub struct WarmupConfig {
    /// Starting percent (0-100).
    pub initial_percent: f64,
    /// Ramp length.
    pub duration: Duration,
    /// Error rate (0-1) that triggers rollback.
    pub max_error_rate: f64,
}

/// One route.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteConfig {
    /// Id.
    pub id: String,
    /// Predicates.
    pub matcher: RouteMatch,
    /// Target cluster.
    pub cluster: String,
    /// Prefix removed before forwarding.
    pub strip_prefix: Option<String>,
    /// Time to the response head.
    pub timeout: Duration,
    /// Cap on a client's `grpc-timeout` (SPEC section 5); `None` = the client's alone.
    pub grpc_max_timeout: Option<Duration>,
    /// Retries on other nodes.
    pub retries: u32,
    /// WebSocket mode.
    pub websocket: WsMode,
    /// No-node behaviour.
    pub on_all_down: OnAllDown,
    /// Fallback answer.
    pub fallback: Fallback,
    /// Body limit in bytes.
    pub max_body: Option<u64>,
    /// Canary block.
    pub canary: Option<CanaryConfig>,
    /// Warm-up block.
    pub warmup: Option<WarmupConfig>,
}

/// Parses and validates TOML `text`; `file` names it in errors.
///
/// # Errors
/// [`ConfigError`] with every syntax, type and semantic problem found, each with key, line and column.
pub fn load_str(text: &str, file: &str) -> Result<Config, ConfigError> {
    validate::load_str(text, file)
}

/// Reads and validates the file at `path`.
///
/// # Errors
/// [`ConfigError`] if it cannot be read (key `-`) or is invalid.
pub fn load_path(path: &Path) -> Result<Config, ConfigError> {
    let name = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => load_str(&text, &name),
        Err(e) => Err(ConfigError {
            file: name,
            issues: vec![ConfigIssue {
                key: "-".into(),
                line: 1,
                column: 1,
                message: format!("cannot read file: {e}"),
            }],
        }),
    }
}

impl Config {
    /// The Go-compatible set-up used when no file is given (SPEC section 2): one cluster `default`
    /// with `node-1 = localhost:8081` and `node-2 = localhost:8082`, one catch-all route `default`.
    pub fn go_defaults() -> Config {
        let text = r#"
[[clusters]]
name = "default"
  [[clusters.nodes]]
  id = "node-1"
  addr = "localhost:8081"
  [[clusters.nodes]]
  id = "node-2"
  addr = "localhost:8082"

[[routes]]
id = "default"
match = { path_prefix = "/" }
cluster = "default"
"#;
        load_str(text, "<defaults>").expect("the embedded defaults are valid")
    }

    /// Replaces the nodes of the first cluster with `nodes` (`ID=HOST:PORT` CLI flags).
    ///
    /// # Errors
    /// A message naming the first flag that is not `ID=HOST:PORT`.
    pub fn override_nodes(&mut self, nodes: &[String]) -> Result<(), String> {
        if nodes.is_empty() {
            return Ok(());
        }
        let mut parsed = Vec::new();
        for n in nodes {
            let Some((id, addr)) = n.split_once('=') else {
                return Err(format!("--node {n}: expected ID=HOST:PORT"));
            };
            if id.is_empty() || !addr.contains(':') {
                return Err(format!("--node {n}: expected ID=HOST:PORT"));
            }
            parsed.push(NodeConfig {
                id: id.to_string(),
                addr: addr.to_string(),
                weight: 100,
                metadata: BTreeMap::new(),
            });
        }
        let Some(first) = self.clusters.first_mut() else {
            return Err("--node: the config has no cluster to put nodes in".into());
        };
        first.nodes = parsed;
        // Nodes given on the command line replace discovery too (a cluster has one or the other).
        first.discovery = None;
        Ok(())
    }
}
