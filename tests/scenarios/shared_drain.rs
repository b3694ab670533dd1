//! Shared drains (SPEC section 7): gateway replicas on one `redis-server` apply a drain
//! or undrain made on any of them with the same deadline, hop their own WebSockets off the
//! drained node, a replica started mid-drain drains the node too, and a lost subscription is
//! renewed by itself (CASE-34).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use integration_tests::ws::{conn_id_request, next_by};
use integration_tests::{cluster_toml, request, wait_until, Gateway, Mock, Redis, FAST_HEALTH};
use serde_json::Value;
use tokio::time::{timeout, Instant};
use tokio_tungstenite::connect_async;
use tokio_tungstenite::tungstenite::Message;

fn config(redis: &Redis, n1: &Mock, n2: &Mock) -> String {
    format!(
        "{FAST_HEALTH}\n[affinity]\nstore = \"redis\"\nredis_url = \"{}\"\n\n{}\n[[routes]]\nid = \"ws\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\nwebsocket = \"hop\"\n",
        redis.url(),
        cluster_toml("c", &[("node-1", n1.addr()), ("node-2", n2.addr())], "")
    )
}

/// Starts Redis, node-1 and node-2, and two gateway replicas A and B sharing that Redis
/// ([`config`]): (redis, node-1, node-2, A, B).
async fn two_replicas() -> (Redis, Mock, Mock, Gateway, Gateway) {
    let redis = Redis::start().await;
    let (n1, n2) = (Mock::start("node-1").await, Mock::start("node-2").await);
    let toml = config(&redis, &n1, &n2);
    let a = Gateway::start(&toml).await;
    let b = Gateway::start(&toml).await;
    (redis, n1, n2, a, b)
}

async fn post(gw: &Gateway, path: &str) -> (u16, Value) {
    let r = request("POST", &gw.admin(path), &[], Vec::new())
        .await
        .expect("admin call");
    (r.status, r.json())
}

/// Waits until `gw` shows `node` draining with `deadline_ms`.
async fn wait_draining(gw: &Gateway, node: &str, deadline_ms: &Value) {
    wait_until(
        Duration::from_secs(5),
        &format!("{node} draining with deadline {deadline_ms}"),
        || async move {
            let n = gw.node(node).await;
            n["state"] == "draining" && &n["drain_deadline_ms"] == deadline_ms
        },
    )
    .await;
}

/// Next JSON text message of `ws` within 10 s.
async fn next_json<S>(ws: &mut S, what: &str) -> Value
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        match next_by(ws, Instant::now() + Duration::from_secs(10), what).await {
            Message::Text(t) => return serde_json::from_str(&t).expect("JSON"),
            Message::Close(c) => panic!("{what}: socket closed {c:?}"),
            _ => {}
        }
    }
}

/// Shared drains: a drain on replica A drains node-1 on replica B with the same
/// deadline and B's WebSocket on node-1 hops to node-2 with the socket open; an undrain on B
/// undrains node-1 on A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_on_one_replica_applies_on_every_replica() {
    let (redis, _n1, _n2, a, b) = two_replicas().await;
    // A socket on B whose id rendezvous hashing puts on node-1.
    let mut ws = None;
    for i in 0..50 {
        let id = format!("drain-ws-{i}");
        let req = conn_id_request(b.port, &id);
        let (mut s, _) = connect_async(req).await.expect("upgrade");
        if next_json(&mut s, "hello").await["node"] == "node-1" {
            ws = Some((s, id));
            break;
        }
    }
    let (mut ws, id) = ws.expect("some id lands on node-1");
    let (status, body) = post(&a, "/admin/nodes/node-1/drain?period=2s").await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["shared"], true, "{body}");
    let deadline = body["deadline_ms"].clone();
    wait_draining(&a, "node-1", &deadline).await;
    wait_draining(&b, "node-1", &deadline).await;
    // B's socket moves within the period (plus slack), still open.
    let hello = next_json(&mut ws, "hop hello").await;
    assert_eq!(hello["node"], "node-2", "{hello}");
    assert_eq!(hello["hopped_from"], "node-1", "{hello}");
    assert_eq!(hello["conn_id"], id.as_str(), "{hello}");
    ws.send(Message::text("after-hop")).await.expect("send");
    let echo = timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("echo in time");
    assert!(matches!(echo, Some(Ok(Message::Text(_)))), "{echo:?}");
    // Undrain on B: A follows.
    let (status, body) = post(&b, "/admin/nodes/node-1/undrain").await;
    assert_eq!(
        (status, &body["shared"]),
        (200, &Value::Bool(true)),
        "{body}"
    );
    a.wait_node_state("node-1", "healthy", Duration::from_secs(5))
        .await;
    b.wait_node_state("node-1", "healthy", Duration::from_secs(5))
        .await;
    let mut c = redis.client().await;
    let key: Option<String> = redis::cmd("GET")
        .arg("hopgw:drain:node-1")
        .query_async(&mut c)
        .await
        .expect("GET");
    assert_eq!(key, None, "undrain deletes the key");
}

