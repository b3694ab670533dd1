//! The validated form of `[[routes]]` (SPEC section 3): matches, WebSocket mode, fallback, canary, warm-up.

use std::time::Duration;

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
