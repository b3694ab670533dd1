//! `/control/*`: the knobs tests turn on a running node.
//!
//! Owns the request-side view of the shared `State`: health switch (or flapping pattern), the
//! gRPC-only health switch, delay, hang, idle
//! keep-alive close (optionally advertised), h2 GOAWAY after N streams, abort-all (every request
//! behaves as `/abort`), status-all (every request answers one status), the gRPC read delay
//! (`grpc-read-delay?ms=N`: new gRPC connections receive every byte N ms late), and request stats
//! (with `grpc_connections`, the gRPC-port connections that carried a stream, and
//! `grpc_open_ticks`, the `Ticks` streams open now).
//! Control requests are never counted, delayed or held, so a test can always reach a node it
//! has made slow or unresponsive.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::PoisonError;

use hyper::{Method, Response, StatusCode};
use serde_json::json;

use crate::respond::{error_response, json_response, query_param, RespBody};
use crate::{Flap, State};

/// One `/control/<action>`.
#[derive(Debug, Clone, Copy)]
enum Action {
    Health,
    GrpcHealth,
    Delay,
    Hang,
    Unhang,
    Stats,
    ResetStats,
    Keepalive,
    Goaway,
    AbortAll,
    StatusAll,
    GrpcReadDelay,
}

impl Action {
    fn parse(action: &str) -> Option<Self> {
        Some(match action {
            "health" => Self::Health,
            "grpc-health" => Self::GrpcHealth,
            "delay" => Self::Delay,
            "hang" => Self::Hang,
            "unhang" => Self::Unhang,
            "stats" => Self::Stats,
            "reset-stats" => Self::ResetStats,
            "keepalive" => Self::Keepalive,
            "goaway" => Self::Goaway,
            "abort-all" => Self::AbortAll,
            "status-all" => Self::StatusAll,
            "grpc-read-delay" => Self::GrpcReadDelay,
            _ => return None,
        })
    }

    fn method(self) -> Method {
        match self {
            Self::Stats => Method::GET,
            Self::Health
            | Self::GrpcHealth
            | Self::Delay
            | Self::Hang
            | Self::Unhang
            | Self::ResetStats
            | Self::Keepalive
            | Self::Goaway
            | Self::AbortAll
            | Self::StatusAll
            | Self::GrpcReadDelay => Method::POST,
        }
    }
}

/// Takes the method, the path after `/control/` and the raw query; returns the answer.
pub(crate) fn handle(
    state: &State,
    method: &Method,
    action: &str,
    query: Option<&str>,
) -> Response<RespBody> {
    let Some(parsed) = Action::parse(action) else {
        let error = format!("unknown control action {action:?}");
        return error_response(state, StatusCode::NOT_FOUND, &error);
    };
    let expected = parsed.method();
    if *method != expected {
        let error = format!("/control/{action} takes {expected}");
        return error_response(state, StatusCode::METHOD_NOT_ALLOWED, &error);
    }
    match parsed {
        Action::Health => set_health(state, query),
        Action::GrpcHealth => set_grpc_health(state, query),
        Action::Delay => set_delay(state, query),
        Action::Hang | Action::Unhang => {
            let hang = matches!(parsed, Action::Hang);
            state.hang.send_replace(hang);
            json_response(StatusCode::OK, &json!({"node": state.id, "hang": hang}))
        }
        Action::Stats => stats_response(state),
        Action::ResetStats => {
            let mut stats = state.stats();
            stats.requests = 0;
            stats.paths.clear();
            stats.ws_messages = 0;
            drop(stats);
            stats_response(state)
        }
        Action::Keepalive => set_keepalive(state, query),
        Action::Goaway => set_goaway(state, query),
        Action::AbortAll => set_abort_all(state, query),
        Action::StatusAll => set_status_all(state, query),
        Action::GrpcReadDelay => set_number(
            state,
            NumberSetting {
                param: "ms",
                missing: "ms=N is required",
                slot: &state.grpc_read_delay_ms,
                key: "grpc_read_delay_ms",
            },
            query,
        ),
    }
}

fn set_health(state: &State, query: Option<&str>) -> Response<RespBody> {
    let mut flap = state.flap.lock().unwrap_or_else(PoisonError::into_inner);
    let down = match query_param(query, "state").as_deref() {
        Some("down") => true,
        Some("up") => false,
        Some("flap") => {
            // Each count defaults to 1 (down, up, down, ...); a count given must be a number.
            let count = |key| match query_param(query, key) {
                None => Some(1),
                Some(raw) => raw.parse::<u64>().ok(),
            };
            let (Some(down), Some(up)) = (count("down"), count("up")) else {
                drop(flap);
                return bad_request(state, "down=N and up=M (health answers) must be numbers");
            };
            *flap = Some(Flap { down, up, seen: 0 });
            drop(flap);
            let body = json!({"node": state.id, "state": "flap", "down": down, "up": up});
            return json_response(StatusCode::OK, &body);
        }
        _ => {
            drop(flap);
            return bad_request(state, "state=down|up|flap is required");
        }
    };
    *flap = None;
    state.down.store(down, Ordering::Relaxed);
    drop(flap);
    let label = if down { "down" } else { "up" };
    json_response(StatusCode::OK, &json!({"node": state.id, "state": label}))
}

