//! Operator drains, shared by every replica on one Redis (SPEC sections 5 and 7).
//!
//! [`Drains`] is what `POST /admin/nodes/{id}/drain` and `/undrain` call. It applies the drain to
//! the local node at once (no new work; long-lived connections hop or get hints spread over the
//! period, closed at the deadline) and, with the Redis store, writes `<prefix>drain:<node-id>` and
//! publishes on `<prefix>events` (schema in `hopper::affinity::redis::events`). [`Drains::run`]
//! applies what other replicas publish, with the same Unix-ms deadline, and re-reads the keys after
//! every (re)subscription and every [`RESYNC_INTERVAL`] (nodes added by a reload, missed messages).
//! [`Drains::sync`] reads them once at start-up, before traffic is served, so a replica started
//! mid-drain drains too. With the memory store drains stay local.
//!
//! Deadlines cross replicas as Unix milliseconds; each replica maps one onto its monotonic clock
//! when it applies it, so replicas agree to within their wall clocks' skew (keep them in NTP).
//! Owns no task itself: the server spawns [`Drains::run`]. Never holds a lock across an await.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::drain;
use crate::hopper::affinity::redis::{DrainRecord, EventMessage, FleetEvent};
use crate::hopper::{AffinityStore, Hopper};
use crate::registry::{Node, NodeId};
use crate::routing::reload::Routing;

/// How often the drain keys are re-read even without a resubscription: picks up drains of nodes
/// a reload added and anything a lost message missed, at one `GET` per node per interval.
pub(crate) const RESYNC_INTERVAL: Duration = Duration::from_secs(5);

/// A drain this replica applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Applied {
    rec: DrainRecord,
    /// Stored in Redis (so a missing key later means another replica undrained it).
    shared: bool,
}

/// Applies and shares operator drains; see the module docs.
#[derive(Debug)]
pub(crate) struct Drains {
    routing: Arc<Routing>,
    hopper: Arc<Hopper>,
    applied: Mutex<HashMap<NodeId, Applied>>,
}

/// The current Unix time in milliseconds (0 before 1970, which no deployed clock reads).
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The monotonic instant of Unix time `deadline_ms`, `now_ms` being the Unix time at `now`.
fn instant_of(deadline_ms: u64, now_ms: u64, now: Instant) -> Instant {
    now + Duration::from_millis(deadline_ms.saturating_sub(now_ms))
}

impl Drains {
    /// Drains over `routing`'s nodes, shared through `hopper`'s store when it is Redis.
    pub(crate) fn new(routing: Arc<Routing>, hopper: Arc<Hopper>) -> Self {
        Drains {
            routing,
            hopper,
            applied: Mutex::new(HashMap::new()),
        }
    }

