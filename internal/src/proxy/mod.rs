//! The proxy handler: the per-request entry point of the data plane (the Go original's
//! `internal/handler/proxy.go`).
//!
//! For each request: load the route table once, match a route, validate or issue the conn id, ask
//! the hopper for a node, rewrite headers, and forward with the SPEC section 4 retry rules
//! ([`forward`]). Long-lived upgrades go to [`websocket`]. Every failure becomes a response in
//! [`respond`](mod@respond) and nowhere else. Streams both ways; bodies are never buffered whole.

pub mod access;
pub mod body;
pub mod client_body;
pub mod expect;
pub mod forward;
pub mod framing;
pub mod grpc;
pub mod grpc_call;
pub mod guard;
pub mod h2;
pub mod h2_frames;
pub mod h2_watch;
pub mod head;
pub mod headers;
pub mod respond;
pub(crate) mod retry;
pub mod upstream;
pub mod websocket;

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{header, HeaderName, HeaderValue, Request, Response};
use http_body_util::combinators::UnsyncBoxBody;
use hyper::body::Incoming;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::{Limits, NoMatch, OnAllDown};
use crate::drain;
use crate::hopper::{ConnIds, Hopper};
use crate::metrics::{ClusterLabel, Metrics, RequestLabels};
use crate::registry::{Node, NodeRuntime};
use crate::routing::reload::Routing;
use crate::routing::table::RequestHead;
use crate::routing::{path, Route, RouteTable};
use crate::selection::{self, version, Criteria};

use respond::{respond, ProxyError};

/// Boxed error for bodies.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body type on both sides of the proxy.
pub type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Per-downstream-connection state shared by its requests.
#[derive(Debug)]
pub struct DownstreamConn {
    /// Client address.
    pub peer: SocketAddr,
    /// The client as `X-Forwarded-For` names it, formatted once.
    pub forwarded_peer: headers::Peer,
    /// For h2 connections without an affinity header: the connection's own conn id (SPEC section 5).
    pub conn_id: OnceLock<String>,
    /// The node this h2 connection is bound to; the server sends GOAWAY when it drains.
    pub bound: watch::Sender<Option<Arc<NodeRuntime>>>,
    /// Request framing as read off the socket (CASE-13); fed by [`framing::FramingWatch`].
    pub framing: Arc<framing::FramingLog>,
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
            framing: Arc::new(framing::FramingLog::new()),
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
    /// Affinity header.
    pub affinity_header: HeaderName,
    /// Trusted proxy ranges.
    pub trusted: Option<Vec<ipnet::IpNet>>,
    /// Limits.
    pub limits: Limits,
    /// Access log on/off.
    pub access_log: bool,
    /// The gateway's zone.
    pub zone: Option<String>,
}

/// The data-plane handler.
#[derive(Debug)]
pub struct Proxy {
    /// Route table owner.
    pub routing: Arc<Routing>,
    /// Binding owner.
    pub hopper: Arc<Hopper>,
    /// Conn id rules.
    pub ids: ConnIds,
    /// Upstream client.
    pub upstream: Arc<upstream::Upstream>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Settings.
    pub settings: ProxySettings,
    /// Shutdown signal for long-lived connections.
    pub shutdown: drain::Watch,
}

/// Access-log fields gathered along the way (SPEC section 8).
#[derive(Debug, Clone, Default)]
pub struct LogCtx {
    /// Method.
    pub method: http::Method,
    /// Target as received (the log shows its path); a cheap reference-counted copy.
    pub uri: http::Uri,
    /// Route id or `-`.
    pub route: Option<Arc<str>>,
    /// Node id or `-`.
    pub node: Option<Arc<str>>,
    /// Conn id.
    pub conn_id: Option<String>,
    /// Hops during this request.
    pub hops: u32,
    /// The gRPC status the response ended with, when it is gRPC (CASE-07).
    pub grpc_status: grpc::GrpcStatus,
    /// The route table snapshot that served the request: [`Proxy::finish`] counts the outcome on
    /// its warm-ups (SPEC section 6 automatic rollback).
    pub table: Option<Arc<RouteTable>>,
    /// Client address.
    pub client: Option<std::net::SocketAddr>,
    /// `http/1.0`, `http/1.1`, `h2`, `ws` or `grpc` ([`access::protocol`]).
    pub protocol: &'static str,
    /// Trace id of a valid W3C `traceparent` (the header itself is forwarded untouched).
    pub trace_id: Option<String>,
    /// Set when the gateway made the answer itself: [`ProxyError::reason`].
    pub reason: Option<&'static str>,
    /// The verified client certificate's subject (mTLS, SPEC section 10).
    pub client_subject: Option<Arc<str>>,
}

