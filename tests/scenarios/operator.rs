//! The operator surface without a browser (SPEC section 11, issue 17): the `/admin/events` stream
//! and its bound on slow readers, readiness that means ready, the `health_listen` listener.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;
use tokio::time::Instant;

use integration_tests::http::{get, request};
use integration_tests::{bin, cluster_toml, find, free_port, wait_until, Gateway, Logs, Mock};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

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

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().expect("object").keys().cloned().collect()
}

fn set(k: &[&str]) -> BTreeSet<String> {
    k.iter().map(|s| s.to_string()).collect()
}

/// A config with one cluster of `nodes`, one route to it, and fast probes.
fn config(nodes: &[(&str, String)]) -> String {
    let mut s = String::from(
        "[health]\ninterval = \"300ms\"\ntimeout = \"300ms\"\n[[routes]]\nid = \"api\"\nmatch = { path_prefix = \"/\" }\ncluster = \"provider-service\"\n",
    );
    s.push_str(&cluster_toml("provider-service", nodes, ""));
    s
}

fn two_nodes(a: &Mock, b: &Mock) -> String {
    config(&[("node-a", a.addr()), ("node-b", b.addr())])
}

/// Issue 17 / SPEC 11: `/admin/events` delivers `drain`, `node`, `hop` and `reload` events as
/// they happen, each with exactly the SPEC's fields.
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
    let r = request(
        "POST",
        &gw.admin(&format!("/admin/nodes/{from}/drain?period=60s")),
        &[],
        Vec::new(),
    )
    .await
    .expect("drain");
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

    let r = request(
        "POST",
        &gw.admin(&format!("/admin/nodes/{from}/undrain")),
        &[],
        Vec::new(),
    )
    .await
    .expect("undrain");
    assert_eq!(r.status, 200);
    let node = sse.next("node", |v| v["id"] == from.as_str()).await;
    assert_eq!(node["state"], "healthy");
    assert_eq!(node["weight"].as_f64(), Some(100.0));

    gw.write_config(&toml.replace("timeout = \"300ms\"", "timeout = \"250ms\""));
    let r = request("POST", &gw.admin("/admin/reload"), &[], Vec::new())
        .await
        .expect("reload");
    assert_eq!(r.status, 200, "{}", r.text());
    let reload = sse.next("reload", |v| v["result"] == "ok").await;
    assert_eq!(keys(&reload), set(&["generation", "result"]));
    assert_eq!(reload["generation"], 2);
    gw.write_config("not toml [");
    let r = request("POST", &gw.admin("/admin/reload"), &[], Vec::new())
        .await
        .expect("reload");
    assert_eq!(r.status, 422);
    let reload = sse.next("reload", |v| v["result"] == "invalid").await;
    assert_eq!(reload["generation"], 2, "the live generation stays");
}

