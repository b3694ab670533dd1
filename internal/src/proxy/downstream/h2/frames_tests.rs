//! Unit tests of [`super`].

use super::*;

/// One HTTP/2 frame on the wire (RFC 9113 section 4.1): length, type, flags, stream, payload.
pub(crate) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = u32::to_be_bytes(payload.len() as u32)[1..].to_vec();
    v.push(kind);
    v.push(flags);
    v.extend_from_slice(&stream.to_be_bytes());
    v.extend_from_slice(payload);
    v
}

/// The scanner's view of an RST_STREAM frame (RFC 9113 section 6.4) on `stream` with error `code`.
fn rst(stream: u32, code: u32) -> Frame {
    Frame {
        len: 4,
        kind: RST_STREAM,
        flags: 0,
        stream,
        word: Some(code),
    }
}

#[test]
fn scanner_finds_frames_fed_byte_by_byte() {
    let mut bytes = frame(HEADERS, END_HEADERS, 1, &[0x82; 21]);
    bytes.extend(frame(RST_STREAM, 0, 1, &8u32.to_be_bytes()));
    bytes.extend(frame(PING, 0, 0, &[0; 8]));
    let mut s = FrameScanner::default();
    let mut seen = Vec::new();
    for b in &bytes {
        s.feed::<()>(std::slice::from_ref(b), |f| {
            seen.push(f);
            Ok(())
        })
        .expect("feed");
    }
    assert!(s.at_boundary());
    assert_eq!(seen.len(), 3);
    assert_eq!(
        (seen[0].kind, seen[0].len, seen[0].stream),
        (HEADERS, 21, 1)
    );
    assert_eq!((seen[1].kind, seen[1].word), (RST_STREAM, Some(CANCEL)));
    assert_eq!(seen[2].kind, PING);
}

#[test]
fn resets_are_a_rate_with_bursts() {
    let t0 = Instant::now();
    let mut m = Meter::new(200, Duration::from_secs(10), t0);
    // A burst of 200 passes, the 201st in the same instant does not.
    for i in 0..200 {
        assert_eq!(m.client_frame(rst(2 * i + 1, CANCEL), t0), Ok(()));
    }
    assert_eq!(m.client_frame(rst(401, CANCEL), t0), Err(Abuse::Resets));
    // An honest canceller at 150/s for 10 s is never cut.
    let mut m = Meter::new(200, Duration::from_secs(10), t0);
    for i in 0..1500u32 {
        let now = t0 + Duration::from_millis(u64::from(i) * 1000 / 150);
        assert_eq!(
            m.client_frame(rst(2 * i + 1, CANCEL), now),
            Ok(()),
            "reset {i}"
        );
    }
}

#[test]
fn one_charge_per_stream_and_gateway_resets_by_code() {
    let t0 = Instant::now();
    let mut m = Meter::new(1, Duration::from_secs(10), t0);
    assert_eq!(m.client_frame(rst(5, CANCEL), t0), Ok(()));
    assert_eq!(m.gateway_frame(rst(5, 0x5), t0), Ok(()), "same stream");
    assert_eq!(m.gateway_frame(rst(7, NO_ERROR), t0), Ok(()));
    assert_eq!(m.gateway_frame(rst(9, 0x1), t0), Err(Abuse::Resets));
}

/// CASE-25 D: 300 early answers (the gateway's RST_STREAM(NO_ERROR)) whose in-flight DATA each
/// draws RST_STREAM(STREAM_CLOSED) once h2 forgot the stream, all in one instant, cost nothing;
/// a STREAM_CLOSED on a stream the gateway never closed is still charged.
#[test]
fn late_data_on_early_answered_streams_is_not_charged() {
    const STREAM_CLOSED: u32 = 0x5;
    let t0 = Instant::now();
    let mut m = Meter::new(1, Duration::from_secs(10), t0);
    // h2 remembers the last 50 streams it reset: DATA in flight on older ones draws
    // STREAM_CLOSED, here 50 streams after their early answer.
    for i in 0..350u32 {
        if i < 300 {
            let s = 2 * i + 1;
            assert_eq!(m.gateway_frame(rst(s, NO_ERROR), t0), Ok(()), "stream {s}");
        }
        if i >= 50 {
            let late = 2 * (i - 50) + 1;
            assert_eq!(
                m.gateway_frame(rst(late, STREAM_CLOSED), t0),
                Ok(()),
                "stream {late}"
            );
        }
    }
    assert_eq!(
        m.gateway_frame(rst(1001, STREAM_CLOSED), t0),
        Ok(()),
        "the budget of 1"
    );
    assert_eq!(
        m.gateway_frame(rst(1003, STREAM_CLOSED), t0),
        Err(Abuse::Resets)
    );
}

#[test]
fn header_block_must_end_in_time_and_empty_continuations_are_charged() {
    let t0 = Instant::now();
    let mut m = Meter::new(200, Duration::from_secs(10), t0);
    let h = Frame {
        len: 21,
        kind: HEADERS,
        flags: 0,
        stream: 1,
        word: None,
    };
    let c = Frame {
        len: 0,
        kind: CONTINUATION,
        ..h
    };
    assert_eq!(m.client_frame(h, t0), Ok(()));
    assert_eq!(m.last_client_stream(), 1);
    assert_eq!(m.header_deadline(), Some(t0 + Duration::from_secs(10)));
    assert_eq!(
        m.client_frame(c, t0 + Duration::from_secs(11)),
        Err(Abuse::HeaderBlockTimeout)
    );
    let mut m = Meter::new(200, Duration::from_secs(10), t0);
    let mut res = Ok(());
    for _ in 0..=MAX_CONTROL_FRAMES_PER_SECOND {
        res = res.and(m.client_frame(c, t0));
    }
    assert_eq!(res, Err(Abuse::ControlFrames));
}

#[test]
fn goaway_bytes() {
    assert_eq!(
        goaway(3, ENHANCE_YOUR_CALM, b"x"),
        vec![0, 0, 9, 7, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0xb, b'x']
    );
}
