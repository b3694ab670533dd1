//! A gateway config builder for the scenarios (SPEC section 3, "Config file (TOML)"), in the manner
//! of linkerd2-proxy's integration-test builders (`linkerd/app/integration/src/...`): a test says
//! which health preset, clusters and routes it needs, and [`Config::toml`] writes the file text.
//!
//! ```ignore
//! let toml = Config::new()
//!     .health(Health::tcp_fast())
//!     .cluster("c", &[&a, &b])
//!     .route(Route::catch_all("api", "c").retries(2))
//!     .toml();
//! ```
//!
//! Shapes the builder does not model go in through the raw escape hatches: [`Config::raw_top`] (whole
//! tables such as `[limits]`), [`Cluster::line`] and [`Route::line`] (extra `key = value` lines or
//! nested tables such as `[routes.canary]`), [`Config::raw_tail`] (text appended last).

use crate::Mock;

/// A whole gateway config file (SPEC section 3), written by [`Config::toml`].
///
/// Tables come out in the order top tables, `[health]`, `[[clusters]]`, `[[routes]]`, tail; each
/// table is self-contained, so the order never changes what the gateway reads.
#[derive(Clone, Debug, Default)]
pub struct Config {
    top: Vec<String>,
    health: Option<Health>,
    clusters: Vec<Cluster>,
    routes: Vec<Route>,
    tail: Vec<String>,
}

impl Config {
    /// An empty config: no tables (the gateway's defaults apply to anything left out).
    pub fn new() -> Config {
        Config::default()
    }

    /// Sets the global `[health]` table (SPEC section 3 `[health]`) to `health`; a second call
    /// replaces the first.
    pub fn health(mut self, health: Health) -> Config {
        self.health = Some(health);
        self
    }

    /// Adds table `[name]` with `lines` (`key = value` lines, newline-separated), e.g.
    /// `.table("limits", "max_connections = 2")` (SPEC section 3 `[server]`, `[limits]`, `[affinity]`).
    pub fn table(self, name: &str, lines: &str) -> Config {
        self.raw_top(&format!("[{name}]\n{lines}"))
    }

    /// Adds raw TOML text before `[health]`: whole tables the builder does not model. The text is
    /// written as given (a newline is added after it).
    pub fn raw_top(mut self, toml: &str) -> Config {
        self.top.push(toml.to_string());
        self
    }

    /// Adds raw TOML text after every route: the escape hatch for the rare shapes (e.g. a file with
    /// an error in it). Written as given, a newline after it.
    pub fn raw_tail(mut self, toml: &str) -> Config {
        self.tail.push(toml.to_string());
        self
    }

    /// Adds cluster `name` over `nodes`, each by its [`Mock::id`] and [`Mock::addr`], with no
    /// extra cluster lines (SPEC section 3 `[[clusters]]`).
    pub fn cluster(self, name: &str, nodes: &[&Mock]) -> Config {
        self.with_cluster(Cluster::new(name).mocks(nodes))
    }

    /// Adds cluster `name` over `nodes` given as (id, `host:port`) pairs, for hand-made nodes.
    pub fn cluster_addrs(self, name: &str, nodes: &[(&str, String)]) -> Config {
        self.with_cluster(Cluster::new(name).addrs(nodes))
    }

    /// Adds a cluster built with [`Cluster`] (extra lines, per-node lines).
    pub fn with_cluster(mut self, cluster: Cluster) -> Config {
        self.clusters.push(cluster);
        self
    }

    /// Adds `route` after the routes already added (routes match in file order, SPEC section 6).
    pub fn route(mut self, route: Route) -> Config {
        self.routes.push(route);
        self
    }

    /// The common shape: `health`, one cluster `c` over `nodes`, and `route` (usually
    /// [`Route::api`]). Further tables can still be added before [`Config::toml`].
    pub fn single(health: Health, nodes: &[&Mock], route: Route) -> Config {
        Config::new()
            .health(health)
            .cluster("c", nodes)
            .route(route)
    }

    /// As [`Config::single`] over hand-made nodes given as (id, `host:port`) pairs.
    pub fn single_addrs(health: Health, nodes: &[(&str, String)], route: Route) -> Config {
        Config::new()
            .health(health)
            .cluster_addrs("c", nodes)
            .route(route)
    }

    /// The config file text (TOML).
    pub fn toml(&self) -> String {
        let mut s = String::new();
        for t in &self.top {
            s.push_str(t);
            s.push('\n');
        }
        if let Some(h) = &self.health {
            s.push_str(&h.toml());
            s.push('\n');
        }
        for c in &self.clusters {
            s.push_str(&c.toml());
            s.push('\n');
        }
        for r in &self.routes {
            s.push_str(&r.toml());
            s.push('\n');
        }
        for t in &self.tail {
            s.push_str(t);
            s.push('\n');
        }
        s
    }
}

