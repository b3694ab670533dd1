//! Unit tests of [`super`].

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::proxy::downstream::h2::frames::tests::frame;

#[tokio::test]
async fn ping_flood_gets_goaway_and_plain_bytes_pass() {
    let (client, server) = tokio::io::duplex(1 << 20);
    let tripped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let t = tripped.clone();
    let mut w = H2Watch::new(
        server,
        200,
        Duration::from_secs(10),
        Arc::new(move |_| t.store(true, std::sync::atomic::Ordering::SeqCst)),
    );
    let (mut cr, mut cw) = tokio::io::split(client);
    let mut flood = PREFACE.to_vec();
    for _ in 0..2000 {
        flood.extend(frame(6, 0, 0, &[0; 8]));
    }
    cw.write_all(&flood).await.expect("test value");
    let mut sink = vec![0; 1 << 16];
    let err = loop {
        match w.read(&mut sink).await {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind(), io::ErrorKind::ConnectionAborted);
    assert!(tripped.load(std::sync::atomic::Ordering::SeqCst));
    let mut got = Vec::new();
    cr.read_to_end(&mut got).await.expect("test value");
    assert_eq!(
        got,
        goaway(0, ENHANCE_YOUR_CALM, b"too_many_control_frames")
    );

    let (mut client, server) = tokio::io::duplex(1024);
    let mut w = H2Watch::new(server, 200, Duration::from_secs(10), Arc::new(|_| {}));
    client
        .write_all(b"GET / HTTP/1.1\r\n\r\n")
        .await
        .expect("test value");
    let mut b = [0u8; 18];
    w.read_exact(&mut b).await.expect("test value");
    assert_eq!(&b, b"GET / HTTP/1.1\r\n\r\n");
}

/// A connection from an address past its free strikes is held before its first read, then
/// served; one from another address is read at once.
#[tokio::test]
async fn a_struck_source_is_held_before_its_first_read() {
    let bad: IpAddr = "10.99.0.1".parse().expect("test value");
    let good: IpAddr = "10.99.0.2".parse().expect("test value");
    for _ in 0..3 {
        SOURCES.strike(bad, Instant::now());
    }
    let read_one = |ip: IpAddr| async move {
        let (mut client, server) = tokio::io::duplex(1024);
        let mut w =
            H2Watch::new(server, 200, Duration::from_secs(10), Arc::new(|_| {})).from_source(ip);
        client.write_all(b"G").await.expect("test value");
        let started = Instant::now();
        let mut b = [0u8; 1];
        w.read_exact(&mut b).await.expect("served after the hold");
        started.elapsed()
    };
    let held = read_one(bad).await;
    assert!(held >= Duration::from_millis(50), "held only {held:?}");
    let free = read_one(good).await;
    assert!(free < held, "{free:?} vs {held:?}");
}
