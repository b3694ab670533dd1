//! Unit tests of [`super`]: each rule of the module docs, and encode then decode.

use super::*;

fn ok(wire: &[u8]) -> DecodedBody {
    let whole = decode_all(wire, wire.len()).expect("valid");
    for step in [1, 2, 5] {
        assert_eq!(
            decode_all(wire, step).expect("valid").0,
            whole.0,
            "step {step}"
        );
    }
    whole
}

fn bad(wire: &[u8]) -> &'static str {
    decode_all(wire, 1).expect_err("invalid").0
}

#[test]
fn sizes_extensions_and_the_end() {
    let (data, trailers, rest) =
        ok(b"5\r\nhello\r\nA;name=\"v\" ; x\r\n0123456789\r\n000\r\n\r\nNEXT");
    assert_eq!(data, b"hello0123456789");
    assert_eq!(trailers, None);
    assert_eq!(rest, b"NEXT", "never reads past the body");
    // BWS before the extension or the line end (section 7.1.1).
    assert_eq!(ok(b"3 \t;e\r\nabc\r\n0 \r\n\r\n").0, b"abc");
    assert_eq!(
        bad(b"ffffffffffffffff\r\n"),
        "incomplete",
        "the largest size parses"
    );
    assert_eq!(bad(b"1ffffffffffffffff\r\n"), "chunk size too large");
    assert_eq!(bad(b"\r\n"), "no chunk size");
    assert_eq!(bad(b";e\r\n"), "no chunk size");
    assert_eq!(bad(b"5x\r\nhello\r\n"), "invalid chunk size line");
    assert_eq!(bad(b"5 5\r\nhello\r\n"), "invalid chunk size line");
    assert_eq!(bad(b"5\nhello\r\n"), "invalid chunk size line");
    assert_eq!(bad(b"5\r\rhello\r\n"), "expected LF");
    assert_eq!(bad(b"5\r\nhello!\r\n"), "chunk data longer than its size");
    assert_eq!(bad(b"5\r\nhello\r\r"), "expected LF");
    assert_eq!(bad(b"5;a\nb\r\n"), "bare LF in a chunk extension");
    assert_eq!(bad(b"5\r\nhel"), "incomplete");
    let long_ext = format!("1;{}\r\nx\r\n0\r\n\r\n", "e".repeat(MAX_EXTENSIONS + 1));
    assert_eq!(bad(long_ext.as_bytes()), "chunk extensions too long");
}

#[test]
fn trailers() {
    let (data, trailers, rest) = ok(b"2\r\nhi\r\n0\r\nX-Sum: abc\r\nX-B:  2 \r\n\r\nN");
    assert_eq!(data, b"hi");
    let t = trailers.expect("trailers");
    assert_eq!(t["x-sum"], "abc");
    assert_eq!(t["x-b"], "2");
    assert_eq!(rest, b"N");
    assert_eq!(
        bad(b"0\r\nContent-Length: 5\r\n\r\n"),
        "framing field in the trailer section"
    );
    assert_eq!(
        bad(b"0\r\nTransfer-Encoding: chunked\r\n\r\n"),
        "framing field in the trailer section"
    );
    assert_eq!(bad(b"0\r\nNo colon\r\n\r\n"), "invalid trailer field");
    assert_eq!(bad(b"0\r\nX: 1\n\r\n"), "trailer line without CR LF");
    let long = format!("0\r\nX: {}\r\n\r\n", "v".repeat(MAX_TRAILERS));
    assert_eq!(bad(long.as_bytes()), "trailer section too long");
}

#[test]
fn encoder_sizes_and_round_trip() {
    let mut b = [0u8; 18];
    assert_eq!(chunk_head(1, &mut b), b"1\r\n");
    assert_eq!(chunk_head(0x1a2b, &mut b), b"1a2b\r\n");
    assert_eq!(chunk_head(16, &mut b), b"10\r\n");
    assert_eq!(chunk_head(usize::MAX, &mut b), b"ffffffffffffffff\r\n");
    let mut t = HeaderMap::new();
    t.insert("grpc-status", HeaderValue::from_static("0"));
    let wire = encode(&[b"ab", b"", &[7u8; 300]], Some(&t));
    assert!(wire.starts_with(b"2\r\nab\r\n12c\r\n"));
    assert!(wire.ends_with(b"0\r\ngrpc-status: 0\r\n\r\n"));
    let (data, trailers, rest) = ok(&wire);
    assert_eq!(data.len(), 302);
    assert_eq!(trailers, Some(t));
    assert!(rest.is_empty());
    assert_eq!(encode(&[], None), LAST_CHUNK);
}
