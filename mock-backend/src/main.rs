//! `mock-backend <port> <id> [--version V] [--zone Z] [--grpc-port P] [--listen-host H]
//! [--tls-cert FILE --tls-key FILE [--tls-client-ca FILE]]`:
//! parses flags and runs one mock node until Ctrl-C. All behaviour lives in the library.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use clap::Parser;
use mock_backend::tls::TlsFiles;
use mock_backend::MockConfig;

/// Test harness backend for hopping-gateway (SPEC section 9).
#[derive(Debug, Parser)]
#[command(name = "mock-backend")]
struct Args {
    /// Main port (HTTP/1.1 and h2c); 0 picks a free port.
    port: u16,
    /// Node id, returned in bodies and the `x-node-id` header.
    id: String,
    /// Version label (sent back in `x-node-version`).
    #[arg(long = "version")]
    node_version: Option<String>,
    /// Zone label (sent back in `x-node-zone`).
    #[arg(long)]
    zone: Option<String>,
    /// Also serve the gRPC service `hopping.test.v1.Echo` (h2c only) on this port.
    #[arg(long)]
    grpc_port: Option<u16>,
    /// Address to listen on.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    listen_host: IpAddr,
    /// PEM certificate chain: the main port (and the gRPC port) speak TLS (ALPN h2, http/1.1).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Test knob: demand a client certificate signed by this PEM CA (upstream mTLS tests).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let config = MockConfig {
        port: args.port,
        id: args.id,
        version: args.node_version,
        zone: args.zone,
        grpc_port: args.grpc_port,
        listen_host: args.listen_host,
        tls: args.tls_cert.zip(args.tls_key).map(|(cert, key)| TlsFiles {
            cert,
            key,
            client_ca: args.tls_client_ca,
        }),
    };
    mock_backend::run(config, async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            // Without a Ctrl-C handler the node keeps serving; SIGTERM/SIGKILL still stop it.
            eprintln!("mock-backend: cannot listen for Ctrl-C: {err}");
            std::future::pending::<()>().await;
        }
    })
    .await
}
