//! The health checker: one probe task per node, jittered, running concurrently.
//!
//! [`HealthChecker::reconcile`] is called with every new route table: it starts tasks for new
//! nodes, restarts tasks whose settings changed and cancels tasks of removed nodes. Each task owns a
//! cancellation token; [`HealthChecker::shutdown`] cancels and joins them all. Probe failures are
//! logged at debug; state transitions (in [`super::NodeRuntime`]) at info.
//!
//! # Guard against a gateway-side timeout storm
//!
//! A gateway that is itself starved (CPU, file descriptors, a stalled runtime) sees every probe
//! time out at once, and would eject every node of a cluster although the nodes are fine. Two
//! defences:
//!
//! - probes share a bounded concurrency ([`MAX_CONCURRENT_PROBES`] permits); a probe's `timeout`
//!   starts only once it holds a permit, so waiting for a permit never counts as a node timeout;
//! - **the last-node rule**: when a probe *timeout* would eject a node whose failure streak is made
//!   of timeouts only, and every *other* node of its cluster is already unusable (ejected or
//!   draining) and also timed out on its latest probe within the same window
//!   ([`storm::storm_window`]: two intervals plus one timeout), the whole cluster is failing by timeout in
//!   the same interval. That is treated as the gateway's own problem: the node is kept degraded
//!   instead of ejected (one WARN per storm). Any non-timeout failure (status, body, refused
//!   connect) or passive ejection still ejects it, and a cluster with a single node never loses it
//!   to probe timeouts alone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

mod storm;

use super::probe::{probe, ProbeOutcome};
use super::{Node, NodeId};
use crate::config::{HealthConfig, Protocol};
use storm::{observe, ClusterView};

/// Probes in flight at once across all nodes: enough for hundreds of nodes at second intervals,
/// few enough that a probe burst cannot starve the data plane of sockets or CPU.
pub(crate) const MAX_CONCURRENT_PROBES: usize = 64;

struct Task {
    key: (
        String,
        Protocol,
        Option<Arc<crate::tls::client::ClusterTls>>,
        HealthConfig,
        Arc<str>,
    ),
    cancel: CancellationToken,
    handle: JoinHandle<()>,
}

/// Owns the probe tasks of every node in the live table.
pub(crate) struct HealthChecker {
    tasks: Mutex<HashMap<NodeId, Task>>,
    clusters: Mutex<HashMap<Arc<str>, Arc<ClusterView>>>,
    permits: Arc<Semaphore>,
}

impl Default for HealthChecker {
    fn default() -> Self {
        HealthChecker {
            tasks: Mutex::default(),
            clusters: Mutex::default(),
            permits: Arc::new(Semaphore::new(MAX_CONCURRENT_PROBES)),
        }
    }
}

impl std::fmt::Debug for HealthChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthChecker").finish_non_exhaustive()
    }
}

impl HealthChecker {
    /// A checker with no tasks.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Makes the running tasks match `nodes` (every node of the live table), and the per-cluster
    /// views of the timeout-storm guard match the table's clusters.
    pub(crate) fn reconcile(&self, nodes: &[Arc<Node>]) {
        let views = self.reconcile_views(nodes);
        let mut tasks = self
            .tasks
            .lock()
            .expect("health task map is never poisoned: no panics while held");
        let mut keep: HashMap<NodeId, ()> = HashMap::new();
        for node in nodes {
            keep.insert(node.id.clone(), ());
            let key = (
                node.addr.clone(),
                node.settings.protocol,
                node.settings.tls.clone(),
                node.settings.health.clone(),
                node.cluster.clone(),
            );
            if let Some(t) = tasks.get(&node.id) {
                if t.key == key && !t.handle.is_finished() {
                    continue;
                }
                t.cancel.cancel();
            }
            let cancel = CancellationToken::new();
            let view = views
                .get(&node.cluster)
                .cloned()
                .expect("every node's cluster has a view: built from the same list");
            let handle = tokio::spawn(run(
                node.clone(),
                view,
                self.permits.clone(),
                cancel.clone(),
            ));
            tasks.insert(
                node.id.clone(),
                Task {
                    key,
                    cancel,
                    handle,
                },
            );
        }
        tasks.retain(|id, t| {
            let k = keep.contains_key(id);
            if !k {
                t.cancel.cancel();
            }
            k
        });
    }

