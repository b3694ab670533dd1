//! A real Redis Cluster for tests: `redis-server --cluster-enabled yes` processes on loopback
//! ports (each port P also needs P+10000 free for the cluster bus), joined with
//! `redis-cli --cluster create ... --cluster-replicas 1`. Every process is killed on drop.
//!
//! Used by the Redis Cluster scenarios and the fleet test.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};

pub use crate::redis::{free_cluster_port, key_slot, node_client, role, spawn_redis};
use crate::redis::{info_replication, server_args, try_client, wait_on_node};
use crate::wait_until;

/// One cluster node: its port, config file and process.
struct Node {
    port: u16,
    child: Option<Child>,
}

/// A running 3-master, 3-replica Redis Cluster on loopback (no persistence), killed on drop.
pub struct RedisCluster {
    dir: tempfile::TempDir,
    nodes: Vec<Node>,
}

impl RedisCluster {
    /// Starts six nodes, creates the cluster with one replica per master, and waits until every
    /// node reports `cluster_state:ok` and knows all six nodes. `cluster-node-timeout` is 1 s, so a
    /// killed master fails over in about two seconds.
    pub async fn start() -> RedisCluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < 6 {
            let p = free_cluster_port();
            if !ports.contains(&p) && !ports.iter().any(|q| q.abs_diff(p) == 10000) {
                ports.push(p);
            }
        }
        let mut c = RedisCluster {
            dir,
            nodes: ports
                .into_iter()
                .map(|port| Node { port, child: None })
                .collect(),
        };
        for i in 0..c.nodes.len() {
            c.spawn(i).await;
        }
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(c.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)));
        args.extend([
            "--cluster-replicas".into(),
            "1".into(),
            "--cluster-yes".into(),
        ]);
        let out = Command::new("redis-cli")
            .args(&args)
            .stdin(Stdio::null())
            .output()
            .await
            .expect("redis-cli on PATH");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        c.wait_ok(Duration::from_secs(30)).await;
        c
    }

    fn config_file(&self, port: u16) -> PathBuf {
        self.dir.path().join(format!("nodes-{port}.conf"))
    }

    async fn spawn(&mut self, i: usize) {
        let port = self.nodes[i].port;
        let config = self.config_file(port);
        let args = server_args(
            port,
            self.dir.path(),
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &config.to_string_lossy(),
                "--cluster-node-timeout",
                "1000",
                // A replica of a quiet master may fail over however long ago it last heard from it.
                "--cluster-replica-validity-factor",
                "0",
            ],
        );
        self.nodes[i].child = Some(spawn_redis("redis-server", &args));
        wait_until(
            Duration::from_secs(10),
            &format!("cluster node {port} to answer"),
            || async move { role(port).await.is_some() },
        )
        .await;
    }

    /// Every node's port, in start order.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// `redis+cluster://127.0.0.1:p1,...` with every node as a seed (SPEC section 7).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// One `redis://127.0.0.1:P` URL per node (seed list for a cluster client).
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect()
    }

    /// A cluster-aware client (routes keys to their slot's master, follows MOVED/ASK).
    pub async fn client(&self) -> redis::cluster_async::ClusterConnection {
        redis::cluster::ClusterClient::new(self.urls())
            .expect("cluster urls")
            .get_async_connection()
            .await
            .expect("cluster connect")
    }

    /// Ports of the running nodes whose `ROLE` is master.
    pub async fn masters(&self) -> Vec<u16> {
        let mut out = Vec::new();
        for n in &self.nodes {
            if n.child.is_some() && role(n.port).await.as_deref() == Some("master") {
                out.push(n.port);
            }
        }
        out
    }

    /// Port of the master serving `slot`, as `CLUSTER NODES` of a live node says; panics if no
    /// master that is not failing serves it (see [`RedisCluster::slot_master`]).
    pub async fn master_of_slot(&self, slot: u16) -> u16 {
        match self.slot_master(slot).await {
            Ok(p) => p,
            Err(nodes) => panic!("no master serves slot {slot}:\n{nodes}"),
        }
    }

    /// Port of the master serving `slot`, or the `CLUSTER NODES` text when no master that is not
    /// failing (flags `fail` or `fail?`) serves it, e.g. while a failover is under way.
    pub async fn slot_master(&self, slot: u16) -> Result<u16, String> {
        let nodes = self.cluster_nodes().await;
        for line in nodes.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 9 || !f[2].contains("master") || f[2].contains("fail") {
                continue;
            }
            let covers = f[8..].iter().any(|r| {
                let (lo, hi) = r.split_once('-').unwrap_or((r, r));
                matches!((lo.parse::<u16>(), hi.parse::<u16>()), (Ok(lo), Ok(hi)) if lo <= slot && slot <= hi)
            });
            if covers {
                return Ok(port_of(f[1]));
            }
        }
        Err(nodes)
    }

    /// The node id of the node on `port`.
    pub async fn node_id(&self, port: u16) -> String {
        let mut c = node_client(port).await;
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query_async(&mut c)
            .await
            .expect("CLUSTER MYID")
    }

    /// Port of a replica of the master on `master`.
    pub async fn replica_of(&self, master: u16) -> u16 {
        let id = self.node_id(master).await;
        for line in self.cluster_nodes().await.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() >= 4 && f[2].contains("slave") && f[3] == id && !f[2].contains("fail") {
                return port_of(f[1]);
            }
        }
        panic!("master {master} has no live replica");
    }

    async fn cluster_nodes(&self) -> String {
        for n in self.nodes.iter().filter(|n| n.child.is_some()) {
            let Some(mut c) = try_client(n.port).await else {
                continue;
            };
            if let Ok(s) = redis::cmd("CLUSTER")
                .arg("NODES")
                .query_async::<String>(&mut c)
                .await
            {
                return s;
            }
        }
        panic!("no cluster node answers CLUSTER NODES");
    }

    /// Waits until every running node reports `cluster_state:ok`.
    pub async fn wait_ok(&self, timeout: Duration) {
        let ports: Vec<u16> = self
            .nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(|n| n.port)
            .collect();
        let ports = &ports;
        wait_until(timeout, "cluster_state:ok on every node", || async move {
            for &p in ports {
                let Some(mut c) = try_client(p).await else {
                    return false;
                };
                let info: String = match redis::cmd("CLUSTER").arg("INFO").query_async(&mut c).await
                {
                    Ok(s) => s,
                    Err(_) => return false,
                };
                if !info.contains("cluster_state:ok") || !info.contains("cluster_known_nodes:6") {
                    return false;
                }
            }
            true
        })
        .await;
    }

    /// SIGKILLs the node on `port` (e.g. a master, to make its replica take over).
    pub async fn kill(&mut self, port: u16) {
        let n = self.node_mut(port);
        if let Some(mut c) = n.child.take() {
            let _ = c.kill().await;
        }
    }

    /// Starts the node on `port` again with its cluster config file, so it rejoins (a killed
    /// master comes back as a replica of the node that took over). Waits until it answers.
    pub async fn restart(&mut self, port: u16) {
        self.kill(port).await;
        let i = self
            .nodes
            .iter()
            .position(|n| n.port == port)
            .expect("a node of this cluster");
        self.spawn(i).await;
    }

    /// `CLUSTER FAILOVER` on the replica on `replica` (a manual failover without data loss), once
    /// it is a replica with its link to the master up (`INFO replication`).
    pub async fn failover(&self, replica: u16) {
        let what = format!("{replica} to be a synced replica");
        wait_on_node(replica, &what, |mut c| async move {
            let info = info_replication(&mut c).await;
            info.contains("role:slave") && info.contains("master_link_status:up")
        })
        .await;
        let mut c = node_client(replica).await;
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query_async(&mut c)
            .await
            .expect("CLUSTER FAILOVER");
    }

    /// Moves `slot` from the master on `from` to the master on `to` the way `redis-cli --cluster
    /// reshard` does: `SETSLOT IMPORTING`/`MIGRATING`, `MIGRATE` of its keys in batches of `batch`
    /// (pausing `pause` between batches, so traffic meets the ASK window), then `SETSLOT NODE` on
    /// every master.
    pub async fn migrate_slot(&self, slot: u16, from: u16, to: u16, batch: usize, pause: Duration) {
        let (from_id, to_id) = (self.node_id(from).await, self.node_id(to).await);
        let (mut src, mut dst) = (node_client(from).await, node_client(to).await);
        let setslot = |state: &str, id: &str| {
            let mut c = redis::cmd("CLUSTER");
            c.arg("SETSLOT").arg(slot).arg(state).arg(id);
            c
        };
        let _: () = setslot("IMPORTING", &from_id)
            .query_async(&mut dst)
            .await
            .expect("SETSLOT IMPORTING");
        let _: () = setslot("MIGRATING", &to_id)
            .query_async(&mut src)
            .await
            .expect("SETSLOT MIGRATING");
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(batch)
                .query_async(&mut src)
                .await
                .expect("GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            let _: () = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(to)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys)
                .query_async(&mut src)
                .await
                .expect("MIGRATE");
            tokio::time::sleep(pause).await;
        }
        for m in self.masters().await {
            let mut c = node_client(m).await;
            let _: () = setslot("NODE", &to_id)
                .query_async(&mut c)
                .await
                .expect("SETSLOT NODE");
        }
    }

    fn node_mut(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of this cluster")
    }
}

/// `127.0.0.1:7000@17000` -> 7000.
fn port_of(addr: &str) -> u16 {
    addr.split('@')
        .next()
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("bad node address {addr}"))
}
