//! gRPC over TLS end to end (unary and streaming through a `protocol = "h2"` cluster to a TLS
//! mock; SPEC section 10): a client speaking HTTP/2 over TLS (ALPN `h2`) to the gateway's
//! `[server.tls]` listener, a `protocol = "h2"` cluster with `tls = { ca = .. }`, and a mock
//! node serving gRPC over TLS (`--grpc --tls-cert --tls-key`).
//! One test CA (rcgen, `integration_tests::tls`) signs the gateway's and the node's leaves.

use std::time::Duration;

use integration_tests::h2c::{grpc_headers, grpc_messages, H2Conn, Stream};
use integration_tests::tls::{Ca, Leaf};
use integration_tests::{cluster_toml, free_port, tls, Gateway, Mock, FAST_HEALTH};
use mock_backend::grpc::{encode_frame, proto, TICKS_PATH, WHO_PATH};
use serde_json::Value;
use tokio::time::{timeout_at, Instant};

/// A gateway, its TLS port and the TLS mock behind it (both clusters use the same node).
struct Setup {
    gw: Gateway,
    tls_port: u16,
    node: Mock,
    ca: Ca,
}

/// Starts a TLS mock `node-g` (`--grpc`) and a gateway whose `[server.tls]` listener serves a
/// `localhost` leaf; route `grpc` (prefix `/hopping.test.v1.Echo/`) goes to cluster `g` (the
/// node's gRPC port) and route `rest` (prefix `/`) to cluster `e` (its main port), both
/// `protocol = "h2"` with `tls = { ca }`. Waits until both clusters' probes pass over TLS.
async fn setup() -> Setup {
    let ca = Ca::new("tls grpc CA");
    let node_leaf = ca.leaf(&["127.0.0.1"]);
    let gw_leaf: Leaf = ca.leaf(&["localhost"]);
    let mut args = node_leaf.mock_args();
    args.push("--grpc".into());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let node = Mock::start_with("node-g", &refs).await;
    let grpc_addr = node.grpc_addr();
    let cluster = format!(
        "protocol = \"h2\"\ntls = {{ ca = \"{}\" }}",
        ca.cert.display()
    );
    let tls_port = free_port();
    let toml = format!(
        "{FAST_HEALTH}\n{}\n{}\n\
         [[routes]]\nid = \"grpc\"\nmatch = {{ path_prefix = \"/hopping.test.v1.Echo/\" }}\ncluster = \"g\"\n\n\
         [[routes]]\nid = \"rest\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"e\"\n\n\
         [server.tls]\nlisten = \"127.0.0.1:{tls_port}\"\n\
         \x20 [[server.tls.certs]]\n  cert = \"{}\"\n  key = \"{}\"\n  server_names = [\"localhost\"]\n",
        cluster_toml("g", &[("node-g", grpc_addr)], &cluster),
        cluster_toml("e", &[("node-e", node.addr())], &cluster),
        gw_leaf.cert.display(),
        gw_leaf.key.display(),
    );
    let gw = Gateway::start(&toml).await;
    for id in ["node-g", "node-e"] {
        gw.wait_node_state(id, "healthy", Duration::from_secs(10))
            .await;
    }
    Setup {
        gw,
        tls_port,
        node,
        ca,
    }
}

/// An HTTP/2 connection over TLS to the gateway's TLS port (SNI `localhost`, ALPN `h2` only).
async fn h2_over_tls(s: &Setup) -> H2Conn {
    let cfg = tls::client_config(&s.ca.pem, &["h2"], None);
    let stream = tls::connect(s.tls_port, "localhost", cfg)
        .await
        .expect("TLS handshake with the gateway");
    assert_eq!(tls::alpn(&stream).as_deref(), Some("h2"));
    tls::h2(stream, &format!("localhost:{}", s.tls_port)).await
}

