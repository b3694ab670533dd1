//! The request half of the codec: a request head parsed with httparse into [`http::request::Parts`]
//! with its body framing (RFC 9112 sections 2, 3, 5 and 6), judged by the rules of
//! [`crate::proxy::http1_codec::head`] (one set of rules: the same functions judge the parsed
//! fields here and the raw lines of a head httparse refuses).
//!
//! Rule by rule:
//! - RFC 9112 section 2.2: empty lines before the request-line are ignored (httparse skips them).
//! - Section 3: `method SP request-target SP HTTP-version`, single spaces, a token method, version
//!   1.0 or 1.1 (httparse); the request line, CR LF included, at most `max_request_line` bytes
//!   and the target below hyper's 65,534-byte bound (414); the target parses as an
//!   [`http::Uri`] (400).
//! - Section 5: field lines `token ":" OWS value OWS`, no obs-fold (section 5.2), no control
//!   character or DEL in a value (RFC 9110 section 5.5), at most `max_headers` lines and
//!   `max_header_bytes` bytes counted as `name: value\r\n` (431).
//! - Section 6.1 and 6.3: `Transfer-Encoding` exactly one `chunked`, never in HTTP/1.0, never with
//!   `Content-Length` (CASE-13); `Content-Length` digits only, repeated only with one value; the
//!   body is chunked, `Content-Length` bytes, or empty (a request has no close-delimited body).
//! - Section 9.3: HTTP/1.1 is persistent unless a `Connection: close` is given; HTTP/1.0 only with
//!   `Connection: keep-alive`.
//! - RFC 9110 section 10.1.1: `Expect: 100-continue` counts on HTTP/1.1 only.
//!
//! A head whose bytes httparse refuses is walked line by line by [`judge`] for the exact refusal;
//! a partial head is judged as it grows, so an overlong line is refused before it ends. The
//! refusal's reason does not depend on how the bytes arrived (the `h1_head` fuzz target).

use std::mem::MaybeUninit;

use bytes::{Bytes, BytesMut};
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Uri, Version};

use crate::proxy::headers::trim;
use crate::proxy::http1_codec::head::{self, HeadFacts, HeadLimits, Present, Refusal};

/// Header slots kept on the stack per parse; a larger `max_headers` takes a heap slice.
const STACK_HEADERS: usize = 128;
/// Field spans kept on the stack per parse (zeroed per request, so fewer than the slots: most
/// heads have a handful of fields); a head with more takes a heap slice.
const STACK_SPANS: usize = 32;
/// Fields the forward phase may add to a request's map (`X-Forwarded-For`, `-Proto`, `-Host`,
/// the conn id, `Connection`/`Upgrade`): the map is sized for them up front.
const OUTBOUND_FIELDS: usize = 6;

/// How a request's body is framed (RFC 9112 section 6.3, rules 4–6 for requests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length` bytes; `Length(0)` for a request without a body.
    Length(u64),
    /// `Transfer-Encoding: chunked` ([`crate::proxy::http1_codec::chunked::Decoder`]).
    Chunked,
}

/// One parsed and judged request head.
#[derive(Debug)]
pub struct Head {
    /// Method, target, version and fields; the values share [`Head::raw`].
    pub parts: http::request::Parts,
    /// The body's framing.
    pub framing: Framing,
    /// The connection may serve another request after this one (RFC 9112 section 9.3).
    pub keep_alive: bool,
    /// `Expect: 100-continue` on HTTP/1.1.
    pub expect_continue: bool,
    /// An `Upgrade` field on HTTP/1.1, or `CONNECT`: the bytes after the head may not be HTTP/1.x.
    pub upgrade: bool,
    /// Which of the fields the phases look up the head holds.
    pub present: Present,
    /// The head's bytes as read (for handing an upgrade to another server).
    pub raw: Bytes,
}

