//! The upstream client's response-head parser (`proxy::upstream::http1::head::parse_response`) never
//! panics; its verdict does not depend on how the node's bytes are split into reads; an accepted
//! head consumes exactly the bytes httparse says the head has, and its framing follows RFC 9112
//! section 6.3 (an answer to HEAD, a 1xx, a 204 or a 304 ends at its head; a connection whose
//! answer runs to the close is never reusable).
#![no_main]
use bytes::BytesMut;
use http::Method;
use internal::proxy::upstream::http1::head::{self, BodyFraming};
use libfuzzer_sys::fuzz_target;

/// The first head's verdict for `data` fed in pieces of `step` bytes, as text, and the bytes left.
fn first(data: &[u8], step: usize, method: &Method) -> (String, usize) {
    let mut buf = BytesMut::new();
    let mut pieces = data.chunks(step);
    loop {
        match head::parse_response(&mut buf, method) {
            Ok(Some(h)) => {
                let rest: usize = pieces.map(<[u8]>::len).sum();
                let verdict = format!(
                    "{} {:?} {:?} {:?} reusable={}",
                    h.parts.status, h.parts.version, h.parts.headers, h.framing, h.reusable
                );
                let s = h.parts.status.as_u16();
                if *method == Method::HEAD || (100..200).contains(&s) || s == 204 || s == 304 {
                    assert_eq!(h.framing, BodyFraming::Length(0), "{verdict}");
                }
                if h.framing == BodyFraming::Close {
                    assert!(!h.reusable, "{verdict}");
                }
                return (verdict, buf.len() + rest);
            }
            Ok(None) => match pieces.next() {
                Some(p) => buf.extend_from_slice(p),
                None => return ("incomplete".into(), 0),
            },
            Err(why) => return (format!("refused {why:?}"), 0),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, data)) = data.split_first() else {
        return;
    };
    let method = if sel & 1 == 0 { Method::GET } else { Method::HEAD };
    let step = usize::from(sel >> 1).max(1);
    let (whole, left) = first(data, data.len().max(1), &method);
    let (split, left_split) = first(data, step, &method);
    assert_eq!(whole, split, "verdict depends on the read split (step {step})");
    assert_eq!(left, left_split);
    if !whole.starts_with("refused") && whole != "incomplete" {
        let mut slots = [httparse::EMPTY_HEADER; head::MAX_FIELDS];
        let mut r = httparse::Response::new(&mut slots);
        match r.parse(data) {
            Ok(httparse::Status::Complete(n)) => assert_eq!(data.len() - n, left),
            other => panic!("accepted a head httparse calls {other:?}"),
        }
    }
});
