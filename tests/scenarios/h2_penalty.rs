//! The per-source cost of reconnecting HTTP/2 abusers (SPEC section 4): past two
//! connections ended for abuse, an address's next connections are held before they are read
//! (100 ms after the third strike, doubling per strike); other addresses are never held, and an
//! honest client that cancels many streams is never struck.

use std::net::IpAddr;
use std::time::Duration;

use integration_tests::h2raw::{self, *};
use integration_tests::{Gateway, Mock};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

const TCP_HEALTH: &str =
    "[health]\nkind = \"tcp\"\ninterval = \"200ms\"\ntimeout = \"500ms\"\nslow_start = \"0s\"\n";

async fn setup() -> (Mock, Gateway) {
    Gateway::one_node_after(TCP_HEALTH).await
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("test address")
}

fn addr(gw: &Gateway) -> String {
    format!("127.0.0.1:{}", gw.port)
}

/// A PING flood from `src` until the gateway's GOAWAY(ENHANCE_YOUR_CALM) and close.
async fn ping_flood_from(gw: &Gateway, src: IpAddr) {
    let (mut rd, wr) = h2raw::connect_from(&addr(gw), src).await;
    let writer = flood(wr, frame(PING, 0, 0, &[0; 8]).repeat(20_000));
    let mut seen = Vec::new();
    let g = rd
        .goaway(Instant::now() + Duration::from_secs(15), &mut seen)
        .await
        .expect("GOAWAY for the PING flood");
    assert_eq!(g.code, ENHANCE_YOUR_CALM, "{g:?}");
    assert!(
        rd.wait_closed(Instant::now() + Duration::from_secs(3))
            .await
    );
    let _ = writer.await;
}

/// A GET of `/data` on a fresh connection from `src`: the time until its `:status 200`.
async fn timed_get_from(gw: &Gateway, src: IpAddr) -> Duration {
    let started = Instant::now();
    let (mut rd, mut wr) = h2raw::connect_from(&addr(gw), src).await;
    wr.write_all(&frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        1,
        &hb("GET", "/data"),
    ))
    .await
    .expect("write");
    let deadline = Instant::now() + Duration::from_secs(15);
    while let Some(f) = rd.next(deadline).await {
        assert_ne!(f.kind, GOAWAY, "GOAWAY for an honest GET from {src}");
        if f.kind == HEADERS && f.stream == 1 {
            assert_eq!(f.payload.first(), Some(&0x88), ":status 200 (indexed)");
            return started.elapsed();
        }
    }
    panic!("no answer to the GET from {src}");
}

/// Gateway log lines saying a connection from `src` was held.
fn holds_of(gw: &Gateway, src: &str) -> Vec<String> {
    let needle = format!("source={src} ");
    gw.logs
        .lines()
        .into_iter()
        .filter(|l| l.contains("held before it is read") && l.contains(&needle))
        .collect()
}

/// Seven PING floods from 127.0.0.2 (strikes 1-7): its next connection is held (the seventh
/// strike costs 1.6 s) and still served; no connection of it was held before its third strike; a
/// connection from 127.0.0.1 at the same time is not held.
#[tokio::test]
async fn a_reconnecting_abuser_is_held_and_other_addresses_are_not() {
    let (_a, gw) = setup().await;
    let abuser = ip("127.0.0.2");
    for _ in 0..7 {
        ping_flood_from(&gw, abuser).await;
    }
    let other = timed_get_from(&gw, ip("127.0.0.1")).await;
    let held = timed_get_from(&gw, abuser).await;
    assert!(holds_of(&gw, "127.0.0.1").is_empty(), "127.0.0.1 was held");
    let lines = holds_of(&gw, "127.0.0.2");
    let last = lines.last().expect("the abuser's GET was held");
    assert!(last.contains("strikes=7"), "{last}");
    for l in &lines {
        assert!(
            !l.contains("strikes=1 ") && !l.contains("strikes=2 "),
            "held before the third strike: {l}"
        );
    }
    assert!(
        held >= Duration::from_millis(400),
        "held {held:?} (other address: {other:?})"
    );
    assert_eq!(
        gw.metric("gateway_h2_goaway_sent_total{reason=\"too_many_control_frames\"}")
            .await,
        7.0
    );
}

/// An honest client on 127.0.0.3 that cancels 150 streams, each once its answer started (150
/// resets, below the burst of 200), on each of four connections is never cut, never struck, and
/// never held.
#[tokio::test]
async fn an_honest_canceller_is_never_penalised() {
    let (_a, gw) = setup().await;
    let src = ip("127.0.0.3");
    let block = hb("GET", "/data");
    for _ in 0..4 {
        let (mut rd, mut wr) = h2raw::connect_from(&addr(&gw), src).await;
        for i in 0..150u32 {
            let n = 2 * i + 1;
            wr.write_all(&frame(HEADERS, END_STREAM | END_HEADERS, n, &block))
                .await
                .expect("the connection stays open");
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let f = rd.next(deadline).await.expect("an answer to each stream");
                assert_ne!(f.kind, GOAWAY, "honest canceller got GOAWAY: {f:?}");
                if f.kind == HEADERS && f.stream == n {
                    break;
                }
            }
            wr.write_all(&frame(RST_STREAM, 0, n, &CANCEL.to_be_bytes()))
                .await
                .expect("the connection stays open");
        }
    }
    timed_get_from(&gw, src).await;
    assert!(
        holds_of(&gw, "127.0.0.3").is_empty(),
        "the honest canceller was held"
    );
    assert_eq!(
        gw.metric_series("gateway_h2_goaway_sent_total{").await.0,
        0.0,
        "no connection ended for abuse"
    );
}
