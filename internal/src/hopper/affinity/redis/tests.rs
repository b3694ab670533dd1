//! Redis store tests against real `redis-server` processes on free loopback ports.

use std::future::Future;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::*;
use crate::hopper::ids::test_id as id;

/// A `redis-server` child on a free port (no persistence), killed on drop.
pub(crate) struct TestRedis {
    pub(crate) port: u16,
    child: Option<Child>,
}

impl TestRedis {
    /// Starts redis-server on a free port and waits until it answers.
    pub(crate) async fn start() -> TestRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind :0")
            .local_addr()
            .expect("addr")
            .port();
        let mut r = TestRedis { port, child: None };
        r.spawn().await;
        r
    }

    async fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server on PATH");
        self.child = Some(child);
        let url = self.url();
        wait_until(Duration::from_secs(10), "redis-server to answer", || {
            let url = url.clone();
            async move {
                let Ok(client) = ::redis::Client::open(url) else {
                    return false;
                };
                match client.get_multiplexed_async_connection().await {
                    Ok(mut c) => ::redis::cmd("PING")
                        .query_async::<String>(&mut c)
                        .await
                        .is_ok(),
                    Err(_) => false,
                }
            }
        })
        .await;
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// SIGKILL and wait for exit.
    pub(crate) async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().await.expect("kill redis-server");
        }
    }

    /// Starts again on the same port, empty.
    pub(crate) async fn restart(&mut self) {
        self.kill().await;
        self.spawn().await;
    }

    /// A plain client connection for assertions.
    pub(crate) async fn client(&self) -> ::redis::aio::MultiplexedConnection {
        ::redis::Client::open(self.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    }

    /// The store settings for this server with `ttl`.
    pub(crate) fn settings(&self, ttl: Duration) -> RedisSettings {
        RedisSettings {
            url: self.url(),
            key_prefix: "hopgw:".into(),
            ttl,
            timeout: Duration::from_millis(250),
            max_entries: 1000,
            ca: None,
        }
    }

    /// A store on this server with binding TTL `ttl`, counting on metrics of its own.
    pub(crate) async fn store(&self, ttl: Duration) -> RedisStore {
        RedisStore::connect(self.settings(ttl), Arc::new(Metrics::new()))
            .await
            .expect("store")
    }
}

/// Polls `f` every 20 ms until true; panics naming `what` at the deadline.
pub(crate) async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !f().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(super) async fn redis_get(
    c: &mut ::redis::aio::MultiplexedConnection,
    key: &str,
) -> Option<String> {
    ::redis::cmd("GET")
        .arg(key)
        .query_async(c)
        .await
        .expect("GET")
}

pub(super) async fn pttl(c: &mut ::redis::aio::MultiplexedConnection, key: &str) -> i64 {
    ::redis::cmd("PTTL")
        .arg(key)
        .query_async(c)
        .await
        .expect("PTTL")
}

/// `calls` of `cmdstat_eval` in `INFO commandstats`.
pub(super) async fn eval_calls(c: &mut ::redis::aio::MultiplexedConnection) -> u64 {
    let info: String = ::redis::cmd("INFO")
        .arg("commandstats")
        .query_async(c)
        .await
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_eval:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("calls is a number"))
}

