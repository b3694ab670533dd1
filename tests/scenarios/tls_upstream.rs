//! Upstream TLS (SPEC section 10 "Upstream TLS", section 3 `clusters[].tls`,
//! `protocol = "h2"`): TLS mock nodes with certificates made by the test (rcgen), gRPC over an h2
//! cluster, HTTP/1.1, WebSocket dials and re-dials, probes, mTLS, and verification failures that
//! are connect failures (retried on a good node; named in the 502 when no node is left).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use integration_tests::check::kill_one_of;
use integration_tests::tls::{https_request, Ca, Leaf};
use integration_tests::{get, Gateway, Mock, FAST_HEALTH};
use integration_tests::{Cluster, Config, Route};
use mock_backend::grpc::proto::{Tick, TicksRequest, WhoReply, WhoRequest};
use mock_backend::grpc::{TICKS_PATH, WHO_PATH};
use serde_json::{json, Value};
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::Message;

/// Starts mock `id` serving `leaf` over TLS, with `extra` flags (`--grpc`, `--tls-client-ca F`).
async fn tls_mock(id: &str, leaf: &Leaf, extra: &[&str]) -> Mock {
    let mut args = leaf.mock_args();
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Mock::start_with(id, &refs).await
}

/// `tls = { .. }` trusting `ca`, with extra keys (e.g. `client_cert = ".."`).
fn tls_line(ca: &Ca, extra: &str) -> String {
    format!("tls = {{ ca = \"{}\"{extra} }}", ca.cert.display())
}

/// A gateway config: `health` block, one cluster `c` of `nodes` with `cluster_extra` lines, one
/// catch-all route with `route_extra` lines.
fn config(
    health: &str,
    nodes: &[(&str, String)],
    cluster_extra: &str,
    route_extra: &str,
) -> String {
    Config::new()
        .raw_top(health)
        .with_cluster(Cluster::new("c").line(cluster_extra).addrs(nodes))
        .route(Route::prefix("api", "/", "c").line(route_extra))
        .toml()
}

/// Starts node-a and node-b over TLS with one leaf for 127.0.0.1 of a new CA named `ca_name`, and
/// a gateway over them ([`config`]: `FAST_HEALTH`, the cluster's `tls` trusting that CA, route
/// lines `route_extra`). Returns the CA, both nodes and the gateway.
async fn two_tls_nodes(ca_name: &str, route_extra: &str) -> (Ca, Mock, Mock, Gateway) {
    let ca = Ca::new(ca_name);
    let leaf = ca.leaf(&["127.0.0.1"]);
    let a = tls_mock("node-a", &leaf, &[]).await;
    let b = tls_mock("node-b", &leaf, &[]).await;
    let nodes = [("node-a", a.addr()), ("node-b", b.addr())];
    let gw = Gateway::start(&config(
        FAST_HEALTH,
        &nodes,
        &tls_line(&ca, ""),
        route_extra,
    ))
    .await;
    (ca, a, b, gw)
}

