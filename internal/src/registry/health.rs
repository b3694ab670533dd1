//! The health checker: one probe task per node, jittered, running concurrently.
//!
//! [`HealthChecker::reconcile`] is called with every new route table: it starts tasks for new
//! nodes, restarts tasks whose settings changed and cancels tasks of removed nodes. Each task owns a
//! cancellation token; [`HealthChecker::shutdown`] cancels and joins them all. Probe failures are
//! logged at debug; state transitions (in [`super::NodeRuntime`]) at info.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::probe::{probe, ProbeOutcome};
use super::{Node, NodeId};
use crate::config::{HealthConfig, Protocol};

struct Task {
    key: (String, Protocol, HealthConfig),
    cancel: CancellationToken,
    handle: JoinHandle<()>,
}

/// Owns the probe tasks of every node in the live table.
#[derive(Default)]
pub struct HealthChecker {
    tasks: Mutex<HashMap<NodeId, Task>>,
}

impl std::fmt::Debug for HealthChecker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HealthChecker").finish_non_exhaustive()
    }
}

impl HealthChecker {
    /// A checker with no tasks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes the running tasks match `nodes` (every node of the live table).
    pub fn reconcile(&self, nodes: &[Arc<Node>]) {
        let mut tasks = self.tasks.lock().expect("health task map is never poisoned: no panics while held");
        let mut keep: HashMap<NodeId, ()> = HashMap::new();
        for node in nodes {
            keep.insert(node.id.clone(), ());
            let key = (node.addr.clone(), node.settings.protocol, node.settings.health.clone());
            if let Some(t) = tasks.get(&node.id) {
                if t.key == key && !t.handle.is_finished() {
                    continue;
                }
                t.cancel.cancel();
            }
            let cancel = CancellationToken::new();
            let handle = tokio::spawn(run(node.clone(), cancel.clone()));
            tasks.insert(node.id.clone(), Task { key, cancel, handle });
        }
        tasks.retain(|id, t| {
            let k = keep.contains_key(id);
            if !k {
                t.cancel.cancel();
            }
            k
        });
    }

    /// Cancels every probe task and waits for them to end.
    pub async fn shutdown(&self) {
        let handles: Vec<_> = {
            let mut tasks = self.tasks.lock().expect("health task map is never poisoned: no panics while held");
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
    Duration::from_millis(if max == 0 { 0 } else { rand::rng().random_range(0..=max) })
}

async fn run(node: Arc<Node>, cancel: CancellationToken) {
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
            o = probe(&node.addr, node.settings.protocol, h) => o,
        };
        let now = Instant::now();
        match &outcome {
            ProbeOutcome::Pass => {
                node.runtime.record_probe(h, true, "ok", now);
            }
            ProbeOutcome::Fail(why) => {
                tracing::debug!(node = %node.id, cluster = %node.cluster, reason = %why, "probe failed");
                node.runtime.record_probe(h, false, why, now);
            }
        }
        next = now + interval_with_jitter(h);
    }
}

fn interval_with_jitter(h: &HealthConfig) -> Duration {
    // Only ever shorten (by up to 10 %): the SPEC's timing promise counts whole intervals.
    let base = h.interval;
    let max = base.as_millis() as u64 / 10;
    let j = if max == 0 { 0 } else { rand::rng().random_range(0..=max) };
    base.saturating_sub(Duration::from_millis(j))
}
