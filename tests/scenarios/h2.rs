//! HTTP/2 and gRPC pass-through (SPEC sections 4 and 5): h2c downstream, h2c upstream for
//! `protocol = "h2c"` clusters, trailers-only answers (CASE-07), `te: trailers` (CASE-08), a
//! node's graceful GOAWAY (CASE-09), h2c probes and GOAWAY (CASE-18), `:authority`/`host`
//! (CASE-12), and unbuffered server streams that outlive the route timeout (CASE-24).

use std::time::Duration;

use bytes::Bytes;
use hyper_util::rt::TokioIo;
use integration_tests::h2c::{self, grpc_headers, grpc_messages, Stream};
use integration_tests::{cluster_toml, get, request, wait_until, Gateway, Mock, FAST_HEALTH};
use mock_backend::grpc::{encode_frame, proto, TICKS_PATH, WHO_PATH};
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Health that never touches the nodes' HTTP counters (TCP connect every 200 ms).
const TCP_HEALTH: &str =
    "[health]\nkind = \"tcp\"\ninterval = \"200ms\"\ntimeout = \"500ms\"\nslow_start = \"0s\"\n";

fn grpc_addr(m: &Mock) -> String {
    format!("127.0.0.1:{}", m.grpc_port.expect("started with --grpc"))
}

/// One cluster `c` (with `cluster_extra` lines) and one route `api` for `/` with `route` lines.
fn config(health: &str, nodes: &[(&str, String)], cluster_extra: &str, route: &str) -> String {
    format!(
        "{health}\n{}\n[[routes]]\nid = \"api\"\ncluster = \"c\"\n{route}\n",
        cluster_toml("c", nodes, cluster_extra)
    )
}

fn echo_header(echo: &serde_json::Value, name: &str) -> Vec<String> {
    echo["headers"]
        .as_array()
        .expect("headers array")
        .iter()
        .filter(|p| p[0] == name)
        .map(|p| p[1].as_str().expect("value").to_string())
        .collect()
}

/// Node ids currently in flight on the gateway, by node.
async fn inflight(gw: &Gateway, id: &str) -> u64 {
    gw.node(id).await["inflight"].as_u64().expect("inflight")
}

/// ESTABLISHED TCP connections of the gateway process whose remote end is loopback `port` (its
/// upstream connections to the node on that port).
fn established_to(gw: &Gateway, port: u16) -> usize {
    let pid = gw.pid().expect("gateway running");
    // Socket inodes the gateway holds open.
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("gateway fds")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')
                .map(str::to_string)
        })
        .collect();
    let text = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let want = format!("0100007F:{port:04X}");
    text.lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 9 && f[2] == want && f[3] == "01" && inodes.contains(f[9])
        })
        .count()
}

/// CASE-12 (h2): Host derived from `:authority`, exactly once, `X-Forwarded-Host` set; `:authority`
/// with a conflicting `host` is 400 JSON and nothing is forwarded.
#[tokio::test]
async fn h2c_downstream_derives_host_from_authority_and_rejects_conflicting_host() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&config(TCP_HEALTH, &[("node-a", a.addr())], "", "")).await;
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;

    // h2 downstream to an HTTP/1.1 node: Host comes from :authority, exactly once.
    let req = http::Request::builder()
        .method("GET")
        .version(http::Version::HTTP_2)
        .uri("http://app.example.test/echo")
        .body(http_body_util::Full::new(Bytes::new()))
        .expect("req");
    let r = c.fetch(req).await.expect("h2 echo");
    assert_eq!(r.status, 200, "{}", r.text());
    let echo = r.json();
    assert_eq!(echo["version"], "HTTP/1.1");
    assert_eq!(echo_header(&echo, "host"), ["app.example.test"]);
    assert_eq!(echo_header(&echo, "x-forwarded-host"), ["app.example.test"]);
    assert_eq!(echo_header(&echo, "x-forwarded-proto"), ["http"]);

    // The same host in both (any case) is fine.
    let req = http::Request::builder()
        .method("GET")
        .uri("http://app.example.test/echo")
        .header("host", "APP.example.test")
        .body(http_body_util::Full::new(Bytes::new()))
        .expect("req");
    assert_eq!(c.fetch(req).await.expect("same host").status, 200);

    // :authority and a conflicting host: 400, nothing forwarded.
    let before = a.requests().await;
    let req = http::Request::builder()
        .method("GET")
        .uri("http://app.example.test/echo")
        .header("host", "evil.example.test")
        .body(http_body_util::Full::new(Bytes::new()))
        .expect("req");
    let r = c.fetch(req).await.expect("conflicting host");
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["code"], -1);
    assert!(
        r.json()["message"]
            .as_str()
            .expect("message")
            .contains(":authority"),
        "{}",
        r.text()
    );
    assert_eq!(
        a.requests().await,
        before,
        "a request with conflicting hosts reached the node"
    );
}

