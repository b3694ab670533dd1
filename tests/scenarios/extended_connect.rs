//! Extended CONNECT (RFC 8441) for a protocol other than `websocket` on the cleartext listener
//! (CASE-36 a, SPEC section 4): the listener does not advertise SETTINGS_ENABLE_CONNECT_PROTOCOL,
//! so `:protocol` makes the request malformed (RFC 8441 section 3, RFC 9113 section 8.1.1); it is
//! refused before anything reaches a node, and the DATA behind it never becomes a request. The TLS
//! listener's side is in `tls::extended_connect`.

use std::time::Duration;

use integration_tests::h2raw::{self, *};
use integration_tests::recorder::{own_answer, refuses_upgrades, single, MARKER, SMUGGLED};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

/// True if `end` refuses the stream as CASE-36 a/b allow: RST_STREAM with `reset` before any
/// response head, or a final 400, 404, 405 or 501 with END_STREAM.
pub(crate) fn refused(end: &StreamEnd, reset: &[u32]) -> bool {
    match end {
        StreamEnd::Reset { status: None, code } => reset.contains(code),
        StreamEnd::Answer { status, .. } => [400, 404, 405, 501].contains(status),
        _ => false,
    }
}

/// CASE-36 a: `HEADERS HB(CONNECT /) + :protocol: connect-udp` (then `foo`) with a DATA frame
/// carrying a whole HTTP/1.1 request in the same write is reset with PROTOCOL_ERROR (or refused
/// with a 4xx/5xx); node-a receives nothing of it, and `GET /victim` afterwards gets node-a's own
/// answer for `/victim`.
#[tokio::test]
async fn case_36_extended_connect_for_another_protocol_is_refused_on_cleartext() {
    let (a, gw) = single(refuses_upgrades).await;
    for protocol in ["connect-udp", "foo"] {
        let (mut rd, mut wr) = h2raw::connect(&format!("127.0.0.1:{}", gw.port)).await;
        let mut block = hb("CONNECT", "/");
        block.extend(hpack_literal(":protocol", protocol.as_bytes()));
        let mut b = frame(HEADERS, END_HEADERS, 1, &block);
        b.extend(frame(DATA, 0, 1, SMUGGLED));
        wr.write_all(&b).await.expect("write");
        let end = rd
            .stream_end(1, Instant::now() + Duration::from_secs(5))
            .await;
        assert!(refused(&end, &[PROTOCOL_ERROR]), "{protocol}: {end:?}");
        own_answer(&gw, "/victim").await;
    }
    assert!(!a.saw(MARKER), "smuggled octets reached node-a");
    assert_eq!(a.paths(), ["/victim", "/victim"]);
}
