//! The Redis affinity store (SPEC section 7) with real `redis-server`, gateways and mock nodes:
//! bindings survive a gateway restart, two gateways agree on one node after racing hops, and a
//! Redis outage neither fails requests nor floods the log, with local bindings written back after it.

use std::time::Duration;

use crate::store_common;
use integration_tests::{get, wait_until, Gateway, Mock, Redis};

const NODE_IDS: [&str; 3] = ["node-a", "node-b", "node-c"];

/// Starts the three mocks; returns them with the gateway TOML for cluster `svc` behind route `/`
/// using the Redis store at `redis` ([`store_common::setup_with`], no `redis_timeout`).
async fn setup(redis: &Redis) -> (Vec<Mock>, String) {
    store_common::setup_with(&redis.url(), "").await
}

async fn all_healthy(gw: &Gateway) {
    for id in NODE_IDS {
        gw.wait_node_state(id, "healthy", Duration::from_secs(10))
            .await;
    }
}

/// `GET /echo` with `X-Conn-Id: conn`; asserts 200 and returns the serving node.
async fn node_for(gw: &Gateway, conn: &str) -> String {
    let r = get(&gw.url("/echo"), &[("x-conn-id", conn)])
        .await
        .expect("request");
    assert_eq!(r.status, 200, "{conn}: {}", r.text());
    r.header("x-node-id").expect("x-node-id")
}

async fn redis_get(redis: &Redis, key: &str) -> Option<String> {
    let mut c = redis.client().await;
    ::redis::cmd("GET")
        .arg(key)
        .query_async(&mut c)
        .await
        .expect("GET")
}

/// Sum of `gateway_affinity_store_errors_total` over every op.
async fn store_errors(gw: &Gateway) -> f64 {
    let mut sum = 0.0;
    for op in ["get", "bind", "hop", "remove", "subscribe", "writeback"] {
        sum += gw
            .metric(&format!(
                "gateway_affinity_store_errors_total{{op=\"{op}\"}}"
            ))
            .await;
    }
    sum
}

#[tokio::test]
async fn redis_binding_survives_gateway_restart() {
    let redis = Redis::start().await;
    let (_mocks, toml) = setup(&redis).await;
    let mut gw = Gateway::start(&toml).await;
    all_healthy(&gw).await;
    let ids: Vec<String> = (0..6).map(|i| format!("restart-{i}")).collect();
    let mut bound = Vec::new();
    for id in &ids {
        bound.push(node_for(&gw, id).await);
    }
    assert!(
        bound.iter().collect::<std::collections::HashSet<_>>().len() > 1,
        "ids spread over nodes: {bound:?}"
    );
    for (id, node) in ids.iter().zip(&bound) {
        assert_eq!(
            redis_get(&redis, &format!("hopgw:conn:{id}"))
                .await
                .as_deref(),
            Some(node.as_str()),
            "Redis holds {id}"
        );
    }

    gw.restart().await;
    all_healthy(&gw).await;
    // Reverse order: a fresh round-robin would hand out different nodes.
    for (id, node) in ids.iter().zip(&bound).rev() {
        assert_eq!(&node_for(&gw, id).await, node, "{id} after the restart");
    }
}

#[tokio::test]
async fn redis_two_gateways_agree_after_racing_hops() {
    let redis = Redis::start().await;
    let (mut mocks, toml) = setup(&redis).await;
    let gw_a = Gateway::start(&toml).await;
    let gw_b = Gateway::start_with(&toml, &["--redis-url", &redis.url()]).await;
    all_healthy(&gw_a).await;
    all_healthy(&gw_b).await;
    let id = "shared-1";
    let first = node_for(&gw_a, id).await;
    for _ in 0..5 {
        assert_eq!(
            node_for(&gw_b, id).await,
            first,
            "gateway B serves A's binding"
        );
    }

    let dead = mocks
        .iter()
        .position(|m| m.id == first)
        .expect("bound node is a mock");
    mocks[dead].kill().await;
    let mut reqs = Vec::new();
    for gw in [&gw_a, &gw_b] {
        for _ in 0..10 {
            let url = gw.url("/echo");
            reqs.push(tokio::spawn(async move {
                get(&url, &[("x-conn-id", id)]).await.expect("request")
            }));
        }
    }
    for r in reqs {
        let r = r.await.expect("task");
        assert_eq!(
            r.status,
            200,
            "a GET to a dead node is retried: {}",
            r.text()
        );
        assert_ne!(r.header("x-node-id").as_deref(), Some(first.as_str()));
    }

    let in_redis = redis_get(&redis, &format!("hopgw:conn:{id}"))
        .await
        .expect("binding kept in Redis");
    assert_ne!(in_redis, first, "Redis holds a new node");
    for _ in 0..3 {
        assert_eq!(
            node_for(&gw_a, id).await,
            in_redis,
            "gateway A routes to Redis's node"
        );
        assert_eq!(
            node_for(&gw_b, id).await,
            in_redis,
            "gateway B routes to Redis's node"
        );
    }
}

/// CASE-17 (Redis down): with Redis down, plain selection and local bindings keep serving; bindings
/// are written back on reconnect.
#[tokio::test]
async fn redis_down_keeps_bindings_and_writes_back() {
    let mut redis = Redis::start().await;
    let (_mocks, toml) = setup(&redis).await;
    let gw = Gateway::start(&toml).await;
    all_healthy(&gw).await;
    let old: Vec<(String, String)> = {
        let mut v = Vec::new();
        for i in 0..3 {
            let id = format!("old-{i}");
            let node = node_for(&gw, &id).await;
            v.push((id, node));
        }
        v
    };

    redis.kill().await;
    let gw_ref = &gw;
    wait_until(
        Duration::from_secs(5),
        "store errors counted",
        || async move { store_errors(gw_ref).await >= 1.0 },
    )
    .await;
    let mut new = Vec::new();
    for i in 0..5 {
        let id = format!("new-{i}");
        let node = node_for(&gw, &id).await;
        new.push((id, node));
    }
    // Keep traffic flowing through the outage: every bound id keeps its node, every request is served.
    for _ in 0..20 {
        for (id, node) in old.iter().chain(&new) {
            assert_eq!(&node_for(&gw, id).await, node, "{id} during the outage");
        }
    }
    assert!(store_errors(&gw).await >= 1.0);
    let warns: Vec<String> = gw
        .logs
        .lines()
        .into_iter()
        .filter(|l| l.contains("WARN") && l.to_lowercase().contains("redis"))
        .collect();
    assert!(warns.len() <= 3, "Redis errors flood the log: {warns:#?}");

    redis.restart().await;
    let redis_ref = &redis;
    let all: Vec<(String, String)> = old.iter().chain(&new).cloned().collect();
    let all_ref = &all;
    wait_until(
        Duration::from_secs(10),
        "local bindings written back to Redis",
        || async move {
            for (id, node) in all_ref {
                if redis_get(redis_ref, &format!("hopgw:conn:{id}"))
                    .await
                    .as_deref()
                    != Some(node.as_str())
                {
                    return false;
                }
            }
            true
        },
    )
    .await;
    gw.logs
        .wait_for(
            &["redis affinity store reachable again"],
            Duration::from_secs(5),
        )
        .await;
    for (id, node) in &all {
        assert_eq!(&node_for(&gw, id).await, node, "{id} after Redis is back");
    }
}
