//! What the gateway forwards of a request's fields (SPEC section 4, RFC 9110 section 7.6.1):
//! hop-by-hop fields and those nominated in `Connection` are removed (and consumed ones still
//! used), an h2c upgrade is never forwarded, `X-Forwarded-*` lines are joined or replaced by
//! `trusted_proxies`, and Host passes once (two Host lines are a 400).

use std::time::Duration;

use integration_tests::check::{echo_header, json_error};
use integration_tests::raw::{exchange, refused, Raw};
use integration_tests::{get, Cluster, Config, Gateway, Health, Mock, Route};

/// Starts a gateway over mock `a` (TCP health, route `api`) whose `server.trusted_proxies` is
/// the one range `cidr` (SPEC section 4).
async fn trusting(a: &Mock, cidr: &str) -> Gateway {
    Gateway::start(
        &Config::single(Health::tcp_fast(), &[a], Route::api())
            .table("server", &format!("trusted_proxies = [\"{cidr}\"]"))
            .toml(),
    )
    .await
}

/// `GET /echo/ip` through `gw` with `headers`; returns the node's echo of the request.
async fn echo_ip(gw: &Gateway, headers: &[(&str, &str)]) -> serde_json::Value {
    get(&gw.url("/echo/ip"), headers).await.expect("get").json()
}

/// Asserts what the node received (its echo, read by [`echo_header`]): `want` is `field=value`
/// items joined by `"; "`, each field with exactly that one value, or with none at all when the
/// value is empty.
fn assert_fields(echo: &serde_json::Value, want: &str) {
    for item in want.split("; ") {
        let (name, value) = item.split_once('=').expect("field=value");
        let values: &[&str] = if value.is_empty() { &[] } else { &[value] };
        assert_eq!(echo_header(echo, name), values, "{name}");
    }
}

/// CASE-10/CASE-11 (SPEC 4): hop-by-hop headers, and every header named in `Connection`, are
/// removed; `X-Forwarded-*` set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_headers_are_stripped_and_forwarded_headers_set() {
    let (_a, gw) = Gateway::one_node(Health::http_fast()).await;
    let req = "GET /echo?q=1 HTTP/1.1\r\n\
               Host: app.example.test\r\n\
               Connection: keep-alive, X-Custom-Hop\r\n\
               Keep-Alive: timeout=5\r\n\
               TE: trailers, deflate\r\n\
               Upgrade: h2c\r\n\
               Proxy-Authorization: Basic Zm9vOmJhcg==\r\n\
               Proxy-Connection: keep-alive\r\n\
               X-Custom-Hop: secret\r\n\
               X-Forwarded-For: 1.2.3.4\r\n\
               X-Keep: yes\r\n\
               \r\n";
    let (h, body) = exchange(gw.port, req.as_bytes()).await;
    assert_eq!(h.status, 200, "{:?}", String::from_utf8_lossy(&body));
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo JSON");
    for gone in [
        "connection",
        "keep-alive",
        "upgrade",
        "proxy-authorization",
        "proxy-connection",
        "x-custom-hop",
        "transfer-encoding",
    ] {
        assert_eq!(
            echo_header(&echo, gone),
            Vec::<String>::new(),
            "{gone} must not reach the node"
        );
    }
    assert_fields(
        &echo,
        "te=trailers; x-forwarded-for=1.2.3.4, 127.0.0.1; \
         x-forwarded-proto=http; x-forwarded-host=app.example.test; \
         host=app.example.test; x-keep=yes",
    );
    assert_eq!(
        (
            echo["method"].as_str(),
            echo["path"].as_str(),
            echo["query"].as_str()
        ),
        (Some("GET"), Some("/echo"), Some("q=1"))
    );

    // Without a prior X-Forwarded-For, the peer alone; TE without trailers is dropped.
    let req =
        "GET /echo HTTP/1.1\r\nHost: other.test:8080\r\nTE: gzip\r\nConnection: close\r\n\r\n";
    let (_, body) = exchange(gw.port, req.as_bytes()).await;
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo JSON");
    assert_fields(
        &echo,
        "x-forwarded-for=127.0.0.1; te=; connection=; host=other.test:8080; \
         x-forwarded-host=other.test:8080",
    );
}

