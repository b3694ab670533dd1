//! `pgo-train`: the training run of the shipped gateway's profile-guided build (`make dist`,
//! `scripts/dist.sh`; bench/README). Built with
//! `cargo build --release -p integration-tests --features bench --example pgo-train`.
//!
//! It drives an instrumented gateway (`-Cprofile-generate`) through the traffic the gateway
//! exists for, so that the optimiser learns which code is hot: keep-alive HTTP/1.1 `GET`s (with
//! and without a bound `X-Conn-Id`), `POST`s with a sized and a chunked body, WebSocket echo,
//! gRPC unary calls over h2c, HTTP/1.1 and gRPC over TLS with new handshakes, and a hop of idle
//! WebSockets after their node is killed. Every phase runs `--secs S` seconds (default 2) and
//! checks each answer: a training run that fails is an error, not a profile of error paths.
//!
//! The gateway and the mocks come from the test harness (`integration_tests`), so
//! `HOPGW_TEST_BIN_DIR` must name a directory holding the instrumented `hopping-gateway` and a
//! `mock-backend`; the gateway writes its profile where `LLVM_PROFILE_FILE` (inherited) says when it
//! exits, so each gateway is stopped with SIGTERM and waited for. Prints one line per phase:
//! `TRAIN <phase>: <count> <unit>`; exits non-zero on any failed answer.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context as _, Result};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use integration_tests::h2c::{self, grpc_headers, H2Conn};
use integration_tests::load::{flag, h1_conn};
use integration_tests::tls::{self, Ca};
use integration_tests::ws::next_text;
use integration_tests::{cluster_toml, free_port, Gateway, Mock, FAST_HEALTH};
use mock_backend::grpc::{encode_frame, proto, WHO_PATH};
use rustls::ClientConfig;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

type Body = BoxBody<Bytes, Infallible>;

/// Runs `tasks` copies of `work(i, deadline, count)` until `deadline` and returns the sum the
/// tasks added to `count`; the first task error is returned.
async fn fan_out<F, Fut>(tasks: usize, secs: f64, work: F) -> Result<u64>
where
    F: Fn(usize, Instant, Arc<AtomicU64>) -> Fut,
    Fut: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let count = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut set = JoinSet::new();
    for i in 0..tasks {
        set.spawn(work(i, deadline, count.clone()));
    }
    while let Some(r) = set.join_next().await {
        r.context("task panicked")??;
    }
    Ok(count.load(Ordering::Relaxed))
}

