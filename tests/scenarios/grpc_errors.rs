//! gRPC error semantics (SPEC section 5): the gateway's own failures are Trailers-Only answers
//! with the right `grpc-status` (CASE-30), REFUSED_STREAM is retried on another node, a stream the
//! node breaks after its head ends with `grpc-status: 14`, and `grpc-timeout` is honoured and
//! passed on with the remaining budget while the route timeout never cuts a started stream
//! (CASE-31). The client is hyper's HTTP/2 client speaking gRPC framing (tests/support/h2c.rs).

use std::time::Duration;

use bytes::Bytes;
use integration_tests::h2c::{self, grpc_headers, grpc_messages, H2Resp, Stream};
use integration_tests::{cluster_toml, Gateway, Mock};
use mock_backend::grpc::{encode_frame, proto, TICKS_PATH, WHO_PATH};
use tokio::time::Instant;

/// Health that never touches the nodes' HTTP counters.
const TCP_HEALTH: &str =
    "[health]\nkind = \"tcp\"\ninterval = \"200ms\"\ntimeout = \"500ms\"\nslow_start = \"0s\"\n";

/// An h2c cluster `c` of `nodes` and route `api` for `/hopping.test.v1.Echo/` with `route` lines.
pub(super) fn config(nodes: &[(&str, String)], route: &str) -> String {
    format!(
        "{TCP_HEALTH}\n{}\n[[routes]]\nid = \"api\"\ncluster = \"c\"\nmatch = {{ path_prefix = \"/hopping.test.v1.Echo/\" }}\n{route}\n",
        cluster_toml("c", nodes, "protocol = \"h2c\"")
    )
}

pub(super) fn who_body() -> Bytes {
    encode_frame(&proto::WhoRequest {})
}

/// Asserts a Trailers-Only answer: `:status 200`, `content-type: application/grpc`, `grpc-status`
/// = `code` in the head, a percent-encoded `grpc-message`, no DATA, no trailers frame.
fn assert_trailers_only(r: &H2Resp, code: u32) {
    assert_eq!(r.status, 200, "{:?}", r.headers);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/grpc")
    );
    assert_eq!(
        r.header("grpc-status"),
        Some(code.to_string()),
        "{:?}",
        r.headers
    );
    let msg = r.header("grpc-message").expect("grpc-message");
    assert!(
        // PROTOCOL-HTTP2: unencoded bytes are %x20-%x24 / %x26-%x7E, anything else %XX.
        !msg.is_empty() && msg.bytes().all(|b| (0x20..=0x7e).contains(&b)),
        "percent-encoded: {msg:?}"
    );
    assert_eq!((r.data_frames, r.body.len()), (0, 0), "no DATA");
    assert!(r.trailers.is_none(), "no separate trailers frame");
}

/// A `WhoService` call (`WHO_PATH`, empty request) with the `extra` request headers.
async fn who(gw: &Gateway, extra: &[(&str, &str)]) -> H2Resp {
    call(gw, WHO_PATH, extra, who_body()).await
}

async fn call(gw: &Gateway, path: &str, extra: &[(&str, &str)], body: Bytes) -> H2Resp {
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let req = c.request("POST", path, &grpc_headers(extra), body);
    c.fetch(req).await.expect("gRPC call answered")
}

