//! The config file as written: a serde DTO mirroring SPEC section 3 key for key.
//!
//! Every table rejects unknown keys. Durations stay strings here so that a bad one is reported by
//! `validate` with its dotted key, line and column; nothing in this module is seen by runtime code.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The whole file (SPEC section 3). Missing tables take their defaults.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FileConfig {
    /// `[server]`.
    pub server: ServerFile,
    /// `[affinity]`.
    pub affinity: AffinityFile,
    /// `[health]`: defaults for every cluster.
    pub health: HealthFile,
    /// `[limits]`: request limits (SPEC section 4).
    pub limits: LimitsFile,
    /// `[[clusters]]`.
    pub clusters: Vec<ClusterFile>,
    /// `[[routes]]`.
    pub routes: Vec<RouteFile>,
}

/// `[server]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerFile {
    /// Data-plane listen address, `host:port`.
    pub listen: Option<String>,
    /// Admin listen address, `host:port`.
    pub admin_listen: Option<String>,
    /// Bearer token for the admin API; empty = none.
    pub admin_token: Option<String>,
    /// This gateway's zone; empty = none.
    pub zone: Option<String>,
    /// CIDRs whose `X-Forwarded-*` headers are kept.
    pub trusted_proxies: Option<Vec<String>>,
    /// Humantime duration.
    pub shutdown_timeout: Option<String>,
    /// Humantime duration over which WebSockets get the reconnect hint on SIGTERM; `"0s"` = off.
    pub shutdown_spread: Option<String>,
    /// Humantime duration: how long the new process of an upgrade has to be ready (SPEC section 13).
    pub upgrade_timeout: Option<String>,
    /// Unix socket path for `--upgrade-from` (SPEC section 13); empty = none.
    pub upgrade_socket: Option<String>,
    /// Access log on or off.
    pub access_log: Option<bool>,
    /// Probe-only listener (`/healthz`, `/readyz`), `host:port`; empty = none.
    pub health_listen: Option<String>,
    /// DNS server `ip:port` for service discovery; absent = the system resolver.
    pub resolver: Option<String>,
    /// `[server.tls]`: the TLS listener (SPEC section 10).
    pub tls: Option<ServerTlsFile>,
}

/// `[server.tls]` as written (SPEC section 3 and 10).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerTlsFile {
    /// TLS listen address, `host:port`.
    pub listen: Option<String>,
    /// ALPN protocols offered, in order.
    pub alpn: Option<Vec<String>>,
    /// `"1.2"` or `"1.3"`.
    pub min_version: Option<String>,
    /// CA file for client certificates; empty = no client certificates asked for.
    pub client_ca: Option<String>,
    /// `[[server.tls.certs]]`, the first being the default.
    pub certs: Vec<TlsCertFile>,
}

/// One `[[server.tls.certs]]` entry as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsCertFile {
    /// PEM chain file, leaf first.
    pub cert: String,
    /// PEM private key file.
    pub key: String,
    /// SNI names served by this certificate (exact or `*.` one-label wildcards).
    pub server_names: Vec<String>,
}

/// `[affinity]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AffinityFile {
    /// Header carrying the conn id.
    pub header: Option<String>,
    /// `"client"` or `"signed"`.
    pub ids: Option<String>,
    /// Env var holding the HMAC key in signed mode.
    pub secret_env: Option<String>,
    /// Env var holding older, still accepted HMAC keys, comma separated.
    pub old_secrets_env: Option<String>,
    /// `"memory"` or `"redis"`.
    pub store: Option<String>,
    /// Sliding TTL, humantime.
    pub ttl: Option<String>,
    /// Memory store bound.
    pub max_entries: Option<u64>,
    /// Redis URL.
    pub redis_url: Option<String>,
    /// Redis key prefix.
    pub key_prefix: Option<String>,
    /// Timeout for one Redis call, humantime.
    pub redis_timeout: Option<String>,
    /// `rediss://`: PEM file of the CA that signs the Redis server's certificate; empty = system roots.
    pub redis_ca: Option<String>,
}

