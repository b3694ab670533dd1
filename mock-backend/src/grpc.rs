//! The gRPC port: service `hopping.test.v1.Echo` (proto/echo.proto) over h2c, plus `GET /health` and
//! `grpc.health.v1.Health/Check` (SERVING; NOT_SERVING while set down with `/control/health` or,
//! for gRPC health alone, the test knob `/control/grpc-health?state=down`).
//!
//! Owns the hand-written prost messages ([`proto`]), gRPC length-prefixed framing
//! ([`encode_frame`], [`split_frame`], public so test clients can reuse them) and the handlers.
//! Calls are counted, held and delayed like main-port requests. Responses are headers, DATA,
//! then `grpc-status` trailers; errors are trailers-only (one HEADERS frame with END_STREAM).
//! Test knobs (request headers, on `Who` and `Ticks`): `x-mock-grpc-status: N` plus optional
//! `x-mock-grpc-message: M` answers trailers-only with that status and message (sent as given);
//! adding `x-mock-grpc-framing: separate` sends headers, then the status in a trailers frame, no DATA.
//! `x-mock-grpc-refuse: 1` (or this node's id) answers RST_STREAM(REFUSED_STREAM) before any headers;
//! `x-mock-grpc-delay-ms: N` waits N ms before answering (this call only);
//! `x-mock-grpc-tick-ms: N` (on `Ticks`) sends a tick every N ms instead of every 100 ms;
//! `x-mock-grpc-break-after: N` (on `Ticks`) drops the whole connection after N ticks, a node that
//! breaks its streams after their headers. Every answer carries `x-mock-grpc-timeout` with the
//! `grpc-timeout` the call arrived with, if it had one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::stream;
use http_body_util::{BodyExt, Empty, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response};
use prost::Message;
use tokio::time::{interval_at, Instant, MissedTickBehavior};

use crate::respond::{add_node_headers, health, RespBody};
use crate::tracker::ConnTracker;
use crate::State;

/// Path of the unary `Who` method.
pub const WHO_PATH: &str = "/hopping.test.v1.Echo/Who";
/// Path of the server-streaming `Ticks` method.
pub const TICKS_PATH: &str = "/hopping.test.v1.Echo/Ticks";
/// Path of the standard health method (grpc/grpc `doc/health-checking.md`).
pub const HEALTH_CHECK_PATH: &str = "/grpc.health.v1.Health/Check";

/// Gap between two `Ticks` messages.
const TICK_EVERY: Duration = Duration::from_millis(100);
/// Largest request body read (4 MiB, gRPC's usual default message limit).
const MAX_REQUEST: usize = 4 * 1024 * 1024;
/// Length of the gRPC message prefix: compressed flag (1 byte) + big-endian length (4 bytes).
const PREFIX_LEN: usize = 5;

const CODE_OK: u32 = 0;
const CODE_INVALID_ARGUMENT: u32 = 3;
const CODE_UNIMPLEMENTED: u32 = 12;

/// The messages of `hopping.test.v1` (proto/echo.proto), written by hand so no `protoc` is needed.
pub mod proto {
    /// `Who` request: no fields.
    #[derive(Clone, PartialEq, Eq, prost::Message)]
    pub struct WhoRequest {}

    /// `Who` reply: the id of the node that served the call.
    #[derive(Clone, PartialEq, Eq, prost::Message)]
    pub struct WhoReply {
        /// Node id.
        #[prost(string, tag = "1")]
        pub node: String,
    }

    /// `Ticks` request: how many ticks to send; 0 streams until the client cancels.
    #[derive(Clone, PartialEq, Eq, prost::Message)]
    pub struct TicksRequest {
        /// Number of ticks (0 = unbounded).
        #[prost(uint32, tag = "1")]
        pub count: u32,
    }

    /// `grpc.health.v1.HealthCheckRequest`: the service asked about (any name is answered).
    #[derive(Clone, PartialEq, Eq, prost::Message)]
    pub struct HealthCheckRequest {
        /// Service name; empty = the whole server.
        #[prost(string, tag = "1")]
        pub service: String,
    }

    /// `grpc.health.v1.HealthCheckResponse`: `status` 1 = SERVING, 2 = NOT_SERVING.
    #[derive(Clone, PartialEq, Eq, prost::Message)]
    pub struct HealthCheckResponse {
        /// `ServingStatus` value.
        #[prost(int32, tag = "1")]
        pub status: i32,
    }

    /// One streamed tick.
    #[derive(Clone, PartialEq, Eq, prost::Message)]
    pub struct Tick {
        /// Node id.
        #[prost(string, tag = "1")]
        pub node: String,
        /// Sequence number, starting at 1.
        #[prost(uint64, tag = "2")]
        pub seq: u64,
    }
}

/// Takes a message; returns it as one uncompressed gRPC frame (5-byte prefix + protobuf bytes).
///
/// # Panics
/// When the encoded message exceeds 4 GiB, which gRPC framing cannot express.
pub fn encode_frame<M: Message>(message: &M) -> Bytes {
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(PREFIX_LEN + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).expect("a gRPC message is shorter than 4 GiB"));
    message
        .encode(&mut buf)
        .expect("the buffer was reserved with the message's encoded length");
    buf.freeze()
}

