//! The heads of the upstream half of the codec: the request head the gateway writes to an
//! HTTP/1.1 node, and the node's response head parsed with httparse, with the framing of the
//! body that follows (RFC 9112 sections 3–7, 9.3; the rules hyper's client applied, so nodes see
//! the same requests and clients the same answers as before).
//!
//! Request head ([`encode_request`]), rule by rule:
//! - Section 3: `method SP request-target SP HTTP/1.1 CRLF`, the target in origin form (the
//!   path and query the route phase settled).
//! - Section 5: the fields as given, one `name: value CRLF` line each, names in lower case (as
//!   hyper sent them).
//! - Section 6: a `Content-Length` given frames the body; else a body known to be empty gets
//!   none (`Content-Length: 0` for `POST`, `PUT` and `PATCH`, whose empty body is content, RFC
//!   9110 section 8.6), a body of known size gets its length, and any other body is chunked.
//!
//! Response head ([`parse_response`]), rule by rule:
//! - Section 4: `HTTP-version SP status-code SP [reason-phrase] CRLF` (httparse, strict: no
//!   obs-fold, no space before a colon); at most [`MAX_FIELDS`] fields and [`MAX_HEAD`] bytes
//!   (hyper's client bounds).
//! - Section 6.3, in order: an answer to `HEAD`, a 1xx, a 204 or a 304 has no body (rule 1); a
//!   `Transfer-Encoding` whose last coding is `chunked` frames it chunked, any other coding makes
//!   it close-delimited (rule 4), and HTTP/1.0 with `Transfer-Encoding` is refused; with both
//!   fields the `Content-Length` is dropped and the connection not reused (rule 3); a valid
//!   `Content-Length` (repeated only with one value) frames it (rule 5), an invalid one is refused;
//!   otherwise the body runs to the connection's close (rule 8).
//! - RFC 9110 section 8.6: a 204 carrying framing fields is the node's mistake: its connection
//!   may hold stray body bytes, so it is not reused (CASE-27).
//! - Section 9.3: HTTP/1.1 is persistent unless `Connection: close`; HTTP/1.0 only with
//!   `Connection: keep-alive`.

use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Version};

use crate::proxy::head;

/// Largest response head accepted from a node (bytes): hyper's client buffer bound
/// (8 KiB + 100 × 4 KiB).
pub const MAX_HEAD: usize = 8192 + 4096 * 100;
/// Most fields in a node's response head: hyper's client default.
pub const MAX_FIELDS: usize = 100;

/// How a node's response body is framed (RFC 9112 section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// Exactly this many bytes (0: the answer ends at its head).
    Length(u64),
    /// The chunked coding ([`super::chunked::Decoder`]).
    Chunked,
    /// Raw bytes up to the connection's close.
    Close,
}

/// One parsed response head of a node.
#[derive(Debug)]
pub struct ResponseHead {
    /// Status, version and fields; field values share the head's bytes.
    pub parts: http::response::Parts,
    /// The body's framing.
    pub framing: BodyFraming,
    /// The connection may carry another request after this answer (section 9.3, and no framing
    /// conflict that could leave stray bytes).
    pub reusable: bool,
}

/// Why a node's response head is refused (the attempt fails; the answer is a 502).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    /// httparse refused the bytes, or a field failed `http`'s own checks.
    #[error("malformed response head from the node: {0}")]
    Malformed(&'static str),
    /// More than [`MAX_HEAD`] bytes without the head's end.
    #[error("response head from the node larger than {MAX_HEAD} bytes")]
    TooLarge,
    /// More than [`MAX_FIELDS`] fields.
    #[error("more than {MAX_FIELDS} fields in the node's response head")]
    TooManyFields,
}

