//! HTTP/2 frame accounting never panics, finds the same frames however the bytes are split, and
//! a meter fed any frame sequence only ever answers Ok or an Abuse.
#![no_main]
use internal::proxy::downstream::h2::frames::{Frame, FrameScanner, Meter};
use libfuzzer_sys::fuzz_target;
use std::time::Duration;
use tokio::time::Instant;

fn frames(chunks: &[&[u8]]) -> (Vec<Frame>, bool) {
    let mut s = FrameScanner::default();
    let mut out = Vec::new();
    for c in chunks {
        s.feed::<()>(c, |f| {
            out.push(f);
            Ok(())
        })
        .expect("never fails");
        assert!(s.left_in_frame() <= (1 << 24) + 9);
    }
    (out, s.at_boundary())
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let at = usize::from(split).min(rest.len());
    let whole = frames(&[rest]);
    let halves = frames(&[&rest[..at], &rest[at..]]);
    let bytes: Vec<&[u8]> = rest.chunks(usize::from(split % 7) + 1).collect();
    let pieces = frames(&bytes);
    assert_eq!(whole, halves);
    assert_eq!(whole, pieces);
    let t0 = Instant::now();
    let mut m = Meter::new(u32::from(split % 5) + 1, Duration::from_secs(1), t0);
    for (i, f) in whole.0.iter().enumerate() {
        let now = t0 + Duration::from_millis(i as u64);
        let _ = m.client_frame(*f, now);
        let _ = m.gateway_frame(*f, now);
    }
});
