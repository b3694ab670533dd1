use bytes::Bytes;
use flate2::{Compress, Compression, FlushCompress};

use super::*;
use crate::proxy::websocket::frame::Head;

fn params(s: &str) -> DeflateParams {
    DeflateParams::parse(s).expect("valid permessage-deflate element")
}

/// `msg` compressed as a permessage-deflate sender does it (RFC 7692 section 7.2.1): a sync flush
/// and the four tail bytes removed, with the compressor `z` (its context kept by the caller).
fn deflate(z: &mut Compress, msg: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len() + 64);
    z.compress_vec(msg, &mut out, FlushCompress::Sync)
        .expect("compresses");
    while out.capacity() == out.len() {
        out.reserve(1024);
        z.compress_vec(&[], &mut out, FlushCompress::Sync)
            .expect("compresses");
    }
    assert_eq!(out[out.len() - 4..], TAIL);
    out.truncate(out.len() - 4);
    out
}

/// A node's frame (unmasked) with first byte `b0` and `payload`.
fn node_frame(b0: u8, payload: &[u8]) -> Frame {
    Frame::data(b0, payload, Peer::Client)
}

#[test]
fn answers_parse_with_their_defaults_and_bad_ones_do_not() {
    assert_eq!(
        params("permessage-deflate"),
        DeflateParams {
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            server_max_window_bits: 15,
            client_max_window_bits: 15,
        }
    );
    let p = params(
        "Permessage-Deflate; server_no_context_takeover;client_max_window_bits=\"10\"; server_max_window_bits=12",
    );
    assert_eq!(
        (
            p.server_no_context_takeover,
            p.client_no_context_takeover,
            p.server_max_window_bits,
            p.client_max_window_bits
        ),
        (true, false, 12, 10)
    );
    for bad in [
        "x-webkit-deflate-frame",
        "permessage-deflate; server_max_window_bits=16",
        "permessage-deflate; server_max_window_bits=7",
        "permessage-deflate; server_max_window_bits",
        "permessage-deflate; client_no_context_takeover; client_no_context_takeover",
        "permessage-deflate; mystery",
        "permessage-deflate; server_no_context_takeover=1",
    ] {
        assert_eq!(DeflateParams::parse(bad), None, "{bad}");
    }
    assert_eq!(
        params("permessage-deflate; server_max_window_bits=12")
            .for_hopping_client()
            .render(),
        "permessage-deflate; client_no_context_takeover; server_max_window_bits=12"
    );
}

#[test]
fn agreed_extensions_tell_deflate_from_anything_else() {
    let of = |v: &[&str]| Agreed::of(v.iter().map(|s| s.as_bytes()));
    assert_eq!(of(&[]), Agreed::None);
    assert_eq!(of(&["  "]), Agreed::None);
    assert_eq!(
        of(&["permessage-deflate; client_max_window_bits=9"]).deflate(),
        Some(params("permessage-deflate; client_max_window_bits=9"))
    );
    assert_eq!(of(&["x-ext"]), Agreed::Other);
    assert_eq!(of(&["permessage-deflate", "x-ext"]), Agreed::Other);
    assert_eq!(of(&["permessage-deflate; bogus"]), Agreed::Other);
}

#[test]
fn the_plan_inflates_only_what_the_other_end_could_not_read() {
    let client =
        params("permessage-deflate; client_no_context_takeover; server_max_window_bits=12");
    let same = params("permessage-deflate; server_max_window_bits=12");
    assert!(Plan::of(Some(client), Some(same)).is_empty());
    assert!(Plan::of(None, None).is_empty());
    assert_eq!(
        Plan::of(Some(client), None),
        Plan {
            client: true,
            node: false
        },
        "a node without compression gets plain messages; its own pass"
    );
    assert_eq!(
        Plan::of(Some(client), Some(params("permessage-deflate"))),
        Plan {
            client: false,
            node: true
        },
        "a node window of 15 is larger than the client's 12"
    );
    assert_eq!(
        Plan::of(
            Some(client),
            Some(params(
                "permessage-deflate; server_max_window_bits=12; client_max_window_bits=9"
            ))
        ),
        Plan {
            client: true,
            node: false
        },
        "the client compresses with a larger window than the node reads"
    );
    let reset = params(
        "permessage-deflate; client_no_context_takeover; server_no_context_takeover; server_max_window_bits=12",
    );
    assert!(
        Plan::of(
            Some(reset),
            Some(params("permessage-deflate; server_max_window_bits=12"))
        )
        .node
    );
    assert!(
        !Plan::of(Some(client), Some(reset)).node,
        "a node that resets more than agreed is still readable"
    );
}