/// Serialises the request head for an HTTP/1.1 node into `dst` (cleared first): `method`,
/// `target` (origin form), `headers`, and the framing field the module docs' rules add for a body
/// whose exact size is `exact` (`None`: unknown) and that is known to be empty when `empty`.
/// Returns how the body is to be sent: `Some(n)` exactly `n` bytes, `None` chunked.
pub fn encode_request(
    dst: &mut Vec<u8>,
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    exact: Option<u64>,
    empty: bool,
) -> Option<u64> {
    dst.clear();
    dst.extend_from_slice(method.as_str().as_bytes());
    dst.push(b' ');
    dst.extend_from_slice(target.as_bytes());
    dst.extend_from_slice(b" HTTP/1.1\r\n");
    let mut given = None;
    for (name, value) in headers {
        if name == header::CONTENT_LENGTH {
            given = std::str::from_utf8(value.as_bytes())
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok());
            if given.is_none() {
                // Not a length: never passed on (the body is framed below instead).
                continue;
            }
        } else if name == header::TRANSFER_ENCODING {
            // Hop-by-hop: the body's coding is this hop's choice.
            continue;
        }
        field(dst, name.as_str().as_bytes(), value.as_bytes());
    }
    let framing = match (given, exact, empty) {
        (Some(n), _, _) => Some(n),
        (None, _, true) => {
            if matches!(*method, Method::POST | Method::PUT | Method::PATCH) {
                field(dst, b"content-length", b"0");
            }
            Some(0)
        }
        (None, Some(n), false) => {
            use std::io::Write as _;
            write!(dst, "content-length: {n}\r\n").expect("writing to a Vec never fails");
            Some(n)
        }
        (None, None, false) => {
            field(dst, b"transfer-encoding", b"chunked");
            None
        }
    };
    dst.extend_from_slice(b"\r\n");
    framing
}

fn field(dst: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    dst.extend_from_slice(name);
    dst.extend_from_slice(b": ");
    dst.extend_from_slice(value);
    dst.extend_from_slice(b"\r\n");
}

/// Parses the response head at the start of `buf` (an answer to `method`); on success the head's
/// bytes are split off `buf` (the body and anything after it stay).
///
/// Returns `Ok(None)` while the head is incomplete and within [`MAX_HEAD`]. Interim (1xx) heads
/// are returned like final ones; the caller skips them.
///
/// # Errors
/// [`HeadError`] by the module docs' rules.
pub fn parse_response(
    buf: &mut BytesMut,
    method: &Method,
) -> Result<Option<ResponseHead>, HeadError> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let bytes: &[u8] = buf;
    let mut res = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut res, bytes, &mut slots)
    {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.len() > MAX_HEAD => return Err(HeadError::TooLarge),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyFields),
        Err(e) => return Err(HeadError::Malformed(malformed(e))),
    };
    if len > MAX_HEAD {
        return Err(HeadError::TooLarge);
    }
    let http11 = res.version == Some(1);
    let code = res.code.expect("httparse completed");
    let status =
        StatusCode::from_u16(code).map_err(|_| HeadError::Malformed("invalid status code"))?;
    let reason = res.reason.unwrap_or("");
    let custom_reason = !reason.is_empty() && status.canonical_reason() != Some(reason);
    let base = bytes.as_ptr() as usize;
    let mut spans = [[0u32; 4]; MAX_FIELDS];
    let n = res.headers.len();
    let at = |s: &[u8]| [(s.as_ptr() as usize - base) as u32, s.len() as u32];
    for (h, span) in res.headers.iter().zip(spans.iter_mut()) {
        let ([n0, nl], [v0, vl]) = (at(h.name.as_bytes()), at(h.value));
        *span = [n0, nl, v0, vl];
    }
    let reason_span = custom_reason.then(|| at(reason.as_bytes()));
    let raw = buf.split_to(len).freeze();
    let slice = |at: u32, len: u32| raw.slice(at as usize..(at + len) as usize);
    let mut headers = HeaderMap::with_capacity(n + 1);
    let mut f = Facts::default();
    for &[n0, nl, v0, vl] in &spans[..n] {
        let name = HeaderName::from_bytes(&raw[n0 as usize..(n0 + nl) as usize])
            .map_err(|_| HeadError::Malformed("invalid field name"))?;
        let value = HeaderValue::from_maybe_shared(slice(v0, vl))
            .map_err(|_| HeadError::Malformed("invalid field value"))?;
        f.see(&name, value.as_bytes(), http11)?;
        headers.append(name, value);
    }
    let (framing, mut reusable) = framing(&f, status, method);
    if f.te && f.cl.is_some() {
        headers.remove(header::CONTENT_LENGTH);
    }
    reusable &= f.keep_alive(http11);
    let mut parts = http::Response::new(()).into_parts().0;
    parts.status = status;
    parts.version = if http11 {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    };
    parts.headers = headers;
    if let Some([r0, rl]) = reason_span {
        if let Ok(r) = hyper::ext::ReasonPhrase::try_from(slice(r0, rl)) {
            parts.extensions.insert(r);
        }
    }
    Ok(Some(ResponseHead {
        parts,
        framing,
        reusable,
    }))
}

