//! Unit tests of [`super`].

use super::*;
use futures_util::StreamExt;
use tokio::sync::mpsc;

const IDLE: Duration = Duration::from_secs(30);

/// A client body fed chunk by chunk through `tx`; dropping `tx` ends it.
fn client_body() -> (mpsc::Sender<Bytes>, ProxyBody) {
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    let stream = tokio_stream_of(rx).map(|b| Ok::<_, BoxError>(Frame::data(b)));
    (tx, http_body_util::StreamBody::new(stream).boxed_unsync())
}

/// Sends `chunk` as the client's next body chunk; panics if the body was dropped.
async fn send(tx: &mpsc::Sender<Bytes>, chunk: Bytes) {
    tx.send(chunk).await.expect("the body is still read");
}

fn tokio_stream_of(mut rx: mpsc::Receiver<Bytes>) -> impl futures_util::Stream<Item = Bytes> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

async fn next_data<B: Body<Data = Bytes, Error = BoxError> + Unpin>(b: &mut B) -> Option<Bytes> {
    b.frame()
        .await
        .map(|f| f.expect("no error").into_data().expect("data"))
}

fn replayed(tap: &BodyTap) -> ProxyBody {
    match tap.replay(IDLE) {
        Replay::Body(b) => b,
        Replay::Lost => panic!("the body should be replayable"),
    }
}

/// A body partly read by a failed attempt replays what was read, then reads on from the
/// client; the abandoned attempt's body is cut off with an error.
#[tokio::test]
async fn replay_resumes_a_partly_read_body_and_cuts_off_the_old_attempt() {
    let (tx, inner) = client_body();
    let (first, tap) = RequestBody::new(inner, IDLE, None);
    let mut first = Box::pin(first);
    send(&tx, Bytes::from_static(b"one")).await;
    assert_eq!(next_data(&mut first).await.as_deref(), Some(&b"one"[..]));
    let mut second = replayed(&tap);
    assert!(
        first.frame().await.expect("a frame").is_err(),
        "old attempt cut off"
    );
    send(&tx, Bytes::from_static(b"two")).await;
    drop(tx);
    assert_eq!(next_data(&mut second).await.as_deref(), Some(&b"one"[..]));
    assert_eq!(next_data(&mut second).await.as_deref(), Some(&b"two"[..]));
    assert_eq!(next_data(&mut second).await, None);
    // A third attempt gets the whole body from the capture.
    let mut third = replayed(&tap);
    assert_eq!(next_data(&mut third).await.as_deref(), Some(&b"one"[..]));
    assert_eq!(next_data(&mut third).await.as_deref(), Some(&b"two"[..]));
    assert_eq!(next_data(&mut third).await, None);
    assert_eq!(tap.bytes_in(), 6, "client bytes counted once");
}

/// A body the failed attempt never polled replays whole from the client.
#[tokio::test]
async fn replay_of_a_never_polled_body_reads_it_all() {
    let (tx, inner) = client_body();
    let (first, tap) = RequestBody::new(inner, IDLE, None);
    drop(first);
    send(&tx, Bytes::from_static(b"all")).await;
    drop(tx);
    let mut again = replayed(&tap);
    assert_eq!(next_data(&mut again).await.as_deref(), Some(&b"all"[..]));
    assert_eq!(next_data(&mut again).await, None);
}

/// Past REPLAY_LIMIT bytes read, the body is lost for replay; a request without a body replays
/// as an empty one.
#[tokio::test]
async fn past_the_limit_is_lost_and_no_body_replays_empty() {
    let (tx, inner) = client_body();
    let (first, tap) = RequestBody::new(inner, IDLE, None);
    let mut first = Box::pin(first);
    send(&tx, Bytes::from(vec![0u8; REPLAY_LIMIT + 1])).await;
    assert_eq!(
        next_data(&mut first).await.map(|b| b.len()),
        Some(REPLAY_LIMIT + 1)
    );
    assert!(matches!(tap.replay(IDLE), Replay::Lost));
    let mut empty = replayed(&BodyTap::empty());
    assert_eq!(next_data(&mut empty).await, None);
    assert!(empty.is_end_stream());
}

/// `max_body` counts the client's bytes across attempts: a replay cannot reset it.
#[tokio::test]
async fn max_body_holds_across_a_replay() {
    let (tx, inner) = client_body();
    let (first, tap) = RequestBody::new(inner, IDLE, Some(5));
    let mut first = Box::pin(first);
    send(&tx, Bytes::from_static(b"abc")).await;
    assert_eq!(next_data(&mut first).await.as_deref(), Some(&b"abc"[..]));
    let mut second = replayed(&tap);
    assert_eq!(next_data(&mut second).await.as_deref(), Some(&b"abc"[..]));
    send(&tx, Bytes::from_static(b"def")).await;
    let err = second
        .frame()
        .await
        .expect("a frame")
        .expect_err("over max_body");
    assert_eq!(err.to_string(), "request body larger than 5 bytes");
}