/// `grpc-health?state=down|up`: a test knob that flips only the gRPC `Health/Check` answer
/// (NOT_SERVING while down), leaving `GET /health` as it is: the "alive but useless" gRPC node.
fn set_grpc_health(state: &State, query: Option<&str>) -> Response<RespBody> {
    let down = match query_param(query, "state").as_deref() {
        Some("down") => true,
        Some("up") => false,
        _ => return bad_request(state, "state=down|up is required"),
    };
    state.grpc_down.store(down, Ordering::Relaxed);
    let label = if down { "down" } else { "up" };
    json_response(
        StatusCode::OK,
        &json!({"node": state.id, "grpc_health": label}),
    )
}

fn set_delay(state: &State, query: Option<&str>) -> Response<RespBody> {
    let Some(ms) = parse_u64(query, "ms") else {
        return bad_request(state, "ms=N (milliseconds) is required");
    };
    state.delay_ms.store(ms, Ordering::Relaxed);
    json_response(StatusCode::OK, &json!({"node": state.id, "delay_ms": ms}))
}

fn set_keepalive(state: &State, query: Option<&str>) -> Response<RespBody> {
    let Some(ms) = parse_u64(query, "idle_ms") else {
        return bad_request(state, "idle_ms=N (milliseconds) is required");
    };
    let advertise = matches!(
        query_param(query, "advertise").as_deref(),
        Some("1" | "true")
    );
    let reset = matches!(query_param(query, "reset").as_deref(), Some("1" | "true"));
    state
        .advertise_keepalive
        .store(advertise, Ordering::Relaxed);
    state.idle_reset.store(reset, Ordering::Relaxed);
    state.idle_ms.send_replace(ms);
    let body = json!({"node": state.id, "idle_ms": ms, "advertise": advertise, "reset": reset});
    json_response(StatusCode::OK, &body)
}

fn set_goaway(state: &State, query: Option<&str>) -> Response<RespBody> {
    let setting = NumberSetting {
        param: "after",
        missing: "after=N (streams) is required",
        slot: &state.goaway_after,
        key: "goaway_after",
    };
    set_number(state, setting, query)
}

/// A number a control action stores: read from query `param`, kept in `slot`, echoed as `key`.
struct NumberSetting<'a> {
    param: &'static str,
    /// The 400 message when `param` is missing or not a number.
    missing: &'static str,
    slot: &'a AtomicU64,
    key: &'static str,
}

/// Stores the setting's number and answers `{"node", key: n}`; 400 when the query lacks it.
fn set_number(
    state: &State,
    setting: NumberSetting<'_>,
    query: Option<&str>,
) -> Response<RespBody> {
    let Some(n) = parse_u64(query, setting.param) else {
        return bad_request(state, setting.missing);
    };
    setting.slot.store(n, Ordering::Relaxed);
    json_response(StatusCode::OK, &json!({"node": state.id, setting.key: n}))
}

/// `abort-all[?after_bytes=N]` turns it on: every request except the health paths reads N body
/// bytes (or the whole body), then the connection drops unanswered, as `/abort`;
/// `abort-all?state=off` turns it off.
fn set_abort_all(state: &State, query: Option<&str>) -> Response<RespBody> {
    if query_param(query, "state").as_deref() == Some("off") {
        state.abort_all.store(false, Ordering::Relaxed);
        return json_response(
            StatusCode::OK,
            &json!({"node": state.id, "abort_all": false}),
        );
    }
    let after = match query_param(query, "after_bytes") {
        Some(raw) => match raw.parse::<u64>() {
            Ok(n) => n,
            Err(_) => return bad_request(state, "after_bytes=N (bytes) must be a number"),
        },
        None => u64::MAX,
    };
    state.abort_after.store(after, Ordering::Relaxed);
    state.abort_all.store(true, Ordering::Relaxed);
    let after = (after != u64::MAX).then_some(after);
    json_response(
        StatusCode::OK,
        &json!({"node": state.id, "abort_all": true, "after_bytes": after}),
    )
}

/// `status-all?code=N` (200..=599): every request except the health paths answers N, as
/// `/status/N` (a node failing real traffic while passing its probes); `code=0` turns it off.
fn set_status_all(state: &State, query: Option<&str>) -> Response<RespBody> {
    match parse_u64(query, "code") {
        Some(code) if code == 0 || (200..=599).contains(&code) => {
            state.status_all.store(code, Ordering::Relaxed);
            json_response(
                StatusCode::OK,
                &json!({"node": state.id, "status_all": code}),
            )
        }
        _ => bad_request(state, "status-all takes code=N (200..=599, or 0 = off)"),
    }
}

/// A 400 answer naming what the control request lacks (`message`, SPEC section 9).
fn bad_request(state: &State, message: &str) -> Response<RespBody> {
    error_response(state, StatusCode::BAD_REQUEST, message)
}

fn parse_u64(query: Option<&str>, key: &str) -> Option<u64> {
    query_param(query, key)?.parse().ok()
}

fn stats_response(state: &State) -> Response<RespBody> {
    let stats = state.stats();
    let body = json!({
        "node": state.id,
        "requests": stats.requests,
        "paths": stats.paths,
        "grpc_connections": state.grpc_connections.load(Ordering::Relaxed),
        "grpc_open_ticks": state.grpc_open_ticks.load(Ordering::Relaxed),
        "ws_messages": stats.ws_messages,
    });
    drop(stats);
    json_response(StatusCode::OK, &body)
}
