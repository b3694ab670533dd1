//! The registry: every node and its live state (health, drain, in-flight count).
//!
//! Node *configuration* lives in the route table and is replaced whole on reload; node *runtime*
//! ([`NodeRuntime`]) lives here, keyed by node id, so health counters, in-flight counts and drain
//! state carry over a reload. Hot-path reads are atomics; transitions take a short mutex with no
//! `.await`. Spawns nothing itself: [`health::HealthChecker`] owns the probe tasks.

pub(crate) mod health;
mod node;
pub(crate) mod passive;
pub(crate) mod probe;
mod state;
mod transitions;
pub(crate) mod weight;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Semaphore, SemaphorePermit};
use tokio::time::Instant;

use crate::config::{HealthConfig, NodeConfig};
use crate::metrics::{Metrics, NodeLabels, TransitionLabels};

/// A node id (SPEC section 3: unique across clusters). Cheap to clone.
pub(crate) type NodeId = Arc<str>;

pub(crate) use node::{Node, NodeSettings};
use state::{health_name, HEALTH_DEGRADED, HEALTH_EJECTED, HEALTH_HEALTHY};
pub(crate) use state::{ChangeReason, NodeSignal, NodeState, ProbeEffect, ProbeResult};

#[derive(Debug, Default)]
struct Counters {
    consecutive_failures: u32,
    consecutive_successes: u32,
    /// True while every failure of the current streak was a probe timeout.
    timeout_streak: bool,
    /// Passive ejections since the last stable recovery (the backoff exponent).
    passive_ejections: u32,
    /// A passively ejected node is not recovered by probes before this instant.
    backoff_until: Option<Instant>,
    /// When the node last became healthy again.
    recovered_at: Option<Instant>,
    last_reason: String,
}

/// Live state of one node; survives table reloads (shared by node id).
#[derive(Debug)]
pub struct NodeRuntime {
    id: NodeId,
    health: AtomicU8,
    draining: AtomicBool,
    /// Milliseconds since the registry epoch when slow start began; 0 = not ramping.
    ramp_started_ms: AtomicU64,
    /// Milliseconds since the epoch (plus one) when the node last stopped being usable (ejected
    /// or draining); 0 = usable. The start of `hopping_latency_seconds` for hops it causes.
    unusable_since_ms: AtomicU64,
    consecutive_failures: AtomicU32,
    inflight: AtomicU64,
    /// Set by the first active probe result (readiness waits for the first round, SPEC section 11).
    probed: AtomicBool,
    /// Good answers from real traffic so far (see [`NodeRuntime::passive_mark`]).
    passive_successes: AtomicU64,
    /// Passive errors in a row (SPEC section 6 `passive_consecutive_errors`). Written only under
    /// the counters lock, like every streak; a good answer reads it without the lock and takes
    /// the lock only to clear a streak (no lock per proxied request).
    passive_errors: AtomicU32,
    counters: Mutex<Counters>,
    signal: watch::Sender<NodeSignal>,
    epoch: Instant,
    /// Cluster name of the live table (for transition logs and counters); updated on every build.
    cluster: Mutex<Arc<str>>,
    /// Where transitions are counted; `None` in unit tests.
    metrics: Option<Arc<Metrics>>,
    /// The nodes of its cluster in the newest table, for the passive-ejection cap; `None` until a
    /// table placed it (then no cap applies).
    peers: Mutex<Option<Arc<passive::Peers>>>,
    /// Admission of WebSocket re-dials to this node ([`NodeRuntime::redial_slot`]).
    redials: Semaphore,
}

/// Most WebSocket re-dials (connect plus handshake, until the node's answer head) in flight to one
/// node. A hop storm re-dials thousands of sockets in the same instant; past the node's listen
/// backlog its kernel drops the SYNs and each such socket waits for TCP's 1 s SYN retransmission.
/// Half of the smallest backlog in common use (128, Rust's `std` listener default) keeps a node's
/// accept queue from overflowing, and is still far more than a node needs to stay busy (a loopback
/// handshake takes well under a millisecond).
pub(crate) const REDIALS_IN_FLIGHT: usize = 64;

