//! What the recording nodes of the scenarios answer ([`Reply`] policies), the requests clients
//! hide in payload, and the gateways put in front of recording nodes.

use super::{Recorder, Reply, Req};
use crate::{get, Config, Gateway, Health, Route};

/// A request the client hides in payload (a DATA frame, octets after a head): a node must never
/// receive it, nor its [`MARKER`].
pub const SMUGGLED: &[u8] =
    b"GET /smuggled HTTP/1.1\r\nHost: app.example.test\r\nX-Smuggled: r3\r\n\r\n";
/// The field that marks smuggled octets.
pub const MARKER: &[u8] = b"X-Smuggled: r3";

/// A client's WebSocket handshake for `GET /ws` (RFC 6455 section 1.2's key) with `X-Case: case`
/// telling the node how to answer.
pub fn handshake(case: &str) -> Vec<u8> {
    format!(
        "GET /ws HTTP/1.1\r\nHost: app.example.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nX-Case: {case}\r\n\r\n"
    )
    .into_bytes()
}

/// The `200` answer of a node that reads bodies per their framing: `{"path":..,"body_len":..}`.
pub fn path_and_length(r: &Req) -> Reply {
    Reply::ok(&serde_json::json!({ "path": r.path(), "body_len": r.body.len() }).to_string())
}

/// A node that refuses every upgrade with `426` (no body) and answers other requests as
/// [`path_and_length`].
pub fn refuses_upgrades(r: &Req) -> Reply {
    if r.head.to_ascii_lowercase().contains("\r\nupgrade:") {
        Reply::now("HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\n\r\n")
    } else {
        path_and_length(r)
    }
}

/// Asserts that `GET path` on a new connection to `gw` gets a [`path_and_length`] node's own answer.
pub async fn own_answer(gw: &Gateway, path: &str) {
    let r = get(&gw.url(path), &[]).await.expect("GET");
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    let v = r.json();
    assert_eq!(
        (v["path"].as_str(), v["body_len"].as_u64()),
        (Some(path), Some(0)),
        "{v}"
    );
}

/// node-a answering with `policy` as the only node of cluster `c` behind a gateway with one
/// catch-all route and TCP probes.
pub async fn single(policy: impl Fn(&Req) -> Reply + Send + Sync + 'static) -> (Recorder, Gateway) {
    let a = Recorder::start(policy).await;
    let config = Config::single_addrs(
        Health::tcp_fast(),
        &[("node-a", a.addr.clone())],
        Route::api(),
    );
    let gw = Gateway::start(&config.toml()).await;
    (a, gw)
}

/// node-a answering with `policy` and node-b as [`path_and_length`] behind a gateway with routes
/// `/admin` → cluster `b` {node-b} and `/` → cluster `a` {node-a} (CASE-37, CASE-41: a smuggled
/// `/admin/secret` would skip the `/admin` route), TCP probes.
pub async fn admin_and_rest(
    policy: impl Fn(&Req) -> Reply + Send + Sync + 'static,
) -> (Recorder, Recorder, Gateway) {
    let (a, b) = (
        Recorder::start(policy).await,
        Recorder::start(path_and_length).await,
    );
    let config = Config::new()
        .health(Health::tcp_fast())
        .cluster_addrs("a", &[("node-a", a.addr.clone())])
        .cluster_addrs("b", &[("node-b", b.addr.clone())])
        .route(Route::prefix("admin", "/admin", "b"))
        .route(Route::catch_all("rest", "a"));
    let gw = Gateway::start(&config.toml()).await;
    (a, b, gw)
}
