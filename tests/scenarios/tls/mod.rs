//! Downstream TLS (SPEC section 10): the `[server.tls]` listener with SNI certificate
//! choice, ALPN (HTTP/1.1, HTTP/2, gRPC), `wss://` and RFC 8441 WebSockets that hop, client
//! certificates, and `--check-config` on certificate files. Certificates are made by the tests
//! (rcgen). Reload under load is in `tls_reload`.

mod certificates;
mod extended_connect;
mod protocols;

use futures_util::SinkExt;
use integration_tests::h2c::{grpc_headers, grpc_messages};
use integration_tests::tls::{self, Ca, Leaf};
use integration_tests::{bin, cluster_toml, free_port, h2ws, Gateway, Mock, FAST_HEALTH};
use mock_backend::grpc::{encode_frame, proto, WHO_PATH};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
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

/// A TLS front for one test: a CA, a gateway whose TLS listener serves that CA's `localhost`
/// leaf (config from [`tls_config`]), and the listener's port.
struct Front {
    ca: Ca,
    gw: Gateway,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Front {
    /// Makes CA `ca_name` and its `localhost` leaf, and starts a gateway with a TLS listener on a
    /// free port serving it over cluster `c` of `nodes` with `cluster_extra` lines.
    async fn start(ca_name: &str, nodes: &[(&str, String)], cluster_extra: &str) -> Front {
        let ca = Ca::new(ca_name);
        let leaf = ca.leaf(&["localhost"]);
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let gw = Gateway::start(&tls_config(
            dir.path(),
            port,
            &[(&leaf, &["localhost"])],
            "",
            nodes,
            cluster_extra,
        ))
        .await;
        Front {
            ca,
            gw,
            port,
            _dir: dir,
        }
    }

    /// A TLS connection to the listener with SNI `localhost`, trusting the CA, offering `alpn`.
    async fn connect(&self, alpn: &[&str]) -> std::io::Result<TlsStream<TcpStream>> {
        tls::connect(
            self.port,
            "localhost",
            tls::client_config(&self.ca.pem, alpn, None),
        )
        .await
    }
}

/// `gateway_tls_handshakes_total` with label `result` (`ok`, `error`) on `gw`.
async fn handshakes(gw: &Gateway, result: &str) -> f64 {
    gw.metric(&format!(
        "gateway_tls_handshakes_total{{result=\"{result}\"}}"
    ))
    .await
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
