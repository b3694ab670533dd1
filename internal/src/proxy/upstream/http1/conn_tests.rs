//! The upstream client against scripted nodes on loopback: what goes on the wire, how answers are
//! framed, when a connection goes back to the pool, and how failures are attributed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use http::{Method, Request};
use http_body::Frame;
use http_body_util::{BodyExt, Full, StreamBody};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use super::*;
use crate::proxy::expect::ContinueGate;
use crate::proxy::upstream::http1::pool::Pool;
use crate::tls::client::NodeStream;

const WAIT: Duration = Duration::from_secs(5);

fn full(s: &'static str) -> ProxyBody {
    Full::new(Bytes::from_static(s.as_bytes()))
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A body of `parts` and no known length (so it is sent chunked), then `then_hang` or its end.
fn streamed(parts: &[&'static str], then_hang: bool) -> ProxyBody {
    let frames: Vec<Result<Frame<Bytes>, BoxError>> = parts
        .iter()
        .map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes()))))
        .collect();
    let s = stream::iter(frames);
    if then_hang {
        StreamBody::new(s.chain(stream::pending())).boxed_unsync()
    } else {
        StreamBody::new(s).boxed_unsync()
    }
}

fn request(method: Method, body: ProxyBody) -> Request<ProxyBody> {
    let mut r = Request::new(body);
    *r.method_mut() = method;
    *r.uri_mut() = "/p?q=1".parse().expect("valid");
    r.headers_mut()
        .insert(http::header::HOST, "node".parse().expect("valid"));
    r
}

/// [`super::send`] with the head of `req` (and `gate`, if any) and its body.
async fn send_gated(
    conn: NodeConn,
    reused: bool,
    req: Request<ProxyBody>,
    gate: Option<&ContinueGate>,
    home: Home,
) -> Result<Response<NodeBody>, SendError> {
    let (parts, body) = req.into_parts();
    let root = http::uri::PathAndQuery::from_static("/");
    let head = NodeRequest {
        raw_answer: false,
        method: &parts.method,
        target: parts.uri.path_and_query().unwrap_or(&root),
        headers: &parts.headers,
        forwarded: None,
        host: None,
        gate,
    };
    // The tests read every field from the map (`raw_answer: false`).
    super::send(conn, reused, head, body, home)
        .await
        .map(|a| a.response)
}

/// [`send_gated`] without a gate.
async fn send(
    conn: NodeConn,
    reused: bool,
    req: Request<ProxyBody>,
    home: Home,
) -> Result<Response<NodeBody>, SendError> {
    send_gated(conn, reused, req, None, home).await
}

/// A listener and a connection to it, the node's side accepted.
async fn pair() -> (NodeConn, TcpStream) {
    let (c, s) = crate::proxy::loopback::tcp_pair().await;
    (NodeConn::new(NodeStream::Plain(c)), s)
}

fn home(pool: &Arc<Pool>) -> Home {
    Home {
        pool: pool.clone(),
        node: Arc::from("node-1"),
        ttl: Duration::from_secs(60),
    }
}

/// Reads from `s` up to the end of a head (CR LF CR LF); returns what was read.
async fn read_head(s: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        tokio::time::timeout(WAIT, s.read_exact(&mut byte))
            .await
            .expect("in time")
            .expect("read");
        got.push(byte[0]);
    }
    String::from_utf8(got).expect("ascii")
}

/// A node on a fresh connection that reads one request head, writes `answer` and hands its
/// side back (dropping it closes the connection).
async fn answering(answer: &'static [u8]) -> (NodeConn, JoinHandle<TcpStream>) {
    let (conn, mut node) = pair().await;
    let server = tokio::spawn(async move {
        let _ = read_head(&mut node).await;
        node.write_all(answer).await.expect("write");
        node
    });
    (conn, server)
}

/// Reads from `s` until `want` bytes arrived (or the deadline).
async fn read_exactly(s: &mut TcpStream, want: usize) -> Vec<u8> {
    let mut got = vec![0u8; want];
    tokio::time::timeout(WAIT, s.read_exact(&mut got))
        .await
        .expect("in time")
        .expect("read");
    got
}

#[tokio::test]
async fn a_chunked_request_and_a_sized_answer_then_the_connection_is_pooled() {
    let (conn, mut node) = pair().await;
    let pool = Arc::new(Pool::default());
    let wire = "POST /p?q=1 HTTP/1.1\r\nhost: node\r\ntransfer-encoding: chunked\r\n\r\n\
                2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n";
    let server = tokio::spawn(async move {
        let got = read_exactly(&mut node, wire.len()).await;
        node.write_all(b"HTTP/1.1 201 Created\r\ncontent-length: 5\r\n\r\nhello")
            .await
            .expect("write");
        (String::from_utf8(got).expect("ascii"), node)
    });
    let resp = send(
        conn,
        false,
        request(Method::POST, streamed(&["ab", "cde"], false)),
        home(&pool),
    )
    .await
    .expect("answered");
    assert_eq!(resp.status(), 201);
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(body, "hello");
    let (got, _node) = server.await.expect("server");
    assert_eq!(got, wire);
    assert!(
        pool.checkout("node-1").is_some(),
        "pooled after a clean end"
    );
}