/// Parses the head at the start of `buf`; on success the head's bytes are split off `buf` (what
/// follows, a body or pipelined requests, stays); on a refusal `buf` holds what it held (for
/// [`line_seen`]).
///
/// Returns `Ok(None)` while the head is incomplete and within its limits.
///
/// # Errors
/// The [`Refusal`] of the module docs' rules (400, 414 or 431); the connection must close.
///
/// Kept as one function: the per-request hot path, one pass over the head.
pub fn parse(buf: &mut BytesMut, limits: &HeadLimits) -> Result<Option<Head>, Refusal> {
    let want = limits.max_headers + 1;
    let mut stack = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; STACK_HEADERS];
    let mut heap = Vec::new();
    let slots: &mut [MaybeUninit<httparse::Header<'_>>] = if want <= STACK_HEADERS {
        &mut stack[..want]
    } else {
        heap.resize_with(want, MaybeUninit::uninit);
        &mut heap[..]
    };
    let bytes: &[u8] = buf;
    let mut req = httparse::Request::new(&mut []);
    let len = match req.parse_with_uninit_headers(bytes, slots) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            partial(bytes, limits)?;
            return Ok(None);
        }
        Err(_) => {
            // httparse stopped at a byte already read: the line holding it is judged even if
            // its end has not come, so the refusal does not depend on how the bytes arrived.
            // The CRs the bytes end in are left out: when httparse stopped at one of them, whether
            // it ends the line or stands bare inside it decides the reason (a name without a
            // colon, or a name with a CR in it), and the next byte tells.
            let before = without_final_crs(bytes);
            if before.len() < bytes.len() && !httparse_refuses(before, limits) {
                judge(bytes, limits, false)?;
                return Ok(None);
            }
            return Err(judge(before, limits, true)
                .err()
                .unwrap_or(Refusal::BadRequest("malformed request head")));
        }
    };
    let method = req.method.expect("httparse completed");
    let target = req.path.expect("httparse completed");
    let http11 = req.version == Some(1);
    let mut facts = HeadFacts {
        line: head::RequestLine {
            http10: !http11,
            connect: method == "CONNECT",
        },
        ..HeadFacts::default()
    };
    // Single spaces (httparse's default): the line is exactly this long.
    head::target(target, method.len() + target.len() + 12, limits)?;
    // Offsets of each name and value in the head ([start, len] twice); on the stack for up to
    // STACK_SPANS fields (an allocation less per request than a Vec).
    let base = bytes.as_ptr() as usize;
    let at = |s: &[u8]| [(s.as_ptr() as usize - base) as u32, s.len() as u32];
    let path = at(target.as_bytes());
    let mut keep_alive = http11;
    let mut saw_close = false;
    let mut expect_continue = false;
    let mut present = Present::NONE;
    let n = req.headers.len();
    let mut stack_spans = [[0u32; 4]; STACK_SPANS];
    let mut heap_spans = Vec::new();
    let spans: &mut [[u32; 4]] = if n <= STACK_SPANS {
        &mut stack_spans[..n]
    } else {
        heap_spans.resize(n, [0u32; 4]);
        &mut heap_spans[..]
    };
    for (h, span) in req.headers.iter().zip(spans.iter_mut()) {
        let value = trim(h.value);
        head::count_field(&mut facts, limits)?;
        head::field(h.name.as_bytes(), value, &mut facts, limits)?;
        let ([n0, nl], [v0, vl]) = (at(h.name.as_bytes()), at(value));
        *span = [n0, nl, v0, vl];
    }
    let method = Method::from_bytes(method.as_bytes())
        .map_err(|_| Refusal::BadRequest("invalid method in the request line"))?;
    let raw = buf.split_to(len).freeze();
    let slice = |at: u32, len: u32| raw.slice(at as usize..(at + len) as usize);
    let uri = Uri::from_maybe_shared(slice(path[0], path[1]))
        .map_err(|_| unsplit(buf, &raw, head::INVALID_TARGET))?;
    // Room for the fields the forward phase adds (X-Forwarded-*, the conn id) without a regrowth.
    let mut headers = HeaderMap::with_capacity(n + OUTBOUND_FIELDS);
    for &[n0, nl, v0, vl] in spans.iter() {
        let name = HeaderName::from_bytes(&raw[n0 as usize..(n0 + nl) as usize])
            .map_err(|_| unsplit(buf, &raw, Refusal::BadRequest("invalid field name")))?;
        let value = HeaderValue::from_maybe_shared(slice(v0, vl)).map_err(|_| {
            unsplit(
                buf,
                &raw,
                Refusal::BadRequest("control character in a field value"),
            )
        })?;
        if name == header::CONNECTION {
            present.connection = true;
            if saw_close || has_token(value.as_bytes(), b"close") {
                saw_close = true;
                keep_alive = false;
            } else if !http11 {
                keep_alive = has_token(value.as_bytes(), b"keep-alive");
            }
        } else if name == header::EXPECT {
            present.expect = true;
            expect_continue = http11 && value.as_bytes().eq_ignore_ascii_case(b"100-continue");
        } else if name == header::CONTENT_TYPE {
            present.content_type = true;
        }
        headers.append(name, value);
    }
    let mut parts = http::Request::new(()).into_parts().0;
    parts.method = method;
    parts.uri = uri;
    parts.version = if http11 {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    };
    parts.headers = headers;
    let framing = if facts.chunked {
        Framing::Chunked
    } else {
        Framing::Length(facts.content_length.unwrap_or(0))
    };
    Ok(Some(Head {
        upgrade: facts.line.connect || (http11 && facts.upgrade),
        // `Upgrade` the head's judge notes already (`facts.upgrade`).
        present: Present {
            upgrade: facts.upgrade,
            ..present
        },
        parts,
        framing,
        keep_alive,
        expect_continue,
        raw,
    }))
}

