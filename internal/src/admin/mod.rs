//! The admin listener (SPEC sections 8 and 11): nodes, drain/undrain, routes, reload/rollback,
//! bindings, metrics, liveness and readiness, the status page (`GET /`, [`status`]) and its event
//! feed (`GET /admin/events`, [`sse`]). Loopback by default; a bearer token when `admin_token` is
//! set (compared in constant time) for every call but `GET /healthz`, `GET /readyz` and the page
//! itself (which carries no node data and asks for the token). Never served on the data port; the
//! optional `health_listen` listener serves only the two probes ([`Admin::handle_health`]).
//! Drains go through [`drains::Drains`], which shares them with the other replicas on one Redis.

pub mod drains;
pub mod sse;
pub mod status;

/// The event hub's module, also reachable here (publishers: `metrics.events.publish(..)`).
pub use crate::events;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{json, Value};
use subtle::ConstantTimeEq;
use tokio::time::Instant;

use crate::hopper::Hopper;
use crate::metrics::{Metrics, NodeLabels, NodeStateLabels};
use crate::registry::weight;
use crate::registry::NodeState;
use crate::routing::discovered::NodeSource;
use crate::routing::reload::{ReloadError, Routing};
use crate::routing::RouteTable;

/// Default drain period when `?period=` is absent (SPEC section 5 example).
pub const DEFAULT_DRAIN_PERIOD: Duration = Duration::from_secs(30);

/// Admin API state.
#[derive(Debug)]
pub struct Admin {
    /// Route table owner.
    pub routing: Arc<Routing>,
    /// Binding owner.
    pub hopper: Arc<Hopper>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Bearer token.
    pub token: Option<String>,
    /// Readiness (SPEC section 11).
    pub readiness: Arc<status::Readiness>,
    /// The TLS listener's certificates, when `[server.tls]` is set: reloaded with the routes.
    pub tls: Option<Arc<crate::tls::server::TlsCerts>>,
    /// Operator drains, shared through Redis.
    pub drains: Arc<drains::Drains>,
}

/// The status page: one self-contained document (style and script inline, nothing fetched from
/// elsewhere) that reads `GET /admin/status` and `GET /admin/events` with the token it asks for.
pub const STATUS_PAGE: &str = include_str!("page.html");

/// Body of every admin answer: a full buffer, or the event stream.
pub type AdminBody = UnsyncBoxBody<Bytes, Infallible>;

fn full(b: impl Into<Bytes>) -> AdminBody {
    Full::new(b.into()).boxed_unsync()
}