/// GRPC unary and server-streaming calls from a tonic client (h2c to the gateway) reach
/// a TLS mock through a `protocol = "h2"` cluster (HTTP/2 over TLS, ALPN h2), whose h2 probes pass.
#[tokio::test]
async fn grpc_unary_and_streaming_through_h2_cluster_to_tls_node() {
    let ca = Ca::new("grpc CA");
    let leaf = ca.leaf(&["127.0.0.1"]);
    let m = tls_mock("node-g", &leaf, &["--grpc"]).await;
    let addr = format!("127.0.0.1:{}", m.grpc_port.expect("grpc port"));
    let cluster = format!("protocol = \"h2\"\n{}", tls_line(&ca, ""));
    let gw = Gateway::start(&config(FAST_HEALTH, &[("node-g", addr)], &cluster, "")).await;
    gw.wait_node_state("node-g", "healthy", Duration::from_secs(10))
        .await;

    let channel = tonic::transport::Channel::from_shared(format!("http://127.0.0.1:{}", gw.port))
        .expect("uri")
        .connect()
        .await
        .expect("h2c to the gateway");
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let who: tonic::Response<WhoReply> = grpc
        .unary(
            tonic::Request::new(WhoRequest {}),
            http::uri::PathAndQuery::from_static(WHO_PATH),
            tonic_prost::ProstCodec::<WhoRequest, WhoReply>::default(),
        )
        .await
        .expect("Who over TLS");
    assert_eq!(who.into_inner().node, "node-g");

    grpc.ready().await.expect("ready");
    let mut ticks = grpc
        .server_streaming(
            tonic::Request::new(TicksRequest { count: 3 }),
            http::uri::PathAndQuery::from_static(TICKS_PATH),
            tonic_prost::ProstCodec::<TicksRequest, Tick>::default(),
        )
        .await
        .expect("Ticks over TLS")
        .into_inner();
    let mut got = Vec::new();
    while let Some(t) = timeout(Duration::from_secs(5), ticks.message())
        .await
        .expect("tick in time")
        .expect("tick")
    {
        got.push((t.node, t.seq));
    }
    assert_eq!(
        got,
        vec![
            ("node-g".to_string(), 1),
            ("node-g".to_string(), 2),
            ("node-g".to_string(), 3)
        ]
    );
}

/// HTTP/1.1 requests reach TLS nodes of a cluster with `tls` (verified against the
/// test CA for the node's IP), the node sees the request as sent, and both nodes serve.
#[tokio::test]
async fn http1_requests_over_tls_to_tls_nodes() {
    let (_ca, a, b, gw) = two_tls_nodes("h1 CA", "").await;
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let r = get(&gw.url("/data"), &[]).await.expect("request");
        assert_eq!(r.status, 200, "{}", r.text());
        let node = r.header("x-node-id").expect("x-node-id");
        let port = if node == "node-a" { a.port } else { b.port };
        assert_eq!(r.text(), format!("Data from Node {node} (Port {port})"));
        seen.insert(node);
    }
    assert_eq!(seen.len(), 2, "both TLS nodes served: {seen:?}");
    let echo = integration_tests::request("POST", &gw.url("/echo?x=1"), &[], b"hello".to_vec())
        .await
        .expect("echo");
    assert_eq!(echo.status, 200);
    let e = echo.json();
    assert_eq!(
        (e["method"].clone(), e["path"].clone()),
        (json!("POST"), json!("/echo"))
    );
    assert_eq!(e["body_len"], 5);
}

/// Http probes go over TLS: TLS nodes become healthy, and a node set down (answering
/// 503 over TLS) is ejected while the other keeps serving.
#[tokio::test]
async fn http_probes_over_tls_see_health_and_eject() {
    let (ca, a, _b, gw) = two_tls_nodes("probe CA", "").await;
    for id in ["node-a", "node-b"] {
        gw.wait_node_state(id, "healthy", Duration::from_secs(10))
            .await;
    }
    let down = https_request(&ca.pem, &a.addr(), "POST", "/control/health?state=down")
        .await
        .expect("set node-a down over TLS");
    assert_eq!(down.status, 200, "{}", down.text());
    gw.wait_node_state("node-a", "ejected", Duration::from_secs(10))
        .await;
    assert_eq!(gw.node("node-b").await["state"], "healthy");
    for _ in 0..4 {
        let r = get(&gw.url("/data"), &[]).await.expect("request");
        assert_eq!(r.header("x-node-id").as_deref(), Some("node-b"));
    }
}

