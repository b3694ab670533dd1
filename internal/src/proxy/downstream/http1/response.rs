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

use http::{header, HeaderMap, Method, StatusCode};

use super::request::has_token;
use crate::proxy::http1_codec::fields::NodeFields;

/// How the body after a head is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// No body bytes at all (HEAD, 1xx, 204, 304, an empty body).
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// The chunked coding ([`crate::proxy::http1_codec::chunked`]).
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

/// What [`encode_head`] settled: the body's encoding, whether the connection stays open after the
/// answer, and whether the answer announced trailers (`Trailer`, RFC 9110 section 6.6.2: only
/// then are trailer fields sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadOut {
    /// How the body is sent.
    pub encoding: Encoding,
    /// The connection stays open after the answer.
    pub keep_alive: bool,
    /// A `Trailer` field was given.
    pub trailers: bool,
}

/// The fields of an answer: those of an HTTP/1.x node passed on as it sent them, if any
/// ([`NodeFields`]), then the map's (the gateway's own answer, or what the gateway adds to a
/// node's).
#[derive(Debug, Clone, Copy)]
pub struct Fields<'a> {
    /// The node's fields kept as bytes.
    pub node: Option<&'a NodeFields>,
    /// The map's fields, written after them.
    pub map: &'a HeaderMap,
}

/// Serialises the head of `status`/`fields` into `dst`, with the framing, `Connection` and
/// `Date` fields the module docs' rules add written after the given ones (`fields` are read once
/// and not changed).
///
/// Kept as one function: the per-request hot path, one pass over the fields.
pub fn encode_head(
    dst: &mut Vec<u8>,
    status: StatusCode,
    reason: Option<&[u8]>,
    fields: Fields<'_>,
    a: Answering<'_>,
    body: BodyLen,
) -> HeadOut {
    let headers = fields.map;
    // A node's fields passed on hold no `Connection` or `Trailer` (hop-by-hop), and a valid
    // `Content-Length` only (module docs of [`crate::proxy::http1_codec::fields`]).
    let (mut given, mut close, mut keep_token, mut date, mut trailers) = (
        fields.node.and_then(NodeFields::content_length),
        false,
        false,
        fields.node.is_some_and(NodeFields::has_date),
        false,
    );
    for (name, value) in headers {
        if *name == header::CONTENT_LENGTH {
            given = given.or_else(|| {
                std::str::from_utf8(value.as_bytes())
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok())
            });
        } else if *name == header::CONNECTION {
            close |= has_token(value.as_bytes(), b"close");
            keep_token |= has_token(value.as_bytes(), b"keep-alive");
        } else if *name == header::DATE {
            date = true;
        } else if *name == header::TRAILER {
            trailers = true;
        }
    }
    let connect_ok = a.method == Method::CONNECT && status.is_success();
    let no_length = status.is_informational()
        || connect_ok
        || matches!(status, StatusCode::NO_CONTENT | StatusCode::NOT_MODIFIED);
    let body_allowed = !(no_length || a.method == Method::HEAD);
    let mut keep = a.keep_alive && !close;
    // The framing field to add, if any: a length, or chunked.
    let mut add_len: Option<u64> = None;
    let mut add_chunked = false;
    let encoding = if status == StatusCode::SWITCHING_PROTOCOLS {
        Encoding::Empty
    } else if let Some(n) = given {
        if body_allowed && n > 0 {
            Encoding::Length(n)
        } else {
            Encoding::Empty
        }
    } else {
        match (body.exact, body.empty) {
            (_, true) | (Some(0), _) => {
                if !no_length && a.method != Method::HEAD {
                    add_len = Some(0);
                }
                Encoding::Empty
            }
            (Some(n), _) => {
                if !no_length {
                    add_len = Some(n);
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
                add_chunked = true;
                Encoding::Chunked
            }
        }
    };
    status_line(dst, status, reason, a.http10);
    if let Some(node) = fields.node {
        node.write(dst);
    }
    for (name, value) in headers {
        // An unparsable Content-Length is never passed on: the framing is the gateway's.
        if *name == header::CONTENT_LENGTH && given.is_none() {
            continue;
        }
        dst.extend_from_slice(name.as_str().as_bytes());
        dst.extend_from_slice(b": ");
        dst.extend_from_slice(value.as_bytes());
        dst.extend_from_slice(b"\r\n");
    }
    if let Some(n) = add_len {
        dst.extend_from_slice(b"content-length: ");
        dst.extend_from_slice(itoa_u64(n, &mut [0; 20]));
        dst.extend_from_slice(b"\r\n");
    }
    if add_chunked {
        dst.extend_from_slice(b"transfer-encoding: chunked\r\n");
    }
    let upgrade = status == StatusCode::SWITCHING_PROTOCOLS;
    if !keep && !a.http10 && !upgrade && !close {
        dst.extend_from_slice(b"connection: close\r\n");
    } else if keep && a.http10 && !keep_token {
        dst.extend_from_slice(b"connection: keep-alive\r\n");
    }
    if !date {
        dst.extend_from_slice(b"date: ");
        self::date(dst);
        dst.extend_from_slice(b"\r\n");
    }
    dst.extend_from_slice(b"\r\n");
    HeadOut {
        encoding,
        keep_alive: keep,
        trailers,
    }
}

/// `n` in decimal, into `buf`.
fn itoa_u64(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
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