/// A unary `Who` and a server-streaming `Ticks` call over TLS (ALPN h2) to the gateway
/// reach the TLS gRPC node through the `protocol = "h2"` cluster: exact replies, ticks arriving
/// one by one as the node sends them, `grpc-status: 0`, and the access log names node and status.
/// Long on purpose: certificates, TLS node, gateway and both calls are one end-to-end path.
///
/// Kept as one function: one scenario read top to bottom; its steps share the processes it starts.
#[tokio::test]
async fn tls_grpc_unary_and_streaming_through_h2_cluster_to_tls_node() {
    let s = setup().await;
    let mut c = h2_over_tls(&s).await;

    let who = c
        .fetch(c.request(
            "POST",
            WHO_PATH,
            &grpc_headers(&[]),
            encode_frame(&proto::WhoRequest {}),
        ))
        .await
        .expect("Who over TLS");
    assert_eq!(who.status, 200);
    assert_eq!(
        who.header("content-type").as_deref(),
        Some("application/grpc")
    );
    assert_eq!(who.header("x-node-id").as_deref(), Some("node-g"));
    assert_eq!(
        grpc_messages::<proto::WhoReply>(&who.body),
        [proto::WhoReply {
            node: "node-g".into()
        }]
    );
    assert_eq!(who.trailer("grpc-status").as_deref(), Some("0"));

    let resp = c
        .send(c.request(
            "POST",
            TICKS_PATH,
            &grpc_headers(&[]),
            encode_frame(&proto::TicksRequest { count: 3 }),
        ))
        .await
        .expect("Ticks over TLS");
    let mut ticks = Stream::new(resp);
    assert_eq!(ticks.status, 200);
    assert_eq!(ticks.header("x-node-id").as_deref(), Some("node-g"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    while let Some((t, _at)) = timeout_at(deadline, ticks.next_message::<proto::Tick>())
        .await
        .expect("ticks in time")
        .expect("tick stream")
    {
        got.push((t.node, t.seq));
    }
    assert_eq!(
        got,
        [
            ("node-g".to_string(), 1),
            ("node-g".to_string(), 2),
            ("node-g".to_string(), 3)
        ]
    );
    assert_eq!(ticks.trailer("grpc-status").as_deref(), Some("0"));

    for path in [WHO_PATH, TICKS_PATH] {
        let line =
            s.gw.logs
                .wait_for(
                    &[
                        "protocol=\"grpc\"",
                        &format!("path={path} status=200"),
                        "route=\"grpc\" node=\"node-g\"",
                        "grpc_status=0",
                    ],
                    Duration::from_secs(5),
                )
                .await;
        assert!(line.contains("upstream_status=200"), "{line}");
    }
    let stats = tls::https_request(&s.ca.pem, &s.node.addr(), "GET", "/control/stats")
        .await
        .expect("node stats over TLS")
        .json();
    let calls: Vec<&str> = stats["paths"]
        .as_array()
        .expect("paths")
        .iter()
        .filter_map(Value::as_str)
        .filter(|p| *p != "/health")
        .collect();
    assert_eq!(calls, [WHO_PATH, TICKS_PATH], "each call once: {stats}");
}

/// SPEC section 10: a request over the same kind of TLS h2 connection reaches the TLS
/// node over HTTP/2 (`protocol = "h2"`) with exactly one `X-Forwarded-Proto: https`.
#[tokio::test]
async fn tls_h2_cluster_request_carries_forwarded_proto_https() {
    let s = setup().await;
    let mut c = h2_over_tls(&s).await;
    let r = c.get("/echo", &[]).await.expect("GET /echo over TLS");
    assert_eq!(r.status, 200, "{}", r.text());
    let echo = r.json();
    assert_eq!(echo["node"], "node-g");
    assert_eq!(echo["version"], "HTTP/2.0", "{echo}");
    let proto: Vec<&Value> = echo["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .filter(|p| p[0] == "x-forwarded-proto")
        .map(|p| &p[1])
        .collect();
    assert_eq!(proto, [&Value::from("https")], "{echo}");
}
