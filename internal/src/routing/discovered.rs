//! Nodes that come from DNS discovery (SPEC section 12), as routing sees them: the last good
//! answer of every discovery cluster ([`Discovered`]) and [`super::reload::Routing::set_discovered`], which
//! turns a changed answer into a new route table.
//!
//! - Every table built from a config (start, file reload, rollback, a discovery change) has the
//!   nodes of its discovery clusters filled in from the last good answer ([`Discovered::fill`]),
//!   so a file reload or a rollback never loses discovered nodes, and a discovery change never
//!   loses a reload. An answer is used only while the cluster still asks for the same name and
//!   port; `weight` and `metadata` come from the cluster's current `discovery` table.
//! - A node that appears is probed with its cluster's own health check before the swap: one that
//!   fails starts ejected and recovers through its probes (no request reaches it before). A change
//!   is never refused: DNS is the source of truth for membership, probes for health.
//! - A node that disappears drains for the cluster's `discovery.drain_period` (SPEC section 5).
//! - A change builds a new generation but is not a reload: it does not count in
//!   `gateway_reloads_total` and does not replace the rollback target.
//!
//! Resolving is not done here (that is [`crate::discovery`], above routing), nor probing (that is
//! `reload/discover.rs`): this module never touches the network.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

use crate::config::{ClusterConfig, Config, NodeConfig};

/// A good answer for one discovery cluster (SPEC section 12); the last one of each is kept.
#[derive(Debug, Clone)]
pub struct DnsAnswer {
    /// The DNS name it was resolved for.
    pub name: String,
    /// The port of every node it names.
    pub port: u16,
    /// Addresses, sorted and unique.
    pub ips: BTreeSet<IpAddr>,
    /// Unix ms of the resolution.
    pub resolved_ms: u64,
}

/// Where a node of the live table comes from (`GET /admin/nodes` fields `source`, `last_resolved_ms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeSource {
    /// `[[clusters.nodes]]` in the file (or `--node`).
    Static,
    /// DNS discovery of `name`; `resolved_ms` = unix ms of its last successful resolution.
    Dns {
        /// The DNS name.
        name: String,
        /// Unix milliseconds.
        resolved_ms: u64,
    },
}

/// The last good answer of every discovery cluster, by cluster name.
#[derive(Debug, Default)]
pub(crate) struct Discovered {
    answers: Mutex<HashMap<String, DnsAnswer>>,
}

impl Discovered {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, DnsAnswer>> {
        self.answers
            .lock()
            .expect("discovered mutex is never poisoned: no panics while held")
    }

    /// Records `answer` as the last good one of `cluster`.
    pub(super) fn record(&self, cluster: &str, answer: DnsAnswer) {
        self.lock().insert(cluster.to_string(), answer);
    }

    /// Takes a config; sets the nodes of each of its discovery clusters to the last good answer
    /// for that cluster's name and port (none yet: no nodes). A discovered id already used by
    /// another node (static or discovered in an earlier cluster) is skipped with a WARN, since ids
    /// are unique across clusters.
    pub(crate) fn fill(&self, cfg: &mut Config) {
        let answers = self.lock().clone();
        let mut taken: HashSet<String> = cfg
            .clusters
            .iter()
            .filter(|c| c.discovery.is_none())
            .flat_map(|c| c.nodes.iter().map(|n| n.id.clone()))
            .collect();
        for c in cfg.clusters.iter_mut() {
            let Some(d) = &c.discovery else { continue };
            let ips = answers
                .get(&c.name)
                .filter(|a| a.name == d.name && a.port == d.port)
                .map(|a| a.ips.clone())
                .unwrap_or_default();
            c.nodes = ips
                .into_iter()
                .map(|ip| node_config(c, ip))
                .filter(|n| {
                    let fresh = taken.insert(n.id.clone());
                    if !fresh {
                        tracing::warn!(cluster = %c.name, node = %n.id, "discovered node id is already used by another cluster; skipped (node ids are unique across clusters)");
                    }
                    fresh
                })
                .collect();
        }
    }

    /// Takes a cluster and node id of the live table; returns where the node comes from.
    pub(crate) fn source(&self, cfg: &Config, cluster: &str, id: &str) -> NodeSource {
        let Some(d) = cfg
            .clusters
            .iter()
            .find(|c| c.name == cluster)
            .and_then(|c| c.discovery.as_ref())
        else {
            return NodeSource::Static;
        };
        let resolved_ms = self
            .lock()
            .get(cluster)
            .filter(|a| a.ips.iter().any(|ip| node_id(*ip, a.port) == id))
            .map_or(0, |a| a.resolved_ms);
        NodeSource::Dns {
            name: d.name.clone(),
            resolved_ms,
        }
    }
}

/// The id (and address) of the node at `ip`: `<ip>:<port>`, IPv6 in brackets.
pub(crate) fn node_id(ip: IpAddr, port: u16) -> String {
    SocketAddr::new(ip, port).to_string()
}

fn node_config(c: &ClusterConfig, ip: IpAddr) -> NodeConfig {
    let d = c
        .discovery
        .as_ref()
        .expect("called for discovery clusters only");
    let id = node_id(ip, d.port);
    NodeConfig {
        addr: id.clone(),
        id,
        weight: d.weight,
        metadata: d.metadata.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load_str;

    fn cfg() -> Config {
        load_str(
            "[[clusters]]\nname = \"s\"\n  [[clusters.nodes]]\n  id = \"10.0.0.1:80\"\n  addr = \"10.0.0.1:80\"\n[[clusters]]\nname = \"d\"\ndiscovery = { kind = \"dns\", name = \"svc.test\", port = 80, weight = 7, metadata = { version = \"v2\" } }\n[[routes]]\nid = \"r\"\ncluster = \"d\"\n",
            "t.toml",
        )
        .expect("valid")
    }

    fn answer(name: &str, ips: &[&str]) -> DnsAnswer {
        DnsAnswer {
            name: name.into(),
            port: 80,
            ips: ips.iter().map(|s| s.parse().expect("ip")).collect(),
            resolved_ms: 42,
        }
    }

    #[test]
    fn fill_uses_the_answer_for_the_same_name_and_skips_taken_ids() {
        let d = Discovered::default();
        let mut c = cfg();
        d.fill(&mut c);
        assert!(c.clusters[1].nodes.is_empty(), "no answer yet: no nodes");
        d.lock().insert(
            "d".into(),
            answer("svc.test", &["10.0.0.2", "10.0.0.1", "::1"]),
        );
        d.fill(&mut c);
        let ids: Vec<_> = c.clusters[1].nodes.iter().map(|n| n.id.as_str()).collect();
        // 10.0.0.1:80 is the static cluster's: skipped.
        assert_eq!(ids, ["10.0.0.2:80", "[::1]:80"]);
        let n = &c.clusters[1].nodes[0];
        assert_eq!((n.addr.as_str(), n.weight), ("10.0.0.2:80", 7));
        assert_eq!(n.metadata.get("version").map(String::as_str), Some("v2"));
        assert_eq!(
            d.source(&c, "d", "10.0.0.2:80"),
            NodeSource::Dns {
                name: "svc.test".into(),
                resolved_ms: 42
            }
        );
        assert_eq!(d.source(&c, "s", "10.0.0.1:80"), NodeSource::Static);
        // An answer for another name (the cluster was re-pointed) is not used.
        d.lock()
            .insert("d".into(), answer("old.test", &["10.0.0.3"]));
        d.fill(&mut c);
        assert!(c.clusters[1].nodes.is_empty());
    }
}
