//! Load and measurement helpers for the scenarios: deterministic bodies and their digests, a
//! streaming HTTP/1.1 client connection, a background prober, an RSS sampler (KiB, /proc) and the
//! bench examples' flag parser.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

use crate::{get, Gateway};

/// The value after command-line flag `name` in `args` (`--secs 3` gives `3`), parsed, or `default`
/// when the flag is absent; for the bench examples. Panics when the value does not parse.
pub fn flag<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: not a valid value: {v}"))
        })
        .unwrap_or(default)
}

/// A deterministic byte pattern (xorshift seeded with `seed`) of `len` bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The SHA-256 of `b`, lower-case hex (the form of the mock's `body_sha256`, SPEC section 9).
pub fn sha_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

/// Microseconds since the Unix epoch (the unit of the mock's `first_byte_unix_us`).
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_micros() as u64
}

/// An HTTP/1.1 connection to loopback `port` opened with hyper's low-level client, for streaming
/// bodies; the connection task runs in the background. Panics if the connect or handshake fails.
pub async fn h1_conn<B>(port: u16) -> hyper::client::conn::http1::SendRequest<B>
where
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    send
}

/// A bodiless `GET path` with `headers` on a fresh [`h1_conn`] to `port`: the connection's sender
/// (keep it while the body is read) and the response head. Panics if the request fails.
pub async fn h1_get(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> (
    hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    http::Response<hyper::body::Incoming>,
) {
    let mut send = h1_conn::<Empty<Bytes>>(port).await;
    let mut req = http::Request::get(path);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let req = req.body(Empty::new()).expect("request");
    let resp = send.send_request(req).await.expect("response head");
    (send, resp)
}

/// The resident set size of process `pid` in KiB (`VmRSS` in /proc); panics if unreadable.
pub fn rss_kib_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// Samples the RSS of `pid` every 10 ms until the returned flag is set; the task returns the
/// maximum seen (KiB).
pub fn rss_sampler(pid: u32) -> (Arc<AtomicBool>, JoinHandle<u64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let task = tokio::spawn(async move {
        let mut max = 0;
        while !flag.load(Ordering::Relaxed) {
            max = max.max(rss_kib_of(pid));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        max.max(rss_kib_of(pid))
    });
    (stop, task)
}

/// (requests, failures, slowest) of a [`prober`].
pub type ProbeResult = (u32, Vec<String>, Duration);

/// Polls `GET /data` on `gw` every 100 ms until the returned flag is set; the task returns
/// (requests, failures as "status body" or error text, slowest answer). An answer later than 5 s
/// counts as a failure.
pub fn prober(gw: &Gateway) -> (Arc<AtomicBool>, JoinHandle<ProbeResult>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let url = gw.url("/data");
    let task = tokio::spawn(async move {
        let (mut n, mut bad, mut slowest) = (0, Vec::new(), Duration::ZERO);
        while !flag.load(Ordering::Relaxed) {
            let t0 = Instant::now();
            match timeout(Duration::from_secs(5), get(&url, &[])).await {
                Ok(Ok(r)) if r.status == 200 => {}
                Ok(Ok(r)) => bad.push(format!("{} {}", r.status, r.text())),
                Ok(Err(e)) => bad.push(e.to_string()),
                Err(_) => bad.push("no answer in 5 s".into()),
            }
            slowest = slowest.max(t0.elapsed());
            n += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (n, bad, slowest)
    });
    (stop, task)
}
