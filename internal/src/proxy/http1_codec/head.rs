//! The rules an HTTP/1.x request head must meet before anything is forwarded (SPEC section 4:
//! every answer the gateway makes carries the JSON body, including those for heads that fail to
//! parse).
//!
//! The gateway's own HTTP/1.x server ([`crate::proxy::downstream::http1`]) parses each head with
//! httparse and judges it here: [`field`] and [`target`] on the fields httparse read, and, for a
//! head httparse refuses or one still incomplete, [`request_line`] and [`field_line`] on the raw
//! lines, for the exact refusal (control characters or DEL in a field value, obs-fold, a line
//! without a colon, a malformed or conflicting `Content-Length`, an unknown transfer coding, a
//! target past its limits). A refused head is answered by the proxy (a JSON 400/414/431, the
//! connection closed, nothing forwarded). The rules are hyper's own (the request line goes through
//! httparse exactly as hyper parses it) plus those RFC 9112 adds for a server in front of others:
//! one `Transfer-Encoding`, exactly `chunked` (section 6.1); not together with `Content-Length`
//! (section 6.3); no conflicting `Content-Length` values (section 6.3); no obs-fold (section 5.2).
//! One set of rules: the parser and the raw-line judge call the same functions.
//! Pure functions; spawns nothing.

use crate::config::Limits;
use crate::proxy::error::ProxyError;
use crate::proxy::headers::trim;

/// hyper's own bound on a request-target (it answers 414 at `u16::MAX` bytes and past).
const HYPER_MAX_TARGET: usize = u16::MAX as usize - 1;

/// The head limits of SPEC section 4 (`[limits]`), as the raw head is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadLimits {
    /// Bytes of request line, CRLF included (`max_request_line`).
    pub max_request_line: usize,
    /// Bytes of header block, each field counted as `name: value\r\n` (`max_header_bytes`).
    pub max_header_bytes: usize,
    /// Header fields (`max_headers`).
    pub max_headers: usize,
}

impl From<&Limits> for HeadLimits {
    fn from(l: &Limits) -> Self {
        HeadLimits {
            max_request_line: l.max_request_line,
            max_header_bytes: l.max_header_bytes,
            max_headers: l.max_headers,
        }
    }
}

/// Which of the fields the phases look up a request holds, as its parser saw the names; a
/// lookup for a field known absent is skipped (four absent-field lookups were ~360
/// instructions of a proxied request). A request from hyper (HTTP/2) comes with
/// [`Present::UNKNOWN`]: every lookup is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Present {
    /// A `Connection` field.
    pub connection: bool,
    /// An `Upgrade` field.
    pub upgrade: bool,
    /// An `Expect` field.
    pub expect: bool,
    /// A `Content-Type` field.
    pub content_type: bool,
}

impl Present {
    /// Nothing known: every field may be there.
    pub const UNKNOWN: Present = Present {
        connection: true,
        upgrade: true,
        expect: true,
        content_type: true,
    };
    /// No field of the four.
    pub const NONE: Present = Present {
        connection: false,
        upgrade: false,
        expect: false,
        content_type: false,
    };
}

/// Why a head was refused; becomes the proxy's answer through [`Refusal::into_error`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Malformed (400).
    BadRequest(&'static str),
    /// Request line past `max_request_line` bytes (414).
    UriTooLong(usize),
    /// Header block past its byte or field limit, e.g. `32768 bytes` (431).
    HeadersTooLarge(String),
}

impl Refusal {
    /// The proxy error that answers this refusal (each closes the connection).
    pub fn into_error(self) -> ProxyError {
        match self {
            Refusal::BadRequest(m) => ProxyError::BadRequest(m),
            Refusal::UriTooLong(limit) => ProxyError::UriTooLong { limit },
            Refusal::HeadersTooLarge(limit) => ProxyError::HeadersTooLarge { limit },
        }
    }
}

/// What a judged request line says about the rest of the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RequestLine {
    /// `HTTP/1.0` (no transfer codings allowed).
    pub http10: bool,
    /// A `CONNECT` request: what follows is not HTTP/1.x framing.
    pub connect: bool,
}

/// Framing facts gathered from one head's field lines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeadFacts {
    /// The request line.
    pub line: RequestLine,
    /// Field lines so far.
    pub fields: usize,
    /// Header bytes so far, counted as [`HeadLimits::max_header_bytes`] says.
    pub bytes: usize,
    /// The `Content-Length`, if one was given.
    pub content_length: Option<u64>,
    /// `Transfer-Encoding: chunked` was given.
    pub chunked: bool,
    /// An `Upgrade` field was given: the bytes after the head may not be HTTP/1.x.
    pub upgrade: bool,
}