/// CASE-10: an h2c upgrade is never forwarded: stripped, answered as plain HTTP/1.1, connection
/// closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case10_h2c_upgrade_is_stripped_and_answered_as_plain_http11() {
    let (_a, gw) = Gateway::one_node(Health::tcp_fast()).await;
    let mut c = Raw::connect(gw.port).await;
    let upgrade: &[u8] = b"GET /echo/h2c HTTP/1.1\r\nHost: h2c.test\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n";
    c.send(upgrade).await;
    let (h, body) = c.response(Duration::from_secs(5)).await;
    assert_eq!(
        (h.version.as_str(), h.status),
        ("HTTP/1.1", 200),
        "never 101: {h:?}"
    );
    assert_eq!(h.get("upgrade"), None);
    // An upgrade the gateway did not perform ends the connection (the framing watch stopped at it).
    assert_eq!(h.get("connection"), Some("close"));
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo JSON");
    assert_eq!(echo["version"], "HTTP/1.1");
    assert_eq!(echo["method"], "GET");
    for name in ["upgrade", "http2-settings", "connection"] {
        assert_eq!(
            echo_header(&echo, name),
            Vec::<String>::new(),
            "node received {name}: {echo}"
        );
    }
    assert_eq!(echo_header(&echo, "host"), ["h2c.test"]);
    assert!(c.closed_within(Duration::from_secs(2)).await);
}

/// CASE-11: X-Forwarded-For lines are joined without trusted proxies, replaced for an untrusted
/// peer, kept for a trusted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case11_forwarded_for_lines_are_joined_or_replaced_by_trust() {
    let a = Mock::start("node-a").await;
    let incoming = [
        ("host", "app.test"),
        ("x-forwarded-for", "10.0.0.1"),
        ("x-forwarded-for", "127.0.0.1"),
        ("forwarded", "for=192.0.2.1"),
        ("x-real-ip", "10.0.0.2"),
        ("x-forwarded-proto", "https"),
    ];
    // No trusted_proxies: append (Go-compatible), one line.
    let gw = Gateway::start(&Config::single(Health::tcp_fast(), &[&a], Route::api()).toml()).await;
    let echo = echo_ip(&gw, &incoming).await;
    assert_fields(
        &echo,
        "x-forwarded-for=10.0.0.1, 127.0.0.1, 127.0.0.1; \
         x-forwarded-proto=http; x-forwarded-host=app.test; \
         forwarded=for=192.0.2.1",
    );
    drop(gw);

    // Peer outside trusted_proxies: dropped and replaced.
    let gw = trusting(&a, "10.0.0.0/8").await;
    let echo = echo_ip(&gw, &incoming).await;
    assert_fields(
        &echo,
        "x-forwarded-for=127.0.0.1; forwarded=; x-real-ip=; \
         x-forwarded-proto=http; x-forwarded-host=app.test",
    );
    drop(gw);

    // Peer inside: kept, the peer appended.
    let gw = trusting(&a, "127.0.0.0/8").await;
    let echo = echo_ip(
        &gw,
        &[("host", "app.test"), ("x-forwarded-for", "203.0.113.7")],
    )
    .await;
    assert_eq!(
        echo_header(&echo, "x-forwarded-for"),
        ["203.0.113.7, 127.0.0.1"]
    );
}

/// CASE-12 (HTTP/1.1): Host passes through once; two Host lines are a JSON 400, nothing forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn case12_host_passes_through_once_and_two_hosts_are_400() {
    let (a, gw) = Gateway::one_node(Health::tcp_fast()).await;
    let r = get(&gw.url("/echo/index.html"), &[("host", "app.example.test")])
        .await
        .expect("get");
    assert_eq!(r.status, 200);
    let echo = r.json();
    assert_eq!(echo["path"], "/echo/index.html");
    assert_eq!(echo_header(&echo, "host"), ["app.example.test"]);
    assert_eq!(echo_header(&echo, "x-forwarded-host"), ["app.example.test"]);
    a.reset_stats().await;
    // Two Host lines: RFC 9112 section 3.2 says 400; nothing forwarded.
    let (h, body) = refused(
        gw.port,
        b"GET /echo/x HTTP/1.1\r\nHost: app.example.test\r\nHost: evil.test\r\n\r\n",
    )
    .await;
    assert_eq!(h.status, 400);
    json_error(&body);
    assert_eq!(a.requests().await, 0);
}

/// RFC 9110 section 7.6.1: the affinity and canary headers nominated in
/// `Connection` are used (binding, version) and not forwarded to the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_nominated_consumed_fields_are_used_not_forwarded() {
    let a = Mock::start_with("node-a", &["--version", "v1"]).await;
    let b = Mock::start_with("node-b", &["--version", "v2"]).await;
    let toml = Config::new()
        .health(Health::tcp_200ms())
        .with_cluster(
            Cluster::new("c")
                .node_with("node-a", &a.addr(), "metadata = { version = \"v1\" }")
                .node_with("node-b", &b.addr(), "metadata = { version = \"v2\" }"),
        )
        .route(Route::api().line("  [routes.canary]\n  version_header = \"x-version\""))
        .toml();
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
