//! Unit tests of [`super`]: each rule of the module docs, and a request stream (heads, bodies and
//! pipelined requests) parsed the same however it is split into reads.

use super::*;
use crate::proxy::http1_codec::chunked::{Decoded, Decoder};
use crate::proxy::http1_codec::head::TEST_LIMITS as L;

/// Feeds `wire` in pieces of `step` bytes through the parser (and the bodies through their
/// framing); returns `METHOD target body-bytes` per request and the refusal, if any.
fn stream(wire: &[u8], step: usize) -> (Vec<String>, Option<Refusal>) {
    let mut buf = BytesMut::new();
    let mut seen = Vec::new();
    let mut pieces = wire.chunks(step.max(1));
    loop {
        let head = loop {
            match parse(&mut buf, &L) {
                Ok(Some(h)) => break h,
                Ok(None) => match pieces.next() {
                    Some(p) => buf.extend_from_slice(p),
                    None => return (seen, None),
                },
                Err(why) => return (seen, Some(why)),
            }
        };
        let mut body = 0usize;
        match head.framing {
            Framing::Length(mut n) => {
                while n > 0 {
                    if buf.is_empty() {
                        match pieces.next() {
                            Some(p) => buf.extend_from_slice(p),
                            None => return (seen, None),
                        }
                    }
                    let take = (n as usize).min(buf.len());
                    let _ = buf.split_to(take);
                    n -= take as u64;
                    body += take;
                }
            }
            Framing::Chunked => {
                let mut d = Decoder::new();
                loop {
                    match d.decode(&mut buf).expect("valid chunked") {
                        Decoded::Data(b) => body += b.len(),
                        Decoded::Trailers(_) | Decoded::End => break,
                        Decoded::NeedMore => match pieces.next() {
                            Some(p) => buf.extend_from_slice(p),
                            None => return (seen, None),
                        },
                    }
                }
            }
        }
        seen.push(format!("{} {} {body}", head.parts.method, head.parts.uri));
    }
}

#[test]
fn pipelined_requests_and_bodies_the_same_in_any_split() {
    let wire = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n\
POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nab\ncd\r\n0\r\nX-T: 1\r\n\r\n\
POST /d HTTP/1.1\r\nContent-Length: 52\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\n\r\n";
    for step in [1, 3, 7, wire.len()] {
        let (seen, refused) = stream(wire, step);
        assert_eq!(seen, ["POST /a 5", "GET /b 0", "POST /c 5"], "step {step}");
        assert_eq!(
            refused,
            Some(Refusal::BadRequest(
                "Content-Length together with Transfer-Encoding"
            )),
            "step {step}"
        );
    }
    // A body holding a fake head is a body; LF-only lines are lines (RFC 9112 section 2.2).
    let wire =
        b"POST /a HTTP/1.1\nContent-Length: 38\n\nGET /x HTTP/1.1\r\nContent-Length: 1\r\n\r\n\
GET /e HTTP/1.1\r\n\r\n";
    assert_eq!(
        stream(wire, 5),
        (vec!["POST /a 38".into(), "GET /e 0".into()], None)
    );
}

