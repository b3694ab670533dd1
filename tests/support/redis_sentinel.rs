//! A real Sentinel set-up for tests: one master, one replica (`--replicaof`) and three
//! `redis-sentinel` processes monitoring it as `mymaster` (quorum 2, `down-after` 1 s), all on
//! loopback ports. Every process is killed on drop.
//!
//! Used by the Sentinel scenarios.

use std::time::Duration;

use tokio::process::Child;

use crate::redis::{
    info_replication, node_client, role, sentinel_list, server_args, spawn_redis, wait_on_node,
};
use crate::{free_port, wait_until};

/// The monitored master's name.
pub const MASTER_NAME: &str = "mymaster";

/// A running master + replica + three sentinels, killed on drop.
pub struct RedisSentinel {
    _dir: tempfile::TempDir,
    /// Ports of the two data servers (the first starts as master).
    pub data_ports: [u16; 2],
    /// Ports of the three sentinels.
    pub sentinel_ports: [u16; 3],
    _children: Vec<Child>,
}

impl RedisSentinel {
    /// Starts the master, its replica and three sentinels, and waits until every sentinel knows
    /// the replica and the two other sentinels (so a `SENTINEL FAILOVER` can run).
    /// Long on purpose: five processes and the waits that make a failover possible, in order.
    pub async fn start() -> RedisSentinel {
        let dir = tempfile::tempdir().expect("tempdir");
        let data_ports = [free_port(), free_port()];
        let mut children = Vec::new();
        for (i, port) in data_ports.iter().enumerate() {
            let mut args = server_args(*port, dir.path(), &[]);
            if i == 1 {
                args.extend([
                    "--replicaof".into(),
                    "127.0.0.1".into(),
                    data_ports[0].to_string(),
                ]);
            }
            children.push(spawn_redis("redis-server", &args));
            let p = *port;
            wait_until(
                Duration::from_secs(10),
                &format!("redis {p} to answer"),
                || async move { role(p).await.is_some() },
            )
            .await;
        }
        let master = data_ports[0];
        wait_until(
            Duration::from_secs(10),
            "the replica to sync",
            || async move {
                let mut c = node_client(master).await;
                let info = info_replication(&mut c).await;
                info.contains("connected_slaves:1") && info.contains("state=online")
            },
        )
        .await;
        let sentinel_ports = [free_port(), free_port(), free_port()];
        for port in sentinel_ports {
            let conf = dir.path().join(format!("sentinel-{port}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {master} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 5000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n",
                    dir = dir.path().display()
                ),
            )
            .expect("write sentinel.conf");
            children.push(spawn_redis(
                "redis-sentinel",
                &[conf.to_string_lossy().into_owned()],
            ));
        }
        for port in sentinel_ports {
            let what = format!("sentinel {port} to know the replica and its peers");
            wait_on_node(port, &what, |mut c| async move {
                let replicas = sentinel_list(&mut c, "REPLICAS", MASTER_NAME).await;
                let peers = sentinel_list(&mut c, "SENTINELS", MASTER_NAME).await;
                replicas.len() == 1 && peers.len() == 2
            })
            .await;
        }
        RedisSentinel {
            _dir: dir,
            data_ports,
            sentinel_ports,
            _children: children,
        }
    }

    /// `redis+sentinel://127.0.0.1:s1,127.0.0.1:s2,127.0.0.1:s3/mymaster` (SPEC section 7).
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinel_ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// The master's port as the first sentinel names it.
    pub async fn master_port(&self) -> u16 {
        let mut c = node_client(self.sentinel_ports[0]).await;
        let (_host, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(MASTER_NAME)
            .query_async(&mut c)
            .await
            .expect("SENTINEL GET-MASTER-ADDR-BY-NAME");
        port
    }

    /// `SENTINEL FAILOVER mymaster` on the first sentinel; returns the new master's port once
    /// every sentinel names it and its `ROLE` is master.
    pub async fn failover(&self) -> u16 {
        let old = self.master_port().await;
        let mut c = node_client(self.sentinel_ports[0]).await;
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(MASTER_NAME)
            .query_async(&mut c)
            .await
            .expect("SENTINEL FAILOVER");
        let new = if old == self.data_ports[0] {
            self.data_ports[1]
        } else {
            self.data_ports[0]
        };
        let sentinels = self.sentinel_ports;
        wait_until(
            Duration::from_secs(20),
            "every sentinel to name the new master",
            || async move {
                for s in sentinels {
                    let mut c = node_client(s).await;
                    let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
                        .arg("GET-MASTER-ADDR-BY-NAME")
                        .arg(MASTER_NAME)
                        .query_async(&mut c)
                        .await
                        .ok();
                    if addr.map(|a| a.1) != Some(new) {
                        return false;
                    }
                }
                role(new).await.as_deref() == Some("master")
            },
        )
        .await;
        new
    }

    /// A plain connection to the data server on `port`.
    pub async fn client(&self, port: u16) -> redis::aio::MultiplexedConnection {
        node_client(port).await
    }
}
