//! RFC 9113 section 8.1: a node may answer a request completely (END_STREAM) and then end the
//! request's upload with RST_STREAM(NO_ERROR); the client must not discard that answer. The
//! gateway passes such an answer on as the node's, penalises nobody, and keeps both connections.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::Request;
use integration_tests::h2c::{self, grpc_headers, grpc_messages};
use integration_tests::{Gateway, Mock};
use mock_backend::grpc::{proto, WHO_PATH};
use tokio::sync::mpsc;

use super::grpc_errors::{config, who_body};

type Chunks = mpsc::Sender<Result<Frame<Bytes>, std::convert::Infallible>>;

type BodyStream = futures_util::stream::PollFn<
    Box<
        dyn FnMut(
                &mut std::task::Context<'_>,
            )
                -> std::task::Poll<Option<Result<Frame<Bytes>, std::convert::Infallible>>>
            + Send,
    >,
>;

/// A request body the test feeds through the returned sender; it stays open until dropped.
fn open_body() -> (Chunks, StreamBody<BodyStream>) {
    let (tx, mut rx) = mpsc::channel(4);
    let next: Box<dyn FnMut(&mut std::task::Context<'_>) -> _ + Send> =
        Box::new(move |cx| rx.poll_recv(cx));
    (tx, StreamBody::new(futures_util::stream::poll_fn(next)))
}

/// A `WhoService` POST head to `http://{addr}` with gRPC headers plus `extra`.
fn who_request(addr: &str, extra: &[(&str, &str)]) -> hyper::http::request::Builder {
    grpc_headers(extra).into_iter().fold(
        Request::post(format!("http://{addr}{WHO_PATH}")),
        |req, (k, v)| req.header(k, v),
    )
}

/// Sends `req` with `body` on `send` and returns the answer's head, waiting at most 5 s; panics
/// with `what` when the stream fails instead (e.g. a reset).
async fn answer(
    send: &mut hyper::client::conn::http2::SendRequest<StreamBody<BodyStream>>,
    req: hyper::http::request::Builder,
    body: StreamBody<BodyStream>,
    what: &str,
) -> hyper::Response<hyper::body::Incoming> {
    tokio::time::timeout(
        Duration::from_secs(5),
        send.send_request(req.body(body).expect("request")),
    )
    .await
    .expect("answered in time")
    .expect(what)
}

/// A gRPC call whose node answers Trailers-Only (`grpc-status: 5`) while the client is still
/// uploading: the node's END_STREAM + RST_STREAM(NO_ERROR) reaches the client as that answer
/// (status 5, not a reset or 14), node-a stays healthy with no passive error, and the next call
/// on the same client connection is served by node-a.
#[tokio::test]
async fn answer_then_rst_stream_no_error_is_a_success() {
    let a = Mock::start_with("node-a", &["--grpc"]).await;
    let gw = Gateway::start(&config(&[("node-a", a.grpc_addr())], "")).await;
    let addr = format!("127.0.0.1:{}", gw.port);
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let (mut send, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    let conn = tokio::spawn(conn);
    let req = who_request(
        &addr,
        &[("x-mock-grpc-status", "5"), ("x-mock-grpc-message", "gone")],
    );
    let (tx, body) = open_body();
    tx.send(Ok(Frame::data(who_body())))
        .await
        .expect("first message queued");
    let resp = answer(&mut send, req, body, "the node's answer, not a reset").await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok()),
        Some("5"),
        "{:?}",
        resp.headers()
    );
    let rest = tokio::time::timeout(Duration::from_secs(5), resp.into_body().collect())
        .await
        .expect("body ends in time")
        .expect("the answer ends cleanly");
    assert!(rest.to_bytes().is_empty(), "Trailers-Only: no DATA");
    // The upload the node no longer wants: further frames go nowhere and break nothing.
    let _ = tx.send(Ok(Frame::data(who_body()))).await;
    drop(tx);
    let n = gw.node("node-a").await;
    assert_eq!(n["state"], "healthy", "{n}");
    assert_eq!(n["consecutive_failures"], 0, "{n}");
    // The same client connection serves the next call, from node-a.
    let req = who_request(&addr, &[]);
    let (tx, body) = open_body();
    tx.send(Ok(Frame::data(who_body()))).await.expect("queued");
    drop(tx);
    let resp = answer(&mut send, req, body, "answer").await;
    let r = h2c::read_all(resp).await.expect("read whole");
    assert_eq!(r.trailer("grpc-status").as_deref(), Some("0"), "{r:?}");
    let who: Vec<proto::WhoReply> = grpc_messages(&r.body);
    assert_eq!(who[0].node, "node-a");
    assert!(!conn.is_finished(), "the client connection is still open");
}
