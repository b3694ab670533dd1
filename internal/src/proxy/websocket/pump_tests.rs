//! Unit tests of the pump: bytes through unchanged, message boundaries across read batches cut
//! anywhere, what stops it, and the node side's end seen before client bytes are written.

use std::task::{Context, Poll};

use futures_util::task::noop_waker_ref;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::super::frame::{FrameError, Kind, Peer};
use super::super::io::tests::{masked, plain};
use super::*;

/// The gateway's two sides and the far end of each: (down, client, up, node).
struct Rig {
    down: FrameIo<DuplexStream>,
    client: DuplexStream,
    up: FrameIo<DuplexStream>,
    node: DuplexStream,
    t: Traffic,
}

fn rig() -> Rig {
    let (a, client) = tokio::io::duplex(1 << 20);
    let (b, node) = tokio::io::duplex(1 << 20);
    Rig {
        down: FrameIo::new(a, Peer::Client),
        client,
        up: FrameIo::new(b, Peer::Node),
        node,
        t: Traffic {
            bytes_in: 0,
            bytes_out: 0,
            last: Instant::now(),
        },
    }
}

impl Rig {
    /// One poll (in-memory streams: everything written so far is readable at once).
    fn pump(&mut self) -> Poll<Pumped> {
        let mut cx = Context::from_waker(noop_waker_ref());
        poll(&mut cx, &mut self.down, &mut self.up, &mut self.t)
    }
}

/// Everything readable from `s` now.
fn drain(s: &mut DuplexStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let mut cx = Context::from_waker(noop_waker_ref());
    loop {
        let mut rb = tokio::io::ReadBuf::new(&mut buf);
        match std::pin::Pin::new(&mut *s).poll_read(&mut cx, &mut rb) {
            Poll::Ready(Ok(())) if !rb.filled().is_empty() => out.extend_from_slice(rb.filled()),
            _ => return out,
        }
    }
}

#[tokio::test]
async fn client_frames_reach_the_node_byte_for_byte_with_the_clients_mask_keys() {
    let mut r = rig();
    let mut sent = masked(0x82, &[0xaa; 64], [0x12, 0x34, 0x56, 0x78]);
    sent.extend(masked(0x89, b"ping", [0, 0, 0, 1]));
    sent.extend(masked(0xc1, b"rsv1 text", [0xff, 0xee, 0xdd, 0xcc]));
    r.client.write_all(&sent).await.expect("write");
    assert!(r.pump().is_pending());
    assert_eq!(drain(&mut r.node), sent);
    assert_eq!(r.t.bytes_in, sent.len() as u64);
    assert!(
        r.down.buf.is_empty() && r.down.buf.capacity() == 0,
        "nothing kept"
    );
}

#[tokio::test]
async fn node_messages_split_anywhere_across_reads_pass_whole_and_in_order() {
    // A fragmented message with a ping between its fragments, then a whole one.
    let mut stream = plain(0x01, b"first half ");
    stream.extend(plain(0x89, b"keepalive"));
    stream.extend(plain(0x80, b"second half"));
    stream.extend(plain(0x82, &[7u8; 300]));
    for cut in 1..stream.len() {
        let mut r = rig();
        r.node.write_all(&stream[..cut]).await.expect("write");
        assert!(r.pump().is_pending());
        let mut got = drain(&mut r.client);
        // Only whole frames are written: what arrived is a prefix of whole frames.
        assert!(stream.starts_with(&got), "cut {cut}");
        r.node.write_all(&stream[cut..]).await.expect("write");
        assert!(r.pump().is_pending());
        got.extend(drain(&mut r.client));
        assert_eq!(got, stream, "cut {cut}");
        assert!(!r.up.in_message(), "cut {cut}: the message ended");
        assert_eq!(r.t.bytes_out, stream.len() as u64);
    }
}

#[tokio::test]
async fn a_clients_fragmented_message_goes_to_the_frame_reader_after_what_came_before() {
    let mut r = rig();
    let ping = masked(0x89, b"", [1, 2, 3, 4]);
    let frag = masked(0x01, b"part", [5, 6, 7, 8]);
    let mut sent = ping.clone();
    sent.extend(&frag);
    sent.extend(masked(0x89, b"mid", [1, 1, 1, 1]));
    sent.extend(masked(0x80, b"rest", [2, 2, 2, 2]));
    r.client.write_all(&sent).await.expect("write");
    let Poll::Ready(Pumped::Client(Ok(Some(f)))) = r.pump() else {
        panic!("the fragment stops the pump");
    };
    assert_eq!(drain(&mut r.node), ping, "the ping before it went through");
    assert_eq!(f.wire(), &frag[..]);
    assert_eq!(f.kind(), Kind::Start { fin: false });
    assert!(r.down.in_message());
    // The interleaved ping and the last fragment come frame by frame too.
    let f = r.down.read().await.expect("read").expect("frame");
    assert_eq!(f.kind(), Kind::Ping);
    let f = r.down.read().await.expect("read").expect("frame");
    assert_eq!(f.kind(), Kind::Continue { fin: true });
    assert!(!r.down.in_message());
}

#[tokio::test]
async fn a_node_message_over_the_limit_across_fragments_stops_the_pump_with_its_size() {
    let mut r = rig();
    r.up.set_max_message(100);
    let first = plain(0x02, &[1u8; 60]);
    let mut sent = first.clone();
    sent.extend(plain(0x8a, b""));
    sent.extend(plain(0x00, &[2u8; 41]));
    r.node.write_all(&sent).await.expect("write");
    let Poll::Ready(Pumped::Node(Err(FrameError::TooBig(101, 100)))) = r.pump() else {
        panic!("1009: the message passes the limit");
    };
    let mut relayed = first;
    relayed.extend(plain(0x8a, b""));
    assert_eq!(
        drain(&mut r.client),
        relayed,
        "what came before the limit went through"
    );
}