/// CASE-30 a, b, d, e: no ready node → 14; connect refused on every node → 14; no route → 12;
/// body over `max_body` → 8; all Trailers-Only. CASE-30 h: the same failures without a gRPC
/// content-type keep the JSON bodies (503, 502, 404).
#[tokio::test]
async fn gateway_failures_are_trailers_only_with_grpc_status() {
    let mut a = Mock::start_with("node-a", &["--grpc"]).await;
    let gw = Gateway::start(&config(&[("node-a", a.grpc_addr())], "max_body = 64")).await;
    // d: no route.
    let r = call(&gw, "/pkg.Svc/Get", &[], who_body()).await;
    assert_trailers_only(&r, 12);
    // e: a request message larger than max_body.
    let big = encode_frame(&proto::TicksRequest { count: 0 });
    let mut large = big.to_vec();
    large.resize(4096, 0);
    let r = call(&gw, WHO_PATH, &[], Bytes::from(large)).await;
    assert_trailers_only(&r, 8);
    // b: node-a refuses connections (killed), before the probes notice.
    a.kill().await;
    let r = who(&gw, &[("grpc-timeout", "2S")]).await;
    assert_trailers_only(&r, 14);
    // a: no ready node at all.
    gw.wait_node_state("node-a", "ejected", Duration::from_secs(10))
        .await;
    let r = who(&gw, &[]).await;
    assert_trailers_only(&r, 14);
    // h: plain HTTP keeps the HTTP mapping and JSON bodies.
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let r = c.get("/api", &[]).await.expect("plain GET");
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["code"], -1);
    let r = c.get(WHO_PATH, &[]).await.expect("plain GET");
    assert_eq!(r.status, 503);
    assert!(r.header("grpc-status").is_none());
}

/// CASE-30 c / CASE-31 a: node-a stays silent; with `grpc-timeout: 200m` the call ends
/// DEADLINE_EXCEEDED (4), Trailers-Only, at 200 ms (+ a loaded machine's slack), and the expiry of
/// the client's own deadline does not count against node-a (it stays healthy); with no
/// `grpc-timeout`, the route timeout (1 s) ends it with 4 as well.
#[tokio::test]
async fn deadline_is_the_clients_and_ends_with_deadline_exceeded() {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let toml = config(&[("node-a", a.grpc_addr())], "timeout = \"1s\"")
        .replace("[health]\n", "[health]\npassive_consecutive_errors = 1\n");
    let gw = Gateway::start(&toml).await;
    for _ in 0..3 {
        let started = Instant::now();
        let r = who(
            &gw,
            &[("grpc-timeout", "200m"), ("x-mock-grpc-delay-ms", "2000")],
        )
        .await;
        let took = started.elapsed();
        assert_trailers_only(&r, 4);
        assert!(
            took >= Duration::from_millis(190) && took < Duration::from_millis(900),
            "{took:?}"
        );
    }
    assert_eq!(
        gw.node("node-a").await["state"],
        "healthy",
        "client deadlines are not node faults"
    );
    let started = Instant::now();
    let r = who(&gw, &[("x-mock-grpc-delay-ms", "5000")]).await;
    assert_trailers_only(&r, 4);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(3),
        "{took:?}"
    );
}

/// CASE-31 c and d: the node receives the remaining budget as `grpc-timeout`, capped by the
/// route's `grpc_max_timeout` (here 3 s against a client's 100S), and a call the node answers
/// after the cap ends with 4 at the cap; CASE-31 e: malformed values (`1x`, nine digits) are
/// never read as expired: the call succeeds and the value reaches the node unchanged.
#[tokio::test]
async fn grpc_timeout_is_capped_and_passed_on_with_the_remaining_budget() {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let gw = Gateway::start(&config(
        &[("node-a", a.grpc_addr())],
        "grpc_max_timeout = \"3s\"",
    ))
    .await;
    let ms = |r: &H2Resp| -> u64 {
        let t = r
            .header("x-mock-grpc-timeout")
            .expect("node saw grpc-timeout");
        t.strip_suffix('m')
            .expect("milliseconds")
            .parse()
            .expect("number")
    };
    let r = who(&gw, &[("grpc-timeout", "100S")]).await;
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"));
    let got = ms(&r);
    assert!(
        (2000..=3000).contains(&got),
        "node received {got}m, want at most the 3 s cap"
    );
    let r = who(&gw, &[("grpc-timeout", "1500m")]).await;
    let got = ms(&r);
    assert!(
        (1000..=1500).contains(&got),
        "node received {got}m of 1500m"
    );
    // No client deadline: the cap alone.
    let r = who(&gw, &[]).await;
    assert!((2000..=3000).contains(&ms(&r)));
    let started = Instant::now();
    let r = who(
        &gw,
        &[("grpc-timeout", "100S"), ("x-mock-grpc-delay-ms", "6000")],
    )
    .await;
    assert_trailers_only(&r, 4);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_secs(5),
        "{took:?}"
    );

    let gw = Gateway::start(&config(&[("node-a", a.grpc_addr())], "")).await;
    for bad in ["1x", "123456789m"] {
        let r = who(&gw, &[("grpc-timeout", bad)]).await;
        assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"), "{bad}");
        assert_eq!(r.header("x-mock-grpc-timeout").as_deref(), Some(bad));
    }
}

