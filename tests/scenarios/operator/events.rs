//! The `/admin/events` stream (SPEC section 11): each kind delivered, and a reader that stops
//! reading dropped.

use super::*;

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().expect("object").keys().cloned().collect()
}

fn set(k: &[&str]) -> BTreeSet<String> {
    k.iter().map(|s| s.to_string()).collect()
}

/// SPEC 11: `/admin/events` delivers `drain`, `node`, `hop` and `reload` events as
/// they happen, each with exactly the SPEC's fields.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
#[tokio::test]
async fn admin_events_deliver_each_kind() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let toml = two_nodes(&a, &b);
    let gw = Gateway::start(&toml).await;
    let mut sse = Sse::connect(gw.admin_port, false).await;

    let conn = "events-conn-1";
    assert_eq!(
        get(&gw.url("/data"), &[("X-Conn-Id", conn)])
            .await
            .expect("bind")
            .status,
        200
    );
    let from = gw.admin_json(&format!("/admin/conns/{conn}")).await["node"]
        .as_str()
        .expect("node")
        .to_string();
    let to = if from == "node-a" { "node-b" } else { "node-a" };
    let before = integration_tests::http::get(&gw.admin("/admin/status"), &[])
        .await
        .expect("status")
        .json()["now_ms"]
        .as_u64()
        .expect("now_ms");
    let r = gw
        .admin_post(&format!("/admin/nodes/{from}/drain?period=60s"))
        .await;
    assert_eq!(r.status, 202);

    let drain = sse.next("drain", |v| v["id"] == from.as_str()).await;
    assert_eq!(keys(&drain), set(&["id", "deadline_ms"]));
    let deadline = drain["deadline_ms"].as_u64().expect("deadline_ms");
    assert!(
        deadline >= before + 59_000 && deadline <= before + 65_000,
        "deadline {deadline} vs now {before}"
    );
    let node = sse.next("node", |v| v["id"] == from.as_str()).await;
    assert_eq!(keys(&node), set(&["id", "cluster", "state", "weight"]));
    assert_eq!(node["state"], "draining");
    assert_eq!(node["cluster"], "provider-service");
    assert_eq!(node["weight"].as_f64(), Some(0.0));

    let r = get(&gw.url("/data"), &[("X-Conn-Id", conn)])
        .await
        .expect("after drain");
    assert!(r.text().contains(to), "{}", r.text());
    let hop = sse.next("hop", |v| v["conn"] == conn).await;
    assert_eq!(keys(&hop), set(&["conn", "from", "to", "reason", "at_ms"]));
    assert_eq!(
        (
            hop["from"].as_str(),
            hop["to"].as_str(),
            hop["reason"].as_str()
        ),
        (Some(from.as_str()), Some(to), Some("draining"))
    );
    assert!(hop["at_ms"].as_u64().expect("at_ms") >= before);

    let r = gw.admin_post(&format!("/admin/nodes/{from}/undrain")).await;
    assert_eq!(r.status, 200);
    let node = sse.next("node", |v| v["id"] == from.as_str()).await;
    assert_eq!(node["state"], "healthy");
    assert_eq!(node["weight"].as_f64(), Some(100.0));

    gw.write_config(&toml.replace("timeout = \"300ms\"", "timeout = \"250ms\""));
    let r = gw.admin_post("/admin/reload").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let reload = sse.next("reload", |v| v["result"] == "ok").await;
    assert_eq!(keys(&reload), set(&["generation", "result"]));
    assert_eq!(reload["generation"], 2);
    gw.write_config("not toml [");
    let r = gw.admin_post("/admin/reload").await;
    assert_eq!(r.status, 422);
    let reload = sse.next("reload", |v| v["result"] == "invalid").await;
    assert_eq!(reload["generation"], 2, "the live generation stays");
}

