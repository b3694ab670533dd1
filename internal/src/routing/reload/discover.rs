//! [`Routing::set_discovered`]: a changed DNS answer of a discovery cluster (SPEC section 12) becomes a
//! route table of its own; new nodes are probed with their cluster's health check before the swap
//! (see the [`super::super::discovered`] module docs).

use std::collections::HashSet;
use std::sync::Arc;

use futures_util::StreamExt;
use tokio::time::Instant;

use crate::config::Config;
use crate::registry::probe::{probe, ProbeOutcome};

use super::super::discovered::DnsAnswer;
use super::super::table::RouteTable;
use super::{Routing, RELOAD_PROBE_CONCURRENCY};

impl Routing {
    /// Takes a discovery cluster's good `answer`; records it and, when the node set changed,
    /// swaps in a table with the new set (module docs: new nodes probed first, vanished ones
    /// drain). Returns the new generation, or `None` when the set is unchanged or the cluster no
    /// longer asks for the answer's name and port.
    pub async fn set_discovered(&self, cluster: &str, answer: DnsAnswer) -> Option<u64> {
        let (name, port) = (answer.name.clone(), answer.port);
        let _guard = self.lock.lock().await;
        let live = self.table();
        let wanted = live
            .config
            .clusters
            .iter()
            .find(|c| c.name == cluster)
            .and_then(|c| c.discovery.as_ref())
            .is_some_and(|d| d.name == name && d.port == port);
        if !wanted {
            return None;
        }
        self.discovered.record(cluster, answer);
        let mut cfg = (*live.config).clone();
        self.discovered.fill(&mut cfg);
        // Compared with the live table, not the previous answer, so an update interrupted before
        // its swap is completed by the next answer.
        let nodes_of = |c: &Config| {
            c.clusters
                .iter()
                .find(|c| c.name == cluster)
                .map(|c| c.nodes.clone())
        };
        if nodes_of(&cfg) == nodes_of(&live.config) {
            return None;
        }
        let failed = probe_new_nodes(&live, &cfg, cluster).await;
        let table = self.build_next(cfg, &live);
        let now = Instant::now();
        for (id, why) in &failed {
            if let Some(n) = table.node(id) {
                tracing::warn!(cluster, node = %id, reason = %why, "discovered node failed its first probe; it starts ejected");
                n.runtime
                    .eject(&n.settings.health, &format!("first probe: {why}"), now);
            }
        }
        let old: HashSet<&str> = live
            .clusters
            .get(cluster)
            .map(|c| c.nodes.iter().map(|n| &*n.id).collect())
            .unwrap_or_default();
        let new: HashSet<&str> = table
            .clusters
            .get(cluster)
            .map(|c| c.nodes.iter().map(|n| &*n.id).collect())
            .unwrap_or_default();
        let added: Vec<&str> = new.difference(&old).copied().collect();
        let removed: Vec<&str> = old.difference(&new).copied().collect();
        tracing::info!(
            cluster,
            %name,
            ?added,
            ?removed,
            nodes = new.len(),
            "discovered nodes changed"
        );
        let g = self.commit_discovered(table, &live);
        Some(g)
    }
}

/// Probes, with their cluster's health check, the nodes of `cluster` in `cfg` that `live` lacks
/// at the same address; returns the failed ones with the reason.
async fn probe_new_nodes(live: &RouteTable, cfg: &Config, cluster: &str) -> Vec<(String, String)> {
    let Some(c) = cfg.clusters.iter().find(|c| c.name == cluster) else {
        return Vec::new();
    };
    let fresh: Vec<(String, String)> = c
        .nodes
        .iter()
        .filter(|n| live.node(&n.id).is_none_or(|old| old.addr != n.addr))
        .map(|n| (n.id.clone(), n.addr.clone()))
        .collect();
    let (protocol, health) = (c.protocol, Arc::new(c.health.clone()));
    let tls = c.tls.clone();
    let probes = fresh.into_iter().map(move |(id, addr)| {
        let (health, tls) = (health.clone(), tls.clone());
        async move {
            let outcome = probe(&addr, &id, protocol, tls.as_deref(), &health).await;
            match outcome {
                ProbeOutcome::Pass => None,
                ProbeOutcome::Fail(why) => Some((id, why)),
                ProbeOutcome::Timeout(t) => Some((id, format!("timeout after {t:?}"))),
            }
        }
    });
    futures_util::stream::iter(probes)
        .buffer_unordered(RELOAD_PROBE_CONCURRENCY)
        .filter_map(std::future::ready)
        .collect()
        .await
}
