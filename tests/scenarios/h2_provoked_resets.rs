//! Resets the gateway is made to send (CASE-35, "MadeYouReset", CVE-2025-8671; SPEC section 4
//! "HTTP/2 abuse"; RFC 9113 sections 5.1, 5.3.1, 5.4, 6.3, 6.9): a complete request followed by
//! one frame that is a stream error gets one reset (or a connection error) and its node request
//! is aborted; a flood of them is cut with GOAWAY after a bounded number of resets, and node-a is
//! left holding nothing.

use std::time::Duration;

use integration_tests::h2raw::{self, *};
use integration_tests::load::prober;
use integration_tests::recorder::{path_and_length, single, Reply, Req};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

/// node-a holds `GET /slow` for 10 s unless the gateway aborts it.
fn holds_slow(r: &Req) -> Reply {
    match r.path() {
        "/slow" => Reply::ok("slow").after(Duration::from_secs(10)),
        _ => path_and_length(r),
    }
}

/// The provocations a–e on stream `n` with the error code RFC 9113 gives each.
fn provocations(n: u32) -> [(&'static str, Vec<u8>, u32); 5] {
    [
        (
            "a",
            frame(WINDOW_UPDATE, 0, n, &0u32.to_be_bytes()),
            PROTOCOL_ERROR,
        ),
        (
            "b",
            frame(WINDOW_UPDATE, 0, n, &0x7fff_ffffu32.to_be_bytes()),
            FLOW_CONTROL_ERROR,
        ),
        ("c", frame(DATA, 0, n, b"x"), STREAM_CLOSED),
        (
            "d",
            frame(PRIORITY, 0, n, &[0, 0, 0, 0, 0x0f, 0]),
            FRAME_SIZE_ERROR,
        ),
        (
            "e",
            frame(
                PRIORITY,
                0,
                n,
                &[n.to_be_bytes().as_slice(), &[0x0f]].concat(),
            ),
            PROTOCOL_ERROR,
        ),
    ]
}

/// The opener of stream `n`: `HEADERS(END_STREAM|END_HEADERS) HB(GET /slow)`.
fn opener(n: u32) -> Vec<u8> {
    frame(HEADERS, END_STREAM | END_HEADERS, n, &hb("GET", "/slow"))
}

/// CASE-35 single: each provocation, written once node-a holds the request, gets exactly one
/// RST_STREAM with the RFC's code on stream 1 (or GOAWAY with that code or PROTOCOL_ERROR), no
/// 2xx, and node-a's request is aborted within 2 s.
#[tokio::test]
async fn case_35_single_provoked_reset_aborts_the_node_request() {
    let (a, gw) = single(holds_slow).await;
    for (case, provocation, code) in provocations(1) {
        let (mut rd, mut wr) = h2raw::connect(&format!("127.0.0.1:{}", gw.port)).await;
        wr.write_all(&opener(1)).await.expect("write");
        a.wait(Duration::from_secs(5), "node-a holds /slow", |_| {
            a.holding() == 1
        })
        .await;
        let provoked = Instant::now();
        wr.write_all(&provocation).await.expect("write");
        let end = rd.stream_end(1, provoked + Duration::from_secs(3)).await;
        match &end {
            StreamEnd::Reset {
                status: None,
                code: got,
            } => {
                assert_eq!(*got, code, "{case}: {end:?}");
                // A PING's ACK comes after every frame the gateway wrote before it: no second reset.
                wr.write_all(&frame(PING, 0, 0, b"synchro!"))
                    .await
                    .expect("write");
                loop {
                    let f = rd
                        .next(Instant::now() + Duration::from_secs(3))
                        .await
                        .expect("PING ACK");
                    assert!(
                        f.kind != RST_STREAM && f.kind != HEADERS,
                        "{case}: after the reset: {f:?}"
                    );
                    if f.kind == PING {
                        break;
                    }
                }
            }
            StreamEnd::GoAway {
                status: None,
                goaway,
            } => {
                assert!(
                    [code, PROTOCOL_ERROR].contains(&goaway.code),
                    "{case}: {end:?}"
                );
            }
            other => panic!("{case}: {other:?}"),
        }
        a.wait(Duration::from_secs(2), "node-a's /slow aborted", |_| {
            a.holding() == 0
        })
        .await;
        assert!(
            provoked.elapsed() < Duration::from_secs(2) + Duration::from_millis(200),
            "{case}"
        );
    }
}

/// CASE-35 flood: 10,000 streams, each opened and provoked in one write that the client does not
/// read while writing, are cut off within 3 s by GOAWAY after at most 2,000 resets (at most one a
/// stream); node-a receives at most 2,100 requests and holds none 3 s after the cut; another
/// client's requests keep answering within 1.1 s.
#[tokio::test]
async fn case_35_flood_of_provoked_resets_is_cut_and_spares_the_node() {
    let (a, gw) = single(holds_slow).await;
    let (stop, probing) = prober(&gw);
    for (i, (case, _, code)) in provocations(1).into_iter().enumerate() {
        let (mut rd, wr) = h2raw::connect(&format!("127.0.0.1:{}", gw.port)).await;
        let bytes: Vec<u8> = (0..10_000u32)
            .flat_map(|k| {
                let n = 2 * k + 1;
                let mut b = opener(n);
                b.extend(provocations(n).into_iter().nth(i).expect("case").1);
                b
            })
            .collect();
        let started = Instant::now();
        let _ = tokio::time::timeout(Duration::from_secs(3), flood(wr, bytes)).await;
        let mut seen = Vec::new();
        let g = rd
            .goaway(started + Duration::from_secs(3), &mut seen)
            .await
            .unwrap_or_else(|| panic!("{case}: not cut within 3 s"));
        let resets: Vec<u32> = seen
            .iter()
            .filter(|f| f.kind == RST_STREAM)
            .map(|f| f.stream)
            .collect();
        // Cut after a bounded number of resets, or at the first provocation as a connection error.
        let allowed = if resets.is_empty() {
            vec![code, ENHANCE_YOUR_CALM, PROTOCOL_ERROR]
        } else {
            vec![ENHANCE_YOUR_CALM, PROTOCOL_ERROR]
        };
        assert!(
            allowed.contains(&g.code),
            "{case}: {g:?} after {} resets",
            resets.len()
        );
        assert!(resets.len() <= 2_000, "{case}: {} resets", resets.len());
        let mut unique = resets.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), resets.len(), "{case}: a stream reset twice");
        assert!(
            !seen
                .iter()
                .any(|f| f.kind == HEADERS && status(&f.payload).is_some_and(|s| s < 300)),
            "{case}: a 2xx"
        );
        assert!(
            rd.wait_closed(Instant::now() + Duration::from_secs(3))
                .await,
            "{case}: left open"
        );
        a.wait(Duration::from_secs(3), "node-a holds nothing", |_| {
            a.holding() == 0
        })
        .await;
        let slow = a.paths().iter().filter(|p| *p == "/slow").count();
        eprintln!(
            "{case}: {} resets, GOAWAY {g:?}, node-a got {slow} /slow so far",
            resets.len()
        );
        assert!(
            slow <= (i + 1) * 2_100,
            "{case}: node-a got {slow} requests"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (n, bad, slowest) = probing.await.expect("prober");
    assert!(
        bad.is_empty() && slowest < Duration::from_millis(1100),
        "{n} probes, {bad:?}, slowest {slowest:?}"
    );
}