/// CASE-07: trailers-only answers (A: one HEADERS with `grpc-status: 5`) and separate trailers (B:
/// `grpc-status: 7`) reach the client in the same framing, `grpc-status` once, no DATA invented,
/// the gRPC code in the access log.
#[tokio::test]
async fn grpc_trailers_only_answers_reach_the_client_unchanged() {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let gw = Gateway::start(&config(
        FAST_HEALTH,
        &[("node-a", grpc_addr(&a))],
        "protocol = \"h2c\"",
        "",
    ))
    .await;
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let body = encode_frame(&proto::WhoRequest {});

    // A: one HEADERS frame with :status 200, grpc-status 5 and END_STREAM.
    let req = c.request(
        "POST",
        WHO_PATH,
        &grpc_headers(&[
            ("x-mock-grpc-status", "5"),
            ("x-mock-grpc-message", "not%20found"),
        ]),
        body.clone(),
    );
    let r = c.fetch(req).await.expect("trailers-only call");
    assert_eq!(r.status, 200);
    assert_eq!(r.headers.get_all("grpc-status").iter().count(), 1);
    assert_eq!(r.header("grpc-status").as_deref(), Some("5"));
    assert_eq!(r.header("grpc-message").as_deref(), Some("not%20found"));
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/grpc")
    );
    assert_eq!((r.data_frames, r.body.len()), (0, 0), "DATA invented");
    assert!(
        r.trailers.is_none(),
        "a trailers frame was added to a trailers-only answer: {:?}",
        r.trailers
    );
    assert_eq!(r.header("x-node-id").as_deref(), Some("node-a"));
    gw.logs
        .wait_for(
            &[
                "access",
                "path=/hopping.test.v1.Echo/Who",
                "status=200",
                "grpc_status=5",
            ],
            Duration::from_secs(5),
        )
        .await;

    // B: headers, no DATA, then a trailers frame with grpc-status 7.
    let req = c.request(
        "POST",
        WHO_PATH,
        &grpc_headers(&[
            ("x-mock-grpc-status", "7"),
            ("x-mock-grpc-message", "denied"),
            ("x-mock-grpc-framing", "separate"),
        ]),
        body.clone(),
    );
    let r = c.fetch(req).await.expect("separate trailers call");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("grpc-status"), None, "status moved into the head");
    assert_eq!((r.data_frames, r.body.len()), (0, 0), "DATA invented");
    let t = r.trailers.as_ref().expect("a trailers frame");
    assert_eq!(t.get_all("grpc-status").iter().count(), 1);
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("7"));
    assert_eq!(r.trailer("grpc-message").as_deref(), Some("denied"));
    gw.logs
        .wait_for(
            &["access", "path=/hopping.test.v1.Echo/Who", "grpc_status=7"],
            Duration::from_secs(5),
        )
        .await;

    // A normal unary call: one DATA frame with the reply, then status 0 trailers.
    let req = c.request("POST", WHO_PATH, &grpc_headers(&[]), body);
    let r = c.fetch(req).await.expect("unary call");
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"));
    let replies: Vec<proto::WhoReply> = grpc_messages(&r.body);
    assert_eq!(
        replies,
        [proto::WhoReply {
            node: "node-a".into()
        }]
    );
    gw.logs
        .wait_for(
            &["access", "path=/hopping.test.v1.Echo/Who", "grpc_status=0"],
            Duration::from_secs(5),
        )
        .await;
}

