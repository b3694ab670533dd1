//! Idle HTTP/1.1 keep-alive connections move to the new process (SPEC section 13): each one
//! answers its next request on the same socket after the old process exited, each is counted in
//! `gateway_upgrade_moved_total{kind="http1"}`, and a request written while the handover runs is
//! answered, never met by a closed connection. Raw sockets, so that "the same connection" is sure.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::gateway;

/// Kept-alive connections moved in one upgrade.
const CONNS: usize = 20;

/// One raw HTTP/1.1 client connection.
struct Raw {
    tcp: TcpStream,
    buf: Vec<u8>,
}

/// What one answer said.
struct Answer {
    status: u16,
    closing: bool,
}

impl Raw {
    async fn open(port: u16) -> Raw {
        let tcp = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        Raw {
            tcp,
            buf: Vec::new(),
        }
    }

    /// Writes `GET /data` and reads its whole answer (within 10 s).
    async fn get(&mut self) -> Result<Answer, String> {
        self.tcp
            .write_all(b"GET /data HTTP/1.1\r\nHost: gw\r\n\r\n")
            .await
            .map_err(|e| format!("write: {e}"))?;
        tokio::time::timeout(Duration::from_secs(10), self.answer())
            .await
            .map_err(|_| "no answer in 10 s".to_string())?
    }

    async fn fill(&mut self) -> Result<(), String> {
        let mut chunk = [0u8; 4096];
        match self.tcp.read(&mut chunk).await {
            Ok(0) => Err("closed by the gateway".into()),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) => Err(format!("read: {e}")),
        }
    }

    /// Reads one answer: its head, then a `Content-Length` or chunked body.
    async fn answer(&mut self) -> Result<Answer, String> {
        let end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            self.fill().await?;
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).to_ascii_lowercase();
        self.buf.drain(..end);
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad head: {head}"))?;
        let field = |name: &str| {
            head.lines()
                .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
        };
        let closing = field("connection:").is_some_and(|v| v == "close");
        if let Some(len) = field("content-length:") {
            let len: usize = len.parse().map_err(|_| format!("length {len}"))?;
            while self.buf.len() < len {
                self.fill().await?;
            }
            self.buf.drain(..len);
        } else if field("transfer-encoding:").is_some_and(|v| v.contains("chunked")) {
            let end = loop {
                if let Some(i) = self.buf.windows(5).position(|w| w == b"0\r\n\r\n") {
                    break i + 5;
                }
                self.fill().await?;
            };
            self.buf.drain(..end);
        }
        Ok(Answer { status, closing })
    }
}

#[tokio::test]
async fn upgrade_moves_idle_keep_alive_connections_which_answer_on_the_same_socket() {
    let (_mocks, mut gw) = gateway("", &[]).await;
    let mut conns = Vec::new();
    for i in 0..CONNS {
        let mut c = Raw::open(gw.port).await;
        let a = c.get().await.expect("first request");
        assert_eq!((a.status, a.closing), (200, false), "connection {i}");
        conns.push(c);
    }
    let old = gw.pid();
    let new = gw.upgrade().await;
    assert!(integration_tests::upgrade::gone(old), "old process gone");
    for (i, c) in conns.iter_mut().enumerate() {
        let a = c
            .get()
            .await
            .unwrap_or_else(|e| panic!("connection {i}: {e}"));
        assert_eq!(a.status, 200, "connection {i} after the upgrade");
        assert!(!a.closing, "connection {i} stays open");
    }
    assert_eq!(gw.serving_pid().await, Some(new));
    let moved = gw
        .metric("gateway_upgrade_moved_total{kind=\"http1\"}")
        .await;
    assert_eq!(moved, CONNS as f64, "every idle connection moved, once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_written_during_the_handover_is_answered_and_no_connection_closes() {
    let (_mocks, mut gw) = gateway("", &[]).await;
    // A loop of requests on one kept-alive connection, through the whole upgrade.
    let (stop, ok) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let mut looping = Raw::open(gw.port).await;
    let request_loop = tokio::spawn({
        let (stop, ok) = (stop.clone(), ok.clone());
        async move {
            while !stop.load(Ordering::Relaxed) {
                let a = looping.get().await?;
                if a.status != 200 || a.closing {
                    return Err(format!("status {}, closing {}", a.status, a.closing));
                }
                ok.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), String>(())
        }
    });
    // An idle connection that gets its request as soon as the handover started.
    let mut idle = Raw::open(gw.port).await;
    assert_eq!(idle.get().await.expect("first request").status, 200);
    let old = gw.pid();
    gw.install_gateway();
    gw.usr2();
    gw.logs
        .wait_for(&["upgrade handed over"], Duration::from_secs(30))
        .await;
    let a = idle
        .get()
        .await
        .expect("request written during the handover");
    assert_eq!((a.status, a.closing), (200, false));
    let new = gw.wait_upgraded(Duration::from_secs(30)).await;
    assert_ne!(new, old);
    // The loop goes on in the new process.
    let at_upgrade = ok.load(Ordering::Relaxed);
    integration_tests::wait_until(
        Duration::from_secs(10),
        "requests after the upgrade",
        || {
            let ok = ok.clone();
            async move { ok.load(Ordering::Relaxed) > at_upgrade + 20 }
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    request_loop
        .await
        .expect("loop task")
        .expect("every request on the kept-alive connection answered 200");
    let a = idle
        .get()
        .await
        .expect("the idle connection after the upgrade");
    assert_eq!(a.status, 200);
    let moved = gw
        .metric("gateway_upgrade_moved_total{kind=\"http1\"}")
        .await;
    assert_eq!(moved, 2.0, "both connections moved");
}