/// A `[health]` table (SPEC section 3 `[health]`, section 8): presets plus setters for each key.
///
/// Keys never set are left out, so the gateway's defaults apply to them.
#[derive(Clone, Debug, Default)]
pub struct Health {
    lines: Vec<String>,
}

impl Health {
    /// Probes by TCP connect (`kind = "tcp"`), no other key set.
    pub fn tcp() -> Health {
        Health::default().key("kind", "\"tcp\"")
    }

    /// HTTP probes (`GET /health`, the default kind), no key set.
    pub fn http() -> Health {
        Health::default()
    }

    /// Fast TCP probes: every 200 ms, 200 ms timeout, degrade/eject/recover after 2/3/2, no slow
    /// start. A mock's request count is then real traffic alone (TCP connects are not counted).
    pub fn tcp_fast() -> Health {
        Health::tcp().every("200ms", "200ms").fast_moves()
    }

    /// Fast HTTP probes (`GET /health`) with the timings of [`Health::tcp_fast`]; the same table as
    /// [`crate::FAST_HEALTH`], for nodes that are alive but failing.
    pub fn http_fast() -> Health {
        Health::http().every("200ms", "200ms").fast_moves()
    }

    /// TCP probes every 200 ms with a 200 ms timeout and the gateway's default thresholds.
    pub fn tcp_200ms() -> Health {
        Health::tcp().every("200ms", "200ms")
    }

    /// TCP probes every 60 s (1 s timeout), no slow start: a killed node stays "healthy" within a
    /// test until traffic finds out.
    pub fn tcp_never() -> Health {
        Health::tcp().every("60s", "1s").key("slow_start", "\"0s\"")
    }

    /// HTTP probes every 60 s (1 s timeout), no slow start: as [`Health::tcp_never`] for cases
    /// where an HTTP probe kind is wanted.
    pub fn http_never() -> Health {
        Health::http()
            .every("60s", "1s")
            .key("slow_start", "\"0s\"")
    }

    /// Sets `interval` and `timeout` to the given TOML durations (e.g. `"200ms"`).
    pub fn every(self, interval: &str, timeout: &str) -> Health {
        self.key("interval", &format!("\"{interval}\""))
            .key("timeout", &format!("\"{timeout}\""))
    }

    /// `degrade_after = 2`, `eject_after = 3`, `recover_after = 2`, `slow_start = "0s"`.
    fn fast_moves(self) -> Health {
        self.key("degrade_after", "2")
            .key("eject_after", "3")
            .key("recover_after", "2")
            .key("slow_start", "\"0s\"")
    }

    /// Adds `key = value`, `value` written as TOML as given (quote strings yourself).
    pub fn key(mut self, key: &str, value: &str) -> Health {
        self.lines.push(format!("{key} = {value}"));
        self
    }

    /// Adds raw `lines` to the table as given.
    pub fn line(mut self, lines: &str) -> Health {
        self.lines.push(lines.to_string());
        self
    }

    /// The `[health]` table text.
    pub fn toml(&self) -> String {
        let mut s = String::from("[health]\n");
        for l in &self.lines {
            s.push_str(l);
            s.push('\n');
        }
        s
    }
}

/// A `[[clusters]]` entry (SPEC section 3 `[[clusters]]`): a name, extra cluster lines, nodes.
#[derive(Clone, Debug)]
pub struct Cluster {
    name: String,
    lines: Vec<String>,
    nodes: Vec<(String, String, String)>,
}

impl Cluster {
    /// Cluster `name` with no nodes and no extra lines.
    pub fn new(name: &str) -> Cluster {
        Cluster {
            name: name.to_string(),
            lines: Vec::new(),
            nodes: Vec::new(),
        }
    }

    /// Adds an extra cluster line (e.g. `protocol = "h2c"`, `health = { kind = "tcp" }`), written
    /// as given before the nodes.
    pub fn line(mut self, line: &str) -> Cluster {
        self.lines.push(line.to_string());
        self
    }

    /// Adds node `id` at `addr` (`host:port`).
    pub fn node(self, id: &str, addr: &str) -> Cluster {
        self.node_with(id, addr, "")
    }

    /// Adds node `id` at `addr` with extra node lines `extra` (e.g. `weight = 2`,
    /// `metadata = { version = "v1" }`; newline-separated, written indented).
    pub fn node_with(mut self, id: &str, addr: &str, extra: &str) -> Cluster {
        self.nodes
            .push((id.to_string(), addr.to_string(), extra.to_string()));
        self
    }

