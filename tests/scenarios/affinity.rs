//! Conn ids and affinity (SPEC section 7): an id pins one node while plain requests spread; ids
//! are validated (length, characters) with a JSON 400; signed ids (`[affinity] ids = "signed"`)
//! are issued on upgrade, forged ones refused without touching any binding, and rotated keys
//! accepted only while listed.

use std::collections::HashMap;
use std::time::Duration;

use integration_tests::check::{json_error, node_of, non_probe_paths, ws_text, Ws, HDR};
use integration_tests::raw::{exchange, refused};
use integration_tests::{get, Config, Gateway, Health, Mock, Route};
use tokio::time::timeout;

/// Asserts `gw` answers a request carrying conn id `id` with 400 and the signature error, and
/// holds no binding for it (`/admin/conns/{id}` is 404); `what` names the case in messages.
async fn assert_refused(gw: &Gateway, id: &str, what: &str) {
    let r = get(&gw.url("/echo/s"), &[(HDR, id)]).await.expect("get");
    assert_eq!(r.status, 400, "{what}");
    assert_eq!(
        json_error(&r.body),
        "invalid x-conn-id header: conn id signature does not verify"
    );
    let r = get(&gw.admin(&format!("/admin/conns/{id}")), &[])
        .await
        .expect("admin");
    assert_eq!(r.status, 404, "{what}: {}", r.text());
}

/// One conn id stays on one node for 50 requests; 200 plain requests spread over both nodes and
/// leave the binding alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conn_id_pins_one_node_and_plain_requests_spread() {
    let (a, b, gw) = Gateway::two_nodes(Health::http_fast()).await;

    let mut seen: HashMap<String, u32> = HashMap::new();
    for _ in 0..50 {
        let r = get(&gw.url("/data"), &[(HDR, "sticky-1")])
            .await
            .expect("get");
        assert_eq!(r.status, 200, "{}", r.text());
        let node = node_of(&r);
        assert_eq!(
            r.text(),
            format!(
                "Data from Node {node} (Port {})",
                if node == "node-a" { a.port } else { b.port }
            )
        );
        *seen.entry(node).or_default() += 1;
    }
    assert_eq!(seen.len(), 1, "one conn id must stay on one node: {seen:?}");
    let bound = seen.keys().next().expect("one").clone();
    assert_eq!(
        gw.admin_json("/admin/conns/sticky-1").await["node"],
        bound.as_str()
    );

    let mut spread: HashMap<String, u32> = HashMap::new();
    for _ in 0..200 {
        let r = get(&gw.url("/data"), &[]).await.expect("get");
        assert_eq!(r.status, 200);
        *spread.entry(node_of(&r)).or_default() += 1;
    }
    for id in ["node-a", "node-b"] {
        let n = spread.get(id).copied().unwrap_or(0);
        assert!(
            n >= 60,
            "{id} got {n} of 200 plain requests (want >= 30 %): {spread:?}"
        );
    }
    // Plain requests are balanced, not bound: the id's binding is untouched.
    assert_eq!(
        gw.admin_json("/admin/conns/sticky-1").await["node"],
        bound.as_str()
    );
}

/// A 128-byte conn id passes; a longer one, or one with characters outside visible ASCII, is a JSON
/// 400 that reaches no node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_conn_ids_get_400_json_and_128_bytes_pass() {
    let (a, gw) = Gateway::one_node(Health::http_fast()).await;

    let ok = "k".repeat(128);
    let r = get(&gw.url("/data"), &[(HDR, &ok)]).await.expect("get");
    assert_eq!((r.status, node_of(&r)), (200, "node-a".to_string()));

    let long = "k".repeat(129);
    let r = get(&gw.url("/data"), &[(HDR, &long)]).await.expect("get");
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json(),
        serde_json::json!({"code": -1, "message": "invalid x-conn-id header: conn id longer than 128 bytes"})
    );
    assert_eq!(r.header("x-node-id"), None, "a bad id never reaches a node");

    for (what, id) in [
        ("tab", "ab\tcd"),
        ("space", "ab cd"),
        ("obs-text", "ab\u{e9}cd"),
    ] {
        let req =
            format!("GET /data HTTP/1.1\r\nHost: t\r\n{HDR}: {id}\r\nConnection: close\r\n\r\n");
        let (r, body) = exchange(gw.port, req.as_bytes()).await;
        assert_eq!(r.status, 400, "{what}");
        assert!(
            r.headers
                .iter()
                .any(|(k, v)| k == "content-type" && v == "application/json"),
            "{what}: {:?}",
            r.headers
        );
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&body).expect("JSON"),
            serde_json::json!({"code": -1, "message": "invalid x-conn-id header: conn id has characters outside visible ASCII"}),
            "{what}"
        );
    }
    // Control characters never get past the HTTP/1.1 parser (RFC 9110 section 5.5): a plain 400
    // from the parser, the connection closed, nothing forwarded.
    for (what, id) in [("DEL", "ab\x7fcd"), ("SOH", "ab\x01cd")] {
        let req = format!("GET /data HTTP/1.1\r\nHost: t\r\n{HDR}: {id}\r\n\r\n");
        let (r, _) = exchange(gw.port, req.as_bytes()).await;
        assert_eq!(r.status, 400, "{what}");
    }
    assert_eq!(
        non_probe_paths(&a).await,
        ["/data"],
        "only the 128-byte id reached the node"
    );
}

