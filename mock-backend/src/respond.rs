//! The response building blocks every handler shares: the body type ([`RespBody`]), the node's
//! identity headers, `GET /health`, JSON and text responses, and query parameters.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::{json, Value};

use crate::State;

/// Every response body the mock produces: never fails, may stream.
pub(crate) type RespBody = UnsyncBoxBody<Bytes, Infallible>;

/// Adds `x-node-id` (and the version/zone labels when configured) to a response.
pub(crate) fn add_node_headers(state: &State, headers: &mut hyper::HeaderMap) {
    headers.insert("x-node-id", state.id_header.clone());
    if let Some(version) = &state.version_header {
        headers.insert("x-node-version", version.clone());
    }
    if let Some(zone) = &state.zone_header {
        headers.insert("x-node-zone", zone.clone());
    }
}

/// `GET /health` on either port: `200 OK`, or `503` while set down.
pub(crate) fn health(state: &State) -> Response<RespBody> {
    if state.health_is_down() {
        text(StatusCode::SERVICE_UNAVAILABLE, "DOWN")
    } else {
        text(StatusCode::OK, "OK")
    }
}

/// Takes a status and a message; returns `{"node":..,"error":message}` with that status.
pub(crate) fn error_response(
    state: &State,
    status: StatusCode,
    message: &str,
) -> Response<RespBody> {
    json_response(status, &json!({"node": state.id, "error": message}))
}

/// Takes a status and a JSON value; returns it as an `application/json` response.
pub(crate) fn json_response(status: StatusCode, value: &Value) -> Response<RespBody> {
    full(status, "application/json", value.to_string())
}

/// Takes a status and a text; returns it as a `text/plain` response.
pub(crate) fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<RespBody> {
    full(status, "text/plain; charset=utf-8", body)
}

fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<RespBody> {
    let mut resp = Response::new(Full::new(body.into()).boxed_unsync());
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}

/// Takes a raw query string and a key; returns the first value for that key, percent-decoded
/// (`+` as space), `Some("")` for `key` or `key=`, `None` when absent.
pub(crate) fn query_param(query: Option<&str>, key: &str) -> Option<String> {
    query?
        .split('&')
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
        .find(|(k, _)| percent_decode(k) == key)
        .map(|(_, v)| percent_decode(v))
}

/// Decodes `%XX` escapes and `+`; malformed escapes are kept as written.
fn percent_decode(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_param_decodes_and_distinguishes_empty_from_absent() {
        let q = Some("a=1&protocol=&close_reason=bye%20now+x&flag");
        assert_eq!(query_param(q, "a").as_deref(), Some("1"));
        assert_eq!(query_param(q, "protocol").as_deref(), Some(""));
        assert_eq!(query_param(q, "close_reason").as_deref(), Some("bye now x"));
        assert_eq!(query_param(q, "flag").as_deref(), Some(""));
        assert_eq!(query_param(q, "missing"), None);
        assert_eq!(query_param(None, "a"), None);
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }
}
