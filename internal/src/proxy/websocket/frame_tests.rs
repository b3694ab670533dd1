//! Frame headers, masking and Close frames (RFC 6455 section 5).

use super::*;

fn parse(b: &[u8], from: Peer) -> Frame {
    let head = Head::parse(b, from).expect("valid").expect("whole header");
    Frame::new(head, Bytes::copy_from_slice(b))
}

#[test]
fn headers_read_kind_mask_and_the_three_length_forms() {
    let h = Head::parse(&[0x81, 0x85, 1, 2, 3, 4], Peer::Client)
        .expect("valid")
        .expect("whole");
    assert_eq!(
        h,
        Head {
            kind: Kind::Start { fin: true },
            mask: Some([1, 2, 3, 4]),
            len: 6,
            payload: 5
        }
    );
    let h = Head::parse(&[0x02, 126, 0x01, 0x00], Peer::Node)
        .expect("valid")
        .expect("whole");
    assert_eq!(
        (h.kind, h.len, h.payload),
        (Kind::Start { fin: false }, 4, 256)
    );
    let mut b = vec![0x80, 127];
    b.extend_from_slice(&70_000u64.to_be_bytes());
    let h = Head::parse(&b, Peer::Node).expect("valid").expect("whole");
    assert_eq!(
        (h.kind, h.len, h.payload),
        (Kind::Continue { fin: true }, 10, 70_000)
    );
    // Every prefix shorter than the header is "not yet".
    for cut in 0..b.len() {
        assert_eq!(Head::parse(&b[..cut], Peer::Node).expect("valid"), None);
    }
    assert_eq!(
        Head::parse(&[0x81, 0x85, 1, 2, 3], Peer::Client).expect("valid"),
        None
    );
}

#[test]
fn protocol_violations_are_refused() {
    let refused = |b: &[u8], from| matches!(Head::parse(b, from), Err(FrameError::Protocol(_)));
    assert!(refused(&[0x83, 0x00], Peer::Node), "reserved opcode");
    assert!(
        refused(&[0x81, 0x01], Peer::Client),
        "unmasked client frame"
    );
    assert!(
        refused(&[0x81, 0x81, 0, 0, 0, 0], Peer::Node),
        "masked node frame"
    );
    assert!(refused(&[0x09, 0x00], Peer::Node), "fragmented ping");
    assert!(
        refused(&[0x89, 126, 0, 200], Peer::Node),
        "ping over 125 bytes"
    );
    let mut b = vec![0x82, 127];
    b.extend_from_slice(&(1u64 << 63).to_be_bytes());
    assert!(refused(&b, Peer::Node), "64-bit length with the top bit");
}

#[test]
fn a_client_frame_goes_to_the_node_with_its_own_mask_key() {
    // "Hello" masked with 37 fa 21 3d (RFC 6455 section 5.7), RSV1 set.
    let wire = [
        0xc1, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
    ];
    let f = parse(&wire, Peer::Client);
    assert_eq!(&f.for_peer(Peer::Node)[..], &wire[..], "byte for byte");
    assert_eq!(f.payload_len(), 5);
    // Echoed back to the client it goes unmasked, first byte (FIN, RSV1, opcode) kept.
    assert_eq!(&f.for_peer(Peer::Client)[..], b"\xc1\x05Hello");
}

#[test]
fn a_node_frame_goes_to_the_client_as_is_and_masked_to_a_node() {
    let wire = b"\x81\x05Hello";
    let f = parse(wire, Peer::Node);
    assert_eq!(&f.for_peer(Peer::Client)[..], &wire[..]);
    let masked = f.for_peer(Peer::Node);
    let back = parse(&masked, Peer::Client);
    assert_eq!(&back.for_peer(Peer::Client)[..], &wire[..]);
}

#[test]
fn close_frames_carry_code_and_cut_reason() {
    let f = close(CloseCode::SERVICE_RESTART, &"é".repeat(100));
    assert_eq!(f.close_code(), Some(1012));
    assert_eq!(f.kind(), Kind::Close);
    assert!(f.payload_len() <= 125);
    assert!(std::str::from_utf8(&f.payload()[2..]).is_ok());
    let masked = parse(&f.for_peer(Peer::Node), Peer::Client);
    assert_eq!(masked.close_code(), Some(1012), "read through the mask");
    assert_eq!(parse(&[0x88, 0x00], Peer::Node).close_code(), None);
}