impl Proxy {
    /// Handles one downstream request; never fails (errors become responses).
    pub async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
        dc: Arc<DownstreamConn>,
    ) -> Result<Response<ProxyBody>, std::convert::Infallible> {
        let start = Instant::now();
        let grpc_req = grpc::is_grpc(req.headers());
        let mut log = LogCtx {
            method: req.method().clone(),
            uri: req.uri().clone(),
            client: Some(dc.peer),
            protocol: access::protocol(&req, grpc_req),
            trace_id: access::trace_id(req.headers()),
            client_subject: dc.tls.as_ref().and_then(|t| t.client_subject.clone()),
            ..LogCtx::default()
        };
        // An HTTP/1.1 upgrade that is not accepted ends the connection: the framing watch stopped
        // following it at the upgrade head (CASE-13).
        let h1_upgrade =
            req.version() <= http::Version::HTTP_11 && req.headers().contains_key(header::UPGRADE);
        let mut resp = match self.proxy(req, &dc, start, &mut log).await {
            Ok(resp) => resp,
            Err(err) => {
                let (mut resp, close) = respond(&err);
                if close {
                    resp.headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                // Metrics and the access log keep the HTTP status of the failure.
                let status = resp.status().as_u16();
                log.reason = Some(err.reason());
                if grpc_req {
                    // gRPC clients read grpc-status, not HTTP bodies (STYLE section 4).
                    resp = grpc::error_response(resp, &err.to_string(), &mut log.grpc_status);
                }
                if err.is_node_fault() {
                    tracing::warn!(error = %err, route = log.route.as_deref().unwrap_or("-"), "request failed");
                }
                // The gateway's own answers are whole in memory: their length is known.
                let bytes_out = hyper::body::Body::size_hint(resp.body())
                    .exact()
                    .unwrap_or(0);
                self.finish(&log, status, start, 0, bytes_out);
                resp
            }
        };
        if h1_upgrade && resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        Ok(resp)
    }

    /// Records metrics and the access log line for a finished request.
    pub fn finish(&self, log: &LogCtx, status: u16, start: Instant, bytes_in: u64, bytes_out: u64) {
        if let Some(table) = &log.table {
            table.record_outcome(
                log.route.as_deref(),
                log.node.as_deref(),
                status,
                Instant::now(),
            );
        }
        let dash = dash();
        self.metrics
            .requests
            .get_or_create(&RequestLabels {
                route: log.route.clone().unwrap_or_else(|| dash.clone()),
                node: log.node.clone().unwrap_or(dash),
                code: status,
            })
            .inc();
        if self.settings.access_log {
            let duration_ms = start.elapsed().as_secs_f64() * 1000.0;
            let upstream = log
                .node
                .as_deref()
                .zip(log.table.as_ref())
                .and_then(|(id, t)| t.node(id).map(|n| n.addr.clone()));
            // A node's answer has an upstream status; the gateway's own answers a reason instead.
            let upstream_status = match log.reason {
                None if upstream.is_some() => Some(status),
                _ => None,
            };
            tracing::info!(
                target: "access",
                client = %log.client.map_or_else(|| "-".to_string(), |a| a.to_string()),
                protocol = log.protocol,
                method = %log.method,
                path = %log.uri.path(),
                status,
                duration_ms = format_args!("{duration_ms:.3}"),
                route = log.route.as_deref().unwrap_or("-"),
                node = log.node.as_deref().unwrap_or("-"),
                conn_id = log.conn_id.as_deref().unwrap_or("-"),
                bytes_in,
                bytes_out,
                hops = log.hops,
                grpc_status = log.grpc_status.get(),
                upstream = upstream.as_deref().unwrap_or("-"),
                upstream_status = %upstream_status.map_or_else(|| "-".to_string(), |s| s.to_string()),
                reason = log.reason.unwrap_or("-"),
                trace_id = log.trace_id.as_deref(),
                client_subject = log.client_subject.as_deref(),
            );
        }
    }

    async fn proxy(
        self: &Arc<Self>,
        mut req: Request<Incoming>,
        dc: &Arc<DownstreamConn>,
        start: Instant,
        log: &mut LogCtx,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        if req.version() <= http::Version::HTTP_11 {
            dc.framing.check_next()?;
        }
        guard::check_head(&req, &self.settings.limits)?;
        let table = self.routing.table();
        let host = request_host(&req)?;
        let norm = path::normalize(req.uri().path());
        let head = RequestHead {
            method: req.method(),
            host: host.as_deref().map(strip_port),
            path: &norm,
            headers: req.headers(),
        };
        let roll = rand::random::<f64>() * 100.0;
        let Some(route) = table.match_route(&head, start, roll).cloned() else {
            return Err(ProxyError::NoRoute {
                method: req.method().to_string(),
                path: req.uri().path().to_string(),
            });
        };
        // A node that decodes encoded slashes or merges `//` must not resolve a path that the
        // gateway would have routed elsewhere (README "Routing").
        if let Some(alt) = path::node_reading(req.uri().path()) {
            let alt_head = RequestHead { path: &alt, ..head };
            let same = table
                .match_route(&alt_head, start, roll)
                .is_some_and(|r| r.id == route.id);
            if !same {
                return Err(ProxyError::BadRequest(
                    "path with encoded slashes or empty segments that a node could resolve to another route",
                ));
            }
        }
        log.route = Some(route.id.clone());
        log.table = Some(table.clone());
        // RFC 8441: a WebSocket over HTTP/2 is an extended CONNECT with `:protocol = websocket`.
        let is_ws =
            websocket::is_extended_connect(&req) || headers::is_websocket_upgrade(req.headers());
        let is_h2 = req.version() == http::Version::HTTP_2;
        // Conn id: the client's (validated), or issued for upgrades and h2 connections.
        let (conn_id, issued) = match req.headers().get(&self.settings.affinity_header) {
            Some(v) => {
                let id = self
                    .ids
                    .parse(v.as_bytes())
                    .map_err(|source| ProxyError::BadConnId {
                        header: self.settings.affinity_header.to_string(),
                        source,
                    })?;
                (Some(id.to_string()), false)
            }
            // Each WebSocket is its own affinity key, also over HTTP/2 (RFC 8441).
            None if is_ws => (Some(self.ids.issue()), true),
            None if is_h2 => (
                Some(dc.conn_id.get_or_init(|| self.ids.issue()).clone()),
                true,
            ),
            None => (None, false),
        };
        log.conn_id = conn_id.clone();
        if let Some(limit) = route.config.max_body {
            let declared = req
                .headers()
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if declared.is_some_and(|n| n > limit) {
                return Err(ProxyError::BodyTooLarge { limit });
            }
        }
        let wanted = route
            .config
            .canary
            .as_ref()
            .map(|c| version::wanted(c, req.headers(), req.uri().query()))
            .unwrap_or_default();
        let metadata_key = route
            .config
            .canary
            .as_ref()
            .map_or("version", |c| c.metadata_key.as_str());
        let criteria = Criteria {
            version: wanted.version.as_deref(),
            metadata_key,
            avoid_versions: &wanted.avoid,
            exclude: &[],
            zone: self.settings.zone.as_deref(),
            key: conn_id.as_deref().or(wanted.split_key.as_deref()),
        };
        let placement = self
            .hopper
            .place(conn_id.as_deref(), &table, &route.cluster, &criteria, start)
            .await;
        if let Some(miss) = &placement.version_miss {
            let requested = wanted.version.as_deref().unwrap_or_default();
            if route
                .config
                .canary
                .as_ref()
                .is_some_and(|c| c.no_match == NoMatch::Reject)
            {
                return Err(ProxyError::VersionRejected {
                    cluster: route.cluster.name.to_string(),
                    version: requested.to_string(),
                });
            }
            self.metrics
                .canary_fallback
                .get_or_create(&ClusterLabel {
                    cluster: route.cluster.name.clone(),
                })
                .inc();
            tracing::warn!(cluster = %route.cluster.name, requested_version = requested, candidates = miss.candidates, matched = miss.matched, "no node matches the requested version; using all candidates");
        }
        if placement.hopped_from.is_some() {
            log.hops += 1;
        }
        let node = match placement.node {
            Some(n) => n,
            None => self.all_down(&table, &route)?,
        };
        if is_h2 && !is_ws && req.headers().get(&self.settings.affinity_header).is_none() {
            dc.bound.send_if_modified(|b| {
                let changed = b.as_ref().is_none_or(|r| r.id() != &node.id);
                *b = Some(node.runtime.clone());
                changed
            });
        }
        let client_id = req.headers().contains_key(&self.settings.affinity_header);
        let host_hdr = host_value(&req, host.as_deref());
        let path_and_query = upstream_path(&req, &norm, route.config.strip_prefix.as_deref());
        // Both borrow the request, whose header map is taken next.
        drop(host);
        drop(norm);
        // WebSockets keep the client's handshake headers for re-dials; a plain request hands its
        // header map over to the upstream request instead of copying it.
        let mut up_headers = if is_ws {
            req.headers().clone()
        } else {
            std::mem::take(req.headers_mut())
        };
        headers::strip_hop_by_hop(&mut up_headers);
        headers::set_forwarded(
            &mut up_headers,
            &dc.forwarded_peer,
            host_hdr.as_ref(),
            self.settings.trusted.as_deref(),
        );
        if dc.tls.is_some() {
            up_headers.insert(
                HeaderName::from_static("x-forwarded-proto"),
                HeaderValue::from_static("https"),
            );
        }
        // An id the gateway issued goes to the node; the client's own header stays as sent, or
        // stays away when the client nominated it in `Connection` (RFC 9110 section 7.6.1).
        if let Some(id) = conn_id.as_ref().filter(|_| !client_id) {
            if let Ok(v) = HeaderValue::from_str(id) {
                up_headers.insert(self.settings.affinity_header.clone(), v);
            }
        }
        if is_h2 {
            if let Some(h) = host_hdr {
                up_headers.insert(header::HOST, h);
            }
        }
        let ctx = forward::Attempt {
            route: route.clone(),
            table: table.clone(),
            conn_id: conn_id.clone(),
            issued,
            wanted,
            start,
            hop_seen: placement.hop_seen,
        };
        if is_ws {
            // The socket may live for days: its log context must not keep hyper's read buffer
            // (which the parsed target shares) alive, so the target is copied.
            log.uri = log.uri.to_string().parse().unwrap_or_default();
            let upgrade = hyper::upgrade::on(&mut req);
            // A hop counted at placement is served again once the node answers the upgrade.
            let _clock = forward::HopClock::new(self.metrics.clone(), placement.hop_seen);
            return websocket::proxy(
                self.clone(),
                ctx,
                node,
                req,
                up_headers,
                path_and_query.as_str().to_string(),
                upgrade,
                log,
            )
            .await;
        }
        forward::forward(
            self.clone(),
            ctx,
            node,
            req,
            up_headers,
            path_and_query,
            log,
        )
        .await
    }

    /// No selectable node: the route's `on_all_down` (SPEC section 4).
    fn all_down(&self, table: &RouteTable, route: &Route) -> Result<Arc<Node>, ProxyError> {
        let fallback = || ProxyError::NoHealthyNode {
            cluster: route.cluster.name.to_string(),
            fallback: route.config.fallback.clone(),
        };
        match route.config.on_all_down {
            OnAllDown::Fallback => Err(fallback()),
            OnAllDown::FailOpen => {
                let all: Vec<_> = route
                    .cluster
                    .nodes
                    .iter()
                    .filter(|n| !n.runtime.is_draining())
                    .map(|n| selection::Candidate {
                        node: n.clone(),
                        weight: u64::from(n.weight.max(1)),
                    })
                    .collect();
                let _ = table;
                let node = selection::picker::pick(&route.cluster, &all, &mut rand::rng())
                    .ok_or_else(fallback)?;
                self.metrics
                    .fail_open
                    .get_or_create(&ClusterLabel {
                        cluster: route.cluster.name.clone(),
                    })
                    .inc();
                Ok(node)
            }
        }
    }
}

