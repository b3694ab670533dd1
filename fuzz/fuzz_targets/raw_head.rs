//! The raw head judge of `proxy::framing` / `proxy::head` never panics; its verdict does not depend
//! on how the bytes are split into reads; a stream it does not refuse reaches hyper byte for byte (up to a line still incomplete);
//! and the first head it lets through is never one httparse (hyper's parser) refuses.
#![no_main]
use internal::proxy::head::HeadLimits;
use libfuzzer_sys::fuzz_target;

const LIMITS: HeadLimits = HeadLimits {
    max_request_line: 16384,
    max_header_bytes: 32768,
    max_headers: 100,
};

fuzz_target!(|data: &[u8]| {
    let whole = internal::proxy::framing::replay(data, data.len(), LIMITS);
    for step in [1, 2, 7] {
        assert_eq!(internal::proxy::framing::replay(data, step, LIMITS), whole, "step {step}");
    }
    let (out, refused) = whole;
    if refused.is_none() {
        // A line still incomplete at the end is held, so hyper has read a prefix of the bytes.
        assert!(data.starts_with(&out), "nothing refused: bytes pass unchanged");
        // RFC 9112 section 2.2: empty lines before the request-line are ignored (by the judge and
        // by httparse alike), so the preface and CONNECT checks look past them.
        let start = data.iter().position(|b| !matches!(b, b'\r' | b'\n')).unwrap_or(data.len());
        let head = &data[start..];
        if head.starts_with(b"PRI * HTTP/2.0") || head.starts_with(b"CONNECT ") {
            return;
        }
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        assert!(req.parse(&out).is_ok(), "a released head httparse refuses: {:?}", String::from_utf8_lossy(&out));
    }
});
