//! `GET /ws`: the WebSocket endpoint.
//!
//! Owns the handshake (lenient `Connection`/`Upgrade` token matching, subprotocol choice) and one
//! spawned session task per socket, tracked in the node's task set. A session sends the hello
//! message, echoes text and binary messages, answers pings (tungstenite queues the pong, the
//! session flushes it), and runs the query knobs. `POST /control/health` never touches open
//! sockets; node shutdown closes them with 1001.
//!
//! Query knobs: `protocol=X` (select X; empty selects none), `tick_ms=N` (text `tick <id> <seq>`
//! every N ms), `ping_every_ms=N` (Ping frames), `close_after_ms=N&close_code=C&close_reason=R`
//! (send Close after N ms; code default 1000), `drop_after_ms=N` (drop the TCP connection after
//! N ms without a Close frame: the peer sees FIN), `reset_after_ms=N` (the same with RST instead
//! of FIN), `echo_headers=1` (the hello also carries `headers`: the handshake
//! headers as `[name, value]` pairs in received order, names lower-case), `report_pings=1` (each
//! Ping received is also answered by a text message `ping <payload>`, so a test can tell the node
//! saw it), `fragments=N&fragment_ms=M` (after the hello, one binary message sent as N fragments,
//! one every M ms, default 50; fragment `i` (1-based) carries the text `frag-<i>;`, so a test can
//! kill the node mid-message and tell which fragments arrived). Every text or binary message
//! received counts in `GET /control/stats` `ws_messages`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use hyper::body::Incoming;
use hyper::header::{
    HeaderMap, HeaderName, HeaderValue, CONNECTION, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY,
    SEC_WEBSOCKET_PROTOCOL, SEC_WEBSOCKET_VERSION, UPGRADE,
};
use hyper::upgrade::Upgraded;
use hyper::{Request, Response, StatusCode, Version};
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::{interval_at, Instant, Interval, MissedTickBehavior};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::respond::{error_response, query_param, RespBody};
use crate::tracker::{sleep_until_opt, ConnTracker};
use crate::State;

/// Bytes tungstenite reads per call; a larger message takes several reads.
const READ_CHUNK: usize = 4096;

/// The socket's settings: tungstenite's defaults but a 4 KiB read chunk. Its default, 128 KiB,
/// is allocated and zeroed for every socket: in a hop storm (`bench/ws-hop.sh`) the node taking
/// ~5,000 new sockets at once spent most of its time in the page faults of those buffers, about
/// as much CPU as the gateway re-dialling them.
fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(READ_CHUNK)
}

/// After we send Close, how long the peer gets to answer before the socket is dropped.
const CLOSE_GRACE: Duration = Duration::from_secs(5);
/// Close code sent to every open socket when the node shuts down ("going away").
const SHUTDOWN_CLOSE_CODE: u16 = 1001;

