//! The conformance suite every affinity store passes (STYLE section 8): bind, sliding TTL, CAS hop, remove.

use std::sync::Arc;
use std::time::Duration;

use super::AffinityStore;
use crate::hopper::ids::test_id as id;

/// Runs every check against `store`, which must have a TTL of `ttl` and start empty.
pub(crate) async fn run(store: &AffinityStore, ttl: Duration) {
    let a: Arc<str> = Arc::from("node-a");
    let b: Arc<str> = Arc::from("node-b");
    let c: Arc<str> = Arc::from("node-c");
    assert_eq!(store.get(&id("c-1")).await, None);
    assert_eq!(store.bind(&id("c-1"), &a).await, a, "first bind wins");
    assert_eq!(
        store.bind(&id("c-1"), &b).await,
        a,
        "second bind keeps the first node"
    );
    assert_eq!(store.get(&id("c-1")).await, Some(a.clone()));
    assert_eq!(
        store.hop(&id("c-1"), "node-a", &b).await.0,
        b,
        "hop from the bound node succeeds"
    );
    assert_eq!(
        store.hop(&id("c-1"), "node-a", &c).await.0,
        b,
        "a stale hop loses to the winner"
    );
    assert_eq!(store.get(&id("c-1")).await, Some(b.clone()));
    let binding = store.lookup(&id("c-1")).await.expect("bound");
    assert_eq!(binding.node, b);
    assert!(binding.ttl <= ttl && binding.ttl > ttl / 2, "{binding:?}");
    assert!(store.remove(&id("c-1")).await);
    assert!(!store.remove(&id("c-1")).await);
    assert_eq!(store.get(&id("c-1")).await, None);
    assert_eq!(
        store.hop(&id("c-2"), "node-x", &c).await.0,
        c,
        "hop on an unbound id binds it"
    );
}

#[tokio::test]
async fn memory_store_conforms() {
    let ttl = Duration::from_secs(60);
    run(
        &AffinityStore::Memory(super::MemoryStore::new(100, ttl)),
        ttl,
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn memory_store_ttl_slides() {
    let ttl = Duration::from_secs(10);
    let s = super::MemoryStore::new(100, ttl);
    let a: Arc<str> = Arc::from("a");
    s.bind(&id("x"), &a);
    tokio::time::advance(Duration::from_secs(8)).await;
    assert_eq!(s.get(&id("x")), Some(a.clone()), "used before expiry");
    tokio::time::advance(Duration::from_secs(8)).await;
    assert_eq!(s.get(&id("x")), Some(a), "the use slid the TTL");
    tokio::time::advance(Duration::from_secs(11)).await;
    assert_eq!(s.get(&id("x")), None, "unused past the TTL");
}

#[tokio::test]
async fn redis_store_conforms() {
    let redis = super::redis::tests::TestRedis::start().await;
    let ttl = Duration::from_secs(60);
    let store = super::RedisStore::connect(
        redis.settings(ttl),
        Arc::new(crate::metrics::Metrics::new()),
    )
    .await
    .expect("redis store");
    let store = AffinityStore::Redis(store);
    run(&store, ttl).await;
    store.shutdown().await;
}
