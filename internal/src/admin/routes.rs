//! `GET /admin/routes`, `POST /admin/reload` and `POST /admin/rollback` (SPEC section 8): the live
//! route table as JSON, and the answers of a reload (certificates, then routes) or rollback.

use std::collections::BTreeMap;

use http::{Response, StatusCode};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::{json_resp, Admin, AdminBody};
use crate::config::Spelled;
use crate::routing::reload::ReloadError;
use crate::routing::RouteTable;

impl Admin {
    /// `POST /admin/reload`: the certificates (SPEC section 10), then the route table. Either
    /// refused is 422 with every issue found; what was refused keeps running.
    pub(super) async fn reload(&self) -> Response<AdminBody> {
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

pub(super) fn reload_resp(r: Result<u64, ReloadError>) -> Response<AdminBody> {
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
pub(super) fn routes_json(t: &RouteTable, rollback_available: bool) -> Value {
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
                "websocket": r.config.websocket.as_str(),
                "on_all_down": r.config.on_all_down.as_str(),
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
