//! `throughput`: keep-alive `GET /data` req/s straight to a `mock-backend` and through a
//! `hopping-gateway` in front of it (`--access-log off`), as a figure, not a pass/fail check.
//! Moved out of the integration suite (it was the ignored `core::throughput_direct_vs_gateway`);
//! `make bench` runs it (bench/run.sh) after building it with
//! `cargo build --release -p integration-tests --features bench --example throughput`.
//!
//! Both processes come from the test harness (`integration_tests`), so `target/release` must hold
//! the binaries (`make build`; with `HOPGW_PREBUILT=1` the harness does not build them). Flags:
//! `--tasks N` (4 keep-alive connections, one request in flight each), `--secs S` (3.0 per side).
//! Prints one line: `FIGURE keep-alive GET /data, N tasks x S s: direct D req/s, via gateway G
//! req/s (P %)`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use integration_tests::load::{flag, h1_conn};
use integration_tests::{Config, Gateway, Health, Mock, Route};
use tokio::time::Instant;

/// Requests per second that `tasks` keep-alive connections to loopback `port` complete in `secs`
/// seconds, each sending `GET /data` one at a time; panics on a non-200 answer.
async fn keepalive_rps(port: u16, tasks: usize, secs: f64) -> f64 {
    let count = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let count = count.clone();
        set.spawn(async move {
            let mut send = h1_conn::<Empty<Bytes>>(port).await;
            while Instant::now() < deadline {
                send.ready().await.expect("ready");
                let req = http::Request::get("/data")
                    .header("host", "bench.test")
                    .body(Empty::new())
                    .expect("request");
                let resp = send.send_request(req).await.expect("response");
                assert_eq!(resp.status(), 200);
                resp.into_body().collect().await.expect("body");
                count.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    while set.join_next().await.is_some() {}
    count.load(Ordering::Relaxed) as f64 / secs
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let tasks: usize = flag(&args, "--tasks", 4);
    let secs: f64 = flag(&args, "--secs", 3.0);
    let a = Mock::start("node-a").await;
    let toml = Config::single(Health::http_fast(), &[&a], Route::api()).toml();
    let gw = Gateway::start_with(&toml, &["--access-log", "off"]).await;
    let direct = keepalive_rps(a.port, tasks, secs).await;
    let via = keepalive_rps(gw.port, tasks, secs).await;
    println!(
        "FIGURE keep-alive GET /data, {tasks} tasks x {secs} s: direct {direct:.0} req/s, via gateway {via:.0} req/s ({:.0} %)",
        via / direct * 100.0
    );
}