    fn applied(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, Applied>> {
        self.applied
            .lock()
            .expect("drains mutex is never poisoned: no panics while held")
    }

    /// The shared deadline (Unix ms) of `node`'s operator drain, if it is draining by one.
    pub(crate) fn deadline_ms(&self, node: &Node) -> Option<u64> {
        if !node.runtime.is_draining() {
            return None;
        }
        self.applied().get(&node.id).map(|a| a.rec.deadline_ms)
    }

    /// Drains `node` for `period` here and, with Redis, on every replica. Returns the record
    /// (deadline in Unix ms) and whether Redis took it (false: memory store, or Redis down, when
    /// the drain stays local).
    pub(crate) async fn drain(&self, node: &Arc<Node>, period: Duration) -> (DrainRecord, bool) {
        let now_ms = unix_ms();
        let period_ms = u64::try_from(period.as_millis()).unwrap_or(u64::MAX);
        let rec = DrainRecord {
            deadline_ms: now_ms.saturating_add(period_ms),
            period_ms,
        };
        self.apply_drain(node, rec, now_ms, false);
        let shared = match self.hopper.store() {
            AffinityStore::Redis(r) => r.put_drain(&node.id, rec, now_ms).await,
            AffinityStore::Memory(_) => false,
        };
        if shared {
            if let Some(a) = self.applied().get_mut(&node.id) {
                a.shared = true;
            }
        } else if matches!(self.hopper.store(), AffinityStore::Redis(_)) {
            tracing::warn!(node = %node.id, "redis unavailable: drain applies to this replica only");
        }
        (rec, shared)
    }

    /// Undrains `node` here and, with Redis, on every replica. Returns whether Redis took it.
    pub(crate) async fn undrain(&self, node: &Arc<Node>) -> bool {
        self.apply_undrain(node);
        match self.hopper.store() {
            AffinityStore::Redis(r) => r.delete_drain(&node.id).await,
            AffinityStore::Memory(_) => false,
        }
    }

    /// Every operator drain applied here, for the handover of an upgrade (SPEC section 13).
    pub(crate) fn records(&self) -> Vec<(NodeId, DrainRecord)> {
        self.applied()
            .iter()
            .map(|(id, a)| (id.clone(), a.rec))
            .collect()
    }

    /// Applies a drain received in an upgrade: node `id`, if the live table has it, drains with
    /// the same deadline as in the old process. Returns whether the node was found.
    pub(crate) fn restore(&self, id: &str, rec: DrainRecord) -> bool {
        let table = self.routing.table();
        let Some(n) = table.node(id) else {
            return false;
        };
        self.apply_drain(n, rec, unix_ms(), false);
        true
    }

    /// Starts `rec`'s drain on `node` unless it is already draining with that deadline.
    fn apply_drain(&self, node: &Node, rec: DrainRecord, now_ms: u64, shared: bool) {
        let fresh = {
            let mut applied = self.applied();
            let same = applied.get(&node.id).is_some_and(|a| a.rec == rec);
            applied.insert(node.id.clone(), Applied { rec, shared });
            !same || !node.runtime.is_draining()
        };
        if fresh {
            let deadline = instant_of(rec.deadline_ms, now_ms, Instant::now());
            tracing::info!(node = %node.id, deadline_ms = rec.deadline_ms, period_ms = rec.period_ms, "applying drain");
            node.runtime.start_drain(deadline);
        }
    }

    fn apply_undrain(&self, node: &Node) {
        let was = self.applied().remove(&node.id).is_some();
        if was || node.runtime.is_draining() {
            node.runtime.undrain();
        }
    }

    /// Applies one message from another replica (or this one's echo, which changes nothing).
    fn on_message(&self, m: EventMessage) {
        let table = self.routing.table();
        match m {
            EventMessage::Drain {
                node,
                deadline_ms,
                period_ms,
            } => {
                if let Some(n) = table.node(&node) {
                    let rec = DrainRecord {
                        deadline_ms,
                        period_ms,
                    };
                    self.apply_drain(n, rec, unix_ms(), true);
                }
            }
            EventMessage::Undrain { node } => {
                if let Some(n) = table.node(&node) {
                    self.apply_undrain(n);
                }
            }
        }
    }

    /// Reads the drain key of every node in the live table and applies it: drains the nodes
    /// whose key is set, undrains those drained by a key that is gone. Does nothing with the
    /// memory store or when Redis does not answer (the next resync tries again).
    pub(crate) async fn sync(&self) {
        let AffinityStore::Redis(r) = self.hopper.store() else {
            return;
        };
        let nodes = self.routing.table().nodes();
        let ids: Vec<NodeId> = nodes.iter().map(|n| n.id.clone()).collect();
        let Some(records) = r.read_drains(&ids).await else {
            return;
        };
        let now_ms = unix_ms();
        for (n, rec) in nodes.iter().zip(records) {
            match rec {
                Some(rec) => self.apply_drain(n, rec, now_ms, true),
                None => {
                    let shared = self.applied().get(&n.id).is_some_and(|a| a.shared);
                    if shared {
                        self.apply_undrain(n);
                    }
                }
            }
        }
    }

    /// Applies other replicas' drains until `shutdown` fires: each `<prefix>events` message,
    /// a [`Drains::sync`] after every (re)subscription and every [`RESYNC_INTERVAL`]. Returns at
    /// once with the memory store.
    pub(crate) async fn run(self: Arc<Self>, mut shutdown: drain::Watch) {
        let AffinityStore::Redis(r) = self.hopper.store() else {
            return;
        };
        let mut events: mpsc::Receiver<FleetEvent> = r.watch_events();
        let mut resync = tokio::time::interval(RESYNC_INTERVAL);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        resync.tick().await;
        loop {
            tokio::select! {
                () = shutdown.signaled() => return,
                e = events.recv() => match e {
                    Some(FleetEvent::Message(m)) => self.on_message(m),
                    Some(FleetEvent::Resync) => self.sync().await,
                    None => return,
                },
                _ = resync.tick() => self.sync().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shared drains: a Unix-ms deadline maps onto the local clock by its distance
    /// from now; a past one is now.
    #[test]
    fn deadline_maps_by_distance_from_now() {
        let now = Instant::now();
        assert_eq!(
            instant_of(10_500, 10_000, now),
            now + Duration::from_millis(500)
        );
        assert_eq!(instant_of(9_000, 10_000, now), now);
    }
}
