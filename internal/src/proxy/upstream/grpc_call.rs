//! A gRPC call's deadline and the end of its response stream (SPEC section 5; CASE-30, CASE-31).
//!
//! - [`budget`]: the call's time budget, the shorter of the client's `grpc-timeout` and the
//!   route's `grpc_max_timeout` (gRPC `PROTOCOL-HTTP2.md` "Timeout"); a malformed value is ignored,
//!   never read as already expired.
//! - [`encode_timeout`]: the remaining budget as the `grpc-timeout` the node receives.
//! - [`CallBody`]: wraps a gRPC response body once its head is relayed. At the call deadline the
//!   stream ends with `grpc-status: 4` trailers (the node's stream is dropped, i.e. cancelled with
//!   RST_STREAM(CANCEL)); when the node breaks the stream after its head (a reset, a lost
//!   connection) it ends with `grpc-status: 14` trailers instead of a reset, which clients would
//!   read as INTERNAL (gRPC "Errors": only REFUSED_STREAM maps to UNAVAILABLE; linkerd2 #4262).
//!   Trailers over `limits.h2_max_header_list` ([`HeaderListTooLarge`]) end it with
//!   `grpc-status: 13` (INTERNAL, as gRPC clients answer a header list over their own limit) and
//!   a `grpc-message` naming the limit: never the node's trailers cut short (SPEC sections 4, 5).
//!
//! Spawns nothing; the deadline is a timer the body polls.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::grpc::{encode_message, parse_timeout, trailers, GrpcStatus, GRPC_TIMEOUT, UNAVAILABLE};
use super::h2::stream::HeaderListTooLarge;
use crate::proxy::body::{BoxError, FramePoll};

/// gRPC status DEADLINE_EXCEEDED.
pub(crate) const DEADLINE_EXCEEDED: u32 = 4;

/// The time budget of a request with headers `request` on a route whose cap is `cap`
/// (`grpc_max_timeout`, `None` = no cap): for a gRPC call (`grpc`: the request's kind is
/// `Kind::Grpc`, decided once per request from its `content-type` by
/// [`crate::proxy::context::kind_of`]), the shorter of its `grpc-timeout` and the cap; `None` for
/// any other request, or a call with neither (then the route `timeout` bounds the response head).
pub(crate) fn budget(grpc: bool, request: &HeaderMap, cap: Option<Duration>) -> Option<Duration> {
    if !grpc {
        return None;
    }
    let client = request
        .get(GRPC_TIMEOUT)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_timeout);
    match (client, cap) {
        (Some(c), Some(m)) => Some(c.min(m)),
        (c, m) => c.or(m),
    }
}

/// `remaining` as a `grpc-timeout` value: whole milliseconds (rounded down, at least 1) while
/// they fit the protocol's 8 digits, else whole seconds.
pub(crate) fn encode_timeout(remaining: Duration) -> HeaderValue {
    let ms = remaining.as_millis().max(1);
    let text = if ms <= 99_999_999 {
        format!("{ms}m")
    } else {
        format!("{}S", remaining.as_secs().min(99_999_999))
    };
    HeaderValue::from_str(&text).expect("digits and a unit letter are a valid header value")
}

/// gRPC status INTERNAL.
pub(crate) const INTERNAL: u32 = 13;

/// The code and trailers a stream the node broke after its head ends with, for `e`: 13 with the
/// limit named for trailers over `limits.h2_max_header_list`, else 14 (retry elsewhere).
fn broken_trailers(e: &BoxError) -> (u32, HeaderMap) {
    let Some(big) = e.downcast_ref::<HeaderListTooLarge>() else {
        return (
            UNAVAILABLE,
            trailers(
                UNAVAILABLE,
                HeaderValue::from_static("node%20stream%20broke%3B%20retry"),
            ),
        );
    };
    let message = HeaderValue::from_str(&encode_message(&big.to_string()))
        .expect("a percent-encoded message is a valid header value");
    (INTERNAL, trailers(INTERNAL, message))
}

pin_project_lite::pin_project! {
    /// See the module docs.
    pub struct CallBody<B> {
        #[pin]
        inner: B,
        deadline: Option<Pin<Box<Sleep>>>,
        status: GrpcStatus,
        ended: bool,
    }
}

impl<B> CallBody<B> {
    /// Wraps `inner`, a gRPC response body; `deadline` is the call's deadline, if it has one;
    /// `status` records the code the gateway ends the stream with.
    pub(crate) fn new(inner: B, deadline: Option<Instant>, status: GrpcStatus) -> Self {
        CallBody {
            inner,
            deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d))),
            status,
            ended: false,
        }
    }
}

impl<B: Body<Data = Bytes, Error: Into<BoxError>>> Body for CallBody<B> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> FramePoll {
        let this = self.project();
        if *this.ended {
            return Poll::Ready(None);
        }
        if let Some(d) = this.deadline.as_mut() {
            if d.as_mut().poll(cx).is_ready() {
                *this.ended = true;
                this.status.set(DEADLINE_EXCEEDED);
                tracing::debug!("gRPC call deadline passed while streaming; ending with status 4");
                return Poll::Ready(Some(Ok(Frame::trailers(trailers(
                    DEADLINE_EXCEEDED,
                    HeaderValue::from_static("deadline%20exceeded"),
                )))));
            }
        }
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Err(e))) => {
                let e: BoxError = e.into();
                let (code, t) = broken_trailers(&e);
                tracing::info!(error = %e, code, "node broke a gRPC stream after its head; ending with trailers");
                *this.ended = true;
                this.status.set(code);
                Poll::Ready(Some(Ok(Frame::trailers(t))))
            }
            Poll::Ready(Some(Ok(f))) => {
                if f.is_trailers() {
                    *this.ended = true;
                }
                Poll::Ready(Some(Ok(f)))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        // Trailers may be added: never promise an exact length.
        let mut h = SizeHint::new();
        h.set_lower(self.inner.size_hint().lower());
        h
    }
}

