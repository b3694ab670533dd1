//! The node's response head in the client half of the codec, parsed with httparse, with the
//! framing of the body that follows (RFC 9112 sections 4, 6, 9.3; the rules hyper's client
//! applied, so clients see the same answers as before). The request head the gateway writes is
//! [`super::request_head`]'s.
//!
//! Response head ([`parse_response`]), rule by rule:
//! - Section 4: `HTTP-version SP status-code SP [reason-phrase] CRLF` (httparse, strict: no
//!   obs-fold, no space before a colon); at most [`MAX_FIELDS`] fields and [`MAX_HEAD`] bytes
//!   (hyper's client bounds).
//! - Section 6.3, in order: an answer to `HEAD`, a 1xx, a 204 or a 304 has no body (rule 1); a
//!   `Transfer-Encoding` whose last coding is `chunked` frames it chunked, any other coding makes
//!   it close-delimited (rule 4), and HTTP/1.0 with `Transfer-Encoding` is refused; with both
//!   fields the `Content-Length` is dropped and the connection not reused (rule 3); a valid
//!   `Content-Length` (repeated only with one value) frames it (rule 5) and reaches the client as
//!   one value on one line (RFC 9110 section 8.6), an invalid one is refused;
//!   otherwise the body runs to the connection's close (rule 8).
//! - RFC 9110 section 8.6: a 204 carrying framing fields is the node's mistake: its connection
//!   may hold stray body bytes, so it is not reused (CASE-27).
//! - Section 9.3: HTTP/1.1 is persistent unless `Connection: close`; HTTP/1.0 only with
//!   `Connection: keep-alive`.

use std::mem::MaybeUninit;

use bytes::BytesMut;
use http::{Method, StatusCode, Version};

use crate::proxy::headers;
use crate::proxy::headers::trim;
use crate::proxy::http1_codec::fields::{known_name, NodeFields, LONGEST_KNOWN};
use crate::proxy::upstream::grpc;

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
    /// The chunked coding ([`crate::proxy::http1_codec::chunked::Decoder`]).
    Chunked,
    /// Raw bytes up to the connection's close.
    Close,
}

/// One parsed response head of a node.
#[derive(Debug)]
pub struct ResponseHead {
    /// The status code.
    pub status: StatusCode,
    /// The node spoke HTTP/1.1 (else HTTP/1.0).
    pub http11: bool,
    /// The node's own reason phrase, when it is not the status's canonical one.
    pub reason: Option<hyper::ext::ReasonPhrase>,
    /// The fields, over the head's bytes ([`NodeFields`]: what the client gets is marked).
    pub fields: NodeFields,
    /// The body's framing.
    pub framing: BodyFraming,
    /// The connection may carry another request after this answer (section 9.3, and no framing
    /// conflict that could leave stray bytes).
    pub reusable: bool,
    /// The node's `Keep-Alive: timeout=N`, if it advertised one ([`super::pool::ttl`]).
    pub keep_alive_timeout: Option<std::time::Duration>,
    /// `Content-Type` says gRPC ([`crate::proxy::upstream::grpc::is_grpc`]'s rule).
    pub grpc: bool,
}

