//! Test harness: real `hopping-gateway`, `mock-backend` and `redis-server` processes on ephemeral
//! loopback ports, with readiness waits against deadlines (never fixed sleeps) and handles to kill,
//! restart and steer them. Children are killed on drop.

#![allow(missing_docs, unreachable_pub)]

pub mod config;
pub mod dns;
mod gateway;
pub mod h2c;
pub mod h2raw;
pub mod h2ws;
pub mod http;
mod mock;
mod process;
mod redis;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod tls;
pub mod upgrade;
pub mod webdriver;
mod wire;
pub mod ws;

// Scenario helpers: raw HTTP/1.1, answer checks, load and measurement, hand-made nodes, third-party
// WebSocket peers.
pub mod check;
pub mod load;
pub mod nodes;
pub mod peers;
pub mod raw;
pub mod recorder;

pub use self::config::{Cluster, Config, Health, Route};
pub use self::gateway::{metric_value, node_in, Gateway};
pub use self::http::{get, request, Resp};
pub use self::mock::Mock;
pub use self::process::{bin, free_port, root, wait_port, wait_until, Logs};
pub use self::redis::{info_replication, Redis};
pub use self::redis_cluster::RedisCluster;
pub use self::redis_sentinel::RedisSentinel;
pub use self::wire::{find, read_head};

/// A `[[clusters]]` block named `name` with `nodes` (id, addr) and the given extra cluster lines.
pub fn cluster_toml(name: &str, nodes: &[(&str, String)], extra: &str) -> String {
    let mut s = format!("[[clusters]]\nname = \"{name}\"\n{extra}\n");
    for (id, addr) in nodes {
        s.push_str(&format!(
            "  [[clusters.nodes]]\n  id = \"{id}\"\n  addr = \"{addr}\"\n"
        ));
    }
    s
}

/// Fast probes so tests see state changes within a second or two.
pub const FAST_HEALTH: &str = "[health]\ninterval = \"200ms\"\ntimeout = \"200ms\"\ndegrade_after = 2\neject_after = 3\nrecover_after = 2\nslow_start = \"0s\"\n";
