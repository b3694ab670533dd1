//! The main port's router and its plain HTTP endpoints (SPEC section 9).
//!
//! Owns: routing, `/health`, `/actuator/health/business`, `/data`, `/echo`, `/sse`,
//! `/download`, `/status/<code>`, `/abort`, the 404 answer, response helpers and query parsing.
//! Every response gets `x-node-id` (and `Keep-Alive: timeout=N` on HTTP/1.x while an idle
//! close is set with `advertise=1`). Request bodies are hashed as they stream and never
//! buffered whole; streamed responses are generated lazily, one chunk at a time.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode, Version};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::time::{interval_at, Instant, MissedTickBehavior};

use crate::respond::{
    add_node_headers, error_response, health, json_response, query_param, text, RespBody,
};
use crate::tracker::{ConnTracker, Tracked};
use crate::{State, DOWNLOAD_CHUNK, DOWNLOAD_PERIOD};

/// Gap between two `/sse` events.
const SSE_EVERY: Duration = Duration::from_millis(100);

/// The service error that makes hyper drop a request unanswered (`/abort`): HTTP/1.1 closes
/// the connection, h2 resets the stream.
#[derive(Debug)]
pub(crate) struct Abort;

impl fmt::Display for Abort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("request aborted on purpose by /abort")
    }
}

impl std::error::Error for Abort {}

/// Takes one request on the main port; returns its response, or [`Abort`] for `/abort`.
/// Control requests skip counting, hang and delay; every other request goes through them.
pub(crate) async fn handle(
    state: Arc<State>,
    tracker: Arc<ConnTracker>,
    req: Request<Incoming>,
) -> Result<Response<Tracked>, Abort> {
    let version = req.version();
    let in_flight = tracker.start(version);
    let mut resp = match req.uri().path().strip_prefix("/control/") {
        Some(action) => crate::control::handle(&state, req.method(), action, req.uri().query()),
        None => {
            tracker.count_stream(version, state.goaway_after.load(Ordering::Relaxed));
            route(&state, &tracker, req).await?
        }
    };
    add_node_headers(&state, resp.headers_mut());
    let idle_ms = *state.idle_ms.borrow();
    if version <= Version::HTTP_11
        && idle_ms > 0
        && state.advertise_keepalive.load(Ordering::Relaxed)
    {
        let secs = idle_ms.div_ceil(1000);
        if let Ok(value) = HeaderValue::from_str(&format!("timeout={secs}")) {
            resp.headers_mut().insert("keep-alive", value);
        }
    }
    Ok(resp.map(|body| Tracked::new(body, in_flight)))
}

async fn route(
    state: &Arc<State>,
    tracker: &Arc<ConnTracker>,
    req: Request<Incoming>,
) -> Result<Response<RespBody>, Abort> {
    let path = req.uri().path().to_owned();
    state.admit(&path).await;
    // Health paths keep answering: the node looks healthy while it resets real requests.
    let probe = matches!(path.as_str(), "/health" | "/actuator/health/business");
    if state.abort_all.load(Ordering::Relaxed) && !probe {
        let after = state.abort_after.load(Ordering::Relaxed);
        return Err(abort(req, (after != u64::MAX).then_some(after)).await);
    }
    let forced = state.status_all.load(Ordering::Relaxed);
    if forced != 0 && !probe {
        return Ok(status(state, &forced.to_string()));
    }
    Ok(match path.as_str() {
        "/health" => health(state),
        "/actuator/health/business" => business_health(state),
        "/data" => text(
            StatusCode::OK,
            format!("Data from Node {} (Port {})", state.id, state.port),
        ),
        "/echo" => echo(state, req).await,
        p if p.starts_with("/echo/") => echo(state, req).await,
        "/ws" => crate::ws::upgrade(state, tracker, req),
        "/sse" => sse(state),
        "/download" => download(state, req.uri().query()),
        "/abort" => {
            let limit =
                query_param(req.uri().query(), "after_bytes").and_then(|n| n.parse::<u64>().ok());
            return Err(abort(req, limit).await);
        }
        p => match p.strip_prefix("/status/") {
            Some(code) => status(state, code),
            None => not_found(state, p),
        },
    })
}

/// `/abort[?after_bytes=N]` (and every request under `/control/abort-all`): reads the body (all
/// of it, or its first `limit` bytes), then fails.
async fn abort(req: Request<Incoming>, limit: Option<u64>) -> Abort {
    let mut body = req.into_body();
    let mut seen: u64 = 0;
    while limit.is_none_or(|limit| seen < limit) {
        match body.frame().await {
            Some(Ok(frame)) => {
                let len = frame.data_ref().map_or(0, |data| data.len());
                seen += u64::try_from(len).unwrap_or(u64::MAX);
            }
            Some(Err(_)) | None => break,
        }
    }
    Abort
}

fn business_health(state: &State) -> Response<RespBody> {
    if state.health_is_down() {
        json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &json!({"business": "DOWN"}),
        )
    } else {
        json_response(StatusCode::OK, &json!({"business": "UP"}))
    }
}

