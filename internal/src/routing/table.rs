//! [`RouteTable`]: one validated, immutable snapshot of routes, clusters and nodes, with its
//! generation. It is built beside the live one and swapped in whole by [`super::reload::Routing`];
//! node runtime state (health, in-flight counts, drain) is shared by node id through the registry,
//! so it carries over every swap. Bindings live in the affinity store and name nodes by id.
//!
//! # Matching rule (README "Routing")
//!
//! Each route's predicates (`path` exact, `path_prefix`, `host`, `methods`, `headers`) must all
//! hold; absent ones match anything. Among matching routes the **most specific wins**, compared in
//! this order (the first difference decides):
//!
//! 1. an exact `path` beats any prefix;
//! 2. then the longer `path_prefix` (a route without a path predicate counts as prefix `/`);
//! 3. then a route with `host` beats one without;
//! 4. then more `headers` predicates beat fewer;
//! 5. then a route with `methods` beats one without;
//! 6. ties keep file order.
//!
//! Paths are compared after normalisation ([`super::path::normalize`]: RFC 3986 dot-segment
//! removal, unreserved escapes decoded). `path_prefix` is a plain string prefix, as Envoy's
//! `prefix` (`/api` also matches `/apix`; write `/api/` to require a segment). `host` is compared
//! lower-case without the port; header values are compared exactly, any of a repeated header may
//! match.
//!
//! A route in warm-up (new in this table and with `[routes.warmup]`) takes only its current ramp
//! share of the requests it matches; the rest fall through to the next matching route, so
//! traffic moves onto a new, more specific route gradually (SPEC section 6).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::time::Instant;

use crate::config::{ClusterConfig, Config, RouteConfig};
use crate::registry::{Node, NodeId, NodeSettings, NodeState, Registry};

use super::warmup::Warmup;

pub(crate) use crate::selection::Cluster;

/// One route in a table.
#[derive(Debug)]
pub struct Route {
    /// Validated config.
    pub config: RouteConfig,
    /// Id, shared for metric labels.
    pub id: Arc<str>,
    /// Target cluster.
    pub cluster: Arc<Cluster>,
    /// Warm-up of the route itself when it is new in this table.
    pub warmup: Option<Warmup>,
}

/// A validated, immutable route table.
#[derive(Debug)]
pub struct RouteTable {
    /// Generation: 1 for the first table, +1 per swap (rollbacks included).
    pub generation: u64,
    /// Routes, most specific first.
    pub routes: Vec<Arc<Route>>,
    /// Clusters by name.
    pub clusters: HashMap<Arc<str>, Arc<Cluster>>,
    /// The config this table was built from.
    pub config: Arc<Config>,
    /// Nodes new in this table under a route with warm-up, with their ramp.
    pub warming_nodes: HashMap<NodeId, Warmup>,
    /// When the table went live.
    pub created: Instant,
    /// True if any route or node of this table has a warm-up (fast path for [`Self::record_outcome`]).
    pub has_warmup: bool,
}

/// A warm-up whose error rate passed its `max_error_rate` ([`RouteTable::warmup_breach`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Breach {
    /// What was warming: `route <id>` or `node <id>`.
    pub subject: String,
    /// Its counts.
    pub outcomes: super::warmup::Outcomes,
    /// The configured limit (0-1).
    pub max_error_rate: f64,
}

/// Specificity key (see the module docs); larger sorts first.
fn specificity(r: &RouteConfig) -> (bool, usize, bool, usize, bool) {
    let m = &r.matcher;
    (
        m.path.is_some(),
        // No path predicate matches every path, exactly like prefix "/".
        m.path_prefix.as_ref().map_or(1, String::len),
        m.host.is_some(),
        m.headers.len(),
        !m.methods.is_empty(),
    )
}