/// Judges a request line (`line` without its CR LF).
///
/// # Errors
/// [`Refusal::UriTooLong`] past the request-line limit or hyper's target limit;
/// [`Refusal::BadRequest`] for whatever httparse refuses or an unparsable target.
pub fn request_line(line: &[u8], limits: &HeadLimits) -> Result<RequestLine, Refusal> {
    if line.len() + 2 > limits.max_request_line {
        return Err(Refusal::UriTooLong(limits.max_request_line));
    }
    let mut framed = Vec::with_capacity(line.len() + 4);
    framed.extend_from_slice(line);
    framed.extend_from_slice(b"\r\n\r\n");
    let mut no_fields = [];
    let mut req = httparse::Request::new(&mut no_fields);
    match req.parse(&framed) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(Refusal::BadRequest("malformed request line")),
        Err(e) => {
            return Err(Refusal::BadRequest(match e {
                httparse::Error::Token => "invalid method in the request line",
                httparse::Error::Version => "unsupported HTTP version in the request line",
                httparse::Error::NewLine => "malformed line ending in the request line",
                _ => "malformed request line",
            }))
        }
    }
    target(req.path.unwrap_or_default(), line.len() + 2, limits)?;
    if http::Uri::try_from(req.path.unwrap_or_default()).is_err() {
        return Err(INVALID_TARGET);
    }
    Ok(RequestLine {
        http10: req.version == Some(0),
        connect: req.method == Some("CONNECT"),
    })
}

/// The refusal of a request-target `http::Uri` does not parse.
pub const INVALID_TARGET: Refusal = Refusal::BadRequest("invalid request-target");

/// The length rules of a request line whose `target` httparse read, the line `line_len` bytes long
/// with its CR LF: past `max_request_line`, or past hyper's own target bound, it is a 414.
///
/// # Errors
/// [`Refusal::UriTooLong`].
pub fn target(target: &str, line_len: usize, limits: &HeadLimits) -> Result<(), Refusal> {
    if line_len > limits.max_request_line {
        return Err(Refusal::UriTooLong(limits.max_request_line));
    }
    if target.len() > HYPER_MAX_TARGET {
        return Err(Refusal::UriTooLong(
            limits.max_request_line.min(HYPER_MAX_TARGET),
        ));
    }
    Ok(())
}

/// True for an RFC 9110 `tchar`, the bytes of a field name.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// True for a byte allowed in a field value: HTAB, SP, VCHAR and obs-text (RFC 9110 section 5.5);
/// never another control character or DEL.
fn is_value_byte(b: u8) -> bool {
    b == b'\t' || (b >= 0x20 && b != 0x7f)
}

/// Judges one field line (`line` without its CR LF, not empty) and records its framing in `facts`.
///
/// # Errors
/// [`Refusal::HeadersTooLarge`] past the field count or byte limit; [`Refusal::BadRequest`] for
/// obs-fold, a bad name (checked before the colon), a line without a colon, a control character
/// in the value, and every
/// `Content-Length`/`Transfer-Encoding` problem of the module docs.
pub fn field_line(line: &[u8], facts: &mut HeadFacts, limits: &HeadLimits) -> Result<(), Refusal> {
    count_field(facts, limits)?;
    if line[0] == b' ' || line[0] == b'\t' {
        return Err(Refusal::BadRequest(
            "obs-fold: a field line starts with whitespace",
        ));
    }
    // The name first (the bytes up to the colon, or all of them): a byte that is not a tchar
    // makes it invalid whether a colon follows or not, so a line judged before its end (httparse
    // refused a byte in it) gets the refusal of the whole line.
    let colon = line.iter().position(|b| *b == b':');
    let name = &line[..colon.unwrap_or(line.len())];
    if name.is_empty() || !name.iter().all(|b| is_tchar(*b)) {
        return Err(Refusal::BadRequest("invalid field name"));
    }
    let Some(colon) = colon else {
        return Err(Refusal::BadRequest("field line without a colon"));
    };
    let value = trim(&line[colon + 1..]);
    if !value.iter().all(|b| is_value_byte(*b)) {
        return Err(Refusal::BadRequest("control character in a field value"));
    }
    field(name, value, facts, limits)
}

/// Counts one more field line against `max_headers` (the first rule of [`field_line`]).
///
/// # Errors
/// [`Refusal::HeadersTooLarge`] (`"N fields"`) past the limit.
pub fn count_field(facts: &mut HeadFacts, limits: &HeadLimits) -> Result<(), Refusal> {
    facts.fields += 1;
    if facts.fields > limits.max_headers {
        return Err(Refusal::HeadersTooLarge(format!(
            "{} fields",
            limits.max_headers
        )));
    }
    Ok(())
}