#[tokio::test]
async fn a_close_stops_the_pump_after_the_frames_before_it() {
    let mut r = rig();
    let data = plain(0x81, b"bye soon");
    let close = plain(0x88, &1000u16.to_be_bytes());
    let mut sent = data.clone();
    sent.extend(&close);
    // The Close arrives in two reads.
    r.node
        .write_all(&sent[..sent.len() - 1])
        .await
        .expect("write");
    assert!(r.pump().is_pending());
    assert_eq!(drain(&mut r.client), data);
    r.node
        .write_all(&sent[sent.len() - 1..])
        .await
        .expect("write");
    let Poll::Ready(Pumped::Node(Ok(Some(f)))) = r.pump() else {
        panic!("the Close is for the relay");
    };
    assert_eq!(f.kind(), Kind::Close);
    assert_eq!(f.close_code(), Some(1000));
    assert!(
        drain(&mut r.client).is_empty(),
        "the relay decides about the Close"
    );
}

#[tokio::test]
async fn the_node_sides_end_is_seen_before_client_bytes_are_written_to_it() {
    let mut r = rig();
    let answer = plain(0x81, b"last answer");
    r.node.write_all(&answer).await.expect("write");
    r.node.shutdown().await.expect("shutdown");
    let msg = masked(0x81, b"next", [3, 3, 3, 3]);
    r.client.write_all(&msg).await.expect("write");
    let Poll::Ready(Pumped::Node(Ok(None))) = r.pump() else {
        panic!("the node side ended");
    };
    assert_eq!(
        drain(&mut r.client),
        answer,
        "its last answer reached the client"
    );
    // The client's message was not read: it is still there for the next node.
    let f = r.down.read().await.expect("read").expect("frame");
    assert_eq!(f.wire(), &msg[..]);
    let mut rest = Vec::new();
    drop(r.up);
    r.node.read_to_end(&mut rest).await.expect("read");
    assert!(rest.is_empty(), "nothing went to the node that was gone");
}

#[tokio::test]
async fn a_write_the_socket_cannot_take_at_once_is_owed_and_finished() {
    let (a, mut client) = tokio::io::duplex(1 << 20);
    // A small pipe to the node: 64 KiB of frames cannot go at once.
    let (b, mut node) = tokio::io::duplex(1024);
    let mut down = FrameIo::new(a, Peer::Client);
    let mut up = FrameIo::new(b, Peer::Node);
    let mut t = Traffic {
        bytes_in: 0,
        bytes_out: 0,
        last: Instant::now(),
    };
    let mut sent = Vec::new();
    for i in 0..1000u32 {
        sent.extend(masked(0x82, &[i as u8; 60], i.to_be_bytes()));
    }
    client.write_all(&sent).await.expect("write");
    let total = sent.len() as u64;
    let mut cx = Context::from_waker(noop_waker_ref());
    let Poll::Ready(Pumped::NodeBusy) = poll(&mut cx, &mut down, &mut up, &mut t) else {
        panic!("the node's socket is full");
    };
    assert!(down.owed.is_some());
    let reader = tokio::spawn(async move {
        let mut got = vec![0u8; sent.len()];
        node.read_exact(&mut got).await.expect("read");
        (got, sent)
    });
    while down.owed.is_some() || !down.buf.is_empty() || t.bytes_in < total {
        finish(&mut down, &mut up).await.expect("finish");
        match std::future::poll_fn(|cx| match poll(cx, &mut down, &mut up, &mut t) {
            Poll::Pending => Poll::Ready(None),
            Poll::Ready(p) => Poll::Ready(Some(p)),
        })
        .await
        {
            None | Some(Pumped::NodeBusy) => {}
            Some(other) => panic!("unexpected {other:?}"),
        }
    }
    let (got, sent) = reader.await.expect("join");
    assert_eq!(got, sent);
}

/// A waker that records being woken.
struct Flag(std::sync::atomic::AtomicBool);

impl std::task::Wake for Flag {
    fn wake(self: std::sync::Arc<Self>) {
        self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test]
async fn a_flooding_node_does_not_starve_the_client_direction() {
    let mut r = rig();
    let frame = plain(0x82, &[5u8; 1000]);
    let mut flood = Vec::new();
    while flood.len() < 400 * 1024 {
        flood.extend(&frame);
    }
    r.node.write_all(&flood).await.expect("write");
    let msg = masked(0x81, b"me too", [7, 7, 7, 7]);
    r.client.write_all(&msg).await.expect("write");
    let flag = std::sync::Arc::new(Flag(false.into()));
    let waker = std::task::Waker::from(flag.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(poll(&mut cx, &mut r.down, &mut r.up, &mut r.t).is_pending());
    assert_eq!(drain(&mut r.node), msg, "the client's turn came");
    assert!(
        r.t.bytes_out < flood.len() as u64,
        "the node's turn ended early"
    );
    assert!(
        flag.0.load(std::sync::atomic::Ordering::SeqCst),
        "and the task polls again"
    );
    let mut got = drain(&mut r.client);
    while got.len() < flood.len() {
        // Yielding renews the task's cooperative budget, which the in-memory reads spend.
        tokio::task::yield_now().await;
        let _ = r.pump();
        got.extend(drain(&mut r.client));
    }
    assert_eq!(got, flood);
}
