//! `GET /admin/nodes`, `POST /admin/nodes/{id}/drain|undrain` and `GET|DELETE /admin/conns/{id}`
//! (SPEC section 8), and the node gauges set at scrape time.

use std::collections::BTreeMap;

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::status::{node_fields, with_fields};
use super::{error, full, json_resp, Admin, AdminBody, DEFAULT_DRAIN_PERIOD};
use crate::hopper::ConnId;
use crate::metrics::{NodeLabels, NodeStateLabels};
use crate::registry::weight;
use crate::registry::NodeState;
use crate::routing::discovered::NodeSource;
use crate::routing::RouteTable;

impl Admin {
    /// `GET /admin/nodes`: every node of the live table with its state, weights and source.
    pub(super) fn nodes(&self) -> Value {
        let table = self.routing.table();
        let now = Instant::now();
        let nodes: Vec<Value> = table
            .nodes()
            .iter()
            .map(|n| {
                let source = self.routing.node_source(&n.cluster, &n.id);
                with_fields(
                    node_fields(&table, n, now),
                    json!({
                        "cluster": &*n.cluster,
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
                    }),
                )
            })
            .collect();
        Value::Array(nodes)
    }

    /// `POST /admin/nodes/{id}/drain` (`?period=`, default [`DEFAULT_DRAIN_PERIOD`]) or
    /// `.../undrain`: 202 with the deadline, 200 undrained, 404 for an unknown node.
    pub(super) async fn drain(&self, id: &str, action: &str, query: &str) -> Response<AdminBody> {
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

    /// `GET /admin/conns/{id}` (the binding, 404 without one) or `DELETE` (204, 404 without one).
    pub(super) async fn conn(&self, method: &Method, id: &str) -> Response<AdminBody> {
        // An id outside the syntax rules was never bound.
        let Ok(conn) = ConnId::checked(id.as_bytes()) else {
            return error(StatusCode::NOT_FOUND, &format!("no binding for conn {id}"));
        };
        if method == Method::GET {
            return match self.hopper.store().lookup(&conn).await {
                Some(b) => json_resp(
                    StatusCode::OK,
                    &json!({"conn_id": id, "node": &*b.node, "ttl_ms": b.ttl.as_millis() as u64}),
                ),
                None => error(StatusCode::NOT_FOUND, &format!("no binding for conn {id}")),
            };
        }
        if self.hopper.store().remove(&conn).await {
            let mut r = Response::new(full(Bytes::new()));
            *r.status_mut() = StatusCode::NO_CONTENT;
            r
        } else {
            error(StatusCode::NOT_FOUND, &format!("no binding for conn {id}"))
        }
    }

    /// Sets the node gauges from `table` (called at scrape time so removed nodes disappear).
    pub(crate) fn refresh_node_metrics(&self, table: &RouteTable) {
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
                        node: labels.clone(),
                        state: s.as_str(),
                    })
                    .set(i64::from(s == state));
            }
        }
    }
}
