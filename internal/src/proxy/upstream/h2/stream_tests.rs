//! Unit tests of [`super`].

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Wake;

use http_body_util::BodyExt;
use tokio::sync::oneshot;

use super::*;

/// One gRPC message (5-byte prefix, empty message), as a unary call sends it.
const CALL: &[u8] = b"\0\0\0\0\0";

/// A body of one chunk that, like hyper's body of a request with `content-length`, says it has
/// ended only once the chunk was read.
struct OneChunk(Option<Bytes>);

impl Body for OneChunk {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(self.0.take().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }
}

/// A waker that counts its wakes.
#[derive(Default)]
struct Counter(AtomicUsize);

impl Wake for Counter {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Polls `fut` once with `counter`'s waker.
fn poll_counted<F: Future + Unpin>(fut: &mut F, counter: &Arc<Counter>) -> Poll<F::Output> {
    let waker = std::task::Waker::from(counter.clone());
    Pin::new(fut).poll(&mut Context::from_waker(&waker))
}

/// Lets every other task of the (current-thread) test runtime run until they all wait.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// A unary call's body, complete on the first read, goes out as HEADERS + DATA(END_STREAM) in
/// the request's first poll, and the request is woken once: by the node's answer head, not by h2
/// opening the stream or granting it capacity (bench/README).
#[tokio::test]
async fn a_body_complete_at_once_goes_out_in_the_first_poll_and_only_the_answer_wakes_it() {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let (got_tx, got_rx) = oneshot::channel::<(Bytes, bool)>();
    let (answer_tx, answer_rx) = oneshot::channel::<()>();
    let node = tokio::spawn(async move {
        let mut conn = h2::server::handshake(server_io).await.expect("handshake");
        let (req, mut respond) = conn.accept().await.expect("a stream").expect("no error");
        let driver = tokio::spawn(async move { while conn.accept().await.is_some() {} });
        let mut body = req.into_body();
        let data = body.data().await.expect("a DATA frame").expect("no error");
        got_tx
            .send((data, body.is_end_stream()))
            .expect("the test waits");
        answer_rx.await.expect("the test answers");
        let head = Response::builder().status(200).body(()).expect("a head");
        let mut tx = respond.send_response(head, true).expect("answered");
        let _ = tx.send_data(Bytes::new(), true);
        driver.await.expect("driver ran");
    });
    let (mut send_req, conn) = h2::client::handshake(client_io).await.expect("handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let body = OneChunk(Some(Bytes::from_static(CALL))).boxed_unsync();
    let req = Request::post("http://node/hopping.test.v1.Echo/Who")
        .body(body)
        .expect("a request");
    let counter = Arc::new(Counter::default());
    let mut call = Box::pin(send(&mut send_req, req, 64 * 1024));
    assert!(poll_counted(&mut call, &counter).is_pending());
    let (data, ended) = got_rx.await.expect("the node got the body");
    assert_eq!(&data[..], CALL);
    assert!(ended, "the DATA frame carried END_STREAM");
    settle().await;
    assert_eq!(
        counter.0.load(Ordering::SeqCst),
        0,
        "no wake before the answer"
    );
    answer_tx.send(()).expect("the node waits");
    settle().await;
    assert_eq!(
        counter.0.load(Ordering::SeqCst),
        1,
        "the answer head woke it once"
    );
    let Poll::Ready(Ok(answer)) = poll_counted(&mut call, &counter) else {
        panic!("the answer head is there");
    };
    assert_eq!(answer.status(), 200);
    drop(call);
    drop(send_req);
    node.abort();
}
