//! Unit tests of [`super`].

use http_body_util::{BodyExt, StreamBody};

use super::*;
use tokio::time::Instant;

fn ct(v: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(v).expect("valid"),
    );
    h
}

#[test]
fn grpc_content_types() {
    assert!(is_grpc(&ct("application/grpc")));
    assert!(is_grpc(&ct("application/grpc+proto")));
    assert!(is_grpc(&ct("Application/GRPC;charset=utf-8")));
    assert!(!is_grpc(&ct("application/grpc-web")));
    assert!(!is_grpc(&ct("application/json")));
    assert!(!is_grpc(&HeaderMap::new()));
    // The bytes after the prefix are read as `to_str` reads them: visible ASCII only.
    assert!(is_grpc_value(b"application/grpc+proto ; q=1"));
    assert!(!is_grpc_value(b"application/grpc;\x01"));
    assert!(!is_grpc_value(b"application/grpc+\xc3\xa9"));
}

#[test]
fn timeouts_and_messages() {
    assert_eq!(parse_timeout("1S"), Some(Duration::from_secs(1)));
    assert_eq!(parse_timeout("250m"), Some(Duration::from_millis(250)));
    assert_eq!(parse_timeout("2H"), Some(Duration::from_secs(7200)));
    assert_eq!(parse_timeout("123456789S"), None);
    assert_eq!(parse_timeout("S"), None);
    assert_eq!(parse_timeout("10x"), None);
    assert_eq!(encode_message("no node 100% ok\n"), "no node 100%25 ok%0A");
    assert_eq!(code_for_http(StatusCode::BAD_GATEWAY), UNAVAILABLE);
    assert_eq!(code_for_http(StatusCode::NOT_FOUND), 12);
}

#[test]
fn status_parsing() {
    let mut h = HeaderMap::new();
    assert_eq!(status_of(&h), None);
    h.insert("grpc-status", HeaderValue::from_static("5"));
    assert_eq!(status_of(&h), Some(5));
    h.insert("grpc-status", HeaderValue::from_static("x"));
    assert_eq!(status_of(&h), None);
}

/// A body that never ends (a server stream with count = 0).
fn endless() -> impl Body<Data = Bytes, Error = BoxError> {
    let s = futures_util::stream::pending::<Result<Frame<Bytes>, BoxError>>();
    StreamBody::new(s)
}

#[tokio::test(start_paused = true)]
async fn grpc_stream_ends_with_unavailable_at_drain_deadline() {
    let node = NodeRuntime::detached("node-a");
    let status = GrpcStatus::tracked();
    let mut body = DeadlineBody::new(endless(), node.clone(), true, status.clone());
    let start = Instant::now();
    node.start_drain(start + Duration::from_secs(2));
    let frame = body.frame().await.expect("a frame").expect("no error");
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    let trailers = frame.into_trailers().expect("trailers");
    assert_eq!(trailers["grpc-status"], "14");
    assert_eq!(status.get(), Some(UNAVAILABLE));
    assert!(body.frame().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn plain_stream_errors_at_drain_deadline_and_undrain_disarms() {
    let node = NodeRuntime::detached("node-a");
    let mut body = DeadlineBody::new(endless(), node.clone(), false, GrpcStatus::tracked());
    let start = Instant::now();
    node.start_drain(start + Duration::from_secs(5));
    // Undrained after 1 s: the deadline must not fire.
    let undrain = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        node.undrain();
        tokio::time::sleep(Duration::from_secs(10)).await;
        node.start_drain(Instant::now() + Duration::from_secs(1));
        std::future::pending::<()>().await
    };
    let r = tokio::select! {
        r = body.frame() => r,
        () = undrain => unreachable!("pending"),
    };
    assert_eq!(start.elapsed(), Duration::from_secs(12));
    assert!(r.expect("a result").is_err());
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_never_waits_is_still_cut() {
    let node = NodeRuntime::detached("n");
    let frames = futures_util::stream::repeat_with(|| {
        Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"x")))
    });
    let mut body = DeadlineBody::new(
        StreamBody::new(frames),
        node.clone(),
        true,
        GrpcStatus::tracked(),
    );
    for _ in 0..100 {
        assert!(body.frame().await.expect("frame").expect("ok").is_data());
    }
    node.start_drain(Instant::now());
    let mut relayed = 0;
    loop {
        let frame = body.frame().await.expect("frame").expect("ok");
        if frame.is_trailers() {
            break;
        }
        relayed += 1;
    }
    assert!(
        relayed <= DEADLINE_CHECK_EVERY,
        "{relayed} frames relayed past the deadline"
    );
    assert!(body.frame().await.is_none());
}

#[tokio::test]
async fn trailers_status_is_recorded() {
    let mut t = HeaderMap::new();
    t.insert("grpc-status", HeaderValue::from_static("7"));
    let frames = futures_util::stream::iter([
        Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"x"))),
        Ok(Frame::trailers(t)),
    ]);
    let status = GrpcStatus::tracked();
    let body = DeadlineBody::new(
        StreamBody::new(frames),
        NodeRuntime::detached("n"),
        true,
        status.clone(),
    );
    let collected = body.collect().await.expect("ok");
    assert_eq!(collected.trailers().expect("trailers")["grpc-status"], "7");
    assert_eq!(status.get(), Some(7));
}
