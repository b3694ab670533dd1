//! Issue 13 defects seen from outside, HTTP side: JSON answers for heads hyper would refuse,
//! request-target forms, `Connection`-nominated consumed fields, `/metrics` formats, hop latency
//! observations, and CASE-27 (HEAD / 204 / 304 carrying framing headers).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use integration_tests::{cluster_toml, find, get, read_head, request, Gateway, Mock, FAST_HEALTH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

const TCP_HEALTH: &str = "[health]\nkind = \"tcp\"\ninterval = \"200ms\"\ntimeout = \"200ms\"\n";

fn config(health: &str, nodes: &[&Mock], extra: &str) -> String {
    let nodes: Vec<(&str, String)> = nodes.iter().map(|m| (m.id.as_str(), m.addr())).collect();
    format!(
        "{health}\n{}\n[[routes]]\nid = \"api\"\ncluster = \"c\"\n{extra}\n",
        cluster_toml("c", &nodes, "")
    )
}

/// A raw HTTP/1.1 client connection.
struct Raw {
    s: TcpStream,
    buf: Vec<u8>,
}

/// One response read off a [`Raw`] connection: status, lower-case headers, body.
struct RawResp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl RawResp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The SPEC error body's message; panics unless the body is `{"code":-1,"message":..}`.
    fn json_message(&self) -> String {
        let v: serde_json::Value = serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} without a JSON body ({e}): {:?}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        });
        assert_eq!(v["code"], -1, "{v}");
        v["message"].as_str().expect("message").to_string()
    }
}

impl Raw {
    async fn connect(port: u16) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect");
        Raw { s, buf: Vec::new() }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).await.expect("write");
    }

    /// The next response within 5 s; `no_body` for answers to HEAD (and 204/304).
    async fn response(&mut self, no_body: bool) -> RawResp {
        let fut = async {
            let n = read_head(&mut self.s, &mut self.buf)
                .await
                .expect("a response head");
            let head = String::from_utf8(self.buf[..n].to_vec()).expect("ascii head");
            self.buf.drain(..n);
            let mut lines = head.trim_end().split("\r\n");
            let status = lines.next().expect("status line")[9..12]
                .parse()
                .expect("status");
            let headers: Vec<(String, String)> = lines
                .map(|l| {
                    let (k, v) = l.split_once(':').expect("field line");
                    (k.trim().to_ascii_lowercase(), v.trim().to_string())
                })
                .collect();
            let len = headers
                .iter()
                .find(|(k, _)| k == "content-length")
                .map_or(0, |(_, v)| v.parse::<usize>().expect("length"));
            let len = if no_body { 0 } else { len };
            while self.buf.len() < len {
                let mut chunk = [0u8; 8192];
                let n = self.s.read(&mut chunk).await.expect("read body");
                assert!(n > 0, "connection closed inside a body");
                self.buf.extend_from_slice(&chunk[..n]);
            }
            let body = self.buf.drain(..len).collect();
            RawResp {
                status,
                headers,
                body,
            }
        };
        timeout(Duration::from_secs(5), fut)
            .await
            .expect("response within 5 s")
    }

    /// True if the peer closes within 2 s (nothing more arrives first).
    async fn closed(&mut self) -> bool {
        let mut chunk = [0u8; 1024];
        matches!(
            timeout(Duration::from_secs(2), self.s.read(&mut chunk)).await,
            Ok(Ok(0) | Err(_))
        )
    }
}