/// `bytes` without the CRs it ends in.
fn without_final_crs(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().rposition(|b| *b != b'\r').map_or(0, |i| i + 1);
    &bytes[..end]
}

/// True if httparse refuses `bytes` (a request head, complete or not) as [`parse`] reads it:
/// with `max_headers + 1` field slots. Cold: allocates the slots.
fn httparse_refuses(bytes: &[u8], limits: &HeadLimits) -> bool {
    let mut slots = vec![httparse::EMPTY_HEADER; limits.max_headers + 1];
    httparse::Request::new(&mut slots).parse(bytes).is_err()
}

/// Puts a refused head's bytes `raw` back in front of `buf` and returns `why` (the refusals found
/// after the head was split off: [`parse`] leaves `buf` as it was on every refusal).
#[cold]
fn unsplit(buf: &mut BytesMut, raw: &Bytes, why: Refusal) -> Refusal {
    let mut whole = BytesMut::with_capacity(raw.len() + buf.len());
    whole.extend_from_slice(raw);
    whole.extend_from_slice(buf);
    *buf = whole;
    why
}

/// What the request line of a refused head says, as far as it goes: the fields of its access-log
/// line (SPEC section 8).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LineSeen {
    /// The method, once it and the space after it were read (httparse).
    pub method: Option<Method>,
    /// The target, when the whole request line met the rules of [`head::request_line`].
    pub uri: Option<Uri>,
    /// The version, when the whole request line met those rules.
    pub version: Option<Version>,
}