/// What the fields of a response head say about framing and persistence.
#[derive(Debug, Default)]
struct Facts {
    /// `Transfer-Encoding` seen, and whether its last coding is `chunked`.
    te: bool,
    chunked: bool,
    /// The one `Content-Length` value, if any was given.
    cl: Option<u64>,
    close: bool,
    keep_alive: bool,
}

impl Facts {
    fn see(&mut self, name: &HeaderName, v: &[u8], http11: bool) -> Result<(), HeadError> {
        if name == header::TRANSFER_ENCODING {
            if !http11 {
                return Err(HeadError::Malformed(
                    "Transfer-Encoding in an HTTP/1.0 answer",
                ));
            }
            self.te = true;
            // The last coding of all the field lines is what frames the body (section 6.1).
            self.chunked = v
                .rsplit(|b| *b == b',')
                .next()
                .is_some_and(|c| head::trim(c).eq_ignore_ascii_case(b"chunked"));
        } else if name == header::CONTENT_LENGTH {
            // RFC 9110 section 8.6: a list of one repeated value is that value.
            for part in v.split(|b| *b == b',') {
                let part = head::trim(part);
                let n = std::str::from_utf8(part)
                    .ok()
                    .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|s| s.parse::<u64>().ok())
                    .ok_or(HeadError::Malformed("invalid Content-Length"))?;
                match self.cl {
                    Some(m) if m != n => {
                        return Err(HeadError::Malformed("conflicting Content-Length values"))
                    }
                    _ => self.cl = Some(n),
                }
            }
        } else if name == header::CONNECTION {
            // One pass over the tokens for both (RFC 9110 section 7.6.1: a comma-separated list).
            for t in v.split(|b| *b == b',') {
                let t = head::trim(t);
                self.close |= t.eq_ignore_ascii_case(b"close");
                self.keep_alive |= t.eq_ignore_ascii_case(b"keep-alive");
            }
        }
        Ok(())
    }

    fn keep_alive(&self, http11: bool) -> bool {
        !self.close && (http11 || self.keep_alive)
    }
}

/// The body framing and whether it leaves the connection reusable (section 6.3; module docs).
fn framing(f: &Facts, status: StatusCode, method: &Method) -> (BodyFraming, bool) {
    if status == StatusCode::NO_CONTENT {
        return (BodyFraming::Length(0), !f.te && f.cl.is_none());
    }
    if *method == Method::HEAD || status.is_informational() || status == StatusCode::NOT_MODIFIED {
        return (BodyFraming::Length(0), true);
    }
    match (f.te, f.chunked, f.cl) {
        (true, true, cl) => (BodyFraming::Chunked, cl.is_none()),
        (true, false, _) => (BodyFraming::Close, false),
        (false, _, Some(n)) => (BodyFraming::Length(n), true),
        (false, _, None) => (BodyFraming::Close, false),
    }
}

fn malformed(e: httparse::Error) -> &'static str {
    match e {
        httparse::Error::HeaderName => "invalid field name",
        httparse::Error::HeaderValue => "invalid field value",
        httparse::Error::NewLine => "invalid line ending",
        httparse::Error::Status => "invalid status line",
        httparse::Error::Token => "invalid token",
        httparse::Error::Version => "invalid HTTP version",
        httparse::Error::TooManyHeaders => "too many fields",
    }
}

#[cfg(test)]
#[path = "node_head_tests.rs"]
mod tests;