/// `[health]` or a cluster's `health = {..}` override; every key optional so overrides merge.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthFile {
    /// `"http"`, `"tcp"` or `"grpc"`.
    pub kind: Option<String>,
    /// `kind = "grpc"`: the service asked about; `""` = the whole server.
    pub grpc_service: Option<String>,
    /// Probe path for http probes.
    pub path: Option<String>,
    /// Probe interval, humantime.
    pub interval: Option<String>,
    /// Probe timeout, humantime.
    pub timeout: Option<String>,
    /// Inclusive `[low, high]` status range.
    pub expect_status: Option<Vec<u16>>,
    /// Optional JSON body check.
    pub expect_json: Option<ExpectJsonFile>,
    /// Consecutive failures before the degraded weight.
    pub degrade_after: Option<u32>,
    /// Weight percent while degraded.
    pub degraded_percent: Option<u32>,
    /// Consecutive failures before ejection.
    pub eject_after: Option<u32>,
    /// Consecutive successes before recovery starts.
    pub recover_after: Option<u32>,
    /// Slow-start ramp, humantime; `"0s"` = none.
    pub slow_start: Option<String>,
    /// Passive errors in a row that eject at once; 0 = off.
    pub passive_consecutive_errors: Option<u32>,
    /// Most nodes of a cluster (percent) passive ejection may take at once.
    pub max_ejection_percent: Option<u32>,
}

/// `expect_json = { pointer, equals }`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectJsonFile {
    /// RFC 6901 JSON pointer.
    pub pointer: String,
    /// Expected string value at the pointer.
    pub equals: String,
}

/// `[limits]` as written (SPEC section 4 defaults; README "Limits").
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsFile {
    /// Request line bytes.
    pub max_request_line: Option<u64>,
    /// Header block bytes, excluding the request line.
    pub max_header_bytes: Option<u64>,
    /// Header field count.
    pub max_headers: Option<u64>,
    /// Whole request head read timeout, humantime.
    pub header_read_timeout: Option<String>,
    /// Request body idle timeout, humantime.
    pub body_idle_timeout: Option<String>,
    /// Concurrent downstream connections.
    pub max_connections: Option<u64>,
    /// WebSocket idle timeout, humantime; `"0s"` = off.
    pub websocket_idle_timeout: Option<String>,
    /// Connect timeout to a node, humantime.
    pub connect_timeout: Option<String>,
    /// Idle pooled node connections are closed after this, humantime.
    pub upstream_idle_timeout: Option<String>,
    /// Minimum request body rate in bytes/s while the gateway waits for the client; 0 = off.
    pub body_min_rate: Option<u64>,
    /// Window over which `body_min_rate` is averaged (the first window is grace), humantime.
    pub body_rate_window: Option<String>,
    /// SETTINGS_MAX_CONCURRENT_STREAMS advertised to h2 clients.
    pub h2_max_concurrent_streams: Option<u64>,
    /// h2 header list (and trailers) size limit, both directions: `"64KiB"` or a byte count.
    pub h2_max_header_list: Option<super::size::SizeFile>,
    /// Stream resets per second an h2 connection may cause (burst = the same count).
    pub h2_max_resets_per_second: Option<u64>,
    /// Largest WebSocket message: `"16MiB"` or a byte count.
    pub websocket_max_message: Option<super::size::SizeFile>,
}

/// One `[[clusters]]` entry.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterFile {
    /// Cluster name.
    pub name: String,
    /// `"http1"`, `"h2c"` or `"h2"`.
    pub protocol: Option<String>,
    /// TLS to the nodes (SPEC section 10).
    pub tls: Option<TlsFile>,
    /// Per-cluster health overrides.
    pub health: Option<HealthFile>,
    /// Picker name.
    pub lb: Option<String>,
    /// Nodes.
    pub nodes: Vec<NodeFile>,
    /// Nodes from DNS instead of `nodes` (SPEC section 12).
    pub discovery: Option<DiscoveryFile>,
}