/// The request's host: `Host`, or `:authority` for HTTP/2. Both present and different is 400 (CASE-12).
fn request_host<B>(req: &Request<B>) -> Result<Option<Cow<'_, str>>, ProxyError> {
    let host_hdr = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok());
    let authority = req.uri().authority().map(|a| a.as_str());
    match (host_hdr, authority) {
        (Some(h), Some(a))
            if req.version() == http::Version::HTTP_2 && !h.eq_ignore_ascii_case(a) =>
        {
            Err(ProxyError::BadRequest(":authority and host disagree"))
        }
        (Some(h), _) => Ok(Some(ascii_lowercase(h))),
        (None, Some(a)) => Ok(Some(ascii_lowercase(a))),
        (None, None) => Ok(None),
    }
}

/// `s` in lower case, borrowed when it already is.
fn ascii_lowercase(s: &str) -> Cow<'_, str> {
    if s.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(s.to_ascii_lowercase())
    } else {
        Cow::Borrowed(s)
    }
}

/// The shared `-` label for requests without a route or node.
fn dash() -> Arc<str> {
    static DASH: OnceLock<Arc<str>> = OnceLock::new();
    DASH.get_or_init(|| Arc::from("-")).clone()
}

fn host_value<B>(req: &Request<B>, host: Option<&str>) -> Option<HeaderValue> {
    req.headers()
        .get(header::HOST)
        .cloned()
        .or_else(|| host.and_then(|h| HeaderValue::from_str(h).ok()))
}

