//! Drain and graceful shutdown (SPEC section 5): admin drain/undrain, no new work on a draining
//! node while in-flight work finishes, bound ids hopping off it, h2 connection-level affinity with
//! GOAWAY, streams closed at the drain deadline (gRPC: `grpc-status: 14`), and SIGTERM.

mod admin;
mod sigterm;
mod streams;

use bytes::Bytes;
use integration_tests::h2c::{self, grpc_headers, Stream};
use integration_tests::{get, wait_until, Gateway, Mock};
use integration_tests::{Cluster, Config, Health, Route};
use mock_backend::grpc::{encode_frame, proto, WHO_PATH};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// `top` tables, TCP probes every 200 ms (a node made slow with `/control/delay` stays healthy),
/// cluster `c` of `nodes` with `cluster_extra` lines, and the catch-all route `api`.
fn config(nodes: &[(&str, String)], cluster_extra: &str, top: &str) -> String {
    Config::new()
        .raw_top(top)
        .health(
            Health::tcp()
                .every("200ms", "500ms")
                .key("slow_start", "\"0s\""),
        )
        .with_cluster(Cluster::new("c").line(cluster_extra).addrs(nodes))
        .route(Route::api())
        .toml()
}

/// Starts node-a and node-b and a gateway over them ([`config`] with `cluster_extra` and `top`).
async fn two_nodes(cluster_extra: &str, top: &str) -> (Mock, Mock, Gateway) {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let nodes = [("node-a", a.addr()), ("node-b", b.addr())];
    let gw = Gateway::start(&config(&nodes, cluster_extra, top)).await;
    (a, b, gw)
}

/// Starts node-a and node-b with gRPC ports and a gateway over those ports as a
/// `protocol = "h2c"` cluster ([`config`] with `top`).
async fn two_grpc_nodes(top: &str) -> (Mock, Mock, Gateway) {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let b = Mock::start_with("node-b", &["--grpc"]).await;
    let nodes = [("node-a", a.grpc_addr()), ("node-b", b.grpc_addr())];
    let gw = Gateway::start(&config(&nodes, "protocol = \"h2c\"", top)).await;
    (a, b, gw)
}