/// A WebSocket is dialled to a TLS node and, in hop mode, re-dialled over TLS to the
/// other node when its node is killed; the client's socket stays open.
#[tokio::test]
async fn websocket_dials_and_hops_between_tls_nodes() {
    let (_ca, mut a, mut b, gw) = two_tls_nodes("ws CA", "websocket = \"hop\"").await;
    let mut req = tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(
        format!("ws://127.0.0.1:{}/ws", gw.port),
    )
    .expect("request");
    req.headers_mut()
        .insert("x-conn-id", http::HeaderValue::from_static("tls-ws-1"));
    let (mut ws, resp) = timeout(
        Duration::from_secs(5),
        tokio_tungstenite::connect_async(req),
    )
    .await
    .expect("handshake in time")
    .expect("upgrade");
    assert_eq!(resp.status(), 101);
    let first = next_json(&mut ws, "hello").await;
    let first_node = first["node"].as_str().expect("node").to_string();
    assert_eq!(
        first,
        json!({"node": first_node, "conn_id": "tls-ws-1", "hopped_from": null})
    );
    let other = kill_one_of(&first_node, &mut a, &mut b).await;
    ws.send(Message::text("after-kill")).await.expect("send");
    let second = next_json(&mut ws, "re-dial hello").await;
    assert_eq!(
        second,
        json!({"node": other, "conn_id": "tls-ws-1", "hopped_from": first_node})
    );
    let echo = timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("echo")
        .expect("msg")
        .expect("ok");
    assert_eq!(echo, Message::text("after-kill"));
}

/// Upstream mTLS: a node that demands a client certificate refuses the gateway without
/// `client_cert`: a handshake (connect) failure, so even a POST fails over to the other node and
/// the logged reason names the TLS alert; with `client_cert`/`client_key` signed by the CA it
/// trusts, the node serves.
#[tokio::test]
async fn upstream_mtls_fails_over_without_client_cert_and_passes_with_it() {
    let ca = Ca::new("mtls CA");
    let leaf = ca.leaf(&["127.0.0.1"]);
    let client = ca.client("gateway");
    let ca_path = ca.cert.display().to_string();
    let strict = tls_mock("node-m", &leaf, &["--tls-client-ca", &ca_path]).await;
    let open = tls_mock("node-o", &leaf, &[]).await;
    // TCP probes: the strict node stays selectable, so requests really reach it and fail over.
    let health = format!("{FAST_HEALTH}kind = \"tcp\"\n");
    let nodes = [("node-m", strict.addr()), ("node-o", open.addr())];
    let gw = Gateway::start(&config(&health, &nodes, &tls_line(&ca, ""), "")).await;
    for _ in 0..4 {
        // POST: only a connect failure (nothing sent) is retried for a non-idempotent request.
        let r = integration_tests::request("POST", &gw.url("/echo"), &[], b"x".to_vec())
            .await
            .expect("request");
        served_by(&r, "node-o");
    }
    logged_retry(
        &gw,
        &["from=node-m", "connect_error", "CertificateRequired"],
    )
    .await;

    // Alone, the strict node's refusal is a 502 naming the alert.
    let alone = Gateway::start(&config(
        &health,
        &[("node-m", strict.addr())],
        &tls_line(&ca, ""),
        "",
    ))
    .await;
    let r = get(&alone.url("/data"), &[]).await.expect("request");
    assert_eq!(r.status, 502, "{}", r.text());
    let msg = r.json()["message"].as_str().expect("message").to_string();
    assert!(
        msg.starts_with("could not connect to node node-m: TLS handshake with node-m failed: ")
            && msg.contains("CertificateRequired"),
        "{msg}"
    );

    let with_cert = tls_line(
        &ca,
        &format!(
            ", client_cert = \"{}\", client_key = \"{}\"",
            client.cert.display(),
            client.key.display()
        ),
    );
    let gw2 = Gateway::start(&config(
        &health,
        &[("node-m", strict.addr())],
        &with_cert,
        "",
    ))
    .await;
    let r = get(&gw2.url("/data"), &[]).await.expect("request");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.text(),
        format!("Data from Node node-m (Port {})", strict.port)
    );
}