/// The request line at the start of `bytes` (a head [`parse`] refused), as far as it meets the
/// rules: see [`LineSeen`]. Leading empty lines are skipped (RFC 9112 section 2.2). Meant for the
/// refusal path only: it copies the line.
pub fn line_seen(bytes: &[u8], limits: &HeadLimits) -> LineSeen {
    let mut rest = bytes;
    while let Some(r) = rest
        .strip_prefix(b"\r\n")
        .or_else(|| rest.strip_prefix(b"\n"))
    {
        rest = r;
    }
    let line = rest
        .iter()
        .position(|b| *b == b'\n')
        .map(|nl| rest[..nl].strip_suffix(b"\r").unwrap_or(&rest[..nl]));
    // A line without its end is read for its method only.
    let mut framed = line.unwrap_or(rest).to_vec();
    let whole = line.is_some_and(|l| head::request_line(l, limits).is_ok());
    if whole {
        framed.extend_from_slice(b"\r\n\r\n");
    }
    let mut req = httparse::Request::new(&mut []);
    let _ = req.parse(&framed);
    let method = req
        .method
        .and_then(|m| Method::from_bytes(m.as_bytes()).ok());
    if !whole {
        return LineSeen {
            method,
            ..LineSeen::default()
        };
    }
    LineSeen {
        method,
        uri: req.path.and_then(|p| Uri::try_from(p).ok()),
        version: Some(if req.version == Some(1) {
            Version::HTTP_11
        } else {
            Version::HTTP_10
        }),
    }
}

/// True if the comma-separated `list` holds `token` (ASCII case-insensitive; RFC 9110 section 7.6.1).
pub fn has_token(list: &[u8], token: &[u8]) -> bool {
    list.split(|b| *b == b',')
        .any(|t| trim(t).eq_ignore_ascii_case(token))
}

/// The limits of an incomplete head: cheap below the smallest limit, else [`judge`].
fn partial(bytes: &[u8], limits: &HeadLimits) -> Result<(), Refusal> {
    if bytes.len() < limits.max_request_line.min(limits.max_header_bytes) {
        return Ok(());
    }
    // Optional whitespace is not counted, so a head can be longer than its counted bytes: past
    // twice the limits (hyper's own buffer bound) it is refused whatever it holds.
    if bytes.len() > (limits.max_request_line + limits.max_header_bytes) * 2 {
        return Err(Refusal::HeadersTooLarge(format!(
            "{} bytes",
            limits.max_header_bytes
        )));
    }
    judge(bytes, limits, false)
}

/// Walks the head at the start of `bytes` line by line with [`head::request_line`] and
/// [`head::field_line`], the partial last line included (a request line already past
/// `max_request_line`, a header block already past `max_header_bytes`): the exact refusal of a
/// head httparse refuses, or `Ok` when no rule is broken (so far). With `last_line`, an
/// unfinished last line is judged by the line rules as well (httparse refused a byte in it).
///
/// # Errors
/// The first [`Refusal`] of the head.
pub fn judge(bytes: &[u8], limits: &HeadLimits, last_line: bool) -> Result<(), Refusal> {
    let mut rest = bytes;
    let mut facts: Option<HeadFacts> = None;
    loop {
        let Some(nl) = rest.iter().position(|b| *b == b'\n') else {
            let line = rest.strip_suffix(b"\r").unwrap_or(rest);
            if last_line && !line.is_empty() {
                match facts.as_mut() {
                    None => {
                        head::request_line(line, limits)?;
                    }
                    Some(f) => head::field_line(line, f, limits)?,
                }
            }
            return match &facts {
                None if rest.len() + 1 > limits.max_request_line => {
                    Err(Refusal::UriTooLong(limits.max_request_line))
                }
                Some(f) if f.bytes + rest.len() > limits.max_header_bytes => Err(
                    Refusal::HeadersTooLarge(format!("{} bytes", limits.max_header_bytes)),
                ),
                _ => Ok(()),
            };
        };
        let mut line = &rest[..nl];
        rest = &rest[nl + 1..];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        match facts.as_mut() {
            // RFC 9112 section 2.2: empty lines before the request-line are ignored.
            None if line.is_empty() => {}
            None => {
                facts = Some(HeadFacts {
                    line: head::request_line(line, limits)?,
                    ..HeadFacts::default()
                })
            }
            Some(_) if line.is_empty() => return Ok(()),
            Some(f) => head::field_line(line, f, limits)?,
        }
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
