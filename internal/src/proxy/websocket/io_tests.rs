//! Unit tests of [`super::FrameIo`]: frame-by-frame reads, batch scans, the message limit.

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::super::frame::{Frame, FrameError, Kind, Peer};
use super::*;
use crate::proxy::respond::CloseCode;

/// A masked client frame: first byte `b0`, payload `p`, key `k` (RFC 6455 section 5.3).
pub(crate) fn masked(b0: u8, p: &[u8], k: [u8; 4]) -> Vec<u8> {
    assert!(p.len() < 126);
    let mut v = vec![b0, 0x80 | p.len() as u8];
    v.extend_from_slice(&k);
    v.extend(p.iter().enumerate().map(|(i, b)| b ^ k[i & 3]));
    v
}

/// An unmasked node frame: first byte `b0`, payload `p`.
pub(crate) fn plain(b0: u8, p: &[u8]) -> Vec<u8> {
    let mut v = vec![b0];
    match p.len() {
        0..=125 => v.push(p.len() as u8),
        n => {
            v.push(126);
            v.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    v.extend_from_slice(p);
    v
}

fn side(peer: Peer) -> (FrameIo<DuplexStream>, DuplexStream) {
    let (a, b) = tokio::io::duplex(64 * 1024);
    (FrameIo::new(a, peer), b)
}

#[tokio::test]
async fn frames_read_one_by_one_keep_their_bytes_and_eof_between_frames_is_clean() {
    let (mut io, mut peer) = side(Peer::Client);
    let a = masked(0xc1, b"compressed", [9, 8, 7, 6]);
    let b = masked(0x89, b"p", [1, 1, 1, 1]);
    peer.write_all(&a[..3]).await.expect("write");
    let read = tokio::spawn(async move {
        let f1 = io.read().await.expect("read").expect("frame");
        let f2 = io.read().await.expect("read").expect("frame");
        let end = io.read().await.expect("clean eof");
        (f1, f2, end)
    });
    peer.write_all(&a[3..]).await.expect("write");
    peer.write_all(&b).await.expect("write");
    peer.shutdown().await.expect("shutdown");
    let (f1, f2, end) = read.await.expect("join");
    assert_eq!(f1.wire(), &a[..], "RSV1, opcode and mask key kept");
    assert_eq!(f1.kind(), Kind::Start { fin: true });
    assert_eq!(f1.payload_len(), 10);
    assert_eq!(f2.kind(), Kind::Ping);
    assert!(end.is_none());
}

#[tokio::test]
async fn eof_inside_a_frame_is_truncated() {
    let (mut io, mut peer) = side(Peer::Node);
    peer.write_all(&[0x81, 0x05, b'h']).await.expect("write");
    peer.shutdown().await.expect("shutdown");
    assert!(matches!(io.read().await, Err(FrameError::Truncated)));
}

#[tokio::test]
async fn a_fragment_over_the_limit_is_refused_from_its_header() {
    let (mut io, mut peer) = side(Peer::Node);
    io.set_max_message(100);
    peer.write_all(&plain(0x01, &[b'a'; 60]))
        .await
        .expect("write");
    peer.write_all(&plain(0x89, b"")).await.expect("write");
    // Only the header of the 41-byte continuation: 60 + 41 > 100 is known before its payload.
    peer.write_all(&[0x00, 41]).await.expect("write");
    assert_eq!(
        io.read().await.expect("first").expect("frame").kind(),
        Kind::Start { fin: false }
    );
    assert!(io.in_message());
    assert_eq!(
        io.read().await.expect("ping").expect("frame").kind(),
        Kind::Ping
    );
    assert!(matches!(io.read().await, Err(FrameError::TooBig(101, 100))));
}

#[test]
fn scan_relays_whole_frames_and_stops_where_the_relay_must_look() {
    let (mut io, _peer) = side(Peer::Node);
    let mut b = plain(0x81, b"one");
    b.extend(plain(0x01, b"frag"));
    b.extend(plain(0x89, b"ping"));
    b.extend(plain(0x80, b"end"));
    let whole = b.len();
    b.extend(plain(0x88, &1000u16.to_be_bytes()));
    let s = io.track.scan(&b);
    assert_eq!(
        s,
        Scan {
            relay: whole,
            stop: true
        },
        "a node's fragments pass, Close stops"
    );
    assert!(!io.track.msg.open());
    // Cut anywhere inside the second frame: the first passes, the rest waits.
    let first = plain(0x81, b"one").len();
    for cut in first..first + 6 {
        let (mut io, _peer) = side(Peer::Node);
        assert_eq!(
            io.track.scan(&b[..cut]),
            Scan {
                relay: first,
                stop: false
            }
        );
    }
}

#[test]
fn scan_leaves_a_clients_fragments_to_the_frame_reader() {
    let (mut io, _peer) = side(Peer::Client);
    let mut b = masked(0x82, b"whole", [1, 2, 3, 4]);
    let whole = b.len();
    b.extend(masked(0x8a, b"pong", [5, 6, 7, 8]));
    let pong = b.len();
    b.extend(masked(0x02, b"frag", [1, 2, 3, 4]));
    assert_eq!(
        io.track.scan(&b),
        Scan {
            relay: pong,
            stop: true
        }
    );
    assert!(whole < pong);
    assert!(
        !io.in_message(),
        "the fragment is not accounted by the scan"
    );
}

#[test]
fn unsent_gives_the_frames_not_fully_written() {
    let a = masked(0x81, b"aaaa", [1, 2, 3, 4]);
    let b = masked(0x81, b"bbbb", [1, 2, 3, 4]);
    let mut all = a.clone();
    all.extend(&b);
    let frames: Vec<Frame> = unsent(&all, a.len() + 1, all.len(), Peer::Client);
    assert_eq!(frames.len(), 1);
    assert_eq!(frames[0].wire(), &b[..]);
    assert_eq!(unsent(&all, 0, all.len(), Peer::Client).len(), 2);
    assert!(unsent(&all, all.len(), all.len(), Peer::Client).is_empty());
}

#[tokio::test]
async fn frames_written_to_a_node_keep_the_clients_mask_and_the_gateways_get_one() {
    let (mut io, mut peer) = side(Peer::Node);
    let client = masked(0x81, b"hi", [4, 3, 2, 1]);
    let head = super::super::frame::Head::parse(&client, Peer::Client)
        .expect("valid")
        .expect("whole");
    let f = Frame::new(head, bytes::Bytes::from(client.clone()));
    assert_eq!(io.write(&f).await.expect("write"), client.len());
    let close = super::super::frame::close(CloseCode::GOING_AWAY, "going away");
    let n = io.write(&close).await.expect("write");
    drop(io);
    let mut got = Vec::new();
    peer.read_to_end(&mut got).await.expect("read");
    assert_eq!(&got[..client.len()], &client[..]);
    assert_eq!(got.len(), client.len() + n);
    assert_eq!(
        got[client.len() + 1] & 0x80,
        0x80,
        "the gateway's Close is masked"
    );
}