/// When the response head of a request that started at `start` must have arrived: the route
/// `timeout` (SPEC section 3: whole request, not applied to streaming gRPC, so it only ever bounds
/// the head), or for a gRPC call with a deadline (its `grpc-timeout`, capped by the route's
/// `grpc_max_timeout` = `cap`, see [`budget`]) that deadline, which replaces it
/// (a client asking for a long deadline may legitimately wait on a stream).
pub(crate) fn head_deadline(
    start: Instant,
    route_timeout: Duration,
    budget: Option<Duration>,
) -> Instant {
    start + budget.unwrap_or(route_timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header;
    use http_body_util::BodyExt;

    fn grpc(timeout: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        );
        if let Some(t) = timeout {
            h.insert(
                "grpc-timeout",
                HeaderValue::from_str(t).expect("test value"),
            );
        }
        h
    }

    #[test]
    fn budget_is_the_shorter_and_ignores_malformed_values() {
        let s = Duration::from_secs;
        assert_eq!(
            budget(true, &grpc(Some("200m")), None),
            Some(Duration::from_millis(200))
        );
        assert_eq!(budget(true, &grpc(Some("100S")), Some(s(10))), Some(s(10)));
        assert_eq!(budget(true, &grpc(Some("1S")), Some(s(10))), Some(s(1)));
        assert_eq!(budget(true, &grpc(None), Some(s(10))), Some(s(10)));
        assert_eq!(budget(true, &grpc(None), None), None);
        assert_eq!(budget(true, &grpc(Some("1x")), None), None);
        assert_eq!(budget(true, &grpc(Some("123456789m")), None), None);
        // Only a gRPC call has a budget, whatever its fields say.
        assert_eq!(budget(false, &grpc(Some("1S")), Some(s(1))), None);
        assert_eq!(budget(false, &grpc(None), Some(s(1))), None);
    }

    #[test]
    fn timeouts_are_encoded_in_eight_digits() {
        assert_eq!(encode_timeout(Duration::from_millis(187)), "187m");
        assert_eq!(encode_timeout(Duration::from_micros(10)), "1m");
        assert_eq!(encode_timeout(Duration::from_secs(200_000)), "200000S");
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_and_broken_streams_end_with_trailers() {
        let endless = http_body_util::StreamBody::new(futures_util::stream::pending::<
            Result<Frame<Bytes>, BoxError>,
        >());
        let status = GrpcStatus::tracked();
        let body = CallBody::new(
            endless,
            Some(Instant::now() + Duration::from_secs(1)),
            status.clone(),
        );
        let out = body.collect().await.expect("trailers, not an error");
        assert_eq!(out.trailers().expect("test value")["grpc-status"], "4");
        assert_eq!(status.get(), Some(4));

        let broken = http_body_util::StreamBody::new(futures_util::stream::iter(vec![
            Ok(Frame::data(Bytes::from_static(b"\0\0\0\0\0"))),
            Err::<Frame<Bytes>, BoxError>("connection reset".into()),
        ]));
        let status = GrpcStatus::tracked();
        let out = CallBody::new(broken, None, status.clone())
            .collect()
            .await
            .expect("trailers, not an error");
        assert_eq!(out.trailers().expect("test value")["grpc-status"], "14");
        assert_eq!(status.get(), Some(14));

        let too_big = HeaderListTooLarge {
            what: "trailers",
            size: 102_500,
            limit: 65_536,
        };
        let cut = http_body_util::StreamBody::new(futures_util::stream::iter(vec![Err::<
            Frame<Bytes>,
            BoxError,
        >(
            too_big.into(),
        )]));
        let status = GrpcStatus::tracked();
        let out = CallBody::new(cut, None, status.clone())
            .collect()
            .await
            .expect("trailers, not an error");
        let t = out.trailers().expect("test value");
        assert_eq!(t["grpc-status"], "13");
        assert_eq!(
            t["grpc-message"],
            "node trailers of 102500 bytes over limits.h2_max_header_list (65536 bytes)"
        );
        assert_eq!(status.get(), Some(13));
    }

    #[test]
    fn head_deadline_is_the_call_deadline_or_the_route_timeout() {
        let start = Instant::now();
        let mut h = grpc(None);
        let route = Duration::from_secs(30);
        assert_eq!(
            head_deadline(start, route, budget(true, &h, None)),
            start + route
        );
        h.insert("grpc-timeout", http::HeaderValue::from_static("90S"));
        assert_eq!(
            head_deadline(start, route, budget(true, &h, None)),
            start + Duration::from_secs(90)
        );
        // Not a gRPC call: its grpc-timeout field means nothing, the route timeout holds.
        assert_eq!(
            head_deadline(start, route, budget(false, &h, None)),
            start + route
        );
    }
}