#[test]
fn compressed_messages_inflate_to_plain_frames_with_the_node_context_kept() {
    let node = params("permessage-deflate");
    let client =
        params("permessage-deflate; client_no_context_takeover; server_no_context_takeover");
    let mut t = Translate::new(Plan::of(Some(client), Some(node)), Some(client), Some(node))
        .expect("the node direction is inflated");
    let mut z = Compress::new(Compression::default(), false);
    for round in 0..3 {
        // The same text each time: from the second message on it refers to the first one's bytes.
        let msg = format!("hello hello hello {}", "x".repeat(40));
        let wire = deflate(&mut z, msg.as_bytes());
        let out = t
            .frame(&node_frame(0xc1, &wire), Peer::Client, 1 << 20)
            .expect("inflates")
            .expect("translated");
        assert_eq!(out.first_byte(), 0x81, "RSV1 cleared, round {round}");
        assert_eq!(&*out.payload(), msg.as_bytes());
    }
    // An uncompressed message and control frames pass as they are.
    assert!(t
        .frame(&node_frame(0x81, b"plain"), Peer::Client, 1 << 20)
        .expect("ok")
        .is_none());
    assert!(t
        .frame(&node_frame(0x89, b"ping"), Peer::Client, 1 << 20)
        .expect("ok")
        .is_none());
    assert!(t
        .frame(&node_frame(0xc1, b"x"), Peer::Node, 1 << 20)
        .expect("ok")
        .is_none());
}

#[test]
fn a_fragmented_client_message_inflates_frame_by_frame_and_is_masked_for_the_node() {
    let client = params("permessage-deflate; client_no_context_takeover");
    let mut t = Translate::new(Plan::of(Some(client), None), Some(client), None).expect("plan");
    let msg: Vec<u8> = (0..100_000u32)
        .flat_map(|i| (i % 251).to_le_bytes())
        .collect();
    let mut z = Compress::new(Compression::fast(), false);
    let wire = deflate(&mut z, &msg);
    let (a, b) = wire.split_at(wire.len() / 2);
    // Client frames arrive masked: make them as the client would.
    let masked = |b0: u8, p: &[u8]| {
        let f = Frame::data(b0, p, Peer::Node);
        let head = Head::parse(f.wire(), Peer::Client)
            .expect("valid")
            .expect("whole");
        Frame::new(head, Bytes::copy_from_slice(f.wire()))
    };
    let first = t
        .frame(&masked(0x42, a), Peer::Node, 1 << 22)
        .expect("ok")
        .expect("translated");
    let last = t
        .frame(&masked(0x80, b), Peer::Node, 1 << 22)
        .expect("ok")
        .expect("translated");
    assert_eq!(first.first_byte(), 0x02, "binary, not final, RSV1 cleared");
    assert_eq!(last.first_byte(), 0x80);
    let mut plain = first.payload().into_owned();
    plain.extend_from_slice(&last.payload());
    assert_eq!(plain, msg);
    assert!(first.wire()[1] & 0x80 != 0, "masked for the node");
}

#[test]
fn an_inflated_message_past_the_limit_is_refused() {
    let client = params("permessage-deflate; client_no_context_takeover");
    let mut t = Translate::new(Plan::of(Some(client), None), Some(client), None).expect("plan");
    let mut z = Compress::new(Compression::best(), false);
    let bomb = deflate(&mut z, &vec![0u8; 1 << 20]);
    assert!(
        bomb.len() < 8 * 1024,
        "a megabyte of zeros compresses to a few KiB"
    );
    let f = Frame::data(0xc2, &bomb, Peer::Node);
    let head = Head::parse(f.wire(), Peer::Client)
        .expect("valid")
        .expect("whole");
    let f = Frame::new(head, Bytes::copy_from_slice(f.wire()));
    assert!(matches!(
        t.frame(&f, Peer::Node, 64 * 1024),
        Err(FrameError::TooBig(size, 65_536)) if size > 65_536
    ));
    let garbage = Frame::data(0xc2, &[0xff; 16], Peer::Node);
    let head = Head::parse(garbage.wire(), Peer::Client)
        .expect("valid")
        .expect("whole");
    let garbage = Frame::new(head, Bytes::copy_from_slice(garbage.wire()));
    let mut t = Translate::new(Plan::of(Some(client), None), Some(client), None).expect("plan");
    assert!(matches!(
        t.frame(&garbage, Peer::Node, 1 << 20),
        Err(FrameError::Protocol(_))
    ));
}
