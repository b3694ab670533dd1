//! The Redis store when Redis goes away (SPEC section 7): served locally meanwhile, written back
//! without overwriting newer bindings, not fatal at start; bad URLs and password redaction.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::tests::{node, pttl, redis_get, store_errors, wait_until, TestRedis};
use super::*;
use crate::hopper::ids::test_id as id;

/// Waits up to 5 s for `store` to be up again (not believed down); panics naming `what` then.
async fn wait_up(store: &RedisStore, what: &str) {
    wait_until(
        Duration::from_secs(5),
        what,
        || async move { !store.is_down() },
    )
    .await;
}

#[tokio::test]
async fn redis_outage_serves_locally_and_writes_back() {
    let mut r = TestRedis::start().await;
    let metrics = Arc::new(Metrics::new());
    let store = RedisStore::connect(r.settings(Duration::from_secs(60)), metrics.clone())
        .await
        .expect("store");
    assert_eq!(
        store.bind(&id("old"), &node("node-a")).await,
        node("node-a")
    );
    r.kill().await;
    let store = &store;
    wait_until(
        Duration::from_secs(5),
        "the store to notice the outage",
        || async move { store.is_down() },
    )
    .await;
    assert!(store_errors(&metrics) >= 1.0, "errors counted");
    let started = Instant::now();
    assert_eq!(
        store.get(&id("old")).await,
        Some(node("node-a")),
        "bound id keeps its node"
    );
    assert_eq!(store.get(&id("new")).await, None);
    assert_eq!(
        store.bind(&id("new"), &node("node-b")).await,
        node("node-b"),
        "fresh bindings stay local"
    );
    assert_eq!(
        store.hop(&id("old"), "node-a", &node("node-c")).await.0,
        node("node-c")
    );
    assert!(
        Instant::now().duration_since(started) < Duration::from_millis(100),
        "calls waited on a dead Redis"
    );

    r.restart().await;
    let mut c = r.client().await;
    wait_until(
        Duration::from_secs(10),
        "local bindings written back",
        || {
            let mut c = c.clone();
            async move {
                redis_get(&mut c, "hopgw:conn:new").await.as_deref() == Some("node-b")
                    && redis_get(&mut c, "hopgw:conn:old").await.as_deref() == Some("node-c")
            }
        },
    )
    .await;
    wait_up(store, "the store to be up again").await;
    assert!(
        pttl(&mut c, "hopgw:conn:new").await > 50_000,
        "written back with the TTL"
    );
    assert_eq!(store.get(&id("new")).await, Some(node("node-b")));
    store.shutdown().await;
}

#[tokio::test]
async fn write_back_does_not_overwrite_a_newer_binding() {
    let r = TestRedis::start().await;
    let store = r.store(Duration::from_secs(60)).await;
    let mut c = r.client().await;
    // Believed down (as after a timeout): the bind and the hop stay local and are remembered.
    store.shared.down.store(true, Ordering::Release);
    assert_eq!(
        store.bind(&id("c-1"), &node("node-a")).await,
        node("node-a")
    );
    assert_eq!(
        store.bind(&id("c-2"), &node("node-a")).await,
        node("node-a")
    );
    assert_eq!(
        store.hop(&id("c-2"), "node-a", &node("node-b")).await.0,
        node("node-b")
    );
    // Meanwhile another replica bound c-1 in Redis.
    let _: () = ::redis::cmd("SET")
        .arg("hopgw:conn:c-1")
        .arg("node-z")
        .arg("PX")
        .arg(60_000)
        .query_async(&mut c)
        .await
        .expect("SET");
    store.shared.wake.notify_one();
    let store = &store;
    wait_up(store, "the write-back to finish").await;
    assert_eq!(
        redis_get(&mut c, "hopgw:conn:c-1").await.as_deref(),
        Some("node-z"),
        "the newer binding is kept"
    );
    assert_eq!(
        store.get(&id("c-1")).await,
        Some(node("node-z")),
        "and adopted locally"
    );
    assert_eq!(
        redis_get(&mut c, "hopgw:conn:c-2").await.as_deref(),
        Some("node-b"),
        "a local-only id is written"
    );
    store.shutdown().await;
}

#[tokio::test]
async fn unreachable_redis_at_start_is_not_fatal() {
    let mut r = TestRedis::start().await;
    let settings = r.settings(Duration::from_secs(60));
    r.kill().await;
    let store = RedisStore::connect(settings, Arc::new(Metrics::new()))
        .await
        .expect("starts without Redis");
    assert!(store.is_down());
    assert_eq!(
        store.bind(&id("c-1"), &node("node-a")).await,
        node("node-a")
    );
    r.restart().await;
    let c = r.client().await;
    wait_until(
        Duration::from_secs(10),
        "the binding written once Redis answers",
        || {
            let mut c = c.clone();
            async move { redis_get(&mut c, "hopgw:conn:c-1").await.as_deref() == Some("node-a") }
        },
    )
    .await;
    store.shutdown().await;
}

#[tokio::test]
async fn bad_url_is_a_startup_error() {
    let s = RedisSettings {
        url: "redis+sentinel://h:1".into(),
        key_prefix: "p:".into(),
        ttl: Duration::from_secs(1),
        timeout: Duration::from_millis(250),
        max_entries: 10,
        ca: None,
    };
    let err = RedisStore::connect(s, Arc::new(Metrics::new()))
        .await
        .expect_err("no master name");
    assert!(err.to_string().contains("master-name"), "{err}");
}

#[test]
fn redact_hides_the_password() {
    assert_eq!(redact("redis://:secret@h:1/0"), "redis://***@h:1/0");
    assert_eq!(redact("redis://h:1/0"), "redis://h:1/0");
}