fn json_resp(status: StatusCode, v: &Value) -> Response<AdminBody> {
    let mut r = Response::new(full(v.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn error(status: StatusCode, msg: &str) -> Response<AdminBody> {
    json_resp(status, &json!({"code": -1, "message": msg}))
}

impl Admin {
    /// Serves one admin request.
    pub async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<AdminBody>, Infallible> {
        // Liveness and readiness stay open: orchestrator probes carry no token (as Envoy's /ready).
        // So does the page: a browser cannot send a token when navigating (SPEC section 11).
        let open =
            req.method() == Method::GET && matches!(req.uri().path(), "/healthz" | "/readyz" | "/");
        if let Some(token) = self.token.as_ref().filter(|_| !open) {
            let given = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or("");
            if !bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
                let mut r = error(StatusCode::UNAUTHORIZED, "missing or wrong bearer token");
                r.headers_mut()
                    .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                return Ok(r);
            }
        }
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or("").to_string();
        let accept = req
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        // Drain the request body (bounded) so keep-alive works; admin calls carry no meaningful body.
        let _ = http_body_util::Limited::new(req.into_body(), 64 * 1024)
            .collect()
            .await;
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let resp = match (&method, segs.as_slice()) {
            (&Method::GET, ["healthz"] | ["readyz"]) => self.probe_resp(segs[0]),
            (&Method::GET, [""]) => {
                let mut r = Response::new(full(STATUS_PAGE));
                let h = r.headers_mut();
                h.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/html; charset=utf-8"),
                );
                h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                r
            }
            (&Method::GET, ["admin", "status"]) => {
                let table = self.routing.table();
                let ready = self.readiness.check(&table).is_ok();
                json_resp(
                    StatusCode::OK,
                    &status::status_json(&table, &self.hopper, &self.metrics, ready),
                )
            }
            (&Method::GET, ["admin", "events"]) => {
                let mut r = Response::new(sse::subscribe(&self.metrics.events).boxed_unsync());
                let h = r.headers_mut();
                h.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/event-stream"),
                );
                h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                r
            }
            (&Method::GET, ["metrics"]) => {
                self.refresh_node_metrics(&self.routing.table());
                if let Some(t) = &self.tls {
                    t.refresh_expiry();
                }
                // SPEC section 8: 0.0.4 text unless OpenMetrics is asked for.
                use crate::metrics::format::{self, Format};
                let fmt = format::negotiate(accept.as_deref());
                let mut r = Response::new(full(self.metrics.encode_as(fmt)));
                let ct = match fmt {
                    Format::Prometheus => format::PROMETHEUS_TEXT,
                    Format::OpenMetrics => format::OPENMETRICS_TEXT,
                };
                r.headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
                r
            }
            (&Method::GET, ["admin", "nodes"]) => json_resp(StatusCode::OK, &self.nodes()),
            (&Method::POST, ["admin", "nodes", id, action @ ("drain" | "undrain")]) => {
                self.drain(id, action, &query).await
            }
            (&Method::GET, ["admin", "routes"]) => json_resp(
                StatusCode::OK,
                &routes_json(&self.routing.table(), self.routing.has_previous()),
            ),
            (&Method::POST, ["admin", "reload"]) => self.reload().await,
            (&Method::POST, ["admin", "rollback"]) => {
                reload_resp(self.routing.rollback("rollback").await)
            }
            (&Method::GET, ["admin", "conns", id]) => match self.hopper.store().lookup(id).await {
                Some(b) => json_resp(
                    StatusCode::OK,
                    &json!({"conn_id": id, "node": &*b.node, "ttl_ms": b.ttl.as_millis() as u64}),
                ),
                None => error(StatusCode::NOT_FOUND, &format!("no binding for conn {id}")),
            },
            (&Method::DELETE, ["admin", "conns", id]) => {
                if self.hopper.store().remove(id).await {
                    let mut r = Response::new(full(Bytes::new()));
                    *r.status_mut() = StatusCode::NO_CONTENT;
                    r
                } else {
                    error(StatusCode::NOT_FOUND, &format!("no binding for conn {id}"))
                }
            }
            _ => error(
                StatusCode::NOT_FOUND,
                &format!("no admin endpoint {method} {path}"),
            ),
        };
        Ok(resp)
    }

    /// Serves the `health_listen` listener (SPEC section 11): `GET /healthz` and `GET /readyz`
    /// only, no token; every other request is 404.
    pub async fn handle_health(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<AdminBody>, Infallible> {
        let path = req.uri().path();
        Ok(match (req.method(), path) {
            (&Method::GET, "/healthz") => self.probe_resp("healthz"),
            (&Method::GET, "/readyz") => self.probe_resp("readyz"),
            _ => error(
                StatusCode::NOT_FOUND,
                &format!(
                    "the health listener serves only GET /healthz and GET /readyz, not {} {path}",
                    req.method()
                ),
            ),
        })
    }

    /// `healthz`: 200 while the process serves. `readyz`: 200 when [`status::Readiness`] says
    /// ready, else 503 with the reason.
    fn probe_resp(&self, which: &str) -> Response<AdminBody> {
        if which == "healthz" {
            return json_resp(StatusCode::OK, &json!({"status": "ok"}));
        }
        let table = self.routing.table();
        match self.readiness.check(&table) {
            Ok(()) => json_resp(
                StatusCode::OK,
                &json!({"status": "ready", "generation": table.generation}),
            ),
            Err(why) => json_resp(StatusCode::SERVICE_UNAVAILABLE, &json!({"status": why})),
        }
    }

    fn nodes(&self) -> Value {
        let table = self.routing.table();
        let now = Instant::now();
        let nodes: Vec<Value> = table
            .nodes()
            .iter()
            .map(|n| {
                let source = self.routing.node_source(&n.cluster, &n.id);
                json!({
                    "cluster": &*n.cluster,
                    "id": &*n.id,
                    "addr": n.addr,
                    "state": table.node_state(n, now).as_str(),
                    "weight": weight::display(table.effective_weight(n, now)),
                    "configured_weight": n.weight,
                    "health_percent": n.health_percent(now),
                    "warmup_percent": table.node_warmup_percent(&n.id, now),
                    "consecutive_failures": n.runtime.consecutive_failures(),
                    "inflight": n.runtime.inflight(),
                    "drain_deadline_ms": self.drains.deadline_ms(n),
                    "metadata": n.metadata.iter().collect::<BTreeMap<_, _>>(),
                    "source": match &source {
                        NodeSource::Static => "static".to_string(),
                        NodeSource::Dns { name, .. } => format!("dns:{name}"),
                    },
                    "last_resolved_ms": match source {
                        NodeSource::Static => None,
                        NodeSource::Dns { resolved_ms, .. } => Some(resolved_ms),
                    },
                })
            })
            .collect();
        Value::Array(nodes)
    }

    async fn drain(&self, id: &str, action: &str, query: &str) -> Response<AdminBody> {
        let table = self.routing.table();
        let Some(node) = table.node(id) else {
            return error(StatusCode::NOT_FOUND, &format!("unknown node {id}"));
        };
        if action == "undrain" {
            let shared = self.drains.undrain(node).await;
            return json_resp(
                StatusCode::OK,
                &json!({"node": id, "state": node.state().as_str(), "shared": shared}),
            );
        }
        let period = match crate::selection::version::query_param(query, "period") {
            Some(p) => match humantime::parse_duration(&p) {
                Ok(d) => d,
                Err(e) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        &format!("invalid period {p:?}: {e}"),
                    )
                }
            },
            None => DEFAULT_DRAIN_PERIOD,
        };
        let (rec, shared) = self.drains.drain(node, period).await;
        json_resp(
            StatusCode::ACCEPTED,
            &json!({"node": id, "state": "draining", "period_ms": rec.period_ms,
                    "deadline_ms": rec.deadline_ms, "shared": shared}),
        )
    }

    /// Sets the node gauges from `table` (called at scrape time so removed nodes disappear).
    pub fn refresh_node_metrics(&self, table: &RouteTable) {
        let now = Instant::now();
        self.metrics.node_weight.clear();
        self.metrics.node_state.clear();
        for n in table.nodes() {
            let labels = NodeLabels {
                cluster: n.cluster.clone(),
                node: n.id.clone(),
            };
            self.metrics
                .node_weight
                .get_or_create(&labels)
                .set(weight::display(table.effective_weight(&n, now)));
            let state = table.node_state(&n, now);
            for s in NodeState::ALL {
                self.metrics
                    .node_state
                    .get_or_create(&NodeStateLabels {
                        cluster: n.cluster.clone(),
                        node: n.id.clone(),
                        state: s.as_str(),
                    })
                    .set(i64::from(s == state));
            }
        }
    }
}