#[tokio::test]
async fn a_chunked_answer_with_trailers_is_decoded() {
    let (conn, mut node) = pair().await;
    let pool = Arc::new(Pool::default());
    let server = tokio::spawn(async move {
        assert_eq!(
            read_head(&mut node).await,
            "GET /p?q=1 HTTP/1.1\r\nhost: node\r\n\r\n"
        );
        node.write_all(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nwiki\r\n0\r\nx-sum: 9\r\n\r\n",
        )
        .await
        .expect("write");
        node
    });
    let resp = send(conn, false, request(Method::GET, full("")), home(&pool))
        .await
        .expect("answered");
    let collected = resp.into_body().collect().await.expect("body");
    assert_eq!(collected.trailers().expect("trailers")["x-sum"], "9");
    assert_eq!(collected.to_bytes(), "wiki");
    let _node = server.await.expect("server");
    assert!(pool.checkout("node-1").is_some());
}

#[tokio::test]
async fn an_early_answer_arrives_while_the_body_still_flows_and_the_connection_is_not_pooled() {
    // The head only; the node answers without waiting for the body.
    let (conn, server) =
        answering(b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 4\r\n\r\nbig!").await;
    let pool = Arc::new(Pool::default());
    let resp = tokio::time::timeout(
        WAIT,
        send(
            conn,
            false,
            request(Method::POST, streamed(&["part"], true)),
            home(&pool),
        ),
    )
    .await
    .expect("not held by the endless body")
    .expect("answered");
    assert_eq!(resp.status(), 413);
    let body = tokio::time::timeout(WAIT, async {
        let mut b = resp.into_body();
        b.frame()
            .await
            .expect("a frame")
            .expect("ok")
            .into_data()
            .expect("data")
    })
    .await
    .expect("in time");
    assert_eq!(body, "big!");
    let _node = server.await.expect("server");
    assert!(pool.checkout("node-1").is_none(), "the body never ended");
}

#[tokio::test]
async fn interim_answers_are_skipped_and_100_opens_the_gate() {
    let (conn, server) = answering(
        b"HTTP/1.1 103 Early Hints\r\nlink: </s.css>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
    )
    .await;
    let pool = Arc::new(Pool::default());
    let gate = ContinueGate::new();
    let req = request(Method::GET, full(""));
    let resp = send_gated(conn, false, req, Some(&gate), home(&pool))
        .await
        .expect("answered");
    assert_eq!(resp.status(), 200);
    assert!(resp.body().is_end_stream());
    // The gate is open: a body held by it flows at once.
    let mut held = gate.hold(full("x"), Duration::from_secs(3600));
    let f = tokio::time::timeout(WAIT, held.frame())
        .await
        .expect("opened by the 100");
    assert!(f.expect("a frame").is_ok());
    let _node = server.await.expect("server");
    assert!(pool.checkout("node-1").is_some(), "ended at its head");
}

#[tokio::test]
async fn a_reused_connection_closed_by_the_node_is_stale_and_a_fresh_one_is_not() {
    for reused in [true, false] {
        let (conn, mut node) = pair().await;
        let pool = Arc::new(Pool::default());
        let server = tokio::spawn(async move {
            let mut buf = [0u8; 256];
            let _ = node.read(&mut buf).await.expect("read");
            drop(node);
        });
        let err = send(conn, reused, request(Method::GET, full("")), home(&pool))
            .await
            .expect_err("closed");
        server.await.expect("server");
        match (reused, &err) {
            (true, SendError::Stale(e)) | (false, SendError::Sent(e)) => {
                assert_eq!(e.to_string(), "connection closed before message completed");
            }
            _ => panic!("reused={reused}: {err:?}"),
        }
    }
}

#[tokio::test]
async fn a_close_delimited_answer_runs_to_the_close_and_is_not_pooled() {
    let (conn, server) = answering(b"HTTP/1.1 200 OK\r\n\r\nall of it").await;
    let pool = Arc::new(Pool::default());
    let resp = send(conn, false, request(Method::GET, full("")), home(&pool))
        .await
        .expect("answered");
    drop(server.await.expect("server"));
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert_eq!(body, "all of it");
    assert!(pool.checkout("node-1").is_none());
}

#[tokio::test]
async fn an_answer_cut_before_its_length_fails_the_body() {
    let (conn, server) = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort").await;
    let pool = Arc::new(Pool::default());
    let resp = send(conn, false, request(Method::GET, full("")), home(&pool))
        .await
        .expect("answered");
    drop(server.await.expect("server"));
    let err = resp.into_body().collect().await.expect_err("cut");
    assert_eq!(
        err.to_string(),
        "connection closed before the answer's body ended"
    );
    assert!(pool.checkout("node-1").is_none());
}

#[tokio::test]
async fn a_pooled_connection_the_node_closed_is_not_handed_out_and_a_live_one_is() {
    let pool = Arc::new(Pool::default());
    let (live, _node) = pair().await;
    pool.put(&home(&pool), live);
    assert!(
        pool.checkout("node-1").is_some(),
        "a live connection is reused"
    );
    let (mut closed, node) = pair().await;
    drop(node);
    // Wait until the node's FIN has reached this side, then pool it.
    if let NodeStream::Plain(t) = closed.io_mut() {
        tokio::time::timeout(WAIT, t.readable())
            .await
            .expect("FIN in time")
            .expect("readable");
    }
    pool.put(&home(&pool), closed);
    assert!(
        pool.checkout("node-1").is_none(),
        "stale connection handed out"
    );
}
