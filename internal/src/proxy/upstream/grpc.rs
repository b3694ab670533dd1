//! gRPC and long-lived responses over the proxy (SPEC section 5; CASE-07, CASE-08, CASE-24).
//!
//! Owns: recognising gRPC (`content-type: application/grpc[+...]`), reading the `grpc-status` of
//! an answer for the access log (trailers-only answers carry it in the head, others in the
//! trailers), and [`DeadlineBody`], the wrapper every forwarded response body goes through so
//! that a node's drain deadline closes what is left: a gRPC stream ends with `grpc-status: 14`
//! (UNAVAILABLE) trailers, any other body ends with an error (h2: stream reset; HTTP/1.1: the
//! connection closes before the body's end).
//!
//! Frames are relayed one for one as they arrive (no buffering, trailers in the same framing, no
//! DATA invented). Spawns nothing: the deadline is a future polled by the body itself, so it
//! goes away with the body. Never holds a lock.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use std::time::Duration;

use tokio::sync::watch;

use crate::proxy::body::{BoxError, FramePoll, ProxyBody};
use crate::registry::{Node, NodeRuntime, NodeSignal};

/// gRPC status code UNAVAILABLE (gRPC `doc/statuscodes.md`): what a stream cut at its node's
/// drain deadline ends with (SPEC section 5), so clients retry elsewhere.
pub(crate) const UNAVAILABLE: u32 = 14;

/// The `grpc-status` field (gRPC `PROTOCOL-HTTP2.md`), as a constant: a lookup by name skips
/// parsing and lower-casing a string on every call.
pub(crate) const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");
/// The `grpc-message` field (gRPC `PROTOCOL-HTTP2.md`).
pub(crate) const GRPC_MESSAGE: HeaderName = HeaderName::from_static("grpc-message");
/// The `grpc-timeout` field (gRPC `PROTOCOL-HTTP2.md`): the call's deadline.
pub(crate) const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// The `grpc-message` sent with [`UNAVAILABLE`] at a drain deadline (percent-encoded per the
/// gRPC HTTP/2 protocol spec; spaces are `%20`).
const DRAIN_MESSAGE: &str = "node%20drained%3B%20retry%20on%20another%20node";

/// True if `headers` say the message is gRPC: `content-type` is `application/grpc` or
/// `application/grpc+<codec>` / `application/grpc;...` (gRPC `PROTOCOL-HTTP2.md`).
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| is_grpc_value(v.as_bytes()))
}

/// [`is_grpc`]'s rule for one `content-type` value (visible ASCII only, as `to_str` reads it).
pub(crate) fn is_grpc_value(v: &[u8]) -> bool {
    let ct = crate::proxy::headers::trim(v);
    // The prefix's bytes are checked by the comparison itself; only the rest needs the scan.
    ct.len() >= 16
        && ct[..16].eq_ignore_ascii_case(b"application/grpc")
        && matches!(ct.get(16), None | Some(b'+' | b';'))
        && ct[16..]
            .iter()
            .all(|b| matches!(b, b' ' | b'\t' | 0x21..=0x7e))
}

/// The `grpc-status` code in `headers` (a response head of a trailers-only answer, or trailers),
/// if present and numeric.
pub(crate) fn status_of(headers: &HeaderMap) -> Option<u32> {
    headers.get(GRPC_STATUS)?.to_str().ok()?.trim().parse().ok()
}

/// The gRPC status a response ended with, shared between the body relaying it and the access log.
/// Cheap to clone; unset until a `grpc-status` is seen. The default does not record anything and
/// costs no allocation (plain HTTP requests); [`GrpcStatus::track`] makes it record, for gRPC.
#[derive(Debug, Clone, Default)]
pub(crate) struct GrpcStatus(Option<Arc<AtomicU32>>);

/// Marks "no status seen" inside [`GrpcStatus`]; not a valid gRPC code (they are 0..=16).
const UNSET: u32 = u32::MAX;

impl GrpcStatus {
    /// A status that records, unset.
    pub(crate) fn tracked() -> Self {
        GrpcStatus(Some(Arc::new(AtomicU32::new(UNSET))))
    }

    /// Makes this status record from now on (no-op if it already does).
    pub(crate) fn track(&mut self) {
        if self.0.is_none() {
            *self = GrpcStatus::tracked();
        }
    }

    /// Records `code` if this status records ([`GrpcStatus::track`]); the last one wins.
    pub(crate) fn set(&self, code: u32) {
        if let Some(a) = &self.0 {
            a.store(code, Ordering::Relaxed);
        }
    }

    /// The recorded code, if any.
    pub(crate) fn get(&self) -> Option<u32> {
        self.0
            .as_ref()
            .map(|a| a.load(Ordering::Relaxed))
            .filter(|c| *c != UNSET)
    }
}