    /// Updates the cluster views' membership (keeping the latest probe of nodes that stay).
    fn reconcile_views(&self, nodes: &[Arc<Node>]) -> HashMap<Arc<str>, Arc<ClusterView>> {
        let mut clusters = self
            .clusters
            .lock()
            .expect("cluster view map is never poisoned: no panics while held");
        let mut wanted: HashMap<Arc<str>, Vec<&Arc<Node>>> = HashMap::new();
        for n in nodes {
            wanted.entry(n.cluster.clone()).or_default().push(n);
        }
        clusters.retain(|name, _| wanted.contains_key(name));
        for (name, members) in &wanted {
            let view = clusters.entry(name.clone()).or_default();
            let mut m = view
                .members
                .lock()
                .expect("cluster view mutex is never poisoned: no panics while held");
            let old = std::mem::take(&mut *m);
            for n in members {
                let last = old.get(&n.id).and_then(|(_, l)| *l);
                m.insert(n.id.clone(), (n.runtime.clone(), last));
            }
        }
        clusters.clone()
    }

    /// Cancels every probe task and waits for them to end.
    pub(crate) async fn shutdown(&self) {
        let handles: Vec<_> = {
            let mut tasks = self
                .tasks
                .lock()
                .expect("health task map is never poisoned: no panics while held");
            tasks
                .drain()
                .map(|(_, t)| {
                    t.cancel.cancel();
                    t.handle
                })
                .collect()
        };
        for h in handles {
            // A probe task that panicked has nothing left to clean up; its panic was already reported.
            let _ = h.await;
        }
    }
}

/// Up to 20 % of the interval of random delay, so probes of many nodes do not fire in lockstep.
fn jitter(interval: Duration) -> Duration {
    let max = interval.as_millis() as u64 / 5;
    Duration::from_millis(if max == 0 {
        0
    } else {
        rand::rng().random_range(0..=max)
    })
}

async fn run(
    node: Arc<Node>,
    view: Arc<ClusterView>,
    permits: Arc<Semaphore>,
    cancel: CancellationToken,
) {
    let h = &node.settings.health;
    // First probe soon (jittered) so a dead node at start-up is seen within one interval.
    let mut next = Instant::now() + jitter(h.interval);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep_until(next) => {}
        }
        let outcome = tokio::select! {
            _ = cancel.cancelled() => return,
            o = probe_with_permit(&node, &permits) => o,
        };
        let Some(outcome) = outcome else { return };
        let now = Instant::now();
        observe(&node, &view, &outcome, now);
        next = now + interval_with_jitter(h);
    }
}

/// Runs one probe once a permit is free; the probe's own timeout starts after the wait.
/// `None` if the semaphore is closed (never, while the checker lives).
async fn probe_with_permit(node: &Node, permits: &Semaphore) -> Option<ProbeOutcome> {
    let _permit = permits.acquire().await.ok()?;
    Some(
        probe(
            &node.addr,
            &node.id,
            node.settings.protocol,
            node.settings.tls.as_deref(),
            &node.settings.health,
        )
        .await,
    )
}

fn interval_with_jitter(h: &HealthConfig) -> Duration {
    // Only ever shorten (by up to 10 %): the SPEC's timing promise counts whole intervals.
    let base = h.interval;
    let max = base.as_millis() as u64 / 10;
    let j = if max == 0 {
        0
    } else {
        rand::rng().random_range(0..=max)
    };
    base.saturating_sub(Duration::from_millis(j))
}
