//! Helpers shared by the in-process test files: a mock on free ports, plain HTTP calls, and the
//! wait for a peer to end a connection. Each test file uses a part of them.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use mock_backend::MockConfig;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::timeout;

pub(crate) const WAIT: Duration = Duration::from_secs(5);

/// Starts a mock (with a gRPC port) that lives until the test's runtime ends.
pub(crate) async fn start() -> (SocketAddr, SocketAddr) {
    let mut config = MockConfig::new(0, "node-t");
    config.grpc_port = Some(0);
    let bound = mock_backend::bind(config).await.expect("bind");
    let addrs = (bound.local_addr(), bound.grpc_addr().expect("grpc port"));
    tokio::spawn(bound.serve(std::future::pending()));
    addrs
}

pub(crate) async fn post(addr: SocketAddr, path_and_query: &str) -> StatusCode {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{addr}{path_and_query}"))
        .body(Full::default())
        .expect("request");
    client.request(req).await.expect("answered").status()
}

pub(crate) async fn get_text(addr: SocketAddr, path: &str) -> (StatusCode, String) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let resp = client
        .get(format!("http://{addr}{path}").parse().expect("uri"))
        .await
        .expect("answered");
    let status = resp.status();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// Reads from `tcp` until the peer ends the connection; returns the error kind of that end
/// (`None` for a FIN, i.e. a read of 0 bytes).
pub(crate) async fn read_to_end(tcp: &mut TcpStream) -> Option<std::io::ErrorKind> {
    let mut buf = vec![0_u8; 4096];
    loop {
        match timeout(WAIT, tcp.read(&mut buf))
            .await
            .expect("ended in time")
        {
            Ok(0) => return None,
            Ok(_) => continue,
            Err(e) => return Some(e.kind()),
        }
    }
}