/// Signed ids: an upgrade without one is issued a signed id that then pins its node; forged,
/// truncated, re-tagged and unsigned ids get a JSON 400 and touch no binding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_ids_are_issued_on_upgrade_and_forged_ones_get_400_touching_no_binding() {
    let a = Mock::start("node-a").await;
    let b = Mock::start("node-b").await;
    let toml = Config::single(Health::tcp_fast(), &[&a, &b], Route::api())
        .table("affinity", "ids = \"signed\"")
        .toml();
    let gw = Gateway::start_with_env(&toml, &[], &[("HOPGW_SECRET", "case-signed-key-1")]).await;

    // An upgrade without an id gets a signed one, sent to the node and back to the client.
    let (mut ws, id) = upgrade_without_id(&gw).await;
    let (uuid, tag) = id.rsplit_once('.').expect("<uuid>.<tag>");
    assert_eq!(uuid.len(), 36, "{id}");
    assert!(
        tag.len() == 64 && tag.bytes().all(|c| c.is_ascii_hexdigit()),
        "{id}"
    );
    assert!(id.len() <= 128);
    let hello: serde_json::Value =
        serde_json::from_str(&ws_text(&mut ws, Duration::from_secs(3)).await).expect("hello JSON");
    assert_eq!(hello["conn_id"], id.as_str());
    let node = hello["node"].as_str().expect("node").to_string();
    ws.close(None).await.expect("close");

    // The issued id is accepted on plain requests and pins the node.
    for _ in 0..3 {
        let r = get(&gw.url("/echo/s"), &[(HDR, &id)]).await.expect("get");
        assert_eq!((r.status, node_of(&r)), (200, node.clone()));
    }
    assert_eq!(
        gw.admin_json(&format!("/admin/conns/{id}")).await["node"],
        node.as_str()
    );
    // A plain request without an id is served and gets no id.
    let r = get(&gw.url("/echo/s"), &[]).await.expect("get");
    assert_eq!((r.status, r.header("x-conn-id")), (200, None));

    // Forged, truncated, re-tagged and unsigned ids: 400 JSON, and no binding is made or moved.
    let forged = [
        format!("{uuid}.{}", "0".repeat(64)),
        id[..id.len() - 2].to_string(),
        format!("{}.{tag}", "0b1f9a3e-6d2c-4f7a-9e41-3c5d8b7a2f10"),
        "c-1001".to_string(),
    ];
    a.reset_stats().await;
    b.reset_stats().await;
    for f in &forged {
        assert_refused(&gw, f, f).await;
    }
    // A forged id on an upgrade: 400, never 101.
    let (h, body) = refused(gw.port, format!("GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nX-Conn-Id: {}\r\n\r\n", forged[0]).as_bytes()).await;
    assert_eq!(h.status, 400);
    json_error(&body);
    assert_eq!(
        (a.requests().await, b.requests().await),
        (0, 0),
        "nothing forwarded"
    );
    assert_eq!(
        gw.admin_json(&format!("/admin/conns/{id}")).await["node"],
        node.as_str()
    );
}

/// A WebSocket upgrade without a conn id: the open socket and the id the gateway issued for it.
async fn upgrade_without_id(gw: &Gateway) -> (Ws, String) {
    let (ws, resp) = timeout(
        Duration::from_secs(5),
        tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{}/ws", gw.port)),
    )
    .await
    .expect("in time")
    .expect("101");
    let id = resp
        .headers()
        .get("x-conn-id")
        .and_then(|v| v.to_str().ok())
        .expect("issued id")
        .to_string();
    (ws, id)
}

/// The conn id the gateway issues to a WebSocket upgrade without one.
async fn issued_id(gw: &Gateway) -> String {
    let (mut ws, id) = upgrade_without_id(gw).await;
    ws.close(None).await.expect("close");
    id
}

/// Key rotation (`affinity.old_secrets_env`): an id signed with the previous key is accepted while
/// that key is listed in `HOPGW_OLD_SECRETS` and binds as usual; once the key is dropped the same
/// id
/// is forged (400 JSON, no binding made). New ids are always signed with the current key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_ids_from_a_rotated_key_pass_only_while_the_key_is_listed() {
    let a = Mock::start("node-a").await;
    let toml = Config::single(Health::tcp_fast(), &[&a], Route::api())
        .table("affinity", "ids = \"signed\"")
        .toml();
    let gw = Gateway::start_with_env(&toml, &[], &[("HOPGW_SECRET", "rotate-key-1")]).await;
    let old = issued_id(&gw).await;
    drop(gw);

    let gw = Gateway::start_with_env(
        &toml,
        &[],
        &[
            ("HOPGW_SECRET", "rotate-key-2"),
            ("HOPGW_OLD_SECRETS", "rotate-key-0, rotate-key-1"),
        ],
    )
    .await;
    let r = get(&gw.url("/echo/s"), &[(HDR, &old)]).await.expect("get");
    assert_eq!((r.status, node_of(&r)), (200, "node-a".to_string()));
    assert_eq!(
        gw.admin_json(&format!("/admin/conns/{old}")).await["node"],
        "node-a"
    );
    let new = issued_id(&gw).await;
    assert_ne!(new, old);
    drop(gw);

    // Only the current key: the old id no longer verifies; the new one does.
    let gw = Gateway::start_with_env(&toml, &[], &[("HOPGW_SECRET", "rotate-key-2")]).await;
    a.reset_stats().await;
    assert_refused(&gw, &old, "old id; no binding for a refused id").await;
    assert_eq!(a.requests().await, 0, "nothing forwarded");
    let r = get(&gw.url("/echo/s"), &[(HDR, &new)]).await.expect("get");
    assert_eq!((r.status, node_of(&r)), (200, "node-a".to_string()));
}
