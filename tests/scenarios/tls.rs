//! Downstream TLS (SPEC section 10, issue 14): the `[server.tls]` listener with SNI certificate
//! choice, ALPN (HTTP/1.1, HTTP/2, gRPC), `wss://` and RFC 8441 WebSockets that hop, client
//! certificates, and `--check-config` on certificate files. Certificates are made by the tests
//! (rcgen). Reload under load is in `tls_reload`.

use std::path::Path;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use integration_tests::h2c::{grpc_headers, grpc_messages};
use integration_tests::tls::{self, Ca, Leaf};
use integration_tests::{bin, cluster_toml, free_port, h2ws, Gateway, Mock, FAST_HEALTH};
use mock_backend::grpc::{encode_frame, proto, TICKS_PATH, WHO_PATH};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{timeout_at, Instant};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// A gateway with a TLS listener on `tls_port` serving `certs` (leaf, server names) over one
/// cluster `c` of `nodes` (`cluster_extra` lines) and a catch-all route in WebSocket hop mode.
pub(crate) fn tls_config(
    dir: &Path,
    tls_port: u16,
    certs: &[(&Leaf, &[&str])],
    tls_extra: &str,
    nodes: &[(&str, String)],
    cluster_extra: &str,
) -> String {
    let mut s = format!(
        "{FAST_HEALTH}\n{}\n[[routes]]\nid = \"r\"\nmatch = {{ path_prefix = \"/\" }}\ncluster = \"c\"\nwebsocket = \"hop\"\n\n[server.tls]\nlisten = \"127.0.0.1:{tls_port}\"\n{tls_extra}\n",
        cluster_toml("c", nodes, cluster_extra)
    );
    for (i, (leaf, names)) in certs.iter().enumerate() {
        let (cert, key) = leaf.write(dir, &format!("cert{i}"));
        let names: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
        s.push_str(&format!(
            "  [[server.tls.certs]]\n  cert = {:?}\n  key = {:?}\n  server_names = [{}]\n",
            cert.display().to_string(),
            key.display().to_string(),
            names.join(", ")
        ));
    }
    s
}

fn mock_nodes(mocks: &[&Mock]) -> Vec<(&'static str, String)> {
    mocks
        .iter()
        .map(|m| {
            let id: &'static str = if m.id == "node-a" { "node-a" } else { "node-b" };
            (id, m.addr())
        })
        .collect()
}

/// The next text message within `t`; panics on a Close (the socket must stay open).
async fn next_text<S>(ws: &mut WebSocketStream<S>, t: Duration) -> String
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let deadline = Instant::now() + t;
    loop {
        let m = timeout_at(deadline, ws.next())
            .await
            .expect("a text message in time")
            .expect("socket open")
            .expect("no socket error");
        match m {
            Message::Text(s) => return s.to_string(),
            Message::Close(c) => panic!("the client saw a Close: {c:?}"),
            _ => {}
        }
    }
}

async fn hello<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>) -> Value {
    let text = next_text(ws, Duration::from_secs(3)).await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("hello is JSON ({e}): {text}"))
}

/// Kills whichever of `a`, `b` is `id`; returns the other's id.
async fn kill_node(a: &mut Mock, b: &mut Mock, id: &str) -> &'static str {
    if id == "node-a" {
        a.kill().await;
        "node-b"
    } else {
        b.kill().await;
        "node-a"
    }
}

/// Sends and reads back messages, then kills the socket's node and checks the same socket is
/// re-dialled to the other node (its hello names `hopped_from`) and keeps echoing.
async fn exchange_and_hop<S>(ws: &mut WebSocketStream<S>, a: &mut Mock, b: &mut Mock)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let first = hello(ws).await;
    let node = first["node"].as_str().expect("node").to_string();
    for i in 0..3 {
        ws.send(Message::text(format!("m{i}"))).await.expect("send");
        assert_eq!(next_text(ws, Duration::from_secs(3)).await, format!("m{i}"));
    }
    let other = kill_node(a, b, &node).await;
    ws.send(Message::text("during-hop")).await.expect("send");
    let h = hello(ws).await;
    assert_eq!(h["node"], other, "{h}");
    assert_eq!(h["hopped_from"], node.as_str(), "{h}");
    assert_eq!(h["conn_id"], first["conn_id"], "{h}");
    assert_eq!(next_text(ws, Duration::from_secs(3)).await, "during-hop");
    ws.send(Message::text("after")).await.expect("send");
    assert_eq!(next_text(ws, Duration::from_secs(3)).await, "after");
}

