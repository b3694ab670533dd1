//! Affinity stores: where bindings (conn id -> node id, sliding TTL) live (SPEC section 7).
//!
//! [`AffinityStore`] is an enum over the store kinds so the hot path pays no dynamic dispatch or boxed
//! futures. Every kind passes the same conformance suite (`tests` below). Store failures never
//! fail a request: a store degrades (local cache, counted errors) and answers as best it can.

pub(crate) mod memory;
pub(crate) mod redis;

use std::sync::Arc;
use std::time::Duration;

pub(crate) use self::memory::MemoryStore;
pub(crate) use self::redis::{RedisSettings, RedisStore};
use crate::hopper::ConnId;

/// One binding as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Bound node id.
    pub node: Arc<str>,
    /// Time left before it is forgotten.
    pub ttl: Duration,
}

/// The configured store.
#[derive(Debug)]
pub enum AffinityStore {
    /// Bounded in-process LRU with sliding TTL.
    Memory(MemoryStore),
    /// Redis shared by replicas, with a local cache in front (SPEC section 7).
    Redis(RedisStore),
}

impl AffinityStore {
    /// The node bound to `conn`, refreshing its sliding TTL; `None` if unbound or expired.
    pub async fn get(&self, conn: &ConnId) -> Option<Arc<str>> {
        match self {
            AffinityStore::Memory(m) => m.get(conn),
            AffinityStore::Redis(r) => r.get(conn).await,
        }
    }

    /// Binds `conn` to `node` unless it is already bound; returns the node it is bound to afterwards
    /// (the existing one if another request or replica won the race).
    pub async fn bind(&self, conn: &ConnId, node: &Arc<str>) -> Arc<str> {
        match self {
            AffinityStore::Memory(m) => m.bind(conn, node),
            AffinityStore::Redis(r) => r.bind(conn, node).await,
        }
    }

    /// Compare-and-set hop: rebinds `conn` from `from` to `to` only if it still holds `from` (or
    /// nothing). Returns the node it is bound to afterwards (`to`, or whatever a racing hop chose)
    /// and whether this call made the change (`true`) or found the id already moved by a racing
    /// hop (`false`): only the hop that changed the binding is counted and logged, so a burst of
    /// requests racing on one id counts one hop (CASE-17).
    pub async fn hop(&self, conn: &ConnId, from: &str, to: &Arc<str>) -> (Arc<str>, bool) {
        match self {
            AffinityStore::Memory(m) => m.hop(conn, from, to),
            AffinityStore::Redis(r) => r.hop(conn, from, to).await,
        }
    }

    /// Deletes the binding; true if there was one.
    pub async fn remove(&self, conn: &ConnId) -> bool {
        match self {
            AffinityStore::Memory(m) => m.remove(conn),
            AffinityStore::Redis(r) => r.remove(conn).await,
        }
    }

    /// The binding with its remaining TTL, without refreshing it (admin view).
    pub async fn lookup(&self, conn: &ConnId) -> Option<Binding> {
        match self {
            AffinityStore::Memory(m) => m.lookup(conn),
            AffinityStore::Redis(r) => r.lookup(conn).await,
        }
    }

    /// Bindings held per node id: the memory store's entries, or the Redis store's local cache
    /// (this replica's view). Expired bindings count until touched or evicted.
    pub fn bindings_per_node(&self) -> std::collections::HashMap<Arc<str>, usize> {
        match self {
            AffinityStore::Memory(m) => m.per_node(),
            AffinityStore::Redis(r) => r.cached_per_node(),
        }
    }

    /// Stops background tasks (Redis subscriber, write-back) and waits for them.
    pub async fn shutdown(&self) {
        match self {
            AffinityStore::Memory(_) => {}
            AffinityStore::Redis(r) => r.shutdown().await,
        }
    }
}

#[cfg(test)]
pub(crate) mod conformance;
