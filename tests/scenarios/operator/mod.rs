//! The operator surface without a browser (SPEC section 11): the `/admin/events` stream
//! and its bound on slow readers, readiness that means ready, the `health_listen` listener.

mod access_log;
mod events;
mod readiness;

use integration_tests::http::get;
use integration_tests::{bin, find, free_port, wait_until, Gateway, Logs, Mock};
use integration_tests::{Cluster, Config, Health, Route};
use serde_json::Value;
use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::Instant;

/// A raw `GET /admin/events` reader (so a test can stop reading at will).
struct Sse {
    s: TcpStream,
    buf: Vec<u8>,
    pos: usize,
}

impl Sse {
    /// Connects (with a small receive buffer when `small_rcvbuf`) and waits for the stream to start.
    async fn connect(admin_port: u16, small_rcvbuf: bool) -> Sse {
        let sock = TcpSocket::new_v4().expect("socket");
        if small_rcvbuf {
            sock.set_recv_buffer_size(4096).expect("SO_RCVBUF");
        }
        let mut s = sock
            .connect(([127, 0, 0, 1], admin_port).into())
            .await
            .expect("connect admin");
        s.write_all(b"GET /admin/events HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .expect("write");
        let mut sse = Sse {
            s,
            buf: Vec::new(),
            pos: 0,
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while find(&sse.buf, b": subscribed").is_none() {
            assert!(
                Instant::now() < deadline,
                "no stream start: {:?}",
                String::from_utf8_lossy(&sse.buf)
            );
            sse.read_some().await;
        }
        let head = String::from_utf8_lossy(&sse.buf).to_lowercase();
        assert!(head.starts_with("http/1.1 200"), "{head}");
        assert!(head.contains("content-type: text/event-stream"), "{head}");
        sse
    }

    async fn read_some(&mut self) -> usize {
        let mut chunk = [0u8; 16384];
        match tokio::time::timeout(Duration::from_millis(200), self.s.read(&mut chunk)).await {
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                n
            }
            _ => 0,
        }
    }

    /// The next event of `kind` whose data satisfies `pred` (events of other kinds are skipped).
    async fn next(&mut self, kind: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            while let Some(start) = find(&self.buf[self.pos..], b"event: ").map(|i| self.pos + i) {
                let Some(end) = find(&self.buf[start..], b"\n\n").map(|i| start + i) else {
                    break;
                };
                let msg = String::from_utf8_lossy(&self.buf[start..end]).to_string();
                self.pos = end + 2;
                let mut lines = msg.lines();
                let k = lines.next().unwrap_or("").trim_start_matches("event: ");
                let data = lines.next().unwrap_or("").trim_start_matches("data: ");
                let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {msg}"));
                if k == kind && pred(&v) {
                    return v;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no {kind} event; stream so far: {}",
                String::from_utf8_lossy(&self.buf[self.pos..])
            );
            self.read_some().await;
        }
    }
}

/// A config with one cluster of `nodes`, one route to it, and fast probes.
fn config(nodes: &[(&str, String)]) -> String {
    Config::new()
        .health(Health::http().every("300ms", "300ms"))
        .cluster_addrs("provider-service", nodes)
        .route(Route::prefix("api", "/", "provider-service"))
        .toml()
}

fn two_nodes(a: &Mock, b: &Mock) -> String {
    config(&[("node-a", a.addr()), ("node-b", b.addr())])
}