/// The session's first message: the node, the conn id and the node hopped from, as the request
/// headers carried them, and every request header with `echo_headers=1` in `query`.
fn hello(state: &State, headers: &HeaderMap, query: Option<&str>) -> String {
    let mut hello = json!({
        "node": state.id,
        "conn_id": header_text(headers, "x-conn-id"),
        "hopped_from": header_text(headers, "x-hopped-from"),
    });
    if query_param(query, "echo_headers").as_deref() == Some("1") {
        let pairs: Vec<[String; 2]> = headers
            .iter()
            .map(|(name, value)| {
                [
                    name.as_str().to_owned(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                ]
            })
            .collect();
        hello["headers"] = json!(pairs);
    }
    hello.to_string()
}

/// Takes a `GET /ws` request; returns the 101 answer (and spawns the session that runs once the
/// upgrade completes), or a JSON error when the request is not a valid WebSocket upgrade.
/// One check per header of the upgrade (RFC 6455 section 4.2.1) and per query knob of SPEC
/// section 9, each with its own error.
pub(crate) fn upgrade(
    state: &Arc<State>,
    tracker: &Arc<ConnTracker>,
    mut req: Request<Incoming>,
) -> Response<RespBody> {
    let headers = req.headers();
    if req.version() != Version::HTTP_11 {
        let error = "a WebSocket needs an HTTP/1.1 upgrade";
        return error_response(state, StatusCode::BAD_REQUEST, error);
    }
    if !has_token(headers, &CONNECTION, "upgrade") || !has_token(headers, &UPGRADE, "websocket") {
        let error = "expected a WebSocket upgrade";
        return upgrade_required(state, error, UPGRADE, "websocket");
    }
    if headers
        .get(SEC_WEBSOCKET_VERSION)
        .map(HeaderValue::as_bytes)
        != Some(b"13")
    {
        let error = "Sec-WebSocket-Version must be 13";
        return upgrade_required(state, error, SEC_WEBSOCKET_VERSION, "13");
    }
    let Some(key) = headers.get(SEC_WEBSOCKET_KEY) else {
        return error_response(
            state,
            StatusCode::BAD_REQUEST,
            "Sec-WebSocket-Key is missing",
        );
    };
    let accept = derive_accept_key(key.as_bytes());
    let query = req.uri().query();
    let protocol = match query_param(query, "protocol") {
        Some(chosen) if chosen.is_empty() => None,
        Some(chosen) => Some(chosen),
        None => first_offered_protocol(headers),
    };
    let protocol = match protocol.map(|p| HeaderValue::from_str(&p)).transpose() {
        Ok(protocol) => protocol,
        Err(_) => {
            return error_response(
                state,
                StatusCode::BAD_REQUEST,
                "protocol is not a valid header value",
            )
        }
    };
    let knobs = Knobs::parse(query);
    let hello = hello(state, headers, query);

    tracker.exempt();
    let on_upgrade = hyper::upgrade::on(&mut req);
    let id: Arc<str> = Arc::from(state.id.as_str());
    let shutdown = state.shutdown.subscribe();
    let tracker = Arc::clone(tracker);
    let st = Arc::clone(state);
    state.tasks.spawn(async move {
        // The upgrade fails only when the client left before the 101 went out: nothing to serve.
        if let Ok(upgraded) = on_upgrade.await {
            session(upgraded, knobs, hello, id, shutdown, tracker, st).await;
        }
    });

    let mut resp = Response::new(RespBody::default());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let out = resp.headers_mut();
    out.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    out.insert(UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        out.insert(SEC_WEBSOCKET_ACCEPT, accept);
    }
    if let Some(protocol) = protocol {
        out.insert(SEC_WEBSOCKET_PROTOCOL, protocol);
    }
    resp
}

/// True when any comma-separated token of any `name` header equals `token`, ignoring case.
/// A 426 Upgrade Required answer with `error`, carrying the header `name: value` the client must
/// send instead (RFC 6455 section 4.2.2, RFC 9110 section 15.5.22).
fn upgrade_required(
    state: &State,
    error: &str,
    name: HeaderName,
    value: &'static str,
) -> Response<RespBody> {
    let mut resp = error_response(state, StatusCode::UPGRADE_REQUIRED, error);
    resp.headers_mut()
        .insert(name, HeaderValue::from_static(value));
    resp
}

fn has_token(headers: &HeaderMap, name: &HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

fn first_offered_protocol(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .find(|p| !p.is_empty())
        .map(str::to_owned)
}

fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
}

/// The session's query knobs.
#[derive(Debug)]
struct Knobs {
    tick_every: Option<Duration>,
    ping_every: Option<Duration>,
    close_after: Option<Duration>,
    close_code: u16,
    close_reason: String,
    drop_after: Option<Duration>,
    /// Ends the connection with RST (after `drop_after` the peer sees FIN).
    reset_after: Option<Duration>,
    report_pings: bool,
    /// One binary message in this many fragments after the hello (`fragments=N`); 0 = none.
    fragments: u32,
    /// Pause between those fragments (`fragment_ms=M`, default 50 ms).
    fragment_every: Duration,
}

/// Default pause between the fragments of `fragments=N`.
const DEFAULT_FRAGMENT_MS: u64 = 50;

impl Knobs {
    fn parse(query: Option<&str>) -> Self {
        let ms = |key: &str| {
            query_param(query, key)
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_millis)
        };
        // A zero period would make an interval spin (tokio panics on it): treat it as off.
        let period = |key: &str| ms(key).filter(|d| !d.is_zero());
        Self {
            tick_every: period("tick_ms"),
            ping_every: period("ping_every_ms"),
            close_after: ms("close_after_ms"),
            close_code: query_param(query, "close_code")
                .and_then(|c| c.parse().ok())
                .unwrap_or(1000),
            close_reason: query_param(query, "close_reason").unwrap_or_default(),
            drop_after: ms("drop_after_ms"),
            reset_after: ms("reset_after_ms"),
            report_pings: query_param(query, "report_pings").as_deref() == Some("1"),
            fragments: query_param(query, "fragments")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            fragment_every: period("fragment_ms")
                .unwrap_or(Duration::from_millis(DEFAULT_FRAGMENT_MS)),
        }
    }
}

