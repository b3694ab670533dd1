//! The pre-swap probe of a reload (see the [`super`] module docs): every node new in the table gets
//! a bounded TCP connect probe; more than half failing refuses the reload, the failing rest start
//! ejected.

use std::collections::HashMap;

use futures_util::StreamExt;
use tokio::time::Instant;

use crate::config::{Config, ConfigIssue};
use crate::registry::probe::connect_probe;

use super::super::table::RouteTable;
use super::{ReloadError, Routing, DEFAULT_RELOAD_PROBE_TIMEOUT, RELOAD_PROBE_CONCURRENCY};

impl Routing {
    /// Applies `cfg` (discovered nodes filled in) after the pre-swap probe; returns the new
    /// generation. Called with the reload lock held.
    ///
    /// # Errors
    /// [`ReloadError::ProbeFailed`]; the live table stays.
    pub(super) async fn apply_locked(&self, mut cfg: Config) -> Result<u64, ReloadError> {
        self.discovered.fill(&mut cfg);
        let live = self.live.load_full();
        let to_probe = nodes_to_probe(&live, &cfg);
        let total = to_probe.len();
        let probes =
            futures_util::stream::iter(to_probe.into_iter().map(|(key, id, addr)| async move {
                let r = connect_probe(&addr, DEFAULT_RELOAD_PROBE_TIMEOUT).await;
                (key, id, addr, r)
            }))
            .buffer_unordered(RELOAD_PROBE_CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        let failed: Vec<_> = probes
            .into_iter()
            .filter_map(|(key, id, addr, r)| r.err().map(|e| (key, id, addr, e)))
            .collect();
        if failed.len() * 2 > total {
            self.metrics.reload("probe_failed");
            let issues = failed
                .iter()
                .map(|(key, id, addr, e)| ConfigIssue {
                    key: key.clone(),
                    line: 0,
                    column: 0,
                    message: format!("node {id} ({addr}): connect probe failed: {e}"),
                })
                .collect();
            let err = ReloadError::ProbeFailed {
                failed: failed.len(),
                total,
                issues,
            };
            tracing::warn!(error = %err, failed = ?failed.iter().map(|f| f.1.as_str()).collect::<Vec<_>>(), "reload refused; the live table stays");
            return Err(err);
        }
        let table = self.build_next(cfg, &live);
        // Eject before the swap: no request of the new table may reach a node that did not connect.
        let now = Instant::now();
        for (_, id, addr, e) in &failed {
            if let Some(n) = table.node(id) {
                tracing::warn!(node = %id, addr = %addr, error = %e, "new node failed its connect probe; it starts ejected");
                n.runtime.eject(
                    &n.settings.health,
                    &format!("connect probe failed: {e}"),
                    now,
                );
            }
        }
        let g = self.commit(table, &live);
        self.metrics.reload("ok");
        Ok(g)
    }
}

/// Nodes of `cfg` that `live` does not have at the same address: `(key, id, addr)`.
fn nodes_to_probe(live: &RouteTable, cfg: &Config) -> Vec<(String, String, String)> {
    let old: HashMap<&str, &str> = live
        .config
        .clusters
        .iter()
        .flat_map(|c| c.nodes.iter().map(|n| (n.id.as_str(), n.addr.as_str())))
        .collect();
    cfg.clusters
        .iter()
        .enumerate()
        .flat_map(|(i, c)| c.nodes.iter().enumerate().map(move |(j, n)| (i, j, n)))
        .filter(|(_, _, n)| old.get(n.id.as_str()) != Some(&n.addr.as_str()))
        .map(|(i, j, n)| {
            (
                format!("clusters[{i}].nodes[{j}]"),
                n.id.clone(),
                n.addr.clone(),
            )
        })
        .collect()
}