/// CASE-08: `te: trailers` and `grpc-timeout` reach the node (h2 and HTTP/1.1 `TE: trailers,
/// deflate` to an h2c cluster), other TE values are dropped, the call ends with status 0 and its
/// trailers.
#[tokio::test]
async fn te_trailers_survives_and_other_te_values_are_dropped() {
    // Main ports (h2c and HTTP/1.1) behind an h2c cluster for /echo; gRPC ports for the call.
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let toml = format!(
        "{TCP_HEALTH}\n{}\n{}\n[[routes]]\nid = \"grpc\"\ncluster = \"g\"\nmatch = {{ path_prefix = \"/hopping.test.v1.Echo/\" }}\n\n[[routes]]\nid = \"api\"\ncluster = \"c\"\n",
        cluster_toml("c", &[("node-a", a.addr())], "protocol = \"h2c\""),
        cluster_toml("g", &[("node-a-grpc", grpc_addr(&a))], "protocol = \"h2c\""),
    );
    let gw = Gateway::start(&toml).await;
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;

    // h2 downstream: te: trailers and grpc-timeout reach the node as sent.
    let r = c
        .get("/echo", &[("te", "trailers"), ("grpc-timeout", "1S")])
        .await
        .expect("h2 echo");
    assert_eq!(r.status, 200, "{}", r.text());
    let echo = r.json();
    assert_eq!(echo["version"], "HTTP/2.0");
    assert_eq!(echo_header(&echo, "te"), ["trailers"]);
    assert_eq!(echo_header(&echo, "grpc-timeout"), ["1S"]);

    // HTTP/1.1 downstream to the h2c cluster: only `trailers` survives, with or without Connection: TE.
    for headers in [
        vec![("TE", "trailers, deflate")],
        vec![("Connection", "TE"), ("TE", "trailers, deflate;q=0.5")],
    ] {
        let r = get(&gw.url("/echo"), &headers).await.expect("h1 echo");
        assert_eq!(r.status, 200, "{}", r.text());
        let echo = r.json();
        assert_eq!(echo["version"], "HTTP/2.0");
        assert_eq!(echo_header(&echo, "te"), ["trailers"], "{headers:?}");
        assert!(echo_header(&echo, "connection").is_empty());
    }
    let r = get(&gw.url("/echo"), &[("TE", "deflate, gzip")])
        .await
        .expect("h1 echo");
    assert!(
        echo_header(&r.json(), "te").is_empty(),
        "TE without trailers must be dropped"
    );

    // A real gRPC call with te and grpc-timeout completes with status 0 and its trailers.
    let req = c.request(
        "POST",
        WHO_PATH,
        &grpc_headers(&[("grpc-timeout", "1S")]),
        encode_frame(&proto::WhoRequest {}),
    );
    let r = c.fetch(req).await.expect("gRPC call");
    assert_eq!(r.status, 200);
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"));
    let replies: Vec<proto::WhoReply> = grpc_messages(&r.body);
    assert_eq!(
        replies,
        [proto::WhoReply {
            node: "node-a".into()
        }]
    );
}