/// The 502 JSON body from a gateway whose only node serves `leaf` with the cluster's `tls` line.
async fn only_node_502(leaf: &Leaf, tls: &str) -> String {
    let m = tls_mock("node-bad", leaf, &[]).await;
    let health = format!("{FAST_HEALTH}kind = \"tcp\"\n");
    let gw = Gateway::start(&config(&health, &[("node-bad", m.addr())], tls, "")).await;
    let r = get(&gw.url("/data"), &[]).await.expect("request");
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(r.json()["code"], -1);
    let msg = r.json()["message"].as_str().expect("message").to_string();
    eprintln!("502 message: {msg}");
    msg
}

/// Node certificates a gateway trusting `ca` must refuse: signed by `other_ca`, for another name,
/// expired (in that order).
fn bad_leaves(ca: &Ca, other_ca: &Ca) -> [Leaf; 3] {
    [
        other_ca.leaf(&["127.0.0.1"]),
        ca.leaf(&["elsewhere.example"]),
        ca.expired_leaf(&["127.0.0.1"]),
    ]
}

/// Verification: wrong CA, wrong name and an expired node certificate each fail the
/// handshake; with no other node the 502 JSON names the verification error.
#[tokio::test]
async fn bad_node_certificates_give_a_502_naming_the_reason() {
    let ca = Ca::new("good CA");
    let other_ca = Ca::new("other CA");
    let reasons = [
        "invalid peer certificate: UnknownIssuer",
        "invalid peer certificate: certificate not valid for name",
        "invalid peer certificate: certificate expired",
    ];
    for (leaf, reason) in bad_leaves(&ca, &other_ca).into_iter().zip(reasons) {
        let msg = only_node_502(&leaf, &tls_line(&ca, "")).await;
        assert!(
            msg.starts_with(
                "could not connect to node node-bad: TLS handshake with node-bad failed: "
            ) && msg.contains(reason),
            "want {reason:?} in {msg:?}"
        );
    }
}

/// Verification: beside a good node, requests that land on a node with a wrong-CA,
/// wrong-name or expired certificate are retried on the good node and succeed; the failures are
/// counted by passive health until the bad node is ejected.
#[tokio::test]
async fn bad_node_certificates_are_retried_on_a_good_node() {
    let ca = Ca::new("good CA");
    let other_ca = Ca::new("other CA");
    let good_leaf = ca.leaf(&["127.0.0.1"]);
    let bad = bad_leaves(&ca, &other_ca);
    let good = tls_mock("node-good", &good_leaf, &[]).await;
    let health = format!("{FAST_HEALTH}kind = \"tcp\"\npassive_consecutive_errors = 2\n");
    for leaf in &bad {
        let m = tls_mock("node-bad", leaf, &[]).await;
        let nodes = [("node-bad", m.addr()), ("node-good", good.addr())];
        let gw = Gateway::start(&config(&health, &nodes, &tls_line(&ca, ""), "")).await;
        for _ in 0..4 {
            let r = get(&gw.url("/data"), &[]).await.expect("request");
            served_by(&r, "node-good");
        }
        logged_retry(
            &gw,
            &["from=node-bad", "TLS handshake with node-bad failed"],
        )
        .await;
        gw.wait_node_state("node-bad", "ejected", Duration::from_secs(5))
            .await;
    }
}

/// `r` is a 200 from node `node` (its `x-node-id`).
fn served_by(r: &integration_tests::Resp, node: &str) {
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-node-id").as_deref(), Some(node));
}

/// Waits up to 5 s for `gw`'s "retrying on another node" log line with every one of `parts`.
async fn logged_retry(gw: &Gateway, parts: &[&str]) {
    let mut all = vec!["retrying on another node"];
    all.extend_from_slice(parts);
    gw.logs.wait_for(&all, Duration::from_secs(5)).await;
}

/// The next message on `ws` within 5 s as JSON text; `what` names it if none comes in time.
async fn next_json(ws: &mut integration_tests::check::Ws, what: &str) -> Value {
    let m = timeout(Duration::from_secs(5), ws.next())
        .await
        .expect(what)
        .expect("msg")
        .expect("ok");
    serde_json::from_str(m.to_text().expect("text")).expect("json")
}