/// Issue 17 / SPEC 11: a subscriber that stops reading is dropped (never buffered without bound):
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
    let drain = |n: usize| gw.admin(&format!("/admin/nodes/node-a/drain?period={}s", 3_600 + n));
    let mut dropped_after = None;
    let mut sent = 0;
    let t0 = Instant::now();
    // At least EVENTS, and on until the drop is seen (how much the socket buffers absorb first
    // depends on the kernel's autotuning), bounded by MAX_EVENTS and the time check below.
    const MAX_EVENTS: usize = 300_000;
    while sent < EVENTS || (dropped_after.is_none() && sent < MAX_EVENTS) {
        let urls: Vec<String> = (0..8).map(|i| drain(sent + i)).collect();
        let batch: Vec<_> = urls
            .iter()
            .map(|u| request("POST", u, &[], Vec::new()))
            .collect();
        for r in futures_util::future::join_all(batch).await {
            assert_eq!(r.expect("drain").status, 202);
        }
        sent += 8;
        if dropped_after.is_none()
            && sent % 400 == 0
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
    // Reading again: what was queued, then the end of the stream (chunked terminator).
    let deadline = Instant::now() + Duration::from_secs(20);
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

/// Polls `f` every 20 ms until it gives a value; panics with `what` after `timeout`.
async fn poll<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn spawn_gateway(config: &std::path::Path, logs: &Logs) -> tokio::process::Child {
    let mut cmd = tokio::process::Command::new(bin("hopping-gateway"));
    cmd.arg("--config")
        .arg(config)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn gateway");
    logs.capture(&mut child);
    child
}

/// SPEC 11: `/readyz` is 503 until the first round of active probes has finished (a node whose
/// health answers take 1.5 s), then 200; 503 while shutting down (still served until exit). The
/// `health_listen` listener serves only `/healthz` and `/readyz`, without the admin token.
#[tokio::test]
async fn readyz_waits_for_the_first_probe_round_and_fails_during_shutdown() {
    let slow = Mock::start("node-slow").await;
    slow.delay(1500).await;
    let (port, admin, health) = (free_port(), free_port(), free_port());
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nadmin_listen = \"127.0.0.1:{admin}\"\nhealth_listen = \"127.0.0.1:{health}\"\nadmin_token = \"t0k\"\nshutdown_timeout = \"10s\"\n[health]\ninterval = \"5s\"\ntimeout = \"4s\"\n[[clusters]]\nname = \"c\"\n  [[clusters.nodes]]\n  id = \"node-slow\"\n  addr = \"{}\"\n[[routes]]\nid = \"r\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\n",
        slow.addr()
    )).expect("write");
    let logs = Logs::default();
    let t0 = Instant::now();
    let mut child = spawn_gateway(&path, &logs);
    let readyz = format!("http://127.0.0.1:{health}/readyz");
    let first = poll(
        Duration::from_secs(5),
        "the health listener to answer",
        || async { get(&readyz, &[]).await.ok() },
    )
    .await;
    assert_eq!(
        first.status,
        503,
        "not ready before the first probe round: {}",
        first.text()
    );
    assert_eq!(first.json()["status"], "probing");
    let ready_at = poll(Duration::from_secs(10), "readyz 200", || async {
        get(&readyz, &[])
            .await
            .ok()
            .filter(|r| r.status == 200)
            .map(|_| t0.elapsed())
    })
    .await;
    assert!(
        ready_at >= Duration::from_millis(1400),
        "ready only after the 1.5 s probe: {ready_at:?}"
    );
    let admin_readyz = get(&format!("http://127.0.0.1:{admin}/readyz"), &[])
        .await
        .expect("admin readyz");
    assert_eq!(admin_readyz.status, 200);
    for p in ["/metrics", "/admin/nodes", "/"] {
        let r = get(&format!("http://127.0.0.1:{health}{p}"), &[])
            .await
            .expect("health listener");
        assert_eq!(r.status, 404, "{p} on the health listener");
    }
    assert_eq!(
        get(&format!("http://127.0.0.1:{health}/healthz"), &[])
            .await
            .expect("healthz")
            .status,
        200
    );

    // Shutdown with a request in flight (1.5 s at the node): readyz says 503 meanwhile.
    let inflight = tokio::spawn({
        let url = format!("http://127.0.0.1:{port}/data");
        async move { get(&url, &[]).await }
    });
    wait_until(
        Duration::from_secs(5),
        "the request to be in flight",
        || async {
            get(
                &format!("http://127.0.0.1:{admin}/admin/nodes"),
                &[("authorization", "Bearer t0k")],
            )
            .await
            .is_ok_and(|r| r.json()[0]["inflight"] == 1)
        },
    )
    .await;
    let pid = child.id().expect("pid");
    assert!(std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .expect("kill")
        .success());
    let saw = poll(
        Duration::from_secs(5),
        "readyz 503 during shutdown",
        || async { get(&readyz, &[]).await.ok().filter(|r| r.status == 503) },
    )
    .await;
    assert_eq!(saw.json()["status"], "shutting down");
    let r = inflight.await.expect("join").expect("in-flight request");
    assert_eq!(r.status, 200, "the in-flight request finished");
    let code = tokio::time::timeout(Duration::from_secs(15), child.wait())
        .await
        .expect("exit")
        .expect("wait");
    assert!(code.success(), "{code:?}: {:?}", logs.lines());
}

/// Issue 17 access log: client address, protocol (http/1.1, h2, ws), upstream address and status,
/// a reason for the gateway's own answers, and `traceparent` forwarded untouched and logged as
/// `trace_id`.
#[tokio::test]
async fn access_log_has_the_fields_operators_grep_for() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(&[("node-a", a.addr())])).await;
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let r = get(&gw.url("/echo?x=1"), &[("traceparent", tp)])
        .await
        .expect("echo");
    assert_eq!(r.status, 200);
    let headers = r.json()["headers"].clone();
    assert!(
        headers
            .as_array()
            .expect("headers")
            .iter()
            .any(|h| h[0] == "traceparent" && h[1] == tp),
        "forwarded untouched: {headers}"
    );
    let line = gw
        .logs
        .wait_for(&["access", "path=/echo"], Duration::from_secs(5))
        .await;
    for want in [
        "protocol=\"http/1.1\"",
        "client=127.0.0.1:",
        &format!("upstream=\"{}\"", a.addr()),
        "upstream_status=200",
        "reason=\"-\"",
        "trace_id=\"4bf92f3577b34da6a3ce929d0e0e4736\"",
    ] {
        assert!(line.contains(want), "{want} in {line}");
    }

    let mut h2 = integration_tests::h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    assert_eq!(h2.get("/data?h2", &[]).await.expect("h2").status, 200);
    let line = gw
        .logs
        .wait_for(
            &["access", "path=/data", "protocol=\"h2\""],
            Duration::from_secs(5),
        )
        .await;
    assert!(
        line.contains("upstream_status=200") && !line.contains("trace_id"),
        "{line}"
    );

    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{}/ws", gw.port))
        .await
        .expect("ws");
    use futures_util::StreamExt;
    ws.next().await.expect("hello").expect("frame");
    ws.close(None).await.expect("close");
    while ws.next().await.is_some() {}
    let line = gw
        .logs
        .wait_for(&["access", "path=/ws"], Duration::from_secs(5))
        .await;
    assert!(
        line.contains("protocol=\"ws\"") && line.contains("upstream_status=101"),
        "{line}"
    );

    a.set_down().await;
    gw.wait_node_state("node-a", "ejected", Duration::from_secs(15))
        .await;
    let r = get(&gw.url("/data?down"), &[]).await.expect("fallback");
    assert_eq!(r.status, 503);
    let line = gw
        .logs
        .wait_for(&["access", "status=503"], Duration::from_secs(5))
        .await;
    for want in [
        "reason=\"no_healthy_node\"",
        "upstream=\"-\"",
        "upstream_status=-",
    ] {
        assert!(line.contains(want), "{want} in {line}");
    }
}
