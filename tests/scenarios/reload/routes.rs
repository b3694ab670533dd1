//! Route matching in a reloaded table (SPEC section 6): predicates and `strip_prefix` pick the most
//! specific route.

use super::*;

/// (method, path, headers, node expected, path the node saw).
type RouteCase<'a> = (&'a str, &'a str, Vec<(&'a str, &'a str)>, &'a str, &'a str);

/// Method, path, header and query predicates plus `strip_prefix` pick the most specific route and rewrite the path the node sees.
/// Longer than ~80 lines on purpose: one scenario whose steps share state and depend on their order.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn route_predicates_and_strip_prefix_pick_the_most_specific_route() {
    let ids = [
        "node-exact",
        "node-host",
        "node-hdr",
        "node-post",
        "node-api",
    ];
    let mut mocks = Vec::new();
    let mut toml = FAST_HEALTH.to_string();
    for id in ids {
        let m = Mock::start(id).await;
        toml.push_str(&cluster(id, &[(id, &m.addr(), "")], ""));
        mocks.push(m);
    }
    // In file order least specific first, so the order can't be what decides.
    toml.push_str(
        r#"
[[routes]]
id = "api"
match = { path_prefix = "/api" }
cluster = "node-api"
strip_prefix = "/api"

[[routes]]
id = "post"
match = { path_prefix = "/api", methods = ["POST"] }
cluster = "node-post"
strip_prefix = "/api"

[[routes]]
id = "hdr"
match = { path_prefix = "/api", headers = { x-canary = "1" } }
cluster = "node-hdr"
strip_prefix = "/api"

[[routes]]
id = "host"
match = { path_prefix = "/api", host = "app.example.test" }
cluster = "node-host"
strip_prefix = "/api"

[[routes]]
id = "exact"
match = { path = "/api/echo/ping" }
cluster = "node-exact"
strip_prefix = "/api"
"#,
    );
    let gw = Gateway::start(&toml).await;
    let host = ("host", "app.example.test");
    let cases: [RouteCase<'_>; 8] = [
        ("GET", "/api/echo/x", vec![], "node-api", "/echo/x"),
        ("POST", "/api/echo/x", vec![], "node-post", "/echo/x"),
        (
            "GET",
            "/api/echo/x",
            vec![("x-canary", "1")],
            "node-hdr",
            "/echo/x",
        ),
        (
            "GET",
            "/api/echo/x",
            vec![("x-canary", "2")],
            "node-api",
            "/echo/x",
        ),
        ("GET", "/api/echo/x", vec![host], "node-host", "/echo/x"),
        // host beats headers, headers beat methods (README "Routing").
        (
            "POST",
            "/api/echo/x",
            vec![host, ("x-canary", "1")],
            "node-host",
            "/echo/x",
        ),
        (
            "POST",
            "/api/echo/x",
            vec![("x-canary", "1")],
            "node-hdr",
            "/echo/x",
        ),
        // The exact path beats every prefix route, whatever else the request carries.
        (
            "POST",
            "/api/echo/ping",
            vec![host, ("x-canary", "1")],
            "node-exact",
            "/echo/ping",
        ),
    ];
    for (method, path, headers, node, seen) in &cases {
        let r = request(method, &gw.url(path), headers, Vec::new())
            .await
            .expect("request");
        assert_eq!(r.status, 200, "{method} {path} {headers:?}: {}", r.text());
        assert_eq!(
            (r.header("x-node-id").as_deref(), r.json()["path"].as_str()),
            (Some(*node), Some(*seen)),
            "{method} {path} {headers:?}"
        );
    }
    // An exact path matches only itself; nothing matches outside /api: 404 JSON.
    let r = get(&gw.url("/api/echo/ping/more"), &[])
        .await
        .expect("request");
    assert_eq!(r.header("x-node-id").as_deref(), Some("node-api"));
    let r = get(&gw.url("/other"), &[]).await.expect("request");
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["code"], -1);
}
