//! The bounded in-memory affinity store: an LRU capped at `max_entries` with a sliding TTL
//! (SPEC section 7). A flood of random ids evicts the least recently used bindings; memory stays bounded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lru::LruCache;
use tokio::time::Instant;

use super::Binding;
use crate::hopper::ConnId;

#[derive(Debug)]
struct Entry {
    node: Arc<str>,
    expires: Instant,
}

/// LRU + sliding TTL. Critical sections are short and never await.
#[derive(Debug)]
pub struct MemoryStore {
    /// Grows with the bindings held: a table preallocated for `max_entries` has its pages touched
    /// at random by the first inserts, costing kilobytes of RSS per binding.
    map: Mutex<LruCache<Box<str>, Entry>>,
    /// Entries per node (expired ones included until touched), kept in step with `map` under its
    /// lock, for the status page's bindings column.
    per_node: Mutex<HashMap<Arc<str>, usize>>,
    cap: usize,
    ttl: Duration,
}

impl MemoryStore {
    /// A store holding at most `max_entries` (>= 1) bindings, each forgotten `ttl` after last use.
    pub fn new(max_entries: usize, ttl: Duration) -> Self {
        MemoryStore {
            map: Mutex::new(LruCache::unbounded()),
            per_node: Mutex::new(HashMap::new()),
            cap: max_entries.max(1),
            ttl,
        }
    }

    /// Inserts or replaces `conn`, evicting the least recently used binding past the cap.
    fn insert(&self, map: &mut LruCache<Box<str>, Entry>, conn: &str, entry: Entry) {
        let mut counts = self.counts();
        *counts.entry(entry.node.clone()).or_insert(0) += 1;
        if let Some(old) = map.put(conn.into(), entry) {
            forget(&mut counts, &old.node);
        }
        while map.len() > self.cap {
            if let Some((_, old)) = map.pop_lru() {
                forget(&mut counts, &old.node);
            }
        }
    }

