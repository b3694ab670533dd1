//! The chunked decoder (`proxy::http1_codec::chunked`) on arbitrary bytes never panics, never reads past
//! the end of the body (what is left is the input's suffix) and does not depend on how the bytes
//! are split into reads; and whatever the encoder makes of chunks (split from the input at 0xff
//! bytes) decodes back to the same bytes with nothing left over.
#![no_main]
use internal::proxy::http1_codec::chunked::{decode_all, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = decode_all(data, data.len().max(1));
    for step in [1, 3] {
        assert_eq!(decode_all(data, step), whole, "step {step}");
    }
    if let Ok((body, _, rest)) = &whole {
        assert!(data.ends_with(rest), "read past the body");
        assert!(body.len() <= data.len());
    }
    let chunks: Vec<&[u8]> = data.split(|b| *b == 0xff).collect();
    let wire = encode(&chunks, None);
    let (body, trailers, rest) = decode_all(&wire, 7).expect("the encoder's output decodes");
    assert_eq!(body, chunks.concat());
    assert!(trailers.is_none() && rest.is_empty());
});
