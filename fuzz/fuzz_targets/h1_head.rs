//! The gateway's HTTP/1.x request-head parser (`proxy::downstream::http1::request`) never panics; its verdict
//! does not depend on how the bytes are split into reads; a head it accepts is one httparse
//! (hyper's parser) accepts too, with at most one body framing, and its raw bytes are the input's.
#![no_main]
use bytes::BytesMut;
use internal::proxy::http1_codec::head::HeadLimits;
use internal::proxy::downstream::http1::request::{self, Framing};
use libfuzzer_sys::fuzz_target;

const LIMITS: HeadLimits = HeadLimits {
    max_request_line: 16384,
    max_header_bytes: 32768,
    max_headers: 100,
};

/// The first head's verdict with `data` fed in pieces of `step` bytes, as text.
fn first(data: &[u8], step: usize) -> String {
    let mut buf = BytesMut::new();
    let mut pieces = data.chunks(step);
    loop {
        match request::parse(&mut buf, &LIMITS) {
            Ok(Some(h)) => {
                return format!(
                    "{:?} {} {:?} {:?} {:?} keep={} continue={} upgrade={} raw={}",
                    h.parts.method,
                    h.parts.uri,
                    h.parts.version,
                    h.parts.headers,
                    h.framing,
                    h.keep_alive,
                    h.expect_continue,
                    h.upgrade,
                    h.raw.len()
                )
            }
            Ok(None) => match pieces.next() {
                Some(p) => buf.extend_from_slice(p),
                None => return "incomplete".into(),
            },
            Err(why) => return format!("refused {why:?}"),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let whole = first(data, data.len().max(1));
    for step in [1, 2, 7] {
        assert_eq!(first(data, step), whole, "step {step}");
    }
    let mut buf = BytesMut::from(data);
    if let Ok(Some(h)) = request::parse(&mut buf, &LIMITS) {
        assert!(
            data.starts_with(&h.raw),
            "the raw head is the input's prefix"
        );
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        assert!(
            matches!(req.parse(&h.raw), Ok(httparse::Status::Complete(n)) if n == h.raw.len()),
            "an accepted head httparse refuses: {:?}",
            String::from_utf8_lossy(&h.raw)
        );
        let cl = h.parts.headers.contains_key("content-length");
        let te = h.parts.headers.contains_key("transfer-encoding");
        assert!(!(cl && te), "CL with TE accepted");
        assert_eq!(te, h.framing == Framing::Chunked);
    }
});
