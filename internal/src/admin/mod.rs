//! The admin listener (SPEC sections 8 and 11): nodes, drain/undrain, routes, reload/rollback,
//! bindings, metrics, liveness and readiness, the status page (`GET /`, [`status`]) and its event
//! feed (`GET /admin/events`, [`sse`]). Loopback by default; a bearer token when `admin_token` is
//! set (compared in constant time) for every call but `GET /healthz`, `GET /readyz` and the page
//! itself (which carries no node data and asks for the token). Never served on the data port; the
//! optional `health_listen` listener serves only the two probes ([`Admin::handle_health`]).
//! Drains go through [`drains::Drains`], which shares them with the other replicas on one Redis.
//! `POST /admin/upgrade` starts the gateway's own upgrade ([`crate::upgrade`]); `GET /admin/upgrade`
//! answers this process's pid and whether an upgrade runs.

pub(crate) mod drains;
mod nodes;
mod routes;
pub(crate) mod sse;
pub(crate) mod status;

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

use crate::hopper::Hopper;
use crate::metrics::Metrics;
use crate::routing::reload::Routing;
use routes::{reload_resp, routes_json};

/// Default drain period when `?period=` is absent (SPEC section 5 example).
pub(crate) const DEFAULT_DRAIN_PERIOD: Duration = Duration::from_secs(30);

/// Admin API state.
#[derive(Debug)]
pub(crate) struct Admin {
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
    /// The gateway's own upgrade (`POST /admin/upgrade`, SPEC section 13).
    pub upgrade: Arc<crate::upgrade::Upgrader>,
}

/// The status page: one self-contained document (style and script inline, nothing fetched from
/// elsewhere) that reads `GET /admin/status` and `GET /admin/events` with the token it asks for.
pub(crate) const STATUS_PAGE: &str = include_str!("page.html");

/// Body of every admin answer: a full buffer, or the event stream.
pub(crate) type AdminBody = UnsyncBoxBody<Bytes, Infallible>;

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

/// A 200 answer of `body` as `content_type` that no cache keeps (the page, the event stream).
fn no_store(body: AdminBody, content_type: &'static str) -> Response<AdminBody> {
    let mut r = Response::new(body);
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

impl Admin {
    /// Serves one admin request.
    pub(crate) async fn handle(
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
            (&Method::GET, [""]) => no_store(full(STATUS_PAGE), "text/html; charset=utf-8"),
            (&Method::GET, ["admin", "status"]) => {
                let table = self.routing.table();
                let ready = self.readiness.check(&table).is_ok();
                json_resp(
                    StatusCode::OK,
                    &status::status_json(&table, &self.hopper, &self.metrics, ready),
                )
            }
            (&Method::GET, ["admin", "events"]) => no_store(
                sse::subscribe(&self.metrics.events).boxed_unsync(),
                "text/event-stream",
            ),
            (&Method::GET, ["metrics"]) => self.metrics_resp(accept.as_deref()),
            (&Method::GET, ["admin", "nodes"]) => json_resp(StatusCode::OK, &self.nodes()),
            (&Method::POST, ["admin", "nodes", id, action @ ("drain" | "undrain")]) => {
                self.drain(id, action, &query).await
            }
            (&Method::GET, ["admin", "routes"]) => json_resp(
                StatusCode::OK,
                &routes_json(&self.routing.table(), self.routing.has_previous()),
            ),
            (&Method::POST, ["admin", "reload"]) => self.reload().await,
            (&Method::POST, ["admin", "upgrade"]) => self.upgrade(),
            (&Method::GET, ["admin", "upgrade"]) => json_resp(
                StatusCode::OK,
                &json!({"pid": std::process::id(), "running": self.upgrade.is_running()}),
            ),
            (&Method::POST, ["admin", "rollback"]) => {
                reload_resp(self.routing.rollback("rollback").await)
            }
            (&Method::GET | &Method::DELETE, ["admin", "conns", id]) => {
                self.conn(&method, id).await
            }
            _ => error(
                StatusCode::NOT_FOUND,
                &format!("no admin endpoint {method} {path}"),
            ),
        };
        Ok(resp)
    }

    /// `POST /admin/upgrade` (SPEC section 13): 202 once an upgrade started, 409 while one runs.
    fn upgrade(&self) -> Response<AdminBody> {
        match self.upgrade.trigger("POST /admin/upgrade") {
            Ok(()) => json_resp(
                StatusCode::ACCEPTED,
                &json!({"status": "started", "pid": std::process::id()}),
            ),
            Err(busy) => error(StatusCode::CONFLICT, &busy.to_string()),
        }
    }

    /// `GET /metrics` (SPEC section 8): node gauges and certificate expiry refreshed first; the
    /// 0.0.4 text format unless `accept` asks for OpenMetrics.
    fn metrics_resp(&self, accept: Option<&str>) -> Response<AdminBody> {
        self.refresh_node_metrics(&self.routing.table());
        if let Some(t) = &self.tls {
            t.refresh_expiry();
        }
        // SPEC section 8: 0.0.4 text unless OpenMetrics is asked for.
        use crate::metrics::format::{self, Format};
        let fmt = format::negotiate(accept);
        let mut r = Response::new(full(self.metrics.encode_as(fmt)));
        let ct = match fmt {
            Format::Prometheus => format::PROMETHEUS_TEXT,
            Format::OpenMetrics => format::OPENMETRICS_TEXT,
        };
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
        r
    }

    /// Serves the `health_listen` listener (SPEC section 11): `GET /healthz` and `GET /readyz`
    /// only, no token; every other request is 404.
    pub(crate) async fn handle_health(
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
}
