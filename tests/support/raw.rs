//! A raw HTTP/1.1 client for the scenarios: exact bytes out (RFC 9112 framing as the test wrote
//! it, nothing normalised by a client library), parsed responses in.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

use crate::find;

/// One response head read off a raw socket.
#[derive(Debug)]
pub struct Head {
    /// The status code.
    pub status: u16,
    /// The version token of the status line (`HTTP/1.1`).
    pub version: String,
    /// Field lines in order: lower-case names, trimmed values.
    pub headers: Vec<(String, String)>,
}

impl Head {
    /// The first value of field `name` (lower case), if any.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A raw HTTP/1.1 client socket: exact bytes out, parsed responses in.
pub struct Raw {
    /// The socket, for reads a test makes itself.
    pub s: TcpStream,
    /// Bytes read but not yet consumed by a head or body.
    pub buf: Vec<u8>,
}

impl Raw {
    /// Connects to loopback `port`; panics if the connect fails.
    pub async fn connect(port: u16) -> Raw {
        Raw {
            s: TcpStream::connect(("127.0.0.1", port))
                .await
                .expect("connect"),
            buf: Vec::new(),
        }
    }

    /// Writes `bytes` as they are; panics if the write fails.
    pub async fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).await.expect("write");
    }

    /// Reads more bytes; 0 on EOF or reset.
    pub async fn more(&mut self) -> usize {
        let mut chunk = [0u8; 16 * 1024];
        match self.s.read(&mut chunk).await {
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                n
            }
            Err(_) => 0,
        }
    }

    /// The next response head within `t`; `None` if the connection ends first.
    pub async fn head(&mut self, t: Duration) -> Option<Head> {
        let fut = async {
            loop {
                if let Some(p) = find(&self.buf, b"\r\n\r\n") {
                    let head = String::from_utf8(self.buf[..p].to_vec()).expect("ascii head");
                    self.buf.drain(..p + 4);
                    let mut lines = head.split("\r\n");
                    let status_line = lines.next().expect("status line");
                    let mut parts = status_line.splitn(3, ' ');
                    let version = parts.next().expect("version").to_string();
                    let status = parts
                        .next()
                        .and_then(|c| c.parse().ok())
                        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
                    let headers = lines
                        .map(|l| {
                            let (k, v) = l
                                .split_once(':')
                                .unwrap_or_else(|| panic!("bad header line {l:?}"));
                            (k.trim().to_ascii_lowercase(), v.trim().to_string())
                        })
                        .collect();
                    return Some(Head {
                        status,
                        version,
                        headers,
                    });
                }
                if self.more().await == 0 {
                    return None;
                }
            }
        };
        timeout(t, fut).await.expect("a response head in time")
    }

    /// Reads until `buf` holds `need` bytes; panics if the connection ends first.
    async fn fill(&mut self, need: usize) {
        while self.buf.len() < need {
            assert!(
                self.more().await > 0,
                "connection ended after {} of {need} body bytes",
                self.buf.len()
            );
        }
    }

    /// The body of a response with head `h` (Content-Length, chunked, or up to EOF).
    pub async fn body(&mut self, h: &Head) -> Vec<u8> {
        let fut = async {
            if let Some(cl) = h.get("content-length") {
                let cl: usize = cl.parse().expect("content-length");
                self.fill(cl).await;
                return self.buf.drain(..cl).collect();
            }
            if h.get("transfer-encoding")
                .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
            {
                let mut body = Vec::new();
                loop {
                    let line_end = loop {
                        if let Some(p) = find(&self.buf, b"\r\n") {
                            break p;
                        }
                        let need = self.buf.len() + 1;
                        self.fill(need).await;
                    };
                    let size_str = String::from_utf8_lossy(&self.buf[..line_end]).to_string();
                    let size =
                        usize::from_str_radix(size_str.split(';').next().expect("size").trim(), 16)
                            .expect("chunk size");
                    self.fill(line_end + 2 + size + 2).await;
                    body.extend_from_slice(&self.buf[line_end + 2..line_end + 2 + size]);
                    self.buf.drain(..line_end + 2 + size + 2);
                    if size == 0 {
                        return body;
                    }
                }
            }
            while self.more().await > 0 {}
            std::mem::take(&mut self.buf)
        };
        timeout(Duration::from_secs(10), fut)
            .await
            .expect("a response body in time")
    }

    /// The next whole response within `t`.
    pub async fn response(&mut self, t: Duration) -> (Head, Vec<u8>) {
        let h = self
            .head(t)
            .await
            .expect("a response before the connection ended");
        let b = self.body(&h).await;
        (h, b)
    }

    /// True if the peer ends the connection (FIN or reset) within `t` and sends nothing more.
    pub async fn closed_within(&mut self, t: Duration) -> bool {
        let deadline = Instant::now() + t;
        loop {
            let mut chunk = [0u8; 1024];
            match tokio::time::timeout_at(deadline, self.s.read(&mut chunk)).await {
                Err(_) => return false,
                Ok(Ok(0)) | Ok(Err(_)) => return self.buf.is_empty(),
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Like [`Raw::closed_within`], but true only for a clean FIN (no reset).
    pub async fn fin_within(&mut self, t: Duration) -> bool {
        let mut chunk = [0u8; 1024];
        matches!(timeout(t, self.s.read(&mut chunk)).await, Ok(Ok(0)))
    }
}

/// `n` fresh connections to `port`, each answered `200` to one `GET /data` and kept open (the
/// connection-limit scenarios: they hold `n` permits).
pub async fn served(port: u16, n: usize) -> Vec<Raw> {
    let mut open = Vec::with_capacity(n);
    for _ in 0..n {
        let mut c = get_data(port).await;
        let (h, _) = c.response(Duration::from_secs(5)).await;
        assert_eq!(h.status, 200);
        open.push(c);
    }
    open
}

/// A fresh connection to `port` with one `GET /data` sent.
pub async fn get_data(port: u16) -> Raw {
    let mut c = Raw::connect(port).await;
    c.send(b"GET /data HTTP/1.1\r\nHost: x\r\n\r\n").await;
    c
}

/// Starts mock `node-a` and a gateway (`args` on its command line) with `[limits]
/// max_connections = 2` over it, and takes both permits with [`served`]: (node-a, the gateway,
/// the two open connections).
pub async fn both_permits_taken(args: &[&str]) -> (crate::Mock, crate::Gateway, Vec<Raw>) {
    let a = crate::Mock::start("node-a").await;
    let gw = crate::Gateway::start_with(
        &crate::Config::single(crate::Health::tcp_fast(), &[&a], crate::Route::api())
            .table("limits", "max_connections = 2")
            .toml(),
        args,
    )
    .await;
    let open = served(gw.port, 2).await;
    (a, gw, open)
}

/// Sends `wire` on a fresh connection; returns the answer and asserts the gateway then closed it.
pub async fn refused(port: u16, wire: &[u8]) -> (Head, Vec<u8>) {
    let mut c = Raw::connect(port).await;
    c.send(wire).await;
    let (h, b) = c.response(Duration::from_secs(5)).await;
    assert!(
        c.closed_within(Duration::from_secs(2)).await,
        "connection left open after {} for {:?}",
        h.status,
        String::from_utf8_lossy(wire)
    );
    (h, b)
}

/// Sends `wire` on a fresh connection to `port` and returns the one response (head, body) read
/// within 10 s; the connection is left to close.
pub async fn exchange(port: u16, wire: &[u8]) -> (Head, Vec<u8>) {
    let mut c = Raw::connect(port).await;
    c.send(wire).await;
    c.response(Duration::from_secs(10)).await
}

/// Connects to loopback `port`, runs `write` on the write half in a task of its own, and reads
/// the read half to its end (FIN or reset) within `t`; then aborts the writer. Returns every byte
/// the gateway sent and how long after the connect its side ended. Panics if the connect fails
/// or the connection is still open after `t`.
pub async fn read_while_writing<F, Fut>(port: u16, t: Duration, write: F) -> (Vec<u8>, Duration)
where
    F: FnOnce(tokio::net::tcp::OwnedWriteHalf) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let s = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let (mut rd, wr) = s.into_split();
    let t0 = Instant::now();
    let writer = tokio::spawn(write(wr));
    let mut raw = Vec::new();
    let _ = timeout(t, rd.read_to_end(&mut raw))
        .await
        .expect("the gateway answered and closed in time");
    let took = t0.elapsed();
    writer.abort();
    (raw, took)
}

/// The bytes of a raw HTTP/1.1 answer `raw` after its head (past the first blank line); panics
/// when `raw` holds no whole head.
pub fn body_of(raw: &[u8]) -> &[u8] {
    &raw[find(raw, b"\r\n\r\n").expect("a whole response head") + 4..]
}