impl NodeRuntime {
    /// A runtime for node `id` of no registry or table (no metrics): for unit tests elsewhere
    /// in the crate that need a node's live state (drain, signal).
    #[cfg(test)]
    pub(crate) fn detached(id: &str) -> Arc<Self> {
        Arc::new(NodeRuntime::new(Arc::from(id), Arc::from("c"), None))
    }

    fn new(id: NodeId, cluster: Arc<str>, metrics: Option<Arc<Metrics>>) -> Self {
        let (signal, _) = watch::channel(NodeSignal {
            usable: true,
            drain_deadline: None,
        });
        NodeRuntime {
            cluster: Mutex::new(cluster),
            metrics,
            id,
            health: AtomicU8::new(HEALTH_HEALTHY),
            draining: AtomicBool::new(false),
            ramp_started_ms: AtomicU64::new(0),
            unusable_since_ms: AtomicU64::new(0),
            consecutive_failures: AtomicU32::new(0),
            inflight: AtomicU64::new(0),
            probed: AtomicBool::new(false),
            passive_successes: AtomicU64::new(0),
            passive_errors: AtomicU32::new(0),
            counters: Mutex::new(Counters::default()),
            signal,
            epoch: Instant::now(),
            peers: Mutex::new(None),
            redials: Semaphore::new(REDIALS_IN_FLIGHT),
        }
    }

    /// This node's id.
    pub fn id(&self) -> &NodeId {
        &self.id
    }

    /// The cluster this node belongs to in the live table.
    pub fn cluster(&self) -> Arc<str> {
        self.cluster
            .lock()
            .expect("cluster mutex is never poisoned: no panics while held")
            .clone()
    }

    /// Current state (draining wins over health).
    pub fn state(&self) -> NodeState {
        if self.draining.load(Ordering::Acquire) {
            return NodeState::Draining;
        }
        match self.health.load(Ordering::Acquire) {
            HEALTH_HEALTHY => NodeState::Healthy,
            HEALTH_DEGRADED => NodeState::Degraded,
            _ => NodeState::Ejected,
        }
    }

    /// Health percent at `now`; see [`Node::health_percent`].
    pub fn health_percent(&self, h: &HealthConfig, now: Instant) -> u32 {
        if self.draining.load(Ordering::Acquire) {
            return 0;
        }
        match self.health.load(Ordering::Acquire) {
            HEALTH_HEALTHY => {
                let started = self.ramp_started_ms.load(Ordering::Acquire);
                match h.slow_start {
                    Some(ramp) if started > 0 => {
                        let elapsed = now.saturating_duration_since(self.epoch).as_millis() as u64;
                        weight::slow_start_percent(
                            h.degraded_percent,
                            ramp,
                            Duration::from_millis(elapsed.saturating_sub(started)),
                        )
                    }
                    _ => 100,
                }
            }
            HEALTH_DEGRADED => u32::from(h.degraded_percent),
            _ => 0,
        }
    }

