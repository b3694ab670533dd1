//! Unit tests of [`super`].

use super::*;

const L: HeadLimits = super::super::head::TEST_LIMITS;

/// Feeds `wire` in pieces of `step` bytes; returns what hyper reads, the refusal and the heads seen.
fn scan(wire: &[u8], step: usize) -> (Vec<u8>, Option<(u64, Refusal)>, u64) {
    let log = FramingLog::new();
    let mut s = Scanner::new(L);
    let mut out = Vec::new();
    for piece in wire.chunks(step) {
        s.feed(piece, &log, &mut out);
    }
    (out, log.refused.get().cloned(), s.heads)
}

#[test]
fn follows_bodies_and_refuses_the_conflicting_head() {
    let honest = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
GET /b HTTP/1.1\r\nHost: x\r\n\r\n\
POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nab\ncd\r\n0\r\nX-T: 1\r\n\r\n";
    let mut wire = honest.to_vec();
    wire.extend_from_slice(b"POST /d HTTP/1.1\r\nContent-Length: 52\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /admin HTTP/1.1\r\nHost: x\r\n\r\n");
    for step in [1, 3, 7, wire.len()] {
        let (out, refused, heads) = scan(&wire, step);
        assert_eq!(
            refused,
            Some((
                4,
                Refusal::BadRequest("Content-Length together with Transfer-Encoding")
            )),
            "step {step}"
        );
        assert_eq!(heads, 4);
        // Hyper reads the honest requests unchanged, then the refused head up to the bad line.
        let mut expected = honest.to_vec();
        expected.extend_from_slice(b"POST /d HTTP/1.1\r\nContent-Length: 52\r\n\r\n");
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&expected),
            "step {step}"
        );
    }
    // A body containing a fake head, LF-only lines.
    let wire =
        b"POST /a HTTP/1.1\nContent-Length: 38\n\nGET /x HTTP/1.1\r\nContent-Length: 1\r\n\r\n\
POST /e HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n42\r\n";
    let (_, refused, heads) = scan(wire, 5);
    assert_eq!(refused.map(|r| r.0), Some(2));
    assert_eq!(heads, 2);
}

#[test]
fn honest_traffic_passes_unchanged_and_upgrades_stop_the_watch() {
    for wire in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n\x81\x05Content-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x01",
        b"CONNECT a:443 HTTP/1.1\r\nX: \x01\r\n\r\n",
    ] {
        for step in [1, 2, 4, wire.len()] {
            let (out, refused, _) = scan(wire, step);
            assert_eq!(out, wire, "step {step}");
            assert_eq!(refused, None);
        }
    }
}

#[test]
fn refused_heads_get_a_stand_in_and_nothing_after_them_passes() {
    let (out, refused, heads) = scan(
        b"GET /a HTTP/1.1\r\nX-Conn-Id: a\x01b\r\n\r\nGET /b HTTP/1.1\r\n\r\n",
        3,
    );
    assert_eq!(out, b"GET /a HTTP/1.1\r\n\r\n");
    assert_eq!(
        refused,
        Some((1, Refusal::BadRequest("control character in a field value")))
    );
    assert_eq!(heads, 1);
    let (out, refused, _) = scan(b"GET / HTTP/1.1\r\n\r\nGET /\x7f HTTP/1.1\r\n\r\n", 4);
    assert_eq!(out, b"GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n");
    assert_eq!(refused.map(|r| r.0), Some(2));
    // Too long before its end arrives: refused at once.
    let long = format!("GET /{}", "a".repeat(20_000));
    let (_, refused, _) = scan(long.as_bytes(), 1000);
    assert_eq!(refused, Some((1, Refusal::UriTooLong(16384))));
}

#[test]
fn check_next_refuses_only_the_flagged_request() {
    let log = FramingLog::new();
    log.refuse(2, Refusal::BadRequest("x"));
    log.refuse(3, Refusal::BadRequest("y"));
    assert!(log.check_next().is_ok());
    assert!(matches!(log.check_next(), Err(ProxyError::BadRequest("x"))));
    assert!(log.check_next().is_ok());
}
