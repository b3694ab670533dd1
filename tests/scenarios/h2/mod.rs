//! HTTP/2 and gRPC pass-through (SPEC sections 4 and 5): h2c downstream, h2c upstream for
//! `protocol = "h2c"` clusters, trailers-only answers (CASE-07), `te: trailers` (CASE-08), a
//! node's graceful GOAWAY (CASE-09), h2c probes and GOAWAY (CASE-18), `:authority`/`host`
//! (CASE-12), and unbuffered server streams that outlive the route timeout (CASE-24).

mod connections;
mod headers;
mod metadata;
mod streaming;

use bytes::Bytes;
use hyper_util::rt::TokioIo;
use integration_tests::check::echo_header;
use integration_tests::h2c::{self, grpc_headers, grpc_messages, Stream};
use integration_tests::{cluster_toml, get, wait_until, Gateway, Mock, FAST_HEALTH};
use integration_tests::{Cluster, Config, Health, Route};
use mock_backend::grpc::{encode_frame, proto, WHO_PATH};
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Health that never touches the nodes' HTTP counters (TCP connect every 200 ms).
const TCP_HEALTH: &str =
    "[health]\nkind = \"tcp\"\ninterval = \"200ms\"\ntimeout = \"500ms\"\nslow_start = \"0s\"\n";

/// One cluster `c` (with `cluster_extra` lines) and one route `api` for `/` with `route` lines.
fn config(health: &str, nodes: &[(&str, String)], cluster_extra: &str, route: &str) -> String {
    Config::new()
        .raw_top(health)
        .with_cluster(Cluster::new("c").line(cluster_extra).addrs(nodes))
        .route(Route::api().line(route))
        .toml()
}

/// Starts node-a and node-b and a gateway over them: `health`, cluster `c` with `cluster_extra`
/// lines, route `api` ([`config`]).
async fn two_nodes(health: &str, cluster_extra: &str) -> (Mock, Mock, Gateway) {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let nodes = [("node-a", a.addr()), ("node-b", b.addr())];
    let gw = Gateway::start(&config(health, &nodes, cluster_extra, "")).await;
    (a, b, gw)
}

/// A gateway (`health`) over node `id` at `addr` alone as a `protocol = "h2c"` cluster, with
/// `route` lines ([`config`]).
async fn h2c_gateway(health: &str, id: &str, addr: String, route: &str) -> Gateway {
    Gateway::start(&config(health, &[(id, addr)], "protocol = \"h2c\"", route)).await
}

/// A gateway over node-a `a` alone as a `protocol = "h2c"` cluster, probed with `health`.
async fn one_h2c_node(health: &str, a: &Mock) -> Gateway {
    h2c_gateway(health, "node-a", a.addr(), "").await
}

/// Starts node-a with `--grpc` and a gateway (`health`) over its gRPC port as a `protocol =
/// "h2c"` cluster with `route` lines ([`config`]); returns both and an h2c connection to the
/// gateway.
async fn grpc_node(health: &str, route: &str) -> (Mock, Gateway, h2c::H2Conn) {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let gw = h2c_gateway(health, "node-a", a.grpc_addr(), route).await;
    let c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    (a, gw, c)
}

/// Node ids currently in flight on the gateway, by node.
async fn inflight(gw: &Gateway, id: &str) -> u64 {
    gw.node(id).await["inflight"].as_u64().expect("inflight")
}

/// ESTABLISHED TCP connections of the gateway process whose remote end is loopback `port` (its
/// upstream connections to the node on that port).
fn established_to(gw: &Gateway, port: u16) -> usize {
    let pid = gw.pid().expect("gateway running");
    // Socket inodes the gateway holds open.
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("gateway fds")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')
                .map(str::to_string)
        })
        .collect();
    let text = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let want = format!("0100007F:{port:04X}");
    text.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 9 && f[2] == want && f[3] == "01" && inodes.contains(f[9])
        })
        .count()
}