    /// Removes `conn` from `map`, keeping the per-node counts in step.
    fn pop(&self, map: &mut LruCache<Box<str>, Entry>, conn: &str) -> Option<Entry> {
        let e = map.pop(conn)?;
        forget(&mut self.counts(), &e.node);
        Some(e)
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, usize>> {
        self.per_node
            .lock()
            .expect("per-node count mutex is never poisoned: no panics while held")
    }

    /// Bindings held per node id (expired ones included until touched or evicted).
    pub fn per_node(&self) -> HashMap<Arc<str>, usize> {
        self.counts().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<Box<str>, Entry>> {
        self.map
            .lock()
            .expect("memory store mutex is never poisoned: no panics while held")
    }

    /// See [`super::AffinityStore::get`].
    pub fn get(&self, conn: &ConnId) -> Option<Arc<str>> {
        let now = Instant::now();
        let mut map = self.lock();
        match map.get_mut(conn.as_str()) {
            Some(e) if e.expires > now => {
                e.expires = now + self.ttl;
                Some(e.node.clone())
            }
            Some(_) => {
                self.pop(&mut map, conn.as_str());
                None
            }
            None => None,
        }
    }

    /// See [`super::AffinityStore::bind`].
    pub fn bind(&self, conn: &ConnId, node: &Arc<str>) -> Arc<str> {
        let now = Instant::now();
        let mut map = self.lock();
        if let Some(e) = map.get_mut(conn.as_str()) {
            if e.expires > now {
                e.expires = now + self.ttl;
                return e.node.clone();
            }
        }
        self.insert(
            &mut map,
            conn.as_str(),
            Entry {
                node: node.clone(),
                expires: now + self.ttl,
            },
        );
        node.clone()
    }

    /// See [`super::AffinityStore::hop`].
    pub fn hop(&self, conn: &ConnId, from: &str, to: &Arc<str>) -> (Arc<str>, bool) {
        let now = Instant::now();
        let mut map = self.lock();
        if let Some(e) = map.get_mut(conn.as_str()) {
            if e.expires > now && &*e.node != from {
                e.expires = now + self.ttl;
                return (e.node.clone(), false);
            }
        }
        self.insert(
            &mut map,
            conn.as_str(),
            Entry {
                node: to.clone(),
                expires: now + self.ttl,
            },
        );
        (to.clone(), true)
    }

    /// Writes `conn -> node` unconditionally (cache fill from a shared store).
    pub fn put(&self, conn: &ConnId, node: &Arc<str>) {
        let expires = Instant::now() + self.ttl;
        let mut map = self.lock();
        self.insert(
            &mut map,
            conn.as_str(),
            Entry {
                node: node.clone(),
                expires,
            },
        );
    }

    /// See [`super::AffinityStore::remove`].
    pub fn remove(&self, conn: &ConnId) -> bool {
        let now = Instant::now();
        let mut map = self.lock();
        self.pop(&mut map, conn.as_str())
            .is_some_and(|e| e.expires > now)
    }

    /// See [`super::AffinityStore::lookup`].
    pub fn lookup(&self, conn: &ConnId) -> Option<Binding> {
        let now = Instant::now();
        let map = self.lock();
        map.peek(conn.as_str())
            .filter(|e| e.expires > now)
            .map(|e| Binding {
                node: e.node.clone(),
                ttl: e.expires - now,
            })
    }

    /// Every live binding with its remaining TTL, least recently used first: what an upgrade
    /// hands over (SPEC section 13).
    pub fn export(&self) -> Vec<(String, Arc<str>, Duration)> {
        let now = Instant::now();
        let map = self.lock();
        map.iter()
            .rev()
            .filter(|(_, e)| e.expires > now)
            .map(|(k, e)| (k.to_string(), e.node.clone(), e.expires - now))
            .collect()
    }

    /// Binds `conn` to `node` for `ttl` (at most the configured TTL) as the most recently used
    /// entry: a binding received in an upgrade (SPEC section 13).
    pub fn restore(&self, conn: &str, node: &Arc<str>, ttl: Duration) {
        let expires = Instant::now() + ttl.min(self.ttl);
        let mut map = self.lock();
        self.insert(
            &mut map,
            conn,
            Entry {
                node: node.clone(),
                expires,
            },
        );
    }

    /// Drops every entry (a replica that missed invalidations).
    pub fn clear(&self) {
        let mut map = self.lock();
        map.clear();
        self.counts().clear();
    }

    /// Number of entries, expired ones included until touched.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn forget(counts: &mut HashMap<Arc<str>, usize>, node: &Arc<str>) {
    if let Some(n) = counts.get_mut(node) {
        *n -= 1;
        if *n == 0 {
            counts.remove(node);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hopper::ids::test_id as id;

    #[test]
    fn lru_bound_holds_under_a_flood_of_ids() {
        let s = MemoryStore::new(1000, Duration::from_secs(60));
        let n: Arc<str> = Arc::from("a");
        for i in 0..100_000 {
            s.bind(&id(&format!("id-{i}")), &n);
        }
        assert_eq!(s.len(), 1000);
        assert_eq!(s.per_node().get("a"), Some(&1000));
        let b: Arc<str> = Arc::from("b");
        s.hop(&id("id-99999"), "a", &b);
        s.remove(&id("id-99998"));
        assert_eq!(s.per_node().get("a"), Some(&998));
        assert_eq!(s.per_node().get("b"), Some(&1));
        assert!(s.lookup(&id("id-0")).is_none());
        assert!(s.lookup(&id("id-99999")).is_some());
    }

    #[test]
    fn export_then_restore_keeps_nodes_ttls_and_recency() {
        let s = MemoryStore::new(3, Duration::from_secs(60));
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        s.bind(&id("one"), &a);
        s.bind(&id("two"), &b);
        s.get(&id("one"));
        let out = s.export();
        assert_eq!(
            out.iter().map(|x| x.0.as_str()).collect::<Vec<_>>(),
            ["two", "one"]
        );
        let t = MemoryStore::new(3, Duration::from_secs(30));
        for (conn, node, ttl) in &out {
            t.restore(conn, node, *ttl);
        }
        let one = t.lookup(&id("one")).expect("restored");
        assert_eq!(&*one.node, "a");
        assert!(one.ttl <= Duration::from_secs(30), "capped at the new TTL");
        // "two" is the least recently used in the new store too.
        t.bind(&id("three"), &a);
        t.bind(&id("four"), &a);
        assert!(t.lookup(&id("two")).is_none());
        assert!(t.lookup(&id("one")).is_some());
    }
}
