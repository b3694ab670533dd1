//! [`RouteTable`]: one validated snapshot of routes, clusters and nodes, with its generation.
//!
//! Matching rule (README "Routing"): the most specific route wins: an exact `path` beats any
//! prefix; then the longest `path_prefix`; then a route with `host`, then more `headers`, then one
//! with `methods`; ties keep file order. Paths are compared after RFC 3986 dot-segment removal.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use tokio::time::Instant;

use crate::config::{ClusterConfig, Config, Picker, Protocol, RouteConfig, WarmupConfig};
use crate::registry::{Node, NodeId, NodeSettings, NodeState, Registry};

use super::warmup::Warmup;

/// One cluster in a table.
#[derive(Debug)]
pub struct Cluster {
    /// Name.
    pub name: Arc<str>,
    /// Upstream protocol.
    pub protocol: Protocol,
    /// Picker.
    pub lb: Picker,
    /// Nodes in config order.
    pub nodes: Vec<Arc<Node>>,
    /// Round-robin cursor (relaxed atomic; exact fairness is not required across threads).
    pub cursor: AtomicUsize,
}

impl Cluster {
    /// The node `id` of this cluster.
    pub fn node(&self, id: &str) -> Option<&Arc<Node>> {
        self.nodes.iter().find(|n| &*n.id == id)
    }
}

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
}

/// Specificity key; larger sorts first.
fn specificity(r: &RouteConfig) -> (bool, usize, bool, usize, bool) {
    let m = &r.matcher;
    (
        m.path.is_some(),
        m.path_prefix.as_ref().map_or(0, String::len),
        m.host.is_some(),
        m.headers.len(),
        !m.methods.is_empty(),
    )
}

impl RouteTable {
    /// Builds a table from `config`, sharing node runtimes through `registry`. `previous` decides
    /// what is new (for warm-up); warm-up never applies to the first table (SPEC section 3).
    pub fn build(config: Arc<Config>, registry: &Registry, generation: u64, previous: Option<&RouteTable>) -> RouteTable {
        let now = Instant::now();
        let mut clusters = HashMap::new();
        for c in &config.clusters {
            clusters.insert(Arc::<str>::from(c.name.as_str()), Arc::new(build_cluster(c, registry)));
        }
        let mut routes: Vec<&RouteConfig> = config.routes.iter().collect();
        // Stable sort keeps file order among equals.
        routes.sort_by_key(|r| std::cmp::Reverse(specificity(r)));
        let mut warming_nodes = HashMap::new();
        let routes = routes
            .into_iter()
            .map(|rc| {
                let cluster = clusters.get(rc.cluster.as_str()).cloned().expect("validation guarantees every route's cluster exists");
                let warmup = match (previous, &rc.warmup) {
                    (Some(prev), Some(w)) => {
                        let route_is_new = !prev.routes.iter().any(|r| r.config.id == rc.id);
                        let prev_nodes: HashSet<&str> = prev.clusters.values().flat_map(|c| c.nodes.iter().map(|n| &*n.id)).collect();
                        for n in &cluster.nodes {
                            if !prev_nodes.contains(&*n.id) {
                                warming_nodes.insert(n.id.clone(), Warmup::new(w.clone(), now));
                            }
                        }
                        route_is_new.then(|| Warmup::new(w.clone(), now))
                    }
                    _ => None,
                };
                Arc::new(Route { id: Arc::from(rc.id.as_str()), config: rc.clone(), cluster, warmup })
            })
            .collect();
        RouteTable { generation, routes, clusters, config, warming_nodes, created: now }
    }

    /// Every node of every cluster.
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        let mut v: Vec<_> = self.clusters.values().flat_map(|c| c.nodes.iter().cloned()).collect();
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
        crate::registry::weight::effective(node.weight, node.health_percent(now), self.node_warmup_percent(&node.id, now))
    }

    /// Warm-up settings of routes that have them (for the rollback watcher).
    pub fn warmups(&self) -> Vec<(Arc<str>, WarmupConfig)> {
        self.routes.iter().filter_map(|r| r.config.warmup.clone().map(|w| (r.id.clone(), w))).collect()
    }
}

fn build_cluster(c: &ClusterConfig, registry: &Registry) -> Cluster {
    let name: Arc<str> = Arc::from(c.name.as_str());
    let settings = NodeSettings { health: c.health.clone(), protocol: c.protocol };
    let nodes = c.nodes.iter().map(|n| registry.node(&name, n, settings.clone()).0).collect();
    Cluster { name, protocol: c.protocol, lb: c.lb, nodes, cursor: AtomicUsize::new(0) }
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
    pub fn match_route(&self, head: &RequestHead<'_>, now: Instant, roll: f64) -> Option<&Arc<Route>> {
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
    m.headers.iter().all(|(name, want)| head.headers.get_all(name).iter().any(|v| v.as_bytes() == want.as_bytes()))
}
