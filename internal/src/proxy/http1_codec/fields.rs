//! The fields of an HTTP/1.x node's answer kept as the bytes the node sent, so an answer relayed
//! to an HTTP/1.x client is written from them without building a `HeaderMap` (the map
//! was ~2,200 of the ~28,000 instructions of a proxied request, its hop-by-hop strip and its drop
//! ~1,300 more).
//!
//! Rules, applied while the head is parsed
//! ([`crate::proxy::upstream::http1::head::parse_response`]), so the client
//! gets exactly the fields the `HeaderMap` path gave it:
//! - RFC 9110 section 7.6.1: hop-by-hop fields ([`crate::proxy::headers`]'s list, `Connection`
//!   first) and every field a `Connection` line nominates are not passed on; nor is `TE`, a
//!   request field a node has no business sending back.
//! - RFC 9110 section 8.6 / RFC 9112 section 6.3 rule 3: a 204's `Content-Length` and a
//!   `Content-Length` beside `Transfer-Encoding` are not passed on (CASE-27).
//! - RFC 9110 section 8.6: a `Content-Length` given as a list of one value or on several lines
//!   reaches the client as that value, once ([`NodeFields::replace_content_length`]).
//! - Names and values were checked by httparse (RFC 9110 section 5.1 token, section 5.5 field
//!   value: HTAB, SP, VCHAR, obs-text); `http`'s `HeaderName`/`HeaderValue` accept the same bytes,
//!   so either path accepts the same heads (unit test). A name keeps the node's spelling (field
//!   names are case-insensitive, RFC 9110 section 5.1); a value its bytes.
//!
//! [`NodeFields::into_map`] builds the `HeaderMap` for every other consumer (an HTTP/2 client, a
//! gRPC answer, a `101`).
//!
//! The fields travel beside the response, in an [`NodeAnswer`], from the node's connection to the
//! client's writer ([`crate::proxy::downstream::http1::conn`]): carried in the response's
//! `Extensions` they cost an `AnyMap` (three allocations, two hash lookups and its drop: ~900 of
//! ~26,400 instructions per proxied request).

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response};

/// A response on its way to the client and, when the node spoke HTTP/1.x to a client that does
/// too, the node's fields as its bytes ([`NodeFields`]; the response's map then holds only what
/// the gateway adds). Every other answer (HTTP/2, gRPC, a `101`, the gateway's own) has all its
/// fields in the map and `node_fields: None`.
#[derive(Debug)]
pub struct NodeAnswer<B> {
    /// Status, version, the gateway's fields (or all of them) and the body.
    pub response: Response<B>,
    /// The node's fields kept as bytes, written after the map's by the HTTP/1.x writer.
    pub node_fields: Option<NodeFields>,
}

impl<B> From<Response<B>> for NodeAnswer<B> {
    /// An answer whose fields are all in its map.
    fn from(response: Response<B>) -> Self {
        NodeAnswer {
            response,
            node_fields: None,
        }
    }
}

impl<B> NodeAnswer<B> {
    /// The same answer with its body mapped by `f` (as [`Response::map`]).
    pub fn map<C>(self, f: impl FnOnce(B) -> C) -> NodeAnswer<C> {
        NodeAnswer {
            response: self.response.map(f),
            node_fields: self.node_fields,
        }
    }
}

/// Where one field line's name and value lie in the head's bytes.
#[derive(Debug, Clone, Copy)]
struct Field {
    name: u32,
    name_len: u16,
    value: u32,
    value_len: u32,
    /// Passed on to the client (module docs).
    pass: bool,
}

/// A node's answer fields in the order it sent them, over the head's own bytes.
#[derive(Debug, Clone, Default)]
pub struct NodeFields {
    head: Bytes,
    fields: Vec<Field>,
    /// The framing `Content-Length` passed on, if any.
    content_length: Option<u64>,
    /// The node gave that length as a list or on several lines: its lines are not passed on and
    /// [`NodeFields::write`] writes the one value instead.
    content_length_written: bool,
    /// A `Date` field is passed on.
    date: bool,
}

/// Longest field name that can name a field the rules look at (`proxy-authorization`).
pub(crate) const LONGEST_KNOWN: usize = 19;

/// `name` in lower case if it is short enough to be a field the rules name; `None` otherwise.
pub(crate) fn known_name<'a>(name: &[u8], buf: &'a mut [u8; LONGEST_KNOWN]) -> Option<&'a [u8]> {
    let out = buf.get_mut(..name.len())?;
    for (o, b) in out.iter_mut().zip(name) {
        *o = b.to_ascii_lowercase();
    }
    Some(out)
}

impl NodeFields {
    /// An empty list with room for `n` fields; their spans refer to the head given to
    /// [`NodeFields::finish`].
    pub(crate) fn with_capacity(n: usize) -> NodeFields {
        NodeFields {
            head: Bytes::new(),
            fields: Vec::with_capacity(n),
            content_length: None,
            content_length_written: false,
            date: false,
        }
    }