fn strip_port(h: &str) -> &str {
    if h.starts_with('[') {
        return h.split(']').next().map_or(h, |s| &h[..s.len() + 1]);
    }
    h.rsplit_once(':')
        .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        .map_or(h, |(host, _)| host)
}

/// The path and query sent upstream: the client's, with `strip_prefix` removed; the normalised path
/// when normalisation removed dot segments (so the node resolves what was matched). The client's
/// own target is reused without copying when nothing changes.
fn upstream_path<B>(req: &Request<B>, norm: &str, strip: Option<&str>) -> PathAndQuery {
    let raw = req.uri().path();
    let dotted = raw.contains("/.") || path::contains_ignore_ascii_case(raw.as_bytes(), b"%2e");
    let base = if dotted { norm } else { raw };
    let stripped = strip.filter(|s| base.starts_with(*s));
    if !dotted && stripped.is_none() {
        if let Some(pq) = req.uri().path_and_query() {
            return pq.clone();
        }
    }
    let mut p = String::with_capacity(base.len() + 1 + req.uri().query().map_or(0, str::len));
    match stripped {
        Some(s) => {
            let rest = &base[s.len()..];
            if !rest.starts_with('/') {
                p.push('/');
            }
            p.push_str(rest);
        }
        None => p.push_str(base),
    }
    if let Some(q) = req.uri().query() {
        p.push('?');
        p.push_str(q);
    }
    PathAndQuery::from_maybe_shared(Bytes::from(p))
        .unwrap_or_else(|_| PathAndQuery::from_static("/"))
}
