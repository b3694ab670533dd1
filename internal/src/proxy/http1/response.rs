//! The response half of the codec: the status line and fields of an answer to an HTTP/1.x
//! client, with the framing the body gets (RFC 9112 sections 4, 6 and 9.3; the rules hyper's
//! server applies, so clients see the same heads as before).
//!
//! Rule by rule:
//! - Section 4: `HTTP-version SP status-code SP reason-phrase CRLF`; the version is the client's
//!   (`HTTP/1.0` to a 1.0 client, section 2.5), the reason the node's own (hyper's `ReasonPhrase`)
//!   or the canonical one.
//! - Section 6.3 rules 1 and 2 / RFC 9110 sections 6.4.1, 8.6: no body after a `HEAD`, a 1xx, a
//!   204, a 304 or a 2xx to `CONNECT`; a 1xx, 204, 304 or 2xx-to-`CONNECT` gets no added
//!   `Content-Length`, nor does a `HEAD` answer of unknown length.
//! - Section 6.1, 6.2: a given `Content-Length` frames the body; else a body of known length gets
//!   one; else chunked to an HTTP/1.1 client, close-delimited to an HTTP/1.0 one (section 6.3
//!   rule 8: the connection then closes).
//! - Section 9.3, 9.6: `Connection: close` when this is the connection's last answer (HTTP/1.1);
//!   `Connection: keep-alive` to an HTTP/1.0 client whose connection stays open.
//! - RFC 9110 section 6.6.1: a `Date` field, formatted once per second per thread.

use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{header, HeaderMap, HeaderValue, Method, StatusCode};

use super::request::has_token;

/// How the body after a head is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// No body bytes at all (HEAD, 1xx, 204, 304, an empty body).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// The chunked coding ([`super::chunked`]).
    Chunked,
    /// Raw bytes to the connection's close.
    CloseDelimited,
}

/// What the answer's head depends on besides the response itself.
#[derive(Debug, Clone, Copy)]
pub struct Answering<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The client spoke HTTP/1.0.
    pub http10: bool,
    /// The connection may stay open after this answer (the request allows it, no drain, ...).
    pub keep_alive: bool,
}

/// The exact length of a body, or `None` when unknown, and whether it is known to be empty.
#[derive(Debug, Clone, Copy)]
pub struct BodyLen {
    /// `size_hint().exact()`.
    pub exact: Option<u64>,
    /// `is_end_stream()`.
    pub empty: bool,
}

/// Serialises the head of `status`/`headers` (and the framing fields the rules add) into `dst`.
/// Returns the body's encoding and whether the connection stays open after the answer.
pub fn encode_head(
    dst: &mut Vec<u8>,
    status: StatusCode,
    reason: Option<&[u8]>,
    headers: &mut HeaderMap,
    a: Answering<'_>,
    body: BodyLen,
) -> (Encoding, bool) {
    let connect_ok = a.method == Method::CONNECT && status.is_success();
    let no_length = status.is_informational()
        || connect_ok
        || matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED);
    let body_allowed = !(no_length || a.method == Method::HEAD);
    let given = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let mut keep = a.keep_alive;
    let encoding = if status == StatusCode::SWITCHING_PROTOCOLS {
        Encoding::Empty
    } else if let Some(n) = given {
        if body_allowed && n > 0 {
            Encoding::Length(n)
        } else {
            Encoding::Empty
        }
    } else {
        headers.remove(header::CONTENT_LENGTH);
        match (body.exact, body.empty) {
            (_, true) | (Some(0), _) => {
                if !no_length && a.method != Method::HEAD {
                    headers.insert(header::CONTENT_LENGTH, HeaderValue::from_static("0"));
                }
                Encoding::Empty
            }
            (Some(n), _) => {
                if !no_length {
                    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(n));
                }
                if body_allowed {
                    Encoding::Length(n)
                } else {
                    Encoding::Empty
                }
            }
            (None, _) if !body_allowed => Encoding::Empty,
            (None, _) if a.http10 => {
                keep = false;
                Encoding::CloseDelimited
            }
            (None, _) => {
                headers.insert(
                    header::TRANSFER_ENCODING,
                    HeaderValue::from_static("chunked"),
                );
                Encoding::Chunked
            }
        }
    };
    if headers
        .get_all(header::CONNECTION)
        .iter()
        .any(|v| has_token(v.as_bytes(), b"close"))
    {
        keep = false;
    }
    if !keep && !a.http10 && status != StatusCode::SWITCHING_PROTOCOLS {
        if !headers
            .get_all(header::CONNECTION)
            .iter()
            .any(|v| has_token(v.as_bytes(), b"close"))
        {
            headers.append(header::CONNECTION, HeaderValue::from_static("close"));
        }
    } else if keep
        && a.http10
        && !headers
            .get_all(header::CONNECTION)
            .iter()
            .any(|v| has_token(v.as_bytes(), b"keep-alive"))
    {
        headers.append(header::CONNECTION, HeaderValue::from_static("keep-alive"));
    }
    status_line(dst, status, reason, a.http10);
    for (name, value) in headers.iter() {
        dst.extend_from_slice(name.as_str().as_bytes());
        dst.extend_from_slice(b": ");
        dst.extend_from_slice(value.as_bytes());
        dst.extend_from_slice(b"\r\n");
    }
    if !headers.contains_key(header::DATE) {
        dst.extend_from_slice(b"date: ");
        date(dst);
        dst.extend_from_slice(b"\r\n");
    }
    dst.extend_from_slice(b"\r\n");
    (encoding, keep)
}

/// The status line (section 4) into `dst`.
pub fn status_line(dst: &mut Vec<u8>, status: StatusCode, reason: Option<&[u8]>, http10: bool) {
    if !http10 && status == StatusCode::OK && reason.is_none() {
        dst.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    dst.extend_from_slice(if http10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " });
    dst.extend_from_slice(status.as_str().as_bytes());
    dst.push(b' ');
    match reason {
        Some(r) => dst.extend_from_slice(r),
        None => dst.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes()),
    }
    dst.extend_from_slice(b"\r\n");
}

/// The interim answer to `Expect: 100-continue` (RFC 9110 section 15.2.1).
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// `Date` value bytes (IMF-fixdate, RFC 9110 section 5.6.7), formatted once per second per thread.
struct CachedDate {
    bytes: [u8; 29],
    next: SystemTime,
}

thread_local!(static DATE: RefCell<CachedDate> = const {
    RefCell::new(CachedDate { bytes: [0; 29], next: UNIX_EPOCH })
});

/// Appends the current `Date` value to `dst`.
pub fn date(dst: &mut Vec<u8>) {
    DATE.with(|d| {
        let mut d = d.borrow_mut();
        let now = SystemTime::now();
        if now >= d.next {
            let s = httpdate::fmt_http_date(now);
            d.bytes.copy_from_slice(&s.as_bytes()[..29]);
            let into = now.duration_since(UNIX_EPOCH).unwrap_or_default();
            d.next =
                now + Duration::from_secs(1) - Duration::from_nanos(into.subsec_nanos().into());
        }
        dst.extend_from_slice(&d.bytes);
    });
}

#[cfg(test)]
#[path = "response_tests.rs"]
mod tests;