    /// Adds every mock in `nodes` by its id and address.
    pub fn mocks(self, nodes: &[&Mock]) -> Cluster {
        nodes.iter().fold(self, |c, m| c.node(&m.id, &m.addr()))
    }

    /// Adds every (id, `host:port`) pair in `nodes`.
    pub fn addrs(self, nodes: &[(&str, String)]) -> Cluster {
        nodes.iter().fold(self, |c, (id, addr)| c.node(id, addr))
    }

    /// The `[[clusters]]` entry text.
    pub fn toml(&self) -> String {
        let mut s = format!("[[clusters]]\nname = \"{}\"\n", self.name);
        for l in &self.lines {
            s.push_str(l);
            s.push('\n');
        }
        for (id, addr, extra) in &self.nodes {
            s.push_str(&format!(
                "  [[clusters.nodes]]\n  id = \"{id}\"\n  addr = \"{addr}\"\n"
            ));
            for l in extra.lines().filter(|l| !l.trim().is_empty()) {
                s.push_str(&format!("  {}\n", l.trim()));
            }
        }
        s
    }
}

/// A `[[routes]]` entry (SPEC section 3 `[[routes]]`, section 6): an id, a cluster, a match and
/// extra lines.
#[derive(Clone, Debug)]
pub struct Route {
    id: String,
    cluster: String,
    prefix: Option<String>,
    lines: Vec<String>,
}

impl Route {
    /// Route `id` to `cluster` with no `match` line: it matches every request.
    pub fn catch_all(id: &str, cluster: &str) -> Route {
        Route {
            id: id.to_string(),
            cluster: cluster.to_string(),
            prefix: None,
            lines: Vec::new(),
        }
    }

    /// The scenarios' usual route: `api`, catch-all, to cluster `c`.
    pub fn api() -> Route {
        Route::catch_all("api", "c")
    }

    /// Route `id` to `cluster` for paths starting with `prefix` (`match = { path_prefix = .. }`).
    pub fn prefix(id: &str, prefix: &str, cluster: &str) -> Route {
        Route {
            prefix: Some(prefix.to_string()),
            ..Route::catch_all(id, cluster)
        }
    }

    /// `retries = n`: further nodes tried after a failed attempt (SPEC section 4).
    pub fn retries(self, n: u32) -> Route {
        self.line(&format!("retries = {n}"))
    }

    /// `timeout = "<t>"`, a TOML duration such as `"60s"`.
    pub fn timeout(self, t: &str) -> Route {
        self.line(&format!("timeout = \"{t}\""))
    }

    /// Adds raw route `lines` as given (e.g. `max_body = 1048576`, `on_all_down = "fail_open"`, a
    /// nested `[routes.canary]` table), written after the id, cluster and match.
    pub fn line(mut self, lines: &str) -> Route {
        self.lines.push(lines.to_string());
        self
    }

    /// The `[[routes]]` entry text.
    pub fn toml(&self) -> String {
        let mut s = format!(
            "[[routes]]\nid = \"{}\"\ncluster = \"{}\"\n",
            self.id, self.cluster
        );
        if let Some(p) = &self.prefix {
            s.push_str(&format!("match = {{ path_prefix = \"{p}\" }}\n"));
        }
        for l in &self.lines {
            s.push_str(l);
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_every_part_in_table_order() {
        let toml = Config::new()
            .table("limits", "max_connections = 2")
            .health(Health::tcp_fast())
            .with_cluster(Cluster::new("c").line("protocol = \"h2c\"").node_with(
                "a",
                "127.0.0.1:1",
                "weight = 2",
            ))
            .route(Route::prefix("r", "/x", "c").retries(2))
            .toml();
        assert_eq!(
            toml,
            "[limits]\nmax_connections = 2\n\
             [health]\nkind = \"tcp\"\ninterval = \"200ms\"\ntimeout = \"200ms\"\ndegrade_after = 2\neject_after = 3\nrecover_after = 2\nslow_start = \"0s\"\n\n\
             [[clusters]]\nname = \"c\"\nprotocol = \"h2c\"\n  [[clusters.nodes]]\n  id = \"a\"\n  addr = \"127.0.0.1:1\"\n  weight = 2\n\n\
             [[routes]]\nid = \"r\"\ncluster = \"c\"\nmatch = { path_prefix = \"/x\" }\nretries = 2\n\n"
        );
    }

    #[test]
    fn http_fast_is_the_fast_health_constant() {
        assert_eq!(Health::http_fast().toml(), crate::FAST_HEALTH);
    }
}