    /// Consecutive failed probes (or passive errors that ejected it).
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures.load(Ordering::Relaxed)
    }

    /// True once an active probe of this node has finished (passed or failed).
    pub fn probed(&self) -> bool {
        self.probed.load(Ordering::Acquire)
    }

    /// Requests and streams in flight on this node.
    pub fn inflight(&self) -> u64 {
        self.inflight.load(Ordering::Relaxed)
    }

    /// Counts one request in flight until the guard drops.
    pub fn start_request(self: &Arc<Self>) -> InflightGuard {
        self.inflight.fetch_add(1, Ordering::Relaxed);
        InflightGuard(self.clone())
    }

    /// Waits for one of the node's [`REDIALS_IN_FLIGHT`] re-dial slots; they are handed out in the
    /// order asked for (FIFO), and one is held until the returned permit drops.
    pub async fn redial_slot(&self) -> SemaphorePermit<'_> {
        self.redials
            .acquire()
            .await
            .expect("the re-dial semaphore is never closed")
    }

    /// Subscribes to usable/drain changes (long-lived connections use this to hop).
    pub fn subscribe(&self) -> watch::Receiver<NodeSignal> {
        self.signal.subscribe()
    }

    /// Current signal value.
    pub fn signal(&self) -> NodeSignal {
        *self.signal.borrow()
    }

    /// When the node last stopped being usable (ejected or draining), while it still is not.
    pub fn unusable_since(&self) -> Option<Instant> {
        match self.unusable_since_ms.load(Ordering::Acquire) {
            0 => None,
            // Stored plus one, so 0 stays free to mean "usable".
            ms => Some(self.epoch + Duration::from_millis(ms - 1)),
        }
    }

    fn mark_usable(&self, usable: bool) {
        if usable {
            self.unusable_since_ms.store(0, Ordering::Release);
        } else {
            let ms = Instant::now()
                .saturating_duration_since(self.epoch)
                .as_millis() as u64;
            let _ = self.unusable_since_ms.compare_exchange(
                0,
                ms.saturating_add(1),
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    fn publish(&self) {
        let usable = !self.draining.load(Ordering::Acquire)
            && self.health.load(Ordering::Acquire) != HEALTH_EJECTED;
        self.mark_usable(usable);
        self.signal.send_if_modified(|s| {
            let changed = s.usable != usable;
            s.usable = usable;
            changed
        });
    }
}

/// Decrements a node's in-flight count on drop.
#[derive(Debug)]
pub struct InflightGuard(Arc<NodeRuntime>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// All node runtimes by id. Shared by every route table generation.
#[derive(Debug)]
pub struct Registry {
    runtimes: Mutex<HashMap<NodeId, Arc<NodeRuntime>>>,
    metrics: Arc<Metrics>,
}

impl Registry {
    /// An empty registry.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Registry {
            runtimes: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// Builds a [`Node`] for a table, reusing the runtime of a node with the same id.
    /// Returns the node and whether its runtime is new.
    pub fn node(
        &self,
        cluster: &Arc<str>,
        cfg: &NodeConfig,
        settings: NodeSettings,
    ) -> (Arc<Node>, bool) {
        let mut map = self
            .runtimes
            .lock()
            .expect("registry mutex is never poisoned: no panics while held");
        let mut fresh = false;
        let runtime = map
            .entry(Arc::from(cfg.id.as_str()))
            .or_insert_with(|| {
                fresh = true;
                Arc::new(NodeRuntime::new(
                    Arc::from(cfg.id.as_str()),
                    cluster.clone(),
                    Some(self.metrics.clone()),
                ))
            })
            .clone();
        drop(map);
        *runtime
            .cluster
            .lock()
            .expect("cluster mutex is never poisoned: no panics while held") = cluster.clone();
        let node = Node {
            id: runtime.id.clone(),
            cluster: cluster.clone(),
            addr: cfg.addr.clone(),
            weight: cfg.weight,
            metadata: cfg.metadata.clone(),
            settings,
            runtime,
        };
        (Arc::new(node), fresh)
    }

    /// Tells each node of one cluster who its peers are (every table build; CASE-32 cap).
    pub fn set_peers(&self, nodes: &[Arc<Node>]) {
        let peers = Arc::new(passive::Peers::new(
            nodes.iter().map(|n| Arc::downgrade(&n.runtime)).collect(),
        ));
        for n in nodes {
            *n.runtime
                .peers
                .lock()
                .expect("peers mutex is never poisoned: no panics while held") =
                Some(peers.clone());
        }
    }

    /// The runtime of node `id`, if known.
    pub fn get(&self, id: &str) -> Option<Arc<NodeRuntime>> {
        self.runtimes
            .lock()
            .expect("registry mutex is never poisoned: no panics while held")
            .get(id)
            .cloned()
    }

    /// Forgets runtimes whose ids are not in `keep` (nodes removed by a reload, after their drain).
    pub fn retain(&self, keep: &dyn Fn(&str) -> bool) {
        self.runtimes
            .lock()
            .expect("registry mutex is never poisoned: no panics while held")
            .retain(|id, _| keep(id));
    }

    /// Shared metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_cap;
#[cfg(test)]
mod tests_passive;