/// Takes bytes starting at a gRPC frame; returns `(compressed, message, consumed)`, or `None`
/// while the frame is incomplete.
pub fn split_frame(buf: &[u8]) -> Option<(bool, &[u8], usize)> {
    let prefix = buf.get(..PREFIX_LEN)?;
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]);
    let end = PREFIX_LEN.checked_add(usize::try_from(len).ok()?)?;
    let message = buf.get(PREFIX_LEN..end)?;
    Some((prefix[0] != 0, message, end))
}

/// Takes one request on the gRPC port; returns its response (the service never fails).
pub(crate) async fn handle(
    state: Arc<State>,
    tracker: Arc<ConnTracker>,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, h2::Error> {
    let path = req.uri().path().to_owned();
    let goaway_after = state.goaway_after.load(Ordering::Relaxed);
    tracker.count_stream(req.version(), goaway_after);
    state.admit(&path).await;
    let knob = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let refuse = req
        .headers()
        .get("x-mock-grpc-refuse")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "1" || v == state.id);
    if path != "/health" && refuse {
        // hyper resets the stream with the reason found in the service's error.
        return Err(h2::Error::from(h2::Reason::REFUSED_STREAM));
    }
    if let Some(ms) = knob("x-mock-grpc-delay-ms") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let break_after = knob("x-mock-grpc-break-after");
    let timeout = req.headers().get("grpc-timeout").cloned();
    let mut resp = match (path.as_str(), forced_status(req.headers())) {
        ("/health", _) => health(&state),
        (HEALTH_CHECK_PATH, _) => health_check(&state, req).await,
        (WHO_PATH | TICKS_PATH, Some(forced)) => forced.response(),
        (WHO_PATH, None) => who(&state, req).await,
        (TICKS_PATH, None) => ticks(&state, req, break_after.map(|n| (n, tracker))).await,
        _ => trailers_only(CODE_UNIMPLEMENTED, Some("unknown method")),
    };
    if let Some(t) = timeout {
        resp.headers_mut().insert("x-mock-grpc-timeout", t);
    }
    add_node_headers(&state, resp.headers_mut());
    Ok(resp)
}

/// A status forced by the `x-mock-grpc-*` request headers.
struct Forced {
    code: u32,
    message: Option<String>,
    /// `x-mock-grpc-framing: separate`: headers, then a trailers frame (no DATA) instead of a
    /// trailers-only HEADERS frame.
    separate: bool,
}

impl Forced {
    fn response(&self) -> Response<RespBody> {
        if !self.separate {
            return trailers_only(self.code, self.message.as_deref());
        }
        let trailers = status_trailers(self.code, self.message.as_deref());
        let frames = stream::iter([Ok(Frame::trailers(trailers))]);
        grpc_response(StreamBody::new(frames).boxed_unsync())
    }
}

fn forced_status(headers: &HeaderMap) -> Option<Forced> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let code = text("x-mock-grpc-status")?.trim().parse::<u32>().ok()?;
    Some(Forced {
        code,
        message: text("x-mock-grpc-message").map(str::to_owned),
        separate: text("x-mock-grpc-framing").is_some_and(|f| f.eq_ignore_ascii_case("separate")),
    })
}

async fn who(state: &State, req: Request<Incoming>) -> Response<RespBody> {
    if let Err(message) = read_request::<proto::WhoRequest>(req).await {
        return trailers_only(CODE_INVALID_ARGUMENT, Some(&message));
    }
    let reply = encode_frame(&proto::WhoReply {
        node: state.id.clone(),
    });
    let trailers = status_trailers(CODE_OK, None);
    let frames = [Ok(Frame::data(reply)), Ok(Frame::trailers(trailers))];
    grpc_response(StreamBody::new(stream::iter(frames)).boxed_unsync())
}

/// `Health/Check`: SERVING (1), or NOT_SERVING (2) while the node is set down (main health
/// switch or the gRPC-only knob); answered for any service name.
async fn health_check(state: &State, req: Request<Incoming>) -> Response<RespBody> {
    if let Err(message) = read_request::<proto::HealthCheckRequest>(req).await {
        return trailers_only(CODE_INVALID_ARGUMENT, Some(&message));
    }
    let down = state.health_is_down() || state.grpc_down.load(Ordering::Relaxed);
    let reply = encode_frame(&proto::HealthCheckResponse {
        status: if down { 2 } else { 1 },
    });
    let trailers = status_trailers(CODE_OK, None);
    let frames = [Ok(Frame::data(reply)), Ok(Frame::trailers(trailers))];
    grpc_response(StreamBody::new(stream::iter(frames)).boxed_unsync())
}

/// A header's value as milliseconds (a positive integer), if present and valid.
fn header_ms(headers: &HeaderMap, name: &str) -> Option<Duration> {
    let ms = headers
        .get(name)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()?;
    (ms > 0).then(|| Duration::from_millis(ms))
}

