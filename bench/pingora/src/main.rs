//! The Pingora row of `make bench` (bench/README.md): pingora-proxy with a round-robin
//! `LoadBalancer` on one thread, configured like the nginx and HAProxy rows of bench/run.sh.
//!
//! Usage: `bench-pingora LISTEN_ADDR BACKEND_ADDR...`, e.g. `bench-pingora 127.0.0.1:8080 127.0.0.1:9000`.
//! - one service thread (`threads: 1`, no work stealing), like `worker_processes 1` / `nbthread 1`;
//! - keep-alive upstream pool (Pingora's default, 128 idle connections), so requests reuse node connections;
//! - `X-Forwarded-For` appended with the client address and `X-Forwarded-Proto: http` set, as nginx's
//!   `$proxy_add_x_forwarded_for` and HAProxy's `option forwardfor` do;
//! - WebSocket and other HTTP/1.1 upgrades pass through (pingora-proxy relays an upgraded connection's bytes itself);
//! - SIGTERM stops it after a 1 s grace (Pingora's default is 5 min), so bench/run.sh's `stop` is quick.

use std::sync::Arc;

use async_trait::async_trait;
use pingora::http::RequestHeader;
use pingora::lb::selection::RoundRobin;
use pingora::lb::LoadBalancer;
use pingora::prelude::{HttpPeer, Result};
use pingora::proxy::{http_proxy_service, ProxyHttp, Session};
use pingora::server::configuration::ServerConf;
use pingora::server::Server;

/// The proxy: every request goes to the next backend of the round robin.
struct Bench(Arc<LoadBalancer<RoundRobin>>);

#[async_trait]
impl ProxyHttp for Bench {
    type CTX = ();

    fn new_ctx(&self) -> Self::CTX {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        // Round robin ignores the key; `256` bounds the walk over unhealthy backends.
        let backend = self
            .0
            .select(b"", 256)
            .ok_or_else(|| pingora::Error::new_str("no backend"))?;
        Ok(Box::new(HttpPeer::new(backend, false, String::new())))
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        _ctx: &mut (),
    ) -> Result<()> {
        if let Some(client) = session.client_addr().and_then(|a| a.as_inet()) {
            let ip = client.ip().to_string();
            let xff = match upstream
                .headers
                .get("x-forwarded-for")
                .and_then(|v| v.to_str().ok())
            {
                Some(prior) => format!("{prior}, {ip}"),
                None => ip,
            };
            upstream.insert_header("X-Forwarded-For", xff)?;
        }
        upstream.insert_header("X-Forwarded-Proto", "http")?;
        Ok(())
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 2 {
        eprintln!("usage: bench-pingora LISTEN_ADDR BACKEND_ADDR...");
        std::process::exit(2);
    }
    let conf = ServerConf {
        threads: 1,
        work_stealing: false,
        grace_period_seconds: Some(0),
        graceful_shutdown_timeout_seconds: Some(1),
        pid_file: format!("/tmp/bench-pingora-{}.pid", std::process::id()),
        upgrade_sock: format!("/tmp/bench-pingora-{}.sock", std::process::id()),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let backends =
        match LoadBalancer::<RoundRobin>::try_from_iter(args[1..].iter().map(String::as_str)) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("bench-pingora: bad backend address: {e}");
                std::process::exit(2);
            }
        };
    let mut service = http_proxy_service(&server.configuration, Bench(Arc::new(backends)));
    service.add_tcp(&args[0]);
    server.add_service(service);
    server.run_forever();
}
