//! Upgrades under HTTP load: loops on fresh connections and on kept-alive connections see no
//! refused or reset connect and no answer but 200 through five upgrades in a row, and no kept-alive
//! connection closed (idle ones move to the new process); each old process exits, each new one
//! serves and counts itself, and counters never fall back.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinSet;

use super::gateway;

/// Upgrades in a row.
const UPGRADES: u32 = 5;

/// What one load loop saw: requests answered 200, and every failure.
#[derive(Default)]
struct Tally {
    ok: u64,
    failures: Vec<String>,
    /// Kept-alive connections closed between requests (then reopened): none, as idle ones move.
    reopened: u64,
}

/// GET `/data` on a new connection per request until `stop`.
async fn fresh_loop(port: u16, stop: Arc<AtomicBool>) -> Tally {
    let mut t = Tally::default();
    while !stop.load(Ordering::Relaxed) {
        match one_request(port, None).await {
            Ok(_) => t.ok += 1,
            Err(e) => t.failures.push(format!("fresh: {e}")),
        }
    }
    t
}

/// GET `/data` on one kept-alive connection until `stop`. When the server closed the connection
/// between two requests (which an upgrade no longer does: idle connections move to the new
/// process, SPEC section 13), the request goes again on a new connection, as RFC 9112 section
/// 9.3.1 lets a client do for an idempotent request, and is counted; a failure on a new
/// connection is a failure.
async fn kept_alive_loop(port: u16, stop: Arc<AtomicBool>) -> Tally {
    let mut t = Tally::default();
    let mut conn = None;
    while !stop.load(Ordering::Relaxed) {
        let reused = conn.is_some();
        match one_request(port, conn.take()).await {
            Ok(c) => {
                t.ok += 1;
                conn = c;
            }
            Err(_) if reused => t.reopened += 1,
            Err(e) => t.failures.push(format!("kept-alive: {e}")),
        }
    }
    t
}

type Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;

/// One `GET /data` on `conn` (or a new connection); returns the connection if it stays open.
async fn one_request(port: u16, conn: Option<Sender>) -> Result<Option<Sender>, String> {
    let mut send = match conn {
        Some(c) => c,
        None => {
            let tcp = TcpStream::connect(("127.0.0.1", port))
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let (send, c) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            tokio::spawn(c);
            send
        }
    };
    send.ready().await.map_err(|e| format!("ready: {e}"))?;
    let req = http::Request::get("/data")
        .header("host", "gw")
        .body(Empty::new())
        .expect("request");
    let resp = tokio::time::timeout(Duration::from_secs(10), send.send_request(req))
        .await
        .map_err(|_| "no answer in 10 s".to_string())?
        .map_err(|e| format!("request: {e}"))?;
    let status = resp.status();
    let closing = resp
        .headers()
        .get("connection")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("body: {e}"))?;
    if status != 200 {
        return Err(format!("{status}: {:?}", body.to_bytes()));
    }
    Ok((!closing).then_some(send))
}

/// The sum of `gateway_requests_total` over its series.
async fn requests_total(gw: &integration_tests::upgrade::Upgradable) -> f64 {
    let text = integration_tests::get(&gw.admin("/metrics"), &[])
        .await
        .expect("metrics")
        .text();
    text.lines()
        .filter(|l| l.starts_with("gateway_requests_total{"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrades_under_http_load_refuse_no_connect_and_counters_continue() {
    let (_mocks, mut gw) = gateway("", &[]).await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut loops = JoinSet::new();
    for _ in 0..3 {
        loops.spawn(fresh_loop(gw.port, stop.clone()));
        loops.spawn(kept_alive_loop(gw.port, stop.clone()));
    }
    let mut before = requests_total(&gw).await;
    for i in 1..=UPGRADES {
        // Traffic on the old process before each upgrade.
        integration_tests::wait_until(Duration::from_secs(10), "requests counted", || {
            let gw = &gw;
            async move { requests_total(gw).await > before + 50.0 }
        })
        .await;
        before = requests_total(&gw).await;
        let old = gw.pid();
        let new = gw.upgrade().await;
        assert!(
            integration_tests::upgrade::gone(old),
            "old process {old} gone"
        );
        super::serves(&gw, new).await;
        let success = gw
            .metric("gateway_upgrades_total{result=\"success\"}")
            .await;
        assert_eq!(
            success,
            f64::from(i),
            "upgrade {i}: counted in the new process, carried on"
        );
        let after = requests_total(&gw).await;
        assert!(
            after >= before,
            "upgrade {i}: requests_total fell back from {before} to {after}"
        );
        let moved = gw
            .metric("gateway_upgrade_moved_total{kind=\"listener\"}")
            .await;
        assert!(
            moved >= f64::from(2 * i),
            "upgrade {i}: listeners moved {moved}"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut reopened, mut failures) = (0, 0, Vec::new());
    while let Some(t) = loops.join_next().await {
        let t = t.expect("loop");
        ok += t.ok;
        reopened += t.reopened;
        failures.extend(t.failures);
    }
    eprintln!("{ok} requests answered 200; {reopened} kept-alive connections reopened");
    assert!(
        failures.is_empty(),
        "{} failures: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    assert!(ok > 300, "load ran: {ok}");
    assert_eq!(
        reopened, 0,
        "kept-alive connections closed between requests"
    );
}