    /// Adds the field whose name and value lie at the given `[offset, length]` spans of the head;
    /// `pass` says whether the client gets it, `date` whether it is a `Date`.
    pub(crate) fn push(&mut self, name: [u32; 2], value: [u32; 2], pass: bool, date: bool) {
        self.fields.push(Field {
            name: name[0],
            // Names are bounded by the head (at most MAX_HEAD, under 2^19) and by HeaderName's own
            // limit of 2^16 - 1, which parse_response checks first.
            name_len: name[1] as u16,
            value: value[0],
            value_len: value[1],
            pass,
        });
        self.date |= pass && date;
    }

    /// Sets the `Content-Length` that frames the body and is passed on.
    pub(crate) fn set_content_length(&mut self, n: Option<u64>) {
        self.content_length = n;
    }

    /// Passes on `Content-Length: n` once in place of the node's lines, which gave it as a list
    /// or more than once (RFC 9110 section 8.6: a recipient may replace such a field with one
    /// instance of the value; a client must not meet a list it may refuse, RFC 9112 section 6.3
    /// rule 5).
    pub(crate) fn replace_content_length(&mut self, n: u64) {
        self.drop_named(b"content-length");
        self.content_length = Some(n);
        self.content_length_written = true;
    }

    /// Sets the head's bytes the spans refer to (status line included) and, when a `Connection`
    /// token names a field (`nominates`), stops passing on every field so named (RFC 9110 section
    /// 7.6.1; `close` and `keep-alive` name no field that is passed on anyway).
    pub(crate) fn finish(&mut self, head: Bytes, nominates: bool) {
        self.head = head;
        if !nominates {
            return;
        }
        let head = self.head.clone();
        let connection = self.fields.clone();
        for f in connection
            .iter()
            .filter(|f| span(&head, f.name, f.name_len.into()).eq_ignore_ascii_case(b"connection"))
        {
            for t in span(&head, f.value, f.value_len).split(|b| *b == b',') {
                let t = crate::proxy::headers::trim(t);
                if !t.is_empty()
                    && !t.eq_ignore_ascii_case(b"close")
                    && !t.eq_ignore_ascii_case(b"keep-alive")
                {
                    self.drop_named(t);
                }
            }
        }
    }

    /// Stops passing on the fields named `name` (any case): the gateway sets that field itself.
    pub fn drop_named(&mut self, name: &[u8]) {
        if name.eq_ignore_ascii_case(b"content-length") {
            self.content_length = None;
            self.content_length_written = false;
        }
        let head = &self.head;
        let mut date = false;
        for f in &mut self.fields {
            let n = span(head, f.name, f.name_len.into());
            if f.pass && n.eq_ignore_ascii_case(name) {
                f.pass = false;
            }
            date |= f.pass && n.eq_ignore_ascii_case(b"date");
        }
        self.date = date;
    }

    /// The `Content-Length` passed on, if any.
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// True if a `Date` field is passed on.
    pub fn has_date(&self) -> bool {
        self.date
    }

    /// Appends every field passed on to `dst`, one `name: value CRLF` line each (RFC 9112
    /// section 5), then the one `content-length` line that replaces a node's list
    /// ([`NodeFields::replace_content_length`]).
    pub fn write(&self, dst: &mut Vec<u8>) {
        for f in self.fields.iter().filter(|f| f.pass) {
            dst.extend_from_slice(span(&self.head, f.name, f.name_len.into()));
            dst.extend_from_slice(b": ");
            dst.extend_from_slice(span(&self.head, f.value, f.value_len));
            dst.extend_from_slice(b"\r\n");
        }
        if let Some(n) = self.content_length.filter(|_| self.content_length_written) {
            dst.extend_from_slice(b"content-length: ");
            dst.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            dst.extend_from_slice(b"\r\n");
        }
    }

    /// The fields as a `HeaderMap` (values share the head's bytes): every field when `all`
    /// (a `101` or an interim answer, whose `Connection` and `Upgrade` matter), else those
    /// passed on.
    ///
    /// # Errors
    /// A name or value `http` refuses (none that httparse accepted: module docs).
    pub fn into_map(self, all: bool) -> Result<HeaderMap, &'static str> {
        let mut map = HeaderMap::with_capacity(self.fields.len());
        for f in self.fields.iter().filter(|f| all || f.pass) {
            let v = f.value as usize;
            let name = HeaderName::from_bytes(span(&self.head, f.name, f.name_len.into()))
                .map_err(|_| "invalid field name")?;
            let value =
                HeaderValue::from_maybe_shared(self.head.slice(v..v + f.value_len as usize))
                    .map_err(|_| "invalid field value")?;
            map.append(name, value);
        }
        if let Some(n) = self
            .content_length
            .filter(|_| self.content_length_written && !all)
        {
            map.append(http::header::CONTENT_LENGTH, HeaderValue::from(n));
        }
        Ok(map)
    }
}

/// The `len` bytes of `head` at `at`.
fn span(head: &[u8], at: u32, len: u32) -> &[u8] {
    &head[at as usize..(at + len) as usize]
}
