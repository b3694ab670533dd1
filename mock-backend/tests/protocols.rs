//! In-process checks of the long-lived and control behaviours: h2c, gRPC, hang/delay, abort,
//! GOAWAY and the idle keep-alive close (WebSocket and SSE: `websocket.rs`).

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use mock_backend::grpc::{encode_frame, proto, split_frame, TICKS_PATH, WHO_PATH};
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

use common::{get_text, post, read_to_end, start, WAIT};

#[tokio::test]
async fn h2c_prior_knowledge_on_the_main_port() {
    let (addr, _) = start().await;
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let req = Request::builder()
        .method(Method::PUT)
        .uri(format!("http://{addr}/echo"))
        .body(Full::new(Bytes::from_static(b"abc")))
        .expect("request");
    let resp = client.request(req).await.expect("answer");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let echo: serde_json::Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(echo["version"], "HTTP/2.0");
    assert_eq!(echo["body_len"], 3);
}

/// Sends one gRPC call over a fresh h2 connection; returns the response head and its body stream.
async fn grpc_call(
    addr: SocketAddr,
    path: &str,
    message: Bytes,
    extra: &[(&str, &str)],
) -> (http::response::Parts, h2::RecvStream) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut h2, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(conn);
    let mut req = Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in extra {
        req = req.header(*name, *value);
    }
    let (resp, mut send) = h2
        .send_request(req.body(()).expect("request"), false)
        .expect("send");
    send.send_data(message, true).expect("data");
    resp.await.expect("response").into_parts()
}

#[tokio::test]
async fn grpc_who_ticks_and_trailers_only() {
    let (_, grpc) = start().await;
    let (head, mut body) =
        grpc_call(grpc, WHO_PATH, encode_frame(&proto::WhoRequest {}), &[]).await;
    assert_eq!(head.headers["content-type"], "application/grpc");
    let data = body.data().await.expect("data").expect("ok");
    let (_, message, _) = split_frame(&data).expect("frame");
    assert_eq!(
        proto::WhoReply::decode(message).expect("reply").node,
        "node-t"
    );
    let trailers = body.trailers().await.expect("ok").expect("trailers");
    assert_eq!(trailers["grpc-status"], "0");

    let request = encode_frame(&proto::TicksRequest { count: 2 });
    let (_, mut body) = grpc_call(grpc, TICKS_PATH, request, &[]).await;
    for seq in 1..=2 {
        let data = body.data().await.expect("tick").expect("ok");
        let (_, message, _) = split_frame(&data).expect("frame");
        assert_eq!(
            proto::Tick::decode(message).expect("tick"),
            proto::Tick {
                node: "node-t".into(),
                seq
            }
        );
    }
    assert_eq!(
        body.trailers().await.expect("ok").expect("trailers")["grpc-status"],
        "0"
    );

    let knobs = [
        ("x-mock-grpc-status", "5"),
        ("x-mock-grpc-message", "not%20found"),
    ];
    let (head, body) = grpc_call(grpc, WHO_PATH, encode_frame(&proto::WhoRequest {}), &knobs).await;
    assert!(
        body.is_end_stream(),
        "trailers-only is one HEADERS frame with END_STREAM"
    );
    assert_eq!(head.headers["grpc-status"], "5");
    assert_eq!(head.headers["grpc-message"], "not%20found");

    let (head, body) = grpc_call(grpc, "/hopping.test.v1.Echo/Nope", Bytes::new(), &[]).await;
    assert!(body.is_end_stream());
    assert_eq!(head.headers["grpc-status"], "12");
}