#[test]
fn the_parsed_head() {
    let mut buf = BytesMut::from(
        &b"GET /p?q=1 HTTP/1.1\r\nHost: a.test\r\nX-A:  v1 \t\r\nx-a: v2\r\nConnection: keep-alive, Close\r\nExpect: 100-Continue\r\n\r\nrest"[..],
    );
    let h = parse(&mut buf, &L).expect("valid").expect("complete");
    assert_eq!(&buf[..], b"rest");
    assert_eq!(h.parts.method, Method::GET);
    assert_eq!(h.parts.uri, "/p?q=1");
    assert_eq!(h.parts.version, Version::HTTP_11);
    let a: Vec<_> = h.parts.headers.get_all("x-a").iter().collect();
    assert_eq!(
        a,
        ["v1", "v2"],
        "OWS trimmed, repeated fields kept in order"
    );
    assert_eq!(h.framing, Framing::Length(0));
    assert!(!h.keep_alive, "close wins (RFC 9112 section 9.6)");
    assert!(h.expect_continue && !h.upgrade);
    assert!(h.raw.starts_with(b"GET /p?q=1") && h.raw.ends_with(b"\r\n\r\n"));

    for (wire, keep) in [
        (&b"GET / HTTP/1.1\r\n\r\n"[..], true),
        (b"GET / HTTP/1.0\r\n\r\n", false),
        (b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", true),
        (
            b"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
            false,
        ),
        (
            b"GET / HTTP/1.1\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n",
            false,
        ),
    ] {
        let h = parse(&mut BytesMut::from(wire), &L)
            .expect("ok")
            .expect("complete");
        assert_eq!(h.keep_alive, keep, "{:?}", String::from_utf8_lossy(wire));
    }
    let h = parse(
        &mut BytesMut::from(&b"GET / HTTP/1.0\r\nExpect: 100-continue\r\nUpgrade: x\r\n\r\n"[..]),
        &L,
    )
    .expect("ok")
    .expect("complete");
    assert!(!h.expect_continue && !h.upgrade, "1.0 has neither");
    for wire in [
        &b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n"[..],
        b"CONNECT a:443 HTTP/1.1\r\n\r\n",
    ] {
        let h = parse(&mut BytesMut::from(wire), &L)
            .expect("ok")
            .expect("complete");
        assert!(h.upgrade);
    }
    let h = parse(
        &mut BytesMut::from(
            &b"PUT / HTTP/1.1\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n"[..],
        ),
        &L,
    )
    .expect("ok")
    .expect("complete");
    assert_eq!(
        h.framing,
        Framing::Length(7),
        "repeated equal lengths are one"
    );
}

#[test]
fn refusals_with_their_exact_reason() {
    let control = Refusal::BadRequest("control character in a field value");
    for (wire, why) in [
        (&b"GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n"[..], control.clone()),
        (b"GET / HTTP/1.1\r\nX: a\x7fb\r\n\r\n", control.clone()),
        (b"GET / HTTP/1.1\r\nX: a\rb\r\n\r\n", control),
        (
            b"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
            Refusal::BadRequest("obs-fold: a field line starts with whitespace"),
        ),
        (
            b"GET / HTTP/1.1\r\nNo-Colon\r\n\r\n",
            Refusal::BadRequest("field line without a colon"),
        ),
        (
            b"GET / HTTP/1.1\r\nBad Name: 1\r\n\r\n",
            Refusal::BadRequest("invalid field name"),
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
            Refusal::BadRequest("invalid Content-Length"),
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            Refusal::BadRequest("conflicting Content-Length values"),
        ),
        (
            b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            Refusal::BadRequest("Transfer-Encoding other than a single \"chunked\""),
        ),
        (
            b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            Refusal::BadRequest("Transfer-Encoding in an HTTP/1.0 request"),
        ),
        (
            b"GET / HTTP/1.7\r\n\r\n",
            Refusal::BadRequest("unsupported HTTP version in the request line"),
        ),
        (
            b"G@T / HTTP/1.1\r\n\r\n",
            Refusal::BadRequest("invalid method in the request line"),
        ),
        (
            b"GET /\x7f HTTP/1.1\r\n\r\n",
            Refusal::BadRequest("invalid method in the request line"),
        ),
    ] {
        assert_eq!(
            parse(&mut BytesMut::from(wire), &L).err(),
            Some(why),
            "{:?}",
            String::from_utf8_lossy(wire)
        );
    }
}

#[test]
fn limits_refuse_before_the_head_ends() {
    // 414: a request line past max_request_line, complete or not.
    let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(20_000));
    assert_eq!(
        parse(&mut BytesMut::from(long.as_bytes()), &L).err(),
        Some(Refusal::UriTooLong(16384))
    );
    assert_eq!(
        parse(&mut BytesMut::from(&long.as_bytes()[..17_000]), &L).err(),
        Some(Refusal::UriTooLong(16384))
    );
    let ok = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(16_000));
    assert!(parse(&mut BytesMut::from(ok.as_bytes()), &L).is_ok_and(|h| h.is_some()));
    // 431: the header block past max_header_bytes, complete or not; past max_headers.
    let big = format!("GET / HTTP/1.1\r\nCookie: {}\r\n\r\n", "c".repeat(40_000));
    let too_big = Refusal::HeadersTooLarge("32768 bytes".into());
    assert_eq!(
        parse(&mut BytesMut::from(big.as_bytes()), &L).err(),
        Some(too_big.clone())
    );
    assert_eq!(
        parse(&mut BytesMut::from(&big.as_bytes()[..33_000]), &L).err(),
        Some(too_big)
    );
    let many: String = (0..101).map(|i| format!("X-{i}: v\r\n")).collect();
    let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
    assert_eq!(
        parse(&mut BytesMut::from(many.as_bytes()), &L).err(),
        Some(Refusal::HeadersTooLarge("100 fields".into()))
    );
    // Short partial heads wait for more.
    assert!(matches!(
        parse(
            &mut BytesMut::from(&b"GET / HTTP/1.1\r\nHost: x\r\n"[..]),
            &L
        ),
        Ok(None)
    ));
    assert!(
        matches!(parse(&mut BytesMut::from(&b"\r\n\r\n"[..]), &L), Ok(None)),
        "empty lines before a request"
    );
}

#[test]
fn tokens_in_lists() {
    assert!(has_token(b"keep-alive, Close", b"close"));
    assert!(has_token(b" upgrade ,x", b"upgrade"));
    assert!(!has_token(b"closed", b"close"));
}