/// Runs one WebSocket until the peer leaves, a knob ends it, or the node shuts down.
///
/// Longer than 80 lines on purpose: one `select!` loop whose arms (messages, ticks, knobs,
/// shutdown) share the session state.
async fn session(
    upgraded: Upgraded,
    knobs: Knobs,
    hello: String,
    id: Arc<str>,
    mut shutdown: watch::Receiver<bool>,
    tracker: Arc<ConnTracker>,
    state: Arc<State>,
) {
    let mut ws =
        WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(ws_config()))
            .await;
    if ws.send(Message::text(hello)).await.is_err() {
        return;
    }
    let start = Instant::now();
    let mut ticks = knobs.tick_every.map(every);
    let mut pings = knobs.ping_every.map(every);
    let mut fragments = (knobs.fragments > 0).then(|| every(knobs.fragment_every));
    let mut fragment: u32 = 0;
    let close_at = knobs.close_after.map(|after| start + after);
    let drop_at = knobs.drop_after.map(|after| start + after);
    let reset_at = knobs.reset_after.map(|after| start + after);
    let mut seq: u64 = 0;
    // Set once we have sent Close: from then on we only wait for the peer's Close.
    let mut closing_until: Option<Instant> = None;
    loop {
        let open = closing_until.is_none();
        let outgoing = tokio::select! {
            incoming = ws.next() => match incoming {
                // Stream end: the close handshake finished or the peer went away.
                None | Some(Err(_)) => return,
                Some(Ok(Message::Text(text))) if open => {
                    state.record_ws_message();
                    Some(Message::Text(text))
                }
                Some(Ok(Message::Binary(data))) if open => {
                    state.record_ws_message();
                    Some(Message::Binary(data))
                }
                // tungstenite queued the Pong; sending the report flushes both.
                Some(Ok(Message::Ping(payload))) if open && knobs.report_pings => {
                    Some(Message::text(format!("ping {}", String::from_utf8_lossy(&payload))))
                }
                // tungstenite queued the Pong (or the Close reply): a flush sends it now.
                Some(Ok(Message::Ping(_) | Message::Close(_))) => None,
                Some(Ok(_)) => continue,
            },
            () = tick(&mut ticks), if open => {
                seq += 1;
                Some(Message::text(format!("tick {id} {seq}")))
            }
            () = tick(&mut pings), if open => Some(Message::Ping(Bytes::from_static(b"mock-ping"))),
            () = tick(&mut fragments), if open => {
                fragment += 1;
                if fragment == knobs.fragments {
                    fragments = None;
                }
                Some(fragment_message(fragment, knobs.fragments))
            }
            () = sleep_until_opt(close_at), if open => {
                closing_until = Some(Instant::now() + CLOSE_GRACE);
                Some(close_message(knobs.close_code, &knobs.close_reason))
            }
            _ = shutdown.wait_for(|stop| *stop), if open => {
                closing_until = Some(Instant::now() + CLOSE_GRACE);
                Some(close_message(SHUTDOWN_CLOSE_CODE, "node shutting down"))
            }
            // Dropping the socket without a Close frame: the peer sees a bare FIN.
            () = sleep_until_opt(drop_at) => return,
            // The same with RST: the socket closes with SO_LINGER 0 when the session drops it.
            () = sleep_until_opt(reset_at) => {
                tracker.reset_on_close();
                return;
            }
            () = sleep_until_opt(closing_until) => return,
        };
        let written = match outgoing {
            Some(message) => ws.send(message).await,
            None => ws.flush().await,
        };
        if written.is_err() {
            return;
        }
    }
}

/// Fragment `i` (1-based) of `n` of the `fragments=N` message: binary first, continuations after.
fn fragment_message(i: u32, n: u32) -> Message {
    let op = if i == 1 {
        OpCode::Data(Data::Binary)
    } else {
        OpCode::Data(Data::Continue)
    };
    let payload = Bytes::from(format!("frag-{i};"));
    Message::Frame(Frame::message(payload, op, i == n))
}

fn close_message(code: u16, reason: &str) -> Message {
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: reason.to_owned().into(),
    }))
}

/// An interval whose first tick is one period from now.
fn every(period: Duration) -> Interval {
    let mut interval = interval_at(Instant::now() + period, period);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    interval
}

async fn tick(interval: &mut Option<Interval>) {
    match interval {
        Some(interval) => {
            interval.tick().await;
        }
        None => std::future::pending().await,
    }
}