impl RouteTable {
    /// Builds a table from `config`, sharing node runtimes through `registry` (created for ids it
    /// has not seen). `previous` decides what is new for warm-up: routes whose id it lacks and, under
    /// a route with `[routes.warmup]`, nodes whose id it lacks. `None` (the first table, a rollback)
    /// means no warm-up at all (SPEC section 3).
    pub fn build(
        config: Arc<Config>,
        registry: &Registry,
        generation: u64,
        previous: Option<&RouteTable>,
    ) -> RouteTable {
        let now = Instant::now();
        crate::selection::version::warn_metadata_key_case(&config);
        let mut clusters = HashMap::new();
        for c in &config.clusters {
            clusters.insert(
                Arc::<str>::from(c.name.as_str()),
                Arc::new(build_cluster(c, registry)),
            );
        }
        let mut routes: Vec<&RouteConfig> = config.routes.iter().collect();
        // Stable sort keeps file order among equals.
        routes.sort_by_key(|r| std::cmp::Reverse(specificity(r)));
        let prev_nodes: HashSet<&str> = previous
            .map(|p| {
                p.clusters
                    .values()
                    .flat_map(|c| c.nodes.iter().map(|n| &*n.id))
                    .collect()
            })
            .unwrap_or_default();
        let mut warming_nodes = HashMap::new();
        let routes: Vec<Arc<Route>> = routes
            .into_iter()
            .map(|rc| {
                let cluster = clusters
                    .get(rc.cluster.as_str())
                    .cloned()
                    .expect("validation guarantees every route's cluster exists");
                let warmup = match (previous, &rc.warmup) {
                    (Some(prev), Some(w)) => {
                        for n in &cluster.nodes {
                            if !prev_nodes.contains(&*n.id) {
                                warming_nodes
                                    .entry(n.id.clone())
                                    .or_insert_with(|| Warmup::new(w.clone(), now));
                            }
                        }
                        let route_is_new = !prev.routes.iter().any(|r| r.config.id == rc.id);
                        route_is_new.then(|| Warmup::new(w.clone(), now))
                    }
                    _ => None,
                };
                Arc::new(Route {
                    id: Arc::from(rc.id.as_str()),
                    config: rc.clone(),
                    cluster,
                    warmup,
                })
            })
            .collect();
        let has_warmup = !warming_nodes.is_empty() || routes.iter().any(|r| r.warmup.is_some());
        RouteTable {
            generation,
            routes,
            clusters,
            config,
            warming_nodes,
            created: now,
            has_warmup,
        }
    }

    /// Counts one finished request (HTTP `status`, served under `route` by `node`) on the warm-ups
    /// it touched, while their windows last. Cheap when the table has none.
    pub fn record_outcome(
        &self,
        route: Option<&str>,
        node: Option<&str>,
        status: u16,
        now: Instant,
    ) {
        if !self.has_warmup {
            return;
        }
        if let Some(w) = route
            .and_then(|id| self.routes.iter().find(|r| &*r.id == id))
            .and_then(|r| r.warmup.as_ref())
        {
            w.record(status, now);
        }
        if let Some(w) = node.and_then(|id| self.warming_nodes.get(id)) {
            w.record(status, now);
        }
    }

    /// The first warm-up (routes, then nodes by id) whose window is still open at `now` and whose
    /// error rate is above its `max_error_rate` with at least `min_sample` requests; `None` if
    /// all are fine.
    pub fn warmup_breach(&self, now: Instant, min_sample: u64) -> Option<Breach> {
        if !self.has_warmup {
            return None;
        }
        let routes = self
            .routes
            .iter()
            .filter_map(|r| r.warmup.as_ref().map(|w| (format!("route {}", r.id), w)));
        let mut nodes: Vec<_> = self.warming_nodes.iter().collect();
        nodes.sort_by(|a, b| a.0.cmp(b.0));
        let nodes = nodes.into_iter().map(|(id, w)| (format!("node {id}"), w));
        routes
            .chain(nodes)
            .filter(|(_, w)| w.active(now))
            .find_map(|(subject, w)| {
                w.breached(min_sample).map(|outcomes| Breach {
                    subject,
                    outcomes,
                    max_error_rate: w.config.max_error_rate,
                })
            })
    }