/// CASE-30 g: RST_STREAM(REFUSED_STREAM) from node-a before any headers is retried on node-b
/// (a POST: nothing was processed), so every call succeeds; when every node refuses, the call
/// ends with 14 after one attempt on each.
#[tokio::test]
async fn refused_stream_is_retried_on_another_node() {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let b = Mock::start_with("node-b", &["--grpc"]).await;
    let nodes = [("node-a", a.grpc_addr()), ("node-b", b.grpc_addr())];
    let gw = Gateway::start(&config(&nodes, "")).await;
    // Each call's h2 connection gets its own issued id, placed by rendezvous hashing (SPEC 7):
    // call until node-a has refused at least one first attempt (4 calls at least, 32 at most).
    let mut calls = 0u64;
    while calls < 4 || a.requests().await == 0 {
        assert!(
            calls < 32,
            "no first attempt reached node-a in {calls} calls"
        );
        let r = who(&gw, &[("x-mock-grpc-refuse", "node-a")]).await;
        let status = r.trailer("grpc-status");
        assert_eq!(status.as_deref(), Some("0"), "call {calls}: {r:?}");
        let who: Vec<proto::WhoReply> = grpc_messages(&r.body);
        assert_eq!(who[0].node, "node-b", "call {calls}");
        calls += 1;
    }
    assert_eq!(
        b.requests().await,
        calls,
        "node-b served every call exactly once (directly, or as the retry of node-a's refusal)"
    );
    a.reset_stats().await;
    b.reset_stats().await;
    let r = who(&gw, &[("x-mock-grpc-refuse", "1")]).await;
    assert_trailers_only(&r, 14);
    assert_eq!(
        a.requests().await + b.requests().await,
        2,
        "one attempt on each node"
    );
    assert_eq!(gw.node("node-a").await["state"], "healthy");
}

/// CASE-30 f: node-a sends its head and two messages, then drops the connection: the client gets
/// both messages and then trailers `grpc-status: 14`, not a stream reset. CASE-31 b: a stream that
/// keeps moving outlives the route timeout (1 s) untouched.
#[tokio::test]
async fn broken_stream_ends_with_unavailable_and_route_timeout_spares_moving_streams() {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let gw = Gateway::start(&config(&[("node-a", a.grpc_addr())], "timeout = \"1s\"")).await;
    let mut c = h2c::connect(&format!("127.0.0.1:{}", gw.port)).await;
    let body = encode_frame(&proto::TicksRequest { count: 0 });
    let req = c.request(
        "POST",
        TICKS_PATH,
        &grpc_headers(&[("x-mock-grpc-break-after", "2")]),
        body.clone(),
    );
    let mut s = Stream::new(c.send(req).await.expect("head"));
    assert_eq!(s.status, 200);
    for seq in 1..=2 {
        let (t, _): (proto::Tick, _) = s.next_message().await.expect("stream ok").expect("tick");
        assert_eq!(t.seq, seq);
    }
    let end = s.next_message::<proto::Tick>().await;
    assert!(
        matches!(end, Ok(None)),
        "ends cleanly with trailers, got {end:?}"
    );
    assert_eq!(s.trailer("grpc-status").as_deref(), Some("14"));

    // b: 25 ticks at 100 ms = 2.5 s, past the 1 s route timeout.
    let body = encode_frame(&proto::TicksRequest { count: 25 });
    let req = c.request("POST", TICKS_PATH, &grpc_headers(&[]), body);
    let r = tokio::time::timeout(Duration::from_secs(10), c.fetch(req))
        .await
        .expect("in time")
        .expect("stream");
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"));
    assert_eq!(grpc_messages::<proto::Tick>(&r.body).len(), 25);
}
