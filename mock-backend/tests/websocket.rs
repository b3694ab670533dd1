//! In-process checks of the mock's WebSocket and SSE behaviours (SPEC section 9): hello, echo,
//! ping, ticks, protocol override, header variants, the close/reset/drop knobs, SSE streaming.

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;

use common::{read_to_end, start, WAIT};

/// Opens the WebSocket `req` over a new TCP connection to `addr`: the socket and the 101 answer.
async fn handshake(
    addr: SocketAddr,
    req: Request,
) -> (
    WebSocketStream<TcpStream>,
    tungstenite::handshake::client::Response,
) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    tokio_tungstenite::client_async(req, tcp)
        .await
        .expect("handshake")
}

#[tokio::test]
async fn websocket_hello_echo_ping_and_close_knob() {
    let (addr, _) = start().await;
    let url = format!("ws://{addr}/ws?close_after_ms=300&close_code=4000&close_reason=bye%20now");
    let mut req = url.into_client_request().expect("ws request");
    req.headers_mut()
        .insert("x-conn-id", "c-1".parse().expect("value"));
    req.headers_mut().insert(
        "sec-websocket-protocol",
        "v10.stomp, v11.stomp".parse().expect("value"),
    );
    let (mut ws, resp) = handshake(addr, req).await;
    assert_eq!(resp.headers()["sec-websocket-protocol"], "v10.stomp");
    let hello = ws.next().await.expect("hello").expect("hello ok");
    let hello: serde_json::Value =
        serde_json::from_str(hello.to_text().expect("text")).expect("json");
    assert_eq!(
        hello,
        serde_json::json!({"node":"node-t","conn_id":"c-1","hopped_from":null})
    );

    ws.send(Message::text("hi")).await.expect("send");
    assert_eq!(
        ws.next().await.expect("echo").expect("ok"),
        Message::text("hi")
    );
    ws.send(Message::Ping(Bytes::from_static(b"hb-1")))
        .await
        .expect("ping");
    let pong = ws.next().await.expect("pong").expect("ok");
    assert_eq!(pong, Message::Pong(Bytes::from_static(b"hb-1")));

    let close = timeout(WAIT, ws.next())
        .await
        .expect("close in time")
        .expect("frame")
        .expect("ok");
    let Message::Close(Some(frame)) = close else {
        panic!("expected a close frame, got {close:?}");
    };
    assert_eq!(u16::from(frame.code), 4000);
    assert_eq!(frame.reason.as_str(), "bye now");
}

#[tokio::test]
async fn websocket_ticks_and_protocol_override() {
    let (addr, _) = start().await;
    let mut req = format!("ws://{addr}/ws?tick_ms=50&protocol=b")
        .into_client_request()
        .expect("req");
    req.headers_mut()
        .insert("sec-websocket-protocol", "a, b".parse().expect("value"));
    let (mut ws, resp) = handshake(addr, req).await;
    assert_eq!(resp.headers()["sec-websocket-protocol"], "b");
    let _hello = ws.next().await.expect("hello").expect("ok");
    assert_eq!(
        ws.next().await.expect("tick").expect("ok"),
        Message::text("tick node-t 1")
    );
    assert_eq!(
        ws.next().await.expect("tick").expect("ok"),
        Message::text("tick node-t 2")
    );
}

#[tokio::test]
async fn websocket_accepts_header_variants() {
    let (addr, _) = start().await;
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    let head = "GET /ws?protocol= HTTP/1.1\r\nHost: app.example.test\r\nConnection: keep-alive\r\n\
                connection: Upgrade\r\nUpgrade: WebSocket\r\nSec-WebSocket-Version: 13\r\n\
                Sec-WebSocket-Protocol: v10.stomp\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    tcp.write_all(head.as_bytes()).await.expect("write");
    let mut buf = vec![0_u8; 4096];
    let n = timeout(WAIT, tcp.read(&mut buf))
        .await
        .expect("in time")
        .expect("read");
    let answer = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 101"), "{answer}");
    assert!(
        answer.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{answer}"
    );
    assert!(!answer.contains("sec-websocket-protocol"), "{answer}");
}

#[tokio::test]
async fn sse_streams_events_without_length() {
    let (addr, _) = start().await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let resp = client
        .get(format!("http://{addr}/sse").parse().expect("uri"))
        .await
        .expect("answer");
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    assert!(resp.headers().get("content-length").is_none());
    let mut body = resp.into_body();
    for seq in 1..=3 {
        let frame = timeout(WAIT, body.frame())
            .await
            .expect("event")
            .expect("frame")
            .expect("ok");
        let data = frame.into_data().expect("data frame");
        assert_eq!(&data[..], format!("data: node-t {seq}\n\n").as_bytes());
    }
}

#[tokio::test]
async fn websocket_reset_knob_ends_the_socket_with_rst_and_drop_knob_with_fin() {
    let (addr, _) = start().await;
    for (knob, expected) in [
        (
            "reset_after_ms=200",
            Some(std::io::ErrorKind::ConnectionReset),
        ),
        ("drop_after_ms=200", None),
    ] {
        let mut tcp = TcpStream::connect(addr).await.expect("connect");
        let head = format!("GET /ws?{knob} HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n");
        tcp.write_all(head.as_bytes()).await.expect("write");
        assert_eq!(read_to_end(&mut tcp).await, expected, "{knob}");
    }
}
