//! The proxy's shared types: the data-plane handler's state ([`Proxy`], [`ProxySettings`]) and a
//! downstream connection's ([`DownstreamConn`]). A file of its own so the phases and both sides
//! import them from here, not from the driver in `mod.rs`; the body type is
//! [`super::body::ProxyBody`].

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use http::HeaderName;
use tokio::sync::watch;

use super::headers;
use super::upstream::client::NodeClient;
use crate::config::Limits;
use crate::drain;
use crate::hopper::{ConnIds, Hopper};
use crate::metrics::Metrics;
use crate::registry::NodeRuntime;
use crate::routing::reload::Routing;

/// Per-downstream-connection state shared by its requests.
#[derive(Debug)]
pub struct DownstreamConn {
    /// The client's address (the TCP peer).
    pub peer: SocketAddr,
    /// The client as `X-Forwarded-For` names it, formatted once.
    pub forwarded_peer: headers::Peer,
    /// For h2 connections without an affinity header: the connection's own conn id (SPEC section 5).
    pub conn_id: OnceLock<crate::hopper::ConnId>,
    /// The node this h2 connection is bound to; the server sends GOAWAY when it drains.
    pub bound: watch::Sender<Option<Arc<NodeRuntime>>>,
    /// What the TLS handshake settled; `None` on the cleartext listener (SPEC section 10).
    pub tls: Option<crate::tls::server::TlsInfo>,
}

impl DownstreamConn {
    /// State for a new connection from `peer`.
    pub fn new(peer: SocketAddr) -> Self {
        DownstreamConn {
            peer,
            forwarded_peer: headers::Peer::new(peer),
            conn_id: OnceLock::new(),
            bound: watch::channel(None).0,
            tls: None,
        }
    }

    /// The same connection, marked as having come over TLS with what its handshake settled.
    pub fn with_tls(mut self, tls: Option<crate::tls::server::TlsInfo>) -> Self {
        self.tls = tls;
        self
    }
}

/// Settings the proxy reads per request (from the startup config; reloads change routes only).
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// The header that carries the conn id (SPEC section 4 `[affinity] header`, default `X-Conn-Id`).
    pub affinity_header: HeaderName,
    /// Peers whose `X-Forwarded-For` is extended rather than replaced (SPEC section 4
    /// `trusted_proxies`); `None` trusts nobody.
    pub trusted: Option<Vec<ipnet::IpNet>>,
    /// Request limits: head size, body rate and idle time, WebSocket message size (SPEC section 4 `[limits]`).
    pub limits: Limits,
    /// True if every finished request writes an access log line (SPEC section 8).
    pub access_log: bool,
    /// The gateway's zone, preferred by zone-aware selection (SPEC section 7); `None`: no preference.
    pub zone: Option<Arc<str>>,
    /// `server.shutdown_spread` (SPEC section 5): on shutdown each WebSocket gets the reconnect
    /// hint at a random point of this period; `None`: Close 1001 at once.
    pub shutdown_spread: Option<std::time::Duration>,
}

/// The data-plane handler: one per data-plane worker (`--workers`), shared by the worker's
/// connection tasks; the workers' handlers share everything but [`Proxy::upstream`].
#[derive(Debug)]
pub struct Proxy {
    /// Owns the live route table (loaded once per request; swapped whole on reload).
    pub routing: Arc<Routing>,
    /// Owns the conn id bindings and the hop decision.
    pub hopper: Arc<Hopper>,
    /// Validates client conn ids and issues new ones (SPEC section 4 `[affinity] ids`).
    pub ids: ConnIds,
    /// The client to nodes: HTTP/1.1 pools and one multiplexed h2 connection per node, the
    /// worker's own (its pooled connections are driven by the worker's runtime).
    pub upstream: Arc<NodeClient>,
    /// The Prometheus families (SPEC section 9).
    pub metrics: Arc<Metrics>,
    /// The worker's recently used `gateway_requests_total` counters (its own, like `upstream`).
    pub(crate) counters: crate::metrics::RequestCounters,
    /// Per-request settings from the startup config.
    pub settings: ProxySettings,
    /// Shutdown signal for long-lived connections.
    pub shutdown: drain::Watch,
    /// Where idle HTTP/1.1 connections go in an upgrade (SPEC section 13); shared by the workers.
    pub mover: Arc<crate::proxy::moving::Mover>,
}
