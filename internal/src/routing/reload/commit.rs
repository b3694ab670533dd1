//! The swap itself: publishing a table, keeping the rollback target, draining the nodes a table
//! no longer has and undraining those back in it (SPEC section 5 and 6).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Config;
use crate::registry::NodeId;

use super::super::table::RouteTable;
use super::{Routing, DEFAULT_REMOVED_DRAIN};

impl Routing {
    /// The table that follows `live`, built from `cfg`: the next generation, with what is new
    /// against `live` warming up ([`RouteTable::build`]). Not yet published ([`Self::commit`] does).
    pub(super) fn build_next(&self, cfg: Config, live: &RouteTable) -> RouteTable {
        RouteTable::build(
            Arc::new(cfg),
            &self.registry,
            live.generation + 1,
            Some(live),
        )
    }

    /// Publishes `table` in place of `live`, keeps `live`'s config as the rollback target, drains
    /// nodes no longer in the table and undrains nodes back in it. Returns the new generation.
    pub(super) fn commit(&self, table: RouteTable, live: &RouteTable) -> u64 {
        *self
            .previous
            .lock()
            .expect("previous mutex is never poisoned") = Some(live.config.clone());
        self.commit_inner(table, live)
    }

    /// As [`Self::commit`] for a discovery change: the rollback target stays (a rollback undoes
    /// a config change, never a DNS answer).
    pub(super) fn commit_discovered(&self, table: RouteTable, live: &RouteTable) -> u64 {
        self.commit_inner(table, live)
    }

    fn commit_inner(&self, table: RouteTable, live: &RouteTable) -> u64 {
        let generation = table.generation;
        let new_ids: HashSet<NodeId> = table.nodes().iter().map(|n| n.id.clone()).collect();
        let now = Instant::now();
        let mut removed = self
            .removed_by_reload
            .lock()
            .expect("removed mutex is never poisoned");
        // Nodes back in the table after a removal take work again.
        for id in &new_ids {
            if removed.remove(id).is_some() {
                if let Some(rt) = self.registry.get(id) {
                    rt.undrain();
                }
            }
        }
        self.health.reconcile(&table.nodes());
        let table = Arc::new(table);
        self.live.store(table.clone());
        self.swapped.send_replace(generation);
        self.metrics
            .generation
            .set(i64::try_from(generation).unwrap_or(i64::MAX));
        tracing::info!(
            generation,
            routes = table.routes.len(),
            nodes = new_ids.len(),
            "route table swapped"
        );
        // Removed nodes drain like an operator drain (SPEC section 5).
        for n in live.nodes() {
            if !new_ids.contains(&n.id) && !removed.contains_key(&n.id) {
                let period = removed_drain_period(live, &n.cluster);
                let deadline = now + period;
                removed.insert(n.id.clone(), deadline);
                tracing::info!(node = %n.id, drain_ms = period.as_millis() as u64, "node removed by reload; draining");
                n.runtime.start_drain(deadline);
            }
        }
        // Forget removed nodes whose drain is over and that have nothing in flight.
        removed.retain(|id, deadline| {
            *deadline > now || self.registry.get(id).is_some_and(|rt| rt.inflight() > 0)
        });
        self.registry
            .retain(&|id| new_ids.contains(id) || removed.contains_key(id));
        generation
    }
}

/// How long a node of `cluster` in `live` drains once it leaves the table: its cluster's
/// `discovery.drain_period` for a discovery cluster, else [`DEFAULT_REMOVED_DRAIN`].
fn removed_drain_period(live: &RouteTable, cluster: &str) -> Duration {
    live.config
        .clusters
        .iter()
        .find(|c| c.name == cluster)
        .and_then(|c| c.discovery.as_ref())
        .map_or(DEFAULT_REMOVED_DRAIN, |d| d.drain_period)
}