/// `break_after`: after that many ticks, drop the connection the call came on. The stream counts
/// in `grpc_open_ticks` until it ends or the client cancels it ([`OpenTicks`]).
async fn ticks(
    state: &State,
    req: Request<Incoming>,
    break_after: Option<(u64, Arc<ConnTracker>)>,
) -> Response<RespBody> {
    let every = header_ms(req.headers(), "x-mock-grpc-tick-ms").unwrap_or(TICK_EVERY);
    let count = match read_request::<proto::TicksRequest>(req).await {
        Ok(request) => u64::from(request.count),
        Err(message) => return trailers_only(CODE_INVALID_ARGUMENT, Some(&message)),
    };
    let mut interval = interval_at(Instant::now() + every, every);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let node = state.id.clone();
    let open = OpenTicks::new(&state.grpc_open_ticks);
    // State: (interval, next seq, finished). count = 0 never finishes: the client cancels.
    let frames = stream::unfold(
        (interval, 1_u64, false),
        move |(mut interval, seq, finished)| {
            // Held by the stream: dropped when it ends or is cancelled.
            let _open = &open;
            let node = node.clone();
            let break_after = break_after.clone();
            async move {
                if finished {
                    return None;
                }
                if let Some((n, tracker)) = break_after.as_ref().filter(|(n, _)| seq > *n) {
                    // One more tick period first, so the last tick is flushed before the break.
                    interval.tick().await;
                    break_connection(*n, tracker);
                    return std::future::pending().await;
                }
                if count != 0 && seq > count {
                    let trailers = Frame::trailers(status_trailers(CODE_OK, None));
                    return Some((Ok(trailers), (interval, seq, true)));
                }
                interval.tick().await;
                let tick = encode_frame(&proto::Tick { node, seq });
                Some((Ok(Frame::data(tick)), (interval, seq + 1, false)))
            }
        },
    );
    grpc_response(StreamBody::new(frames).boxed_unsync())
}

/// Drops the connection of a `Ticks` call that asked for `x-mock-grpc-break-after: n`.
fn break_connection(n: u64, tracker: &ConnTracker) {
    eprintln!(
        "mock-backend: breaking the gRPC connection after {n} ticks (x-mock-grpc-break-after)"
    );
    tracker.kill.notify_one();
}

/// Reads the request body (bounded) and decodes its single message; empty bodies decode as
/// the default message. Returns a grpc-message text on failure.
async fn read_request<M: Message + Default>(req: Request<Incoming>) -> Result<M, String> {
    let body = Limited::new(req.into_body(), MAX_REQUEST)
        .collect()
        .await
        .map_err(|err| format!("reading the request failed: {err}"))?
        .to_bytes();
    if body.is_empty() {
        return Ok(M::default());
    }
    let Some((compressed, message, _)) = split_frame(&body) else {
        return Err("truncated gRPC frame".to_owned());
    };
    if compressed {
        return Err("compressed messages are not supported".to_owned());
    }
    M::decode(message).map_err(|err| format!("decoding the request failed: {err}"))
}

fn grpc_response(body: RespBody) -> Response<RespBody> {
    let mut resp = Response::new(body);
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    resp
}

/// A trailers-only answer: `:status 200` with `grpc-status` (and `grpc-message`) in the single
/// HEADERS frame, which hyper ends with END_STREAM because the body is empty.
fn trailers_only(code: u32, message: Option<&str>) -> Response<RespBody> {
    let mut resp = grpc_response(Empty::new().boxed_unsync());
    let status = status_trailers(code, message);
    resp.headers_mut().extend(status);
    resp
}

/// Takes a gRPC status code and optional message (sent as given, so percent-encode it first);
/// returns the `grpc-status`/`grpc-message` fields.
fn status_trailers(code: u32, message: Option<&str>) -> HeaderMap {
    let mut fields = HeaderMap::new();
    fields.insert("grpc-status", HeaderValue::from(code));
    if let Some(value) = message.and_then(|m| HeaderValue::from_str(m).ok()) {
        fields.insert("grpc-message", value);
    }
    fields
}

/// One open `Ticks` stream in the node's `grpc_open_ticks` count: counted when made, uncounted when
/// dropped (the stream finished, or the client's RST_STREAM dropped it).
struct OpenTicks(Arc<AtomicU64>);

impl OpenTicks {
    fn new(count: &Arc<AtomicU64>) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        OpenTicks(count.clone())
    }
}

impl Drop for OpenTicks {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let tick = proto::Tick {
            node: "n1".to_owned(),
            seq: 7,
        };
        let frame = encode_frame(&tick);
        let (compressed, message, consumed) = split_frame(&frame).expect("a whole frame");
        assert!(!compressed);
        assert_eq!(consumed, frame.len());
        assert_eq!(proto::Tick::decode(message).expect("valid protobuf"), tick);
        assert!(split_frame(&frame[..frame.len() - 1]).is_none());
    }
}
