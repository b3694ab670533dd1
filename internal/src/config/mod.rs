//! Configuration: the TOML file of SPEC section 3, CLI overrides, and the Go-compatible defaults.
//!
//! Two layers: [`file`](mod@file) is the serde DTO as written; [`Config`] is the validated, typed form that
//! runtime code sees (durations, socket addresses, enums; never a string compared per request).
//! [`load_str`] parses and validates in one go and reports **every** problem with its dotted key,
//! line and column. This module spawns nothing and never touches the network.

mod cluster;
mod collect;
mod defaults;
pub mod file;
#[cfg(test)]
mod health_tests;
mod route;
#[cfg(test)]
mod server_tests;
pub mod server_tls;
pub mod size;
mod spans;
mod spelling;
#[cfg(test)]
pub(crate) mod test_fixtures;
pub(crate) mod text;
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

pub use cluster::*;
pub use defaults::*;
pub use route::*;
pub use spelling::Spelled;
pub use validate::from_file;

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
    /// `server.shutdown_spread` (SPEC section 5): on SIGTERM each WebSocket gets the reconnect
    /// hint at a random point of this period, before the `shutdown_timeout` wait; `None` (`"0s"`)
    /// closes them with 1001 at once.
    pub shutdown_spread: Option<Duration>,
    /// How long the new process of an upgrade has to be ready before it is stopped and the
    /// upgrade rolled back (SPEC section 13).
    pub upgrade_timeout: Duration,
    /// The Unix socket the running gateway listens on for `hopping-gateway --upgrade-from`
    /// (SPEC section 13); `None` = only `SIGUSR2` and `POST /admin/upgrade`.
    pub upgrade_socket: Option<std::path::PathBuf>,
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
    /// Connect timeout to a node.
    pub connect_timeout: Duration,
    /// Idle timeout of pooled node connections.
    pub upstream_idle_timeout: Duration,
    /// Minimum request body rate; `None` = off (`body_min_rate = 0`).
    pub body_min_rate: Option<BodyMinRate>,
    /// HTTP/2 abuse limits (SPEC section 4).
    pub h2: H2Limits,
    /// Largest WebSocket message in bytes (SPEC section 5: Close 1009 past it).
    pub websocket_max_message: u64,
}

/// `[limits] h2_*`: HTTP/2 abuse limits of every downstream h2 connection (SPEC section 4,
/// RFC 9113 section 10.5); the header-list limit also applies to h2 connections to nodes.
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
        let text = [
            text::cluster_text(
                "default",
                "",
                &[("node-1", "localhost:8081"), ("node-2", "localhost:8082")],
            ),
            text::catch_all_route_text("default", "default"),
        ]
        .join("\n");
        load_str(&text, "<defaults>").expect("the embedded defaults are valid")
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