/// Shared drains: the drain key holds the documented JSON and expires after the
/// deadline plus `affinity.ttl`; a replica started mid-drain drains the node with the same
/// deadline before it serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replica_started_mid_drain_drains_too() {
    let redis = Redis::start().await;
    let (n1, n2) = (Mock::start("node-1").await, Mock::start("node-2").await);
    let toml = config(&redis, &n1, &n2);
    let a = Gateway::start(&toml).await;
    let (status, body) = post(&a, "/admin/nodes/node-2/drain?period=60s").await;
    assert_eq!(status, 202, "{body}");
    let deadline = body["deadline_ms"].clone();
    let mut c = redis.client().await;
    let (value, pttl): (String, i64) = redis::pipe()
        .get("hopgw:drain:node-2")
        .pttl("hopgw:drain:node-2")
        .query_async(&mut c)
        .await
        .expect("GET + PTTL");
    let v: Value = serde_json::from_str(&value).expect("JSON value");
    assert_eq!(
        v,
        serde_json::json!({"deadline_ms": deadline, "period_ms": 60_000})
    );
    // Default affinity.ttl is 1 h: 60 s + 1 h, minus the time since the call.
    let want = 60_000 + 3_600_000;
    assert!(pttl <= want && pttl > want - 10_000, "pttl {pttl}");
    let late = Gateway::start(&toml).await;
    let n = late.node("node-2").await;
    assert_eq!(n["state"], "draining", "{n}");
    assert_eq!(n["drain_deadline_ms"], deadline, "{n}");
}

/// Subscribers of `hopgw:events` and of `hopgw:hops` on `redis` (PUBSUB NUMSUB, SPEC section 7).
async fn subscribers(redis: &Redis) -> (i64, i64) {
    let mut c = redis.client().await;
    let (_, events, _, hops): (String, i64, String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg("hopgw:events")
        .arg("hopgw:hops")
        .query_async(&mut c)
        .await
        .expect("PUBSUB NUMSUB");
    (events, hops)
}

/// CASE-34 (lost subscription): Redis drops both replicas' subscriptions (`CLIENT KILL TYPE
/// pubsub`, as a failover does: `<prefix>events` and `<prefix>hops` on each); each replica
/// subscribes to both again by itself within 5 s, and a drain made on A afterwards still drains
/// node-1 on B with the same deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_subscription_is_renewed_and_drains_still_spread() {
    let (redis, _n1, _n2, a, b) = two_replicas().await;
    wait_until(
        Duration::from_secs(5),
        "both replicas subscribed",
        || async { subscribers(&redis).await == (2, 2) },
    )
    .await;
    let mut c = redis.client().await;
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut c)
        .await
        .expect("CLIENT KILL TYPE pubsub");
    assert_eq!(killed, 4, "two subscriptions per replica");
    wait_until(
        Duration::from_secs(5),
        "both replicas subscribed again",
        || async { subscribers(&redis).await == (2, 2) },
    )
    .await;
    let (status, body) = post(&a, "/admin/nodes/node-1/drain?period=30s").await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["shared"], true, "{body}");
    let deadline = body["deadline_ms"].clone();
    wait_draining(&b, "node-1", &deadline).await;
}
