//! The admin listener (SPEC section 8): nodes, drain/undrain, routes, reload/rollback, bindings,
//! metrics, liveness and readiness. Loopback by default; a bearer token when `admin_token` is set
//! (compared in constant time) for every call but `GET /healthz` and `GET /readyz`. Never served on
//! the data port. Drains go through [`drains::Drains`], which shares them with the other replicas
//! on one Redis.

pub mod drains;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{json, Value};
use subtle::ConstantTimeEq;
use tokio::time::Instant;

use crate::hopper::Hopper;
use crate::metrics::{Metrics, NodeLabels, NodeStateLabels};
use crate::registry::weight;
use crate::registry::NodeState;
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
    /// False once shutdown started (readiness).
    pub ready: Arc<AtomicBool>,
    /// Operator drains, shared through Redis.
    pub drains: Arc<drains::Drains>,
}

type AdminBody = Full<Bytes>;

fn json_resp(status: StatusCode, v: &Value) -> Response<AdminBody> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
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
    ) -> Result<Response<AdminBody>, std::convert::Infallible> {
        // Liveness and readiness stay open: orchestrator probes carry no token (as Envoy's /ready).
        let probe =
            req.method() == Method::GET && matches!(req.uri().path(), "/healthz" | "/readyz");
        if let Some(token) = self.token.as_ref().filter(|_| !probe) {
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
        // Drain the request body (bounded) so keep-alive works; admin calls carry no meaningful body.
        let _ = http_body_util::Limited::new(req.into_body(), 64 * 1024)
            .collect()
            .await;
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let resp = match (&method, segs.as_slice()) {
            (&Method::GET, ["healthz"]) => json_resp(StatusCode::OK, &json!({"status": "ok"})),
            (&Method::GET, ["readyz"]) => {
                if self.ready.load(Ordering::Acquire) {
                    json_resp(
                        StatusCode::OK,
                        &json!({"status": "ready", "generation": self.routing.table().generation}),
                    )
                } else {
                    json_resp(
                        StatusCode::SERVICE_UNAVAILABLE,
                        &json!({"status": "shutting down"}),
                    )
                }
            }
            (&Method::GET, ["metrics"]) => {
                self.refresh_node_metrics(&self.routing.table());
                let mut r = Response::new(Full::new(Bytes::from(self.metrics.encode())));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
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
            (&Method::POST, ["admin", "reload"]) => reload_resp(self.routing.reload().await),
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
                    let mut r = Response::new(Full::new(Bytes::new()));
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

    fn nodes(&self) -> Value {
        let table = self.routing.table();
        let now = Instant::now();
        let nodes: Vec<Value> = table
            .nodes()
            .iter()
            .map(|n| {
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
                "protocol": match c.protocol { crate::config::Protocol::Http1 => "http1", crate::config::Protocol::H2c => "h2c" },
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
