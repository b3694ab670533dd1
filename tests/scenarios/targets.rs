//! Which request-targets the gateway takes and how it routes them (RFC 9112 section 3.2, README
//! "Routing", SPEC section 6): only origin-form, absolute-form and `OPTIONS *` pass, and a path is
//! routed by what the node will resolve, never letting a node read another route's path.

use std::time::Duration;

use integration_tests::check::json_error;
use integration_tests::raw::{refused, Raw};
use integration_tests::{Config, Gateway, Health, Mock, Route};

/// RFC 9112 section 3.2: request-targets that are not origin-form,
/// absolute-form, or `*` with OPTIONS are 400 JSON and reach no node; the allowed forms pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_targets_outside_the_three_forms_are_400() {
    let a = Mock::start("node-a").await;
    let gw = Gateway::start(&Config::single(Health::tcp_200ms(), &[&a], Route::api()).toml()).await;
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
        let h = c
            .head(Duration::from_secs(5))
            .await
            .expect("a response head");
        assert_eq!(h.status, 400, "{line}");
        if !line.starts_with("HEAD") {
            let body = c.body(&h).await;
            assert_eq!(json_error(&body), message, "{line}");
        }
        assert!(
            c.closed_within(Duration::from_secs(2)).await,
            "{line}: connection left open"
        );
    }
    assert_eq!(a.requests().await, 0, "no refused form reached the node");
    // The allowed forms: origin-form and absolute-form are forwarded; OPTIONS * is not refused.
    let mut c = Raw::connect(gw.port).await;
    c.send(b"GET http://app.example.test/echo/abs HTTP/1.1\r\nHost: app.example.test\r\n\r\nGET /echo/origin HTTP/1.1\r\nHost: app.example.test\r\n\r\nOPTIONS * HTTP/1.1\r\nHost: app.example.test\r\n\r\n").await;
    for path in ["/echo/abs", "/echo/origin"] {
        let (h, body) = c.response(Duration::from_secs(5)).await;
        assert_eq!(h.status, 200);
        let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo");
        assert_eq!(echo["path"], path);
    }
    let h = c
        .head(Duration::from_secs(5))
        .await
        .expect("a response head");
    assert_ne!(h.status, 400, "OPTIONS * is a valid target");
}

/// `..`, `%2e%2e`, `%2F`, `//` and `\`: a request is routed by the path the node will resolve. Dot
/// segments are removed before matching and the node receives the path that was matched; a path
/// whose encoded slashes or empty segments a node could read as another route's path is refused
/// with 400, nothing forwarded. Route `admin` (`/echo/admin`) goes to node-b, the rest to node-a.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_normalisation_never_lets_a_node_resolve_another_routes_path() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let toml = Config::new()
        .health(Health::tcp_fast())
        .cluster("c", &[&a])
        .cluster("adm", &[&b])
        .route(Route::prefix("admin", "/echo/admin", "adm"))
        .route(Route::api())
        .toml();
    let gw = Gateway::start(&toml).await;
    // (raw target, node, path the node receives)
    let routed = [
        ("/echo/api/../admin/x", "node-b", "/echo/admin/x"),
        ("/echo/api/%2e%2e/admin/x", "node-b", "/echo/admin/x"),
        ("/echo/api/%2E%2E/%2e/admin/x", "node-b", "/echo/admin/x"),
        ("/../../echo/admin/x", "node-b", "/echo/admin/x"),
        ("/echo/admin/../api/x", "node-a", "/echo/api/x"),
        ("/echo/admin/%2e%2e/api/x", "node-a", "/echo/api/x"),
        // Encoded slashes and `//` that every reading routes the same way pass untouched.
        ("/echo/api/a%2Fb", "node-a", "/echo/api/a%2Fb"),
        ("/echo/api//x", "node-a", "/echo/api//x"),
        ("/echo/admin%2Fx", "node-b", "/echo/admin%2Fx"),
    ];
    for (target, node, path) in routed {
        let mut c = Raw::connect(gw.port).await;
        c.send(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await;
        let (h, body) = c.response(Duration::from_secs(5)).await;
        assert_eq!(
            h.status,
            200,
            "{target}: {}",
            String::from_utf8_lossy(&body)
        );
        let echo: serde_json::Value = serde_json::from_slice(&body).expect("echo");
        assert_eq!(
            (echo["node"].as_str(), echo["path"].as_str()),
            (Some(node), Some(path)),
            "{target}"
        );
    }
    a.reset_stats().await;
    b.reset_stats().await;
    // A node decoding `%2F` or merging `//` would resolve these under /echo/admin, which the
    // gateway would have sent to node-b: refused, so neither node ever sees them.
    for target in [
        "/echo/api%2F..%2Fadmin/x",
        "/echo/api%2f%2e%2e%2fadmin/x",
        "/echo/api/..%2Fadmin/x",
        "/echo/api%5C..%5Cadmin/x",
        "/echo//admin/x",
        "//echo/admin/x",
    ] {
        let (h, body) = refused(
            gw.port,
            format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(h.status, 400, "{target}");
        assert_eq!(
            json_error(&body),
            "bad request: path with encoded slashes or empty segments that a node could resolve to another route",
            "{target}"
        );
    }
    // A raw backslash is not a valid target character: 400 (hyper's parser), nothing forwarded.
    let (h, _) = refused(
        gw.port,
        b"GET /echo/api\\..\\admin/x HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await;
    assert_eq!(h.status, 400);
    assert_eq!(
        (a.requests().await, b.requests().await),
        (0, 0),
        "nothing forwarded"
    );
}