pub(super) fn store_errors(m: &Metrics) -> f64 {
    m.encode()
        .lines()
        .filter(|l| l.starts_with("gateway_affinity_store_errors_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

pub(super) fn node(s: &str) -> Arc<str> {
    Arc::from(s)
}

#[tokio::test]
async fn cached_binding_costs_no_redis_call() {
    let r = TestRedis::start().await;
    let store = r.store(Duration::from_secs(60)).await;
    let mut c = r.client().await;
    assert_eq!(
        store.bind(&id("c-1"), &node("node-a")).await,
        node("node-a")
    );
    assert_eq!(
        redis_get(&mut c, "hopgw:conn:c-1").await.as_deref(),
        Some("node-a")
    );
    let before = eval_calls(&mut c).await;
    for _ in 0..100 {
        assert_eq!(store.get(&id("c-1")).await, Some(node("node-a")));
    }
    assert_eq!(
        eval_calls(&mut c).await,
        before,
        "cache hits made Redis calls"
    );
    store.shutdown().await;
}

#[tokio::test]
async fn ttl_is_refreshed_once_less_than_half_is_left() {
    let r = TestRedis::start().await;
    let ttl = Duration::from_millis(1500);
    let store = r.store(ttl).await;
    let mut c = r.client().await;
    store.bind(&id("c-1"), &node("node-a")).await;
    let start = Instant::now();
    let mut last = pttl(&mut c, "hopgw:conn:c-1").await;
    let mut refreshed_at = None;
    while refreshed_at.is_none() {
        assert!(
            Instant::now() < start + Duration::from_secs(3),
            "no refresh seen; last PTTL {last}"
        );
        assert_eq!(
            store.get(&id("c-1")).await,
            Some(node("node-a")),
            "used binding is kept"
        );
        let now = pttl(&mut c, "hopgw:conn:c-1").await;
        if now > last {
            refreshed_at = Some(last);
        }
        last = now;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left = refreshed_at.expect("refreshed");
    assert!(
        left <= 750 + 50,
        "refreshed while {left} ms of 1500 were left: more than half"
    );
    assert!(last > 1300, "refresh restores the full TTL, got {last}");
    store.shutdown().await;
}

#[tokio::test]
async fn hops_invalidate_other_replicas_and_races_agree() {
    let r = TestRedis::start().await;
    let ttl = Duration::from_secs(60);
    let a = r.store(ttl).await;
    let b = r.store(ttl).await;
    let mut c = r.client().await;
    // Wait for b's subscription so the hop message below reaches it.
    wait_until(
        Duration::from_secs(5),
        "two subscribers on hopgw:hops",
        || {
            let mut c = c.clone();
            async move {
                let v: Vec<::redis::Value> = ::redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg("hopgw:hops")
                    .query_async(&mut c)
                    .await
                    .expect("NUMSUB");
                matches!(v.get(1), Some(::redis::Value::Int(2)))
            }
        },
    )
    .await;
    a.bind(&id("c-1"), &node("node-a")).await;
    assert_eq!(
        b.get(&id("c-1")).await,
        Some(node("node-a")),
        "b reads a's binding"
    );
    assert_eq!(
        a.hop(&id("c-1"), "node-a", &node("node-b")).await.0,
        node("node-b")
    );
    let (a, b) = (&a, &b);
    wait_until(
        Duration::from_secs(2),
        "b's cache to be invalidated",
        || async move { b.get(&id("c-1")).await == Some(node("node-b")) },
    )
    .await;

    // Both replicas see node-b and lose it at once: one new node wins for both.
    assert_eq!(a.get(&id("c-1")).await, Some(node("node-b")));
    let (nc, nd) = (node("node-c"), node("node-d"));
    let c1 = id("c-1");
    let ((x, _), (y, _)) = tokio::join!(a.hop(&c1, "node-b", &nc), b.hop(&c1, "node-b", &nd));
    assert_eq!(x, y, "racing hops agree");
    assert_eq!(
        redis_get(&mut c, "hopgw:conn:c-1").await.as_deref(),
        Some(&*x)
    );
    let x = &x;
    wait_until(
        Duration::from_secs(2),
        "both replicas to route to the winner",
        || async move {
            a.get(&id("c-1")).await.as_ref() == Some(x)
                && b.get(&id("c-1")).await.as_ref() == Some(x)
        },
    )
    .await;

    assert!(b.remove(&id("c-1")).await);
    wait_until(
        Duration::from_secs(2),
        "a's cache to drop the removed binding",
        || async move { a.get(&id("c-1")).await.is_none() },
    )
    .await;
    a.shutdown().await;
    b.shutdown().await;
}