    /// True while any warm-up window of this table is open at `now`.
    pub fn warming(&self, now: Instant) -> bool {
        self.has_warmup
            && (self
                .routes
                .iter()
                .any(|r| r.warmup.as_ref().is_some_and(|w| w.active(now)))
                || self.warming_nodes.values().any(|w| w.active(now)))
    }

    /// Every node of every cluster.
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        let mut v: Vec<_> = self
            .clusters
            .values()
            .flat_map(|c| c.nodes.iter().cloned())
            .collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// The node `id` in any cluster.
    pub fn node(&self, id: &str) -> Option<&Arc<Node>> {
        self.clusters.values().find_map(|c| c.node(id))
    }

    /// Warm-up percent (0-100) of node `id` at `now`: 100 unless it is new and warming.
    pub fn node_warmup_percent(&self, id: &str, now: Instant) -> u32 {
        self.warming_nodes.get(id).map_or(100, |w| w.percent(now))
    }

    /// The state shown to operators: `warming` while a healthy node ramps in warm-up.
    pub fn node_state(&self, node: &Node, now: Instant) -> NodeState {
        let s = node.state();
        if s == NodeState::Healthy && self.node_warmup_percent(&node.id, now) < 100 {
            NodeState::Warming
        } else {
            s
        }
    }

    /// Effective weight of `node` at `now` (configured x health % x warm-up %), see [`crate::registry::weight::effective`].
    pub fn effective_weight(&self, node: &Node, now: Instant) -> u64 {
        crate::registry::weight::effective(
            node.weight,
            node.health_percent(now),
            self.node_warmup_percent(&node.id, now),
        )
    }
}

impl crate::selection::Weights for RouteTable {
    fn effective_weight(&self, node: &Node, now: Instant) -> u64 {
        RouteTable::effective_weight(self, node, now)
    }
}

fn build_cluster(c: &ClusterConfig, registry: &Registry) -> Cluster {
    let name: Arc<str> = Arc::from(c.name.as_str());
    let settings = NodeSettings {
        health: c.health.clone(),
        protocol: c.protocol,
        tls: c.tls.clone(),
    };
    let nodes = c
        .nodes
        .iter()
        .map(|n| registry.node(&name, n, settings.clone()).0)
        .collect::<Vec<_>>();
    registry.set_peers(&nodes);
    Cluster::new(name, c.protocol, c.lb, nodes)
}

/// What route matching looks at in a request.
#[derive(Debug, Clone, Copy)]
pub struct RequestHead<'a> {
    /// Method.
    pub method: &'a http::Method,
    /// Host without port, lower-case; `None` if absent.
    pub host: Option<&'a str>,
    /// Normalised path (see [`super::path::normalize`]).
    pub path: &'a str,
    /// Headers.
    pub headers: &'a http::HeaderMap,
}

impl RouteTable {
    /// The most specific route matching `head` (see the module docs), skipping a route in warm-up
    /// when `roll` (0-100) falls outside its current share, so its traffic ramps up.
    pub fn match_route(
        &self,
        head: &RequestHead<'_>,
        now: Instant,
        roll: f64,
    ) -> Option<&Arc<Route>> {
        self.routes.iter().find(|r| {
            matches(&r.config.matcher, head)
                && match &r.warmup {
                    Some(w) if w.active(now) => roll < f64::from(w.percent(now)),
                    _ => true,
                }
        })
    }
}

fn matches(m: &crate::config::RouteMatch, head: &RequestHead<'_>) -> bool {
    if let Some(p) = &m.path {
        if head.path != p {
            return false;
        }
    }
    if let Some(p) = &m.path_prefix {
        if !head.path.starts_with(p.as_str()) {
            return false;
        }
    }
    if let Some(h) = &m.host {
        if head.host != Some(h.as_str()) {
            return false;
        }
    }
    if !m.methods.is_empty() && !m.methods.contains(head.method) {
        return false;
    }
    m.headers.iter().all(|(name, want)| {
        head.headers
            .get_all(name)
            .iter()
            .any(|v| v.as_bytes() == want.as_bytes())
    })
}
