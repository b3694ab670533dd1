//! HTTP/2 and gRPC headers passed through: `:authority` and `host` (CASE-12), trailers-only answers
//! (CASE-07) and `te: trailers` (CASE-08).

use super::*;

/// Asserts that gRPC response `body` holds exactly one `WhoReply` naming `node`.
fn assert_who_reply(body: &[u8], node: &str) {
    let replies: Vec<proto::WhoReply> = grpc_messages(body);
    assert_eq!(replies, [proto::WhoReply { node: node.into() }]);
}

/// `GET http://app.example.test/echo` (`:authority` app.example.test) with a `host` header `host`.
fn echo_with_host(host: &str) -> http::Request<http_body_util::Full<Bytes>> {
    http::Request::builder()
        .method("GET")
        .uri("http://app.example.test/echo")
        .header("host", host)
        .body(http_body_util::Full::new(Bytes::new()))
        .expect("req")
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
    let req = echo_with_host("APP.example.test");
    assert_eq!(c.fetch(req).await.expect("same host").status, 200);

    // :authority and a conflicting host: 400, nothing forwarded.
    let before = a.requests().await;
    let req = echo_with_host("evil.example.test");
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
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
#[tokio::test]
async fn grpc_trailers_only_answers_reach_the_client_unchanged() {
    let (_a, gw, mut c) = grpc_node(FAST_HEALTH, "").await;
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
    assert_who_reply(&r.body, "node-a");
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
        cluster_toml("g", &[("node-a-grpc", a.grpc_addr())], "protocol = \"h2c\""),
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
    assert_who_reply(&r.body, "node-a");
}