/// CASE-09: node-a sends GOAWAY(NO_ERROR) every 3 streams; 30 sequential and 30 concurrent GETs and
/// 10 POSTs with 1 KiB bodies bound by `c-4004` all succeed on node-a, no passive penalty, binding
/// kept, client connection untouched.
#[tokio::test]
async fn h2c_node_goaway_every_three_streams_costs_nothing() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config(
        FAST_HEALTH,
        &[("node-a", a.addr()), ("node-b", b.addr())],
        "protocol = \"h2c\"",
        "",
    ))
    .await;
    // Bind c-4004 to node-a: node-b drains while the binding is made.
    assert_eq!(
        request(
            "POST",
            &gw.admin("/admin/nodes/node-b/drain?period=60s"),
            &[],
            Vec::new()
        )
        .await
        .expect("drain")
        .status,
        202
    );
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let r = c
        .get("/echo/bind", &[("x-conn-id", "c-4004")])
        .await
        .expect("bind");
    assert_eq!(r.header("x-node-id").as_deref(), Some("node-a"));
    assert_eq!(
        request(
            "POST",
            &gw.admin("/admin/nodes/node-b/undrain"),
            &[],
            Vec::new()
        )
        .await
        .expect("undrain")
        .status,
        200
    );
    gw.wait_node_state("node-b", "healthy", Duration::from_secs(5))
        .await;
    let r = request(
        "POST",
        &format!("{}/control/goaway?after=3", a.url()),
        &[],
        Vec::new(),
    )
    .await
    .expect("goaway knob");
    assert_eq!(r.status, 200);
    let hops_before = gw.metric("hopping_count_total{reason=\"draining\"}").await;

    let check = |r: &h2c::H2Resp, what: &str| {
        assert_eq!(r.status, 200, "{what}: {}", r.text());
        assert_eq!(r.header("x-node-id").as_deref(), Some("node-a"), "{what}");
    };
    for i in 0..30 {
        let r = c
            .get(&format!("/echo/r?seq={i}"), &[("x-conn-id", "c-4004")])
            .await
            .expect("sequential GET");
        check(&r, &format!("sequential GET {i}"));
    }
    let mut calls = Vec::new();
    for i in 0..30 {
        let mut send = c.send.clone();
        let req = c.request(
            "GET",
            &format!("/echo/r?par={i}"),
            &[("x-conn-id", "c-4004")],
            Bytes::new(),
        );
        calls.push(tokio::spawn(async move {
            send.ready().await?;
            h2c::read_all(send.send_request(req).await?).await
        }));
    }
    for (i, call) in calls.into_iter().enumerate() {
        let r = call.await.expect("join").expect("concurrent GET");
        check(&r, &format!("concurrent GET {i}"));
    }
    let payload: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
    let sha = hex::encode(Sha256::digest(&payload));
    for i in 0..10 {
        let req = c.request(
            "POST",
            &format!("/echo/r?post={i}"),
            &[
                ("x-conn-id", "c-4004"),
                ("content-type", "application/octet-stream"),
            ],
            payload.clone(),
        );
        let r = c.fetch(req).await.expect("POST");
        check(&r, &format!("POST {i}"));
        assert_eq!(r.json()["body_len"], 1024);
        assert_eq!(r.json()["body_sha256"], sha.as_str());
    }
    // The node paid no passive-health penalty and kept the binding; the client connection is intact.
    let n = gw.node("node-a").await;
    assert_eq!(n["state"], "healthy", "{n}");
    assert_eq!(n["consecutive_failures"], 0, "{n}");
    assert_eq!(gw.admin_json("/admin/conns/c-4004").await["node"], "node-a");
    assert_eq!(
        gw.metric("hopping_count_total{reason=\"draining\"}").await,
        hops_before
    );
    assert!(
        !c.send.is_closed() && !c.conn.is_finished(),
        "the client's h2 connection was closed"
    );
    let paths = get(&format!("{}/control/stats", a.url()), &[])
        .await
        .expect("stats")
        .json();
    assert!(
        paths["requests"].as_u64().expect("requests") >= 71,
        "{paths}"
    );
}