/// `discovery = { kind = "dns", name, port, interval, .. }` of a cluster (SPEC section 12).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiscoveryFile {
    /// `"dns"`.
    pub kind: Option<String>,
    /// DNS name whose A/AAAA records are the nodes.
    pub name: String,
    /// Port of every discovered node.
    pub port: Option<u32>,
    /// Re-resolution interval, humantime.
    pub interval: Option<String>,
    /// Configured weight of every discovered node.
    pub weight: Option<u32>,
    /// Metadata of every discovered node.
    pub metadata: BTreeMap<String, String>,
    /// Drain period of a node whose record disappeared, humantime.
    pub drain_period: Option<String>,
}

/// `clusters[].tls = { sni, ca, verify, client_cert, client_key }` (empty strings = not set).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsFile {
    /// Server name sent and verified; empty = the host part of each node's `addr`.
    pub sni: Option<String>,
    /// PEM CA file; empty = the system roots.
    pub ca: Option<String>,
    /// Verify the node certificate (default true).
    pub verify: Option<bool>,
    /// PEM client certificate chain for mTLS.
    pub client_cert: Option<String>,
    /// PEM private key of `client_cert`.
    pub client_key: Option<String>,
}

/// One `[[clusters.nodes]]` entry.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeFile {
    /// Node id, unique across clusters.
    pub id: String,
    /// `host:port`.
    pub addr: String,
    /// Configured weight.
    pub weight: Option<u32>,
    /// Free-form metadata (`version`, `zone`, ...).
    pub metadata: BTreeMap<String, String>,
}

/// One `[[routes]]` entry.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouteFile {
    /// Route id.
    pub id: String,
    /// Predicates.
    #[serde(rename = "match")]
    pub match_: MatchFile,
    /// Target cluster name.
    pub cluster: String,
    /// Prefix removed from the path before forwarding.
    pub strip_prefix: Option<String>,
    /// Request timeout, humantime.
    pub timeout: Option<String>,
    /// Cap on a client's `grpc-timeout`, humantime; `"0s"` = no cap.
    pub grpc_max_timeout: Option<String>,
    /// Retries for idempotent requests.
    pub retries: Option<u32>,
    /// `"hop"`, `"hint"` or `"close"`.
    pub websocket: Option<String>,
    /// `"fallback"` or `"fail_open"`.
    pub on_all_down: Option<String>,
    /// Fallback answer.
    pub fallback: Option<FallbackFile>,
    /// Max request body bytes.
    pub max_body: Option<u64>,
    /// Canary settings.
    pub canary: Option<CanaryFile>,
    /// Warm-up settings.
    pub warmup: Option<WarmupFile>,
}

/// `match = {..}`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MatchFile {
    /// Path prefix, segment-aware is not implied: plain string prefix.
    pub path_prefix: Option<String>,
    /// Exact path.
    pub path: Option<String>,
    /// Host, exact, case-insensitive; empty = any.
    pub host: Option<String>,
    /// Methods; empty = any.
    pub methods: Vec<String>,
    /// Header name -> exact value.
    pub headers: BTreeMap<String, String>,
}

/// `fallback = {..}`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FallbackFile {
    /// HTTP status.
    pub status: Option<u16>,
    /// Content type.
    pub content_type: Option<String>,
    /// Body.
    pub body: Option<String>,
}

/// `[routes.canary]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CanaryFile {
    /// Header naming the wanted version.
    pub version_header: Option<String>,
    /// Query parameter naming the wanted version.
    pub version_query: Option<String>,
    /// Node metadata key holding a node's version.
    pub metadata_key: Option<String>,
    /// `"fallback_all"` or `"reject"`.
    pub no_match: Option<String>,
    /// Hash-bucket splits.
    pub split: Vec<SplitFile>,
}

/// One `split = [{..}]` entry.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SplitFile {
    /// `header:NAME`, `cookie:NAME` or `query:NAME`.
    pub by: String,
    /// Percent of the hash space, 0-100.
    pub percent: f64,
    /// Version those requests get.
    pub version: String,
}

/// `[routes.warmup]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WarmupFile {
    /// Percent of traffic at the start.
    pub initial_percent: Option<f64>,
    /// Ramp duration, humantime.
    pub duration: Option<String>,
    /// Error rate (0-1) above which the table rolls back.
    pub max_error_rate: Option<f64>,
}