impl Admin {
    /// `POST /admin/reload`: the certificates (SPEC section 10), then the route table. Either
    /// refused is 422 with every issue found; what was refused keeps running.
    async fn reload(&self) -> Response<AdminBody> {
        let tls = match &self.tls {
            Some(t) => t.reload("admin").await.err(),
            None => None,
        };
        let routes = self.routing.reload().await;
        let Some(tls) = tls else {
            return reload_resp(routes);
        };
        let mut issues = tls.issues;
        if let Err(e) = routes {
            issues.extend(e.issues());
        }
        json_resp(StatusCode::UNPROCESSABLE_ENTITY, &json!({"errors": issues}))
    }
}

fn reload_resp(r: Result<u64, ReloadError>) -> Response<AdminBody> {
    match r {
        Ok(g) => json_resp(StatusCode::OK, &json!({"generation": g})),
        Err(e) => json_resp(
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!({"errors": e.issues()}),
        ),
    }
}

/// `GET /admin/routes` (SPEC section 8): the live table in matching order (most specific first),
/// its clusters with each node's state and warm-up percent, and whether a rollback target exists.
fn routes_json(t: &RouteTable, rollback_available: bool) -> Value {
    let now = Instant::now();
    let routes: Vec<Value> = t
        .routes
        .iter()
        .map(|r| {
            let m = &r.config.matcher;
            json!({
                "id": &*r.id,
                "match": {
                    "path_prefix": m.path_prefix, "path": m.path, "host": m.host,
                    "methods": m.methods.iter().map(|x| x.as_str()).collect::<Vec<_>>(),
                    "headers": m.headers.iter().map(|(k, v)| (k.as_str().to_string(), v.clone())).collect::<BTreeMap<_, _>>(),
                },
                "cluster": &*r.cluster.name,
                "strip_prefix": r.config.strip_prefix,
                "timeout_ms": r.config.timeout.as_millis() as u64,
                "retries": r.config.retries,
                "websocket": format!("{:?}", r.config.websocket).to_lowercase(),
                "on_all_down": match r.config.on_all_down { crate::config::OnAllDown::Fallback => "fallback", crate::config::OnAllDown::FailOpen => "fail_open" },
                "warming": r.warmup.as_ref().is_some_and(|w| w.active(now)),
                "warmup_percent": r.warmup.as_ref().map_or(100, |w| w.percent(now)),
            })
        })
        .collect();
    let mut clusters: Vec<Value> = t
        .clusters
        .values()
        .map(|c| {
            json!({
                "name": &*c.name,
                "protocol": c.protocol.as_str(),
                "lb": c.lb.as_str(),
                "nodes": c.nodes.iter().map(|n| json!({
                    "id": &*n.id, "addr": n.addr, "weight": n.weight,
                    "state": t.node_state(n, now).as_str(), "warmup_percent": t.node_warmup_percent(&n.id, now),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    clusters.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    json!({"generation": t.generation, "routes": routes, "clusters": clusters, "rollback_available": rollback_available})
}
