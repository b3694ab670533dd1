//! The status page's server side (SPEC section 11): readiness that means ready, the
//! `GET /admin/status` snapshot the page renders, and the node watcher that turns state and
//! effective-weight changes into `node` events.
//!
//! Spawns nothing itself; [`watch_nodes`] is a task the server runs until the drain signal.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::time::Instant;

use crate::config::Spelled;
use crate::drain;
use crate::events::{unix_ms, Event};
use crate::hopper::Hopper;
use crate::metrics::Metrics;
use crate::registry::{weight, Node};
use crate::routing::reload::Routing;
use crate::routing::RouteTable;

/// How often [`watch_nodes`] compares node states and weights: a transition reaches the page's
/// event stream within this (well inside the SPEC's "within a few seconds").
pub(crate) const NODE_WATCH_INTERVAL: Duration = Duration::from_millis(200);
/// A weight-only change (slow start, warm-up ramp) is published at most this often per node, so a
/// ramp does not flood the stream; state changes are published at once.
pub(crate) const WEIGHT_EVENT_MIN_GAP: Duration = Duration::from_secs(1);

/// The gateway's readiness (SPEC section 11): ready once the data and admin listeners accept and
/// the first round of active probes has finished; not ready again once shutdown starts.
#[derive(Debug, Default)]
pub(crate) struct Readiness {
    listening: AtomicBool,
    /// Latched: nodes added by a later reload do not make a serving gateway unready.
    probed: AtomicBool,
    stopping: AtomicBool,
}

impl Readiness {
    /// A gateway that is starting (not ready).
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The listeners accept (called once they are bound and their accept loops run).
    pub(crate) fn set_listening(&self) {
        self.listening.store(true, Ordering::Release);
    }

    /// Shutdown started: `/readyz` answers 503 from now on.
    pub(crate) fn set_stopping(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    /// `Ok(())` when ready; otherwise why not (`shutting down`, `starting`, `probing`).
    pub(crate) fn check(&self, table: &RouteTable) -> Result<(), &'static str> {
        if self.stopping.load(Ordering::Acquire) {
            return Err("shutting down");
        }
        if !self.listening.load(Ordering::Acquire) {
            return Err("starting");
        }
        if !self.probed.load(Ordering::Acquire) {
            if !table.nodes().iter().all(|n| n.runtime.probed()) {
                return Err("probing");
            }
            self.probed.store(true, Ordering::Release);
        }
        Ok(())
    }
}

/// The `GET /admin/status` document: version, generation, every cluster's nodes (state, effective
/// weight, ladder position, in-flight, bindings), hops per second over 15 minutes (oldest first),
/// recent hops and reloads (newest first), event subscribers.
pub(crate) fn status_json(
    table: &RouteTable,
    hopper: &Hopper,
    metrics: &Metrics,
    ready: bool,
) -> Value {
    let now = Instant::now();
    let now_ms = unix_ms();
    let bindings = hopper.store().bindings_per_node();
    let mut clusters: Vec<&Arc<crate::routing::Cluster>> = table.clusters.values().collect();
    clusters.sort_by(|a, b| a.name.cmp(&b.name));
    let clusters: Vec<Value> = clusters
        .iter()
        .map(|c| {
            let nodes: Vec<Value> = c
                .nodes
                .iter()
                .map(|n| {
                    let h = &n.settings.health;
                    with_fields(
                        node_fields(table, n, now),
                        json!({
                            "degrade_after": h.degrade_after,
                            "eject_after": h.eject_after,
                            "degraded_percent": h.degraded_percent,
                            "bindings": bindings.get(&n.id).copied().unwrap_or(0),
                            "drain_deadline_ms": n.runtime.signal().drain_deadline.map(crate::events::unix_ms_at),
                        }),
                    )
                })
                .collect();
            json!({"name": &*c.name, "lb": c.lb.as_str(), "nodes": nodes})
        })
        .collect();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "generation": table.generation,
        "ready": ready,
        "now_ms": now_ms,
        "clusters": clusters,
        "hops_per_second": metrics.events.hops_per_second(now_ms),
        "recent_hops": metrics.events.recent_hops(),
        "reloads": metrics.events.recent_reloads(),
        "subscribers": metrics.events.subscribers(),
    })
}

/// The fields a node shows in both `GET /admin/status` and `GET /admin/nodes` (SPEC section 8): id,
/// address, state, effective and configured weight, health and warm-up percent, failure streak and
/// in-flight count, as of `now` in `table`.
pub(super) fn node_fields(table: &RouteTable, n: &Node, now: Instant) -> Map<String, Value> {
    let v = json!({
        "id": &*n.id,
        "addr": n.addr,
        "state": table.node_state(n, now).as_str(),
        "weight": weight::display(table.effective_weight(n, now)),
        "configured_weight": n.weight,
        "health_percent": n.health_percent(now),
        "warmup_percent": table.node_warmup_percent(&n.id, now),
        "consecutive_failures": n.runtime.consecutive_failures(),
        "inflight": n.runtime.inflight(),
    });
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// `base` with the fields of the JSON object `more` added (a non-object `more` adds nothing).
pub(super) fn with_fields(mut base: Map<String, Value>, more: Value) -> Value {
    if let Value::Object(m) = more {
        base.extend(m);
    }
    Value::Object(base)
}

/// Publishes a `node` event whenever a node's state or effective weight changes (weight-only
/// changes at most every [`WEIGHT_EVENT_MIN_GAP`]), checking every [`NODE_WATCH_INTERVAL`] until
/// `watch` fires. Comparing snapshots covers every cause alike: probes, passive errors, drains,
/// slow start and warm-up.
pub(crate) async fn watch_nodes(
    routing: Arc<Routing>,
    metrics: Arc<Metrics>,
    mut watch: drain::Watch,
) {
    // Per node: (state, weight, when last published).
    let mut last: HashMap<Arc<str>, (&'static str, f64, Instant)> = HashMap::new();
    let mut tick = tokio::time::interval(NODE_WATCH_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut first = true;
    loop {
        tokio::select! {
            _ = watch.signaled() => return,
            _ = tick.tick() => {}
        }
        let table = routing.table();
        let now = Instant::now();
        let mut seen = HashMap::with_capacity(last.len());
        for n in table.nodes() {
            let state = table.node_state(&n, now).as_str();
            let w = weight::display(table.effective_weight(&n, now));
            let publish = match last.get(&n.id) {
                None => !first,
                Some((s, _, _)) if *s != state => true,
                Some((_, pw, at)) => *pw != w && now.duration_since(*at) >= WEIGHT_EVENT_MIN_GAP,
            };
            let entry = if publish {
                metrics.events.publish(Event::Node {
                    id: n.id.clone(),
                    cluster: n.cluster.clone(),
                    state,
                    weight: w,
                });
                (state, w, now)
            } else {
                last.get(&n.id).copied().unwrap_or((state, w, now))
            };
            seen.insert(n.id.clone(), entry);
        }
        last = seen;
        first = false;
    }
}