impl ResponseHead {
    /// The head as `http` parts, and the fields kept as bytes. With `raw` (the client speaks
    /// HTTP/1.x, whose writer reads [`NodeFields`]), an answer that is not a `101`, gRPC or of a
    /// custom reason keeps its fields as bytes (returned beside the parts, for an
    /// [`crate::proxy::http1_codec::fields::NodeAnswer`]) and leaves the map empty for what the
    /// gateway adds; otherwise the map holds them (a `101` every field, else those passed on) and
    /// the second value is `None`.
    ///
    /// # Errors
    /// [`HeadError::Malformed`] for a field `http` refuses (see [`NodeFields::into_map`]).
    pub fn into_parts(
        self,
        raw: bool,
    ) -> Result<(http::response::Parts, Option<NodeFields>), HeadError> {
        let mut parts = http::Response::new(()).into_parts().0;
        parts.status = self.status;
        parts.version = if self.http11 {
            Version::HTTP_11
        } else {
            Version::HTTP_10
        };
        let switching = self.status == StatusCode::SWITCHING_PROTOCOLS;
        if raw && !switching && !self.grpc && self.reason.is_none() {
            return Ok((parts, Some(self.fields)));
        }
        parts.headers = self
            .fields
            .into_map(switching)
            .map_err(HeadError::Malformed)?;
        if let Some(r) = self.reason {
            parts.extensions.insert(r);
        }
        Ok((parts, None))
    }
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
    let at = |s: &[u8]| [(s.as_ptr() as usize - base) as u32, s.len() as u32];
    let reason = match custom_reason {
        true => hyper::ext::ReasonPhrase::try_from(reason.as_bytes()).ok(),
        false => None,
    };
    let mut fields = NodeFields::with_capacity(res.headers.len());
    let mut f = Facts::default();
    for h in res.headers.iter() {
        let (name, value) = (h.name.as_bytes(), h.value);
        if name.len() > usize::from(u16::MAX) {
            return Err(HeadError::Malformed("invalid field name"));
        }
        let mut low = [0; LONGEST_KNOWN];
        let known = known_name(name, &mut low);
        f.see(known, value, http11)?;
        let hop_by_hop = known.is_some_and(|k| headers::stripped_index(k).is_some());
        // A 204's framing is the node's mistake (RFC 9110 section 8.6): never passed on.
        let framing_of_204 =
            matches!(known, Some(b"content-length")) && status == StatusCode::NO_CONTENT;
        let pass = !(hop_by_hop || framing_of_204);
        fields.push(at(name), at(value), pass, matches!(known, Some(b"date")));
    }
    let (framing, mut reusable) = framing(&f, status, method);
    reusable &= f.keep_alive(http11);
    fields.finish(buf.split_to(len).freeze(), f.nominates);
    if f.te && f.cl.is_some() {
        fields.drop_named(b"content-length");
    } else if status != StatusCode::NO_CONTENT {
        match f.cl {
            Some(n) if f.cl_given > 1 => fields.replace_content_length(n),
            cl => fields.set_content_length(cl),
        }
    }
    let keep_alive_timeout = f.keep_alive_timeout;
    Ok(Some(ResponseHead {
        status,
        http11,
        reason,
        fields,
        framing,
        reusable,
        keep_alive_timeout,
        grpc: f.grpc,
    }))
}

/// What the fields of a response head say about framing, persistence and what follows.
#[derive(Debug, Default)]
struct Facts {
    /// `Transfer-Encoding` seen, and whether its last coding is `chunked`.
    te: bool,
    chunked: bool,
    /// The one `Content-Length` value, if any was given.
    cl: Option<u64>,
    /// How many times that value was given (list items and lines together).
    cl_given: u32,
    close: bool,
    keep_alive: bool,
    /// A `Connection` token names a field (to be dropped, [`NodeFields::finish`]).
    nominates: bool,
    /// `Keep-Alive: timeout=N`.
    keep_alive_timeout: Option<std::time::Duration>,
    /// `Content-Type` says gRPC.
    grpc: bool,
}

impl Facts {
    /// Takes one field: `known` is its name in lower case when [`known_name`] gave one.
    fn see(&mut self, known: Option<&[u8]>, v: &[u8], http11: bool) -> Result<(), HeadError> {
        match known {
            Some(b"transfer-encoding") => {
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
                    .is_some_and(|c| trim(c).eq_ignore_ascii_case(b"chunked"));
            }
            Some(b"content-length") => {
                // RFC 9110 section 8.6: a list of one repeated value is that value.
                for part in v.split(|b| *b == b',') {
                    let part = trim(part);
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
                    self.cl_given += 1;
                }
            }
            Some(b"connection") => {
                // One pass over the tokens for all three (RFC 9110 section 7.6.1: a list).
                for t in v.split(|b| *b == b',') {
                    let t = trim(t);
                    let close = t.eq_ignore_ascii_case(b"close");
                    let keep_alive = t.eq_ignore_ascii_case(b"keep-alive");
                    self.close |= close;
                    self.keep_alive |= keep_alive;
                    self.nominates |= !t.is_empty() && !close && !keep_alive;
                }
            }
            Some(b"keep-alive") => self.keep_alive_timeout = keepalive_timeout(v),
            Some(b"content-type") => self.grpc = grpc::is_grpc_value(v),
            _ => {}
        }
        Ok(())
    }

    fn keep_alive(&self, http11: bool) -> bool {
        !self.close && (http11 || self.keep_alive)
    }
}

/// The `timeout=N` (seconds) of a node's `Keep-Alive` field value `v`, if it gives one.
pub fn keepalive_timeout(v: &[u8]) -> Option<std::time::Duration> {
    let v = std::str::from_utf8(v).ok()?;
    v.split(',').find_map(|p| {
        let (k, val) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("timeout")
            .then(|| val.trim().parse::<u64>().ok())
            .flatten()
            .map(std::time::Duration::from_secs)
    })
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
#[path = "head_tests.rs"]
mod tests;