/// `GET /data` on keep-alive connections to `port`; odd connections carry a bound `X-Conn-Id`.
async fn h1_get(port: u16, tasks: usize, secs: f64) -> Result<u64> {
    fan_out(tasks, secs, move |i, deadline, count| async move {
        let mut send = h1_conn::<Body>(port).await;
        let id = format!("train-{i:04}");
        while Instant::now() < deadline {
            send.ready().await?;
            let mut req = http::Request::get("/data").header("host", "train.test");
            if i % 2 == 1 {
                req = req.header("x-conn-id", &id);
            }
            let resp = send
                .send_request(req.body(Full::default().boxed())?)
                .await?;
            ensure!(resp.status() == 200, "GET /data: {}", resp.status());
            resp.into_body().collect().await?;
            count.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    })
    .await
}

/// `POST /echo` with a 1 KiB body, sized (`content-length`) and chunked in turn; checks the
/// node's `body_len`.
async fn h1_post(port: u16, tasks: usize, secs: f64) -> Result<u64> {
    fan_out(tasks, secs, move |_, deadline, count| async move {
        let mut send = h1_conn::<Body>(port).await;
        let chunk = Bytes::from(vec![b'x'; 512]);
        let mut n = 0u64;
        while Instant::now() < deadline {
            send.ready().await?;
            let body: Body = if n.is_multiple_of(2) {
                Full::new(Bytes::from(vec![b'x'; 1024])).boxed()
            } else {
                let frames = [chunk.clone(), chunk.clone()].map(|c| Ok(Frame::data(c)));
                BodyExt::boxed(StreamBody::new(futures_util::stream::iter(frames)))
            };
            let req = http::Request::post("/echo")
                .header("host", "train.test")
                .header("content-type", "application/octet-stream")
                .body(body)?;
            let resp = send.send_request(req).await?;
            ensure!(resp.status() == 200, "POST /echo: {}", resp.status());
            let body = resp.into_body().collect().await?.to_bytes();
            let v: serde_json::Value = serde_json::from_slice(&body)?;
            ensure!(
                v["body_len"] == 1024,
                "POST /echo body_len: {}",
                v["body_len"]
            );
            n += 1;
            count.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    })
    .await
}

/// WebSocket echo on `tasks` sockets, one 64-byte message in flight on each.
async fn ws_echo(port: u16, tasks: usize, secs: f64) -> Result<u64> {
    fan_out(tasks, secs, move |_, deadline, count| async move {
        let (mut ws, _) =
            tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}/ws")).await?;
        ws.next().await.context("no hello")??;
        let text = "m".repeat(64);
        while Instant::now() < deadline {
            ws.send(Message::text(text.clone())).await?;
            match ws.next().await.context("socket ended")?? {
                Message::Text(t) if t.as_str() == text => {}
                other => bail!("echo: {other:?}"),
            }
            count.fetch_add(1, Ordering::Relaxed);
        }
        ws.close(None).await?;
        Ok(())
    })
    .await
}

/// `Who` unary calls on `conn`, `streams` in flight; checks `grpc-status: 0`.
async fn grpc_calls(conn: H2Conn, streams: usize, secs: f64) -> Result<u64> {
    let conn = Arc::new(conn);
    fan_out(streams, secs, move |_, deadline, count| {
        let conn = conn.clone();
        async move {
            while Instant::now() < deadline {
                let req = conn.request(
                    "POST",
                    WHO_PATH,
                    &grpc_headers(&[]),
                    encode_frame(&proto::WhoRequest {}),
                );
                let mut send = conn.send.clone();
                send.ready().await?;
                let resp = h2c::read_all(send.send_request(req).await?).await?;
                ensure!(
                    resp.status == 200 && resp.trailer("grpc-status").as_deref() == Some("0"),
                    "Who: {} {:?}",
                    resp.status,
                    resp.trailer("grpc-status")
                );
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        }
    })
    .await
}

/// `GET /data` over TLS to `port` (client settings `cfg`), a new connection (and handshake) every 100 requests.
async fn tls_get(port: u16, cfg: Arc<ClientConfig>, tasks: usize, secs: f64) -> Result<u64> {
    fan_out(tasks, secs, move |_, deadline, count| {
        let cfg = cfg.clone();
        async move {
            while Instant::now() < deadline {
                let mut send =
                    tls::http1(tls::connect(port, "localhost", cfg.clone()).await?).await?;
                for _ in 0..100 {
                    let (status, _, _) = tls::h1_get(&mut send, "localhost", "/data").await?;
                    ensure!(status == 200, "GET /data over TLS: {status}");
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(())
        }
    })
    .await
}

/// Opens `sockets` idle WebSockets, kills `node` (the mock `node_id`) and waits until every
/// socket it held reads the hello of its new node (`hopped_from` = `node_id`, SPEC section 9);
/// returns the number of hops. A missing hello or hop (30 s) panics in [`next_text`].
async fn hop(port: u16, sockets: usize, node: &mut Mock, node_id: &str) -> Result<u64> {
    let mut open = Vec::with_capacity(sockets);
    for _ in 0..sockets {
        let (mut ws, _) =
            tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}/ws")).await?;
        let hello: serde_json::Value =
            serde_json::from_str(&next_text(&mut ws, Duration::from_secs(10)).await)?;
        if hello["node"] == node_id {
            open.push(ws);
        }
    }
    node.kill().await;
    let mut set = JoinSet::new();
    for mut ws in open {
        let from = node_id.to_string();
        set.spawn(async move {
            let hello: serde_json::Value =
                serde_json::from_str(&next_text(&mut ws, Duration::from_secs(30)).await)?;
            ensure!(hello["hopped_from"] == from.as_str(), "not a hop: {hello}");
            Ok(())
        });
    }
    let mut hops = 0;
    while let Some(r) = set.join_next().await {
        r.context("task panicked")??;
        hops += 1;
    }
    Ok(hops)
}

/// Stops `gw` with SIGTERM and waits for exit code 0 (the profile is written at exit).
async fn stop(mut gw: Gateway) -> Result<()> {
    gw.signal("TERM");
    match gw.wait_exit(Duration::from_secs(15)).await {
        Some(0) => Ok(()),
        other => bail!("gateway exit after SIGTERM: {other:?}"),
    }
}

/// Kept as one function: the training run's steps in the order they run.
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let secs: f64 = flag(&args, "--secs", 2.0);
    let ca = Ca::new("pgo-train CA");
    let leaf = ca.leaf(&["localhost"]);
    let mut a = Mock::start_with("node-a", &["--grpc"]).await;
    let b = Mock::start_with("node-b", &["--grpc"]).await;
    let tls_port = free_port();
    let toml = format!(
        "{FAST_HEALTH}\n{}\n{}\n\
         [[routes]]\nid = \"grpc\"\nmatch = {{ path_prefix = \"/hopping.test.v1.Echo/\" }}\ncluster = \"grpc\"\n\n\
         [[routes]]\nid = \"web\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"web\"\nwebsocket = \"hop\"\n\n\
         [server.tls]\nlisten = \"127.0.0.1:{tls_port}\"\n\
         \x20 [[server.tls.certs]]\n  cert = \"{}\"\n  key = \"{}\"\n  server_names = [\"localhost\"]\n",
        cluster_toml("web", &[("node-a", a.addr()), ("node-b", b.addr())], ""),
        cluster_toml(
            "grpc",
            &[("grpc-a", a.grpc_addr()), ("grpc-b", b.grpc_addr())],
            "protocol = \"h2c\""
        ),
        leaf.cert.display(),
        leaf.key.display(),
    );

    // The default settings (access log on, one worker per core), briefly.
    let gw = Gateway::start(&toml).await;
    println!(
        "TRAIN h1 GET, access log on: {} requests",
        h1_get(gw.port, 8, secs / 2.0).await?
    );
    stop(gw).await?;

    // The bench settings, every phase.
    let gw = Gateway::start_with(&toml, &["--workers", "1", "--access-log", "off"]).await;
    for id in ["node-a", "node-b"] {
        gw.wait_node_state(id, "healthy", Duration::from_secs(10))
            .await;
    }
    println!(
        "TRAIN h1 GET: {} requests",
        h1_get(gw.port, 32, secs).await?
    );
    println!(
        "TRAIN h1 POST: {} requests",
        h1_post(gw.port, 8, secs).await?
    );
    println!(
        "TRAIN WebSocket echo: {} messages",
        ws_echo(gw.port, 32, secs).await?
    );
    let mut calls = 0;
    let mut set = JoinSet::new();
    for _ in 0..4 {
        let conn = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
        set.spawn(grpc_calls(conn, 16, secs));
    }
    while let Some(r) = set.join_next().await {
        calls += r??;
    }
    println!("TRAIN gRPC over h2c: {calls} calls");
    println!(
        "TRAIN h1 GET over TLS: {} requests",
        tls_get(
            tls_port,
            tls::client_config(&ca.pem, &["http/1.1"], None),
            8,
            secs
        )
        .await?
    );
    let cfg = tls::client_config(&ca.pem, &["h2"], None);
    let conn = tls::h2(
        tls::connect(tls_port, "localhost", cfg).await?,
        &format!("localhost:{tls_port}"),
    )
    .await;
    println!(
        "TRAIN gRPC over TLS: {} calls",
        grpc_calls(conn, 16, secs).await?
    );
    println!(
        "TRAIN WebSocket hop: {} hops",
        hop(gw.port, 400, &mut a, "node-a").await?
    );
    stop(gw).await?;
    Ok(())
}