/// The rules of [`field_line`] past its syntax: the header-block byte limit and the framing fields
/// (RFC 9112 sections 6.1 and 6.3), for a field whose `name` is a token and whose `value` (OWS
/// trimmed) holds only field-value bytes, as [`field_line`] or httparse established. Records
/// `Content-Length`, `chunked` and `Upgrade` in `facts`. One set of rules for the raw-line judge
/// and the parser ([`crate::proxy::downstream::http1`]).
///
/// # Errors
/// [`Refusal::HeadersTooLarge`] past `max_header_bytes`; [`Refusal::BadRequest`] for every
/// `Content-Length`/`Transfer-Encoding` problem of the module docs.
pub fn field(
    name: &[u8],
    value: &[u8],
    facts: &mut HeadFacts,
    limits: &HeadLimits,
) -> Result<(), Refusal> {
    facts.bytes += name.len() + value.len() + 4;
    if facts.bytes > limits.max_header_bytes {
        return Err(Refusal::HeadersTooLarge(format!(
            "{} bytes",
            limits.max_header_bytes
        )));
    }
    if name.eq_ignore_ascii_case(b"content-length") {
        if facts.chunked {
            return Err(Refusal::BadRequest(
                "Content-Length together with Transfer-Encoding",
            ));
        }
        let n = std::str::from_utf8(value)
            .ok()
            .filter(|v| !v.is_empty() && v.len() <= 19 && v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or(Refusal::BadRequest("invalid Content-Length"))?;
        if facts.content_length.is_some_and(|prev| prev != n) {
            return Err(Refusal::BadRequest("conflicting Content-Length values"));
        }
        facts.content_length = Some(n);
    } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
        if facts.content_length.is_some() {
            return Err(Refusal::BadRequest(
                "Content-Length together with Transfer-Encoding",
            ));
        }
        if facts.line.http10 {
            return Err(Refusal::BadRequest(
                "Transfer-Encoding in an HTTP/1.0 request",
            ));
        }
        if facts.chunked || !value.eq_ignore_ascii_case(b"chunked") {
            return Err(Refusal::BadRequest(
                "Transfer-Encoding other than a single \"chunked\"",
            ));
        }
        facts.chunked = true;
    } else if name.eq_ignore_ascii_case(b"upgrade") {
        facts.upgrade = true;
    }
    Ok(())
}

/// The SPEC section 4 default limits, for unit tests here and in
/// [`crate::proxy::downstream::http1`].
#[cfg(test)]
pub(crate) const TEST_LIMITS: HeadLimits = HeadLimits {
    max_request_line: 16384,
    max_header_bytes: 32768,
    max_headers: 100,
};

#[cfg(test)]
mod tests {
    use super::*;

    const L: HeadLimits = TEST_LIMITS;

    fn fields(lines: &[&[u8]]) -> Result<HeadFacts, Refusal> {
        let mut f = HeadFacts::default();
        for l in lines {
            field_line(l, &mut f, &L)?;
        }
        Ok(f)
    }

    #[test]
    fn request_lines_as_httparse_reads_them() {
        assert_eq!(
            request_line(b"GET /a?b HTTP/1.1", &L),
            Ok(RequestLine::default())
        );
        assert!(request_line(b"GET /a HTTP/1.0", &L).is_ok_and(|l| l.http10));
        assert!(request_line(b"CONNECT a:443 HTTP/1.1", &L).is_ok_and(|l| l.connect));
        for bad in [
            &b"GET /a HTTP/1.2"[..],
            b"GET /a\x01 HTTP/1.1",
            b"G(T /a HTTP/1.1",
            b"GET  /a HTTP/1.1",
            b"GET /a",
            b"GET /a HTTP/1.1\r",
        ] {
            assert!(
                matches!(request_line(bad, &L), Err(Refusal::BadRequest(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = format!("GET /{} HTTP/1.1", "a".repeat(17_000));
        assert_eq!(
            request_line(long.as_bytes(), &L),
            Err(Refusal::UriTooLong(16384))
        );
    }

    #[test]
    fn field_lines_refused_where_hyper_would_refuse() {
        for bad in [
            &[&b"X-Conn-Id: a\x01b"[..]][..],
            &[b"X-Conn-Id: a\x7fb"],
            &[b"X-A: 1", b" folded"],
            &[b"X-A: 1", b"\tfolded"],
            &[b"No-Colon"],
            &[b"Bad Name: 1"],
            &[b": empty name"],
            &[b"Content-Length: 5, 5"],
            &[b"Content-Length: +5"],
            &[b"Content-Length: 5", b"Content-Length: 6"],
            &[b"Content-Length: 5", b"Transfer-Encoding: chunked"],
            &[b"Transfer-Encoding: chunked", b"Content-Length: 5"],
            &[b"Transfer-Encoding: xchunked"],
            &[b"Transfer-Encoding: gzip, chunked"],
            &[b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"],
        ] {
            assert!(
                matches!(fields(bad), Err(Refusal::BadRequest(_))),
                "{bad:?}"
            );
        }
        let ok = fields(&[
            b"Host: x",
            b"Content-Length: 5",
            b"Content-Length: 5",
            b"X-Text: caf\xc3\xa9\tok",
        ])
        .expect("valid");
        assert_eq!(ok.content_length, Some(5));
        let ok = fields(&[b"Transfer-Encoding: Chunked\t", b"Upgrade: websocket"]).expect("valid");
        assert!(ok.chunked && ok.upgrade);
        let many: Vec<Vec<u8>> = (0..101).map(|i| format!("X-{i}: v").into_bytes()).collect();
        let many: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
        assert_eq!(
            fields(&many),
            Err(Refusal::HeadersTooLarge("100 fields".into()))
        );
    }
}