/// SPEC 11: a subscriber that stops reading is dropped (never buffered without bound):
/// the subscriber count goes to zero while events keep coming, what it gets when it reads again
/// is bounded and ends the stream, and the gateway's RSS stays bounded.
#[tokio::test]
async fn admin_events_drop_a_reader_that_stops_reading() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&two_nodes(&a, &b)).await;
    let mut slow = Sse::connect(gw.admin_port, true).await;
    let status = gw.admin("/admin/status");
    assert_eq!(
        get(&status, &[]).await.expect("status").json()["subscribers"],
        1
    );
    let rss_before = gw.rss_kib();
    // Each drain call publishes one `drain` event of about 90 bytes; every call asks for another
    // period, so a repeated drain with the same deadline (same millisecond) is never skipped.
    const EVENTS: usize = 30_000;
    // Pipelined on one connection, 400 a batch: tens of thousands of calls without as many sockets.
    const BATCH: usize = 400;
    let drain = |n: usize| {
        let period = 3_600 + n;
        format!("POST /admin/nodes/node-a/drain?period={period}s HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n")
    };
    let mut admin = TcpStream::connect(("127.0.0.1", gw.admin_port))
        .await
        .expect("connect admin");
    let mut dropped_after = None;
    let mut sent = 0;
    let t0 = Instant::now();
    // At least EVENTS, and on until the drop is seen (how much the socket buffers absorb first
    // depends on the kernel's autotuning), bounded by MAX_EVENTS and the time check below.
    const MAX_EVENTS: usize = 300_000;
    while sent < EVENTS || (dropped_after.is_none() && sent < MAX_EVENTS) {
        let batch: String = (0..BATCH).map(|i| drain(sent + i)).collect();
        pipelined(&mut admin, batch.as_bytes(), BATCH, b"202").await;
        sent += BATCH;
        if dropped_after.is_none()
            && get(&status, &[]).await.expect("status").json()["subscribers"] == 0
        {
            dropped_after = Some(sent);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "event generation too slow: {sent} in {:?}",
            t0.elapsed()
        );
    }
    let dropped_after = dropped_after.expect("the reader that stopped reading was dropped");
    let rss_after = gw.rss_kib();
    eprintln!("dropped after {dropped_after} events; RSS {rss_before} -> {rss_after} KiB");
    assert!(
        rss_after < rss_before + 20 * 1024,
        "RSS grew from {rss_before} to {rss_after} KiB"
    );
    // Reading again: what the socket buffers hold, then the end of the stream (chunked
    // terminator). Through a 4 KiB receive buffer that takes a while.
    let deadline = Instant::now() + Duration::from_secs(60);
    while find(&slow.buf, b"\r\n0\r\n\r\n").is_none() {
        assert!(
            Instant::now() < deadline,
            "stream did not end; {} bytes read",
            slow.buf.len()
        );
        slow.read_some().await;
    }
    let got = slow.buf.len();
    assert!(find(&slow.buf, b": dropped").is_some() || got > 0);
    // Nothing published after the drop reaches it: at most what was sent until then (about
    // 90 bytes an event; the drop is checked every 400 events).
    assert!(
        got <= (dropped_after + 1_000) * 100,
        "a dropped reader gets a bounded amount: {got} bytes, dropped after {dropped_after} of {sent} events"
    );
    gw.logs
        .wait_for(&["event subscriber", "dropped"], Duration::from_secs(5))
        .await;
}