#[tokio::test]
async fn hang_holds_requests_until_unhang_and_delay_adds_latency() {
    let (addr, _) = start().await;
    assert_eq!(post(addr, "/control/hang").await, StatusCode::OK);
    let held = tokio::spawn(get_text(addr, "/data"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!held.is_finished(), "a hung node must not answer");
    let (_, stats) = get_text(addr, "/control/stats").await;
    assert!(stats.contains(r#""requests":1"#), "{stats}");
    assert_eq!(post(addr, "/control/unhang").await, StatusCode::OK);
    let (status, _) = timeout(WAIT, held).await.expect("released").expect("task");
    assert_eq!(status, StatusCode::OK);

    assert_eq!(post(addr, "/control/delay?ms=200").await, StatusCode::OK);
    let started = Instant::now();
    get_text(addr, "/health").await;
    assert!(started.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn idle_keepalive_close_spares_half_written_requests() {
    let (addr, _) = start().await;
    assert_eq!(
        post(addr, "/control/keepalive?idle_ms=300").await,
        StatusCode::OK
    );
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    // A head written in two parts with a pause longer than idle_ms still gets its answer.
    tcp.write_all(b"GET /health HTTP/1.1\r\n")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(600)).await;
    tcp.write_all(b"Host: t\r\n\r\n").await.expect("write");
    let mut buf = vec![0_u8; 1024];
    let n = timeout(WAIT, tcp.read(&mut buf))
        .await
        .expect("in time")
        .expect("read");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    // Then, idle between requests, the server closes after about idle_ms.
    let idle_from = Instant::now();
    let n = timeout(WAIT, tcp.read(&mut buf))
        .await
        .expect("closed in time")
        .expect("read");
    assert_eq!(n, 0, "expected EOF");
    let idle = idle_from.elapsed();
    assert!(
        idle >= Duration::from_millis(250) && idle < Duration::from_millis(1000),
        "{idle:?}"
    );
}

#[tokio::test]
async fn keepalive_timeout_is_advertised_on_request() {
    let (addr, _) = start().await;
    let url = "/control/keepalive?idle_ms=2000&advertise=1";
    assert_eq!(post(addr, url).await, StatusCode::OK);
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let uri = format!("http://{addr}/health").parse().expect("uri");
    let resp = client.get(uri).await.expect("answer");
    assert_eq!(resp.headers()["keep-alive"], "timeout=2");
}

#[tokio::test]
async fn goaway_after_n_streams_ends_the_h2_connection() {
    let (addr, _) = start().await;
    assert_eq!(post(addr, "/control/goaway?after=2").await, StatusCode::OK);
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (mut h2, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let conn = tokio::spawn(conn);
    for _ in 0..2 {
        h2 = h2.ready().await.expect("ready");
        let req = Request::get(format!("http://{addr}/health"))
            .body(())
            .expect("req");
        let (resp, _) = h2.send_request(req, true).expect("send");
        assert_eq!(resp.await.expect("response").status(), StatusCode::OK);
    }
    let ended = timeout(WAIT, conn)
        .await
        .expect("GOAWAY closes the connection");
    ended
        .expect("task")
        .expect("a graceful GOAWAY is not an error");
}

#[tokio::test]
async fn abort_drops_the_request_unanswered() {
    let (addr, _) = start().await;
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    let head = "POST /abort HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello";
    tcp.write_all(head.as_bytes()).await.expect("write");
    let mut buf = vec![0_u8; 1024];
    let n = timeout(WAIT, tcp.read(&mut buf)).await.expect("in time");
    // EOF or a reset, but never an HTTP answer.
    assert!(
        n.map_or(true, |n| n == 0),
        "got {:?}",
        String::from_utf8_lossy(&buf)
    );
    let (_, stats) = get_text(addr, "/control/stats").await;
    assert!(stats.contains(r#""paths":["/abort"]"#), "{stats}");
}

#[tokio::test]
async fn grpc_status_in_separate_trailers() {
    let (_, grpc) = start().await;
    let knobs = [
        ("x-mock-grpc-status", "7"),
        ("x-mock-grpc-message", "denied"),
        ("x-mock-grpc-framing", "separate"),
    ];
    let request = encode_frame(&proto::TicksRequest { count: 5 });
    let (head, mut body) = grpc_call(grpc, TICKS_PATH, request, &knobs).await;
    assert!(head.headers.get("grpc-status").is_none());
    assert!(!body.is_end_stream());
    assert!(body.data().await.is_none(), "no DATA is sent");
    let trailers = body.trailers().await.expect("ok").expect("trailers");
    assert_eq!(trailers["grpc-status"], "7");
    assert_eq!(trailers["grpc-message"], "denied");
}

#[tokio::test]
async fn idle_keepalive_close_by_rst_with_reset_1() {
    let (addr, _) = start().await;
    assert_eq!(
        post(addr, "/control/keepalive?idle_ms=200&reset=1").await,
        StatusCode::OK
    );
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    tcp.write_all(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .expect("write");
    assert_eq!(
        read_to_end(&mut tcp).await,
        Some(std::io::ErrorKind::ConnectionReset)
    );
}