/// Why a non-gRPC body was cut.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StreamError {
    /// The node's drain deadline passed with the response still streaming (SPEC section 5).
    #[error("node {0} drained: its drain deadline passed while this response was streaming")]
    DrainDeadline(String),
}

type Deadline = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Resolves when the node behind `rx` is draining and its drain deadline has passed; an undrain
/// (or a new drain with another deadline) before that re-arms it. Never resolves while the node
/// is not draining.
async fn drain_deadline(mut rx: watch::Receiver<NodeSignal>) {
    loop {
        // Copy the deadline out so no `watch::Ref` (not Send) is held across an await.
        let deadline = rx
            .wait_for(|s| s.drain_deadline.is_some())
            .await
            .ok()
            .and_then(|s| s.drain_deadline);
        let Some(deadline) = deadline else {
            // The registry dropped the node's runtime: nothing will ever drain it.
            return std::future::pending().await;
        };
        let changed = async {
            rx.wait_for(|s| s.drain_deadline != Some(deadline))
                .await
                .is_ok()
        };
        tokio::select! {
            () = tokio::time::sleep_until(deadline) => return,
            alive = changed => if !alive {
                return std::future::pending().await;
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// A node's response body on its way down: relays frames as they come, records the
    /// `grpc-status` of the trailers, and closes the body at the node's drain deadline (see the
    /// module docs).
    #[project = DeadlineBodyProj]
    pub struct DeadlineBody<B> {
        #[pin]
        inner: B,
        // The node: its drain flag is read without a lock, and its signal subscribed to only
        // when the deadline future is armed (see `arm`).
        node: Arc<NodeRuntime>,
        deadline: Option<Deadline>,
        armed: bool,
        grpc: bool,
        status: GrpcStatus,
        cut: bool,
        polls: u32,
    }
}

impl<B> DeadlineBody<B> {
    /// Wraps `inner`, the body of a response from the node whose live state is `node`. `grpc`
    /// says whether the response is gRPC (see [`is_grpc`]); `status` receives its `grpc-status`.
    pub(crate) fn new(inner: B, node: Arc<NodeRuntime>, grpc: bool, status: GrpcStatus) -> Self {
        DeadlineBody {
            inner,
            node,
            deadline: None,
            armed: false,
            grpc,
            status,
            cut: false,
            polls: 0,
        }
    }
}

/// Wraps the body of a response from `node` whose head is `head` (gRPC when `grpc`, the
/// [`is_grpc`] of `head`) for relaying: records the `grpc-status` of a trailers-only answer (in
/// the head) or of its trailers into `status`, and arms the node's drain deadline (see
/// [`DeadlineBody`]).
pub(crate) fn relay<B>(
    head: &HeaderMap,
    grpc: bool,
    body: B,
    node: &Node,
    status: &mut GrpcStatus,
) -> DeadlineBody<B> {
    if grpc {
        status.track();
        if let Some(code) = status_of(head) {
            status.set(code);
        }
    }
    DeadlineBody::new(body, node.runtime.clone(), grpc, status.clone())
}

/// Takes a `grpc-timeout` value (RFC: up to 8 digits and a unit `H`, `M`, `S`, `m`, `u`, `n`;
/// gRPC `PROTOCOL-HTTP2.md`); returns it as a duration, or `None` if malformed.
pub(crate) fn parse_timeout(v: &str) -> Option<Duration> {
    let v = v.trim();
    let (digits, unit) = v.split_at(v.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// gRPC status code for a gateway answer with HTTP status `status`, per gRPC's
/// `doc/http-grpc-status-mapping.md` (plus 413/414/431 as RESOURCE_EXHAUSTED, 408 as
/// DEADLINE_EXCEEDED, which that table leaves as UNKNOWN). The gateway's own `504` is always a
/// deadline it enforced (the route timeout or the call's deadline), so it is DEADLINE_EXCEEDED
/// (SPEC section 5, CASE-30 c), not the table's UNAVAILABLE for a node's 504.
pub(crate) fn code_for_http(status: StatusCode) -> u32 {
    match status.as_u16() {
        400 => 13,
        401 => 16,
        403 => 7,
        404 => 12,
        408 | 504 => 4,
        413 | 414 | 431 => 8,
        429 | 502 | 503 => UNAVAILABLE,
        _ => 2,
    }
}

/// Percent-encodes a `grpc-message` (gRPC `PROTOCOL-HTTP2.md`: bytes outside 0x20..=0x7E and `%`).
pub(crate) fn encode_message(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    for b in msg.bytes() {
        if (0x20..=0x7E).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A gateway answer for a gRPC client (gRPC `PROTOCOL-HTTP2.md` Trailers-Only): HTTP 200,
/// `content-type: application/grpc`, `grpc-status: code`, `grpc-message: message`
/// (percent-encoded), an empty body; `Connection: close` when `close`.
pub(crate) fn trailers_only(code: u32, message: &str, close: bool) -> Response<ProxyBody> {
    let mut resp = Response::new(crate::proxy::body::full(Bytes::new()));
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    put_status(
        h,
        code,
        HeaderValue::from_str(&encode_message(message)).ok(),
    );
    if close {
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// Writes a gRPC ending into `fields` (a Trailers-Only head, or trailers): `grpc-status: code`
/// and, when there is one, `grpc-message: message` (already percent-encoded). The one place the
/// gateway builds gRPC status fields (gRPC `PROTOCOL-HTTP2.md`); [`trailers_only`] and
/// [`trailers`] call it.
pub(crate) fn put_status(fields: &mut HeaderMap, code: u32, message: Option<HeaderValue>) {
    fields.insert(GRPC_STATUS, HeaderValue::from(code));
    if let Some(m) = message {
        fields.insert(GRPC_MESSAGE, m);
    }
}

/// Trailers ending a gRPC stream with `code` and the (already percent-encoded) `message`.
pub(crate) fn trailers(code: u32, message: HeaderValue) -> HeaderMap {
    let mut t = HeaderMap::new();
    put_status(&mut t, code, Some(message));
    t
}

/// The trailers a gRPC stream cut at a drain deadline ends with.
fn unavailable_trailers() -> HeaderMap {
    trailers(UNAVAILABLE, HeaderValue::from_static(DRAIN_MESSAGE))
}

/// Frames relayed between two polls of the drain deadline while the node keeps sending.
const DEADLINE_CHECK_EVERY: u32 = 32;

/// Creates the drain-deadline future from `node`'s signal, once (`armed`). It is armed only
/// when the body waits on the node or the node is draining: a response relayed without waiting
/// (most small ones) never allocates it or subscribes to the node's signal (a
/// subscription and its drop are about ten atomic operations per response).
fn arm(deadline: &mut Option<Deadline>, armed: &mut bool, node: &NodeRuntime) {
    if !*armed {
        *armed = true;
        *deadline = Some(Box::pin(drain_deadline(node.subscribe())));
    }
}

/// Polls the drain deadline; true (once) when it passed.
fn deadline_passed(deadline: &mut Option<Deadline>, cx: &mut Context<'_>) -> bool {
    let passed = deadline
        .as_mut()
        .is_some_and(|d| d.as_mut().poll(cx).is_ready());
    if passed {
        *deadline = None;
    }
    passed
}

/// Ends the body at the drain deadline: `grpc-status: 14` trailers for gRPC, an error otherwise.
fn cut<B>(this: &mut DeadlineBodyProj<'_, B>) -> Result<Frame<Bytes>, BoxError> {
    *this.cut = true;
    tracing::info!(node = %this.node.id(), grpc = *this.grpc, "drain deadline passed; closing a response still streaming");
    if *this.grpc {
        this.status.set(UNAVAILABLE);
        return Ok(Frame::trailers(unavailable_trailers()));
    }
    Err(Box::new(StreamError::DrainDeadline(
        this.node.id().to_string(),
    )))
}

impl<B: Body<Data = Bytes, Error: Into<BoxError>>> Body for DeadlineBody<B> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> FramePoll {
        let mut this = self.project();
        if *this.cut {
            return Poll::Ready(None);
        }
        // The deadline future is polled when the node has nothing to relay (before returning
        // Pending, so its waker is registered) and every DEADLINE_CHECK_EVERY frames, not on every
        // frame: polling it takes the node signal's lock, shared by all of the node's responses.
        if this.polls.is_multiple_of(DEADLINE_CHECK_EVERY) {
            // The drain flag is set before the signal carries the deadline
            // (`NodeRuntime::start_drain`); the armed future waits for the deadline itself.
            if this.node.is_draining() {
                arm(this.deadline, this.armed, this.node);
            }
            if deadline_passed(this.deadline, cx) {
                return Poll::Ready(Some(cut(&mut this)));
            }
        }
        *this.polls = this.polls.wrapping_add(1);
        match this.inner.as_mut().poll_frame(cx) {
            Poll::Pending => {
                arm(this.deadline, this.armed, this.node);
                if deadline_passed(this.deadline, cx) {
                    return Poll::Ready(Some(cut(&mut this)));
                }
                Poll::Pending
            }
            Poll::Ready(None) => {
                // Ended: the deadline goes, and is never armed again.
                *this.deadline = None;
                *this.armed = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(code) = frame.trailers_ref().and_then(status_of) {
                    this.status.set(code);
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.cut || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.cut {
            return SizeHint::with_exact(0);
        }
        self.inner.size_hint()
    }
}

#[cfg(test)]
#[path = "grpc_tests.rs"]
mod tests;