/// SPEC 11: a reader that keeps up on average is never dropped, however bursty the events. 40,000
/// hops at about 5,000/s (every 100 ms a burst of 500 pipelined requests over 10 connections, each
/// switching the version its conn id asks for, so each one hops) all reach a reader that reads as
/// fast as it can, the stream never ended, while `hopping_count_total{reason="version"}` counts
/// exactly as many.
#[tokio::test]
async fn admin_events_keep_a_reader_that_keeps_up_with_a_burst_of_hops() {
    const HOPS: usize = 40_000;
    const CONNS: usize = 10;
    const BURST: usize = 50; // per connection
    let v1 = Mock::start_with("node-v1", &["--version", "v1"]).await;
    let v2 = Mock::start_with("node-v2", &["--version", "v2"]).await;
    let canary = "  [routes.canary]\n  version_header = \"x-version\"";
    let toml = Config::new()
        .health(Health::tcp_never())
        .with_cluster(
            Cluster::new("svc")
                .node_with("node-v1", &v1.addr(), "metadata = { version = \"v1\" }")
                .node_with("node-v2", &v2.addr(), "metadata = { version = \"v2\" }"),
        )
        .route(Route::prefix("api", "/", "svc").line(canary))
        .toml();
    let gw = Gateway::start(&toml).await;
    let mut sse = Sse::connect(gw.admin_port, false).await;
    let reader = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(90);
        let (mut hops, mut scanned) = (0, 0);
        while hops < HOPS {
            let ended = find(&sse.buf, b": dropped").or(find(&sse.buf, b"\r\n0\r\n\r\n"));
            assert!(
                ended.is_none(),
                "the reader was dropped after {hops} hop events"
            );
            assert!(
                Instant::now() < deadline,
                "{hops} of {HOPS} hop events read"
            );
            sse.read_some().await;
            while let Some(i) = find(&sse.buf[scanned..], b"event: hop\n") {
                scanned += i + 1;
                hops += 1;
            }
        }
        sse
    });

    let mut clients = Vec::new();
    for c in 0..CONNS {
        let hop_request = |version: &str| {
            format!("GET /data HTTP/1.1\r\nhost: x\r\nx-conn-id: storm-{c}\r\nx-version: {version}\r\n\r\n")
        };
        let mut s = TcpStream::connect(("127.0.0.1", gw.port))
            .await
            .expect("connect");
        pipelined(&mut s, hop_request("v1").as_bytes(), 1, b"200").await; // binds storm-c to node-v1
        let burst: String = (0..BURST)
            .map(|i| hop_request(if i % 2 == 0 { "v2" } else { "v1" }))
            .collect();
        clients.push((s, burst));
    }
    let mut pace = tokio::time::interval(Duration::from_millis(100));
    for _ in 0..HOPS / (CONNS * BURST) {
        pace.tick().await;
        let bursts = clients
            .iter_mut()
            .map(|(s, burst)| pipelined(s, burst.as_bytes(), BURST, b"200"));
        futures_util::future::join_all(bursts).await;
    }

    let mut sse = reader.await.expect("reader task");
    assert_eq!(
        gw.metric("hopping_count_total{reason=\"version\"}").await,
        HOPS as f64
    );
    sse.read_some().await;
    assert!(find(&sse.buf, b": dropped").is_none(), "dropped at the end");
    let status = get(&gw.admin("/admin/status"), &[]).await.expect("status");
    assert_eq!(status.json()["subscribers"], 1);
}

/// Writes `requests` (`n` pipelined HTTP/1.1 requests) on `s` and reads their `n` answers, each
/// of which must have status `want` (e.g. `b"200"`).
async fn pipelined(s: &mut TcpStream, requests: &[u8], n: usize, want: &[u8; 3]) {
    s.write_all(requests).await.expect("write requests");
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut buf, mut answers, mut scanned) = (Vec::new(), 0, 0);
    let mut chunk = vec![0u8; 64 * 1024];
    while answers < n {
        let left = deadline.saturating_duration_since(Instant::now());
        let read = tokio::time::timeout(left, s.read(&mut chunk)).await;
        let got = read.unwrap_or_else(|_| panic!("{answers} of {n} answers"));
        let got = got.expect("read answers");
        assert!(got > 0, "the gateway closed after {answers} of {n} answers");
        buf.extend_from_slice(&chunk[..got]);
        while let Some(i) = find(&buf[scanned..], b"HTTP/1.1 ") {
            let at = scanned + i;
            if buf.len() < at + 12 {
                break;
            }
            assert_eq!(&buf[at + 9..at + 12], want, "answer {answers}");
            scanned = at + 12;
            answers += 1;
        }
    }
}
