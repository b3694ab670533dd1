//! The fleet test: 3 gateway replicas on one Redis Cluster (3 masters,
//! 3 replicas), 4 mock nodes,
//! 1,000 WebSockets in hop mode and 1,000 ids doing idempotent HTTP requests spread over the
//! replicas; then, one after another, a rolling restart of every node (drain on one replica, kill,
//! restart, undrain on another), `kill -9` of one Redis master (its replica takes over; writes it
//! had not replicated yet are lost, and the replicas write those bindings again) and a graceful
//! restart of one gateway replica. At the end: no failed HTTP request, no closed
//! WebSocket, no lost or reordered message, and every id bound to one node that all three replicas
//! and Redis agree on.
//!
//! A WebSocket through a gateway that restarts is closed by that gateway (1001, SPEC section 5), so
//! the sockets use replicas 0 and 1 and the restarted replica 2 carries HTTP only. HTTP clients act
//! as the L4 balancer in front of the replicas does: a request whose connection is refused or cut
//! before an answer is sent to the next replica; any answer but 200 is a failure.

mod churn;

use futures_util::{stream, SinkExt, StreamExt};
use integration_tests::check::Ws;
use integration_tests::redis_cluster::RedisCluster;
use integration_tests::{cluster_toml, get, request, wait_until, Gateway, Mock};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};
use tokio_tungstenite::connect_async;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

const SOCKETS: usize = 1000;

const IDS: usize = 1000;

/// HTTP requests in flight over all replicas.
const HTTP_WORKERS: usize = 24;

/// WebSocket handshakes in flight while the fleet connects.
const CONNECT_CONCURRENCY: usize = 50;

/// Each socket sends one message per period.
const MESSAGE_PERIOD: Duration = Duration::from_millis(1500);

/// Drain period of the rolling restart.
const DRAIN: &str = "2s";

const NODES: [&str; 4] = ["node-1", "node-2", "node-3", "node-4"];

fn config(redis: &RedisCluster, mocks: &[Mock]) -> String {
    let nodes: Vec<(&str, String)> = NODES
        .iter()
        .zip(mocks)
        .map(|(id, m)| (*id, m.addr()))
        .collect();
    format!(
        "[health]\ninterval = \"250ms\"\ntimeout = \"500ms\"\ndegrade_after = 2\neject_after = 3\nrecover_after = 2\nslow_start = \"0s\"\n\n\
         [affinity]\nstore = \"redis\"\nredis_url = \"{}\"\n\n{}\n\
         [[routes]]\nid = \"r\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\nwebsocket = \"hop\"\nretries = 3\n",
        redis.url(),
        cluster_toml("c", &nodes, "")
    )
}

async fn post(gw: &Gateway, path: &str) -> u16 {
    request("POST", &gw.admin(path), &[], Vec::new())
        .await
        .map_or(0, |r| r.status)
}

/// What the HTTP side counted.
#[derive(Default)]
struct HttpStats {
    ok: AtomicU64,
    failed: AtomicU64,
    /// Requests re-sent to another replica after a refused or cut connection.
    failovers: AtomicU64,
    first_failure: Mutex<Option<String>>,
    /// The node that last served each id.
    last_node: Mutex<HashMap<String, String>>,
}

/// One request for `id`, starting at replica `home` and moving on as an L4 balancer would.
async fn http_once(ports: &[u16], home: usize, id: &str, stats: &HttpStats) {
    let mut last_err = String::new();
    for k in 0..ports.len() * 2 {
        let port = ports[(home + k) % ports.len()];
        match get(
            &format!("http://127.0.0.1:{port}/data"),
            &[("x-conn-id", id)],
        )
        .await
        {
            Ok(r) if r.status == 200 => {
                let body = r.text();
                let node = body
                    .strip_prefix("Data from Node ")
                    .and_then(|s| s.split(' ').next())
                    .unwrap_or_default()
                    .to_string();
                stats
                    .last_node
                    .lock()
                    .expect("lock")
                    .insert(id.to_string(), node);
                stats.ok.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Ok(r) => {
                last_err = format!("{id} via :{port}: status {} {}", r.status, r.text());
                break;
            }
            Err(e) => {
                last_err = format!("{id} via :{port}: {e:#}");
                stats.failovers.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    stats.failed.fetch_add(1, Ordering::Relaxed);
    stats
        .first_failure
        .lock()
        .expect("lock")
        .get_or_insert(last_err);
}

/// One WebSocket client's record.
#[derive(Debug, Default)]
struct WsLog {
    /// Node of the latest hello.
    node: String,
    hellos: usize,
    sent: u64,
    /// Echoes received, in order (each must be the next number).
    echoed: u64,
    errors: Vec<String>,
}

async fn open(port: u16, id: &str) -> (Ws, String) {
    let mut req = format!("ws://127.0.0.1:{port}/ws")
        .into_client_request()
        .expect("request");
    req.headers_mut()
        .insert("x-conn-id", HeaderValue::from_str(id).expect("value"));
    let handshake = timeout(Duration::from_secs(20), connect_async(req)).await;
    let (mut ws, _) = handshake
        .unwrap_or_else(|_| panic!("{id}: handshake in time"))
        .unwrap_or_else(|e| panic!("{id}: upgrade: {e}"));
    loop {
        let next = timeout(Duration::from_secs(20), ws.next()).await;
        let m = next
            .unwrap_or_else(|_| panic!("{id}: hello in time"))
            .unwrap_or_else(|| panic!("{id}: open"))
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        if let Message::Text(t) = m {
            let v: Value = serde_json::from_str(&t).expect("hello JSON");
            return (ws, v["node"].as_str().unwrap_or_default().to_string());
        }
    }
}

/// Sends a numbered message every period while `sending`, checks every echo is the next number.
async fn ws_client(
    mut ws: Ws,
    log: Arc<Mutex<WsLog>>,
    mut sending: watch::Receiver<bool>,
    first: Instant,
) {
    let mut tick = tokio::time::interval_at(first, MESSAGE_PERIOD);
    loop {
        tokio::select! {
            _ = tick.tick(), if *sending.borrow() => {
                let seq = log.lock().expect("lock").sent;
                if let Err(e) = ws.send(Message::text(format!("m{seq}"))).await {
                    log.lock().expect("lock").errors.push(format!("send m{seq}: {e}"));
                    return;
                }
                log.lock().expect("lock").sent += 1;
            }
            r = sending.changed() => if r.is_err() { let _ = ws.close(None).await; return; },
            m = ws.next() => {
                let mut l = log.lock().expect("lock");
                match m {
                    Some(Ok(Message::Text(t))) if t.starts_with('{') => {
                        let v: Value = serde_json::from_str(&t).unwrap_or_default();
                        l.node = v["node"].as_str().unwrap_or_default().to_string();
                        l.hellos += 1;
                    }
                    Some(Ok(Message::Text(t))) => {
                        let want = format!("m{}", l.echoed);
                        if *t == *want {
                            l.echoed += 1;
                        } else {
                            l.errors.push(format!("echo {t} where {want} was due"));
                        }
                    }
                    Some(Ok(Message::Close(c))) => { l.errors.push(format!("closed: {c:?}")); return; }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => { l.errors.push(format!("error: {e}")); return; }
                    None => { l.errors.push("stream ended".into()); return; }
                }
            }
        }
    }
}

/// Waits until every replica shows `node` in `state`.
async fn wait_all(gws: &[Gateway], node: &str, state: &str, within: Duration) {
    for gw in gws {
        gw.wait_node_state(node, state, within).await;
    }
}