/// Echoes the request as JSON, hashing the body chunk by chunk. `?read_rate=N` reads the body
/// at no more than N bytes/s (a slow node, for back-pressure tests); `first_byte_unix_us` is the
/// wall-clock time the first body byte arrived (microseconds since the Unix epoch, `null` without a body).
async fn echo(state: &State, req: Request<Incoming>) -> Response<RespBody> {
    let read_rate = query_param(req.uri().query(), "read_rate")
        .and_then(|n| n.parse::<u64>().ok())
        .filter(|n| *n > 0);
    let (parts, mut body) = req.into_parts();
    let mut hasher = Sha256::new();
    let mut body_len: u64 = 0;
    let mut first_byte_unix_us: Option<u128> = None;
    let started = Instant::now();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    if first_byte_unix_us.is_none() && !data.is_empty() {
                        first_byte_unix_us = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .ok()
                            .map(|d| d.as_micros());
                    }
                    hasher.update(data);
                    body_len += u64::try_from(data.len()).unwrap_or(u64::MAX);
                }
                if let Some(rate) = read_rate {
                    // Not before body_len / rate seconds after the start: the socket fills and
                    // the sender feels the back-pressure.
                    let due = Duration::from_secs_f64(body_len as f64 / rate as f64);
                    tokio::time::sleep_until(started + due).await;
                }
            }
            Err(err) => {
                let error =
                    format!("reading the request body failed after {body_len} bytes: {err}");
                return error_response(state, StatusCode::BAD_REQUEST, &error);
            }
        }
    }
    let headers: Vec<[String; 2]> = parts
        .headers
        .iter()
        .map(|(name, value)| {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            [name.as_str().to_owned(), value]
        })
        .collect();
    let body = json!({
        "node": state.id,
        "method": parts.method.as_str(),
        "path": parts.uri.path(),
        "query": parts.uri.query().unwrap_or(""),
        "version": format!("{:?}", parts.version),
        "authority": parts.uri.authority().map(|a| a.as_str()),
        "headers": headers,
        "body_len": body_len,
        "body_sha256": hex::encode(hasher.finalize()),
        "first_byte_unix_us": first_byte_unix_us.map(|us| us as u64),
    });
    json_response(StatusCode::OK, &body)
}

/// `text/event-stream` with `data: <id> <seq>` every 100 ms until the client leaves.
fn sse(state: &State) -> Response<RespBody> {
    let mut ticks = interval_at(Instant::now() + SSE_EVERY, SSE_EVERY);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let id: Arc<str> = Arc::from(state.id.as_str());
    let events = stream::unfold((ticks, 1_u64), move |(mut ticks, seq)| {
        let id = Arc::clone(&id);
        async move {
            ticks.tick().await;
            let event = Bytes::from(format!("data: {id} {seq}\n\n"));
            Some((Ok(Frame::data(event)), (ticks, seq + 1)))
        }
    });
    let mut resp = Response::new(StreamBody::new(events).boxed_unsync());
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// `?bytes=N[&chunked=1]`: N pattern bytes (byte i = i % 251) in 64 KiB chunks, made lazily.
fn download(state: &State, query: Option<&str>) -> Response<RespBody> {
    let Some(total) = query_param(query, "bytes").and_then(|n| n.parse::<u64>().ok()) else {
        return error_response(
            state,
            StatusCode::BAD_REQUEST,
            "bytes=N (a u64) is required",
        );
    };
    let chunked = matches!(query_param(query, "chunked").as_deref(), Some("1" | "true"));
    let pattern = state.pattern.clone();
    let chunks = stream::unfold(0_u64, move |offset| {
        let pattern = pattern.clone();
        async move {
            let left = total.checked_sub(offset).filter(|left| *left > 0)?;
            let len = usize::try_from(left).map_or(DOWNLOAD_CHUNK, |left| left.min(DOWNLOAD_CHUNK));
            let start =
                usize::try_from(offset % DOWNLOAD_PERIOD).expect("a value below 251 fits in usize");
            let chunk = pattern.slice(start..start + len);
            let next = offset + u64::try_from(len).expect("a chunk length fits in u64");
            Some((Ok(Frame::data(chunk)), next))
        }
    });
    let mut resp = Response::new(StreamBody::new(chunks).boxed_unsync());
    let headers = resp.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    if !chunked {
        headers.insert(CONTENT_LENGTH, HeaderValue::from(total));
    }
    resp
}

/// `/status/<code>`: that status with `{"node":..,"status":code}` (no body for 204/304).
fn status(state: &State, code: &str) -> Response<RespBody> {
    let status = code
        .parse::<u16>()
        .ok()
        .filter(|code| (200..=599).contains(code))
        .and_then(|code| StatusCode::from_u16(code).ok());
    let Some(status) = status else {
        let error = format!("status code {code:?} is not a number in 200..=599");
        return error_response(state, StatusCode::BAD_REQUEST, &error);
    };
    if matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED) {
        let mut resp = Response::new(Empty::new().boxed_unsync());
        *resp.status_mut() = status;
        return resp;
    }
    json_response(
        status,
        &json!({"node": state.id, "status": status.as_u16()}),
    )
}

fn not_found(state: &State, path: &str) -> Response<RespBody> {
    json_response(
        StatusCode::NOT_FOUND,
        &json!({"node": state.id, "error": "not found", "path": path}),
    )
}