/// Issue 14 "SNI": with two certificates, a rustls client and `openssl s_client -servername` see
/// the exact-name leaf, the one-label wildcard's leaf, and the first (default) leaf for an unknown
/// name or no SNI at all.
#[tokio::test]
async fn tls_sni_picks_exact_then_wildcard_then_the_first_certificate() {
    let a = Mock::start("node-a").await;
    let ca = Ca::new("sni test CA");
    let first = ca.leaf(&["a.test"]);
    let second = ca.leaf(&["b.test", "*.wild.test"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let gw = Gateway::start(&tls_config(
        dir.path(),
        port,
        &[(&first, &["a.test"]), (&second, &["b.test", "*.wild.test"])],
        "",
        &mock_nodes(&[&a]),
        "",
    ))
    .await;
    let any = tls::any_cert_config();
    for (sni, want, what) in [
        ("a.test", &first, "exact a.test"),
        ("b.test", &second, "exact b.test"),
        ("x.wild.test", &second, "wildcard *.wild.test"),
        ("y.x.wild.test", &first, "a wildcard covers one label only"),
        ("unknown.test", &first, "no match: the first"),
        ("127.0.0.1", &first, "no SNI (IP address): the first"),
    ] {
        let s = tls::connect(port, sni, any.clone())
            .await
            .expect("handshake");
        assert!(
            tls::peer_leaf(&s) == want.der,
            "{what}: wrong leaf for {sni}"
        );
    }
    // The verifying client accepts the leaf for its name, and HTTP flows.
    let cfg = tls::client_config(&ca.pem, &["http/1.1"], None);
    let s = tls::connect(port, "x.wild.test", cfg)
        .await
        .expect("verified handshake");
    let mut send = tls::http1(s).await.expect("h1");
    let (status, _, body) = tls::h1_get(&mut send, "x.wild.test", "/data")
        .await
        .expect("GET");
    assert_eq!(
        (status, body.as_str()),
        (
            200,
            format!("Data from Node node-a (Port {})", a.port).as_str()
        )
    );

    for (sni, cn) in [
        (Some("b.test"), "b.test"),
        (Some("q.wild.test"), "b.test"),
        (Some("a.test"), "a.test"),
        (None, "a.test"),
    ] {
        let mut cmd = std::process::Command::new("openssl");
        cmd.args(["s_client", "-connect", &format!("127.0.0.1:{port}")]);
        match sni {
            Some(n) => cmd.args(["-servername", n]),
            None => cmd.arg("-noservername"),
        };
        let out = cmd
            .stdin(std::process::Stdio::null())
            .output()
            .expect("openssl s_client runs");
        let text = String::from_utf8_lossy(&out.stdout);
        let subject = text
            .lines()
            .find(|l| l.starts_with("subject="))
            .unwrap_or_else(|| panic!("no subject line in openssl output: {text}"));
        assert!(
            subject.ends_with(&format!("CN = {cn}")) || subject.ends_with(&format!("CN={cn}")),
            "SNI {sni:?}: {subject}"
        );
    }
    drop(gw);
}

/// Issue 14 "ALPN": an h2 client gets HTTP/2 and an http/1.1-only client HTTP/1.1 on the same TLS
/// port, both with `X-Forwarded-Proto: https`; `curl --http2 --cacert` works.
#[tokio::test]
async fn tls_alpn_gives_h2_and_http11_clients_their_protocol() {
    let a = Mock::start("node-a").await;
    let ca = Ca::new("alpn test CA");
    let leaf = ca.leaf(&["localhost"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let gw = Gateway::start(&tls_config(
        dir.path(),
        port,
        &[(&leaf, &["localhost"])],
        "",
        &mock_nodes(&[&a]),
        "",
    ))
    .await;

    let s = tls::connect(
        port,
        "localhost",
        tls::client_config(&ca.pem, &["h2", "http/1.1"], None),
    )
    .await
    .expect("h2 handshake");
    assert_eq!(tls::alpn(&s).as_deref(), Some("h2"));
    let mut c = tls::h2(s, &format!("localhost:{port}")).await;
    let r = c.get("/echo", &[]).await.expect("h2 GET");
    assert_eq!(r.status, 200);
    let echo = r.json();
    let proto: Vec<&Value> = echo["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .filter(|p| p[0] == "x-forwarded-proto")
        .collect();
    assert_eq!(proto.len(), 1, "{echo}");
    assert_eq!(proto[0][1], "https");

    let s = tls::connect(
        port,
        "localhost",
        tls::client_config(&ca.pem, &["http/1.1"], None),
    )
    .await
    .expect("h1 handshake");
    assert_eq!(tls::alpn(&s).as_deref(), Some("http/1.1"));
    let mut send = tls::http1(s).await.expect("h1");
    let (status, version, body) = tls::h1_get(&mut send, "localhost", "/echo")
        .await
        .expect("h1 GET");
    assert_eq!((status, version), (200, http::Version::HTTP_11));
    let echo: Value = serde_json::from_str(&body).expect("JSON");
    assert!(
        echo["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .any(|p| p[0] == "x-forwarded-proto" && p[1] == "https"),
        "{echo}"
    );
    // The cleartext port still says http.
    let plain = integration_tests::get(&gw.url("/echo"), &[])
        .await
        .expect("cleartext")
        .json();
    assert!(
        plain["headers"]
            .as_array()
            .expect("headers")
            .iter()
            .any(|p| p[0] == "x-forwarded-proto" && p[1] == "http"),
        "{plain}"
    );

    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &ca.pem).expect("write CA");
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--http2", "--cacert"])
        .arg(&ca_file)
        .args([
            "-w",
            "\n%{http_version}",
            &format!("https://localhost:{port}/data"),
        ])
        .output()
        .await
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text,
        format!("Data from Node node-a (Port {})\n2", a.port),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        gw.metric("gateway_tls_handshakes_total{result=\"ok\"}")
            .await
            >= 3.0
    );
}

/// Issue 14 "gRPC over TLS" (downstream half): unary `Who` and server-streaming `Ticks` over an
/// h2 TLS connection to a `protocol = "h2c"` cluster end with their messages and `grpc-status: 0`.
#[tokio::test]
async fn tls_grpc_unary_and_streaming_reach_an_h2c_cluster() {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let ca = Ca::new("grpc test CA");
    let leaf = ca.leaf(&["localhost"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let grpc_addr = format!("127.0.0.1:{}", a.grpc_port.expect("grpc port"));
    let _gw = Gateway::start(&tls_config(
        dir.path(),
        port,
        &[(&leaf, &["localhost"])],
        "",
        &[("node-a", grpc_addr)],
        "protocol = \"h2c\"",
    ))
    .await;
    let s = tls::connect(
        port,
        "localhost",
        tls::client_config(&ca.pem, &["h2"], None),
    )
    .await
    .expect("handshake");
    let mut c = tls::h2(s, &format!("localhost:{port}")).await;
    let req = c.request(
        "POST",
        WHO_PATH,
        &grpc_headers(&[]),
        encode_frame(&proto::WhoRequest {}),
    );
    let r = c.fetch(req).await.expect("Who");
    assert_eq!(r.status, 200);
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"));
    let who: Vec<proto::WhoReply> = grpc_messages(&r.body);
    assert_eq!(
        who,
        [proto::WhoReply {
            node: "node-a".into()
        }]
    );
    let req = c.request(
        "POST",
        TICKS_PATH,
        &grpc_headers(&[]),
        encode_frame(&proto::TicksRequest { count: 3 }),
    );
    let r = c.fetch(req).await.expect("Ticks");
    let ticks: Vec<proto::Tick> = grpc_messages(&r.body);
    assert_eq!(ticks.iter().map(|t| t.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"));
}

/// Issue 14 "ALPN ... a `wss://` socket hops when its node is killed and stays open": a WebSocket
/// over TLS (HTTP/1.1) exchanges messages, and when its node dies it is re-dialled to the other
/// node with the client's socket untouched.
#[tokio::test]
async fn tls_wss_socket_hops_when_its_node_is_killed() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let ca = Ca::new("wss test CA");
    let leaf = ca.leaf(&["localhost"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let _gw = Gateway::start(&tls_config(
        dir.path(),
        port,
        &[(&leaf, &["localhost"])],
        "",
        &mock_nodes(&[&a, &b]),
        "",
    ))
    .await;
    let s = tls::connect(
        port,
        "localhost",
        tls::client_config(&ca.pem, &["http/1.1"], None),
    )
    .await
    .expect("handshake");
    let (mut ws, resp) = tokio_tungstenite::client_async(format!("wss://localhost:{port}/ws"), s)
        .await
        .expect("wss upgrade");
    assert_eq!(resp.status(), 101);
    exchange_and_hop(&mut ws, &mut a, &mut b).await;
}

/// Issue 14 "RFC 8441": an h2 client opens a WebSocket with an extended CONNECT over TLS (200, no
/// accept key), exchanges messages, and the socket hops to the other node when its node is killed.
#[tokio::test]
async fn tls_rfc8441_websocket_over_h2_exchanges_messages_and_hops() {
    let mut a = Mock::start("node-a").await;
    let mut b = Mock::start("node-b").await;
    let ca = Ca::new("rfc8441 test CA");
    let leaf = ca.leaf(&["localhost"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let gw = Gateway::start(&tls_config(
        dir.path(),
        port,
        &[(&leaf, &["localhost"])],
        "",
        &mock_nodes(&[&a, &b]),
        "",
    ))
    .await;
    let s = tls::connect(
        port,
        "localhost",
        tls::client_config(&ca.pem, &["h2"], None),
    )
    .await
    .expect("handshake");
    assert_eq!(tls::alpn(&s).as_deref(), Some("h2"));
    let (mut ws, head) = h2ws::open(s, &format!("localhost:{port}"), "/ws", &[])
        .await
        .expect("extended CONNECT");
    assert!(
        head.headers.get("sec-websocket-accept").is_none(),
        "{:?}",
        head.headers
    );
    assert!(
        head.headers.get("x-conn-id").is_some(),
        "an issued conn id: {:?}",
        head.headers
    );
    exchange_and_hop(&mut ws, &mut a, &mut b).await;
    // The one socket is still counted open after its hop.
    assert_eq!(
        gw.metric("gateway_active_connections{protocol=\"websocket\"}")
            .await,
        1.0
    );
}

/// Issue 14 "mTLS downstream": with `client_ca` set, a client without a certificate, or with one
/// from another CA, fails the handshake; one signed by `client_ca` passes and its subject is in the
/// access log.
#[tokio::test]
async fn tls_client_ca_requires_a_certificate_it_signed() {
    let a = Mock::start("node-a").await;
    let ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let stranger = Ca::new("stranger CA");
    let leaf = ca.leaf(&["localhost"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_file = dir.path().join("client-ca.pem");
    std::fs::write(&ca_file, &client_ca.pem).expect("write");
    let port = free_port();
    let gw = Gateway::start(&tls_config(
        dir.path(),
        port,
        &[(&leaf, &["localhost"])],
        &format!("client_ca = {:?}", ca_file.display().to_string()),
        &mock_nodes(&[&a]),
        "",
    ))
    .await;

    async fn get_data(port: u16, cfg: std::sync::Arc<rustls::ClientConfig>) -> anyhow::Result<u16> {
        let s = tls::connect(port, "localhost", cfg).await?;
        let mut send = tls::http1(s).await?;
        Ok(tls::h1_get(&mut send, "localhost", "/data").await?.0)
    }
    let none = get_data(port, tls::client_config(&ca.pem, &["http/1.1"], None)).await;
    assert!(none.is_err(), "no client certificate must fail: {none:?}");
    let other = get_data(
        port,
        tls::client_config(&ca.pem, &["http/1.1"], Some(&stranger.client("mallory"))),
    )
    .await;
    assert!(
        other.is_err(),
        "a certificate of another CA must fail: {other:?}"
    );
    let ok = get_data(
        port,
        tls::client_config(&ca.pem, &["http/1.1"], Some(&client_ca.client("alice"))),
    )
    .await;
    assert_eq!(ok.expect("signed by client_ca"), 200);
    gw.logs
        .wait_for(
            &["access", "path=/data", "CN=alice"],
            Duration::from_secs(5),
        )
        .await;
    assert!(
        gw.metric("gateway_tls_handshakes_total{result=\"error\"}")
            .await
            >= 2.0
    );
}

/// Issue 14 / SPEC section 10: `--check-config` reads the certificate files and names each problem
/// in the config-error shape: a broken PEM, a key that does not match, an expired leaf.
#[tokio::test]
async fn tls_check_config_names_bad_certificate_files() {
    let ca = Ca::new("check CA");
    let good = ca.leaf(&["a.test"]);
    let expired = ca.expired_leaf(&["b.test"]);
    let other = ca.leaf(&["c.test"]);
    let dir = tempfile::tempdir().expect("tempdir");
    let broken = Leaf {
        cert_pem: "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n".into(),
        ..good.clone()
    };
    let mismatched = Leaf {
        key_pem: other.key_pem.clone(),
        ..good.clone()
    };
    let text = tls_config(
        dir.path(),
        free_port(),
        &[
            (&broken, &["a.test"]),
            (&mismatched, &["m.test"]),
            (&expired, &["b.test"]),
        ],
        "",
        &[("node-a", "127.0.0.1:1".into())],
        "",
    );
    let file = dir.path().join("gw.toml");
    std::fs::write(&file, &text).expect("write");
    let out = std::process::Command::new(bin("hopping-gateway"))
        .arg("--check-config")
        .arg(&file)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    let line_of = |needle: &str| {
        text.lines()
            .position(|l| l.contains(needle))
            .expect("in config")
            + 1
    };
    let name = file.display().to_string();
    assert!(
        lines[0].starts_with(&format!(
            "{name}:{}:3: server.tls.certs[0].cert: ",
            line_of("cert0.pem")
        )) && lines[0].contains("not a PEM certificate chain"),
        "{err}"
    );
    assert!(
        lines[1].starts_with(&format!(
            "{name}:{}:3: server.tls.certs[1].key: ",
            line_of("cert1.key")
        )) && lines[1].contains("does not match"),
        "{err}"
    );
    assert!(
        lines[2].starts_with(&format!(
            "{name}:{}:3: server.tls.certs[2].cert: ",
            line_of("cert2.pem")
        )) && lines[2].contains("expired"),
        "{err}"
    );
}
