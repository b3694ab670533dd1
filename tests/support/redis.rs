//! Redis processes for the tests: a standalone `redis-server` on a free loopback port, and the
//! spawn, argument, port and connection helpers the Cluster and Sentinel set-ups share.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

use crate::process::signal_child;
use crate::{free_port, wait_port, wait_until};

/// Lowest port tried by [`free_cluster_port`]; the bus port P+10000 must stay below the kernel's
/// ephemeral range.
const LOWEST: u16 = 11000;

/// A running `redis-server` on a free port (no persistence).
pub struct Redis {
    pub port: u16,
    child: Option<Child>,
}

impl Redis {
    /// Starts redis-server and waits for it to accept.
    pub async fn start() -> Redis {
        let mut r = Redis {
            port: free_port(),
            child: None,
        };
        r.spawn().await;
        r
    }

    async fn spawn(&mut self) {
        // Its own working directory: a replica's full sync writes an RDB file there, never into
        // the source tree.
        let dir = std::env::temp_dir().join(format!("hopgw-redis-{}", self.port));
        std::fs::create_dir_all(&dir).expect("redis dir");
        let child = spawn_redis("redis-server", &server_args(self.port, &dir, &[]));
        self.child = Some(child);
        wait_port(self.port, Duration::from_secs(10)).await;
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// SIGKILL.
    pub async fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill().await;
        }
    }

    /// SIGSTOP: the kernel still accepts TCP connections but nothing answers (a black hole).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`Redis::pause`].
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        signal_child(self.child.as_ref(), sig, "redis-server");
    }

    /// Starts again on the same port (empty: no persistence).
    pub async fn restart(&mut self) {
        self.kill().await;
        self.spawn().await;
    }

    /// A client connection.
    pub async fn client(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("redis connect")
    }
}

/// The `redis-server` arguments every test server shares: `port` on 127.0.0.1, no persistence
/// (`--save ""`, `--appendonly no`), working directory `dir` (a replica's full sync writes its RDB
/// file there), then `extra` as given.
pub fn server_args(port: u16, dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        &dir.to_string_lossy(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// One connection attempt to the server on `port` (no cluster routing); `None` if it fails.
pub async fn try_client(port: u16) -> Option<redis::aio::MultiplexedConnection> {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .ok()?
        .get_multiplexed_async_connection()
        .await
        .ok()
}

/// Polls the server on `port` for up to 30 s until `check`, given a fresh connection, holds; a
/// failed connection counts as not yet. Panics naming `what` if it never holds.
pub async fn wait_on_node<F, Fut>(port: u16, what: &str, check: F)
where
    F: Fn(redis::aio::MultiplexedConnection) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    wait_until(Duration::from_secs(30), what, || {
        let check = &check;
        async move {
            match try_client(port).await {
                Some(c) => check(c).await,
                None => false,
            }
        }
    })
    .await;
}

/// A port P such that P and P+10000 are both free (bus port of a cluster node), below the
/// ephemeral range so no outgoing connection takes either before the node binds them.
pub fn free_cluster_port() -> u16 {
    use std::hash::BuildHasher;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let span = ephemeral_low
        .saturating_sub(10000)
        .saturating_sub(LOWEST)
        .max(1000);
    let seed = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
    for i in 0..512u64 {
        let port = LOWEST + ((seed.wrapping_add(i.wrapping_mul(7919))) % u64::from(span)) as u16;
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + 10000) {
            return port;
        }
    }
    panic!("no free port pair P, P+10000 for a cluster node");
}

/// Starts `bin` (redis-server or redis-sentinel) with `args`, output discarded, killed on drop.
pub fn spawn_redis(bin: &str, args: &[String]) -> Child {
    Command::new(bin)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{bin} on PATH: {e}"))
}

/// A plain connection to one server on `port` (no cluster routing), retried until `timeout`.
pub async fn node_client(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connect to redis on {port}: {e}"))
}

/// `INFO replication` on `c` as text; empty if the call fails (callers poll until it matches).
pub async fn info_replication(c: &mut redis::aio::MultiplexedConnection) -> String {
    redis::cmd("INFO")
        .arg("replication")
        .query_async(c)
        .await
        .unwrap_or_default()
}

/// `SENTINEL <what> <master>` on a sentinel (`what`: "REPLICAS", "SENTINELS"): one entry per
/// known peer; empty if the call fails.
pub async fn sentinel_list(
    c: &mut redis::aio::MultiplexedConnection,
    what: &str,
    master: &str,
) -> Vec<redis::Value> {
    redis::cmd("SENTINEL")
        .arg(what)
        .arg(master)
        .query_async(c)
        .await
        .unwrap_or_default()
}

/// `ROLE`'s first element on `port` ("master", "slave", "sentinel"); `None` if it does not answer.
pub async fn role(port: u16) -> Option<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let mut c = tokio::time::timeout(
        Duration::from_secs(1),
        client.get_multiplexed_async_connection(),
    )
    .await
    .ok()?
    .ok()?;
    let v: Vec<redis::Value> = tokio::time::timeout(
        Duration::from_secs(1),
        redis::cmd("ROLE").query_async(&mut c),
    )
    .await
    .ok()?
    .ok()?;
    match v.first() {
        Some(redis::Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        Some(redis::Value::SimpleString(s)) => Some(s.clone()),
        _ => None,
    }
}

/// The hash slot of `key` (CRC16/XMODEM mod 16384, honouring `{hash tags}`), as Redis Cluster computes it.
pub fn key_slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let tagged = b.iter().position(|&c| c == b'{').and_then(|s| {
        let e = b[s + 1..].iter().position(|&c| c == b'}')?;
        (e > 0).then(|| &b[s + 1..s + 1 + e])
    });
    let data = tagged.unwrap_or(b);
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    #[test]
    fn key_slot_matches_redis() {
        // Values from `CLUSTER KEYSLOT`.
        assert_eq!(super::key_slot("foo"), 12182);
        assert_eq!(
            super::key_slot("{user1000}.following"),
            super::key_slot("user1000")
        );
        assert_eq!(super::key_slot("123456789"), 0x31C3);
    }
}
