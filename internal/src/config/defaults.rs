//! Default values of every config key (SPEC section 3; the Go original where SPEC says so).

use std::time::Duration;

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
/// No spread: SIGTERM closes WebSockets with 1001 at once (SPEC section 5), as a gateway that is
/// upgraded or restarted in place wants; a replica that leaves for good opts in to the spread.
pub const DEFAULT_SHUTDOWN_SPREAD: Duration = Duration::ZERO;
/// The longest `shutdown_spread`: longer than any orchestrator's termination grace period in
/// use, so a longer value is a typo (`"30d"` for `"30s"`) that would keep the gateway up for days.
pub const MAX_SHUTDOWN_SPREAD: Duration = Duration::from_secs(24 * 3600);
/// Time the new process of an upgrade has to be ready (SPEC section 13): a start-up reads the
/// config, loads certificates and connects to Redis (each bounded by seconds), so 30 s leaves a
/// loaded machine room, while a binary that hangs is still rolled back within one systemd
/// default start timeout (90 s).
pub const DEFAULT_UPGRADE_TIMEOUT: Duration = Duration::from_secs(30);
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
/// Idle pooled node connections are closed before typical node keep-alive limits (5 s in many servers).
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