/// CASE-18: h2c probes answered by a node that sends GOAWAY after every stream never move it out of
/// healthy (a probe refused by GOAWAY is retried, not counted); real 503s still eject, and that one
/// transition is logged once, at info.
#[tokio::test]
async fn h2c_probes_never_count_a_node_goaway_as_failure() {
    let a = Mock::start("node-a").await;
    let r = request(
        "POST",
        &format!("{}/control/goaway?after=1", a.url()),
        &[],
        Vec::new(),
    )
    .await
    .expect("goaway knob");
    assert_eq!(r.status, 200);
    let health = "[health]\ninterval = \"200ms\"\ntimeout = \"2s\"\ndegrade_after = 1\neject_after = 1\nrecover_after = 1\nslow_start = \"0s\"\n";
    let gw = Gateway::start(&config(
        health,
        &[("node-a", a.addr())],
        "protocol = \"h2c\"",
        "",
    ))
    .await;
    let probes_at_start = a.requests().await;
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let n = gw.node("node-a").await;
        assert_eq!(n["state"], "healthy", "node left healthy on a GOAWAY: {n}");
        assert_eq!(n["consecutive_failures"], 0, "{n}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let probes = a.requests().await - probes_at_start;
    assert!(probes >= 15, "only {probes} h2c probes in 5 s");
    assert_eq!(
        gw.logs.matching(&["node state changed"]),
        Vec::<String>::new(),
        "no transition while the node only sent GOAWAYs"
    );
    // Real failures still count: 503s eject at once with eject_after = 1.
    a.set_down().await;
    gw.wait_node_state("node-a", "ejected", Duration::from_secs(2))
        .await;
    // The transition is logged once, at info.
    let line = gw
        .logs
        .wait_for(
            &["node state changed", "node-a", "ejected"],
            Duration::from_secs(2),
        )
        .await;
    assert!(line.contains("INFO"), "{line}");
    assert_eq!(
        gw.logs.matching(&["node state changed"]).len(),
        1,
        "{:?}",
        gw.logs.matching(&["node state changed"])
    );
}

/// An HTTP/1.1 request on a fresh connection; returns the streaming response.
async fn h1_stream(
    port: u16,
    path: &str,
    headers: &[(&str, &str)],
) -> (
    hyper::client::conn::http1::SendRequest<http_body_util::Empty<Bytes>>,
    Stream,
) {
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("connect");
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut b = http::Request::builder()
        .uri(path)
        .header("host", "app.example.test");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let resp = send
        .send_request(b.body(http_body_util::Empty::new()).expect("req"))
        .await
        .expect("response head");
    (send, Stream::new(resp))
}

/// CASE-24: SSE head within 200 ms and before any event, each event within 100 ms, no
/// Content-Length, not compressed, not cut by the route timeout; the upstream connection closes
/// within 1 s of the client leaving.
#[tokio::test]
async fn sse_events_flow_unbuffered_past_the_route_timeout_and_client_exit_closes_upstream() {
    let a = Mock::start("node-a").await;
    let health =
        "[health]\nkind = \"tcp\"\ninterval = \"60s\"\ntimeout = \"1s\"\nslow_start = \"0s\"\n";
    let gw = Gateway::start(&config(
        health,
        &[("node-a", a.addr())],
        "",
        "timeout = \"1s\"",
    ))
    .await;
    let sent_at = Instant::now();
    let (send, mut s) = h1_stream(
        gw.port,
        "/sse",
        &[
            ("accept", "text/event-stream"),
            ("accept-encoding", "gzip, br"),
        ],
    )
    .await;
    assert_eq!(s.status, 200);
    assert!(
        s.head_at - sent_at < Duration::from_millis(200),
        "head took {:?}",
        s.head_at - sent_at
    );
    assert_eq!(
        s.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    assert_eq!(s.header("content-length"), None);
    assert_eq!(s.header("content-encoding"), None);
    // 25 events = 2.5 s, well past the 1 s route timeout; event k is sent 100 ms * k after the head.
    let mut pending = String::new();
    let mut seen = 0u64;
    while seen < 25 {
        let (chunk, at) = s
            .next_chunk()
            .await
            .expect("stream alive")
            .expect("stream not ended");
        pending.push_str(std::str::from_utf8(&chunk).expect("utf8"));
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            seen += 1;
            assert_eq!(event, format!("data: node-a {seen}\n\n"));
            let scheduled = s.head_at + Duration::from_millis(100 * seen);
            assert!(
                at < scheduled + Duration::from_millis(100),
                "event {seen} arrived {:?} after it was due",
                at - scheduled
            );
            if seen == 1 {
                assert!(
                    at - s.head_at > Duration::from_millis(50),
                    "the head was held back until the first event"
                );
            }
        }
    }
    assert_eq!(inflight(&gw, "node-a").await, 1);
    assert_eq!(
        established_to(&gw, a.port),
        1,
        "one upstream connection carries the stream"
    );
    // The client leaves: the upstream connection closes within 1 s.
    let left = Instant::now();
    drop(s);
    drop(send);
    wait_until(
        Duration::from_secs(1),
        "upstream SSE connection closed",
        || async { established_to(&gw, a.port) == 0 },
    )
    .await;
    wait_until(
        Duration::from_secs(1),
        "node-a in-flight back to 0",
        || async { inflight(&gw, "node-a").await == 0 },
    )
    .await;
    assert!(left.elapsed() < Duration::from_secs(2));
    gw.logs
        .wait_for(
            &["access", "path=/sse", "status=200"],
            Duration::from_secs(2),
        )
        .await;
}

/// CASE-24 (gRPC server streaming): ticks flow on time past the route timeout; a client cancel
/// resets the upstream stream within 1 s.
#[tokio::test]
async fn grpc_server_stream_flows_promptly_and_cancel_resets_upstream() {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let gw = Gateway::start(&config(
        FAST_HEALTH,
        &[("node-a", grpc_addr(&a))],
        "protocol = \"h2c\"",
        "timeout = \"1s\"",
    ))
    .await;
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;

    // A bounded stream: three ticks, then status 0 trailers.
    let req = c.request(
        "POST",
        TICKS_PATH,
        &grpc_headers(&[]),
        encode_frame(&proto::TicksRequest { count: 3 }),
    );
    let r = c.fetch(req).await.expect("Ticks(3)");
    let ticks: Vec<proto::Tick> = grpc_messages(&r.body);
    assert_eq!(ticks.iter().map(|t| t.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"));
    gw.logs
        .wait_for(
            &[
                "access",
                "path=/hopping.test.v1.Echo/Ticks",
                "grpc_status=0",
            ],
            Duration::from_secs(5),
        )
        .await;

    // An endless stream outlives the 1 s route timeout, each tick on time.
    let req = c.request(
        "POST",
        TICKS_PATH,
        &grpc_headers(&[]),
        encode_frame(&proto::TicksRequest { count: 0 }),
    );
    let mut s = Stream::new(c.send(req).await.expect("Ticks(0) head"));
    assert_eq!(s.status, 200);
    for seq in 1..=20u64 {
        let (tick, at) = s
            .next_message::<proto::Tick>()
            .await
            .expect("stream alive")
            .expect("a tick");
        assert_eq!((tick.node.as_str(), tick.seq), ("node-a", seq));
        let scheduled = s.head_at + Duration::from_millis(100 * seq);
        assert!(
            at < scheduled + Duration::from_millis(100),
            "tick {seq} arrived {:?} after it was due",
            at - scheduled
        );
    }
    assert_eq!(inflight(&gw, "node-a").await, 1);
    // The client cancels (RST_STREAM): the upstream stream is reset within 1 s.
    drop(s);
    wait_until(
        Duration::from_secs(1),
        "node-a in-flight back to 0 after cancel",
        || async { inflight(&gw, "node-a").await == 0 },
    )
    .await;
    // The connection itself stays usable.
    let req = c.request(
        "POST",
        WHO_PATH,
        &grpc_headers(&[]),
        encode_frame(&proto::WhoRequest {}),
    );
    assert_eq!(
        c.fetch(req)
            .await
            .expect("Who after cancel")
            .trailer("grpc-status")
            .as_deref(),
        Some("0")
    );
}

#[tokio::test]
async fn grpc_deadline_replaces_route_timeout_and_gateway_errors_are_grpc_statuses() {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let gw = Gateway::start(&config(
        TCP_HEALTH,
        &[("node-a", grpc_addr(&a))],
        "protocol = \"h2c\"",
        "timeout = \"1s\"",
    ))
    .await;
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let who = encode_frame(&proto::WhoRequest {});
    a.delay(1500).await;

    // The client's grpc-timeout (5 s) replaces the 1 s route timeout for the head.
    let req = c.request(
        "POST",
        WHO_PATH,
        &grpc_headers(&[("grpc-timeout", "5S")]),
        who.clone(),
    );
    let r = c.fetch(req).await.expect("slow call within its deadline");
    assert_eq!(
        r.trailer("grpc-status").as_deref(),
        Some("0"),
        "{:?} {:?}",
        r.headers,
        r.trailers
    );

    // Without grpc-timeout the route timeout bounds the head: a gRPC error, not a JSON 504.
    let started = Instant::now();
    let req = c.request("POST", WHO_PATH, &grpc_headers(&[]), who.clone());
    let r = c.fetch(req).await.expect("timed out call");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_millis(1450),
        "answered after {took:?}"
    );
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/grpc")
    );
    // CASE-30 c: a deadline the gateway enforced is DEADLINE_EXCEEDED (4).
    assert_eq!(r.header("grpc-status").as_deref(), Some("4"));
    assert!(
        r.header("grpc-message")
            .is_some_and(|m| m.contains("did not answer within 1000 ms")),
        "{:?}",
        r.headers
    );
    assert_eq!((r.data_frames, r.trailers.is_none()), (0, true));
    gw.logs
        .wait_for(
            &[
                "access",
                "path=/hopping.test.v1.Echo/Who",
                "status=504",
                "grpc_status=4",
            ],
            Duration::from_secs(2),
        )
        .await;

    // No healthy node: the fallback becomes UNAVAILABLE.
    a.delay(0).await;
    drop(a);
    wait_until(Duration::from_secs(5), "node-a ejected", || async {
        gw.node("node-a").await["state"] == "ejected"
    })
    .await;
    // The ejection sent GOAWAY to the connection bound to node-a: the client reconnects.
    wait_until(
        Duration::from_secs(2),
        "GOAWAY on the connection bound to node-a",
        || async { c.send.is_closed() },
    )
    .await;
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let req = c.request("POST", WHO_PATH, &grpc_headers(&[]), who);
    let r = c.fetch(req).await.expect("call with no healthy node");
    assert_eq!(
        (r.status, r.header("grpc-status").as_deref()),
        (200, Some("14"))
    );
}

#[tokio::test]
async fn h2_connection_is_its_own_affinity_key_until_it_closes() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let gw = Gateway::start(&config(
        TCP_HEALTH,
        &[("node-a", a.addr()), ("node-b", b.addr())],
        "",
        "",
    ))
    .await;
    let gw_addr = format!("127.0.0.1:{}", gw.port);
    let mut ids = Vec::new();
    let mut nodes = std::collections::HashSet::new();
    // Issued ids are placed by rendezvous hashing (SPEC 7): open connections (4 at least, 24 at
    // most) until both nodes have one.
    while ids.len() < 4 || (nodes.len() < 2 && ids.len() < 24) {
        let mut c = h2c::connect(&gw_addr).await;
        let first = c.get("/echo", &[]).await.expect("request");
        let id = first.header("x-conn-id").expect("an issued conn id");
        let node = first.header("x-node-id").expect("x-node-id");
        // Every request of the connection goes to its node, carrying the same id upstream.
        for _ in 0..5 {
            let r = c.get("/echo", &[]).await.expect("request");
            assert_eq!(r.header("x-node-id").as_deref(), Some(node.as_str()));
            assert_eq!(echo_header(&r.json(), "x-conn-id"), [id.as_str()]);
        }
        assert_eq!(
            gw.admin_json(&format!("/admin/conns/{id}")).await["node"],
            node.as_str()
        );
        // Closing the connection forgets its binding.
        drop(c);
        wait_until(
            Duration::from_secs(2),
            "the closed connection's binding to go",
            || async {
                get(&gw.admin(&format!("/admin/conns/{id}")), &[])
                    .await
                    .expect("admin")
                    .status
                    == 404
            },
        )
        .await;
        ids.push(id);
        nodes.insert(node);
    }
    let opened = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), opened, "each connection gets its own id");
    assert_eq!(
        nodes.len(),
        2,
        "connections are balanced across nodes: {nodes:?}"
    );
}

#[tokio::test]
async fn h2c_burst_to_a_fresh_node_shares_one_connection() {
    let a = Mock::start("node-a").await;
    let health =
        "[health]\nkind = \"tcp\"\ninterval = \"60s\"\ntimeout = \"1s\"\nslow_start = \"0s\"\n";
    let gw = Gateway::start(&config(
        health,
        &[("node-a", a.addr())],
        "protocol = \"h2c\"",
        "",
    ))
    .await;
    a.delay(500).await;
    let calls: Vec<_> = (0..40)
        .map(|i| {
            let url = gw.url(&format!("/echo?i={i}"));
            tokio::spawn(async move { get(&url, &[]).await })
        })
        .collect();
    wait_until(
        Duration::from_secs(5),
        "40 requests in flight on node-a",
        || async { inflight(&gw, "node-a").await == 40 },
    )
    .await;
    assert_eq!(
        established_to(&gw, a.port),
        1,
        "the burst must share one h2c connection"
    );
    for call in calls {
        let r = call.await.expect("join").expect("request");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["version"], "HTTP/2.0");
    }
}
