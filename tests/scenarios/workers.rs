//! `--workers N` (SPEC section 2, README "Flags"): N data-plane workers, each a current-thread
//! runtime with its own `SO_REUSEPORT` listener socket. The kernel spreads connections over them,
//! the connection limit holds for the process, and shutdown closes every worker's socket.

use std::time::Duration;

use integration_tests::raw::{both_permits_taken, get_data, Raw};
use integration_tests::{wait_until, Config, Gateway, Health, Mock, Route};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::timeout;

/// The `connections=` count of the `data-plane listener closed` line of worker `worker`.
fn accepted_by(lines: &[String], worker: usize) -> Option<u64> {
    let tag = format!("worker={worker}");
    lines
        .iter()
        .filter(|l| l.contains("data-plane listener closed"))
        .find(|l| l.split_whitespace().any(|w| w == tag))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("connections="))
                .and_then(|n| n.parse().ok())
        })
}

/// With `--workers 2`, 64 parallel connections are all answered and spread over both workers
/// (each accepts some; 65 in all with the one held in flight). On SIGTERM both sockets close: no
/// new connection is accepted on the port while the in-flight request finishes, and the exit code
/// is 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_the_connections_and_both_sockets_close_on_sigterm() {
    let a = Mock::start("node-a").await;
    let mut gw = Gateway::start_with(
        &Config::single(Health::tcp_fast(), &[&a], Route::api())
            .raw_top("[server]\nshutdown_timeout = \"5s\"\n")
            .toml(),
        &["--workers", "2"],
    )
    .await;
    gw.logs
        .wait_for(
            &["hopping-gateway started", "workers=2"],
            Duration::from_secs(2),
        )
        .await;
    let port = gw.port;
    let clients: Vec<_> = (0..64)
        .map(|_| {
            tokio::spawn(async move {
                let mut c = Raw::connect(port).await;
                c.send(b"GET /data HTTP/1.1\r\nHost: x\r\n\r\n").await;
                let (h, body) = c.response(Duration::from_secs(5)).await;
                (h.status, String::from_utf8_lossy(&body).into_owned())
            })
        })
        .collect();
    let want = format!("Data from Node node-a (Port {})", a.port);
    for c in clients {
        let (status, body) = c.await.expect("join");
        assert_eq!(status, 200);
        assert_eq!(body, want);
    }
    // One request held in flight across the shutdown.
    a.delay(1500).await;
    let mut slow = Raw::connect(port).await;
    slow.send(b"GET /data HTTP/1.1\r\nHost: x\r\n\r\n").await;
    wait_until(Duration::from_secs(5), "a request in flight", || async {
        gw.node("node-a").await["inflight"] == 1
    })
    .await;
    gw.signal("TERM");
    wait_until(
        Duration::from_secs(3),
        "both workers' sockets closed",
        || async { gw.logs.matching(&["data-plane listener closed"]).len() == 2 },
    )
    .await;
    // Either socket still open would take about half of these (the kernel hashes each new
    // connection's addresses over the group).
    for i in 0..32 {
        assert!(
            TcpStream::connect(("127.0.0.1", port)).await.is_err(),
            "connection {i} after SIGTERM was accepted"
        );
    }
    let (h, body) = slow.response(Duration::from_secs(5)).await;
    assert_eq!(h.status, 200);
    assert_eq!(String::from_utf8_lossy(&body), want);
    assert_eq!(gw.wait_exit(Duration::from_secs(5)).await, Some(0));
    let lines = gw.logs.lines();
    let (w0, w1) = (accepted_by(&lines, 0), accepted_by(&lines, 1));
    let (Some(w0), Some(w1)) = (w0, w1) else {
        panic!("no per-worker counts in {lines:?}");
    };
    assert_eq!(w0 + w1, 65, "worker 0 accepted {w0}, worker 1 {w1}");
    assert!(w0 > 0 && w1 > 0, "worker 0 accepted {w0}, worker 1 {w1}");
}

/// `[limits] max_connections = 2` holds for the process, not per worker: with `--workers 2`, two
/// open connections leave a third unserved (whichever worker accepted it) until one closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_is_one_limit_over_all_workers() {
    let (_a, gw, mut open) = both_permits_taken(&["--workers", "2"]).await;
    // Several more, so that each worker's socket very likely gets one: none is served.
    let mut waiting = Vec::new();
    for _ in 0..6 {
        waiting.push(get_data(gw.port).await);
    }
    for (i, c) in waiting.iter_mut().enumerate() {
        let mut byte = [0u8; 1];
        assert!(
            timeout(Duration::from_millis(300), c.s.read(&mut byte))
                .await
                .is_err(),
            "waiting connection {i} was served past max_connections"
        );
    }
    assert_eq!(
        gw.logs
            .matching(&["connection limit reached; new connections wait"])
            .len(),
        1,
        "logged once, by whichever worker reached the limit"
    );
    // Both open ones close: exactly two of the waiting ones are served, whichever workers hold them.
    open.clear();
    let reads: Vec<_> = waiting
        .into_iter()
        .map(|mut c| {
            tokio::spawn(async move {
                let mut byte = [0u8; 1];
                let got = timeout(Duration::from_millis(1500), c.s.read(&mut byte)).await;
                (matches!(got, Ok(Ok(1))), c)
            })
        })
        .collect();
    let mut still_open = Vec::new();
    let mut served = 0;
    for r in reads {
        let (ok, c) = r.await.expect("join");
        served += usize::from(ok);
        still_open.push(c);
    }
    assert_eq!(served, 2, "connections served once two slots were free");
}