/// Issue 13 defect (heads hyper refuses by itself): each refused form gets the gateway's JSON
/// answer with its exact message, the connection closes, and nothing reaches the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_heads_get_json_answers_and_reach_no_node() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(TCP_HEALTH, &[&a], "")).await;
    let long = format!(
        "GET /echo?q={} HTTP/1.1\r\nHost: x\r\n\r\n",
        "a".repeat(70_000)
    );
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Conn-Id: a\x01b\r\n\r\n".to_vec(), 400, "bad request: control character in a field value"),
        (b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Conn-Id: a\x7fb\r\n\r\n".to_vec(), 400, "bad request: control character in a field value"),
        (b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Note: a\rb\r\n\r\n".to_vec(), 400, "bad request: control character in a field value"),
        (b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Note: a\r\n b\r\n\r\n".to_vec(), 400, "bad request: obs-fold: a field line starts with whitespace"),
        (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n".to_vec(), 400, "bad request: invalid Content-Length"),
        (b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!".to_vec(), 400, "bad request: conflicting Content-Length values"),
        (b"GET /echo HTTP/1.1\r\nHost: x\r\nNo-Colon-Here\r\n\r\n".to_vec(), 400, "bad request: field line without a colon"),
        (b"GET /echo HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n".to_vec(), 400, "bad request: invalid field name"),
        (b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n".to_vec(), 400, "bad request: Transfer-Encoding other than a single \"chunked\""),
        (b"POST /echo HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(), 400, "bad request: Transfer-Encoding in an HTTP/1.0 request"),
        (b"GET /echo HTTP/1.7\r\nHost: x\r\n\r\n".to_vec(), 400, "bad request: unsupported HTTP version in the request line"),
        (b"G@T /echo HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), 400, "bad request: invalid method in the request line"),
        (long.into_bytes(), 414, "request line longer than 16384 bytes"),
    ];
    for (wire, status, message) in &cases {
        let mut c = Raw::connect(gw.port).await;
        c.send(wire).await;
        let r = c.response(false).await;
        let shown = String::from_utf8_lossy(&wire[..wire.len().min(80)]).into_owned();
        assert_eq!(r.status, *status, "{shown:?}");
        assert_eq!(r.json_message(), *message, "{shown:?}");
        assert_eq!(r.header("connection"), Some("close"), "{shown:?}");
        assert!(c.closed().await, "connection left open: {shown:?}");
    }
    assert_eq!(a.requests().await, 0, "no node saw any request");
}

/// Issue 13 defect (RFC 9112 section 3.2): request-targets that are not origin-form,
/// absolute-form, or `*` with OPTIONS are 400 JSON and reach no node; the allowed forms pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_targets_outside_the_three_forms_are_400() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(TCP_HEALTH, &[&a], "")).await;
    let authority = "bad request: authority-form request-target is only allowed with CONNECT";
    let star = "bad request: request-target \"*\" is only allowed with OPTIONS";
    for (line, message) in [
        ("GET app.example.test:80 HTTP/1.1", authority),
        ("POST app.example.test:443 HTTP/1.1", authority),
        ("OPTIONS app.example.test:80 HTTP/1.1", authority),
        ("HEAD app.example.test HTTP/1.1", authority),
        ("GET * HTTP/1.1", star),
        ("POST * HTTP/1.1", star),
        ("DELETE * HTTP/1.1", star),
    ] {
        let mut c = Raw::connect(gw.port).await;
        c.send(format!("{line}\r\nHost: app.example.test\r\nContent-Length: 0\r\n\r\n").as_bytes())
            .await;
        let r = c.response(line.starts_with("HEAD")).await;
        assert_eq!(r.status, 400, "{line}");
        if !line.starts_with("HEAD") {
            assert_eq!(r.json_message(), message, "{line}");
        }
        assert!(c.closed().await, "{line}: connection left open");
    }
    assert_eq!(a.requests().await, 0, "no refused form reached the node");
    // The allowed forms: origin-form and absolute-form are forwarded; OPTIONS * is not refused.
    let mut c = Raw::connect(gw.port).await;
    c.send(b"GET http://app.example.test/echo/abs HTTP/1.1\r\nHost: app.example.test\r\n\r\nGET /echo/origin HTTP/1.1\r\nHost: app.example.test\r\n\r\nOPTIONS * HTTP/1.1\r\nHost: app.example.test\r\n\r\n").await;
    for path in ["/echo/abs", "/echo/origin"] {
        let r = c.response(false).await;
        assert_eq!(r.status, 200);
        let echo: serde_json::Value = serde_json::from_slice(&r.body).expect("echo");
        assert_eq!(echo["path"], path);
    }
    let r = c.response(false).await;
    assert_ne!(r.status, 400, "OPTIONS * is a valid target");
}

/// Issue 13 defect (RFC 9110 section 7.6.1): the affinity and canary headers nominated in
/// `Connection` are used (binding, version) and not forwarded to the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_nominated_consumed_fields_are_used_not_forwarded() {
    let a = Mock::start_with("node-a", &["--version", "v1"]).await;
    let b = Mock::start_with("node-b", &["--version", "v2"]).await;
    let toml = format!(
        "{TCP_HEALTH}\n[[clusters]]\nname = \"c\"\n  [[clusters.nodes]]\n  id = \"node-a\"\n  addr = \"{}\"\n  metadata = {{ version = \"v1\" }}\n  [[clusters.nodes]]\n  id = \"node-b\"\n  addr = \"{}\"\n  metadata = {{ version = \"v2\" }}\n[[routes]]\nid = \"api\"\ncluster = \"c\"\n  [routes.canary]\n  version_header = \"x-version\"\n",
        a.addr(),
        b.addr()
    );
    let gw = Gateway::start(&toml).await;
    for _ in 0..3 {
        let r = get(
            &gw.url("/echo/n"),
            &[
                ("X-Conn-Id", "nominated-1"),
                ("x-version", "v2"),
                ("Connection", "X-Conn-Id, x-version"),
            ],
        )
        .await
        .expect("request");
        assert_eq!(r.status, 200);
        let echo = r.json();
        assert_eq!(echo["node"], "node-b", "the version header was used");
        let names: Vec<&str> = echo["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .map(|p| p[0].as_str().expect("name"))
            .collect();
        assert!(!names.contains(&"x-conn-id"), "{names:?}");
        assert!(!names.contains(&"x-version"), "{names:?}");
        assert!(!names.contains(&"connection"), "{names:?}");
    }
    let conn = gw.admin_json("/admin/conns/nominated-1").await;
    assert_eq!(
        conn["node"], "node-b",
        "the affinity header was used: {conn}"
    );
    // Not nominated: both still reach the node.
    let r = get(
        &gw.url("/echo/n"),
        &[("X-Conn-Id", "plain-1"), ("x-version", "v2")],
    )
    .await
    .expect("request");
    let names = r.json()["headers"].to_string();
    assert!(names.contains("\"x-conn-id\",\"plain-1\""), "{names}");
    assert!(names.contains("\"x-version\",\"v2\""), "{names}");
}

/// Issue 13 defect: `/metrics` answers the Prometheus 0.0.4 text format (which `promtool check
/// metrics` accepts, with no lint problem) unless OpenMetrics is asked for; then OpenMetrics with
/// its own content type and `# EOF`. Checked after traffic and a hop, so labelled series exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_pass_promtool_and_types_match_bodies() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config(FAST_HEALTH, &[&a, &b], "")).await;
    let r = get(&gw.url("/data"), &[("X-Conn-Id", "m-1")])
        .await
        .expect("bind");
    assert_eq!(r.status, 200);
    let bound = gw.admin_json("/admin/conns/m-1").await["node"]
        .as_str()
        .expect("bound")
        .to_string();
    let drain = request(
        "POST",
        &gw.admin(&format!("/admin/nodes/{bound}/drain?period=30s")),
        &[],
        vec![],
    )
    .await
    .expect("drain");
    assert_eq!(drain.status, 202);
    let r = get(&gw.url("/data"), &[("X-Conn-Id", "m-1")])
        .await
        .expect("hop");
    assert_eq!(r.status, 200);
    let _ = get(&gw.url("/nothing-here"), &[]).await.expect("404");
    for accept in [None, Some("*/*")] {
        let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", *a)).collect();
        let r = get(&gw.admin("/metrics"), &headers).await.expect("metrics");
        assert_eq!(
            r.header("content-type").as_deref(),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        let text = r.text();
        assert!(
            !text.contains("# EOF"),
            "no OpenMetrics terminator in 0.0.4 text"
        );
        assert!(
            text.contains("# TYPE hopping_count_total counter"),
            "{text}"
        );
        assert!(
            text.contains("hopping_count_total{reason=\"draining\"} 1"),
            "{text}"
        );
        let mut child = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("promtool (Debian package prometheus) is installed");
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(text.as_bytes())
            .expect("write to promtool");
        let out = child.wait_with_output().expect("promtool ran");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "promtool check metrics failed: {said}"
        );
        assert_eq!(said.trim(), "", "promtool lint problems: {said}");
    }
    let r = get(
        &gw.admin("/metrics"),
        &[(
            "Accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
        )],
    )
    .await
    .expect("metrics");
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let text = r.text();
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(text.contains("# TYPE hopping_count counter"), "{text}");
}

/// Issue 13 defect (`hopping_latency_seconds` missed hops): every hop counted in
/// `hopping_count_total` records exactly one latency observation, for the reasons draining,
/// ejected (no failed attempt in the request) and connect_error (a failed attempt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_counted_hop_records_one_latency_observation() {
    let mut mocks = [
        Mock::start("node-a").await,
        Mock::start("node-b").await,
        Mock::start("node-c").await,
    ];
    let refs: Vec<&Mock> = mocks.iter().collect();
    let gw = Gateway::start(&config(FAST_HEALTH, &refs, "")).await;
    let bind = |id: &'static str| {
        let gw = &gw;
        async move {
            let r = get(&gw.url("/data"), &[("X-Conn-Id", id)])
                .await
                .expect("request");
            assert_eq!(r.status, 200, "{id}: {}", r.text());
            gw.admin_json(&format!("/admin/conns/{id}")).await["node"]
                .as_str()
                .expect("bound")
                .to_string()
        }
    };
    // draining: the bound node drains; the next request hops without any failed attempt.
    let d = bind("lat-d").await;
    let r = request(
        "POST",
        &gw.admin(&format!("/admin/nodes/{d}/drain?period=30s")),
        &[],
        vec![],
    )
    .await
    .expect("drain");
    assert_eq!(r.status, 202);
    assert_ne!(bind("lat-d").await, d);
    let r = request(
        "POST",
        &gw.admin(&format!("/admin/nodes/{d}/undrain")),
        &[],
        vec![],
    )
    .await
    .expect("undrain");
    assert_eq!(r.status, 200);
    // ejected: the bound node fails its probes until ejected; the next request hops.
    let e = bind("lat-e").await;
    let em = mocks.iter().find(|m| m.id == e).expect("mock");
    em.set_down().await;
    gw.wait_node_state(&e, "ejected", Duration::from_secs(10))
        .await;
    assert_ne!(bind("lat-e").await, e);
    em.set_up().await;
    gw.wait_node_state(&e, "healthy", Duration::from_secs(10))
        .await;
    // connect_error: the bound node dies; the request's connect fails and it is retried elsewhere.
    let k = bind("lat-k").await;
    let km = mocks.iter_mut().find(|m| m.id == k).expect("mock");
    km.kill().await;
    assert_ne!(bind("lat-k").await, k);
    let mut hops = 0.0;
    for reason in ["draining", "ejected", "connect_error"] {
        let n = gw
            .metric(&format!("hopping_count_total{{reason=\"{reason}\"}}"))
            .await;
        assert_eq!(n, 1.0, "one {reason} hop");
        hops += n;
    }
    assert_eq!(gw.metric("hopping_latency_seconds_count").await, hops);
}

/// A hand-made node for CASE-27: answers each request by its path with fixed bytes, framing
/// headers included whatever the status. Counts the connections that carried a request, and
/// notes a request arriving on a connection after its stray-byte 204 (it should have been closed).
async fn lying_node() -> (String, Arc<AtomicU64>, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    let conns = Arc::new(AtomicU64::new(0));
    let reused = Arc::new(AtomicBool::new(false));
    let (counter, flag) = (conns.clone(), reused.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (counter, flag) = (counter.clone(), flag.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut first = true;
                let mut stray_sent = false;
                while let Some(n) = read_head(&mut s, &mut buf).await {
                    if first {
                        counter.fetch_add(1, Ordering::SeqCst);
                        first = false;
                    }
                    if stray_sent {
                        flag.store(true, Ordering::SeqCst);
                    }
                    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                    buf.drain(..n);
                    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                    let answer: &[u8] = match path.as_str() {
                        "/files/report.pdf" => b"HTTP/1.1 200 OK\r\nContent-Type: application/pdf\r\nContent-Length: 1048576\r\n\r\n",
                        "/files/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                        "/v2/app/manifests/latest" => b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 157\r\nWWW-Authenticate: Bearer realm=\"http://auth.example.test/token\"\r\n\r\n",
                        "/style-cl.css" => b"HTTP/1.1 304 Not Modified\r\nETag: \"v7\"\r\nContent-Length: 5000\r\n\r\n",
                        "/style-te.css" => b"HTTP/1.1 304 Not Modified\r\nETag: \"v7\"\r\nTransfer-Encoding: chunked\r\n\r\n",
                        "/style.css" => b"HTTP/1.1 304 Not Modified\r\nETag: \"v7\"\r\n\r\n",
                        "/items/9" => {
                            stray_sent = true;
                            b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nhello"
                        }
                        _ => b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\npong",
                    };
                    if s.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, conns, reused)
}

/// CASE-27: HEAD, 204 and 304 responses end at their head whatever framing headers the node
/// sent: no body is awaited or forwarded, HEAD's Content-Length passes unchanged, no chunked
/// framing is invented, the client connection stays usable, and a 204 that carried stray bytes
/// never lets them reach a client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case27_bodiless_responses_with_framing_headers_end_at_their_head() {
    let (addr, conns, reused) = lying_node().await;
    let toml = format!(
        "{TCP_HEALTH}\n{}\n[[routes]]\nid = \"api\"\ncluster = \"c\"\ntimeout = \"20s\"\n",
        cluster_toml("c", &[("node-a", addr)], "")
    );
    let gw = Gateway::start(&toml).await;
    let mut c = Raw::connect(gw.port).await;
    let cases: [(&str, &str, u16, Option<&str>); 7] = [
        ("HEAD", "/files/report.pdf", 200, Some("1048576")),
        ("HEAD", "/files/chunked", 200, None),
        ("HEAD", "/v2/app/manifests/latest", 401, Some("157")),
        ("GET", "/style-cl.css", 304, None),
        ("GET", "/style-te.css", 304, None),
        ("GET", "/style.css", 304, None),
        ("DELETE", "/items/9", 204, None),
    ];
    for (method, path, status, length) in cases {
        let extra = if method == "GET" {
            "If-None-Match: \"v7\"\r\n"
        } else {
            ""
        };
        c.send(
            format!("{method} {path} HTTP/1.1\r\nHost: app.example.test\r\n{extra}\r\n").as_bytes(),
        )
        .await;
        let r = c.response(true).await;
        assert_eq!(r.status, status, "{method} {path}");
        if let Some(len) = length {
            assert_eq!(
                r.header("content-length"),
                Some(len),
                "{method} {path}: length unchanged"
            );
        }
        if status == 204 {
            assert_eq!(
                r.header("content-length"),
                None,
                "204 carries no Content-Length"
            );
        }
        if status == 304 && path != "/style-cl.css" {
            assert_ne!(
                r.header("transfer-encoding"),
                Some("chunked"),
                "{path}: no chunked invented"
            );
        }
        if path == "/style.css" {
            assert_eq!(
                r.header("content-length"),
                None,
                "no Content-Length invented for a 304"
            );
        }
        assert_ne!(
            r.header("connection"),
            Some("close"),
            "{method} {path}: connection kept"
        );
        // The same client connection answers the next request at once: no body bytes came first.
        c.send(b"GET /ping HTTP/1.1\r\nHost: app.example.test\r\n\r\n")
            .await;
        let r = c.response(false).await;
        assert_eq!(
            (r.status, r.body.as_slice()),
            (200, &b"pong"[..]),
            "after {method} {path}"
        );
    }
    assert!(
        find(&c.buf, b"hello").is_none(),
        "stray 204 bytes reached the client"
    );
    // Every bodiless answer reused the upstream connection (the gateway found each message's
    // end); the 204 with stray bytes closed its connection instead of pooling it.
    assert!(
        !reused.load(Ordering::SeqCst),
        "a request followed the stray 204 bytes on one upstream connection"
    );
    assert_eq!(
        conns.load(Ordering::SeqCst),
        2,
        "one upstream connection before the stray 204, one after"
    );
    // f: an h2c client's HEAD gets one HEADERS frame with END_STREAM, no DATA.
    let mut h = integration_tests::h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let req = h.request("HEAD", "/files/report.pdf", &[], bytes::Bytes::new());
    let r = h.fetch(req).await.expect("h2 HEAD");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length").as_deref(), Some("1048576"));
    assert_eq!((r.data_frames, r.body.len()), (0, 0), "no DATA frame");
}