#[test]
fn a_refusal_does_not_depend_on_how_the_bytes_arrive() {
    let no_colon = Refusal::BadRequest("field line without a colon");
    let bad_name = Refusal::BadRequest("invalid field name");
    let control = Refusal::BadRequest("control character in a field value");
    // Found by the h1_head fuzz target: httparse refuses the first byte already; a bad name
    // refused before its colon came (it was "without a colon" byte by byte); a CR that ends a
    // name without a colon, or stands bare inside one (byte by byte, both were "without a colon").
    for (wire, want) in [
        (
            &b"\x182+\n"[..],
            Refusal::BadRequest("invalid method in the request line"),
        ),
        (b"GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n", control),
        (b"GET / HTTP/1.0\n$KgK X:\0\n\n", bad_name.clone()),
        (b"GET / HTTP/1.1\r\nAbc\r\n\r\n", no_colon),
        (b"GET / HTTP/1.1\r\nAbc\rX: 1\r\n\r\n", bad_name),
        // A byte refused before the final CR: refused at once, not held for the next byte.
        (
            b"\r\n\n\r)\r",
            Refusal::BadRequest("malformed line ending in the request line"),
        ),
    ] {
        assert_eq!(
            parse(&mut BytesMut::from(wire), &L).err(),
            Some(want),
            "{:?}",
            String::from_utf8_lossy(wire)
        );
        let whole = parse(&mut BytesMut::from(wire), &L).err();
        let mut buf = BytesMut::new();
        let mut first = None;
        for b in wire {
            buf.extend_from_slice(&[*b]);
            if let Err(why) = parse(&mut buf, &L) {
                first = Some(why);
                break;
            }
        }
        assert_eq!(first, whole, "{:?}", String::from_utf8_lossy(wire));
    }
}

/// A refused head stays in the buffer (even a refusal found after the head was split off, an
/// unparsable target), and its request line is read as far as it meets the rules.
#[test]
fn what_a_refused_head_says_of_its_request_line() {
    let wire = &b"GET http://[/ HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\n\r\n"[..];
    let mut buf = BytesMut::from(wire);
    assert_eq!(parse(&mut buf, &L).err(), Some(head::INVALID_TARGET));
    assert_eq!(&buf[..], wire, "the refused head is left in the buffer");
    let seen = |wire: &[u8]| line_seen(wire, &L);
    assert_eq!(
        seen(b"\r\nPOST /a?b HTTP/1.0\r\nX: \x01\r\n\r\n"),
        LineSeen {
            method: Some(Method::POST),
            uri: Some(Uri::from_static("/a?b")),
            version: Some(Version::HTTP_10),
        }
    );
    assert_eq!(
        seen(b"GET /a HTTP/1.1\nBad Name: 1\n\n").version,
        Some(Version::HTTP_11)
    );
    let method_only = LineSeen {
        method: Some(Method::GET),
        ..LineSeen::default()
    };
    assert_eq!(seen(wire), method_only, "an unparsable target");
    assert_eq!(seen(b"GET /a HTTP/1.2\r\n\r\n"), method_only);
    let long = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(17_000));
    assert_eq!(seen(long.as_bytes()), method_only, "past max_request_line");
    assert_eq!(seen(b"GET /still-coming"), method_only);
    assert_eq!(seen(b"G(T / HTTP/1.1\r\n\r\n"), LineSeen::default());
    assert_eq!(seen(b"\x16\x03\x01\x02\x00"), LineSeen::default());
}

#[test]
fn the_head_says_which_looked_up_fields_it_holds() {
    let present = |wire: &[u8]| {
        parse(&mut BytesMut::from(wire), &L)
            .expect("valid")
            .expect("complete")
            .present
    };
    assert_eq!(
        present(b"GET / HTTP/1.1\r\nHost: a\r\nX-Conn-Id: c\r\n\r\n"),
        Present::NONE
    );
    assert_eq!(
        present(b"GET / HTTP/1.1\r\nhost: a\r\nCONNECTION: Upgrade\r\nupgrade: websocket\r\nExpect: 100-continue\r\nContent-Type: application/grpc\r\n\r\n"),
        Present::UNKNOWN,
        "each of the four, in any case"
    );
    let p = present(b"POST / HTTP/1.0\r\ncontent-type: text/plain\r\ncontent-length: 0\r\n\r\n");
    assert_eq!(
        (p.connection, p.upgrade, p.expect, p.content_type),
        (false, false, false, true)
    );
    // Expect on HTTP/1.0 does not ask for a 100 (RFC 9110 section 10.1.1), but it is there.
    let p = present(b"GET / HTTP/1.0\r\nexpect: 100-continue\r\n\r\n");
    assert!(p.expect);
}
